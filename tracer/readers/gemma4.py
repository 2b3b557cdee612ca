"""Gemma 4 text folders (`model_type` gemma4_text) → a `Checkpoint`: Gemma 3's block (`tracer.readers.gemma3`:
√d_model, four norms per layer, per-head Q/K norms, GeGLU, sliding-window layers with their own RoPE base)
with Gemma 4's differences, each a switch of `tracer.core.config.Config`:

  - its norms multiply by w, not 1 + w (`norm = "rms"`), and the scores are not scaled (`scale_scores` false);
  - Gemma 4's attention (`attention = "gemma4"`, `tracer.core.gemma4_attention`): every layer's values
    RMS-normalized without a gain; no W_V on the full layers when `attention_k_eq_v` (`k_eq_v`: the values
    are the keys' projection); the last `num_kv_shared_layers` layers attend with the keys and values of the
    last earlier layer of their own type (`kv_source`), and have no k_proj / v_proj (a file that has them
    keeps them unread, as transformers does);
  - per-layer sizes (`layer_d_head`, `layer_kv_heads`, `layer_d_mlp`): the full layers' head size and
    key/value heads from `per_layer_config` (what transformers 5.24 writes) or `global_head_dim` /
    `num_global_key_value_heads` (the Hub's files); the sharing layers' MLP twice as wide with
    `use_double_wide_mlp`;
  - RoPE per layer type: "proportional" on the full layers (`rope_scaling`: a fraction of the pairs turn at
    the whole head's frequencies), the default of its own base on the sliding ones (`rope_local_theta`);
  - per-layer inputs (`d_ple`, `tracer.core.per_layer_input`) and a scalar per layer (`layer_scalar`);
  - the final logits soft-capped (`final_softcap`), as Gemma 2's.

    embed_tokens_per_layer [vocab, layer·d_ple] → ple.W_E     per_layer_model_projection → ple.W_proj (transposed)
    per_layer_projection_norm → ple.norm.w                   layers.{l}.per_layer_input_gate → ple.W_gate (transposed)
    layers.{l}.per_layer_projection → ple.W_out (transposed)   post_per_layer_input_norm → ple.norm.w
    layers.{l}.layer_scalar → layer_scalar                    the rest as Gemma 3's

A layer's sizes are read from its tensors' shapes (a layer translated alone, `tracer.readers.source`, is
renamed layer 0). The experts beside each MLP (`enable_moe_block`, the 26B-A4B) are `tracer.core.gemma4_moe`. Not read:
bidirectional attention, attention biases.
Core module: numpy and the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..core.config import Config
from ..errors import TracerError, is_whole
from . import llama
from .checkpoint import Checkpoint
from .folder import check_present, config_error, flag, number, whole

FAMILIES = ("gemma4_text",)
ACTIVATIONS = ("gelu_pytorch_tanh", "gelu_new")
P = llama.PREFIX
NORMS = {"ln1.w": "input_layernorm.weight", "ln1_post.w": "post_attention_layernorm.weight",
         "ln2.w": "pre_feedforward_layernorm.weight", "ln2_post.w": "post_feedforward_layernorm.weight"}
PLE = {"ple.W_gate": "per_layer_input_gate.weight", "ple.W_out": "per_layer_projection.weight",
       "ple.norm.w": "post_per_layer_input_norm.weight"}
TOP_PLE = {"ple.W_E": P + "embed_tokens_per_layer.weight", "ple.W_proj": P + "per_layer_model_projection.weight",
           "ple.norm.w": P + "per_layer_projection_norm.weight"}
MOE_NORMS = {"mlp.dense_post.w": "post_feedforward_layernorm_1.weight", "mlp.experts_pre.w": "pre_feedforward_layernorm_2.weight",
             "mlp.experts_post.w": "post_feedforward_layernorm_2.weight"}  # the experts' block's own norms
IGNORED = ("self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.k_norm.weight", "self_attn.v_norm.weight")


# --------------------------------------------------------------------------- config.json


def layer_types(raw: dict, n_layers: int, where: Path) -> list[str]:
    """config.json's layer_types (transformers' default: five sliding layers to one full), the last layer full
    (transformers makes it so)."""
    types = raw.get("layer_types")
    if types is None:
        types = ["sliding_attention" if (l + 1) % 6 else "full_attention" for l in range(n_layers)]
    llama.check_layer_types(types, n_layers, where)
    return list(types[:-1]) + ["full_attention"] if types else []


def kv_sources(types: list[str], shared: int, where: Path) -> list[int]:
    """Each layer's source of keys and values: itself, or (the last `shared` layers) the last layer before them
    of its own type."""
    n = len(types)
    first = n - shared
    if shared and first <= 0:
        raise TracerError(f"{where}: num_kv_shared_layers {shared} leaves no layer of its own keys and values to share "
                          f"from ({n} layers)")
    out = []
    for l, kind in enumerate(types):
        if l < first:
            out.append(l)
            continue
        earlier = [j for j in range(first) if types[j] == kind]
        if not earlier:
            raise TracerError(f"{where}: layer {l} ({kind}) shares keys and values (num_kv_shared_layers {shared}), but "
                              f"no earlier layer of that type has its own")
        out.append(earlier[-1])
    return out


def _head_sizes(raw: dict, types: list[str], where: Path) -> tuple[list[int], list[int]]:
    """Each layer's (head size, key/value heads)."""
    dh, kv = whole(raw, "head_dim", where), whole(raw, "num_key_value_heads", where)
    per = raw.get("per_layer_config")
    if per is not None and not isinstance(per, dict):
        raise TracerError(f"{where}: 'per_layer_config' must be an object, got {str(per)[:80]}")
    if per is None:  # the Hub's files: the full layers' from global_head_dim and num_global_key_value_heads
        full = {"head_dim": raw.get("global_head_dim", 512)}
        if raw.get("attention_k_eq_v") and raw.get("num_global_key_value_heads") is not None:
            full["num_key_value_heads"] = raw["num_global_key_value_heads"]
        per = {str(l): full for l, t in enumerate(types) if t == "full_attention"}
    heads, kvs = [dh] * len(types), [kv] * len(types)
    for key, over in per.items():
        l = int(key) if isinstance(key, str) and key.isdigit() and len(key) < 6 else -1
        if not 0 <= l < len(types) or not isinstance(over, dict):
            raise TracerError(f"{where}: per_layer_config names layer {str(key)[:20]!r}; there are {len(types)}")
        unknown = sorted(set(over) - {"head_dim", "num_key_value_heads"})
        if unknown:
            raise TracerError(f"{where}: per_layer_config changes {unknown[0]!r} of layer {l}; tracer reads head_dim and "
                              f"num_key_value_heads there")
        heads[l] = whole(over, "head_dim", where, dh)
        kvs[l] = whole(over, "num_key_value_heads", where, kv)
    return heads, kvs


