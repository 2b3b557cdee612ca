"""The table of block switches (`tracer.core.blocks`): every entry is whole (forward and backward
functions, parameter shapes, words), each backward half is its forward half's derivative (central
differences in float64, tolerance beside it), and Config gives the entries its strings name."""

from __future__ import annotations

import numpy as np
import pytest

from tracer.core.blocks import MLPS, NORMS, POSITIONS, mlp_key
from tracer.core.config import MLPS as CONFIG_MLPS, NORMS as CONFIG_NORMS, POSITIONAL, Config
from tracer.core.equations import rope_angles, rope_frequencies

EPS = 1e-6  # central-difference step
TOL = dict(rtol=1e-6, atol=1e-8)  # float64 central differences of smooth functions


def numeric(f, x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """d/dx of sum(f(x) · r), one entry at a time."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += EPS
        down[i] -= EPS
        g[i] = (np.sum(f(up) * r) - np.sum(f(down) * r)) / (2 * EPS)
    return g


def test_config_validates_against_the_tables_keys():
    assert (POSITIONAL, CONFIG_NORMS, CONFIG_MLPS) == (tuple(POSITIONS), tuple(NORMS), tuple(MLPS))
    for key in NORMS:
        assert Config(norm=key).norm_kind is NORMS[key]
    for key in MLPS:  # (a kind that needs fields of its own, routed experts' count, has them in `example`)
        assert Config(mlp=key, **MLPS[key].example).mlp_kind is MLPS[key]
    for key in POSITIONS:
        assert Config(positional=key, d_model=8, n_heads=2).position_kind is POSITIONS[key]
    assert Config(mlp=False).mlp_kind is None and Config(mlp=True).mlp_kind is MLPS["gelu"]
    assert mlp_key("none") is False and mlp_key(True) == "gelu"


@pytest.mark.parametrize("key", NORMS)
def test_every_norm_is_whole(key):
    n = NORMS[key]
    assert all(callable(f) for f in (n.forward, n.backward, n.gain, n.d_gain))
    assert set(n.shapes(8)) == set(n.params) and "w" in n.params and all(s == (8,) for s in n.shapes(8).values())
    assert n.title and n.short and n.plain and n.plain_final
    for words in (n.before_attention("x_A"), n.before_mlp(), n.final(), n.after_final()):
        assert n.title in words and ("+ ln" in words) == n.bias
    assert n.hooks == ("hook_scale", "hook_normalized")


@pytest.mark.parametrize("key", NORMS)
def test_every_norms_backward_is_its_forwards_derivative(key):
    n = NORMS[key]
    rng = np.random.default_rng(0)
    x, r = rng.standard_normal((3, 6)), rng.standard_normal((3, 6))  # [pos, d_model]
    w, b = rng.standard_normal(6), (rng.standard_normal(6) if n.bias else None)
    normalized, scale = n.forward(x, 1e-5)
    dn, dw, db = n.d_gain(r, normalized, w)
    np.testing.assert_allclose(n.backward(dn, normalized, scale), numeric(lambda v: n.gain(n.forward(v, 1e-5)[0], w, b), x, r), **TOL)
    np.testing.assert_allclose(dw, numeric(lambda v: n.gain(normalized, v, b), w, r), **TOL)
    if n.bias:
        np.testing.assert_allclose(db, numeric(lambda v: n.gain(normalized, w, v), b, r), **TOL)


@pytest.mark.parametrize("key", [k for k in MLPS if hasattr(MLPS[k], "middle")])
def test_every_dense_mlp_is_whole_and_its_middles_derivative_is_right(key):
    m = MLPS[key]
    cfg = Config(d_model=8, d_mlp=32, n_heads=2, mlp=key)
    shapes = m.shapes(cfg, 0)
    assert list(shapes)[-2:] == ["W_out", "b_out"] and m.n_params(cfg) == sum(int(np.prod(s)) for s in shapes.values())
    assert all(i.weight in shapes and (i.bias is None or i.bias in shapes) for i in m.inputs)
    assert m.matrices == len(m.inputs) + 1 and m.gated == ("W_gate" in shapes)
    assert m.title and m.name and m.plain and list(m.hooks) == [i.hook for i in m.inputs] + ["hook_post"]
    assert [h for h, _, _ in m.steps] == [f"mlp.{h}" for h in m.hooks] and all(words for _, _, words in m.steps)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((2, 5)) for _ in m.inputs]  # [pos, d_mlp] each
    r = rng.standard_normal((2, 5))
    grads = m.d_middle(r, *inputs)
    assert len(grads) == len(inputs)
    for i, g in enumerate(grads):
        f = lambda v, i=i: m.middle(*[v if j == i else a for j, a in enumerate(inputs)])  # noqa: E731
        np.testing.assert_allclose(g, numeric(f, inputs[i].copy(), r), **TOL)


@pytest.mark.parametrize("key", POSITIONS)
def test_every_positional_scheme_is_whole_and_its_backward_is_its_forwards_derivative(key):
    p = POSITIONS[key]
    assert p.title and (p.forward is None) == (p.backward is None) == (not (p.adds or p.rotary))
    assert set(p.shapes(4, 8)) == ({"W_pos"} if p.adds else set())
    assert p.meets == (("attn.hook_rot_q", "attn.hook_rot_k") if p.rotary else ("attn.hook_q", "attn.hook_k"))
    rng = np.random.default_rng(2)
    if p.adds:
        assert p.short and p.plain and p.source
        W_pos, r = rng.standard_normal((6, 4)), rng.standard_normal((2, 3, 4))  # [n_ctx, d_model], [batch, pos, d_model]
        np.testing.assert_allclose(p.backward(r, W_pos, 2), numeric(lambda v: p.forward(v, 2, 3), W_pos, r), **TOL)
    else:
        assert p.instead and p.source
    if p.rotary:
        angle = rope_angles(rope_frequencies(4, 10000.0), 1, 3)  # [pos, d_head / 2]
        cos, sin = np.cos(angle), np.sin(angle)
        x, r = rng.standard_normal((3, 2, 4)), rng.standard_normal((3, 2, 4))  # [pos, head, d_head]
        np.testing.assert_allclose(p.backward(r, cos, sin), numeric(lambda v: p.forward(v, cos, sin), x, r), **TOL)
    if p.computed is not None:
        assert p.computed(5, 4).shape == (5, 4)
