"""Mixture-of-experts folders built on the Llama block → a `Checkpoint`: Qwen3-MoE (`qwen3_moe`), OLMoE
(`olmoe`), Mixtral (`mixtral`) and Qwen2-MoE / Qwen1.5-MoE (`qwen2_moe`), each the Llama block
(`tracer.readers.llama`) with its own attention switches and routed experts (`tracer.core.experts`)
in place of the dense MLP. Their experts are stored one tensor per expert, as transformers writes
them and the Hub holds them:

    layers.{l}.mlp.gate.weight [expert, d_model]                 → mlp.W_router [d_model, expert]
    layers.{l}.mlp.experts.{e}.gate_proj / up_proj [d_mlp, d_model] → mlp.W_gate / W_in [expert, d_model, d_mlp]
    layers.{l}.mlp.experts.{e}.down_proj [d_model, d_mlp]        → mlp.W_out [expert, d_mlp, d_model]
    Mixtral: layers.{l}.block_sparse_moe.gate, .experts.{e}.w1 (gate) / w3 (up) / w2 (down)
    Qwen2-MoE: layers.{l}.mlp.shared_expert.{gate,up,down}_proj → mlp.shared.W_gate / W_in / W_out,
               layers.{l}.mlp.shared_expert_gate.weight [1, d_model] → mlp.W_shared_gate [d_model, 1]

(the experts stacked once, a copy per layer). Routing: softmax over every expert, the top k kept, and
renormalized to sum to 1 where the family does (Mixtral always; Qwen3-MoE and OLMoE by
`norm_topk_prob`). Qwen3-MoE normalizes each head's Q and K (as Qwen3), OLMoE all of Q and all of K
(as OLMo 2, but with its norms before the sublayers); Qwen2-MoE has Q/K/V biases. A layer that is a
dense MLP (`mlp_only_layers`, `decoder_sparse_step` > 1) is refused by name. Core module: numpy and
the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..core.config import Config
from ..errors import TracerError
from . import llama
from .checkpoint import Checkpoint
from .folder import flag, whole

FAMILIES = ("qwen3_moe", "olmoe", "mixtral", "qwen2_moe")
# where a layer's MLP lives, the router's name, each expert's gate / up / down names
DEFAULT_LAYOUT = ("mlp", "gate", ("gate_proj", "up_proj", "down_proj"))
MIXTRAL_LAYOUT = ("block_sparse_moe", "gate", ("w1", "w3", "w2"))  # tracer.readers.mixtral
QK_NORMS = {"attn.q_norm.w": "self_attn.q_norm.weight", "attn.k_norm.w": "self_attn.k_norm.weight"}
LIKE = {"qwen3_moe": "qwen3", "qwen2_moe": "qwen2"}  # the dense family whose attention (biases, sliding rule) it has


def config_of(raw: dict, where: Path) -> Config:
    family = raw.get("model_type")
    if family not in FAMILIES:
        raise TracerError(f"{where}: model_type {family!r}; this reader reads {', '.join(FAMILIES)}")
    n_layers = whole(raw, "num_hidden_layers", where)
    llama.check_layer_count(n_layers, where)
    dense = dense_layers(raw, n_layers, where)
    if raw.get("clip_qkv") is not None:
        raise TracerError(f"{where}: clip_qkv {raw['clip_qkv']!r} is not supported (OLMoE's clamp of Q, K and V)")
    E = whole(raw, "num_experts" if "num_experts" in raw else "num_local_experts", where)
    switches = dict(mlp="experts", n_experts=E, experts_per_token=whole(raw, "num_experts_per_tok", where),
                    router="softmax_topk",
                    norm_topk=True if family == "mixtral" else flag(raw, "norm_topk_prob", where, False))
    if family in ("qwen3_moe", "qwen2_moe"):
        switches["d_mlp"] = whole(raw, "moe_intermediate_size", where)
    if dense:
        switches.update(dense_layers=dense, dense_d_mlp=whole(raw, "intermediate_size", where))
    if family == "qwen3_moe":
        switches["qk_norm"] = "per_head"
    if family == "olmoe":
        switches["qk_norm"] = "whole"
    if family == "qwen2_moe":
        switches["shared_d_mlp"] = whole(raw, "shared_expert_intermediate_size", where)
    raw = {**raw, "model_type": LIKE.get(family, family), "mlp_bias": False}  # llama's rules read Qwen's as Qwen's
    return llama.config_of(raw, where, (*FAMILIES, *LIKE.values()), **switches)


def dense_layers(raw: dict, n_layers: int, where: Path) -> tuple:
    """The layers whose MLP is dense, as Qwen-MoE's decoder decides: listed in `mlp_only_layers`, or
    not a multiple of `decoder_sparse_step` (layer l routes when (l + 1) % step == 0)."""
    only = raw.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(l, int) and not isinstance(l, bool) and 0 <= l < n_layers
                                             for l in only):
        raise TracerError(f"{where}: 'mlp_only_layers' must list layers 0–{n_layers - 1}, got {only!r}")
    step = raw.get("decoder_sparse_step", 1)
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise TracerError(f"{where}: 'decoder_sparse_step' must be a whole number ≥ 1, got {step!r}")
    return tuple(l for l in range(n_layers) if l in only or (l + 1) % step)


def mlp_shapes(layout: tuple):
    where_, router, (gate, up, down) = layout

    def shapes(cfg: Config, p: str, l: int) -> dict[str, tuple[int, ...]]:
        if cfg.dense_layers and l in cfg.dense_layers:  # a dense SwiGLU MLP among the experts
            return llama.dense_mlp_shapes(cfg, p, l, cfg.dense_d_mlp)
        E, d, f = cfg.n_experts, cfg.d_model, cfg.d_mlp
        m = p + where_ + "."
        out = {m + f"{router}.weight": (E, d)}
        for e in range(E):
            out.update({m + f"experts.{e}.{gate}.weight": (f, d), m + f"experts.{e}.{up}.weight": (f, d),
                        m + f"experts.{e}.{down}.weight": (d, f)})
        if cfg.shared_d_mlp:
            s = cfg.shared_d_mlp
            out.update({m + "shared_expert.gate_proj.weight": (s, d), m + "shared_expert.up_proj.weight": (s, d),
                        m + "shared_expert.down_proj.weight": (d, s), m + "shared_expert_gate.weight": (1, d)})
        return out

    return shapes


def hf_shapes(cfg: Config, raw: dict, where: Path, layout: tuple = DEFAULT_LAYOUT) -> dict[str, tuple[int, ...]]:
    family = raw["model_type"]
    shapes = llama.hf_shapes(cfg, {**raw, "model_type": LIKE.get(family, family)}, where, mlp_shapes(layout))
    if cfg.qk_norm_kind.on:
        q, k = cfg.qk_norm_kind.width(cfg.n_heads, cfg.d_head), cfg.qk_norm_kind.width(cfg.kv_heads, cfg.d_head)
        for l in range(cfg.n_layers):
            p = f"{llama.PREFIX}layers.{l}."
            shapes.update({p + "self_attn.q_norm.weight": (q,), p + "self_attn.k_norm.weight": (k,)})
    return shapes


def mlp_of(layout: tuple):
    where_, router, (gate, up, down) = layout

    def mlp(cfg: Config, t: dict, p: str, b: str, params: dict) -> None:
        """One layer's router and experts, stacked [expert, …] (a copy), in TransformerLens names."""
        m = p + where_ + "."
        E = cfg.n_experts
        for tl, hf in QK_NORMS.items():
            if p + hf in t:
                params[b + tl] = t[p + hf]
        if cfg.dense_layers and int(b.split(".")[1]) in cfg.dense_layers:  # a dense SwiGLU MLP among the experts
            llama.dense_mlp(cfg, t, p, b, params)
            return
        params[b + "mlp.W_router"] = t[m + f"{router}.weight"].T  # [d_model, expert]
        params[b + "mlp.W_gate"] = np.stack([t[m + f"experts.{e}.{gate}.weight"].T for e in range(E)])  # [expert, d_model, d_mlp]
        params[b + "mlp.W_in"] = np.stack([t[m + f"experts.{e}.{up}.weight"].T for e in range(E)])
        params[b + "mlp.W_out"] = np.stack([t[m + f"experts.{e}.{down}.weight"].T for e in range(E)])  # [expert, d_mlp, d_model]
        if cfg.shared_d_mlp:
            params[b + "mlp.shared.W_gate"] = t[m + "shared_expert.gate_proj.weight"].T  # [d_model, d_shared]
            params[b + "mlp.shared.W_in"] = t[m + "shared_expert.up_proj.weight"].T
            params[b + "mlp.shared.W_out"] = t[m + "shared_expert.down_proj.weight"].T  # [d_shared, d_model]
            params[b + "mlp.W_shared_gate"] = t[m + "shared_expert_gate.weight"].T  # [d_model, 1]

    return mlp


