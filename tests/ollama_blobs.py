"""The fixtures written as Ollama's own converter wrote its blobs before it moved onto llama.cpp (ollama/ollama
convert/, before 9db4bdbad of May 2026): its keys for each architecture (`KV`), its tensor names (`Replacements`,
applied as Go's strings.NewReplacer applies them), its repacking (Llama's Q/K rows, Gemma's 1 + w norms,
gpt-oss's MXFP4 blocks from the checkpoint's own layout, Mixtral's stacked experts), metadata keys sorted and
given the architecture's prefix as its WriteGGUF does, tensors ordered by block then name.

    gemma3-1b      Gemma3ForCausalLM, March–December 2025 (2e54d72fc): rope.local/global.freq_base, the
                   final soft-cap cmp.Or(cap, 30)
    gemma3-1b-new  Gemma3ForCausalLM since December 2025 (d2f334c1f): rope.local.freq_base and rope.freq_base,
                   the layer types as sliding_window_pattern, no soft-cap
    gemma3-4b      Gemma3ForConditionalGeneration (the 4B, 12B, 27B): no ε, no RoPE key, context_length 131072,
                   the vision tower's keys and tensors (v.*, mm.*), the image tokens left in the tokenizer
    embeddinggemma the gemma3-1b-new blob with the sentence-transformers projection (dense.0/1.weight)
    gemma2, qwen2, llama, phi3, olmo3 (from olmo2-tiny, as Olmo3ForCausalLM), mixtral, gptoss

The tokenizer is the fixture's, as the tests' llama.cpp writer gives it (`_gguf_vocab`, with `pre`): the compat
layer changes a tokenizer's pre-tokenizer, end token and length, not how Ollama spelled its tokens. Matrices
stay F32 (Ollama wrote F16 and `ollama create -q` quantized them: storage is not what the compat layer
translates), gpt-oss's experts MXFP4 as every gpt-oss blob holds them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .conftest import _gguf_vocab, _llama_cpp_permute, add_gguf_value

# Replacements() of each converter (convert_<arch>.go), in their order
COMMON = ["lm_head", "output", "model.embed_tokens", "token_embd", "model.norm", "output_norm", "model.layers", "blk",
          "input_layernorm", "attn_norm", "self_attn.q_proj", "attn_q", "self_attn.k_proj", "attn_k",
          "self_attn.v_proj", "attn_v", "self_attn.o_proj", "attn_output", "mlp.gate_proj", "ffn_gate",
          "mlp.down_proj", "ffn_down", "mlp.up_proj", "ffn_up"]
GEMMA = COMMON + ["self_attn.q_norm", "attn_q_norm", "self_attn.k_norm", "attn_k_norm",
                  "post_attention_layernorm", "post_attention_norm", "pre_feedforward_layernorm", "ffn_norm",
                  "post_feedforward_layernorm", "post_ffw_norm", "multi_modal_projector", "mm"]
REPLACE = {"llama": COMMON + ["post_attention_layernorm", "ffn_norm"],
           "qwen2": COMMON + ["post_attention_layernorm", "ffn_norm"],
           "phi3": COMMON + ["self_attn.qkv_proj", "attn_qkv", "mlp.gate_up_proj", "ffn_up", "post_attention_layernorm", "ffn_norm"],
           "gemma2": GEMMA, "gemma3": GEMMA,
           "olmo3": COMMON + ["self_attn.q_norm", "attn_q_norm", "self_attn.k_norm", "attn_k_norm",
                              "post_attention_layernorm", "post_attention_norm", "post_feedforward_layernorm", "post_ffw_norm"],
           "mixtral": COMMON + ["post_attention_layernorm", "ffn_norm", "block_sparse_moe.gate", "ffn_gate_inp",
                                "block_sparse_moe.experts.", "."],
           "gptoss": ["lm_head", "output", "model.embed_tokens", "token_embd", "model.layers", "blk", "input_layernorm",
                      "attn_norm", "self_attn.q_proj", "attn_q", "self_attn.k_proj", "attn_k", "self_attn.v_proj", "attn_v",
                      "self_attn.o_proj", "attn_out", "self_attn.sinks", "attn_sinks", "post_attention_layernorm",
                      "ffn_norm", "mlp.router", "ffn_gate_inp", "mlp.experts.gate_up_proj_", "ffn_gate_up_exps.",
                      "mlp.experts.down_proj_", "ffn_down_exps.", "model.norm", "output_norm"]}
VISION = {"v.patch_embedding.weight": (32, 3, 2, 2), "v.blk.0.attn_q.weight": (32, 32), "v.post_layernorm.weight": (32,),
          "mm.mm_input_projection.weight": (32, 64), "mm.mm_soft_emb_norm.weight": (32,)}


def go_replace(name: str, pairs: list[str]) -> str:
    """Go's strings.NewReplacer(pairs...).Replace(name): left to right, at each place the first pair (in
    argument order) whose old string starts there, no overlaps."""
    out, i = [], 0
    olds = list(zip(pairs[::2], pairs[1::2]))
    while i < len(name):
        for old, new in olds:
            if old and name.startswith(old, i):
                out.append(new)
                i += len(old)
                break
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def _theta(cfg: dict, default: float) -> float:
    rope = cfg.get("rope_parameters") or {}
    rope = rope.get("full_attention", rope)
    return float(rope.get("rope_theta", cfg.get("rope_theta", default)))


def _kv(arch: str, variant: str, cfg: dict) -> dict:
    """The converter's KV() for the fixture's config.json (keys without the architecture's prefix get it)."""
    L, d, f, H = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"]
    KV, eps, ctx = cfg.get("num_key_value_heads") or H, cfg["rms_norm_eps"], cfg["max_position_embeddings"]
    head = cfg.get("head_dim") or d // H
    base = {"block_count": L, "embedding_length": d, "feed_forward_length": f, "attention.head_count": H,
            "attention.head_count_kv": KV, "general.file_type": 1, "general.quantization_version": 2}
    if arch == "gemma3" and variant == "gemma3-4b":  # the multimodal branch: text_config's sizes, no ε, no RoPE key
        return {**base, "context_length": 131072, "attention.sliding_window": cfg["sliding_window"],
                "attention.key_length": head, "attention.value_length": head, "mm.tokens_per_image": 256,
                "vision.block_count": 1, "vision.embedding_length": 32, "vision.feed_forward_length": 64,
                "vision.image_size": 4, "vision.patch_size": 2, "vision.num_channels": 3, "vision.attention.head_count": 2,
                "vision.attention.layer_norm_epsilon": 1e-6}
    if arch == "gemma3":
        kv = {**base, "context_length": ctx, "attention.layer_norm_rms_epsilon": eps, "attention.key_length": head,
              "attention.value_length": head, "attention.sliding_window": cfg["sliding_window"],
              "rope.local.freq_base": 10000.0}
        if variant == "gemma3-1b":  # cmp.Or(p.FinalLogitSoftcap, 30), rope_global_base_freq
            return {**kv, "final_logit_softcapping": float(cfg.get("final_logit_softcapping") or 30.0),
                    "rope.global.freq_base": _theta(cfg, 1e6)}
        return {**kv, "rope.freq_base": _theta(cfg, 1e6),
                "attention.sliding_window_pattern": [t == "sliding_attention" for t in cfg["layer_types"]]}
    if arch == "gemma2":
        return {**base, "context_length": ctx, "attention.layer_norm_rms_epsilon": eps, "attention.key_length": head,
                "attention.value_length": head, "attention.sliding_window": cfg["sliding_window"],
                "attn_logit_softcapping": float(cfg["attn_logit_softcapping"]),
                "final_logit_softcapping": float(cfg["final_logit_softcapping"]), "tokenizer.ggml.eot_token_id": 107,
                "tokenizer.ggml.middle_token_id": 68, "tokenizer.ggml.prefix_token_id": 67, "tokenizer.ggml.suffix_token_id": 69}
    if arch == "qwen2":
        return {**base, "context_length": ctx, "rope.freq_base": _theta(cfg, 1e6), "attention.layer_norm_rms_epsilon": eps}
    if arch in ("llama", "mixtral"):
        kv = {**base, "vocab_size": cfg["vocab_size"], "context_length": ctx, "rope.dimension_count": d // H,
              "rope.freq_base": _theta(cfg, 1e4), "attention.layer_norm_rms_epsilon": eps}
        if cfg.get("head_dim"):
            kv.update({"attention.head_dim": head, "attention.key_length": head, "attention.value_length": head})
        if arch == "mixtral":
            kv.update({"expert_count": cfg["num_local_experts"], "expert_used_count": cfg["num_experts_per_tok"]})
        return kv
    if arch == "phi3":
        return {**base, "context_length": ctx, "attention.layer_norm_rms_epsilon": eps, "rope.dimension_count": d // H,
                "rope.freq_base": _theta(cfg, 1e4), "rope.scaling.original_context_length": cfg["original_max_position_embeddings"],
                "attention.sliding_window": cfg["sliding_window"]}
    if arch == "olmo3":
        return {**base, "context_length": ctx, "rope.freq_base": _theta(cfg, 1e4), "attention.layer_norm_rms_epsilon": eps,
                "attention.sliding_window": 4096, "attention.sliding_window_pattern": list(cfg["_layer_types"])}
    if arch == "gptoss":
        rope = cfg["rope_parameters"]
        return {**base, "general.file_type": 4, "context_length": ctx, "expert_count": cfg["num_local_experts"],
                "expert_used_count": cfg["num_experts_per_tok"], "attention.key_length": head,
                "attention.value_length": head, "attention.layer_norm_rms_epsilon": eps,
                "attention.sliding_window": cfg["sliding_window"], "rope.freq_base": rope["rope_theta"],
                "rope.scaling.factor": rope["factor"], "rope.scaling.original_context_length": rope["original_max_position_embeddings"],
                "tokenizer.ggml.add_bos_token": False, "tokenizer.ggml.add_eos_token": False,
                "tokenizer.ggml.eos_token_ids": [cfg["eos_token_id"]]}  # (its vocabulary's own ids, 199999, …, in a real blob)
    raise ValueError(arch)


def _llama3_factors(cfg: dict, dim: int) -> np.ndarray:
    """convert_llama.go's rope_freqs, in its float32 arithmetic (λ in float64)."""
    rope, theta = cfg["rope_parameters"], np.float32(_theta(cfg, 1e4))
    factor, low, high = (np.float32(rope.get(k, dflt)) for k, dflt in (("factor", 8.0), ("low_freq_factor", 1.0),
                                                                        ("high_freq_factor", 4.0)))
    original = np.float32(rope.get("original_max_position_embeddings", 8192))
    out = []
    for i in range(0, dim, 2):
        lam = 2 * np.pi * np.power(float(theta), i / dim)
        if lam < float(original / high):
            out.append(np.float32(1.0))
        elif lam > float(original / low):
            out.append(factor)
        else:
            smooth = (original / np.float32(lam) - low) / (high - low)
            out.append(np.float32(1.0) / ((np.float32(1) - smooth) / factor + smooth))
    return np.array(out, np.float32)


def _ggml_to_hf_mxfp4(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's MXFP4 blocks (a scale byte, then 16 bytes: number j in the low nibble of byte j, j + 16 in its
    high nibble) as the checkpoint stores them: scales, and blocks whose byte k holds numbers 2k, 2k + 1."""
    scales, qs = q[..., 0], q[..., 1:]
    nib = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # the 32 numbers' 4-bit codes in order
    return scales, (nib[..., 0::2] | (nib[..., 1::2] << 4)).astype(np.uint8)


def _ollama_mxfp4(scales: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """convert_gptoss.go's mxfp4.WriteTo: each 16-byte block "a1b2c3 … x7y8z9 → 71xa82yb93zc", the scale first."""
    a, b = blocks[..., :8], blocks[..., 8:]
    out = np.empty_like(blocks)
    out[..., 0::2] = (a & 0x0F) | ((b << 4) & 0xF0)
    out[..., 1::2] = (a >> 4) | (b & 0xF0)
    return np.concatenate([scales[..., None], out], axis=-1)


def _gptoss_tensors(t: dict) -> dict:
    """Ollama's gpt-oss tensors from the fixture: its float experts given the checkpoint's MXFP4 form first."""
    import gguf

    out = {}
    for name, a in t.items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            rows = np.ascontiguousarray(a.transpose(0, 2, 1), dtype=np.float32)  # [expert, out, in]
            q = gguf.quants.quantize(rows, gguf.GGMLQuantizationType.MXFP4)
            q = q.reshape(*rows.shape[:2], rows.shape[2] // 32, 17)
            scales, blocks = _ggml_to_hf_mxfp4(q)
            packed = _ollama_mxfp4(scales, blocks).reshape(*rows.shape[:2], -1)
            stem = go_replace(name + "_", REPLACE["gptoss"]).rstrip(".")  # blk.L.ffn_gate_up_exps / ffn_down_exps
            if "gate_up" in stem:  # the interleaved rows: even the gate's, odd up's
                out[stem.replace("gate_up", "gate") + ".weight"] = ("MXFP4", packed[:, 0::2])
                out[stem.replace("gate_up", "up") + ".weight"] = ("MXFP4", packed[:, 1::2])
            else:
                out[stem + ".weight"] = ("MXFP4", packed)
        elif name.endswith("gate_up_proj_bias"):
            stem = go_replace(name, REPLACE["gptoss"])  # blk.L.ffn_gate_up_exps.bias
            out[stem.replace("gate_up", "gate")] = a[:, 0::2]
            out[stem.replace("gate_up", "up")] = a[:, 1::2]
        else:
            out[go_replace(name, REPLACE["gptoss"])] = a
    return out


def _tensors(arch: str, variant: str, cfg: dict, t: dict) -> dict:
    """Ollama's tensors for the fixture: name → float32 array, or (type name, raw bytes [rows, bytes])."""
    if arch == "gptoss":
        return _gptoss_tensors(t)
    H, KV = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    out = {}
    if arch == "llama" and (cfg.get("rope_parameters") or {}).get("rope_type") == "llama3":
        out["rope_freqs.weight"] = _llama3_factors(cfg, cfg["hidden_size"] // H)
    if arch == "phi3":  # written for every Phi-3: its long and short factors, empty without rope_scaling
        out["rope_factors_long.weight"] = out["rope_factors_short.weight"] = np.zeros(0, np.float32)
    if arch == "mixtral":  # mergeTensors: blk.L.*.w1 → ffn_gate_exps, w2 → ffn_up_exps, w3 → ffn_down_exps
        for l in range(cfg["num_hidden_layers"]):
            for w, g in (("w1", "ffn_gate_exps"), ("w2", "ffn_up_exps"), ("w3", "ffn_down_exps")):
                out[f"blk.{l}.{g}.weight"] = np.stack([t[f"model.layers.{l}.block_sparse_moe.experts.{e}.{w}.weight"]
                                                       for e in range(cfg["num_local_experts"])])
        t = {k: v for k, v in t.items() if ".experts." not in k}
    for hf, a in t.items():
        name = go_replace(hf, REPLACE[arch])
        a = np.ascontiguousarray(a, dtype=np.float32)
        if arch in ("llama", "mixtral") and name.endswith(("attn_q.weight", "attn_k.weight")):  # llamaModel.repack
            a = _llama_cpp_permute(a, H if "attn_q" in name else KV)
        if arch in ("gemma2", "gemma3") and name.endswith("_norm.weight"):  # gemmaModel.addOne
            a = a + np.float32(1)
        out[name] = a
    if variant == "gemma3-4b":
        out.update({n: np.full(s, 0.5, np.float32) for n, s in VISION.items()})
    if variant == "embeddinggemma":
        d = cfg["hidden_size"]
        out.update({"dense.0.weight": np.zeros((3 * d, d), np.float32), "dense.1.weight": np.zeros((d, 3 * d), np.float32)})
    return out


def _order(name: str) -> tuple:
    """ggml.Tensor.block(): the block number of blk.N.*, else -1 (then by name)."""
    parts = name.split(".")
    return (int(parts[1]) if parts[0] == "blk" and parts[1].isdigit() else -1, name)


def write_ollama_blob(folder: Path, out: Path, variant: str, pre: str = "default", layer_types=None, drop=()) -> Path:
    """The fixture `folder` as Ollama's converter `variant` wrote it (see the module's list), `pre` its
    tokenizer.ggml.pre; olmo3's `layer_types`: one true (sliding) / false per layer; `drop`: keys (without
    the architecture's prefix) left out, as a damaged blob would."""
    import gguf
    from safetensors.numpy import load_file

    cfg = json.loads((folder / "config.json").read_text())
    tok = json.loads((folder / "tokenizer.json").read_text())
    t = load_file(str(folder / "model.safetensors"))
    arch = {"gemma3-1b": "gemma3", "gemma3-1b-new": "gemma3", "gemma3-4b": "gemma3", "embeddinggemma": "gemma3"}.get(variant, variant)
    if layer_types is not None:
        cfg["_layer_types"] = layer_types
    w = gguf.GGUFWriter(str(out), "llama" if arch == "mixtral" else arch)
    _gguf_vocab(w, cfg, tok, pre)
    prefix = w.kv_data[0]["general.architecture"].value + "."
    kv = _kv(arch, variant, cfg)
    if variant == "gemma3-4b":  # Ollama left the image tokens (<image_soft_token>, …) in the tokenizer
        tokens = w.kv_data[0]["tokenizer.ggml.tokens"].value + [f"<image_{i}>" for i in range(64)]
        kv.update({"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": w.kv_data[0]["tokenizer.ggml.token_type"].value + [3] * 64,
                   "tokenizer.ggml.add_padding_token": False, "tokenizer.ggml.add_unknown_token": False})
    for k, v in kv.items():
        if k in drop:
            continue
        key = k if k.startswith(("general.", "tokenizer.")) else prefix + k
        w.kv_data[0].pop(key, None)
        add_gguf_value(w, key, v)
    w.kv_data[0] = dict(sorted(w.kv_data[0].items()))  # WriteGGUF: keys sorted
    for name, a in sorted(_tensors(arch, variant, cfg, t).items(), key=lambda x: _order(x[0])):
        if isinstance(a, tuple):  # MXFP4 bytes [.., bytes per row]
            w.add_tensor(name, np.ascontiguousarray(a[1]), raw_dtype=gguf.GGMLQuantizationType[a[0]])
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
