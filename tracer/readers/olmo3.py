"""OLMo 3 folders (`model_type` olmo3) → a `Checkpoint`: OLMo 2's block (`tracer.readers.olmo2`: norms after the
sublayers, Q and K normalized whole) with a sliding window on the layers `layer_types` marks (three of every
four in the released models) and RoPE settings per kind of layer: the full layers' (YaRN in the released
models) and the sliding layers' own (plain RoPE of the same base). Its tensors are OLMo 2's.
Core module: numpy and the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..core.config import Config
from ..errors import TracerError
from . import llama, olmo2
from .checkpoint import Checkpoint
from .folder import number, whole

FAMILIES = ("olmo3",)


def config_of(raw: dict, where: Path) -> Config:
    n_layers = whole(raw, "num_hidden_layers", where)
    llama.check_layer_count(n_layers, where)
    types = raw.get("layer_types") or ["full_attention"] * n_layers
    llama.check_layer_types(types, n_layers, where)
    params = raw.get("rope_parameters")
    local_theta = None
    plain = {k: v for k, v in raw.items() if k not in ("layer_types", "rope_parameters", "rope_scaling")}
    if isinstance(params, dict) and isinstance(params.get("full_attention"), dict):  # per kind of layer (transformers 5)
        plain["rope_parameters"] = params["full_attention"]
        local = params.get("sliding_attention") or params["full_attention"]
        if not isinstance(local, dict) or local.get("rope_type", "default") != "default":
            raise TracerError(f"{where}: RoPE scaling of the sliding layers {str(local)[:80]} is not supported")
        local_theta = number(local, "rope_theta", where, 10000.0)
    elif params is not None:
        plain["rope_parameters"] = params
    elif raw.get("rope_scaling") is not None:
        plain["rope_scaling"] = raw["rope_scaling"]
    window = whole(raw, "sliding_window", where) if "sliding_attention" in types else None
    local_layers = tuple(l for l, t in enumerate(types) if t == "sliding_attention")
    if local_theta is None and window:  # one set of RoPE settings for every layer: the sliding layers' too
        scaling = plain.get("rope_parameters") or plain.get("rope_scaling") or {}
        if scaling.get("rope_type", scaling.get("type", "default")) != "default":
            raise TracerError(f"{where}: one RoPE scaling for the sliding and the full layers is not what OLMo 3 "
                              f"computes; give rope_parameters per layer type")
    return llama.config_of({**plain, "model_type": "olmo2"}, where, ("olmo2",), norm_place="after", qk_norm="whole",
                           sliding_window=window, windowed=local_layers if window else None,
                           rope_local_theta=local_theta if window else None)


hf_shapes, translate, file_names = olmo2.hf_shapes, olmo2.translate, olmo2.file_names


def read(folder: Path, raw: dict, name: str | None = None, progress=None) -> Checkpoint:
    return llama.read(folder, raw, name, progress, family=sys.modules[__name__])
