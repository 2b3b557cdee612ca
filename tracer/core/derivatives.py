"""The switchable equations' derivatives, one beside each forward function of `tracer.core.equations`
(llm.c pairs `layernorm_forward` with `layernorm_backward`): the two norms and their gain, the two
MLP middles, a rotation, and the added position vectors. `tracer.core.blocks` pairs each with its
forward function in the table of block switches; `tracer.core.backward` composes them, with the
attention's own derivatives, into the backward pass. Arrays may carry a leading batch axis.
Core module: imports numpy only.
"""

from __future__ import annotations

import math

import numpy as np

from .equations import gelu_new, rotate, silu


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
