"""Qwen3.5 text folders (`model_type` qwen3_5_text) → a `Checkpoint`: a hybrid of linear-attention layers
(Gated DeltaNet, `tracer.core.linear_attention`: a state instead of a KV cache) and softmax-attention layers
with an output gate (`tracer.core.attention.GatedAttention`), in the order `layer_types` gives (three linear
to one full in the released models); the Llama block's MLP and norms otherwise, every RMS norm with
Gemma's (1 + w) gain but the linear layers' gated one, per-head Q/K norms on the full layers, and rotary
positions on a quarter of each head (`partial_rotary_factor`).

    linear layers:  linear_attn.in_proj_qkv [q|k|v channels, d_model] → attn.W_Q, W_K [k_head, d_model, d_k], W_V
                    linear_attn.in_proj_z → attn.W_Z;  in_proj_b / in_proj_a [v_head, d_model] → attn.W_beta / W_decay
                    linear_attn.conv1d.weight [channels, 1, K] → attn.W_conv [channels, K];  A_log, dt_bias
                    linear_attn.norm.weight [d_v] → attn.out_norm.w;  out_proj → attn.W_O [v_head, d_v, d_model]
    full layers:    self_attn.q_proj [head · (q | gate) · d_head, d_model] → attn.W_Q and attn.W_G (each head's
                    query, then its gate: transformers' chunk of a [head, 2·d_head] view), k_proj, v_proj, o_proj,
                    q_norm / k_norm → attn.q_norm.w / k_norm.w

Multimodal RoPE (`mrope_section`) turns text positions exactly as plain RoPE does (the three sections see
the same position), so it is read as plain. Core module: numpy and the standard library.
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

FAMILIES = ("qwen3_5_text",)
KINDS = {"linear_attention": "linear_attention", "full_attention": "gated"}  # config.json's layer types → kinds


def config_of(raw: dict, where: Path) -> Config:
    n_layers = whole(raw, "num_hidden_layers", where)
    llama.check_layer_count(n_layers, where)
    types = raw.get("layer_types")
    if types is None:
        every = whole(raw, "full_attention_interval", where, 4)
        types = ["linear_attention" if (l + 1) % every else "full_attention" for l in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers:
        raise TracerError(f"{where}: 'layer_types' must name one kind per layer ({n_layers}), got {str(types)[:80]}")
    unknown = [t for t in types if t not in KINDS]
    if unknown:
        raise TracerError(f"{where}: layer type {unknown[0]!r} is not known; tracer computes {' and '.join(KINDS)}")
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    head_dim = whole(raw, "head_dim", where, whole(raw, "hidden_size", where) // max(whole(raw, "num_attention_heads", where), 1))
    fraction = number(rope, "partial_rotary_factor", where, 0.25)
    if not 0 < fraction <= 1:
        raise TracerError(f"{where}: partial_rotary_factor must be in (0, 1], got {fraction!r}")
    plain = {**{k: v for k, v in raw.items() if k != "layer_types"}, "model_type": "qwen3", "rope_parameters": {"rope_type": rope.get("rope_type", "default"),
                                                               "rope_theta": number(rope, "rope_theta", where, 1e7)}}
    return llama.config_of(plain, where, ("qwen3",), norm="gemma_rms", qk_norm="per_head", attention="gated",
                           layer_types=tuple(KINDS[t] for t in types), rotary_dim=int(head_dim * fraction),
                           linear_k_heads=whole(raw, "linear_num_key_heads", where),
                           linear_v_heads=whole(raw, "linear_num_value_heads", where),
                           linear_d_k=whole(raw, "linear_key_head_dim", where),
                           linear_d_v=whole(raw, "linear_value_head_dim", where),
                           linear_conv=whole(raw, "linear_conv_kernel_dim", where),
                           tied_unembed=raw.get("tie_word_embeddings", True) is not False)


def _linear(cfg: Config, l: int) -> bool:
    return cfg.layer_types[l] == "linear_attention"


def hf_shapes(cfg: Config, raw: dict, where: Path) -> dict[str, tuple[int, ...]]:
    shapes = llama.hf_shapes(cfg, {**raw, "model_type": "qwen3", "attention_bias": False}, where)
    d, H, dh = cfg.d_model, cfg.n_heads, cfg.d_head
    kh, vh, dk, dv = cfg.linear_k_heads, cfg.linear_v_heads, cfg.linear_d_k, cfg.linear_d_v
    for l in range(cfg.n_layers):
        p = f"{llama.PREFIX}layers.{l}."
        attn = {k: v for k, v in shapes.items() if k.startswith(p + "self_attn.")}
        for k in attn:
            del shapes[k]
        if _linear(cfg, l):
            conv = 2 * kh * dk + vh * dv
            a = p + "linear_attn."
            shapes.update({a + "in_proj_qkv.weight": (conv, d), a + "in_proj_z.weight": (vh * dv, d),
                           a + "in_proj_b.weight": (vh, d), a + "in_proj_a.weight": (vh, d),
                           a + "conv1d.weight": (conv, 1, cfg.linear_conv), a + "A_log": (vh,), a + "dt_bias": (vh,),
                           a + "norm.weight": (dv,), a + "out_proj.weight": (d, vh * dv)})
        else:
            a = p + "self_attn."
            shapes.update({a + "q_proj.weight": (2 * H * dh, d), a + "k_proj.weight": (cfg.kv_heads * dh, d),
                           a + "v_proj.weight": (cfg.kv_heads * dh, d), a + "o_proj.weight": (d, H * dh),
                           a + "q_norm.weight": (dh,), a + "k_norm.weight": (dh,)})
    return shapes


def translate(cfg: Config, t: dict[str, np.ndarray]) -> tuple[dict, list]:
    """transformers' names → TransformerLens names; a full layer's q_proj cut into its queries and gates
    (a copy each), a linear layer's projections viewed per head."""
    H, dh, d = cfg.n_heads, cfg.d_head, cfg.d_model
    kh, vh, dk, dv = cfg.linear_k_heads, cfg.linear_v_heads, cfg.linear_d_k, cfg.linear_d_v
    t = dict(t)
    gates = {}
    for l in range(cfg.n_layers):
        p = f"{llama.PREFIX}layers.{l}."
        if _linear(cfg, l):  # llama.translate reads self_attn tensors: give it zero-sized stand-ins, then replace
            for m, heads in (("q", cfg.n_heads), ("k", cfg.kv_heads), ("v", cfg.kv_heads)):
                t[p + f"self_attn.{m}_proj.weight"] = np.zeros((heads * dh, d), dtype=np.float32)
            t[p + "self_attn.o_proj.weight"] = np.zeros((d, H * dh), dtype=np.float32)
        else:
            qg = t[p + "self_attn.q_proj.weight"].reshape(H, 2, dh, d)  # [head, query | gate, d_head, d_model]
            t[p + "self_attn.q_proj.weight"] = np.ascontiguousarray(qg[:, 0].reshape(H * dh, d))
            gates[l] = qg[:, 1]  # [head, d_head, d_model]
    params, fused = llama.translate(cfg, t)
    for l in range(cfg.n_layers):
        b, p = f"blocks.{l}.attn.", f"{llama.PREFIX}layers.{l}."
        if not _linear(cfg, l):
            params[b + "W_G"] = gates[l].transpose(0, 2, 1)  # [head, d_model, d_head]
            params[b + "b_G"] = np.zeros((H, dh), dtype=np.float32)
            params[b + "q_norm.w"], params[b + "k_norm.w"] = t[p + "self_attn.q_norm.weight"], t[p + "self_attn.k_norm.weight"]
            continue
        for k in [k for k in params if k.startswith(b)]:
            del params[k]
        fused[l] = None
        a = p + "linear_attn."
        qkv = t[a + "in_proj_qkv.weight"]  # [conv, d_model]: q's channels, k's, v's
        per_head = lambda W, heads: W.reshape(heads, -1, d).transpose(0, 2, 1)  # noqa: E731  [heads·x, d] → [heads, d, x]
        params[b + "W_Q"] = per_head(qkv[: kh * dk], kh)
        params[b + "W_K"] = per_head(qkv[kh * dk: 2 * kh * dk], kh)
        params[b + "W_V"] = per_head(qkv[2 * kh * dk:], vh)
        params[b + "W_Z"] = per_head(t[a + "in_proj_z.weight"], vh)
        params[b + "W_beta"], params[b + "W_decay"] = t[a + "in_proj_b.weight"].T, t[a + "in_proj_a.weight"].T
        params[b + "W_conv"] = t[a + "conv1d.weight"][:, 0, :]  # [channels, K]
        params[b + "A_log"], params[b + "dt_bias"] = t[a + "A_log"], t[a + "dt_bias"]
        params[b + "out_norm.w"] = t[a + "norm.weight"]
        params[b + "W_O"] = t[a + "out_proj.weight"].T.reshape(vh, dv, d)  # [v_head, d_v, d_model]
    return params, fused


