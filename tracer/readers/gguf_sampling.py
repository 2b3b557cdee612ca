"""A GGUF file's suggested sampling settings: the `general.sampling.*` keys, named as llama.cpp's
`src/llama-arch.cpp` names them (LLM_KV_GENERAL_SAMPLING_*), read as llama.cpp's `common` applies them
and turned into tracer's generation settings (`tracer.run.settings.SETTINGS`):

  general.sampling.temp            → temperature (0: greedy)
  general.sampling.top_k           → top_k (≤ 0: off)
  general.sampling.top_p           → top_p (1: off)
  general.sampling.min_p           → min_p (0: off)
  general.sampling.penalty_last_n  → penalty_last_n (−1: the whole context)
  general.sampling.penalty_repeat  → repetition_penalty (1: off)

The others (`sequence`, `xtc_probability`, `xtc_threshold`, `mirostat`, `mirostat_tau`, `mirostat_eta`)
name samplers tracer does not have: they are kept to be shown, never used. A value of the wrong type
(text where a number belongs, a fraction where a whole number does) or out of its range is refused in
one line naming the file and the key. Core module: the standard library only.
"""

from __future__ import annotations

import math

from ..errors import TracerError

PREFIX = "general.sampling."
WHOLE = ("INT8", "UINT8", "INT16", "UINT16", "INT32", "UINT32", "INT64", "UINT64")
NUMBER = WHOLE + ("FLOAT32", "FLOAT64")
# key after general.sampling. → (tracer's setting, whole number?, the least value, the greatest: None for none)
USED = {
    "temp": ("temperature", False, 0.0, None),
    "top_k": ("top_k", True, None, None),
    "top_p": ("top_p", False, 0.0, 1.0),
    "min_p": ("min_p", False, 0.0, 1.0),
    "penalty_last_n": ("penalty_last_n", True, -1, None),
    "penalty_repeat": ("repetition_penalty", False, 0.0, None),
}
UNUSED = {"sequence": "STRING", "xtc_probability": "NUMBER", "xtc_threshold": "NUMBER", "mirostat": "WHOLE",
          "mirostat_tau": "NUMBER", "mirostat_eta": "NUMBER"}


def _checked(key: str, value, kind: str, whole: bool, low, high, where: str):
    want = "a whole number" if whole else "a number"
    if kind not in (WHOLE if whole else NUMBER) or isinstance(value, bool):
        raise TracerError(f"{where}: {key} must be {want}, but the file holds a {kind.lower()} ({value!r:.40})")
    v = float(value)
    if not math.isfinite(v) or (low is not None and v < low) or (high is not None and v > high) or \
            (key.endswith(("top_p", "penalty_repeat")) and v <= 0):
        span = f"{low if low is not None else '−∞'} to {high if high is not None else '∞'}"
        raise TracerError(f"{where}: {key} is {value!r}, out of its range ({span}{', above 0' if v <= 0 else ''})")
    return int(value) if whole else v


def file_sampling(metadata: dict, types: dict, where: str) -> tuple[dict, dict]:
    """(tracer's settings the file suggests, {key: value} of the keys naming samplers tracer does not have)."""
    suggested, unused = {}, {}
    for key, value in metadata.items():
        if not key.startswith(PREFIX):
            continue
        short, kind = key[len(PREFIX):], types.get(key, "?")
        if short in USED:
            name, whole, low, high = USED[short]
            v = _checked(key, value, kind, whole, low, high, where)
            if name == "top_k":
                v = v if v > 0 else None
            elif name == "min_p":
                v = v if v > 0 else None
            elif name == "penalty_last_n":
                v = None if v == -1 else v
            suggested[name] = v
        elif short in UNUSED:
            want = UNUSED[short]
            if (want == "STRING") != (kind == "STRING") or (want == "WHOLE" and kind not in WHOLE) or \
                    (want != "STRING" and kind not in NUMBER):
                raise TracerError(f"{where}: {key} must be {'text' if want == 'STRING' else 'a number'}, but the file "
                                  f"holds a {kind.lower()}")
            unused[key] = value
    return suggested, unused
