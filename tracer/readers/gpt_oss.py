"""gpt-oss folders (`model_type` gpt_oss) → a `Checkpoint`: the Llama block (`tracer.readers.llama`)
with attention sinks, biases on Q, K, V and O, alternating sliding-window and full layers, YaRN, and
routed experts (`tracer.core.experts`) in place of the dense MLP:

    layers.{l}.self_attn.sinks [head]                      → blocks.{l}.attn.sinks
    layers.{l}.mlp.router.weight [expert, d_model], .bias  → mlp.W_router [d_model, expert], mlp.b_router
    layers.{l}.mlp.experts.gate_up_proj [expert, d_model, 2·d_mlp] (gate and up interleaved: columns 0, 2, 4, …
        are the gate's, 1, 3, 5, … up's, as transformers' `_apply_gate` cuts them)
                                                           → mlp.W_gate, mlp.W_in [expert, d_model, d_mlp] (views)
    layers.{l}.mlp.experts.gate_up_proj_bias [expert, 2·d_mlp] → mlp.b_gate, mlp.b_in (views)
    layers.{l}.mlp.experts.down_proj [expert, d_mlp, d_model], down_proj_bias → mlp.W_out, mlp.b_out

The experts' middle is the clamped SwiGLU (`swiglu_alpha` 1.702, `swiglu_limit` 7.0, the `(up + 1)`
gate); the router keeps the top k scores, then a softmax over those k. Everything else is read as
`tracer.readers.llama` reads it. Core module: numpy and the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..core.config import Config
from ..errors import TracerError
from . import llama
from .checkpoint import Checkpoint
from .folder import number, whole

FAMILIES = ("gpt_oss",)
GATE_UP = "mlp.experts.gate_up_proj"


def config_of(raw: dict, where: Path) -> Config:
    n_layers = whole(raw, "num_hidden_layers", where)
    llama.check_layer_count(n_layers, where)
    types = raw.get("layer_types") or ["full_attention"] * n_layers
    llama.check_layer_types(types, n_layers, where)
    for key in ("quantization_config",):
        if raw.get(key) is not None:
            raise TracerError(f"{where}: this folder stores its experts quantized ({key}: MXFP4 '…_blocks' and "
                              f"'…_scales' tensors); tracer reads gpt-oss as a GGUF file, or a folder in bf16/f32")
    window = whole(raw, "sliding_window", where) if "sliding_attention" in types else None
    local = tuple(l for l, t in enumerate(types) if t == "sliding_attention")
    E = whole(raw, "num_local_experts", where)
    return llama.config_of({**raw, "sliding_window": None, "hidden_act": "silu"}, where, FAMILIES,
                           attention="sinks", mlp="experts", n_experts=E,
                           experts_per_token=whole(raw, "num_experts_per_tok", where), router="topk_softmax",
                           expert_mlp="clamped_swiglu", swiglu_alpha=number(raw, "swiglu_alpha", where, 1.702),
                           swiglu_limit=number(raw, "swiglu_limit", where, 7.0), router_bias=True, expert_bias=True,
                           sliding_window=window, windowed=local if window else None)


def mlp_shapes(cfg: Config, p: str, l: int) -> dict[str, tuple[int, ...]]:
    E, d, f = cfg.n_experts, cfg.d_model, cfg.d_mlp
    return {p + "mlp.router.weight": (E, d), p + "mlp.router.bias": (E,), p + GATE_UP: (E, d, 2 * f),
            p + GATE_UP + "_bias": (E, 2 * f), p + "mlp.experts.down_proj": (E, f, d),
            p + "mlp.experts.down_proj_bias": (E, d), p + "self_attn.sinks": (cfg.n_heads,)}


def hf_shapes(cfg: Config, raw: dict, where: Path) -> dict[str, tuple[int, ...]]:
    return llama.hf_shapes(cfg, {**raw, "attention_bias": True}, where, mlp_shapes)


def mlp(cfg: Config, t: dict, p: str, b: str, params: dict) -> None:
    """One layer's sinks, router and experts, in TransformerLens names (views of the file's arrays)."""
    gate_up, gate_up_b = t[p + GATE_UP], t[p + GATE_UP + "_bias"]  # [expert, d_model, 2·d_mlp], [expert, 2·d_mlp]
    params[b + "attn.sinks"] = t[p + "self_attn.sinks"]
    params[b + "mlp.W_router"] = t[p + "mlp.router.weight"].T  # [d_model, expert]
    params[b + "mlp.b_router"] = t[p + "mlp.router.bias"]
    params[b + "mlp.W_gate"], params[b + "mlp.W_in"] = gate_up[..., ::2], gate_up[..., 1::2]  # [expert, d_model, d_mlp]
    params[b + "mlp.b_gate"], params[b + "mlp.b_in"] = gate_up_b[..., ::2], gate_up_b[..., 1::2]
    params[b + "mlp.W_out"] = t[p + "mlp.experts.down_proj"]  # [expert, d_mlp, d_model]
    params[b + "mlp.b_out"] = t[p + "mlp.experts.down_proj_bias"]


def translate(cfg: Config, t: dict[str, np.ndarray]) -> tuple[dict, list]:
    return llama.translate(cfg, t, mlp)


NAMES = {"attn.sinks": "self_attn.sinks", "mlp.W_router": "mlp.router.weight", "mlp.b_router": "mlp.router.bias",
         "mlp.W_gate": GATE_UP, "mlp.W_in": GATE_UP, "mlp.b_gate": GATE_UP + "_bias", "mlp.b_in": GATE_UP + "_bias",
         "mlp.W_out": "mlp.experts.down_proj", "mlp.b_out": "mlp.experts.down_proj_bias"}


def file_names(cfg: Config) -> dict[str, str]:
    out = {k: v for k, v in llama.file_names(cfg).items() if ".mlp." not in k}
    return {**out, **llama.layer_names(cfg, NAMES)}


def split_params(cfg: Config) -> set[str]:
    """The parameters cut out of a fused tensor: each layer's gate and up (and their biases)."""
    return {tl for tl, hf in file_names(cfg).items() if GATE_UP in hf}


def read(folder: Path, raw: dict, name: str | None = None, progress=None) -> Checkpoint:
    return llama.read(folder, raw, name, progress, family=sys.modules[__name__])
