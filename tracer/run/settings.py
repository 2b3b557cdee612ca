"""How a generation runs: a frozen, typed `GenerationSettings`, checked once, in its constructor.

The CLI builds it from its options before anything loads, `Model.generate` from its keyword
arguments, a scenario from its `[generate]` table, and loading a trace file from the file's
`settings`; everything downstream (the loop, the renderers) reads its fields and never checks
them again. Core module: standard library only.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

from ..errors import TracerError

STOPPED = ("max_new_tokens", "end_token", "stop_string")  # why a generation stopped


class SettingError(TracerError):
    """A generation setting that cannot be used: `field` names it, `problem` says what is wrong."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field.replace('_', '-')} {problem}")
        self.field, self.problem = field, problem


def _number(x) -> float | None:
    if isinstance(x, bool):
        return None
    try:
        return float(x)
    except (TypeError, ValueError, OverflowError):
        return None


def whole(x) -> int | None:
    """x as an int when it is a whole number (5, 5.0, numpy integers), else None. An int is taken as
    it is, never through a float (which rounds above 2⁵³: 9007199254740993 would become …992)."""
    if isinstance(x, bool):
        return None
    try:
        return operator.index(x)  # int, numpy integers: exact
    except TypeError:
        pass
    if isinstance(x, str) and len(x) <= 100:
        try:
            return int(x)
        except ValueError:
            pass
    v = _number(x)
    if v is None or not math.isfinite(v) or int(v) != v:
        return None
    return int(v)


def check_seed(seed) -> int:
    """Seeds are whole numbers ≥ 0 (numpy's generators take no negative seed)."""
    s = whole(seed)
    if s is None or s < 0:
        raise SettingError("seed", f"must be a whole number ≥ 0, got {seed!r}")
    return s


@dataclass(frozen=True)
class GenerationSettings:
    max_new_tokens: int = 1  # tokens to generate after the prompt (0: only predict the next one)
    temperature: float = 0.0  # 0 is greedy (the most likely token, no draw)
    top_k: int | None = None  # keep the k most likely tokens before the draw
    top_p: float | None = None  # keep the most likely tokens whose probabilities reach p, in (0, 1]
    seed: int = 0  # the sampling draw's seed (numpy's PCG64: the same draw on every machine)
    cache: bool = True  # reuse earlier positions' keys and values (KV cache)
    stop: tuple = field(default_factory=tuple)  # stop once the generated text contains one of these

    def __post_init__(self) -> None:
        n = whole(self.max_new_tokens)
        if n is None or n < 0:
            raise SettingError("max_new_tokens", f"must be a whole number ≥ 0, got {self.max_new_tokens!r}")
        t = _number(self.temperature)
        if t is None or not math.isfinite(t) or t < 0:
            raise SettingError("temperature", f"must be a number ≥ 0 (0 is greedy), got {self.temperature!r}")
        k = whole(self.top_k) if self.top_k is not None else 1
        if k is None or k < 1:
            raise SettingError("top_k", f"must be a whole number ≥ 1, got {self.top_k!r}")
        p = _number(self.top_p) if self.top_p is not None else 1.0
        if p is None or not (0 < p <= 1):
            raise SettingError("top_p", f"must be in (0, 1], got {self.top_p!r}")
        seed = check_seed(self.seed)
        if not isinstance(self.cache, bool):
            raise SettingError("cache", f"must be true or false, got {self.cache!r}")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if not all(isinstance(s, str) for s in stop):
            raise SettingError("stop", f"must be a string or a list of strings, got {self.stop!r}")
        set_ = object.__setattr__
        set_(self, "max_new_tokens", n)
        set_(self, "temperature", float(t))
        set_(self, "top_k", None if self.top_k is None else k)
        set_(self, "top_p", None if self.top_p is None else p)
        set_(self, "seed", seed)
        set_(self, "stop", tuple(stop))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        """As a trace file's `settings` (JSON), before `stopped`."""
        return {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature, "top_k": self.top_k,
                "top_p": self.top_p, "seed": self.seed, "cache": self.cache, "stop": list(self.stop)}

    @classmethod
    def from_dict(cls, d: dict) -> tuple["GenerationSettings", str | None]:
        """A trace file's `settings`: the settings, and why the generation stopped (None if unsaid)."""
        if not isinstance(d, dict):
            raise TracerError(f"settings must be a table, got {type(d).__name__}")
        known = {f for f in cls.__dataclass_fields__} | {"stopped"}
        unknown = [k for k in d if k not in known]
        if unknown:
            raise TracerError(f"settings: unknown key {unknown[0]!r}")
        stopped = d.get("stopped")
        if stopped is not None and stopped not in STOPPED:
            raise TracerError(f"settings: stopped must be one of {', '.join(STOPPED)}, got {stopped!r}")
        if isinstance(d.get("stop"), str):
            raise TracerError("settings: stop must be a list of strings")
        for key in ("max_new_tokens", "seed", "top_k"):
            if isinstance(d.get(key), float):  # written by tracer as a whole number
                raise TracerError(f"settings: {key} must be a whole number, got {d[key]!r}")
        return cls(**{k: v for k, v in d.items() if k != "stopped"}), stopped
