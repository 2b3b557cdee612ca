"""Back through linear attention (`tracer.core.linear_attention`, its equations `tracer.core.delta_rule`): the gated norm, the recurrence (through
time: the states recomputed from the recorded values, then walked from the last position to the first),
the L2 norms, the convolution and SiLU, the gates (β's sigmoid, the decay's softplus and A_log), and the
projections. One function per forward step, in reverse. Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np

from .derivatives import d_affine
from .equations import sigmoid
from .delta_rule import L2_EPS, causal_conv, delta_rule, grouped, summed


def d_gated_norm(cfg, dy, o, z, w):  # y = o/rms(o) · w · silu(z) → do, dz, dw
    inv = 1.0 / np.sqrt((o * o).mean(axis=-1, keepdims=True) + o.dtype.type(cfg.ln_eps))
    n = o * inv
    s = sigmoid(z)
    sz = z * s
    dn = dy * w * sz
    dw = (dy * n * sz).reshape(-1, w.shape[-1]).sum(axis=0)
    dz = dy * n * w * (s + z * s * (1 - s))
    do = inv * (dn - n * (dn * n).mean(axis=-1, keepdims=True))
    return do, dz, dw


def d_delta_rule(do, q, k, v, beta, g, S0, states):  # → dq, dk, dv, dbeta, dg (q, k per value head)
    """Back through `delta_rule`, from the last position to the first."""
    scale = q.dtype.type(1.0 / np.sqrt(q.shape[-1]))
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    dbeta, dg = np.zeros_like(beta), np.zeros_like(g)
    dS = np.zeros_like(S0)  # the gradient of the state after position t, from later positions
    for t in reversed(range(len(q))):
        S = states[t]
        S_prev = states[t - 1] if t else S0
        gamma = np.exp(g[t])[:, None, None]
        S_dec = S_prev * gamma  # after the decay, before the write
        recalled = np.einsum("hkv,hk->hv", S_dec, k[t])
        delta = beta[t][:, None] * (v[t] - recalled)  # [head, d_v]
        qs = q[t] * scale
        dS = dS + qs[:, :, None] * do[t][:, None, :]  # o = Sᵀ q·scale
        dq[t] = np.einsum("hkv,hv->hk", S, do[t]) * scale
        dk[t] = np.einsum("hkv,hv->hk", dS, delta)  # S = S_dec + k ⊗ delta
        ddelta = np.einsum("hkv,hk->hv", dS, k[t])
        dbeta[t] = (ddelta * (v[t] - recalled)).sum(axis=-1)
        dv[t] = beta[t][:, None] * ddelta
        drecalled = -dv[t]
        dS_dec = dS + k[t][:, :, None] * drecalled[:, None, :]  # recalled = S_decᵀ k
        dk[t] += np.einsum("hkv,hv->hk", S_dec, drecalled)
        dg[t] = (dS_dec * S_prev).sum(axis=(1, 2)) * gamma[:, 0, 0]
        dS = dS_dec * gamma
    return dq, dk, dv, dbeta, dg


def d_l2_normalize(dy, x):  # y = x / √(Σx² + ε)
    inv = 1.0 / np.sqrt((x * x).sum(axis=-1, keepdims=True) + x.dtype.type(L2_EPS))
    y = x * inv
    return inv * (dy - y * (dy * y).sum(axis=-1, keepdims=True))


def d_causal_conv(dout, x_full, w):  # out[t] = Σ_j w[:, j] · full[t + j] (full: the tail, then x) → dx, dw
    K, n = w.shape[1], dout.shape[0]
    dfull = np.zeros_like(x_full)
    dw = np.zeros_like(w)
    for j in range(K):
        dfull[j: j + n] += dout * w[:, j]
        dw[:, j] = (dout * x_full[j: j + n]).sum(axis=0)
    return dfull[K - 1:], dw


def backward(cfg, w, dy, acts, p: str, grads: dict, x):
    vh, kh = cfg.linear_v_heads, cfg.linear_k_heads
    pre, conv = acts[p + "hook_qkv_pre"], acts[p + "hook_qkv_conv"]
    q, k, v = acts[p + "hook_q"], acts[p + "hook_k"], acts[p + "hook_v"]
    beta, g = acts[p + "hook_beta"], acts[p + "hook_decay"]
    o, z, gated = acts[p + "hook_z"], acts[p + "hook_gate_z"], acts[p + "hook_z_gated"]
    S0 = np.zeros((vh, cfg.linear_d_k, cfg.linear_d_v), dtype=x.dtype)  # a pass from the start (training, gradients)
    # W_O
    dmerged, dW_O, _ = d_affine(dy, gated.reshape(len(gated), -1), w.out.W)
    grads[p + "W_O"] = dW_O.reshape(w.W_O.shape)
    dgated = dmerged.reshape(gated.shape)
    do, dz, grads[p + "out_norm.w"] = d_gated_norm(cfg, dgated, o, z, w.norm_w)
    dx, dW_Z, _ = d_affine(dz.reshape(len(z), -1), x, w.z.W)
    grads[p + "W_Z"] = dW_Z.reshape(x.shape[-1], vh, -1).transpose(1, 0, 2)
    qg, kgr = grouped(q, vh), grouped(k, vh)
    _, states = delta_rule(qg, kgr, v, beta, g, S0)
    dqg, dkg, dv, dbeta, dg = d_delta_rule(do, qg, kgr, v, beta, g, S0, states)
    dq, dk = summed(dqg, kh), summed(dkg, kh)
    # the gates: β = sigmoid(x·W_beta); g = −exp(A_log)·softplus(x·W_decay + dt_bias)
    db_pre = dbeta * beta * (1 - beta)
    a = x @ w.decay + w.dt_bias
    sp = np.logaddexp(0.0, a)
    A = np.exp(w.A_log)
    da = dg * (-A) * sigmoid(a)
    grads[p + "A_log"] = (dg * (-A) * sp).sum(axis=0)
    grads[p + "dt_bias"] = da.sum(axis=0)
    dx_b, grads[p + "W_beta"], _ = d_affine(db_pre, x, w.beta)
    dx_a, grads[p + "W_decay"], _ = d_affine(da, x, w.decay)
    # the L2 norms, the split, SiLU and the convolution
    kd = kh * cfg.linear_d_k
    n = len(x)
    craw_q, craw_k = conv[:, :kd].reshape(n, kh, -1), conv[:, kd: 2 * kd].reshape(n, kh, -1)
    dconv = np.concatenate([d_l2_normalize(dq, craw_q).reshape(n, -1), d_l2_normalize(dk, craw_k).reshape(n, -1),
                            dv.reshape(n, -1)], axis=1)  # [pos, conv]
    tail = np.zeros((cfg.linear_conv - 1, pre.shape[1]), dtype=pre.dtype)
    c = causal_conv(pre, w.conv, tail)  # before SiLU
    s = sigmoid(c)
    dc = dconv * (s + c * s * (1 - s))
    dpre, grads[p + "W_conv"] = d_causal_conv(dc, np.concatenate([tail, pre], axis=0), w.conv)
    dx_qkv, dW_qkv, _ = d_affine(dpre, x, w.qkv.W)
    dk_, dv_ = kh * cfg.linear_d_k, vh * cfg.linear_d_v
    for name, lo, hi, heads in (("W_Q", 0, dk_, kh), ("W_K", dk_, 2 * dk_, kh), ("W_V", 2 * dk_, 2 * dk_ + dv_, vh)):
        grads[p + name] = dW_qkv[:, lo:hi].reshape(x.shape[-1], heads, -1).transpose(1, 0, 2)
    return dx + dx_b + dx_a + dx_qkv
