"""A naive decoder written from the equations: loops over positions, heads and keys.

The reference the vectorized `tracer.core.decoder` must agree with. It shares nothing with the
decoder but the parameter names: no einsum, no fused matrices, no masks — a query simply
never looks at later keys (nor, with a sliding window, at keys `window` or more places back).
The Llama switches are written from transformers' modeling_llama.py, one number at a time:
RMS norm, rotate_half RoPE (with the llama3 frequency rule), SwiGLU, key/value heads shared by
groups of query heads (query head h reads key/value head h // (n_heads / n_kv_heads)).
"""

from __future__ import annotations

import math

import numpy as np


def _ln(x, w, b, eps):
    mu = sum(x) / len(x)
    var = sum((xi - mu) ** 2 for xi in x) / len(x)
    normed = np.array([(xi - mu) / math.sqrt(var + eps) for xi in x])
    return normed, (normed * w + b if w is not None else normed)


def _rms(x, w, eps):
    rms = math.sqrt(sum(xi * xi for xi in x) / len(x) + eps)
    normed = np.array([xi / rms for xi in x])
    return normed, normed * w


def _norm(cfg, x, params, name):
    if cfg.norm == "rms":
        return _rms(x, params[name + ".w"], cfg.ln_eps)[1]
    return _ln(x, params[name + ".w"], params[name + ".b"], cfg.ln_eps)[1]


def _gelu(x):
    return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _silu(x):
    return x / (1 + math.exp(-x))


def _inv_freq(cfg, i):
    """transformers' inv_freq[i] (pair i of a head), with the llama3 rule when rope_scaling says so."""
    f = 1.0 / cfg.rope_theta ** (2 * i / cfg.d_head)
    rs = cfg.rope_scaling
    if not rs:
        return f
    old, low, high, factor = (rs["original_max_position_embeddings"], rs["low_freq_factor"], rs["high_freq_factor"],
                              rs["factor"])
    wavelen = 2 * math.pi / f
    if wavelen < old / high:
        return f
    if wavelen > old / low:
        return f / factor
    smooth = (old / wavelen - low) / (high - low)
    return (1 - smooth) * f / factor + smooth * f


def _rope(cfg, vec, pos):
    """rotate_half RoPE of one head's vector at position `pos`: x·cos + rotate_half(x)·sin."""
    half = cfg.d_head // 2
    out = np.zeros(cfg.d_head)
    for d in range(cfg.d_head):
        i = d % half
        angle = pos * _inv_freq(cfg, i)
        partner = -vec[d + half] if d < half else vec[d - half]
        out[d] = vec[d] * math.cos(angle) + partner * math.sin(angle)
    return out


def naive_forward(cfg, params, tokens):
    """Returns a dict of the values the decoder records, built one number at a time."""
    out = {}
    T = len(tokens)
    H, dh = cfg.n_heads, cfg.d_head
    xs = []
    for p, t in enumerate(tokens):
        x = params["W_E"][t].astype(float).copy()
        if cfg.positional not in ("none", "rope"):
            x = x + params["W_pos"][p]
        xs.append(x)
    xs = np.array(xs)
    for l in range(cfg.n_layers):
        b = f"blocks.{l}."
        out[b + "hook_resid_pre"] = xs.copy()
        hs = []
        for p in range(T):
            hs.append(_norm(cfg, xs[p], params, b + "ln1") if cfg.layer_norm else xs[p])
        KV = cfg.kv_heads
        q = np.zeros((T, H, dh))
        k = np.zeros((T, KV, dh))
        v = np.zeros((T, KV, dh))
        for p in range(T):
            for h in range(H):
                for d in range(dh):
                    q[p, h, d] = sum(hs[p][i] * params[b + "attn.W_Q"][h, i, d] for i in range(cfg.d_model)) + params[b + "attn.b_Q"][h, d]
            for h in range(KV):
                for d in range(dh):
                    k[p, h, d] = sum(hs[p][i] * params[b + "attn.W_K"][h, i, d] for i in range(cfg.d_model)) + params[b + "attn.b_K"][h, d]
                    v[p, h, d] = sum(hs[p][i] * params[b + "attn.W_V"][h, i, d] for i in range(cfg.d_model)) + params[b + "attn.b_V"][h, d]
        out[b + "attn.hook_q"], out[b + "attn.hook_k"], out[b + "attn.hook_v"] = q.copy(), k.copy(), v.copy()
        if cfg.positional == "rope":
            q = np.array([[_rope(cfg, q[p, h], p) for h in range(H)] for p in range(T)])
            k = np.array([[_rope(cfg, k[p, h], p) for h in range(KV)] for p in range(T)])
            out[b + "attn.hook_rot_q"], out[b + "attn.hook_rot_k"] = q, k
        pattern = np.zeros((H, T, T))
        z = np.zeros((T, H, dh))
        for h in range(H):
            kh = h // (H // KV)  # the key/value head this query head reads
            for i in range(T):
                first = 0 if cfg.sliding_window is None else max(0, i - cfg.sliding_window + 1)
                seen = range(first, i + 1)  # a query sees itself and earlier keys only (the last `window`)
                scores = []
                for j in seen:
                    s = sum(q[i, h, d] * k[j, kh, d] for d in range(dh))
                    if cfg.scale_scores:
                        s = s / math.sqrt(dh)
                    scores.append(s)
                m = max(scores)
                exps = [math.exp(s - m) for s in scores]
                total = sum(exps)
                for e, j in zip(exps, seen):
                    pattern[h, i, j] = e / total
                for d in range(dh):
                    z[i, h, d] = sum(pattern[h, i, j] * v[j, kh, d] for j in seen)
        attn_out = np.zeros((T, cfg.d_model))
        for p in range(T):
            for m_ in range(cfg.d_model):
                attn_out[p, m_] = sum(
                    z[p, h, d] * params[b + "attn.W_O"][h, d, m_] for h in range(H) for d in range(dh)
                ) + params[b + "attn.b_O"][m_]
        out[b + "attn.hook_pattern"] = pattern
        out[b + "attn.hook_z"] = z
        out[b + "hook_attn_out"] = attn_out
        xs = xs + attn_out if cfg.residual else attn_out
        if cfg.mlp:
            out[b + "hook_resid_mid"] = xs.copy()
            mlp_out = np.zeros((T, cfg.d_model))
            for p in range(T):
                h_in = _norm(cfg, xs[p], params, b + "ln2") if cfg.layer_norm else xs[p]
                pre = [sum(h_in[i] * params[b + "mlp.W_in"][i, j] for i in range(cfg.d_model)) + params[b + "mlp.b_in"][j]
                       for j in range(cfg.d_mlp)]
                if cfg.mlp == "swiglu":
                    gate = [sum(h_in[i] * params[b + "mlp.W_gate"][i, j] for i in range(cfg.d_model)) for j in range(cfg.d_mlp)]
                    post = [_silu(g) * u for g, u in zip(gate, pre)]
                else:
                    post = [_gelu(a) for a in pre]
                for m_ in range(cfg.d_model):
                    mlp_out[p, m_] = sum(post[j] * params[b + "mlp.W_out"][j, m_] for j in range(cfg.d_mlp)) + params[b + "mlp.b_out"][m_]
            out[b + "hook_mlp_out"] = mlp_out
            xs = xs + mlp_out if cfg.residual else mlp_out
        out[b + "hook_resid_post"] = xs.copy()
    final = np.array([_norm(cfg, x, params, "ln_final") if cfg.layer_norm else x for x in xs])
    out["unembed.hook_in"] = final
    W_U = params["W_E"].T if cfg.tied_unembed else params["W_U"]
    logits = np.zeros((T, cfg.d_vocab))
    for p in range(T):
        for t in range(cfg.d_vocab):
            logits[p, t] = sum(final[p, i] * W_U[i, t] for i in range(cfg.d_model)) + params["b_U"][t]
    out["logits"] = logits
    return out


