"""Build the parity fixtures of issue 37's families (Qwen3.5, Gemma 4, SmolLM3, OLMo 3) in `tests/data/`.

Run it with the torch venv (never a dependency of tracer or its tests):

    .venv/bin/python tools/make_new_family_fixtures.py                 # torch 2.13.0 CPU, transformers 5.24.0
    .venv/bin/python tools/make_new_family_fixtures.py qwen3-5-tiny    # only the named ones

Each folder is written as tools/make_family_fixtures.py writes its own (config.json and model.safetensors
exactly as `save_pretrained(safe_serialization=True)` writes them, tokenizer.json, reference.npz with that
tool's arrays for prompts k = 0, 1; `attentions_k` holds only the softmax-attention layers, listed in
`attention_layers`), and reference.npz holds, besides:
- every family: inv_freq_{type} [d_head / 2] and attention_scaling_{type} (the rotary frequencies and
  cos/sin factor transformers computed for each layer type: "default", or "full_attention" and
  "sliding_attention");
- Qwen3.5, for its linear-attention (Gated DeltaNet) layers `linear_layers` [linear_layer]:
  linear_conv_in_k [linear_layer, pos, conv_dim] (in_proj_qkv's output, the convolution's input),
  linear_conv_tail_k [linear_layer, kernel - 1, conv_dim] (its last kernel - 1 rows: what a cache keeps),
  linear_q_k, linear_k_k [linear_layer, pos, k_head, d_k] and linear_v_k [linear_layer, pos, v_head, d_v]
  (after the convolution and SiLU, before the L2 norm), linear_beta_k and linear_g_k [linear_layer, pos,
  v_head] (β = sigmoid(b); g = -exp(A_log)·softplus(a + dt_bias), the log of the decay),
  linear_state_k [linear_layer, pos, v_head, d_k, d_v] (the state after each position, from a
  token-by-token loop through transformers' own torch_recurrent_gated_delta_rule), linear_core_out_k
  [linear_layer, pos, v_head, d_v] (the read-out before the gated norm), linear_z_k (the gate's input) and
  linear_gated_out_k [linear_layer, pos, v_head, d_v] (after the gated RMS norm: out_proj's input);
  full_gate_k [full_layer, pos, head, d_head] (the full-attention layers' output gate before its sigmoid);
  step_state_k [linear_layer, v_head, d_k, d_v] (the state the cache holds after the cached step);
- Gemma 4: per_layer_inputs_k [layer, pos, d_ple] (what each layer receives), per_layer_token_k (the
  per-layer embedding's share, × √d_ple) and per_layer_proj_k (the normed projection of the embedding),
  kv_source [layer] (the layer whose keys and values each layer attends with: itself, or the layer it
  shares them from).
Every weight is random (seeded) as the family tool makes them (norm gains 1 + N(0, 0.2), Q/K norm gains
`qk_gain` × that), and besides: Gemma 4's layer scalars 1 + N(0, 0.2); Qwen3.5's linear layers with
decays exp(g) mostly between 0.5 and 0.99 (A = exp(A_log) ~ U(0.05, 0.5), dt_bias ~ N(0, 0.5), in_proj_a
halved) and convolution taps N(0, 0.5), so that the state neither vanishes nor explodes over a prompt
(checked: each position's state has a norm within [0.05, 20]). The script checks transformers against
itself: the chunked prefill against the token-by-token recurrence (outputs within 1e-5, and with
chunk_size 4 too), the cached state and convolution tail against the recurrence. Run twice, the files are
byte for byte the same (compare sha256sum).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import (Gemma4ForCausalLM, Gemma4TextConfig, Olmo3Config, Olmo3ForCausalLM, Qwen3_5ForCausalLM,
                          Qwen3_5TextConfig, SmolLM3Config, SmolLM3ForCausalLM)
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen35
from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX as QWEN35_REGEX

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_family_fixtures import DATA, PROMPTS, build, reference_arrays, save  # noqa: E402

FAMILIES = {
    "qwen3-5-tiny": dict(  # Qwen3.5 text: layers linear, full, linear, full (full_attention_interval 2); full attention
        # with the sigmoid output gate (q_proj 2 × wide), (1 + w) Q/K norms, rotary on a quarter of each head (8 of 32);
        # Gated DeltaNet with 2 key heads shared by 4 value heads (d_k = d_v = 8: llama.cpp's loader takes both from
        # ssm.state_size), a causal convolution of 4; tied
        cls=Qwen3_5ForCausalLM, tokenizer="qwen3.5-like", seed=40, qk_gain=1.0,  # the gain is 1 + w: about 2
        config=Qwen3_5TextConfig(vocab_size=1024, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_conv_kernel_dim=4,
                                 linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
                                 linear_num_value_heads=4, max_position_embeddings=128, rms_norm_eps=1e-6,
                                 tie_word_embeddings=True, bos_token_id=None, eos_token_id=1019, initializer_range=0.15,
                                 layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
                                 full_attention_interval=2,
                                 rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                                  "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                                                  "mrope_interleaved": True})),
    "gemma4-tiny": dict(  # Gemma 4 text: per-layer inputs (8 per layer), layers sliding, sliding, full, sliding, full with
        # the last 2 sharing keys and values (layer 3 reuses layer 1's, layer 4 layer 2's), K = V on the full layers
        # (attention_k_eq_v: no v_proj, 1 key/value head), head size 32 on full layers and 16 on sliding ones, a window
        # of 6 (shorter than the prompts), proportional RoPE on a quarter of the full heads, double-wide MLPs on the
        # sharing layers, plain-weight norms, value norm, layer scalars, logits soft-capped at 10; SentencePiece-style
        cls=Gemma4ForCausalLM, tokenizer="sentencepiece/sp-llama.json", seed=43, qk_gain=0.7,
        config=Gemma4TextConfig(vocab_size=600, hidden_size=64, intermediate_size=64, num_hidden_layers=5,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                                num_global_key_value_heads=1, attention_k_eq_v=True, num_kv_shared_layers=2,
                                hidden_size_per_layer_input=8, vocab_size_per_layer_input=600, use_double_wide_mlp=True,
                                max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=True,
                                bos_token_id=1, eos_token_id=2, pad_token_id=0, sliding_window=6,
                                final_logit_softcapping=10.0, initializer_range=0.15,
                                layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                             "sliding_attention", "full_attention"],
                                rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                 "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0,
                                                                    "partial_rotary_factor": 0.25}})),
    "gemma4-moe-tiny": dict(  # Gemma 4 with experts beside each MLP (enable_moe_block, as the 26B-A4B): a dense GeGLU
        # of 48 and 8 GeGLU experts of 24, 2 per token, the router reading the stream through its own RMS norm × scale
        # / √d_model, renormalized top-2 weights × each expert's own scale; layers sliding, sliding, full (K = V), no
        # per-layer inputs, no shared keys and values; norms, router scales and expert scales drawn away from 1
        cls=Gemma4ForCausalLM, tokenizer="sentencepiece/sp-llama.json", seed=45, qk_gain=0.7,
        config=Gemma4TextConfig(vocab_size=600, hidden_size=64, intermediate_size=48, num_hidden_layers=3,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                                num_global_key_value_heads=1, attention_k_eq_v=True, num_kv_shared_layers=0,
                                hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=8, top_k_experts=2,
                                moe_intermediate_size=24, max_position_embeddings=128, rms_norm_eps=1e-6,
                                tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                                sliding_window=6, final_logit_softcapping=10.0, initializer_range=0.15,
                                layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                                rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                 "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0,
                                                                    "partial_rotary_factor": 0.25}})),
    "smollm3-tiny": dict(  # SmolLM3: Llama with no rotary on every 4th layer (no_rope_layers [1, 1, 1, 0]: layer 3 is
        # NoPE; llama.cpp hard-codes that step of 4), GQA, tied, rope_theta 2e6
        cls=SmolLM3ForCausalLM, tokenizer="llama3-like.json", seed=42,
        config=SmolLM3Config(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                             rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=768, eos_token_id=769,
                             pad_token_id=None, initializer_range=0.15, no_rope_layers=[1, 1, 1, 0],
                             rope_parameters={"rope_type": "default", "rope_theta": 2000000.0})),
    "olmo3-tiny": dict(  # OLMo 3: OLMo 2's block (norms after attention and MLP, Q and K normed whole) with sliding
        # windows of 8 on layers 0-2 (shorter than the prompts) and YaRN (factor 8, original 4096: pairs 0-1
        # unscaled, 2-3 blended, 4-7 divided by 8; attention factor 1.2079) on the full layer 3 only
        cls=Olmo3ForCausalLM, tokenizer="gpt2-like.json", seed=44,
        config=Olmo3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768,
                           rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=None, eos_token_id=511,
                           pad_token_id=None, initializer_range=0.15, sliding_window=8,
                           layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
                           rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 500000.0},
                                            "full_attention": {"rope_type": "yarn", "rope_theta": 500000.0,
                                                               "factor": 8.0, "original_max_position_embeddings": 4096,
                                                               "attention_factor": 1.2079441541679836,
                                                               "beta_fast": 32.0, "beta_slow": 1.0}})),
}
STATE_NORM = (0.05, 20.0)  # each position's state (Frobenius norm per head) stays within this


def build_new(family: dict) -> torch.nn.Module:
    """The family tool's weights, then: Gemma 4's layer scalars, Qwen3.5's gates and convolution."""
    model = build(family)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(1.0 + 0.2 * torch.randn_like(b))
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.05, 0.5).log())
            elif name.endswith("linear_attn.dt_bias"):
                p.copy_(0.5 * torch.randn_like(p))
            elif name.endswith("linear_attn.in_proj_a.weight"):
                p.mul_(0.5)
            elif name.endswith("linear_attn.conv1d.weight"):
                p.copy_(0.5 * torch.randn_like(p))
            elif name.endswith(("layernorm.weight", "model.norm.weight")) and model.config.model_type == "qwen3_5_text":
                p.sub_(1.0)  # stored w = N(0, 0.2): the gain 1 + w about 1, as Qwen3.5's zero-centred norms store it
            elif name.endswith(("router.scale", "router.per_expert_scale", "layernorm_1.weight", "layernorm_2.weight")):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))  # Gemma 4's MoE block: scales that matter
    return model.eval()