def _rope(raw: dict, where: Path) -> tuple[float, dict | None, float]:
    """(the full layers' base, their scaling, the sliding layers' base) from rope_parameters per layer type."""
    params = raw.get("rope_parameters") or {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                            "full_attention": {"rope_type": "proportional", "rope_theta": 1e6,
                                                               "partial_rotary_factor": 0.25}}
    full, local = params.get("full_attention"), params.get("sliding_attention")
    if not isinstance(full, dict) or not isinstance(local, dict):
        raise TracerError(f"{where}: rope_parameters must give full_attention's and sliding_attention's settings, got "
                          f"{str(params)[:80]}")
    if local.get("rope_type", "default") != "default":
        raise TracerError(f"{where}: RoPE type {local.get('rope_type')!r} on the sliding layers is not supported (tracer "
                          f"computes 'default' there)")
    kind = full.get("rope_type", "default")
    if kind not in ("default", "proportional"):
        raise TracerError(f"{where}: RoPE type {kind!r} on the full layers is not supported (tracer computes "
                          f"'proportional' and 'default' there)")
    scaling = None
    if kind == "proportional":
        fraction = number(full, "partial_rotary_factor", where, 1.0)
        scaling = {"rope_type": "proportional", "partial_rotary_factor": fraction, "factor": number(full, "factor", where, 1.0)}
    return number(full, "rope_theta", where, 1e6), scaling, number(local, "rope_theta", where, 10000.0)


def _experts(raw: dict, where: Path, widths: list) -> dict:
    """The config's fields for the experts beside each MLP (`enable_moe_block`): d_mlp is each expert's width."""
    if len(set(widths)) > 1:
        raise TracerError(f"{where}: use_double_wide_mlp with enable_moe_block is not supported (the MLPs beside the "
                          f"experts would differ in width)")
    E = whole(raw, "num_experts", where)
    k = whole(raw, "top_k_experts", where)
    if k > E:
        raise TracerError(f"{where}: top_k_experts {k} is more than num_experts {E}")
    return {"mlp": "geglu_and_experts", "d_mlp": whole(raw, "moe_intermediate_size", where), "dense_d_mlp": widths[0],
            "n_experts": E, "experts_per_token": k, "router": "softmax_topk", "norm_topk": True, "expert_mlp": "geglu"}


