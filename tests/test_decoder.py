"""The vectorized decoder against the naive reference, its recorded names, and its invariants."""

from __future__ import annotations

import numpy as np
import pytest

from tracer.core.config import Config
from tracer.core.decoder import KVCache, forward, hook_names
from tracer.core.fast import layout
from tracer.core.record import Recorder
from tracer.core.params import init_weights

from .reference import naive_forward


SWITCHES = [
    dict(),  # GPT-2 block
    dict(layer_norm=False),
    dict(mlp=False),
    dict(residual=False),
    dict(scale_scores=False),
    dict(layer_norm=False, mlp=False, residual=False, scale_scores=False, positional="explicit"),  # the article's block
    dict(positional="sinusoidal"),
    dict(positional="none", tied_unembed=False),
    dict(norm="rms"),
    dict(mlp="swiglu"),
    dict(positional="rope", rope_theta=5.0),
    dict(positional="rope", rope_theta=500.0, rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                                 high_freq_factor=4.0, original_max_position_embeddings=16)),
    dict(n_kv_heads=1),
    dict(sliding_window=3),
    dict(positional="rope", norm="rms", mlp="swiglu", n_kv_heads=1, tied_unembed=False, sliding_window=4),  # Llama/Mistral
]


@pytest.mark.parametrize("n_heads", [1, 2, 4])
@pytest.mark.parametrize("switches", SWITCHES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "gpt2")
def test_decoder_matches_naive_reference(n_heads, switches, random_params):
    cfg = Config(d_vocab=11, n_ctx=9, d_model=8, n_heads=n_heads, d_mlp=12, n_layers=2, dtype="float64", **switches)
    params = random_params(cfg)
    tokens = [3, 1, 4, 1, 5, 9, 2]
    rec = Recorder()
    logits = forward(cfg, params, tokens, rec)
    ref = naive_forward(cfg, params, tokens)
    for name, want in ref.items():
        np.testing.assert_allclose(rec.store[name], want, rtol=0, atol=1e-10, err_msg=name)  # float64: 1e-10
    np.testing.assert_allclose(logits, ref["logits"], rtol=0, atol=1e-10)


def test_recorded_names_for_a_two_layer_gpt2_config():
    cfg = Config(d_vocab=10, n_ctx=8, d_model=4, n_heads=2, n_layers=2, dtype="float64")
    block = [
        "hook_resid_pre", "ln1.hook_scale", "ln1.hook_normalized", "attn.hook_q", "attn.hook_k", "attn.hook_v",
        "attn.hook_dots", "attn.hook_attn_scores", "attn.hook_pattern", "attn.hook_z", "attn.hook_result",
        "hook_attn_out", "hook_resid_mid", "ln2.hook_scale", "ln2.hook_normalized", "mlp.hook_pre", "mlp.hook_post",
        "hook_mlp_out", "hook_resid_post",
    ]
    want = ["hook_embed", "hook_pos_embed"]
    for l in range(2):
        want += [f"blocks.{l}.{n}" for n in block]
    want += ["ln_final.hook_scale", "ln_final.hook_normalized", "unembed.hook_in", "logits"]
    rec = Recorder()
    forward(cfg, init_weights(cfg, 0), [1, 2, 3], rec)
    assert list(rec.store) == want
    assert hook_names(cfg) == want


def test_switched_off_steps_are_absent():
    cfg = Config(d_vocab=10, n_ctx=8, d_model=4, n_heads=1, n_layers=1, layer_norm=False, mlp=False,
                 positional="none", dtype="float64")
    names = hook_names(cfg)
    assert not [n for n in names if "ln" in n or "mlp" in n or "resid_mid" in n or "pos_embed" in n]
    assert "blocks.0.attn.hook_pattern" in names