def qwen35_tokenizer(folder: Path) -> None:
    """qwen2-like.json with Qwen3.5's split pattern (marks joined to letters: [\\p{L}\\p{M}]+), the structure
    Qwen3_5Tokenizer builds; checked against that class on strings where the two patterns differ."""
    from transformers.models.qwen3_5.tokenization_qwen3_5 import Qwen3_5Tokenizer

    tok = json.loads((DATA / "tokenizers" / "qwen2-like.json").read_text())
    tok["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": QWEN35_REGEX}
    (folder / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False, indent=2))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in tok["model"]["merges"]]
    ref = Qwen3_5Tokenizer(vocab=tok["model"]["vocab"], merges=merges)
    mine = Tokenizer.from_file(str(folder / "tokenizer.json"))
    for text in ["ñe\u0301e\u0301 cafe\u0301!!\n\n  x", "Ча\u0301й 12345 — 'll 've\t\tend", "\u0915\u093f\u0924\u093e\u092c 😀a\u0308b"]:
        assert mine.encode(text).ids == ref._tokenizer.encode(text).ids, text


def save_new(model: torch.nn.Module, folder: Path, tokenizer: str) -> None:
    if tokenizer == "qwen3.5-like":
        save(model, folder, "qwen2-like.json")
        qwen35_tokenizer(folder)
    else:
        save(model, folder, tokenizer)


