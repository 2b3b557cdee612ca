"""The recording store holds long causal arrays as their lower half and recomputable values as
recipes (scores from Q·K, Q·K from Q and K, the GELU, each head's result), and gives back every
value bit for bit (issue 8's "no value lost"); loading a file holds it the same way, and only
where the file's values allow it.

Each test compares against the same pass recorded into a plain dict (nothing packed), against
the file's own arrays, or against arrays built by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracer.core import store as policy
from tracer.core.decoder import KVCache, forward
from tracer.core.record import Recorder
from tracer.core.store import CausalHalf, Derived, Store
from tracer.run.trace import Generation, Trace
from tracer.core.params import init_weights


def passes(cfg, T, names=None):
    params = init_weights(cfg, 1)
    tokens = np.random.default_rng(2).integers(0, cfg.d_vocab, T)  # [pos]
    packed, plain = Recorder(names, cfg), Recorder(names, store=Store())  # Store(): every array whole
    forward(cfg, params, tokens, packed)
    forward(cfg, params, tokens, plain)
    return packed.store, plain.store


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("names", [None, ["*hook_attn_scores", "*hook_pattern", "logits"]])
def test_a_long_pass_gives_back_every_value_bit_for_bit(dtype, names, small_config):
    T = policy.PACK_MIN_QUERIES + 11
    store, plain = passes(small_config(dtype=dtype), T, names)
    assert isinstance(store, Store) and list(store) == list(plain)
    for name in plain:
        got = store[name]
        assert got.dtype == plain[name].dtype and got.shape == plain[name].shape, name
        assert np.array_equal(got, plain[name], equal_nan=True), name
    kinds = {n: type(store.raw(n)).__name__ for n in store}
    assert kinds["blocks.1.attn.hook_pattern"] == "CausalHalf"
    # with Q·K recorded the scores are its recipe; without it they are packed like the pattern
    assert kinds["blocks.1.attn.hook_attn_scores"] == ("Derived" if names is None else "CausalHalf")
    held = store.nbytes()
    whole = sum(plain[n].nbytes for n in {id(v): n for n, v in plain.items()}.values())
    assert held < whole


def test_short_passes_and_cached_steps_stay_whole_arrays(small_config):
    store, _ = passes(small_config(), 12)
    assert isinstance(store.raw("blocks.0.attn.hook_pattern"), np.ndarray)  # below PACK_MIN_QUERIES
    cfg = small_config()
    params = init_weights(cfg, 1)
    kv = KVCache(cfg, 300)
    forward(cfg, params, np.arange(290) % 40, Recorder([]), cache=kv)
    step = Recorder(None, cfg)
    forward(cfg, params, [3], step, cache=kv)  # one query sees every key: nothing is masked
    assert isinstance(step.store.raw("blocks.0.attn.hook_pattern"), np.ndarray)


def test_causal_half_by_hand_including_a_chunk_after_the_cache():
    rng = np.random.default_rng(3)
    for n_q, n_k in ((5, 5), (3, 7)):  # a prompt pass; three queries after four cached keys
        a = rng.standard_normal((2, n_q, n_k))  # [head, query, key]
        for i in range(n_q):
            a[:, i, n_k - n_q + i + 1 :] = -np.inf
        c = CausalHalf(a, -np.inf)
        assert c.data.shape == (2, sum(n_k - n_q + i + 1 for i in range(n_q)))
        assert np.array_equal(c.rebuild(), a)


def test_a_nan_row_is_not_packed_because_it_is_nan_above_the_diagonal_too(monkeypatch, small_config):
    monkeypatch.setattr(policy, "PACK_MIN_QUERIES", 2)
    p = np.tril(np.full((1, 3, 3), 0.5))  # [head, query, key]
    store = Store(small_config())
    store.put("blocks.0.attn.hook_pattern", p)
    assert isinstance(store.raw("blocks.0.attn.hook_pattern"), CausalHalf)
    p = p.copy()
    p[0, 1, :] = np.nan  # softmax of a row with an overflow: NaN everywhere in the row
    store.put("blocks.0.attn.hook_pattern", p)
    assert store.raw("blocks.0.attn.hook_pattern") is p


def test_rebuilt_arrays_are_read_only_and_only_a_few_are_kept():
    store = Store()
    base = np.arange(6.0)
    for i in range(policy.REBUILT_KEPT + 3):
        store[f"d{i}"] = Derived(lambda b, i=i: b + i, ("base",), base.shape, base.dtype)
    store["base"] = base
    first = store["d0"]
    assert not first.flags.writeable and np.array_equal(first, base)
    assert store["d0"] is first  # kept: a second read costs nothing
    for i in range(1, policy.REBUILT_KEPT + 3):
        assert np.array_equal(store[f"d{i}"], base + i)
    assert len(store._rebuilt) == policy.REBUILT_KEPT
    assert store["d0"] is not first and np.array_equal(store["d0"], first)  # rebuilt again, same values
    store["d0"] = np.zeros(6)  # replacing an entry drops its rebuilt copy
    assert np.array_equal(store["d0"], np.zeros(6))


def test_a_recipe_needs_its_sources_in_the_same_block_and_the_same_bits(small_config):
    from tracer.core.equations import gelu_new

    T = 6  # any pass of several positions holds the GELU as its recipe
    pre = np.random.default_rng(5).standard_normal((T, 16))  # [pos, d_mlp]
    store = Store(small_config(dtype="float64"))
    post = gelu_new(pre)
    store.put("blocks.0.mlp.hook_post", post)  # its source is not held: the value itself is kept
    assert store.raw("blocks.0.mlp.hook_post") is post
    store.put("blocks.1.mlp.hook_pre", pre)
    store.put("blocks.0.mlp.hook_post", post)  # a source in another block does not count
    assert store.raw("blocks.0.mlp.hook_post") is post
    store.put("blocks.0.mlp.hook_pre", pre)
    store.put("blocks.0.mlp.hook_post", post)
    assert isinstance(store.raw("blocks.0.mlp.hook_post"), Derived)
    assert np.array_equal(store["blocks.0.mlp.hook_post"], post)
    near = post.copy()
    near[1, 1] = np.nextafter(near[1, 1], 1.0)  # one ulp away from what the recipe computes
    store.put("blocks.0.mlp.hook_post", near, trusted=False)  # as read from a file: recomputed and compared
    assert store.raw("blocks.0.mlp.hook_post") is near  # verification failed: the array is kept
    one = gelu_new(pre[:1])
    store.put("blocks.2.mlp.hook_pre", pre[:1])
    store.put("blocks.2.mlp.hook_post", one)  # a one-position step keeps its arrays whole
    assert store.raw("blocks.2.mlp.hook_post") is one


def test_long_passes_keep_recomputable_values_as_recipes_and_hold_far_less(small_config):
    T = policy.PACK_MIN_QUERIES + 11
    store, plain = passes(small_config(), T)
    kinds = {n: type(store.raw(n)).__name__ for n in store}
    for name in ("attn.hook_dots", "attn.hook_attn_scores", "attn.hook_result", "mlp.hook_post"):
        assert kinds[f"blocks.0.{name}"] == "Derived", name
    for name in plain:
        assert np.array_equal(store[name], plain[name]), name
    whole = sum(v.nbytes for v in {id(v): v for v in plain.values()}.values())
    assert store.nbytes() < 0.6 * whole


def test_the_prompt_pass_of_a_generation_holds_recipes_too(small_config):
    cfg = small_config(n_ctx=400)
    params = init_weights(cfg, 1)
    tokens = np.random.default_rng(4).integers(0, cfg.d_vocab, policy.PACK_MIN_QUERIES + 3)
    with_cache, without = Recorder(None, cfg), Recorder(store=Store())
    forward(cfg, params, tokens, with_cache, cache=KVCache(cfg, 400))
    forward(cfg, params, tokens, without)
    assert isinstance(with_cache.store.raw("blocks.1.attn.hook_dots"), Derived)
    for name in without.store:  # from position 0 the cache's keys are the new keys: the same bits
        assert np.array_equal(with_cache.store[name], without.store[name]), name


def test_a_packed_trace_saves_the_same_file_as_a_plain_one(tmp_path, small_config):
    cfg = small_config()
    T = policy.PACK_MIN_QUERIES + 5
    store, plain = passes(cfg, T)
    tokens = np.arange(T, dtype=np.int64) % cfg.d_vocab
    a, b = tmp_path / "packed.npz", tmp_path / "plain.npz"
    Trace(store, tokens, cfg, ["x"] * T, {"model": "m"}).save(a)
    Trace(plain, tokens, cfg, ["x"] * T, {"model": "m"}).save(b)
    assert a.read_bytes() == b.read_bytes()  # one plain array per name, as before
    back = Generation.load(a).steps[0]
    for name in plain:
        assert np.array_equal(back[name], plain[name], equal_nan=True), name


def test_loading_a_long_trace_holds_it_as_a_recording_would_and_gives_back_the_file(tmp_path, small_config):
    cfg = small_config()
    T = policy.PACK_MIN_QUERIES + 7
    _, plain = passes(cfg, T)
    tokens = np.arange(T, dtype=np.int64) % cfg.d_vocab
    path = tmp_path / "long.npz"
    Trace(plain, tokens, cfg, ["x"] * T, {"model": "m"}).save(path)
    back = Generation.load(path).steps[0]
    kinds = {n: type(back.arrays.raw(n)).__name__ for n in back}
    assert kinds["blocks.0.attn.hook_pattern"] == "CausalHalf"
    assert kinds["blocks.0.attn.hook_attn_scores"] == "Derived"
    assert kinds["blocks.0.mlp.hook_post"] == "Derived"
    assert kinds["blocks.0.attn.hook_result"] == "ndarray"  # the file has no W_O to recompute it
    with np.load(path, allow_pickle=False) as z:
        for name in plain:
            assert np.array_equal(back[name], z[name], equal_nan=True), name
    assert back.arrays.nbytes() < 0.7 * sum(plain[n].nbytes for n in {id(v): n for n, v in plain.items()}.values())


def test_a_file_whose_values_do_not_follow_the_recipes_is_kept_as_written(tmp_path, small_config):
    cfg = small_config()
    T = policy.PACK_MIN_QUERIES + 2
    _, plain = passes(cfg, T)
    arrays = {n: np.array(v) for n, v in plain.items()}
    arrays["blocks.0.attn.hook_pattern"][1, 3, 200] = 0.25  # something above the diagonal
    arrays["blocks.0.attn.hook_dots"][0, 5, 5] += 1.0  # Q·K that Q and K do not give
    arrays["blocks.0.mlp.hook_post"][4, 2] = 7.0  # not the GELU of hook_pre
    arrays["blocks.1.attn.hook_attn_scores"][0, 9, 9] = 3.0  # not the scaled Q·K
    tokens = np.arange(T, dtype=np.int64) % cfg.d_vocab
    path = tmp_path / "edited.npz"
    Trace(arrays, tokens, cfg, ["x"] * T, {"model": "m"}).save(path)
    back = Generation.load(path).steps[0]
    for name in ("blocks.0.attn.hook_pattern", "blocks.0.attn.hook_dots", "blocks.0.mlp.hook_post"):
        assert isinstance(back.arrays.raw(name), np.ndarray), name
    assert type(back.arrays.raw("blocks.1.attn.hook_attn_scores")).__name__ == "CausalHalf"  # its mask is intact
    for name in arrays:
        assert np.array_equal(back[name], arrays[name], equal_nan=True), name
