"""The switchable equations' derivatives, one beside each forward function of `tracer.core.equations`
(llm.c pairs `layernorm_forward` with `layernorm_backward`): the two norms and their gain, the two
MLP middles, a rotation, the added position vectors, an affine map, and softmax attention's steps
(the weighted sum, the softmax, the scale, Q·K, the heads split and merged; grouped-query attention in
`d_attend` / `d_attention_scores`). `tracer.core.blocks` pairs each with its
forward function in the table of block switches; `tracer.core.backward` composes them, with the
attention's own derivatives, into the backward pass. Arrays may carry a leading batch axis.
Core module: imports numpy only.
"""

from __future__ import annotations

import math

import numpy as np

from .equations import gelu_new, rotate, sigmoid, silu, softmax
from .qkv import fuse_qkv


def d_normalize(dn: np.ndarray, normalized: np.ndarray, scale: np.ndarray) -> np.ndarray:  # → [..., d_model]
    """n = (x − mean) / scale: dx = (dn − mean(dn) − n·mean(dn·n)) / scale."""
    mean_dn = dn.mean(axis=-1, keepdims=True)  # [..., 1]
    mean_dnn = (dn * normalized).mean(axis=-1, keepdims=True)  # [..., 1]
    return (dn - mean_dn - normalized * mean_dnn) / scale


def d_rms_normalize(dn: np.ndarray, normalized: np.ndarray, scale: np.ndarray) -> np.ndarray:  # → [..., d_model]
    """n = x / scale, scale = √(mean(x²) + eps): dx = (dn − n·mean(dn·n)) / scale."""
    return (dn - normalized * (dn * normalized).mean(axis=-1, keepdims=True)) / scale


def d_scale_and_shift(dy: np.ndarray, normalized: np.ndarray, w: np.ndarray):  # y = n·w + b → dn, dw, db
    lead = tuple(range(dy.ndim - 1))
    return dy * w, (dy * normalized).sum(axis=lead), dy.sum(axis=lead)


def d_swiglu(dpost: np.ndarray, gate: np.ndarray, up: np.ndarray):  # post = SiLU(gate)·up → dgate, dup
    """SiLU(g) = g·σ(g), whose slope is σ(g)·(1 + g·(1 − σ(g)))."""
    sig = 0.5 * (1.0 + np.tanh(0.5 * gate))  # σ(gate)
    return dpost * up * sig * (1.0 + gate * (1.0 - sig)), dpost * silu(gate)


def d_rotate(dout: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:  # → [..., pos, head, d_head]
    """A rotation's gradient is the rotation back: by the opposite angle."""
    return rotate(dout, cos, -sin)


def d_gelu_new(dy: np.ndarray, x: np.ndarray) -> np.ndarray:  # [..., d_mlp] → [..., d_mlp]
    """d/dx 0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³)."""
    c = math.sqrt(2.0 / math.pi)
    t = np.tanh(c * (x + 0.044715 * x * x * x))
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x))


def d_position_vectors(dx: np.ndarray, W_pos: np.ndarray, start: int = 0) -> np.ndarray:  # [..., pos, d_model] → [n_ctx, d_model]
    """x = E + W_pos[start : start + n]: each used row's gradient is x's, summed over the batch."""
    n = dx.shape[-2]
    dW = np.zeros_like(W_pos)  # [n_ctx, d_model]
    dW[start : start + n] = dx.reshape(-1, n, dx.shape[-1]).sum(axis=0)  # [pos, d_model]
    return dW


def d_one_plus_gain(dy: np.ndarray, normalized: np.ndarray, w: np.ndarray):  # y = n·(1 + w) → dn, dw, None
    """Gemma's RMS norm gain, (1 + w): dn = dy·(1 + w), dw = Σ dy·n."""
    lead = tuple(range(dy.ndim - 1))
    return dy * (1.0 + w), (dy * normalized).sum(axis=lead), None


def d_softcap(dy: np.ndarray, y: np.ndarray, cap: float) -> np.ndarray:  # y = cap·tanh(x / cap) → dx
    """dx = dy · (1 − tanh²) = dy · (1 − (y / cap)²); where y is −∞ (a hidden key, whose dy is 0) dx is 0."""
    t = y / np.asarray(cap, dtype=y.dtype)
    hidden = np.isinf(y)
    if hidden.any():
        t[hidden] = 1.0  # 1 − 1² = 0: no gradient through a hidden key
    return dy * (1.0 - t * t)


def d_geglu(dpost: np.ndarray, gate: np.ndarray, up: np.ndarray):  # post = GELU(gate)·up → dgate, dup
    return d_gelu_new(dpost * up, gate), dpost * gelu_new(gate)


# --------------------------------------------------------------------------- products and attention


def d_affine(dy: np.ndarray, x: np.ndarray, W: np.ndarray):  # y = x·W + b: [..., d_out] → dx, dW, db
    dy2 = dy.reshape(-1, dy.shape[-1])  # [rows, d_out]
    x2 = x.reshape(-1, x.shape[-1])  # [rows, d_in]
    dx = (dy2 @ W.T).reshape(*dy.shape[:-1], W.shape[0])  # [..., d_in]
    return dx, x2.T @ dy2, dy2.sum(axis=0)  # [..., d_in], [d_in, d_out], [d_out]


