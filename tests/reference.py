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
