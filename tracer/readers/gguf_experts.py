"""Mixture-of-experts GGUF files: what llama.cpp's converter writes for gpt-oss (`gpt-oss`), Qwen3-MoE
(`qwen3moe`), Qwen2-MoE (`qwen2moe`), OLMoE (`olmoe`) and Mixtral (`llama` with expert tensors), read
as the family's folder is, with the experts stacked as the file stores them:

    blk.{l}.ffn_gate_inp [expert, d_model] (+ .bias: gpt-oss)           → mlp.W_router [d_model, expert] (b_router)
    blk.{l}.ffn_gate_exps / ffn_up_exps [expert, d_mlp, d_model]       → mlp.W_gate / W_in [expert, d_model, d_mlp]
    blk.{l}.ffn_gate_up_exps [expert, 2·d_mlp, d_model] (newer converters: the gate's rows, then up's)
    blk.{l}.ffn_down_exps [expert, d_model, d_mlp]                      → mlp.W_out [expert, d_mlp, d_model]
    gpt-oss: ffn_{gate,up,down}_exps.bias, attn_sinks [head] → attn.sinks, post_attention_norm → ln2
    qwen2moe: ffn_{gate,up,down}_shexp → mlp.shared.*, ffn_gate_inp_shexp [d_model] → mlp.W_shared_gate

Each stacked tensor stays one tensor of the file: expanded whole when the model fits its memory
budget, or, streamed, one expert at a time as a pass routes tokens to it (`Stored.expert`), so that a
pass of a model bigger than memory expands only the experts it uses. What llama.cpp decides by rule
is decided here the same way: Qwen3-MoE's and Mixtral's top-k weights renormalized (build_moe_ffn's
`norm_w`), OLMoE's and Qwen2-MoE's not; gpt-oss's sliding window on every other layer (layer 0 first)
and YaRN with its correction range rounded outwards (`ggml_rope_yarn_corr_dims`). Core module: numpy
and the standard library.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.config import Config
from ..errors import TracerError
from . import llama

# GGUF architecture → transformers' model_type
ARCHITECTURES = {"gpt-oss": "gpt_oss", "qwen3moe": "qwen3_moe", "qwen2moe": "qwen2_moe", "olmoe": "olmoe"}
STACK = "mlp.experts.stack."  # transformers has no name for a stacked tensor: these are tracer's, GGUF-only
LAYER = {"ffn_gate_inp.weight": "mlp.router.weight", "ffn_gate_inp.bias": "mlp.router.bias",
         "ffn_gate_exps.weight": STACK + "gate", "ffn_up_exps.weight": STACK + "up",
         "ffn_gate_up_exps.weight": STACK + "gate_up", "ffn_down_exps.weight": STACK + "down",
         "ffn_gate_exps.bias": STACK + "gate_bias", "ffn_up_exps.bias": STACK + "up_bias",
         "ffn_gate_up_exps.bias": STACK + "gate_up_bias", "ffn_down_exps.bias": STACK + "down_bias",
         "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
         "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
         "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight",
         "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
         "attn_sinks.weight": "self_attn.sinks"}


def is_experts(meta: dict, arch: str) -> bool:
    """Whether a GGUF file of `arch` routes to experts (a `llama` file with expert_count: Mixtral)."""
    count = meta.get(f"{arch}.expert_count", 0)
    return arch in ARCHITECTURES or (arch == "llama" and isinstance(count, (int, np.integer)) and count > 0)


def config_json(meta: dict, tensors: dict, arch: str, raw: dict, meta_value, where: Path) -> dict:
    """The config.json keys of a mixture of experts, from the metadata (`meta_value(key, kind, default)`
    reads one checked), added to `raw` (the Llama block's, already read)."""
    E = meta_value(f"{arch}.expert_count", int, None)
    k = meta_value(f"{arch}.expert_used_count", int, None)
    width = meta_value(f"{arch}.expert_feed_forward_length", int, raw.get("intermediate_size"))
    out = dict(raw, num_experts=E, num_local_experts=E, num_experts_per_tok=k)
    family = ARCHITECTURES.get(arch, "mixtral")
    out["model_type"] = family
    if family in ("qwen3_moe", "qwen2_moe"):
        out["moe_intermediate_size"] = width
        out["norm_topk_prob"] = family == "qwen3_moe"  # llama.cpp's qwen3moe renormalizes, its qwen2moe does not
    else:
        out["intermediate_size"] = width
    if family == "olmoe":
        out["norm_topk_prob"] = False
    if family == "qwen2_moe":
        out["shared_expert_intermediate_size"] = meta_value(f"{arch}.expert_shared_feed_forward_length", int, None)
    if family == "gpt_oss":
        n = raw["num_hidden_layers"]
        out["layer_types"] = ["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(n)]
        out["sliding_window"] = meta_value(f"{arch}.attention.sliding_window", int, None)
        out["attention_bias"] = True
    out["_fused_gate_up"] = "blk.0.ffn_gate_up_exps.weight" in tensors
    return out


def stacked_shapes(cfg: Config, raw: dict):
    """The stacked experts' tensors of one layer, by the names LAYER gives them (`mlp(cfg, p, l)`)."""
    fused = raw.get("_fused_gate_up", False)
    bias = cfg.expert_bias

    def shapes(cfg: Config, p: str, l: int) -> dict[str, tuple[int, ...]]:
        E, d, f = cfg.n_experts, cfg.d_model, cfg.d_mlp
        out = {p + "mlp.router.weight": (E, d), p + STACK + "down": (E, d, f)}
        out.update({p + STACK + "gate_up": (E, 2 * f, d)} if fused else {p + STACK + "gate": (E, f, d), p + STACK + "up": (E, f, d)})
        if cfg.router_bias:
            out[p + "mlp.router.bias"] = (E,)
        if bias:
            out.update({p + STACK + "down_bias": (E, d)})
            out.update({p + STACK + "gate_up_bias": (E, 2 * f)} if fused else {p + STACK + "gate_bias": (E, f),
                                                                              p + STACK + "up_bias": (E, f)})
        if cfg.shared_d_mlp:
            s = cfg.shared_d_mlp
            out.update({p + "mlp.shared_expert.gate_proj.weight": (s, d), p + "mlp.shared_expert.up_proj.weight": (s, d),
                        p + "mlp.shared_expert.down_proj.weight": (d, s), p + "mlp.shared_expert_gate.weight": (d,)})
        if cfg.attention == "sinks":  # (the attention kind's own tensor, read here for the family)
            out[p + "self_attn.sinks"] = (cfg.n_heads,)
        return out

    return shapes


def hf_shapes(fam, cfg: Config, raw: dict, where: Path) -> dict[str, tuple[int, ...]]:
    """The family's tensors with its MLP as the GGUF file stacks it (and its Q/K norms)."""
    shapes = llama.hf_shapes(cfg, {**raw, "model_type": getattr(fam, "LIKE", {}).get(raw["model_type"], raw["model_type"])},
                             where, stacked_shapes(cfg, raw))
    if cfg.qk_norm_kind.on:
        q, k = cfg.qk_norm_kind.width(cfg.n_heads, cfg.d_head), cfg.qk_norm_kind.width(cfg.kv_heads, cfg.d_head)
        for l in range(cfg.n_layers):
            p = f"{llama.PREFIX}layers.{l}."
            shapes.update({p + "self_attn.q_norm.weight": (q,), p + "self_attn.k_norm.weight": (k,)})
    return shapes


def stacked_mlp(cfg: Config, t: dict, p: str, b: str, params: dict) -> None:
    """One layer's router and stacked experts in TransformerLens names: [expert, out, in] → [expert, in,
    out] (a view; a streamed stack transposes each expert as it is expanded)."""
    s = p + STACK
    params[b + "mlp.W_router"] = t[p + "mlp.router.weight"].T  # [d_model, expert]
    if p + "mlp.router.bias" in t:
        params[b + "mlp.b_router"] = t[p + "mlp.router.bias"]
    if s + "gate_up" in t:  # [expert, 2·d_mlp, d_model]: the gate's rows, then up's
        f = cfg.d_mlp
        gate_up = t[s + "gate_up"]
        params[b + "mlp.W_gate"], params[b + "mlp.W_in"] = gate_up[:, :f].swapaxes(1, 2), gate_up[:, f:].swapaxes(1, 2)
        if s + "gate_up_bias" in t:
            params[b + "mlp.b_gate"], params[b + "mlp.b_in"] = t[s + "gate_up_bias"][:, :f], t[s + "gate_up_bias"][:, f:]
    else:
        params[b + "mlp.W_gate"], params[b + "mlp.W_in"] = t[s + "gate"].swapaxes(1, 2), t[s + "up"].swapaxes(1, 2)
        if s + "gate_bias" in t:
            params[b + "mlp.b_gate"], params[b + "mlp.b_in"] = t[s + "gate_bias"], t[s + "up_bias"]
    params[b + "mlp.W_out"] = t[s + "down"].swapaxes(1, 2)  # [expert, d_mlp, d_model]
    if s + "down_bias" in t:
        params[b + "mlp.b_out"] = t[s + "down_bias"]
    if p + "mlp.shared_expert.gate_proj.weight" in t:
        params[b + "mlp.shared.W_gate"] = t[p + "mlp.shared_expert.gate_proj.weight"].T
        params[b + "mlp.shared.W_in"] = t[p + "mlp.shared_expert.up_proj.weight"].T
        params[b + "mlp.shared.W_out"] = t[p + "mlp.shared_expert.down_proj.weight"].T
        params[b + "mlp.W_shared_gate"] = np.asarray(t[p + "mlp.shared_expert_gate.weight"]).reshape(-1, 1)  # [d_model, 1]
    if p + "self_attn.sinks" in t:
        params[b + "attn.sinks"] = t[p + "self_attn.sinks"]
    for tl, hf in (("attn.q_norm.w", "self_attn.q_norm.weight"), ("attn.k_norm.w", "self_attn.k_norm.weight")):
        if p + hf in t:
            params[b + tl] = t[p + hf]


def translate(cfg: Config, t: dict[str, np.ndarray]) -> tuple[dict, list]:
    return llama.translate(cfg, t, stacked_mlp)


def file_names(names: dict):
    """TransformerLens name → the file's tensor, for the storage summary (`names`: its hf → GGUF names)."""
    def file_names_(cfg: Config) -> dict[str, str]:
        out = {k: v for k, v in llama.file_names(cfg).items() if ".mlp." not in k}
        per = {"mlp.W_router": "mlp.router.weight", "mlp.b_router": "mlp.router.bias", "mlp.W_gate": STACK + "gate",
               "mlp.W_in": STACK + "up", "mlp.W_out": STACK + "down", "mlp.b_gate": STACK + "gate_bias",
               "mlp.b_in": STACK + "up_bias", "mlp.b_out": STACK + "down_bias", "attn.sinks": "self_attn.sinks",
               "mlp.shared.W_gate": "mlp.shared_expert.gate_proj.weight",
               "mlp.shared.W_in": "mlp.shared_expert.up_proj.weight",
               "mlp.shared.W_out": "mlp.shared_expert.down_proj.weight",
               "mlp.W_shared_gate": "mlp.shared_expert_gate.weight",
               "attn.q_norm.w": "self_attn.q_norm.weight", "attn.k_norm.w": "self_attn.k_norm.weight"}
        out.update(llama.layer_names(cfg, per))
        fused = {f"{llama.PREFIX}layers.{l}.{STACK}gate_up" for l in range(cfg.n_layers)}
        for tl, hf in list(out.items()):  # a file of fused gate_up tensors: W_gate and W_in both come from it
            for part in ("gate", "up"):
                if hf.endswith(STACK + part) and hf[: -len(part)] + "gate_up" in fused and hf not in names:
                    out[tl] = hf[: -len(part)] + "gate_up" + hf[len(hf):]
        return out

    return file_names_


class Family:
    """A MoE family's folder reader (`config_of`), with its tensors as a GGUF file stacks them."""

    def __init__(self, fam, names: dict):
        self.fam, self.config_of, self.translate = fam, fam.config_of, translate
        self.file_names = file_names(names)

    def hf_shapes(self, cfg: Config, raw: dict, where: Path) -> dict:
        return hf_shapes(self.fam, cfg, raw, where)


def check(cfg: Config, where: Path) -> None:
    """What a GGUF mixture of experts must not be: dense layers among the experts (llama.cpp has none)."""
    if cfg.dense_layers:
        raise TracerError(f"{where}: dense MLP layers among the experts are not read from GGUF files")