def config_of(raw: dict, where: Path) -> Config:
    if raw.get("model_type") not in FAMILIES:
        raise TracerError(f"{where}: model_type {raw.get('model_type')!r}; this reader reads gemma4_text")
    act = raw.get("hidden_activation", raw.get("hidden_act", "gelu_pytorch_tanh"))
    if act not in ACTIVATIONS:
        raise TracerError(f"{where}: hidden_activation {act!r} is not supported; Gemma 4's GeGLU uses gelu_pytorch_tanh")
    moe = flag(raw, "enable_moe_block", where, False)
    if raw.get("use_bidirectional_attention") == "all":
        raise TracerError(f"{where}: use_bidirectional_attention 'all' is not supported; tracer's attention is causal")
    if flag(raw, "attention_bias", where, False):
        raise TracerError(f"{where}: attention_bias is not supported (Gemma 4's projections have no biases)")
    n_layers = whole(raw, "num_hidden_layers", where)
    llama.check_layer_count(n_layers, where)
    types = layer_types(raw, n_layers, where)
    shared = raw.get("num_kv_shared_layers") or 0
    if not is_whole(shared, 0) or shared > n_layers:
        raise TracerError(f"{where}: 'num_kv_shared_layers' must be a whole number from 0 to {n_layers}, got {shared!r}")
    sources = kv_sources(types, shared, where)
    heads, kvs = _head_sizes(raw, types, where)
    f = whole(raw, "intermediate_size", where)
    wide = flag(raw, "use_double_wide_mlp", where, False)
    widths = [2 * f if wide and s != l else f for l, s in enumerate(sources)]
    experts = _experts(raw, where, widths) if moe else {}
    d_ple = raw.get("hidden_size_per_layer_input") or None
    vocab = whole(raw, "vocab_size", where)
    if d_ple is not None and raw.get("vocab_size_per_layer_input", vocab) != vocab:
        raise TracerError(f"{where}: vocab_size_per_layer_input {raw.get('vocab_size_per_layer_input')!r} differs from "
                          f"vocab_size {vocab}; tracer reads per-layer inputs of the same vocabulary")
    theta, scaling, local_theta = _rope(raw, where)
    local = tuple(l for l, t in enumerate(types) if t == "sliding_attention")
    window = whole(raw, "sliding_window", where) if local else None
    eq = tuple(l for l, t in enumerate(types) if t == "full_attention" and sources[l] == l) \
        if flag(raw, "attention_k_eq_v", where, False) else None
    cap = raw.get("final_logit_softcapping")
    try:
        return Config(
            d_vocab=vocab, n_ctx=whole(raw, "max_position_embeddings", where), d_model=whole(raw, "hidden_size", where),
            n_heads=whole(raw, "num_attention_heads", where), d_head=heads[0], n_kv_heads=kvs[0],
            n_layers=n_layers, dtype="float32", positional="rope", norm="rms", norm_place="both",
            qk_norm="per_head", attention="gemma4", scale_scores=False, embed_scale=True,
            tied_unembed=flag(raw, "tie_word_embeddings", where, True), ln_eps=number(raw, "rms_norm_eps", where, 1e-6),
            rope_theta=theta, rope_scaling=scaling, sliding_window=window, windowed=local if window else None,
            rope_local_theta=local_theta if window else None, final_softcap=cap,
            layer_d_head=tuple(heads) if len(set(heads)) > 1 else None,
            layer_kv_heads=tuple(kvs) if len(set(kvs)) > 1 else None,
            layer_d_mlp=tuple(widths) if len(set(widths)) > 1 else None,
            kv_source=tuple(sources) if shared else None, k_eq_v=eq or None, d_ple=d_ple, layer_scalar=True,
            **({"mlp": "geglu", "d_mlp": widths[0]} | experts))
    except TracerError as e:
        raise config_error(e, where) from None


# --------------------------------------------------------------------------- tensors


def _own(cfg: Config, l: int) -> tuple[str, ...]:
    """The projections layer l has: q, k and v; q and k (K = V); q alone (keys and values shared)."""
    if cfg.kv_source is not None and cfg.kv_source[l] != l:
        return ("q",)
    return ("q", "k") if cfg.k_eq_v and l in cfg.k_eq_v else ("q", "k", "v")