def file_names(cfg: Config) -> dict[str, str]:
    out = llama.file_names(cfg)
    for l in range(cfg.n_layers):
        b, p = f"blocks.{l}.attn.", f"{llama.PREFIX}layers.{l}."
        if _linear(cfg, l):
            out = {k: v for k, v in out.items() if not k.startswith(b)}
            a = p + "linear_attn."
            out.update({b + "W_Q": a + "in_proj_qkv.weight", b + "W_K": a + "in_proj_qkv.weight",
                        b + "W_V": a + "in_proj_qkv.weight", b + "W_Z": a + "in_proj_z.weight",
                        b + "W_beta": a + "in_proj_b.weight", b + "W_decay": a + "in_proj_a.weight",
                        b + "W_conv": a + "conv1d.weight", b + "A_log": a + "A_log", b + "dt_bias": a + "dt_bias",
                        b + "out_norm.w": a + "norm.weight", b + "W_O": a + "out_proj.weight"})
        else:
            out.update({b + "W_G": p + "self_attn.q_proj.weight", b + "q_norm.w": p + "self_attn.q_norm.weight",
                        b + "k_norm.w": p + "self_attn.k_norm.weight"})
    return out


def read(folder: Path, raw: dict, name: str | None = None, progress=None) -> Checkpoint:
    return llama.read(folder, raw, name, progress, family=sys.modules[__name__])
