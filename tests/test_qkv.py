"""The fused Q|K|V order (`tracer.core.qkv`): split and fuse are inverses, with fewer key/value heads
than query heads too, splitting gives views, and the matrix form agrees with the activations'
(x·[W_Q | W_K | W_V] split is x·W_Q, x·W_K, x·W_V: a naive per-head loop as the reference)."""

from __future__ import annotations

import numpy as np
import pytest

from tracer.core.qkv import fuse_qkv, fuse_qkv_weights, qkv_columns, split_qkv, split_qkv_weights


@pytest.mark.parametrize("H, KV", [(4, 4), (4, 2), (4, 1)])
def test_split_and_fuse_are_inverses_and_agree_with_each_heads_product(H, KV):
    rng = np.random.default_rng(0)
    dm, dh, n = 6, 3, 5
    W = [rng.standard_normal((heads, dm, dh)) for heads in (H, KV, KV)]  # [heads, d_model, d_head]
    fused = fuse_qkv_weights(*W)  # [d_model, (H + 2·KV)·d_head]
    assert fused.shape == (dm, (H + 2 * KV) * dh)
    for a, b in zip(split_qkv_weights(fused, H, KV), W):
        np.testing.assert_array_equal(a, b)
        assert np.shares_memory(a, fused)  # views, not copies
    x = rng.standard_normal((n, dm))  # [pos, d_model]
    q, k, v = split_qkv(x @ fused, H, KV)
    for got, Wm in zip((q, k, v), W):
        for h in range(Wm.shape[0]):  # the reference: one head at a time
            np.testing.assert_allclose(got[:, h], x @ Wm[h], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(fuse_qkv(q, k, v), x @ fused)
    assert [c.stop - c.start for c in qkv_columns(H, KV, dh)] == [H * dh, KV * dh, KV * dh]


@pytest.mark.parametrize("H, KV", [(4, 4), (4, 2)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_splitting_gives_the_columns_qkv_columns_names_as_views_in_either_memory_order(H, KV, order):
    dh = 3
    fused = np.asarray(np.arange(5 * (H + 2 * KV) * dh, dtype=np.float64).reshape(5, -1), order=order)  # [pos, cols]
    parts = split_qkv(fused, H, KV)
    for part, cols, heads in zip(parts, qkv_columns(H, KV, dh), (H, KV, KV)):
        np.testing.assert_array_equal(part, fused[:, cols].reshape(5, heads, dh))
        assert np.shares_memory(part, fused)  # a view: a mapped file's matrix is never copied
