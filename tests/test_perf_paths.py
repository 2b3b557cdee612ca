"""The fast paths of issue 8 give the same numbers as plain references (no timing here).

In-place GELU, softmax and mask against the formulas written element by element; the heads'
summed results against W_O applied to the concatenated heads; recording a subset of names
against recording everything (bit for bit, since the in-place paths run only when a value is
not kept); the one-read finiteness check against `np.isfinite`; the cached GPT-2 ranks against
the ranks built from the package's files; greedy sampling's argmax against a stable sort; and
`import tracer.cli` staying free of numpy.
"""

from __future__ import annotations

import hashlib
import math
import subprocess
import sys

import numpy as np
import pytest

from tracer import tokens as tk
from tracer.config import Config
from tracer import decoder
from tracer.decoder import (
    KVCache,
    affine,
    affine_one,
    causal_softmax,
    forward,
    fuse,
    gelu_new,
    head_results,
    hook_names,
    mask_scores,
    normalize,
    project_out,
    transposed,
)
from tracer.errors import TracerError
from tracer.generate import sample
from tracer.record import Recorder
from tracer.weights import all_finite, check_param, init_weights


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
        got = causal_softmax(mask_scores(scores.copy()))
        for h in range(2):
            for i in range(n_q):
                visible = n_k - n_q + i + 1  # query i sits at absolute position n_k - n_q + i
                e = [math.exp(s) for s in scores[h, i, :visible]]
                want = [v / sum(e) for v in e] + [0.0] * (n_k - visible)
                np.testing.assert_allclose(got[h, i], want, rtol=1e-12, atol=1e-15)  # float64
                assert np.all(got[h, i, visible:] == 0.0)  # exactly zero, not tiny
        masked = mask_scores(scores.copy())
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
    merged = project_out(z, W_O, b_O)
    assert merged.dtype == np.dtype(dtype)
    np.testing.assert_allclose(result.sum(axis=1) + b_O, merged, rtol=tol, atol=tol)  # the heads add up
    concatenated = z.reshape(4, -1) @ W_O.reshape(-1, 6) + b_O  # concat the heads, then W_O
    np.testing.assert_allclose(merged, concatenated, rtol=tol, atol=tol)


def _small(dtype="float64", **kw):
    return Config(d_vocab=23, n_ctx=12, d_model=8, n_heads=2, d_mlp=16, n_layers=2, dtype=dtype, **kw)


@pytest.mark.parametrize("switches", [{}, {"scale_scores": False}])
def test_recording_a_subset_gives_the_same_bits_as_recording_everything(switches):
    cfg = _small("float32", **switches)
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


def test_normalize_gives_the_bits_of_the_mean_based_formula():
    rng = np.random.default_rng(5)
    for dt in (np.float32, np.float64):
        x = (rng.standard_normal((7, 768)) * 3 + 1).astype(dt)  # [pos, d_model]
        c = x - x.mean(axis=-1, keepdims=True)
        want = c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + 1e-5)  # the formula as first written
        got = normalize(x, 1e-5)
        assert got.dtype == dt and np.array_equal(got, want)


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
    got = affine_one(x, transposed(W), b)
    assert got.shape == (1, 40)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, affine(x, W, b), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-12), ("float32", 2e-5)])
def test_cached_steps_with_the_transposed_w_out_match_the_plain_product(dtype, tol):
    cfg = Config(n_layers=3, d_model=16, n_heads=4, d_head=4, d_mlp=64, d_vocab=50, n_ctx=16, dtype=dtype)
    params = init_weights(cfg, 3)
    plain, rows = fuse(cfg, params), fuse(cfg, params)
    assert rows.add_out_rows(cfg, params) and len(rows.W_out_rows) == 3 and not plain.W_out_rows
    prompt = [1, 5, 9, 2]
    caches = [KVCache(cfg, 10), KVCache(cfg, 10)]
    for f, kv in zip((plain, rows), caches):
        forward(cfg, params, prompt, Recorder([]), cache=kv, fused=f)
    for tok in (3, 7, 11, 4):
        r0, r1 = Recorder(), Recorder()
        a = forward(cfg, params, [tok], r0, cache=caches[0], fused=plain)
        b = forward(cfg, params, [tok], r1, cache=caches[1], fused=rows)
        scale = max(1.0, float(np.abs(a).max()))
        np.testing.assert_allclose(b, a, rtol=0, atol=tol * scale)
        for name in r0.store:  # everything before the first W_out product is bit-identical
            if name.startswith("blocks.0.") and not name.startswith("blocks.0.hook_mlp_out") and "resid_post" not in name:
                assert np.array_equal(r0.store[name], r1.store[name]), name


