"""Parameters (`tracer.core.params`): GPT-2's seeded initialisation, given matrices, sinusoidal positions,
and the checks every parameter passes (shape, dtype, NaN and infinities)."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from tracer.core.config import Config
from tracer.errors import TracerError
from tracer.core.params import all_finite, check_param, init_weights

CFG = Config(d_vocab=11, n_ctx=6, d_model=4, n_heads=2, n_layers=2, dtype="float64")


def test_initialisation_is_gpt2s_and_seeded_by_name():
    p = init_weights(CFG, seed=5)
    # Independent recomputation of the documented rule: PCG64 seeded by (seed, crc32(name)), N(0, 0.02).
    want = np.random.default_rng([5, zlib.crc32(b"blocks.1.attn.W_K")]).standard_normal((2, 4, 2)) * 0.02
    np.testing.assert_array_equal(p["blocks.1.attn.W_K"], want)
    assert (p["blocks.0.attn.b_Q"] == 0).all() and (p["blocks.0.ln1.w"] == 1).all() and (p["ln_final.b"] == 0).all()
    assert 0.015 < init_weights(Config(d_model=64, n_heads=4, n_layers=0, d_vocab=500, n_ctx=8), 0)["W_E"].std() < 0.025


def test_giving_one_matrix_does_not_change_the_others():
    a = init_weights(CFG, 1)
    b = init_weights(CFG, 1, {"W_E": np.ones((11, 4))})
    assert (b["W_E"] == 1).all()
    assert all(np.array_equal(a[k], b[k]) for k in a if k != "W_E")


def test_sinusoidal_positions_follow_the_formula():
    cfg = Config(d_vocab=5, n_ctx=6, d_model=4, n_heads=1, n_layers=0, positional="sinusoidal", dtype="float64")
    W_pos = init_weights(cfg, 0)["W_pos"]
    for pos in range(6):
        want = [math.sin(pos / 10000 ** (0 / 4)), math.cos(pos / 10000 ** (0 / 4)),
                math.sin(pos / 10000 ** (2 / 4)), math.cos(pos / 10000 ** (2 / 4))]
        np.testing.assert_allclose(W_pos[pos], want, atol=1e-15)


def test_shape_and_nan_errors_name_the_parameter():
    with pytest.raises(TracerError, match=r"'blocks.0.attn.W_Q': expected \[2, 4, 2\], got \[4, 4\]"):
        init_weights(CFG, 0, {"blocks.0.attn.W_Q": np.zeros((4, 4))})
    with pytest.raises(TracerError, match="'W_E' holds NaN"):
        init_weights(CFG, 0, {"W_E": np.full((11, 4), np.nan)})
    with pytest.raises(TracerError, match="tied_unembed is true"):
        init_weights(CFG, 0, {"W_U": np.zeros((4, 11))})
    with pytest.raises(TracerError, match="did you mean 'W_E'"):
        init_weights(CFG, 0, {"W_e": np.zeros((11, 4))})


def test_all_finite_agrees_with_isfinite():
    rng = np.random.default_rng(2)
    base = rng.standard_normal(10_000).astype(np.float32)  # [n]
    cases = [base, base.reshape(100, 100), np.zeros(0, np.float32), np.arange(5)]
    for bad in (np.nan, np.inf, -np.inf):
        for at in (0, 4_321, 9_999):
            a = base.copy()
            a[at] = bad
            cases.append(a)
    huge = np.full(64, 3e38, dtype=np.float32)  # finite, but the sum overflows
    cases += [huge, -huge, np.concatenate([huge, [np.float32(np.nan)]])]
    both = np.array([np.inf, -np.inf])  # inf - inf: the sum is NaN, not finite
    cases.append(both)
    for a in cases:
        assert all_finite(a) == bool(np.isfinite(a).all())


def test_check_param_still_names_the_first_bad_index():
    a = np.zeros((3, 4))
    a[1, 2] = np.nan
    with pytest.raises(TracerError, match=r"\[1, 2\]"):
        check_param("W", a, (3, 4), "float64")
    big = np.full((2, 2), 3e38, dtype=np.float32)
    assert check_param("W", big, (2, 2), "float32") is big
