"""Gemma 4 GGUF files (architecture `gemma4`, as llama.cpp's convert_hf_to_gguf.py `Gemma4Model` writes them)
→ the config.json object of a gemma4_text folder, which `tracer.readers.gemma4` then checks and reads:

  - the layer types from `attention.sliding_window_pattern` (true on each sliding-window layer);
  - per-layer sizes from the metadata's arrays: `attention.head_count_kv` (one per layer, or one for all),
    `feed_forward_length` (one per layer: the layers that share keys and values may be twice as wide,
    `use_double_wide_mlp`), `attention.key_length` (the full layers' head size) and `key_length_swa`;
  - `attention.shared_kv_layers`, `embedding_length_per_layer_input`, `final_logit_softcapping`, the window,
    `rope.freq_base` (full layers) and `rope.freq_base_swa` (sliding ones);
  - K = V where the full layers that compute their own keys have no `attn_v` tensor (`attention_k_eq_v`);
  - proportional RoPE from the `rope_freqs` tensor the converter adds: a divisor of 1 for each pair that
    turns, 1e30 (no turn) for the rest (`with_rope`).

The norms are stored as w (Gemma 4's gain; nothing is added to them), `layer_scalar` as
`blk.{l}.layer_output_scale.weight`, the per-layer inputs' tensors under `per_layer_*` and `blk.{l}.inp_gate`,
`proj`, `post_norm`; the experts beside each MLP (`expert_count`) as the converter writes them: `ffn_gate_inp`
(and `.scale`: the router's scale), `ffn_gate_up_exps`, `ffn_down_exps` (and `.scale`: each expert's scale), the norms
`pre_ffw_norm_2`, `post_ffw_norm_1`, `post_ffw_norm_2`. Core module: numpy and the standard library.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import TracerError
from .llama import check_layer_count

A = "gemma4"
TOP = {"per_layer_token_embd.weight": "model.embed_tokens_per_layer.weight",
       "per_layer_model_proj.weight": "model.per_layer_model_projection.weight",
       "per_layer_proj_norm.weight": "model.per_layer_projection_norm.weight"}
LAYER = {"post_attention_norm.weight": "post_attention_layernorm.weight", "ffn_norm.weight": "pre_feedforward_layernorm.weight",
         "post_ffw_norm.weight": "post_feedforward_layernorm.weight", "inp_gate.weight": "per_layer_input_gate.weight",
         "proj.weight": "per_layer_projection.weight", "post_norm.weight": "post_per_layer_input_norm.weight",
         "layer_output_scale.weight": "layer_scalar",
         # the experts beside each MLP (`enable_moe_block`): the converter's names (router.scale and per_expert_scale its own)
         "ffn_gate_inp.weight": "router.proj.weight", "ffn_gate_inp.scale": "router.scale",
         "ffn_down_exps.scale": "router.per_expert_scale", "ffn_gate_up_exps.weight": "experts.gate_up_proj",
         "ffn_down_exps.weight": "experts.down_proj", "pre_ffw_norm_2.weight": "pre_feedforward_layernorm_2.weight",
         "post_ffw_norm_1.weight": "post_feedforward_layernorm_1.weight",
         "post_ffw_norm_2.weight": "post_feedforward_layernorm_2.weight"}
ROPE_FREQS = "rope_freqs.weight"
NO_TURN = 1e29  # a rope_freqs divisor at least this large leaves its pair unturned (the converter writes 1e30)


def _per_layer(meta: dict, key: str, n: int, where: Path) -> list[int]:
    """A metadata value given once or once per layer, as one whole number per layer."""
    value = meta.get(key)
    value = value.tolist() if isinstance(value, np.ndarray) else value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = [int(value)] * n
    if not isinstance(value, list) or len(value) != n or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1 for v in value):
        raise TracerError(f"{where}: metadata {key!r} must be a whole number ≥ 1 or one per layer ({n}), got "
                          f"{str(value)[:80]}")
    return [int(v) for v in value]


def config_json(meta: dict, tensors: dict, where: Path, value) -> dict:
    """The gemma4_text config.json of a `gemma4` file (`value(key, kind, default)`: a checked metadata value)."""
    n = value(f"{A}.block_count", int, None)
    check_layer_count(n, where, f"metadata '{A}.block_count'")
    pattern = meta.get(f"{A}.attention.sliding_window_pattern")
    pattern = pattern.tolist() if isinstance(pattern, np.ndarray) else pattern
    if not isinstance(pattern, list) or len(pattern) != n or not all(isinstance(v, (bool, np.bool_)) for v in pattern):
        raise TracerError(f"{where}: metadata '{A}.attention.sliding_window_pattern' must be one true/false per layer "
                          f"({n}), got {str(pattern)[:80]}")
    types = ["sliding_attention" if s else "full_attention" for s in pattern]
    shared = value(f"{A}.attention.shared_kv_layers", int, 0)
    first = n - shared
    kv, ff = _per_layer(meta, f"{A}.attention.head_count_kv", n, where), _per_layer(meta, f"{A}.feed_forward_length", n, where)
    full_dim = value(f"{A}.attention.key_length", int, None)
    swa_dim = value(f"{A}.attention.key_length_swa", int, full_dim)
    sliding = [l for l, t in enumerate(types) if t == "sliding_attention"] or list(range(n))
    if len({kv[l] for l in sliding}) > 1:
        raise TracerError(f"{where}: metadata '{A}.attention.head_count_kv' gives the sliding layers different key/value "
                          f"head counts {sorted({kv[l] for l in sliding})}; tracer reads one")
    width = ff[0]
    if any(ff[l] != width for l in range(first)) or any(ff[l] not in (width, 2 * width) for l in range(first, n)) or \
            len(set(ff[first:])) > 1:
        raise TracerError(f"{where}: metadata '{A}.feed_forward_length' {ff} is not Gemma 4's (one width, or twice it on "
                          f"the {shared} layers that share keys and values)")
    for key, want in ((f"{A}.rope.dimension_count", full_dim), (f"{A}.rope.dimension_count_swa", swa_dim)):
        if meta.get(key) is not None and value(key, int, None) != want:
            raise TracerError(f"{where}: metadata {key!r} is {meta[key]}, not the head's {want}; Gemma 4 turns whole heads "
                              f"(rope_freqs leaves pairs out)")
    own_full = [l for l, t in enumerate(types) if t == "full_attention" and l < first]
    k_eq_v = bool(own_full) and not any(f"blk.{l}.attn_v.weight" in tensors for l in own_full)
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = value(f"{A}.vocab_size", int, len(tokens) if tokens is not None else None)
    raw = {
        "model_type": "gemma4_text", "num_hidden_layers": n, "hidden_size": value(f"{A}.embedding_length", int, None),
        "num_attention_heads": value(f"{A}.attention.head_count", int, None), "num_key_value_heads": kv[sliding[0]],
        "head_dim": swa_dim, "intermediate_size": width, "use_double_wide_mlp": ff[-1] == 2 * width and shared > 0,
        "max_position_embeddings": value(f"{A}.context_length", int, None), "layer_types": types,
        "rms_norm_eps": value(f"{A}.attention.layer_norm_rms_epsilon", float, None), "vocab_size": vocab,
        "vocab_size_per_layer_input": vocab, "tie_word_embeddings": "output.weight" not in tensors,
        "hidden_size_per_layer_input": value(f"{A}.embedding_length_per_layer_input", int, 0) if
        meta.get(f"{A}.embedding_length_per_layer_input") else None,
        "num_kv_shared_layers": shared, "attention_k_eq_v": k_eq_v,
        "per_layer_config": {str(l): {"head_dim": full_dim, "num_key_value_heads": kv[l]}
                             for l, t in enumerate(types) if t == "full_attention"},
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": value(f"{A}.rope.freq_base", float, 1e6)},
                            "sliding_attention": {"rope_type": "default",
                                                  "rope_theta": value(f"{A}.rope.freq_base_swa", float, 10000.0)}},
        "final_logit_softcapping": value(f"{A}.final_logit_softcapping", float, None)
        if meta.get(f"{A}.final_logit_softcapping") else None,
    }
    if "sliding_attention" in types:
        raw["sliding_window"] = value(f"{A}.attention.sliding_window", int, None)
    if meta.get(f"{A}.expert_count"):  # the experts beside each MLP (the 26B-A4B)
        raw.update({"enable_moe_block": True, "num_experts": value(f"{A}.expert_count", int, None),
                    "top_k_experts": value(f"{A}.expert_used_count", int, None),
                    "moe_intermediate_size": value(f"{A}.expert_feed_forward_length", int, None)})
    return raw


def with_rope(f, raw: dict, where: Path) -> dict:
    """`raw` with the full layers' RoPE as the file's rope_freqs says: proportional, the pairs whose divisor is 1
    turning and those whose divisor is 1e30 not (no rope_freqs: every pair turns, transformers' "default")."""
    info = f.tensors.get(ROPE_FREQS)
    if info is None:
        return raw
    dim = raw["per_layer_config"][next(iter(raw["per_layer_config"]))]["head_dim"] if raw["per_layer_config"] else raw["head_dim"]
    if tuple(info.shape) != (dim // 2,):
        raise TracerError(f"{where}: tensor {ROPE_FREQS!r} has shape {list(info.shape)}; the full layers' heads of {dim} "
                          f"need {dim // 2} (one per pair)")
    factors = [float(x) for x in f.dequantize(ROPE_FREQS)]
    turned = next((i for i, x in enumerate(factors) if x != 1.0), len(factors))
    if not all(x >= NO_TURN for x in factors[turned:]):
        raise TracerError(f"{where}: tensor {ROPE_FREQS!r} is not Gemma 4's proportional RoPE (a divisor of 1 for the "
                          f"first pairs, 1e30 for the rest); got {factors[:8]}…")
    full = {**raw["rope_parameters"]["full_attention"], "rope_type": "proportional", "partial_rotary_factor": 2 * turned / dim}
    return {**raw, "rope_parameters": {**raw["rope_parameters"], "full_attention": full}}