def _rotary(model, arrays: dict) -> None:
    emb = model.model.rotary_emb
    for kind in ("default", "full_attention", "sliding_attention"):
        inv = getattr(emb, "inv_freq" if kind == "default" else f"{kind}_inv_freq", None)
        if inv is not None:
            arrays[f"inv_freq_{kind}"] = inv.numpy().astype(np.float32)
            scale = getattr(emb, "attention_scaling" if kind == "default" else f"{kind}_attention_scaling")
            arrays[f"attention_scaling_{kind}"] = np.array(scale, dtype=np.float32)


def _recurrence(q, k, v, g, beta):
    """transformers' torch_recurrent_gated_delta_rule run one token at a time from a zero state: [pos, head,
    d_k, d_v] states and [pos, head, d_v] outputs (q, k: [1, pos, k_head, d_k]; v [1, pos, v_head, d_v])."""
    state, states, outs = None, [], []
    for t in range(q.shape[1]):
        out, state = qwen35.torch_recurrent_gated_delta_rule(
            q[:, t : t + 1], k[:, t : t + 1], v[:, t : t + 1], g=g[:, t : t + 1], beta=beta[:, t : t + 1],
            initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)
        states.append(state[0].clone())
        outs.append(out[0, 0])
    return torch.stack(states), torch.stack(outs)