def hf_shapes(cfg: Config, raw: dict, where: Path) -> dict[str, tuple[int, ...]]:
    V, d, H, e = cfg.d_vocab, cfg.d_model, cfg.n_heads, cfg.d_ple
    shapes: dict[str, tuple[int, ...]] = {P + "embed_tokens.weight": (V, d)}
    if e:
        shapes.update({TOP_PLE["ple.W_E"]: (V, cfg.n_layers * e), TOP_PLE["ple.W_proj"]: (cfg.n_layers * e, d),
                       TOP_PLE["ple.norm.w"]: (e,)})
    for l in range(cfg.n_layers):
        p, view = f"{P}layers.{l}.", cfg.layer(l)
        dh, KV, f = view.d_head, view.kv_heads, view.d_mlp
        shapes.update({p + hf: (d,) for hf in NORMS.values()})
        rows = {"q": H * dh, "k": KV * dh, "v": KV * dh}
        shapes.update({p + f"self_attn.{m}_proj.weight": (rows[m], d) for m in _own(cfg, l)})
        shapes.update({p + f"self_attn.{m}_norm.weight": (dh,) for m in _own(cfg, l)[:2]})
        shapes[p + "self_attn.o_proj.weight"] = (d, H * dh)
        if cfg.n_experts:  # the experts beside the MLP: the MLP is dense_d_mlp wide, d_mlp is each expert's
            f, E, m = cfg.dense_d_mlp, cfg.n_experts, cfg.d_mlp
            shapes.update({p + "experts.gate_up_proj": (E, 2 * m, d), p + "experts.down_proj": (E, d, m),
                           p + "router.proj.weight": (E, d), p + "router.scale": (d,), p + "router.per_expert_scale": (E,),
                           **{p + hf: (d,) for hf in MOE_NORMS.values()}})
        shapes.update({p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d), p + "mlp.down_proj.weight": (d, f)})
        if e:
            shapes.update({p + PLE["ple.W_gate"]: (e, d), p + PLE["ple.W_out"]: (d, e), p + PLE["ple.norm.w"]: (d,)})
        shapes[p + "layer_scalar"] = (1,)
    shapes[P + "norm.weight"] = (d,)
    if not cfg.tied_unembed:
        shapes["lm_head.weight"] = (V, d)
    return shapes


def check_tensors(cfg: Config, shapes: dict, tensors: dict, origin: dict, folder: Path) -> None:
    """Every tensor present with config.json's shape; beyond them only what transformers leaves unread (a
    sharing layer's k_proj, v_proj and norms) and RoPE's buffers."""
    check_present(shapes, tensors, origin, folder)
    extra = [k for k in tensors if k not in shapes and not k.endswith(IGNORED + ("rotary_emb.inv_freq",))]
    if extra:
        raise TracerError(f"{origin[extra[0]]}: tensor {extra[0]!r} is not part of the block config.json describes")


