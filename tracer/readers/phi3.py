"""Phi-3 folders (`model_type` phi3) → a `Checkpoint`: the Llama block (`tracer.readers.llama`), its
fused tensors split once, here.

Phi-3 stores Q, K and V as one matrix and the MLP's gate and up projections as another:

    layers.{l}.self_attn.qkv_proj [(head + 2·kv_head)·d_head, d_model]
        → rows [0, head·d_head) q_proj, then kv_head·d_head rows of k_proj, then v_proj's
    layers.{l}.mlp.gate_up_proj [2·d_mlp, d_model] → rows [0, d_mlp) gate_proj, the rest up_proj

(row slices: views), then every tensor is read as `tracer.readers.llama` reads Llama's (W_Q, W_K,
W_V land in the fused [W_Q | W_K | W_V] the decoder multiplies by). Phi-3's long-context RoPE
scalings (`longrope`, called `su` in early checkpoints: a factor per frequency) and a partial rotary
(`partial_rotary_factor` < 1: Phi-4-mini) are refused with a one-line error before any weight is
read; its sliding window applies to every layer, as Mistral's does. A GGUF file of architecture
`phi3` is renamed by `tracer.readers.gguf` (`attn_qkv`, `ffn_up` holding gate and up). Core module:
numpy and the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..core.config import Config
from ..errors import TracerError
from . import llama
from .checkpoint import Checkpoint

FAMILIES = ("phi3",)
QKV, GATE_UP = "self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight"
SPLIT = {"self_attn.q_proj.weight": QKV, "self_attn.k_proj.weight": QKV, "self_attn.v_proj.weight": QKV,
         "mlp.gate_proj.weight": GATE_UP, "mlp.up_proj.weight": GATE_UP}


def config_of(raw: dict, where: Path) -> Config:
    scaling = raw.get("rope_scaling") or raw.get("rope_parameters") or {}
    kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else None
    if kind in ("longrope", "su"):
        raise TracerError(f"{where}: RoPE scaling {kind!r} (Phi-3's long-context factors per frequency) is not supported; "
                          f"tracer computes plain RoPE (the 4k-context Phi-3 checkpoints)")
    params = raw.get("rope_parameters") if isinstance(raw.get("rope_parameters"), dict) else {}
    partial = params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))  # transformers 5's place, or 4's
    if partial != 1.0:
        raise TracerError(f"{where}: partial_rotary_factor {partial!r} is not supported; tracer rotates all of each "
                          f"head's dimensions (1.0)")
    return llama.config_of(raw, where, FAMILIES)


def hf_shapes(cfg: Config, raw: dict, where: Path) -> dict[str, tuple[int, ...]]:
    shapes = llama.hf_shapes(cfg, raw, where)
    for l in range(cfg.n_layers):
        p = f"{llama.PREFIX}layers.{l}."
        for part in SPLIT:
            shapes.pop(p + part)
        shapes[p + QKV] = (cfg.qkv_width, cfg.d_model)
        shapes[p + GATE_UP] = (2 * cfg.d_mlp, cfg.d_model)
    return shapes


def unfused(cfg: Config, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Phi-3's fused rows cut into Llama's q/k/v_proj and gate/up_proj (views, no copy)."""
    out = dict(t)
    q, k = cfg.n_heads * cfg.d_head, cfg.kv_heads * cfg.d_head
    for l in range(cfg.n_layers):
        p = f"{llama.PREFIX}layers.{l}."
        qkv, gate_up = out.pop(p + QKV), out.pop(p + GATE_UP)  # [(head + 2·kv_head)·d_head, d_model], [2·d_mlp, d_model]
        out[p + "self_attn.q_proj.weight"], out[p + "self_attn.k_proj.weight"] = qkv[:q], qkv[q : q + k]
        out[p + "self_attn.v_proj.weight"] = qkv[q + k :]
        out[p + "mlp.gate_proj.weight"], out[p + "mlp.up_proj.weight"] = gate_up[: cfg.d_mlp], gate_up[cfg.d_mlp :]
    return out


def translate(cfg: Config, t: dict[str, np.ndarray]) -> tuple[dict, list]:
    return llama.translate(cfg, unfused(cfg, t))


def file_names(cfg: Config) -> dict[str, str]:
    """TransformerLens name → the tensor it comes from: W_Q, W_K, W_V from qkv_proj, W_gate and W_in from gate_up_proj."""
    out = llama.file_names(cfg)
    for tl, hf in out.items():
        for part, fused in SPLIT.items():
            if hf.endswith(part):
                out[tl] = hf[: -len(part)] + fused
    return out


def split_params(cfg: Config) -> set[str]:
    """The parameters cut out of the fused tensors: each layer's W_Q, W_K, W_V, W_gate and W_in."""
    return {tl for tl, hf in file_names(cfg).items() if hf.endswith((QKV, GATE_UP))}


def read(folder: Path, raw: dict, name: str | None = None, progress=None) -> Checkpoint:
    return llama.read(folder, raw, name, progress, family=sys.modules[__name__])