def loss_slope(cfg, params: dict, tokens, name: str, i: int, eps: float = 1e-6) -> float:
    """The next-token loss's central difference along entry i of `params[name]` (flattened: a C-ordered array,
    whose entry is changed in place and put back)."""
    flat = params[name].reshape(-1)
    keep = flat[i]
    flat[i] = keep + eps
    up = next_token_loss(cfg, params, tokens)
    flat[i] = keep - eps
    down = next_token_loss(cfg, params, tokens)
    flat[i] = keep
    return (up - down) / (2 * eps)


def ids(ref, k: int) -> list[int]:
    """Prompt k's token ids in a fixture's reference.npz (`input_ids_{k}`), as Python ints."""
    return [int(i) for i in ref[f"input_ids_{k}"]]


def grads_match_central_differences(cfg, params: dict, tokens, names, seed: int, embeddings=("W_E",)) -> None:
    """`tracer.core.backward.loss_and_grads` against central differences: the loss equals `next_token_loss`, every
    parameter has a gradient, and three entries of each named parameter (of an embedding: in the tokens' rows) agree."""
    import pytest
    from tracer.core.backward import loss_and_grads

    loss, grads = loss_and_grads(cfg, params, tokens)
    assert loss == pytest.approx(next_token_loss(cfg, params, tokens), rel=1e-10)
    assert set(grads) == set(params)
    rng = np.random.default_rng(seed)
    for name in names:
        flat, width = params[name].reshape(-1), params[name].shape[-1]
        picks = [int(rng.choice(tokens)) * width + int(rng.integers(width)) for _ in range(3)] if name in embeddings \
            else rng.choice(flat.size, min(3, flat.size), replace=False)
        for i in picks:
            slope = loss_slope(cfg, params, tokens, name, i)
            assert grads[name].reshape(-1)[i] == pytest.approx(slope, rel=1e-4, abs=1e-8), (name, i)


def next_token_loss(cfg, params: dict, tokens) -> float:
    """The mean next-token loss written out from tracer's logits one row at a time, independently of
    `tracer.core.backward.cross_entropy`: mean −log p(next) (what the central-difference tests differentiate)."""
    from tracer.core.decoder import forward

    logits = forward(cfg, params, tokens)  # [..., pos, d_vocab]
    t = np.asarray(tokens)
    lg = logits.reshape(-1, t.shape[-1], logits.shape[-1])  # [batch, pos, d_vocab]
    tt = t.reshape(-1, t.shape[-1])  # [batch, pos]
    total, count = 0.0, 0
    for b in range(tt.shape[0]):
        for p in range(tt.shape[1] - 1):
            row = lg[b, p]
            total -= row[tt[b, p + 1]] - (row.max() + np.log(np.exp(row - row.max()).sum()))
            count += 1
    return total / count


