"""The fast layouts (`tracer.core.fast`) give the sums the equations write: the one-position product on
transposed rows, a few positions' product on a weight held as rows, the unembedding computed from
W_E's rows, the fused Q|K|V, and generations that use the transposed W_out keep their tokens. No
timing here (BENCHMARKS.md has the speeds)."""

from __future__ import annotations

import numpy as np
import pytest

import tracer
from tracer.core import fast
from tracer.run import generate as gen
from tracer.core.config import Config
from tracer.core.decoder import KVCache, forward
from tracer.core.equations import split_heads
from tracer.core.fast import Affine, add_out_rows, layout, transposed
from tracer.core.qkv import fuse_qkv_weights as fuse_qkv
from tracer.core.params import init_weights
from tracer.core.record import Recorder


@pytest.mark.parametrize("shape", [(3072, 768), (5, 3), (130, 257)])
def test_blocked_transpose_is_the_transpose(shape):
    W = np.random.default_rng(6).standard_normal(shape).astype(np.float32)  # [d_in, d_out]
    T = transposed(W, block=128)
    assert T.flags.c_contiguous and np.array_equal(T, W.T)


def test_one_position_product_on_transposed_rows_equals_affine():
    rng = np.random.default_rng(7)
    W = rng.standard_normal((96, 40))  # [d_in, d_out] float64
    b = rng.standard_normal(40)
    x = rng.standard_normal((1, 96))  # [1, d_in]
    want = np.array([[sum(x[0, i] * W[i, j] for i in range(96)) + b[j] for j in range(40)]])  # by hand
    got = Affine(W, b, rows=transposed(W))(x)
    assert got.shape == (1, 40)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, Affine(W, b)(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [2, 16, fast.FEW_ROWS - 1, fast.FEW_ROWS])
def test_a_weight_held_as_rows_gives_the_plain_product(n):
    rng = np.random.default_rng(8)
    rows = rng.standard_normal((40, 96)).astype(np.float32)  # [d_out, d_in]: a Linear's weight, as Llama files hold it
    b = rng.standard_normal(40).astype(np.float32)
    x = rng.standard_normal((n, 96)).astype(np.float32)  # [pos, d_in]
    got = Affine(rows.T, b)(x)  # W = rows.T, a view (Fortran-ordered)
    want = x.astype(np.float64) @ rows.T.astype(np.float64) + b
    assert got.shape == (n, 40) and got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    np.testing.assert_allclose(got, Affine(np.ascontiguousarray(rows.T), b)(x), rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-12), ("float32", 2e-5)])
def test_cached_steps_with_the_transposed_w_out_match_the_plain_product(dtype, tol):
    cfg = Config(n_layers=3, d_model=16, n_heads=4, d_head=4, d_mlp=64, d_vocab=50, n_ctx=16, dtype=dtype)
    params = init_weights(cfg, 3)
    plain, rows = layout(cfg, params), layout(cfg, params)
    assert add_out_rows(cfg, rows) and all(layer.mlp.out.rows is not None for layer in rows.layers)
    assert all(layer.mlp.out.rows is None for layer in plain.layers)
    prompt = [1, 5, 9, 2]
    caches = [KVCache(cfg, 10), KVCache(cfg, 10)]
    for w, kv in zip((plain, rows), caches):
        forward(cfg, w, prompt, Recorder([]), cache=kv)
    for tok in (3, 7, 11, 4):
        r0, r1 = Recorder(), Recorder()
        a = forward(cfg, plain, [tok], r0, cache=caches[0])
        b = forward(cfg, rows, [tok], r1, cache=caches[1])
        scale = max(1.0, float(np.abs(a).max()))
        np.testing.assert_allclose(b, a, rtol=0, atol=tol * scale)
        for name in r0.store:  # everything before the first W_out product is bit-identical
            if name.startswith("blocks.0.") and not name.startswith("blocks.0.hook_mlp_out") and "resid_post" not in name:
                assert np.array_equal(r0.store[name], r1.store[name]), name


