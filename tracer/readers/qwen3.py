"""Qwen3 folders (`model_type` qwen3) → a `Checkpoint`: the Llama block (`tracer.readers.llama`) with
each head's Q and K normalized before the rotation.

Qwen3 differs from Qwen2 in three places: Q/K/V have no biases (unless `attention_bias`), a
`head_dim` that need not be hidden_size / num_attention_heads, and an RMS norm on each head's Q
and K (`config.qk_norm = "per_head"`, `tracer.core.blocks.QK_NORMS`), whose gains are two more tensors
per layer:

    layers.{l}.self_attn.q_norm [head_dim] → blocks.{l}.attn.q_norm.w
    layers.{l}.self_attn.k_norm [head_dim] → blocks.{l}.attn.k_norm.w

Everything else is read as `tracer.readers.llama` reads it (and a GGUF file of architecture `qwen3`
as `tracer.readers.gguf` renames it: `blk.{l}.attn_q_norm`, `blk.{l}.attn_k_norm`). Core module:
numpy and the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..core.config import Config
from ..errors import TracerError
from . import llama
from .checkpoint import Checkpoint

FAMILIES = ("qwen3",)
QK_NORMS = {"attn.q_norm.w": "self_attn.q_norm.weight", "attn.k_norm.w": "self_attn.k_norm.weight"}


def config_of(raw: dict, where: Path) -> Config:
    if raw.get("head_dim") is None:
        raise TracerError(f"{where}: 'head_dim' is missing (every Qwen3 config.json gives it)")
    return llama.config_of(raw, where, FAMILIES, qk_norm="per_head")


def hf_shapes(cfg: Config, raw: dict, where: Path) -> dict[str, tuple[int, ...]]:
    shapes = llama.hf_shapes(cfg, raw, where)
    for l in range(cfg.n_layers):
        shapes.update({f"{llama.PREFIX}layers.{l}.{hf}": (cfg.d_head,) for hf in QK_NORMS.values()})
    return shapes


translate, file_names = llama.adding(QK_NORMS)


def read(folder: Path, raw: dict, name: str | None = None, progress=None) -> Checkpoint:
    return llama.read(folder, raw, name, progress, family=sys.modules[__name__])