def test_invariants_of_a_recorded_pass(random_params):
    cfg = Config(d_vocab=13, n_ctx=10, d_model=8, n_heads=2, n_layers=2, dtype="float64")
    params = random_params(cfg, seed=7)
    rec = Recorder()
    forward(cfg, params, [0, 5, 2, 7, 7, 1], rec)
    s = rec.store
    for l in range(2):
        b = f"blocks.{l}."
        pattern = s[b + "attn.hook_pattern"]  # [head, query_pos, key_pos]
        np.testing.assert_allclose(pattern.sum(-1), 1.0, atol=1e-12)
        upper = np.triu_indices(6, k=1)
        assert (pattern[:, upper[0], upper[1]] == 0.0).all()  # exactly zero above the diagonal
        assert np.isneginf(s[b + "attn.hook_attn_scores"][:, upper[0], upper[1]]).all()
        v = s[b + "attn.hook_v"]
        for h in range(2):  # hook_z is pattern × V, head by head
            np.testing.assert_allclose(s[b + "attn.hook_z"][:, h], pattern[h] @ v[:, h], atol=1e-12)
        np.testing.assert_allclose(s[b + "attn.hook_dots"] / np.sqrt(cfg.d_head),
                                   np.where(np.isneginf(s[b + "attn.hook_attn_scores"]), s[b + "attn.hook_dots"] / np.sqrt(cfg.d_head), s[b + "attn.hook_attn_scores"]), atol=1e-12)
        np.testing.assert_allclose(s[b + "attn.hook_result"].sum(1) + params[b + "attn.b_O"], s[b + "hook_attn_out"], atol=1e-12)
        np.testing.assert_allclose(s[b + "hook_resid_mid"], s[b + "hook_resid_pre"] + s[b + "hook_attn_out"], atol=0)
        np.testing.assert_allclose(s[b + "hook_resid_post"], s[b + "hook_resid_mid"] + s[b + "hook_mlp_out"], atol=0)
        normed = s[b + "ln1.hook_normalized"]
        np.testing.assert_allclose(normed.mean(-1), 0, atol=1e-12)


def test_names_filter_keeps_only_what_is_asked_and_changes_no_number(random_params):
    cfg = Config(d_vocab=13, n_ctx=10, d_model=8, n_heads=2, n_layers=3, dtype="float64")
    params = random_params(cfg)
    all_rec, some = Recorder(), Recorder(["blocks.*.attn.hook_pattern", "logits"])
    a = forward(cfg, params, [1, 2, 3], all_rec)
    b = forward(cfg, params, [1, 2, 3], some)
    assert list(some.store) == [f"blocks.{l}.attn.hook_pattern" for l in range(3)] + ["logits"]
    assert np.array_equal(a, b)
    nothing = Recorder([])
    assert np.array_equal(forward(cfg, params, [1, 2, 3], nothing), a) and nothing.store == {}


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-12), ("float32", 1e-5)])
def test_kv_cache_gives_the_same_logits_as_the_full_pass(dtype, tol, random_params):
    cfg = Config(d_vocab=17, n_ctx=12, d_model=8, n_heads=2, n_layers=2, dtype=dtype)
    params = init_weights(cfg, 3, {k: v for k, v in random_params(Config(**{**cfg.to_dict(), "dtype": "float64"})).items()})
    tokens = [4, 8, 15, 16, 2, 3]
    full = forward(cfg, params, tokens)
    cache = KVCache(cfg, len(tokens))
    forward(cfg, params, tokens[:3], cache=cache)
    rows = [forward(cfg, params, [t], cache=cache)[0] for t in tokens[3:]]
    np.testing.assert_allclose(np.array(rows), full[3:], atol=tol)
    assert cache.length == len(tokens)


def test_float64_and_float32_are_what_they_say():
    for dtype in ("float32", "float64"):
        cfg = Config(d_vocab=7, n_ctx=4, d_model=4, n_heads=2, n_layers=1, dtype=dtype)
        rec = Recorder()
        forward(cfg, init_weights(cfg, 0), [1, 2], rec)
        assert {a.dtype for a in rec.store.values()} == {np.dtype(dtype)}


@pytest.mark.parametrize("switches", [{}, {"scale_scores": False}])
def test_recording_a_subset_gives_the_same_bits_as_recording_everything(switches, small_config):
    cfg = small_config(d_vocab=23, n_ctx=12, dtype="float32", **switches)
    params = init_weights(cfg, 4)
    tokens = [3, 1, 4, 1, 5, 9]
    full = Recorder()
    logits_full = forward(cfg, params, tokens, full)
    for keep in (["*attn.hook_attn_scores", "*hook_attn_out"], ["*hook_pattern"], ["logits"], []):
        part = Recorder(keep)
        logits = forward(cfg, params, tokens, part)
        assert np.array_equal(logits, logits_full)
        for name, value in part.store.items():
            assert np.array_equal(value, full.store[name]), name
    assert list(full.store) == hook_names(cfg)