def test_transposed_w_out_is_refused_over_its_memory_budget(monkeypatch):
    cfg = Config(n_layers=2, d_model=8, n_heads=2, d_head=4, d_mlp=32, d_vocab=20, n_ctx=8)
    params = init_weights(cfg, 0)
    w = layout(cfg, params)
    need = 2 * 32 * 8 * np.dtype(cfg.dtype).itemsize  # two layers' [d_model, d_mlp]
    monkeypatch.setattr(fast, "ROWS_MAX_BYTES", need - 1)  # one byte short of the two copies
    assert not add_out_rows(cfg, w) and all(layer.mlp.out.rows is None for layer in w.layers)
    monkeypatch.setattr(fast, "ROWS_MAX_BYTES", need)
    assert add_out_rows(cfg, w) and all(layer.mlp.out.rows is not None for layer in w.layers)


def test_long_generations_build_the_transposed_w_out_and_keep_the_tokens(monkeypatch):
    m = tracer.load("tiny")
    short = m.generate("A B C", max_new_tokens=6, names=[])
    assert all(layer.mlp.out.rows is None for layer in m.weights.layers)  # below OUT_ROWS_MIN_NEW: no copies
    monkeypatch.setattr(gen, "OUT_ROWS_MIN_NEW", 6)
    m2 = tracer.load("tiny")
    long = m2.generate("A B C", max_new_tokens=6, names=[])
    assert all(layer.mlp.out.rows is not None for layer in m2.weights.layers)
    assert long.generated_ids == short.generated_ids


def test_unembed_gives_the_products_in_either_memory_order():
    rng = np.random.default_rng(9)
    W_E = rng.standard_normal((300, 16))  # [d_vocab, d_model]
    b = rng.standard_normal(300)
    x = rng.standard_normal((5, 16))  # [pos, d_model]
    got = Affine(W_E.T, b, by_rows=True)(x)  # tied: W_U is W_E transposed
    want = np.array([[sum(x[p, i] * W_E[v, i] for i in range(16)) + b[v] for v in range(300)] for p in range(5)])
    assert got.shape == (5, 300)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    untied = np.ascontiguousarray(W_E.T)  # [d_model, d_vocab], C order
    np.testing.assert_allclose(Affine(untied, b, by_rows=True)(x), want, rtol=1e-12, atol=1e-12)
    assert Affine(W_E.T, b, by_rows=True)(x[:1]).flags.c_contiguous  # one position: plain row


def test_fused_qkv_gives_each_heads_query_key_and_value():
    rng = np.random.default_rng(12)
    W = [rng.standard_normal((3, 8, 2)) for _ in "QKV"]  # [head, d_model, d_head] each
    x = rng.standard_normal((4, 8))  # [pos, d_model]
    q, k, v = split_heads(x @ fuse_qkv(*W), 3)  # [pos, head, d_head] each
    for got, Wm in zip((q, k, v), W):
        for h in range(3):
            np.testing.assert_allclose(got[:, h], x @ Wm[h], rtol=1e-12, atol=1e-12)


def test_each_layer_holds_what_a_step_would_look_up_in_the_config():
    cfg = Config(n_layers=3, d_model=8, n_heads=2, d_head=4, d_mlp=16, d_vocab=20, n_ctx=16, positional="rope",
                 norm="rms", mlp="swiglu", sliding_window=2, windowed=(1,), rope_local_theta=10.0)
    w = layout(cfg, init_weights(cfg, 0))
    assert [(layer.attn.window, layer.local) for layer in w.layers] == [(cfg.window_of(l), cfg.is_local(l)) for l in range(3)]
    assert [layer.attn.window for layer in w.layers] == [None, 2, None]
    for layer in w.layers:  # the MLP's products in the kind's order, each the layer's own Affine
        assert layer.mlp.kind is cfg.mlp_kind and layer.attn.kind is cfg.attention_kind
        assert [hook for hook, _ in layer.mlp.inputs] == ["hook_pre", "hook_pre_linear"] == [i.hook for i in cfg.mlp_kind.inputs]
        assert all(isinstance(product, Affine) for _, product in layer.mlp.inputs)