# --------------------------------------------------------------------------- mixture-of-experts families
#
# A second naive forward, for the MoE fixtures of tests/data (tools/make_moe_fixtures.py), written from
# transformers 5.24's modeling_gpt_oss.py, modeling_qwen3_moe.py, modeling_olmoe.py, modeling_mixtral.py and
# modeling_qwen2_moe.py. It reads the checkpoint's own tensor names and layouts (never tracer's), keeps every
# number in float64 and walks positions, heads, keys and experts in plain loops (a vector's products with a
# matrix are numpy's): router → top-k → each chosen expert's MLP → the weighted sum. RoPE's frequencies are
# worked out as transformers does for folders or as llama.cpp (ggml's rope_yarn) does for GGUF files.

SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0  # gpt-oss's clamped SwiGLU (config swiglu_alpha, swiglu_limit)


def moe_folder(folder) -> tuple[dict, dict]:
    """A fixture folder's config.json and its tensors (float64, by the checkpoint's own names)."""
    import json
    from pathlib import Path

    from safetensors.numpy import load_file

    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text())
    return cfg, {k: v.astype(np.float64) for k, v in load_file(str(folder / "model.safetensors")).items()}


def _rope_parameters(cfg: dict) -> dict:
    """transformers 5's rope_parameters, or a transformers 4 file's rope_scaling with rope_theta beside it."""
    rp = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    rp.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    rp.setdefault("rope_type", rp.get("type", "default"))
    return rp