def d_merge_heads(dm: np.ndarray, n_heads: int) -> np.ndarray:  # [..., pos, head·d_head] → [..., pos, head, d_head]
    return dm.reshape(*dm.shape[:-1], n_heads, -1)


def shared(x: np.ndarray, n_kv_heads: int) -> np.ndarray:  # [..., pos, head, d] → [..., pos, kv_head, d]
    """Grouped-query attention: the query heads' shares summed onto the key/value head they read."""
    H = x.shape[-2]
    if H == n_kv_heads:
        return x
    return x.reshape(*x.shape[:-2], n_kv_heads, H // n_kv_heads, x.shape[-1]).sum(axis=-2)


def each_head(x: np.ndarray, n_heads: int) -> np.ndarray:  # [..., pos, kv_head, d] → [..., pos, head, d]
    """Each key/value head repeated for the query heads that share it."""
    return x if x.shape[-2] == n_heads else np.repeat(x, n_heads // x.shape[-2], axis=-2)


def d_attend(dz: np.ndarray, pattern: np.ndarray, v: np.ndarray):  # z = pattern·V → dpattern, dv
    dz_h = dz.swapaxes(-3, -2)  # [..., head, query_pos, d_head]
    v_h = each_head(v, dz.shape[-2])  # [..., key_pos, head, d_head]
    dpattern = dz_h @ v_h.swapaxes(-3, -2).swapaxes(-1, -2)  # [..., head, query_pos, key_pos]
    dv = (pattern.swapaxes(-1, -2) @ dz_h).swapaxes(-3, -2)  # [..., key_pos, head, d_head]
    return dpattern, shared(dv, v.shape[-2])


def d_causal_softmax(dpattern: np.ndarray, pattern: np.ndarray) -> np.ndarray:  # → [..., head, query_pos, key_pos]
    """p = softmax(s): ds = p·(dp − Σ dp·p). Hidden keys have p = 0, so they get no gradient."""
    return pattern * (dpattern - (dpattern * pattern).sum(axis=-1, keepdims=True))


def d_scale_and_mask(dscores: np.ndarray, scale: float | None) -> np.ndarray:  # → dots' gradient
    return dscores * scale if scale is not None else dscores


def d_attention_scores(ddots: np.ndarray, q: np.ndarray, k: np.ndarray):  # dots = Q·K → dq, dk
    k_h = each_head(k, q.shape[-2])  # [..., key_pos, head, d_head]
    dq = (ddots @ k_h.swapaxes(-3, -2)).swapaxes(-3, -2)  # [..., query_pos, head, d_head]
    dk = (ddots.swapaxes(-1, -2) @ q.swapaxes(-3, -2)).swapaxes(-3, -2)  # [..., key_pos, head, d_head]
    return dq, shared(dk, k.shape[-2])


def d_split_heads(dq: np.ndarray, dk: np.ndarray, dv: np.ndarray) -> np.ndarray:  # → [..., pos, (head + 2·kv_head)·d_head]
    return fuse_qkv(dq, dk, dv)


# --------------------------------------------------------------------------- mixtures of experts


def d_softmax(dp: np.ndarray, p: np.ndarray) -> np.ndarray:  # p = softmax(x) along the last axis → dx
    return p * (dp - (dp * p).sum(axis=-1, keepdims=True))


def d_route_softmax_topk(dweights: np.ndarray, logits: np.ndarray, chosen: np.ndarray, renormalize: bool):  # → [pos, expert]
    """Back through `route_softmax_topk` with the choice held fixed: the weights' gradient → the scores'."""
    probs = softmax(logits)  # [pos, expert]
    kept = np.take_along_axis(probs, chosen, axis=-1)  # [pos, k]
    if renormalize:  # w = kept / Σ kept
        total = kept.sum(axis=-1, keepdims=True)
        w = kept / total
        dkept = (dweights - (dweights * w).sum(axis=-1, keepdims=True)) / total
    else:
        dkept = dweights
    dprobs = np.zeros_like(probs)
    np.put_along_axis(dprobs, chosen, dkept, axis=-1)
    return d_softmax(dprobs, probs)


def d_route_topk_softmax(dweights: np.ndarray, weights: np.ndarray, chosen: np.ndarray, n_experts: int):  # → [pos, expert]
    """Back through `route_topk_softmax` with the choice held fixed: only the k chosen scores move."""
    dlogits = np.zeros((*weights.shape[:-1], n_experts), dtype=weights.dtype)
    np.put_along_axis(dlogits, chosen, d_softmax(dweights, weights), axis=-1)
    return dlogits


def d_clamped_swiglu(dpost: np.ndarray, gate: np.ndarray, up: np.ndarray, alpha: float, limit: float):  # → dgate, dup
    """Back through `clamped_swiglu`: nothing passes where a clamp held the value."""
    g = np.minimum(gate, limit)
    u = np.clip(up, -limit, limit)
    s = sigmoid(g * alpha)
    glu = g * s
    dg = dpost * (u + 1.0) * (s + alpha * glu * (1.0 - s))
    return np.where(gate < limit, dg, 0.0).astype(dg.dtype), np.where(np.abs(up) < limit, dpost * glu, 0.0).astype(dg.dtype)