def test_transposed_w_out_is_refused_over_its_memory_budget(monkeypatch):
    cfg = Config(n_layers=2, d_model=8, n_heads=2, d_head=4, d_mlp=32, d_vocab=20, n_ctx=8)
    params = init_weights(cfg, 0)
    f = fuse(cfg, params)
    need = 2 * 32 * 8 * np.dtype(cfg.dtype).itemsize  # two layers' [d_model, d_mlp]
    monkeypatch.setattr(decoder, "ROWS_MAX_BYTES", need - 1)  # one byte short of the two copies
    assert not f.add_out_rows(cfg, params) and not f.W_out_rows
    monkeypatch.setattr(decoder, "ROWS_MAX_BYTES", need)
    assert f.add_out_rows(cfg, params) and len(f.W_out_rows) == 2


def test_long_generations_build_the_transposed_w_out_and_keep_the_tokens(monkeypatch):
    import tracer
    from tracer import generate as gen

    m = tracer.load("tiny")
    short = m.generate("A B C", max_new_tokens=6, names=[])
    assert not m.fused.W_out_rows  # below OUT_ROWS_MIN_NEW: no copies
    monkeypatch.setattr(gen, "OUT_ROWS_MIN_NEW", 6)
    m2 = tracer.load("tiny")
    long = m2.generate("A B C", max_new_tokens=6, names=[])
    assert len(m2.fused.W_out_rows) == m2.config.n_layers
    assert long.generated_ids == short.generated_ids


def test_float32_pass_stays_float32_and_close_to_float64():
    cfg64 = _small("float64")
    cfg32 = _small("float32")
    params = init_weights(cfg64, 5)
    tokens = [2, 7, 1, 8, 2, 8]
    r64, r32 = Recorder(), Recorder()
    l64 = forward(cfg64, params, tokens, r64)
    l32 = forward(cfg32, {k: v.astype(np.float32) for k, v in params.items()}, tokens, r32)
    assert {a.dtype for a in r32.store.values()} == {np.dtype("float32")}
    np.testing.assert_allclose(l32, l64, rtol=1e-4, atol=1e-5)  # float32 rounding through 2 layers


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


# ----------------------------------------------------------------------------------------- the ranks cache


@pytest.fixture(scope="module")
def built_ranks():
    return tk._build_gpt2_ranks(tk._gpt2_files())


def test_cache_constant_is_the_hash_of_the_ranks_built_from_the_checked_files(built_ranks):
    blob = tk._ranks_blob(built_ranks)
    assert hashlib.sha256(blob).hexdigest() == tk.GPT2_RANKS_CACHE_SHA256
    assert len(built_ranks) == 50256 and built_ranks[b"!"] == 0 and built_ranks[b" the"] == 262


def test_ranks_are_cached_then_read_back_equal(tmp_path, monkeypatch, built_ranks):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = tk.ranks_cache_path()
    assert path == tmp_path / "tracer" / "gpt2-ranks.bin" and not path.exists()
    assert tk.gpt2_mergeable_ranks() == built_ranks  # built, then written
    assert path.exists()
    assert tk._read_ranks_cache(path) == built_ranks  # what the next process reads
    assert tk.gpt2_mergeable_ranks() == built_ranks


def test_a_damaged_cache_is_rebuilt_not_trusted(tmp_path, monkeypatch, built_ranks):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = tk.ranks_cache_path()
    path.parent.mkdir(parents=True)
    good = tk._ranks_blob(built_ranks)
    swapped = bytearray(good)
    i = good.index(b" the")  # a token's bytes changed: same length, wrong content
    swapped[i + 1] = ord("T")
    for bad in (bytes(swapped), good[:-10], b"", b"not a cache"):
        path.write_bytes(bad)
        assert tk._read_ranks_cache(path) is None
        assert tk.gpt2_mergeable_ranks() == built_ranks
        assert path.read_bytes() == good  # rewritten


def test_an_unwritable_cache_folder_falls_back_to_building(tmp_path, monkeypatch, built_ranks):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert tk.gpt2_mergeable_ranks() == built_ranks
    assert not list(tmp_path.glob("**/*.tmp"))


