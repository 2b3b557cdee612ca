"""The equations (`tracer.core.equations`) against the formulas written element by element, in float64
and float32, with the tolerance beside each comparison."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracer.core.equations import (attend, attention_scores, causal_softmax, gelu_new, head_results, merge_heads, normalize,
                              scale_and_mask, tempered_softmax)


def test_gelu_matches_the_formula_element_by_element():
    x = np.linspace(-8, 8, 401)  # [n] float64, covers both tails
    want = np.array([0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))) for v in x])
    np.testing.assert_allclose(gelu_new(x), want, rtol=1e-14, atol=1e-15)  # float64: a few ulp
    x32 = x.astype(np.float32)
    got = gelu_new(x32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)  # float32: a few ulp of float32
    assert gelu_new(x32) is not x32 and np.array_equal(x32, x.astype(np.float32))  # input untouched


def test_mask_and_softmax_match_a_loop_over_visible_keys():
    rng = np.random.default_rng(0)
    for n_q, n_k in ((5, 5), (1, 7), (3, 8)):  # a prompt pass, a cached step, a cached chunk
        scores = rng.standard_normal((2, n_q, n_k)) * 3  # [head, query_pos, key_pos]
        got = causal_softmax(scale_and_mask(scores, None))
        for h in range(2):
            for i in range(n_q):
                visible = n_k - n_q + i + 1  # query i sits at absolute position n_k - n_q + i
                e = [math.exp(s) for s in scores[h, i, :visible]]
                want = [v / sum(e) for v in e] + [0.0] * (n_k - visible)
                np.testing.assert_allclose(got[h, i], want, rtol=1e-12, atol=1e-15)  # float64
                assert np.all(got[h, i, visible:] == 0.0)  # exactly zero, not tiny
        masked = scale_and_mask(scores, None)
        assert np.isneginf(masked[:, :, :]).sum() == 2 * sum(n_q - 1 - i for i in range(n_q))


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-12), ("float32", 1e-5)])
def test_summed_head_results_equal_w_o_on_the_concatenated_heads(dtype, tol):
    rng = np.random.default_rng(1)
    z = rng.standard_normal((4, 3, 5)).astype(dtype)  # [pos, head, d_head]
    W_O = rng.standard_normal((3, 5, 6)).astype(dtype)  # [head, d_head, d_model]
    b_O = rng.standard_normal(6).astype(dtype)  # [d_model]
    result = head_results(z, W_O)  # [pos, head, d_model]
    for p in range(4):
        for h in range(3):
            np.testing.assert_allclose(result[p, h], z[p, h] @ W_O[h], rtol=tol, atol=tol)
    merged = merge_heads(z) @ W_O.reshape(-1, 6) + b_O  # one product over the concatenated heads
    assert merged.dtype == np.dtype(dtype)
    np.testing.assert_allclose(result.sum(axis=1) + b_O, merged, rtol=tol, atol=tol)  # the heads add up
    for p in range(4):  # concatenation by hand: head 0's numbers, then head 1's, …
        np.testing.assert_array_equal(merge_heads(z)[p], np.concatenate([z[p, h] for h in range(3)]))


def test_normalize_gives_the_bits_of_the_mean_based_formula():
    rng = np.random.default_rng(5)
    for dt in (np.float32, np.float64):
        x = (rng.standard_normal((7, 768)) * 3 + 1).astype(dt)  # [pos, d_model]
        c = x - x.mean(axis=-1, keepdims=True)
        want = c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + 1e-5)  # the formula as first written
        got, scale = normalize(x, 1e-5)
        assert scale.shape == (7, 1) and np.array_equal(c / scale, got)
        assert got.dtype == dt and np.array_equal(got, want)


def test_attention_scores_and_the_weighted_sum_match_loops():
    rng = np.random.default_rng(11)
    q = rng.standard_normal((3, 2, 4))  # [query_pos, head, d_head]
    k = rng.standard_normal((5, 2, 4))  # [key_pos, head, d_head]
    v = rng.standard_normal((5, 2, 4))
    dots = attention_scores(q, k)  # [head, query_pos, key_pos]
    for h in range(2):
        for i in range(3):
            for j in range(5):
                assert math.isclose(dots[h, i, j], sum(q[i, h, d] * k[j, h, d] for d in range(4)), abs_tol=1e-12)
    pattern = causal_softmax(scale_and_mask(dots, 0.5))  # the queries are the last 3 of 5 keys
    z = attend(pattern, v)  # [pos, head, d_head]
    for h in range(2):
        for i in range(3):
            want = [sum(pattern[h, i, j] * v[j, h, d] for j in range(5)) for d in range(4)]
            np.testing.assert_allclose(z[i, h], want, rtol=1e-12, atol=1e-15)
            assert np.all(pattern[h, i, 2 + i + 1:] == 0.0)  # query i is at position 2 + i


def test_tempered_softmax_is_softmax_of_logits_over_t():
    logits = np.array([1.0, 2.0, 0.5, -1.0])
    for t in (0.5, 1.0, 2.0):
        e = [math.exp(x / t) for x in logits]
        np.testing.assert_allclose(tempered_softmax(logits, t), [x / sum(e) for x in e], rtol=1e-12)
    assert tempered_softmax(logits, 0.0).argmax() == 1  # greedy: temperature 1's distribution, its argmax
    tiny = tempered_softmax(logits, 1e-300)  # no overflow: all the mass on the largest logit
    assert tiny[1] == 1.0 and tiny.sum() == 1.0
