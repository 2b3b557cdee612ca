"""A naive decoder written from the equations: loops over positions, heads and keys.

The reference the vectorized `tracer.decoder` must agree with. It shares nothing with the
decoder but the parameter names: no einsum, no fused matrices, no masks — a query simply
never looks at later keys.
"""

from __future__ import annotations

import math

import numpy as np


def _ln(x, w, b, eps):
    mu = sum(x) / len(x)
    var = sum((xi - mu) ** 2 for xi in x) / len(x)
    normed = np.array([(xi - mu) / math.sqrt(var + eps) for xi in x])
    return normed, (normed * w + b if w is not None else normed)


def _gelu(x):
    return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def naive_forward(cfg, params, tokens):
    """Returns a dict of the values the decoder records, built one number at a time."""
    out = {}
    T = len(tokens)
    H, dh = cfg.n_heads, cfg.d_head
    xs = []
    for p, t in enumerate(tokens):
        x = params["W_E"][t].astype(float).copy()
        if cfg.positional != "none":
            x = x + params["W_pos"][p]
        xs.append(x)
    xs = np.array(xs)
    for l in range(cfg.n_layers):
        b = f"blocks.{l}."
        out[b + "hook_resid_pre"] = xs.copy()
        hs = []
        for p in range(T):
            if cfg.layer_norm:
                hs.append(_ln(xs[p], params[b + "ln1.w"], params[b + "ln1.b"], cfg.ln_eps)[1])
            else:
                hs.append(xs[p])
        q = np.zeros((T, H, dh))
        k = np.zeros((T, H, dh))
        v = np.zeros((T, H, dh))
        for p in range(T):
            for h in range(H):
                for d in range(dh):
                    q[p, h, d] = sum(hs[p][i] * params[b + "attn.W_Q"][h, i, d] for i in range(cfg.d_model)) + params[b + "attn.b_Q"][h, d]
                    k[p, h, d] = sum(hs[p][i] * params[b + "attn.W_K"][h, i, d] for i in range(cfg.d_model)) + params[b + "attn.b_K"][h, d]
                    v[p, h, d] = sum(hs[p][i] * params[b + "attn.W_V"][h, i, d] for i in range(cfg.d_model)) + params[b + "attn.b_V"][h, d]
        pattern = np.zeros((H, T, T))
        z = np.zeros((T, H, dh))
        for h in range(H):
            for i in range(T):
                scores = []
                for j in range(i + 1):  # a query sees itself and earlier keys only
                    s = sum(q[i, h, d] * k[j, h, d] for d in range(dh))
                    if cfg.scale_scores:
                        s = s / math.sqrt(dh)
                    scores.append(s)
                m = max(scores)
                exps = [math.exp(s - m) for s in scores]
                total = sum(exps)
                for j in range(i + 1):
                    pattern[h, i, j] = exps[j] / total
                for d in range(dh):
                    z[i, h, d] = sum(pattern[h, i, j] * v[j, h, d] for j in range(i + 1))
        attn_out = np.zeros((T, cfg.d_model))
        for p in range(T):
            for m_ in range(cfg.d_model):
                attn_out[p, m_] = sum(
                    z[p, h, d] * params[b + "attn.W_O"][h, d, m_] for h in range(H) for d in range(dh)
                ) + params[b + "attn.b_O"][m_]
        out[b + "attn.hook_q"], out[b + "attn.hook_k"], out[b + "attn.hook_v"] = q, k, v
        out[b + "attn.hook_pattern"] = pattern
        out[b + "attn.hook_z"] = z
        out[b + "hook_attn_out"] = attn_out
        xs = xs + attn_out if cfg.residual else attn_out
        if cfg.mlp:
            out[b + "hook_resid_mid"] = xs.copy()
            mlp_out = np.zeros((T, cfg.d_model))
            for p in range(T):
                h_in = _ln(xs[p], params[b + "ln2.w"], params[b + "ln2.b"], cfg.ln_eps)[1] if cfg.layer_norm else xs[p]
                pre = [sum(h_in[i] * params[b + "mlp.W_in"][i, j] for i in range(cfg.d_model)) + params[b + "mlp.b_in"][j]
                       for j in range(cfg.d_mlp)]
                post = [_gelu(a) for a in pre]
                for m_ in range(cfg.d_model):
                    mlp_out[p, m_] = sum(post[j] * params[b + "mlp.W_out"][j, m_] for j in range(cfg.d_mlp)) + params[b + "mlp.b_out"][m_]
            out[b + "hook_mlp_out"] = mlp_out
            xs = xs + mlp_out if cfg.residual else mlp_out
        out[b + "hook_resid_post"] = xs.copy()
    final = np.array([_ln(x, params["ln_final.w"], params["ln_final.b"], cfg.ln_eps)[1] if cfg.layer_norm else x for x in xs])
    out["unembed.hook_in"] = final
    W_U = params["W_E"].T if cfg.tied_unembed else params["W_U"]
    logits = np.zeros((T, cfg.d_vocab))
    for p in range(T):
        for t in range(cfg.d_vocab):
            logits[p, t] = sum(final[p, i] * W_U[i, t] for i in range(cfg.d_model)) + params["b_U"][t]
    out["logits"] = logits
    return out
