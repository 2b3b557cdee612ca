"""The config (`tracer.config`): its closed-form counts against counting one thing at a time."""

from __future__ import annotations

import math

import pytest

from tracer.config import Config
from tracer.params import param_shapes


@pytest.mark.parametrize("shape", [dict(), dict(n_layers=3, d_model=8, n_heads=2, tied_unembed=False, d_vocab=11, n_ctx=5),
                                   dict(layer_norm=False, mlp=False, positional="none", d_vocab=7, n_ctx=3, d_model=4,
                                        n_heads=4, n_layers=2)])
def test_count_params_matches_config(shape):
    cfg = Config(**shape)
    assert cfg.n_params() == sum(math.prod(s) for s in param_shapes(cfg).values())  # the closed form vs every shape


@pytest.mark.parametrize("mlp", [True, False])
def test_pass_macs_counts_like_a_loop(mlp, macs_by_loop):
    cfg = Config(d_vocab=11, n_ctx=16, d_model=6, n_heads=3, n_layers=2, d_mlp=10, mlp=mlp)
    for n_seen in range(1, 8):
        for n_new in range(1, n_seen + 1):
            assert cfg.pass_macs(n_new, n_seen) == macs_by_loop(cfg, n_new, n_seen)