def qwen35_arrays(model, ids: torch.Tensor, step: torch.Tensor, k: int) -> dict:
    """The linear layers' inside (see the module's docstring), with transformers checked against itself."""
    layers = [l for l, t in enumerate(model.config.layer_types) if t == "linear_attention"]
    full = [l for l, t in enumerate(model.config.layer_types) if t == "full_attention"]
    seen: dict[str, list] = {}
    handles = []

    def keep(name):
        return lambda m, args, out: seen.setdefault(name, []).append(out[0].detach().clone())

    for l in layers:
        attn = model.model.layers[l].linear_attn
        handles += [attn.in_proj_qkv.register_forward_hook(keep(f"conv_in.{l}")),
                    attn.in_proj_z.register_forward_hook(keep(f"z.{l}")),
                    attn.norm.register_forward_hook(lambda m, args, out, l=l: seen.setdefault(f"gated.{l}", []).append(
                        (args[0].detach().clone(), out.detach().clone())))]
    for l in full:
        handles.append(model.model.layers[l].self_attn.q_proj.register_forward_hook(keep(f"q_proj.{l}")))
    chunk = qwen35.torch_chunk_gated_delta_rule
    calls: list = []

    def recording(query, key, value, g, beta, **kw):
        calls.append(dict(q=query.clone(), k=key.clone(), v=value.clone(), g=g.clone(), beta=beta.clone()))
        return chunk(query, key, value, g=g, beta=beta, **kw)

    qwen35.torch_chunk_gated_delta_rule = recording
    try:
        with torch.no_grad():
            cache = model(ids, use_cache=True).cache
            kept = {l: (cache.layers[l].recurrent_states[0][0].clone(), cache.layers[l].conv_states[0][0].clone())
                    for l in layers}  # the step below changes the cache in place
            model(step[None], cache=cache, use_cache=True)
    finally:
        qwen35.torch_chunk_gated_delta_rule = chunk
        for h in handles:
            h.remove()
    n, K = ids.shape[1], model.config.linear_conv_kernel_dim
    out = {name: [] for name in ("conv_in", "conv_tail", "q", "k", "v", "beta", "g", "state", "core_out", "z", "gated_out")}
    out["step_state"] = []
    for i, l in enumerate(layers):
        c = calls[i]  # the prompt's pass calls the chunked rule once per linear layer, in order
        with torch.no_grad():
            states, outs = _recurrence(c["q"], c["k"], c["v"], c["g"], c["beta"])
            short, short_state = chunk(c["q"], c["k"], c["v"], g=c["g"], beta=c["beta"], chunk_size=4,
                                       output_final_state=True, use_qk_l2norm_in_kernel=True)
        core_in, gated = seen[f"gated.{l}"][0]  # the gated norm's input: the chunked rule's output, [pos·v_head, d_v]
        core = core_in.reshape(n, -1, core_in.shape[-1])
        assert torch.allclose(outs, core, atol=1e-5), f"layer {l}: chunked prefill ≠ token-by-token recurrence"
        assert torch.allclose(short[0], core, atol=1e-5), f"layer {l}: chunk_size 4 ≠ chunk_size 64"
        assert torch.allclose(short_state[0], states[-1], atol=1e-5)
        assert torch.allclose(kept[l][0], states[-1], atol=1e-5), "the cache's state"
        norms = states.flatten(2).norm(dim=-1)  # [pos, head]
        assert STATE_NORM[0] < norms.min() and norms.max() < STATE_NORM[1], f"layer {l}: state norms {norms}"
        conv_in = seen[f"conv_in.{l}"][0]  # [pos, conv_dim]
        tail = conv_in[-(K - 1):]
        assert torch.allclose(kept[l][1][:, -(K - 1):].T, tail), "the cache's convolution inputs"
        out["conv_in"].append(conv_in)
        out["conv_tail"].append(tail)
        out["q"].append(c["q"][0])
        out["k"].append(c["k"][0])
        out["v"].append(c["v"][0])
        out["beta"].append(c["beta"][0])
        out["g"].append(c["g"][0])
        out["state"].append(states)
        out["core_out"].append(core)
        out["z"].append(seen[f"z.{l}"][0].reshape(n, -1, core.shape[-1]))
        out["gated_out"].append(gated.reshape(n, -1, core.shape[-1]))
        out["step_state"].append(cache.layers[l].recurrent_states[0][0].clone())
        decay = c["g"][0].exp()
        print(f"  layer {l}: decay {decay.min():.3f}…{decay.max():.3f} (median {decay.median():.3f}), β "
              f"{c['beta'].min():.3f}…{c['beta'].max():.3f}, state norms {norms.min():.3f}…{norms.max():.3f}")
    arrays = {f"linear_{name}_{k}" if name != "step_state" else f"step_state_{k}": torch.stack(v).numpy().astype(np.float32)
              for name, v in out.items()}
    d = model.config.head_dim
    arrays[f"full_gate_{k}"] = torch.stack([seen[f"q_proj.{l}"][0].reshape(n, -1, 2 * d)[..., d:] for l in full]).numpy()
    return arrays


