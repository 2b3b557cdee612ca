"""The equations of linear attention (`tracer.core.linear_attention`), one small function each: the short
causal convolution, SiLU, softplus, the L2 norm, the gated delta rule token by token, the key heads
shared by groups of value heads, and the gated per-head norm. Their derivatives are
`tracer.core.linear_backward`'s. Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np

from .equations import sigmoid

L2_EPS = 1e-6  # transformers' l2norm and the FLA library's

# --------------------------------------------------------------------------- the equations


def causal_conv(x: np.ndarray, w: np.ndarray, tail: np.ndarray) -> np.ndarray:  # [pos, ch], [ch, K], [K−1, ch] → [pos, ch]
    """Each channel's depthwise causal convolution: out[t] = Σ_j w[:, j] · in[t − (K−1) + j], the inputs
    before this pass (`tail`, zeros at the start) in front."""
    K = w.shape[1]
    full = np.concatenate([tail, x], axis=0)  # [K − 1 + pos, ch]
    out = np.zeros_like(x)
    for j in range(K):
        out += full[j: j + len(x)] * w[:, j]
    return out


def silu(x: np.ndarray) -> np.ndarray:
    return x * sigmoid(x)


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x).astype(x.dtype, copy=False)


def l2_normalize(x: np.ndarray) -> np.ndarray:  # [..., d] → same, and 1/‖x‖
    inv = 1.0 / np.sqrt((x * x).sum(axis=-1, keepdims=True) + x.dtype.type(L2_EPS))
    return x * inv, inv


def delta_rule(q, k, v, beta, g, S0, every: bool = True):  # [pos, head, d_k] ×2, [pos, head, d_v], [pos, head] ×2, [head, d_k, d_v]
    """The gated delta rule token by token (every head at once): each position's read-out [pos, head, d_v] and the
    state after each position [pos, head, d_k, d_v] (`every`), or only the last one [head, d_k, d_v] (a pass's own
    arithmetic, the same: the recorded states are this recurrence again, read when asked for)."""
    S = S0.copy()  # [head, d_k, d_v]
    outs = np.empty_like(v)  # [pos, head, d_v]
    states = np.empty((len(q), *S0.shape), dtype=S0.dtype) if every else None  # [pos, head, d_k, d_v]
    scale = q.dtype.type(1.0 / np.sqrt(q.shape[-1]))
    decay = np.exp(g)  # [pos, head]
    for t in range(len(q)):
        S *= decay[t][:, None, None]  # decay
        recalled = np.matmul(k[t][:, None, :], S)[:, 0, :]  # [head, d_v]: what S gives for this key
        S += k[t][:, :, None] * (beta[t][:, None] * (v[t] - recalled))[:, None, :]  # write
        outs[t] = np.matmul(q[t][:, None, :], S)[:, 0, :] * scale  # read
        if every:
            states[t] = S
    return outs, (states if every else S)


def states_of(q, k, v, beta, g, S0):  # the store's recipe for `hook_state`: the same recurrence again
    return delta_rule(q, k, v, beta, g, S0)[1]


def grouped(x: np.ndarray, v_heads: int) -> np.ndarray:  # [..., k_head, d] → [..., v_head, d]
    """Each key head repeated for the value heads it serves (consecutive groups, as transformers)."""
    return x if x.shape[-2] == v_heads else np.repeat(x, v_heads // x.shape[-2], axis=-2)


def summed(x: np.ndarray, k_heads: int) -> np.ndarray:  # [..., v_head, d] → [..., k_head, d]
    return x if x.shape[-2] == k_heads else x.reshape(*x.shape[:-2], k_heads, -1, x.shape[-1]).sum(axis=-2)


def gated_norm(o: np.ndarray, z: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:  # [..., head, d_v] ×2 → same
    """Each head's read-out normalized (÷ its root mean square), times its gain, times SiLU of the gate."""
    inv = 1.0 / np.sqrt((o * o).mean(axis=-1, keepdims=True) + o.dtype.type(eps))
    return o * inv * w * silu(z)