def test_float32_pass_stays_float32_and_close_to_float64(small_config):
    cfg64 = small_config(d_vocab=23, n_ctx=12, dtype="float64")
    cfg32 = small_config(d_vocab=23, n_ctx=12, dtype="float32")
    params = init_weights(cfg64, 5)
    tokens = [2, 7, 1, 8, 2, 8]
    r64, r32 = Recorder(), Recorder()
    l64 = forward(cfg64, params, tokens, r64)
    l32 = forward(cfg32, {k: v.astype(np.float32) for k, v in params.items()}, tokens, r32)
    assert {a.dtype for a in r32.store.values()} == {np.dtype("float32")}
    np.testing.assert_allclose(l32, l64, rtol=1e-4, atol=1e-5)  # float32 rounding through 2 layers


# --------------------------------------------------------------------------- a step's Python overhead

GEMMA3_LIKE = dict(positional="rope", norm="gemma_rms", mlp="geglu", norm_place="both", qk_norm="per_head",
                   sliding_window=2, windowed=(0,), rope_local_theta=10.0, attn_softcap=50.0, final_softcap=30.0,
                   embed_scale=True, n_kv_heads=1)
# The tracer functions one decode step of a GPT-2 block called per layer at 9d2e41b, the commit before
# the redesign (the table of block switches): everything recorded 127, nothing 75 (BENCHMARKS.md, issue 21).
CALLS_PER_LAYER_BEFORE = {"everything": 127, "nothing": 75}


def tracer_calls_in_a_step(cfg, names) -> dict:
    """{"file:function": calls} of the tracer functions one one-token decode step calls, after a
    first step (whatever is looked up once per config has been by then)."""
    import collections
    import sys
    from pathlib import Path

    w = layout(cfg, init_weights(cfg, 0))
    kv = KVCache(cfg, 8)
    forward(cfg, w, [0, 1], Recorder([], cfg), cache=kv)
    forward(cfg, w, [2], Recorder(names, cfg), cache=kv)
    rec = Recorder(names, cfg)
    seen = collections.Counter()

    def count(frame, event, arg):
        path = Path(frame.f_code.co_filename)
        if event == "call" and "tracer" in path.parts:
            seen[f"{path.name}:{frame.f_code.co_name}"] += 1

    sys.setprofile(count)
    try:
        forward(cfg, w, [3], rec, cache=kv)
    finally:
        sys.setprofile(None)
    return dict(seen)


@pytest.mark.parametrize("switches", [dict(), SWITCHES[-1], GEMMA3_LIKE], ids=["gpt2", "llama", "gemma3"])
@pytest.mark.parametrize("names", [None, []], ids=["everything", "nothing"])
def test_a_decode_step_looks_nothing_up_in_the_config_and_an_idle_recorder_builds_no_scope(small_config, switches,
                                                                                              names):
    calls = tracer_calls_in_a_step(small_config(n_ctx=32, **switches), names)
    assert not [c for c in calls if c.startswith("config.py:")]  # the table's entries are kept, the layers' windows laid out
    if names == []:  # nothing recorded, nothing hooked: no name is built, nothing reaches the store
        assert not [c for c in calls if c.startswith("store.py:") or c == "record.py:__init__"]
    else:
        assert calls["record.py:scope"] > 0 and "record.py:__init__" not in calls  # a scope per prefix, made without __init__


@pytest.mark.parametrize("names, label", [(None, "everything"), ([], "nothing")])
def test_a_gpt2_layers_decode_step_makes_no_more_python_calls_than_before_the_redesign(small_config, names, label):
    two, four = (sum(tracer_calls_in_a_step(small_config(n_layers=n, n_ctx=32), names).values()) for n in (2, 4))
    per_layer = (four - two) / 2
    assert per_layer <= CALLS_PER_LAYER_BEFORE[label], (per_layer, label)