def _yarn_range(rp: dict, dim: int, floor_ceil: bool) -> tuple[float, float]:
    """The pairs YaRN ramps between: dim·ln(n_ctx_orig / (2π·rotations)) / (2·ln base) for beta_fast and beta_slow
    rotations, floored and ceiled when `floor_ceil` (llama.cpp always; transformers unless truncate is false)."""
    base, orig = rp["rope_theta"], rp["original_max_position_embeddings"]

    def dim_of(rotations):
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_of(rp.get("beta_fast") or 32), dim_of(rp.get("beta_slow") or 1)
    if floor_ceil:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def rope_frequencies(cfg: dict, rule: str = "transformers") -> tuple[list, float]:
    """Each rotated pair's frequency and the factor cos and sin are multiplied by, as transformers computes them for
    a folder (`rule="transformers"`: its YaRN honours `truncate`) or as llama.cpp does for a GGUF file
    (`rule="llama.cpp"`: ggml_rope_yarn_corr_dims floors the low end and ceils the high end, always)."""
    rp = _rope_parameters(cfg)
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    base = rp["rope_theta"]
    plain = [1.0 / base ** (2 * i / dim) for i in range(dim // 2)]
    if rp["rope_type"] in ("default", None):
        return plain, 1.0
    assert rp["rope_type"] == "yarn", rp
    factor = rp["factor"]
    floor_ceil = rule == "llama.cpp" or rp.get("truncate", True)
    low, high = _yarn_range(rp, dim, floor_ceil)
    span = max(high - low, 0.001)  # both guard a zero span this way (transformers: max += 0.001)
    freqs = []
    for i, f in enumerate(plain):
        keep = 1 - min(1.0, max(0.0, (i - low) / span))  # 1: the pair keeps its frequency (extrapolation)
        freqs.append(f / factor * (1 - keep) + f * keep)
    scale = rp.get("attention_factor") or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
    return freqs, scale


def _rotate(vec, pos, freqs, scale):
    """rotate_half RoPE of one head's vector: pair i is (vec[i], vec[i + half]), turned by pos·freq_i, times `scale`."""
    half = len(vec) // 2
    out = np.zeros(len(vec))
    for i in range(half):
        c, s = math.cos(pos * freqs[i]) * scale, math.sin(pos * freqs[i]) * scale
        out[i] = vec[i] * c - vec[i + half] * s
        out[i + half] = vec[i + half] * c + vec[i] * s
    return out


def _rms1(x, w, eps):
    return x / math.sqrt(float(np.mean(x * x)) + eps) * w


def _silu1(x):
    return x / (1 + np.exp(-x))


def _linear(w, b, x):
    return w @ x + (b if b is not None else 0.0)


def _moe_attention(cfg, w, p, xs, freqs, scale, layer):
    """One layer's attention over all positions: per position, per head, per key, with gpt-oss's sinks joining the
    softmax and its sliding window. Returns (out [pos, d_model], pattern [head, q, k], sink share [head, pos])."""
    T, H, KV = len(xs), cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    dh = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps, kind = cfg["rms_norm_eps"], cfg["model_type"]
    window = cfg.get("sliding_window") if (cfg.get("layer_types") or ["full_attention"] * (layer + 1))[layer] == "sliding_attention" else None
    a = p + "self_attn."
    q, k, v = np.zeros((T, H, dh)), np.zeros((T, KV, dh)), np.zeros((T, KV, dh))
    for t in range(T):
        qt = _linear(w[a + "q_proj.weight"], w.get(a + "q_proj.bias"), xs[t])
        kt = _linear(w[a + "k_proj.weight"], w.get(a + "k_proj.bias"), xs[t])
        vt = _linear(w[a + "v_proj.weight"], w.get(a + "v_proj.bias"), xs[t])
        if kind == "olmoe":  # OLMoE: Q and K RMS-normalised whole, before the split into heads
            qt, kt = _rms1(qt, w[a + "q_norm.weight"], eps), _rms1(kt, w[a + "k_norm.weight"], eps)
        for h in range(H):
            qh = qt[h * dh:(h + 1) * dh]
            if kind == "qwen3_moe":  # Qwen3-MoE: each head normalised on its own
                qh = _rms1(qh, w[a + "q_norm.weight"], eps)
            q[t, h] = _rotate(qh, t, freqs, scale)
        for h in range(KV):
            kh = kt[h * dh:(h + 1) * dh]
            if kind == "qwen3_moe":
                kh = _rms1(kh, w[a + "k_norm.weight"], eps)
            k[t, h], v[t, h] = _rotate(kh, t, freqs, scale), vt[h * dh:(h + 1) * dh]
    pattern, sink_share, z = np.zeros((H, T, T)), np.zeros((H, T)), np.zeros((T, H, dh))
    for h in range(H):
        kh = h // (H // KV)
        for i in range(T):
            seen = range(0 if window is None else max(0, i - window + 1), i + 1)
            scores = [float(q[i, h] @ k[j, kh]) / math.sqrt(dh) for j in seen]
            sink = [float(w[a + "sinks"][h])] if a + "sinks" in w else []  # gpt-oss: one more logit, no value
            m = max(scores + sink)
            exps = [math.exp(s - m) for s in scores]
            total = sum(exps) + sum(math.exp(s - m) for s in sink)
            for e, j in zip(exps, seen):
                pattern[h, i, j] = e / total
                z[i, h] += pattern[h, i, j] * v[j, kh]
            sink_share[h, i] = 1 - sum(exps) / total
    out = np.array([_linear(w[a + "o_proj.weight"], w.get(a + "o_proj.bias"), z[t].reshape(-1)) for t in range(T)])
    return out, pattern, sink_share


def _expert(cfg, w, p, e, x):
    """Expert e of the layer whose MLP names start with `p`, on one position's vector x: its output before weighting."""
    kind = cfg["model_type"]
    if kind == "gpt_oss":
        gate_up = x @ w[p + "experts.gate_up_proj"][e] + w[p + "experts.gate_up_proj_bias"][e]  # [2·d_mlp], interleaved
        out = np.zeros(w[p + "experts.down_proj"].shape[2])
        for j in range(len(gate_up) // 2):
            gate = min(gate_up[2 * j], SWIGLU_LIMIT)
            up = min(max(gate_up[2 * j + 1], -SWIGLU_LIMIT), SWIGLU_LIMIT)
            glu = gate / (1 + math.exp(-SWIGLU_ALPHA * gate))
            out += (up + 1) * glu * w[p + "experts.down_proj"][e][j]
        return out + w[p + "experts.down_proj_bias"][e]
    if kind == "mixtral":
        names = (f"experts.{e}.w1.weight", f"experts.{e}.w3.weight", f"experts.{e}.w2.weight")
    else:
        names = (f"experts.{e}.gate_proj.weight", f"experts.{e}.up_proj.weight", f"experts.{e}.down_proj.weight")
    return _swiglu(w, p, names, x)


def _swiglu(w, p, names, x):
    gate, up, down = (w[p + n] for n in names)
    return down @ (_silu1(gate @ x) * (up @ x))


def _route(cfg, w, p, x):
    """The router's logits [expert] and its choice: [(expert, weight)], most weight first, as the family applies it."""
    k, kind = cfg["num_experts_per_tok"], cfg["model_type"]
    router = p + ("router." if kind == "gpt_oss" else "gate.")
    logits = _linear(w[router + "weight"], w.get(router + "bias"), x)
    order = sorted(range(len(logits)), key=lambda e: -logits[e])[:k]  # top k (softmax keeps the order)
    if kind == "gpt_oss":  # top-k of the logits, then a softmax over those k
        m = max(logits[e] for e in order)
        exps = [math.exp(logits[e] - m) for e in order]
        return logits, [(e, x_ / sum(exps)) for e, x_ in zip(order, exps)]
    m = max(logits)
    total = sum(math.exp(s - m) for s in logits)
    chosen = [(e, math.exp(logits[e] - m) / total) for e in order]  # softmax over all, then the top k
    if kind == "mixtral" or cfg.get("norm_topk_prob"):
        kept = sum(x_ for _, x_ in chosen)
        chosen = [(e, x_ / kept) for e, x_ in chosen]
    return logits, chosen


def _is_moe_layer(cfg, layer) -> bool:
    if cfg["model_type"] in ("qwen2_moe", "qwen3_moe"):
        return layer not in (cfg.get("mlp_only_layers") or []) and (layer + 1) % (cfg.get("decoder_sparse_step") or 1) == 0
    return True


def moe_forward(cfg: dict, w: dict, tokens, rope: str = "transformers") -> dict:
    """The MoE families' decoder, naively: a dict of reference.npz's arrays (without the prompt suffix) — logits,
    hidden_states (the last after the final norm, as transformers gives it), attentions, sink_share, and per MoE
    layer router_logits, expert_indices, expert_weights, expert_outputs (shared_expert_out, shared_expert_gate for
    Qwen2-MoE), mlp_out per layer, moe_layers. `rope`: "transformers" (a folder) or "llama.cpp" (a GGUF file)."""
    T, L = len(tokens), cfg["num_hidden_layers"]
    eps, kind = cfg["rms_norm_eps"], cfg["model_type"]
    freqs, scale = rope_frequencies(cfg, rope)
    xs = np.array([w["model.embed_tokens.weight"][t] for t in tokens])
    out = {"hidden_states": [xs.copy()], "attentions": [], "sink_share": [], "mlp_out": [], "moe_layers": [],
           "router_logits": [], "expert_indices": [], "expert_weights": [], "expert_outputs": [],
           "shared_expert_out": [], "shared_expert_gate": []}
    for l in range(L):
        p = f"model.layers.{l}."
        normed = np.array([_rms1(x, w[p + "input_layernorm.weight"], eps) for x in xs])
        attn, pattern, sink = _moe_attention(cfg, w, p, normed, freqs, scale, l)
        out["attentions"].append(pattern)
        out["sink_share"].append(sink)
        xs = xs + attn
        mlp = p + ("block_sparse_moe." if kind == "mixtral" else "mlp.")
        mlp_out = np.zeros_like(xs)
        moe = _is_moe_layer(cfg, l)
        rows = {"router_logits": [], "expert_indices": [], "expert_weights": [], "expert_outputs": [],
                "shared_expert_out": [], "shared_expert_gate": []}
        for t in range(T):
            x = _rms1(xs[t], w[p + "post_attention_layernorm.weight"], eps)
            if not moe:  # a dense layer (Qwen2-MoE's mlp_only_layers)
                mlp_out[t] = _swiglu(w, mlp, ("gate_proj.weight", "up_proj.weight", "down_proj.weight"), x)
                continue
            logits, chosen = _route(cfg, w, mlp, x)
            each = [_expert(cfg, w, mlp, e, x) for e, _ in chosen]
            for (_, weight), y in zip(chosen, each):
                mlp_out[t] += weight * y
            if mlp + "shared_expert_gate.weight" in w:  # Qwen2-MoE's always-on expert behind a sigmoid gate
                shared = _swiglu(w, mlp + "shared_expert.", ("gate_proj.weight", "up_proj.weight", "down_proj.weight"), x)
                gate = 1 / (1 + math.exp(-float(w[mlp + "shared_expert_gate.weight"][0] @ x)))
                mlp_out[t] += gate * shared
                rows["shared_expert_out"].append(shared)
                rows["shared_expert_gate"].append(gate)
            rows["router_logits"].append(logits)
            rows["expert_indices"].append([e for e, _ in chosen])
            rows["expert_weights"].append([x_ for _, x_ in chosen])
            rows["expert_outputs"].append(each)
        if moe:
            out["moe_layers"].append(l)
            for key, rows_ in rows.items():
                if rows_:
                    out[key].append(np.array(rows_))
        out["mlp_out"].append(mlp_out)
        xs = xs + mlp_out
        out["hidden_states"].append(xs.copy())
    final = np.array([_rms1(x, w["model.norm.weight"], eps) for x in xs])
    out["hidden_states"][-1] = final
    W_U = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    out["logits"] = np.array([W_U @ x for x in final])
    return {k: np.array(v) for k, v in out.items() if not isinstance(v, list) or v}


def moe_greedy(cfg: dict, w: dict, tokens, n: int = 8, rope: str = "transformers") -> tuple[list, dict]:
    """n greedy tokens by moe_forward over the whole sequence each step (no cache): (the new ids, the last pass,
    over the prompt and the first n − 1 new tokens, whose last n rows of logits chose them)."""
    seq = list(tokens)
    for _ in range(n):
        out = moe_forward(cfg, w, seq, rope)
        seq.append(int(np.argmax(out["logits"][-1])))
    return seq[len(tokens):], out


# --------------------------------------------------------------------------- Qwen3.5, Gemma 4, SmolLM3, OLMo 3
#
# A naive forward for the fixtures of tools/make_new_family_fixtures.py, written from transformers 5.24's
# modeling_qwen3_5.py, modeling_gemma4.py, modeling_smollm3.py and modeling_olmo3.py. It reads the checkpoint's
# own names and layouts (never tracer's), keeps every number in float64 and walks positions, heads and keys in
# plain loops (a vector's product with a matrix is numpy's). Qwen3.5's Gated DeltaNet is the recurrence itself,
# one token and one value head at a time: the causal convolution over the last `kernel` inputs, SiLU, L2-normed
# q and k, the decay exp(g) with g = -exp(A_log)·softplus(a + dt_bias), β = sigmoid(b), then
#     S ← exp(g)·S;   S ← S + k ⊗ β(v − Sᵀk);   o = Sᵀq / √d_k     (S: [d_k, d_v]),
# as transformers' torch_recurrent_gated_delta_rule writes it, and o through the gated RMS norm w·rms(o)·silu(z).


def new_family_folder(folder) -> tuple[dict, dict]:
    """A fixture folder's config.json and its tensors (float64, by the checkpoint's own names)."""
    import json
    from pathlib import Path

    from safetensors.numpy import load_file

    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text())
    return cfg, {k: v.astype(np.float64) for k, v in load_file(str(folder / "model.safetensors")).items()}


def _nf_rms(x, w=None, eps=1e-6, plus_one=False):
    """x / √(mean x² + eps), times w (Qwen3.5's zero-centred norms: times 1 + w; Gemma 4's value norm: no w)."""
    y = x / math.sqrt(float(np.dot(x, x)) / len(x) + eps)
    if w is None:
        return y
    return y * (1.0 + w) if plus_one else y * w


def _nf_silu(x):
    return x / (1.0 + np.exp(-x))


def _nf_gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def nf_inv_freq(rp: dict, head_dim: int) -> tuple[np.ndarray, float]:
    """One layer type's rotary frequencies (one per rotated pair) and the factor on cos and sin: "default" (with
    partial_rotary_factor: the first head_dim·factor dimensions rotate), "proportional" (Gemma 4: the first
    head_dim·factor/2 pairs over the whole head, the rest frequency 0) and "yarn" (OLMo 3, truncate true)."""
    base, kind = rp["rope_theta"], rp.get("rope_type", "default")
    if kind == "proportional":
        rotated = int(rp.get("partial_rotary_factor", 1.0) * head_dim // 2)
        f = [base ** (-2 * i / head_dim) if i < rotated else 0.0 for i in range(head_dim // 2)]
        return np.array(f) / rp.get("factor", 1.0), 1.0
    dim = int(head_dim * rp.get("partial_rotary_factor", 1.0))
    f = np.array([base ** (-2 * i / dim) for i in range(dim // 2)])
    if kind == "default":
        return f, 1.0
    assert kind == "yarn", kind
    factor, orig = rp["factor"], rp["original_max_position_embeddings"]

    def pair_of(rotations):  # the pair whose wavelength fits `rotations` times in the original context
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_of(rp.get("beta_fast") or 32), pair_of(rp.get("beta_slow") or 1)
    if rp.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    high = high + 0.001 if low == high else high
    out = []
    for i, fi in enumerate(f):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)  # 0: keep the frequency, 1: divide it by the factor
        out.append(fi / factor * ramp + fi * (1 - ramp))
    scale = rp.get("attention_factor") or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
    return np.array(out), float(scale)


def _nf_rope(vec, pos, freqs, scale):
    """rotate_half RoPE on the first 2·len(freqs) numbers of one head's vector (the rest pass unchanged)."""
    half, out = len(freqs), vec.copy()
    for i in range(half):
        c, s = math.cos(pos * freqs[i]) * scale, math.sin(pos * freqs[i]) * scale
        a, b = vec[i], vec[i + half]
        out[i], out[i + half] = a * c - b * s, b * c + a * s
    return out


def _nf_attend(q, keys, values, seen, scaling):
    """One query head over the keys it sees: softmax(q·k · scaling) and the weighted sum of values."""
    scores = [float(np.dot(q, keys[j])) * scaling for j in seen]
    m = max(scores)
    e = [math.exp(s - m) for s in scores]
    total = sum(e)
    weights = [x / total for x in e]
    return weights, sum(w * values[j] for w, j in zip(weights, seen))


def _nf_mlp(h, p, pre, act):
    gate, up = p[pre + "mlp.gate_proj.weight"] @ h, p[pre + "mlp.up_proj.weight"] @ h
    return p[pre + "mlp.down_proj.weight"] @ (act(gate) * up)


def _nf_rope_tables(cfg: dict) -> dict:
    """{layer type: (frequencies, factor)} from config.json (one set per layer type for Gemma 4 and OLMo 3)."""
    rp, types = cfg["rope_parameters"], cfg.get("layer_types") or ["full_attention"] * cfg["num_hidden_layers"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    out = {}
    for kind in set(types) - {"linear_attention"}:
        dim = _nf_gemma4_layer_dims(cfg, types.index(kind))[0] if cfg["model_type"] == "gemma4_text" else head_dim
        out[kind] = nf_inv_freq(rp.get(kind, rp), dim)
    return out


def nf_kv_source(cfg: dict) -> list[int]:
    """Gemma 4's KV sharing: each of the last num_kv_shared_layers layers attends with the keys and values of the
    last layer before them of its own type; the others with their own."""
    L, types = cfg["num_hidden_layers"], cfg["layer_types"]
    first = L - cfg.get("num_kv_shared_layers", 0)
    return [l if l < first else max(j for j in range(first) if types[j] == types[l]) for l in range(L)]


def _nf_gemma4_layer_dims(cfg: dict, l: int) -> tuple[int, int]:
    """A Gemma 4 layer's head size and key/value head count: global layers' from per_layer_config (what
    transformers 5.24 writes) or global_head_dim / num_global_key_value_heads (the Hub's files)."""
    if cfg["layer_types"][l] != "full_attention":
        return cfg["head_dim"], cfg["num_key_value_heads"]
    given = cfg.get("per_layer_config", {}).get(str(l))
    if given:
        return given["head_dim"], given.get("num_key_value_heads", cfg["num_key_value_heads"])
    kv = cfg.get("num_global_key_value_heads") if cfg.get("attention_k_eq_v") else None
    return cfg.get("global_head_dim", 512), kv or cfg["num_key_value_heads"]


def _nf_softmax_attention(cfg, p, pre, hs, l, rope, keys_values=None):
    """One softmax-attention layer for every position: Q/K norms and rotary as the family does them; returns
    (output [pos, d_model], pattern [head, pos, pos], (keys, values) per position for sharing)."""
    T, H, family = len(hs), cfg["num_attention_heads"], cfg["model_type"]
    eps = cfg["rms_norm_eps"]
    if family == "gemma4_text":
        dh, KV = _nf_gemma4_layer_dims(cfg, l)
    else:
        dh, KV = cfg.get("head_dim") or cfg["hidden_size"] // H, cfg["num_key_value_heads"]
    kind = cfg.get("layer_types", ["full_attention"] * (l + 1))[l]
    freqs, scale = rope.get(kind, rope.get("full_attention"))
    use_rope = family != "smollm3" or cfg["no_rope_layers"][l]
    window = cfg.get("sliding_window") if kind == "sliding_attention" else None
    a = pre + "self_attn."
    qs, gates, ks, vs = [], [], [], []
    for t, h in enumerate(hs):
        qa = p[a + "q_proj.weight"] @ h
        if family == "qwen3_5_text":  # per head: dh numbers of query, then dh of its output gate
            qa = qa.reshape(H, 2 * dh)
            gates.append(qa[:, dh:].copy())
            qa = qa[:, :dh]
        ka = p[a + "k_proj.weight"] @ h if a + "k_proj.weight" in p else None
        if family == "olmo3":  # Q and K normed whole, before the split into heads
            qa, ka = _nf_rms(qa, p[a + "q_norm.weight"], eps), _nf_rms(ka, p[a + "k_norm.weight"], eps)
        q = qa.reshape(H, dh)
        if family in ("qwen3_5_text", "gemma4_text"):
            q = np.array([_nf_rms(q[i], p[a + "q_norm.weight"], eps, family == "qwen3_5_text") for i in range(H)])
        qs.append([_nf_rope(q[i], t, freqs, scale) if use_rope else q[i] for i in range(H)])
        if keys_values is not None:
            continue
        k = ka.reshape(KV, dh)
        if a + "v_proj.weight" in p:
            v = (p[a + "v_proj.weight"] @ h).reshape(KV, dh)
        else:  # Gemma 4's K = V layers: the values are the keys' projection
            v = k.copy()
        if family in ("qwen3_5_text", "gemma4_text"):
            k = np.array([_nf_rms(k[i], p[a + "k_norm.weight"], eps, family == "qwen3_5_text") for i in range(KV)])
        if family == "gemma4_text":
            v = np.array([_nf_rms(v[i], None, eps) for i in range(KV)])
        ks.append([_nf_rope(k[i], t, freqs, scale) if use_rope else k[i] for i in range(KV)])
        vs.append(list(v))
    if keys_values is not None:
        ks, vs = keys_values
    scaling = 1.0 if family == "gemma4_text" else 1.0 / math.sqrt(dh)
    pattern, out = np.zeros((H, T, T)), []
    for t in range(T):
        z = []
        for i in range(H):
            kv = i // (H // len(ks[0]))  # the key/value head this query head reads
            seen = range(0 if window is None else max(0, t - window + 1), t + 1)
            w, zi = _nf_attend(qs[t][i], [ks[j][kv] for j in range(T)], [vs[j][kv] for j in range(T)], seen, scaling)
            pattern[i, t, list(seen)] = w
            if family == "qwen3_5_text":
                zi = zi / (1.0 + np.exp(-gates[t][i]))  # the output gate: sigmoid
            z.append(zi)
        out.append(p[a + "o_proj.weight"] @ np.concatenate(z))
    return np.array(out), pattern, (ks, vs)


def _nf_gated_deltanet(cfg, p, pre, hs):
    """Qwen3.5's linear attention for every position, one token and one value head at a time; returns the
    output [pos, d_model] and the inside: states [pos, v_head, d_k, d_v], β, g, conv tail, read-outs."""
    a = pre + "linear_attn."
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, K = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"]
    conv_w = p[a + "conv1d.weight"][:, 0, :]  # [channel, kernel]: tap j multiplies the input j − (K − 1) places back
    A = np.exp(p[a + "A_log"])
    S = np.zeros((nv, dk, dv))
    inputs, rec = [], {name: [] for name in ("state", "beta", "g", "core_out", "gated_out", "q", "k", "v")}
    out = []
    for t, h in enumerate(hs):
        inputs.append(p[a + "in_proj_qkv.weight"] @ h)
        window = [inputs[t - K + 1 + j] if t - K + 1 + j >= 0 else np.zeros_like(inputs[t]) for j in range(K)]
        mixed = _nf_silu(sum(conv_w[:, j] * window[j] for j in range(K)))
        q, k, v = mixed[: nk * dk].reshape(nk, dk), mixed[nk * dk : 2 * nk * dk].reshape(nk, dk), mixed[2 * nk * dk :].reshape(nv, dv)
        z = (p[a + "in_proj_z.weight"] @ h).reshape(nv, dv)
        beta = 1.0 / (1.0 + np.exp(-(p[a + "in_proj_b.weight"] @ h)))
        x = p[a + "in_proj_a.weight"] @ h + p[a + "dt_bias"]
        g = -A * np.log1p(np.exp(x))  # softplus
        o, gated = np.zeros((nv, dv)), np.zeros((nv, dv))
        for i in range(nv):
            kh = i // (nv // nk)  # the query/key head this value head reads
            kn = k[kh] / math.sqrt(float(np.dot(k[kh], k[kh])) + 1e-6)
            qn = q[kh] / math.sqrt(float(np.dot(q[kh], q[kh])) + 1e-6) / math.sqrt(dk)
            S[i] = S[i] * math.exp(g[i])  # decay
            remembered = np.array([sum(S[i][r, c] * kn[r] for r in range(dk)) for c in range(dv)])  # Sᵀk
            delta = beta[i] * (v[i] - remembered)
            for r in range(dk):
                for c in range(dv):
                    S[i][r, c] += kn[r] * delta[c]  # the delta-rule write: S += k ⊗ β(v − Sᵀk)
            o[i] = np.array([sum(S[i][r, c] * qn[r] for r in range(dk)) for c in range(dv)])  # read-out Sᵀq
            gated[i] = _nf_rms(o[i], p[a + "norm.weight"], cfg["rms_norm_eps"]) * _nf_silu(z[i])
        out.append(p[a + "out_proj.weight"] @ gated.reshape(-1))
        for name, value in (("state", S.copy()), ("beta", beta), ("g", g), ("core_out", o), ("gated_out", gated),
                            ("q", q), ("k", k), ("v", v)):
            rec[name].append(value)
    inside = {name: np.array(v) for name, v in rec.items()}
    inside["conv_tail"] = np.array(inputs[-(K - 1):])
    return np.array(out), inside


def _nf_per_layer_inputs(cfg, p, tokens, embeds):
    """Gemma 4's per-layer inputs [layer, pos, d_ple]: (norm(W_proj·e / √d_model) + E_ple[token]·√d_ple) / √2,
    e the scaled embedding, the norm per layer's slice."""
    L, d_ple, eps = cfg["num_hidden_layers"], cfg["hidden_size_per_layer_input"], cfg["rms_norm_eps"]
    out = np.zeros((L, len(tokens), d_ple))
    for t, (tok, e) in enumerate(zip(tokens, embeds)):
        token = (p["model.embed_tokens_per_layer.weight"][tok] * math.sqrt(d_ple)).reshape(L, d_ple)
        proj = (p["model.per_layer_model_projection.weight"] @ e / math.sqrt(cfg["hidden_size"])).reshape(L, d_ple)
        for l in range(L):
            out[l, t] = (_nf_rms(proj[l], p["model.per_layer_projection_norm.weight"], eps) + token[l]) / math.sqrt(2.0)
    return out


def new_family_forward(cfg: dict, p: dict, tokens) -> dict:
    """logits [pos, d_vocab], hidden_states [layer + 1, pos, d_model] (the embeddings, each layer's output, the last
    one after the final norm, as transformers' output_hidden_states), patterns {layer: [head, pos, pos]} of the
    softmax layers, and the families' insides: linear {layer: inside} (Qwen3.5), per_layer_inputs (Gemma 4)."""
    family, eps, L = cfg["model_type"], cfg["rms_norm_eps"], cfg["num_hidden_layers"]
    plus_one = family == "qwen3_5_text"  # Qwen3.5's RMS norms multiply by 1 + w (not its gated norm)
    act = _nf_gelu_tanh if family == "gemma4_text" else _nf_silu
    rope = _nf_rope_tables(cfg)
    xs = np.array([p["model.embed_tokens.weight"][t] for t in tokens])
    if family == "gemma4_text":
        xs = xs * np.float64(np.float32(math.sqrt(cfg["hidden_size"])))  # the scale is cast to the weights' float32
    out = {"hidden_states": [xs.copy()], "patterns": {}, "linear": {}}
    if family == "gemma4_text" and cfg.get("hidden_size_per_layer_input"):
        out["per_layer_inputs"] = _nf_per_layer_inputs(cfg, p, tokens, xs)
    shared, sources = {}, nf_kv_source(cfg) if family == "gemma4_text" else list(range(L))
    for l in range(L):
        pre = f"model.layers.{l}."
        if family == "olmo3":  # norms after attention and the MLP, none before
            attn, out["patterns"][l], _ = _nf_softmax_attention(cfg, p, pre, list(xs), l, rope)
            xs = xs + np.array([_nf_rms(v, p[pre + "post_attention_layernorm.weight"], eps) for v in attn])
            mlp = [_nf_mlp(x, p, pre, act) for x in xs]
            xs = xs + np.array([_nf_rms(v, p[pre + "post_feedforward_layernorm.weight"], eps) for v in mlp])
            out["hidden_states"].append(xs.copy())
            continue
        hs = [_nf_rms(x, p[pre + "input_layernorm.weight"], eps, plus_one) for x in xs]
        if cfg.get("layer_types", [None] * L)[l] == "linear_attention":
            attn, out["linear"][l] = _nf_gated_deltanet(cfg, p, pre, hs)
        else:
            reuse = shared[sources[l]] if sources[l] != l else None
            attn, out["patterns"][l], shared[l] = _nf_softmax_attention(cfg, p, pre, hs, l, rope, reuse)
        if family == "gemma4_text":
            attn = np.array([_nf_rms(v, p[pre + "post_attention_layernorm.weight"], eps) for v in attn])
        xs = xs + attn
        norm2 = "pre_feedforward_layernorm.weight" if family == "gemma4_text" else "post_attention_layernorm.weight"
        mlp = [_nf_mlp(_nf_rms(x, p[pre + norm2], eps, plus_one), p, pre, act) for x in xs]
        if family == "gemma4_text":
            mlp = [_nf_rms(v, p[pre + "post_feedforward_layernorm.weight"], eps) for v in mlp]
        xs = xs + np.array(mlp)
        if family == "gemma4_text":
            if "per_layer_inputs" in out:  # the per-layer input, gated by the stream, projected back and added
                for t in range(len(xs)):
                    g = act(p[pre + "per_layer_input_gate.weight"] @ xs[t]) * out["per_layer_inputs"][l, t]
                    xs[t] = xs[t] + _nf_rms(p[pre + "per_layer_projection.weight"] @ g,
                                            p[pre + "post_per_layer_input_norm.weight"], eps)
            xs = xs * p[pre + "layer_scalar"][0]
        out["hidden_states"].append(xs.copy())
    final = np.array([_nf_rms(x, p["model.norm.weight"], eps, plus_one) for x in xs])
    out["hidden_states"][-1] = final
    W_U = p["lm_head.weight"] if "lm_head.weight" in p else p["model.embed_tokens.weight"]
    logits = np.array([W_U @ x for x in final])
    if cfg.get("final_logit_softcapping"):
        cap = cfg["final_logit_softcapping"]
        logits = cap * np.tanh(logits / cap)
    out["logits"], out["hidden_states"] = logits, np.array(out["hidden_states"])
    return out