def gemma4_arrays(model, ids: torch.Tensor, k: int) -> dict:
    """What each layer receives as its per-layer input, its two shares, and which layer's KV each layer uses."""
    seen: dict[str, torch.Tensor] = {}
    handles = [layer.register_forward_pre_hook(lambda m, args, l=l: seen.__setitem__(l, args[1].detach().clone()))
               for l, layer in enumerate(model.model.layers)]
    handles.append(model.model.per_layer_projection_norm.register_forward_hook(
        lambda m, args, out: seen.__setitem__("proj", out.detach().clone())))
    try:
        with torch.no_grad():
            model(ids)
            token = model.model.get_per_layer_inputs(ids)  # [1, pos, layer, d_ple]
    finally:
        for h in handles:
            h.remove()
    L = model.config.num_hidden_layers
    given = torch.stack([seen[l][0] for l in range(L)])  # [layer, pos, d_ple]
    assert torch.allclose(given, ((seen["proj"] + token) * 2**-0.5)[0].transpose(0, 1), atol=1e-6)
    return {f"per_layer_inputs_{k}": given.numpy(), f"per_layer_token_{k}": token[0].transpose(0, 1).numpy(),
            f"per_layer_proj_{k}": seen["proj"][0].transpose(0, 1).numpy()}


def gemma4_moe_arrays(model, ids: torch.Tensor, k: int) -> dict:
    """Each layer's router: its probabilities over every expert, the chosen experts and their final weights."""
    seen: dict[int, tuple] = {}
    handles = [layer.router.register_forward_hook(lambda m, args, out, l=l: seen.__setitem__(l, out))
               for l, layer in enumerate(model.model.layers)]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in handles:
            h.remove()
    L = model.config.num_hidden_layers
    return {f"router_probs_{k}": torch.stack([seen[l][0] for l in range(L)]).numpy(),  # [layer, pos, expert]
            f"expert_weights_{k}": torch.stack([seen[l][1] for l in range(L)]).numpy(),  # [layer, pos, k]
            f"expert_indices_{k}": torch.stack([seen[l][2] for l in range(L)]).numpy().astype(np.int64)}


