"""The fused Q|K|V column order, known here only: the query heads' columns, then the key heads',
then the value heads', each block of heads side by side (GPT-2's `c_attn`, and the order in which
Llama's q_proj, k_proj and v_proj are laid end to end).

One pair on the last axis, `fuse_qkv` / `split_qkv`, serves activations (x·[W_Q | W_K | W_V] cut
into each head's Q, K and V), biases, gradients, and, through `fuse_qkv_weights` /
`split_qkv_weights`, the matrices ([head, d_model, d_head] each ↔ [d_model, (head + 2·kv_head)·d_head]).
Under grouped-query attention K and V have `n_kv_heads` heads, fewer than Q's. Splitting gives
views (a mapped file is not copied). Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np


def qkv_columns(n_heads: int, n_kv_heads: int, d_head: int) -> tuple[slice, slice, slice]:
    """Which fused columns are Q's, K's and V's."""
    q_end, k_end = n_heads * d_head, (n_heads + n_kv_heads) * d_head
    return slice(0, q_end), slice(q_end, k_end), slice(k_end, k_end + n_kv_heads * d_head)


def split_qkv(fused: np.ndarray, n_heads: int, n_kv_heads: int | None = None):  # [..., (head + 2·kv_head)·d_head] → [..., head, d_head], 2 × [..., kv_head, d_head]
    """The fused last axis cut into Q's, K's and V's heads (views). Called per layer in every pass,
    so it cuts directly (the columns of `qkv_columns`), with no call it can do without."""
    kv = n_heads if n_kv_heads is None else n_kv_heads
    d_head = fused.shape[-1] // (n_heads + 2 * kv)
    lead = fused.shape[:-1]
    if kv == n_heads and fused.shape[-1] == 3 * n_heads * d_head:  # three equal blocks: one reshape, [..., 3, head, d_head]
        parts = fused.reshape(*lead, 3, n_heads, d_head)
        return parts[..., 0, :, :], parts[..., 1, :, :], parts[..., 2, :, :]  # [..., head, d_head] each
    q_end, k_end = n_heads * d_head, (n_heads + kv) * d_head
    return (fused[..., :q_end].reshape(*lead, n_heads, d_head),  # [..., head, d_head]
            fused[..., q_end:k_end].reshape(*lead, kv, d_head),  # [..., kv_head, d_head]
            fused[..., k_end:k_end + kv * d_head].reshape(*lead, kv, d_head))  # [..., kv_head, d_head]


def fuse_qkv(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:  # [..., head, d_head], 2 × [..., kv_head, d_head] → [..., (head + 2·kv_head)·d_head]
    """The inverse of `split_qkv`: Q's heads, then K's, then V's, laid end to end on the last axis."""
    lead = q.shape[:-2]
    return np.concatenate([x.reshape(*lead, -1) for x in (q, k, v)], axis=-1)


def joined(parts) -> np.ndarray | None:  # [..., n_i] views → [..., Σ n_i], or None
    """The array whose last axis the parts are, one after another, when they are views of it (a lazy
    read expands Q, K and V straight into their fused matrix's columns): fusing them again would copy
    it. None when they are not."""
    root = parts[0]
    while isinstance(root.base, np.ndarray):
        root = root.base
    shape = (*parts[0].shape[:-1], sum(p.shape[-1] for p in parts))
    for whole in (root, root.T):  # the owner, or (a matrix fused as transformers' rows are) its transpose
        if whole.shape != shape or whole.dtype != parts[0].dtype:
            continue
        at = whole.__array_interface__["data"][0]
        for p in parts:
            if p.dtype != whole.dtype or p.strides != whole.strides or p.__array_interface__["data"][0] != at:
                break
            at += p.shape[-1] * whole.strides[-1]
        else:
            return whole
    return None


def fuse_qkv_weights(W_Q: np.ndarray, W_K: np.ndarray, W_V: np.ndarray) -> np.ndarray:  # [head, …], 2 × [kv_head, d_model, d_head] → [d_model, (head + 2·kv_head)·d_head]
    """[W_Q | W_K | W_V] as one matrix, for one product instead of three."""
    return fuse_qkv(*(W.swapaxes(0, 1) for W in (W_Q, W_K, W_V)))  # [d_model, (head + 2·kv_head)·d_head]


def split_qkv_weights(W: np.ndarray, n_heads: int, n_kv_heads: int | None = None):  # [d_model, (head + 2·kv_head)·d_head] → [head, d_model, d_head], 2 × [kv_head, d_model, d_head]
    """The fused matrix back to each head's [d_model, d_head] slice (views)."""
    return tuple(part.swapaxes(0, 1) for part in split_qkv(W, n_heads, n_kv_heads))