def translate(cfg: Config, t: dict[str, np.ndarray]) -> tuple[dict, list]:
    """transformers' names → TransformerLens names (transposed views); a layer's head size from its q_proj."""
    d, H = cfg.d_model, cfg.n_heads
    zeros = lambda *n: np.zeros(n, dtype=np.float32)  # noqa: E731
    params = {"W_E": t[P + "embed_tokens.weight"], "ln_final.w": t[P + "norm.weight"], "b_U": zeros(cfg.d_vocab)}
    if not cfg.tied_unembed:
        params["W_U"] = t["lm_head.weight"].T
    if TOP_PLE["ple.W_E"] in t:
        params.update({"ple.W_E": t[TOP_PLE["ple.W_E"]], "ple.W_proj": t[TOP_PLE["ple.W_proj"]].T,
                       "ple.norm.w": t[TOP_PLE["ple.norm.w"]]})
    for l in range(cfg.n_layers):
        p, b = f"{P}layers.{l}.", f"blocks.{l}."
        a = p + "self_attn."
        dh = t[a + "q_proj.weight"].shape[0] // H
        for m in "qkv":
            W = t.get(a + f"{m}_proj.weight")
            if W is not None:  # [heads·d_head, d_model] → [heads, d_model, d_head]
                params[b + f"attn.W_{m.upper()}"] = W.T.reshape(d, -1, dh).transpose(1, 0, 2)
                params[b + f"attn.b_{m.upper()}"] = zeros(W.shape[0] // dh, dh)
            if m != "v" and a + f"{m}_norm.weight" in t:
                params[b + f"attn.{m}_norm.w"] = t[a + f"{m}_norm.weight"]
        params[b + "attn.W_O"] = t[a + "o_proj.weight"].T.reshape(H, dh, d)
        params[b + "attn.b_O"] = zeros(d)
        params.update({b + tl: t[p + hf] for tl, hf in NORMS.items()})
        m = b + ("mlp.dense." if cfg.n_experts else "mlp.")  # the dense MLP (beside the experts: `dense.`)
        params[m + "W_gate"], params[m + "W_in"] = t[p + "mlp.gate_proj.weight"].T, t[p + "mlp.up_proj.weight"].T
        params[m + "b_in"] = zeros(params[m + "W_in"].shape[1])
        params[m + "W_out"], params[m + "b_out"] = t[p + "mlp.down_proj.weight"].T, zeros(d)
        if cfg.n_experts:
            params.update(_experts_params(cfg, t, p, b))
        if p + PLE["ple.W_gate"] in t:
            params[b + "ple.W_gate"], params[b + "ple.W_out"] = t[p + PLE["ple.W_gate"]].T, t[p + PLE["ple.W_out"]].T
            params[b + "ple.norm.w"] = t[p + PLE["ple.norm.w"]]
        params[b + "layer_scalar"] = t[p + "layer_scalar"]
    return params, [None] * cfg.n_layers


def _experts_params(cfg: Config, t: dict, p: str, b: str) -> dict:
    """One layer's router and experts (transposed views: gate_up_proj [expert, 2·d_mlp, d_model] holds the gates'
    rows, then the ups')."""
    f, gate_up = cfg.d_mlp, t[p + "experts.gate_up_proj"]
    out = {b + "mlp.W_router": t[p + "router.proj.weight"].T, b + "mlp.router_scale": t[p + "router.scale"],
           b + "mlp.expert_scale": t[p + "router.per_expert_scale"],
           b + "mlp.W_gate": gate_up[:, :f, :].transpose(0, 2, 1), b + "mlp.W_in": gate_up[:, f:, :].transpose(0, 2, 1),
           b + "mlp.W_out": t[p + "experts.down_proj"].transpose(0, 2, 1)}  # [expert, d_model, d_mlp], [expert, d_mlp, d_model]
    return {**out, **{b + tl: t[p + hf] for tl, hf in MOE_NORMS.items()}}


def file_names(cfg: Config) -> dict[str, str]:
    """TransformerLens name → the transformers tensor it comes from."""
    out = {"W_E": P + "embed_tokens.weight", "ln_final.w": P + "norm.weight", "W_U": "lm_head.weight",
           **(TOP_PLE if cfg.d_ple else {})}
    for l in range(cfg.n_layers):
        p, b = f"{P}layers.{l}.", f"blocks.{l}."
        out.update({b + f"attn.W_{m.upper()}": p + f"self_attn.{m}_proj.weight" for m in _own(cfg, l)})
        out.update({b + f"attn.{m}_norm.w": p + f"self_attn.{m}_norm.weight" for m in _own(cfg, l)[:2]})
        out[b + "attn.W_O"] = p + "self_attn.o_proj.weight"
        out.update({b + tl: p + hf for tl, hf in NORMS.items()})
        m = b + ("mlp.dense." if cfg.n_experts else "mlp.")
        out.update({m + "W_gate": p + "mlp.gate_proj.weight", m + "W_in": p + "mlp.up_proj.weight",
                    m + "W_out": p + "mlp.down_proj.weight", b + "layer_scalar": p + "layer_scalar"})
        if cfg.n_experts:
            out.update({b + "mlp.W_router": p + "router.proj.weight", b + "mlp.router_scale": p + "router.scale",
                        b + "mlp.expert_scale": p + "router.per_expert_scale", b + "mlp.W_gate": p + "experts.gate_up_proj",
                        b + "mlp.W_in": p + "experts.gate_up_proj", b + "mlp.W_out": p + "experts.down_proj",
                        **{b + tl: p + hf for tl, hf in MOE_NORMS.items()}})
        if cfg.d_ple:
            out.update({b + tl: p + hf for tl, hf in PLE.items()})
    return out


def read(folder: Path, raw: dict, name: str | None = None, progress=None) -> Checkpoint:
    return llama.read(folder, raw, name, progress, family=sys.modules[__name__])
