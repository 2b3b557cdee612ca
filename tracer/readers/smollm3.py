"""SmolLM3 folders (`model_type` smollm3) → a `Checkpoint`: the Llama block (`tracer.readers.llama`) with some
layers that leave out rotary positions (NoPE): `no_rope_layers` says, per layer, 1 (rotate Q and K) or 0
(do not; `Config.nope_layers`), every fourth layer in the released models (`no_rope_layer_interval`). Its
tensors are Llama's. Core module: numpy and the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..core.config import Config
from ..errors import TracerError
from . import llama
from .checkpoint import Checkpoint
from .folder import whole

FAMILIES = ("smollm3",)


def config_of(raw: dict, where: Path) -> Config:
    n_layers = whole(raw, "num_hidden_layers", where)
    llama.check_layer_count(n_layers, where)
    flags = raw.get("no_rope_layers")
    if flags is None:
        every = whole(raw, "no_rope_layer_interval", where, 4)
        flags = [int((l + 1) % every != 0) for l in range(n_layers)]
    if not isinstance(flags, list) or len(flags) != n_layers or any(f not in (0, 1) or isinstance(f, bool) for f in flags):
        raise TracerError(f"{where}: 'no_rope_layers' must give 1 (rotary) or 0 (none) for each of the {n_layers} "
                          f"layers, got {str(flags)[:80]}")
    nope = tuple(l for l, f in enumerate(flags) if f == 0)
    plain = {**raw, "model_type": "llama", "sliding_window": None}
    if raw.get("use_sliding_window") and raw.get("sliding_window") is not None:
        raise TracerError(f"{where}: SmolLM3's sliding window (use_sliding_window) is not supported")
    return llama.config_of(plain, where, ("llama",), nope_layers=nope or None)


hf_shapes, translate, file_names = llama.hf_shapes, llama.translate, llama.file_names


def read(folder: Path, raw: dict, name: str | None = None, progress=None) -> Checkpoint:
    return llama.read(folder, raw, name, progress, family=sys.modules[__name__])
