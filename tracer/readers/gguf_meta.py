"""Reading a GGUF file's metadata values, checked, for the GGUF reader and its per-architecture modules
(`tracer.readers.gguf`, `gguf_gemma`, `gguf_qwen35`, `gguf_olmo3`): a whole number or a number under
its key, and each layer's attention kind as llama.cpp's `set_swa_pattern` decides it. Every bad value is
a one-line error naming the key. Core module: numpy and the standard library.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import TracerError
from .llama import check_layer_count


def meta_value(meta: dict, key: str, where: Path, kind=int, default=None):
    """A metadata value of the right kind (a whole number, a number), or `default` when absent."""
    value = meta.get(key, default)
    if value is None:
        raise TracerError(f"{where}: metadata {key!r} is missing (every {key.split('.')[0]} GGUF file has it)")
    ok = (isinstance(value, (int, np.integer)) and not isinstance(value, bool)) if kind is int else (
        isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool))
    if not ok:
        raise TracerError(f"{where}: metadata {key!r} must be a {'whole number' if kind is int else 'number'}, got {value!r}")
    return int(value) if kind is int else float(value)


def at_least(meta: dict, key: str, where: Path, least: int, default=None, why: str = "") -> int:
    """A whole number ≥ `least` under `key` (`default` when absent), or a one-line error saying `why`."""
    value = meta_value(meta, key, where, int, default)
    if value < least:
        raise TracerError(f"{where}: metadata {key!r} must be a whole number ≥ {least}{why}, got {value}")
    return value


def flags(meta: dict, key: str, n_layers: int, where: Path) -> list[bool] | None:
    """One true/false per layer under `key` (None when absent), or a one-line error."""
    given = meta.get(key)
    if given is None:
        return None
    given = given.tolist() if isinstance(given, np.ndarray) else given  # (an array's values come as numpy's)
    if not isinstance(given, (list, tuple)) or len(given) != n_layers or not all(isinstance(v, (bool, np.bool_))
                                                                                 for v in given):
        got = f"{len(given)} values" if isinstance(given, (list, tuple)) and len(given) != n_layers else repr(given)[:60]
        raise TracerError(f"{where}: metadata {key!r} must be one true/false per layer ({n_layers}), got {got}")
    return [bool(v) for v in given]


def layer_types_of(meta: dict, a: str, n_layers: int, period: int, where: Path) -> list[str]:
    """Each layer's attention, as llama.cpp's `set_swa_pattern` decides it: the file's
    `{arch}.attention.sliding_window_pattern` (a period, or one true/false per layer), else `period`."""
    key = f"{a}.attention.sliding_window_pattern"
    check_layer_count(n_layers, where, f"metadata '{a}.block_count'")
    given = meta.get(key, period)
    if isinstance(given, (list, tuple, np.ndarray)):
        local = flags(meta, key, n_layers, where)
    elif isinstance(given, (int, np.integer)) and not isinstance(given, bool) and given >= 0:
        local = [given == 0 or l % given < given - 1 for l in range(n_layers)]
    else:
        raise TracerError(f"{where}: metadata {key!r} must be a whole number ≥ 0 or a list of true/false, got {given!r}")
    return ["sliding_attention" if s else "full_attention" for s in local]


def soft_cap(meta: dict, key: str, default, where: Path) -> float:
    """A soft-cap from the metadata (`default` when absent): a number > 0, or a one-line error."""
    value = meta_value(meta, key, where, float, default)
    if not 0 < value < float("inf"):
        raise TracerError(f"{where}: metadata {key!r} must be a number > 0 (the soft-cap cap · tanh(s / cap)), got {value:g}")
    return value