def gemma4_hub_config_agrees(folder: Path) -> None:
    """transformers 5.24 writes a Gemma 4's global head size and key/value heads as per_layer_config; the Hub's
    files say global_head_dim and num_global_key_value_heads. Both must give the same layers."""
    saved = json.loads((folder / "config.json").read_text())
    hub = {k: v for k, v in saved.items() if k != "per_layer_config"}
    first = saved["layer_types"].index("full_attention")
    hub["global_head_dim"] = saved["per_layer_config"][str(first)]["head_dim"]
    hub["num_global_key_value_heads"] = saved["per_layer_config"][str(first)]["num_key_value_heads"]
    a, b = Gemma4TextConfig(**saved), Gemma4TextConfig(**hub)
    for l in range(a.num_hidden_layers):
        assert (a.per_layer_config[l].head_dim, a.per_layer_config[l].num_key_value_heads) == (
            b.per_layer_config[l].head_dim, b.per_layer_config[l].num_key_value_heads), l


def kv_source(config) -> np.ndarray:
    """transformers' rule (Gemma4TextConfig.kv_sharing_modes): the last num_kv_shared_layers layers "reuse" the
    keys and values of the last earlier ("store") layer of their own type; every other layer uses its own."""
    modes, types = config.kv_sharing_modes, config.layer_types
    stores = {types[l]: l for l, m in enumerate(modes) if m == "store"}
    return np.array([stores[types[l]] if m == "reuse" else l for l, m in enumerate(modes)], dtype=np.int64)


def reference_new(cls, folder: Path) -> dict:
    model, arrays = reference_arrays(cls, folder)
    cfg = model.config
    types = cfg.layer_types if getattr(cfg, "layer_types", None) else ["full_attention"] * cfg.num_hidden_layers
    arrays["attention_layers"] = np.array([l for l, t in enumerate(types) if t != "linear_attention"], dtype=np.int64)
    _rotary(model, arrays)
    for k in range(len(PROMPTS)):
        ids = torch.tensor(arrays[f"input_ids_{k}"])[None]
        if cfg.model_type == "qwen3_5_text":
            arrays["linear_layers"] = np.array([l for l, t in enumerate(types) if t == "linear_attention"], dtype=np.int64)
            arrays.update(qwen35_arrays(model, ids, torch.tensor(arrays[f"step_input_{k}"]), k))
        if cfg.model_type == "gemma4_text":
            gemma4_hub_config_agrees(folder)
            arrays["kv_source"] = kv_source(cfg)
            if cfg.enable_moe_block:
                arrays.update(gemma4_moe_arrays(model, ids, k))
            else:
                arrays.update(gemma4_arrays(model, ids, k))
    np.savez_compressed(folder / "reference.npz", **arrays)
    return {k: v.tolist() for k, v in arrays.items() if k.startswith(("greedy_ids_", "input_ids_"))}


def main(only: list[str]) -> int:
    """Every fixture, or only those named on the command line (the others are left as they are)."""
    import tokenizers
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    summary = {"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
    for name, family in FAMILIES.items():
        if only and name not in only:
            continue
        print(name)
        save_new(build_new(family), DATA / name, family["tokenizer"])
        summary[name] = reference_new(family["cls"], DATA / name)
    print(json.dumps(summary))
    for folder in [n for n in FAMILIES if n in summary]:
        for f in sorted((DATA / folder).iterdir()):
            print(f"{f.stat().st_size:>10,}  {folder}/{f.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
