"""The config (`tracer.core.config`): its closed-form counts against counting one thing at a time."""

from __future__ import annotations

import math

import pytest

from tracer.core.config import Config
from tracer.core.params import param_shapes


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


def test_the_entries_a_config_keeps_are_its_tables_and_it_pickles_as_its_fields():
    import pickle

    from tracer.core import blocks

    cfg = Config(n_layers=2, d_model=8, n_heads=2, mlp="gelu", norm="rms", positional="rope")
    assert (cfg.mlp_kind, cfg.norm_kind, cfg.position_kind) == (blocks.MLPS["gelu"], blocks.NORMS["rms"],
                                                                 blocks.POSITIONS["rope"])
    assert {"mlp_kind", "norm_kind", "position_kind"} <= set(vars(cfg))  # kept: read again without a lookup
    again = pickle.loads(pickle.dumps(cfg))  # the gelu entry's backward is a lambda: it must not be pickled
    assert again == cfg and "mlp_kind" not in vars(again) and again.mlp_kind is blocks.MLPS["gelu"]
