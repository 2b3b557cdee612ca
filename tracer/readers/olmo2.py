"""OLMo 2 folders (`model_type` olmo2) → a `Checkpoint`: the Llama block (`tracer.readers.llama`) with
its norms moved after the sublayers and an RMS norm over all of Q and all of K.

OLMo 2 normalizes attention's output and the MLP's output before the residual stream adds them
(`config.norm_place = "after"`), and has no norm before either; and it normalizes each position's
whole Q projection (all heads at once) and whole K projection before they are cut into heads and
rotated (`config.qk_norm = "whole"`). Its tensors, renamed:

    layers.{l}.post_attention_layernorm → blocks.{l}.ln1_post.w   (not ln2: it normalizes attention's output)
    layers.{l}.post_feedforward_layernorm → blocks.{l}.ln2_post.w
    layers.{l}.self_attn.q_norm [head·d_head] → blocks.{l}.attn.q_norm.w   k_norm [kv_head·d_head] → attn.k_norm.w

and no `input_layernorm`. Everything else is read as `tracer.readers.llama` reads it (a GGUF file of
architecture `olmo2` as `tracer.readers.gguf` renames it: `post_attention_norm`, `post_ffw_norm`,
`attn_q_norm`, `attn_k_norm`). Core module: numpy and the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..core.config import Config
from . import llama
from .checkpoint import Checkpoint

FAMILIES = ("olmo2",)
# TransformerLens name (after `blocks.{l}.`) → transformers' (after `model.layers.{l}.`)
NAMES = {"ln1_post.w": "post_attention_layernorm.weight", "ln2_post.w": "post_feedforward_layernorm.weight",
         "attn.q_norm.w": "self_attn.q_norm.weight", "attn.k_norm.w": "self_attn.k_norm.weight"}


def config_of(raw: dict, where: Path) -> Config:
    return llama.config_of(raw, where, FAMILIES, norm_place="after", qk_norm="whole")


def hf_shapes(cfg: Config, raw: dict, where: Path) -> dict[str, tuple[int, ...]]:
    shapes = llama.hf_shapes(cfg, raw, where)
    widths = {"ln1_post.w": cfg.d_model, "ln2_post.w": cfg.d_model, "attn.q_norm.w": cfg.n_heads * cfg.d_head,
              "attn.k_norm.w": cfg.kv_heads * cfg.d_head}
    for l in range(cfg.n_layers):
        p = f"{llama.PREFIX}layers.{l}."
        del shapes[p + "input_layernorm.weight"]
        shapes.update({p + hf: (widths[tl],) for tl, hf in NAMES.items()})
    return shapes


def translate(cfg: Config, t: dict[str, np.ndarray]) -> tuple[dict, list]:
    params, fused = llama.translate(cfg, t)
    for l in range(cfg.n_layers):
        del params[f"blocks.{l}.ln2.w"]  # llama's name for post_attention_layernorm: here it is ln1_post
    params.update({tl: t[hf] for tl, hf in llama.layer_names(cfg, NAMES).items()})
    return params, fused


def file_names(cfg: Config) -> dict[str, str]:
    out = {k: v for k, v in llama.file_names(cfg).items() if not k.endswith(("ln1.w", "ln2.w"))}
    out.update(llama.layer_names(cfg, NAMES))
    return out


def read(folder: Path, raw: dict, name: str | None = None, progress=None) -> Checkpoint:
    return llama.read(folder, raw, name, progress, family=sys.modules[__name__])