def for_layout(layout: tuple):
    """`translate` and `file_names` of a layout (DEFAULT_LAYOUT here, MIXTRAL_LAYOUT in tracer.readers.mixtral)."""
    mlp = mlp_of(layout)
    where_, router, (gate, up, down) = layout

    def translate_(cfg: Config, t: dict[str, np.ndarray]) -> tuple[dict, list]:
        return llama.translate(cfg, t, mlp)

    def file_names_(cfg: Config) -> dict[str, str]:
        """TransformerLens name → the tensor it comes from (an expert stack names its first expert's)."""
        out = {k: v for k, v in llama.file_names(cfg).items() if ".mlp." not in k}
        names = {"mlp.W_router": f"{where_}.{router}.weight", "mlp.W_gate": f"{where_}.experts.0.{gate}.weight",
                 "mlp.W_in": f"{where_}.experts.0.{up}.weight", "mlp.W_out": f"{where_}.experts.0.{down}.weight"}
        if cfg.qk_norm_kind.on:
            names.update(QK_NORMS)
        if cfg.shared_d_mlp:
            names.update({"mlp.shared.W_gate": "mlp.shared_expert.gate_proj.weight",
                          "mlp.shared.W_in": "mlp.shared_expert.up_proj.weight",
                          "mlp.shared.W_out": "mlp.shared_expert.down_proj.weight",
                          "mlp.W_shared_gate": "mlp.shared_expert_gate.weight"})
        out.update(llama.layer_names(cfg, names))
        for l in cfg.dense_layers or ():  # a dense SwiGLU MLP among the experts: llama's names
            out = {k: v for k, v in out.items() if not k.startswith(f"blocks.{l}.mlp.")}
            out.update({k: v for k, v in llama.file_names(cfg).items() if k.startswith(f"blocks.{l}.mlp.")})
        return out

    return translate_, file_names_


translate, file_names = for_layout(DEFAULT_LAYOUT)


def read(folder: Path, raw: dict, name: str | None = None, progress=None) -> Checkpoint:
    return llama.read(folder, raw, name, progress, family=sys.modules[__name__])