def test_the_tokenizer_built_from_the_cache_encodes_as_gpt2(tmp_path, monkeypatch):
    import tiktoken

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    tk.gpt2_mergeable_ranks()  # fills the cache
    enc = tiktoken.Encoding(name="gpt2-cached", pat_str=tk.GPT2_PATTERN, mergeable_ranks=tk.gpt2_mergeable_ranks(),
                            special_tokens={tk.ENDOFTEXT: 50256}, explicit_n_vocab=50257)
    # "Hello world" is [15496, 995] in GPT-2 (ids from OpenAI's encoder.json)
    assert enc.encode("Hello world") == [15496, 995]
    assert enc.encode(" the") == [262]


# ----------------------------------------------------------------------------------------- sampling, imports


def test_greedy_sampling_takes_the_first_of_a_stable_sort():
    rng = np.random.default_rng(3)
    for trial in range(20):
        logits = rng.standard_normal(50).round(1)  # rounding makes ties common
        if trial == 0:
            logits[[3, 7]] = logits.max() + 1  # an exact tie: the lower id wins
        want = int(np.argsort(-logits, kind="stable")[0])
        rec = Recorder()
        assert sample(logits, 0.0, None, None, np.random.default_rng(0), rec) == want
        assert rec.store["sample.final"][want] == 1.0 and rec.store["sample.final"].sum() == 1.0
        if trial == 0:
            assert want == 3


def test_importing_the_cli_does_not_import_numpy():
    code = "import sys, tracer.cli; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    code = "import tracer; print(tracer.load.__module__, tracer.Trace.__name__, tracer.__version__ is not None)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["tracer.model", "Trace", "True"]


_RSS_AFTER_FREE = """
import sys, numpy as np
if sys.argv[1] == "retain":
    from tracer.record import retain_freed_memory
    assert retain_freed_memory()
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
a = np.ones(200_000_000 // 8)  # 200 MB, touched
held = rss()
del a
print(round((held - rss()) / 1e6))  # MB given back to the kernel by the free
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or __import__("platform").libc_ver()[0] != "glibc",
                    reason="mallopt is glibc's")
def test_retained_memory_stays_with_the_process_for_reuse():
    def returned(mode):
        out = subprocess.run([sys.executable, "-c", _RSS_AFTER_FREE, mode], capture_output=True, text=True, check=True)
        return int(out.stdout)

    assert returned("default") > 150  # glibc unmaps a freed 200 MB block at once
    assert returned("retain") < 10  # kept for the next arrays: no page faults to get it back


def test_top_and_target_without_log_probabilities_matches_float64_log_softmax():
    from tracer.lens import top_and_target

    rng = np.random.default_rng(8)
    logits = (rng.standard_normal((4, 50257)) * 6).astype(np.float32)  # [rows, d_vocab] GPT-2's width
    logits[2, 7] = logits[2, 9] = logits[2].max() + 1  # a tie: the first index wins, as argmax does
    target = np.array([0, 5, 9, 50256])
    x = logits.astype(np.float64)
    want = x - x.max(axis=-1, keepdims=True)
    want -= np.log(np.exp(want).sum(axis=-1, keepdims=True))  # float64 log-softmax
    for arr in (logits, np.asfortranarray(logits)):  # unembed returns Fortran order: same answers
        best, top_lp, tgt_lp, rank = top_and_target(arr, target)
        assert best.tolist() == want.argmax(axis=-1).tolist() and best[2] == 7
        rows = np.arange(4)
        np.testing.assert_allclose(top_lp, want[rows, best], rtol=0, atol=1e-6)  # float32 exp, float64 sum
        np.testing.assert_allclose(tgt_lp, want[rows, target], rtol=0, atol=1e-6)
        assert rank.tolist() == [int((logits[r] > logits[r, target[r]]).sum()) for r in range(4)]
        assert np.all(arr == logits)  # input untouched


def test_unembed_gives_the_products_in_either_memory_order():
    from tracer.decoder import unembed

    rng = np.random.default_rng(9)
    W_E = rng.standard_normal((300, 16))  # [d_vocab, d_model]
    b = rng.standard_normal(300)
    x = rng.standard_normal((5, 16))  # [pos, d_model]
    got = unembed(x, W_E.T, b)  # tied: W_U is W_E transposed
    want = np.array([[sum(x[p, i] * W_E[v, i] for i in range(16)) + b[v] for v in range(300)] for p in range(5)])
    assert got.shape == (5, 300)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    untied = np.ascontiguousarray(W_E.T)  # [d_model, d_vocab], C order
    np.testing.assert_allclose(unembed(x, untied, b), want, rtol=1e-12, atol=1e-12)
    assert unembed(x[:1], W_E.T, b).flags.c_contiguous  # one position: plain row
