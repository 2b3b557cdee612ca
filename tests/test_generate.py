"""The generation loop (`tracer.run.generate`): the KV cache against full recompute, the sampler, stopping.

References are independent of the code under test: the naive per-number decoder in
`tests/reference.py`, a chi-square test of the sampler against the distribution it should follow,
and transformers' own greedy continuation (`tests/data/gpt2-tiny/reference.npz`, when present).
What every position predicts and the logit lens are in `test_lens.py`; the command-line options
of generation in `test_cli.py`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.errors import TracerError
from tracer.run.generate import sample, verify_cache
from tracer.core.record import Recorder
from tracer.run.settings import GenerationSettings

from .reference import naive_forward

FIXTURE = Path(__file__).parent / "data" / "gpt2-tiny"


# --------------------------------------------------------------------------- KV cache versus full recompute

CONFIGS = {
    "gpt2-block": {},
    "no-layer-norm": {"layer_norm": False},
    "no-mlp": {"mlp": False},
    "no-residual": {"residual": False},
    "unscaled": {"scale_scores": False},
    "one-head": {"n_heads": 1},
    "four-heads": {"n_heads": 4},
    "sinusoidal": {"positional": "sinusoidal"},
    "explicit": {"positional": "explicit"},
    "no-positions": {"positional": "none"},
    "article-block": {"layer_norm": False, "mlp": False, "residual": False, "scale_scores": False,
                      "positional": "explicit", "n_layers": 1},
    "untied": {"tied_unembed": False, "n_layers": 3},
}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("n_prompt,n_new", [(1, 5), (4, 3), (9, 7)])
def test_cache_and_no_cache_agree_and_match_the_naive_decoder(name, n_prompt, n_new, word_model):
    m = word_model(seed=len(name), **CONFIGS[name])
    prompt = [int(t) for t in np.random.default_rng(n_prompt).integers(0, m.config.d_vocab, n_prompt)]
    kw = dict(max_new_tokens=n_new, temperature=0.8, top_k=10, seed=5)
    a = m.generate(prompt, cache=True, **kw)
    b = m.generate(prompt, cache=False, **kw)
    assert a.generated_ids == b.generated_ids and len(a.generated_ids) == n_new
    assert len(a.steps) == len(b.steps) == n_new
    seq = a.tokens
    for n, (sa, sb) in enumerate(zip(a.steps, b.steps)):
        assert sa.start == (0 if n == 0 else n_prompt + n - 1) and sb.start == 0
        assert sa["logits"].shape[0] == (n_prompt if n == 0 else 1)  # with the cache: only the new row
        np.testing.assert_allclose(sa["logits"][-1], sb["logits"][-1], rtol=0, atol=1e-12)  # float64
    # the naive loop decoder over the whole final context: every step's last row (atol: float64 sums reordered)
    ref = naive_forward(m.config, m.params, seq[: len(seq) - 1])["logits"]  # [pos, d_vocab]
    for n, sa in enumerate(a.steps):
        np.testing.assert_allclose(sa["logits"][-1], ref[n_prompt - 1 + n], rtol=0, atol=1e-10)
    result = verify_cache(m, a)
    assert result["ok"] and result["tokens_equal"] and result["max_abs_diff"] <= 1e-12
    json.dumps(result)  # JSON-able, as --json prints it


def test_cache_and_no_cache_agree_in_float32(word_model):
    m = word_model(dtype="float32", n_layers=3)
    kw = dict(max_new_tokens=8, temperature=0, seed=0)
    a, b = m.generate([1, 2, 3], cache=True, **kw), m.generate([1, 2, 3], cache=False, **kw)
    assert a.generated_ids == b.generated_ids
    for sa, sb in zip(a.steps, b.steps):
        assert sa["logits"].dtype == np.float32
        np.testing.assert_allclose(sa["logits"][-1], sb["logits"][-1], rtol=0, atol=1e-5)  # float32
    r = verify_cache(m, a)
    assert r["ok"] and r["tolerance"] == 1e-5 and r["dtype"] == "float32"


def test_verify_cache_catches_a_difference(word_model):
    m = word_model()
    gen = m.generate([1, 2], max_new_tokens=3)
    assert verify_cache(m, gen)["ok"]
    gen.steps[1].arrays["logits"] = gen.steps[1]["logits"] + 1e-9  # more than 1e-12 off
    r = verify_cache(m, gen)
    assert not r["ok"] and r["tokens_equal"] and r["max_abs_diff"] == pytest.approx(1e-9, rel=1e-3)
    assert r["per_step_max_abs_diff"][0] <= 1e-12 and r["per_step_max_abs_diff"][1] > 1e-10


def test_verify_cache_reruns_a_generation_recorded_without_logits(word_model):
    m = word_model()
    gen = m.generate([3], max_new_tokens=4, names=["blocks.0.*"], cache=False)
    assert "logits" not in gen.steps[0]
    r = verify_cache(m, gen)
    assert r["ok"] and r["steps"] == 4 and r["generated_cache"] == gen.generated_ids


# --------------------------------------------------------------------------- sampling


def test_same_seed_same_tokens_and_the_draw_is_pcg64s_first_number(word_model):
    m = word_model()
    kw = dict(max_new_tokens=6, temperature=1.3, top_p=0.95)
    a = m.generate([1, 2], seed=42, **kw)
    b = m.generate([1, 2], seed=42, **kw)
    assert a.generated_ids == b.generated_ids
    others = {tuple(m.generate([1, 2], seed=s, **kw).generated_ids) for s in range(5)}
    assert len(others) > 1  # the seed matters
    rng = np.random.default_rng(42)
    assert [float(s["sample.uniform"]) for s in a.steps] == [rng.random() for _ in a.steps]


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
def test_top_k_1_equals_greedy(temperature, word_model):
    m = word_model(seed=3)
    greedy = m.generate([4, 5, 6], max_new_tokens=6, temperature=0)
    top1 = m.generate([4, 5, 6], max_new_tokens=6, temperature=temperature, top_k=1, seed=9)
    assert top1.generated_ids == greedy.generated_ids
    assert greedy.generated_ids[0] == int(np.argmax(naive_forward(m.config, m.params, [4, 5, 6])["logits"][-1]))
    assert "sample.uniform" not in greedy.steps[0]  # greedy draws nothing


def test_one_draw_lands_in_the_band_that_holds_u():
    logits = np.log(np.array([0.1, 0.4, 0.2, 0.3]))
    for seed in range(20):
        rec = Recorder()
        token = sample(logits, GenerationSettings(temperature=1.0), np.random.default_rng(seed), rec)
        u = np.random.default_rng(seed).random()
        # by hand: most likely first (B 0.4, D 0.3, C 0.2, A 0.1), bands [0, .4) [.4, .7) [.7, .9) [.9, 1)
        expected = 1 if u < 0.4 else 3 if u < 0.7 else 2 if u < 0.9 else 0
        assert token == expected and float(rec.store["sample.uniform"]) == u


def chi2_critical(df: int, alpha: float) -> float:
    """The chi-square quantile for 1 - alpha, by bisection on the CDF written for odd df = 3:
    F(x) = erf(sqrt(x/2)) - sqrt(2x/π)·exp(-x/2). (Tables give 16.266 for alpha = 0.001.)"""
    assert df == 3

    def cdf(x):
        return math.erf(math.sqrt(x / 2)) - math.sqrt(2 * x / math.pi) * math.exp(-x / 2)

    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < 1 - alpha else (lo, mid)
    return lo


def test_chi2_critical_value_matches_the_table():
    assert chi2_critical(3, 0.001) == pytest.approx(16.266, abs=1e-3)
    assert chi2_critical(3, 0.05) == pytest.approx(7.815, abs=1e-3)


P = np.array([0.1, 0.4, 0.2, 0.3])  # a fixed small distribution over 4 tokens


@pytest.mark.parametrize("temperature,top_k,top_p,expected", [
    (1.0, None, None, P),
    (2.0, None, None, np.sqrt(P) / np.sqrt(P).sum()),  # softmax(log p / 2) ∝ p^(1/2)
    (1.0, 3, None, np.array([0, 0.4, 0.2, 0.3]) / 0.9),  # drops A, the least likely
    (1.0, None, 0.65, np.array([0, 0.4, 0, 0.3]) / 0.7),  # B + D = 0.7 is the first sum ≥ 0.65
])
def test_seeded_sampling_follows_the_distribution_chi_square(temperature, top_k, top_p, expected):
    rng = np.random.default_rng(2024)  # fixed seed: the statistic is the same on every run
    N = 8000
    counts = np.zeros(4)
    logits = np.log(P)
    settings = GenerationSettings(temperature=temperature, top_k=top_k, top_p=top_p)
    for _ in range(N):
        counts[sample(logits, settings, rng, Recorder(names=[]))] += 1
    support = expected > 0
    assert counts[~support].sum() == 0  # cut tokens are never drawn
    exp_counts = N * expected[support]
    chi2 = float(((counts[support] - exp_counts) ** 2 / exp_counts).sum())
    df = int(support.sum()) - 1
    if df == 3:
        assert chi2 < chi2_critical(3, 0.001), (counts, exp_counts, chi2)
    elif df == 2:
        assert chi2 < -2 * math.log(0.001), (counts, exp_counts, chi2)  # df 2: F(x) = 1 - exp(-x/2)
    else:
        assert df == 1 and chi2 < 10.828  # df 1 at alpha 0.001 (table)
    # and it is not a fluke of a lenient test: a wrong distribution is rejected by the same statistic
    wrong = N * np.full(support.sum(), 1 / support.sum())
    assert float(((counts[support] - wrong) ** 2 / wrong).sum()) > 50


def test_sampling_records_every_stage(word_model):
    m = word_model()
    s = m.generate([1, 2, 3], max_new_tokens=1, temperature=0.7, top_k=5, top_p=0.8, seed=1).steps[0]
    logits = s["logits"][-1]
    np.testing.assert_allclose(s["sample.scaled"], logits / 0.7, atol=1e-12)
    e = np.exp(logits / 0.7 - (logits / 0.7).max())
    np.testing.assert_allclose(s["sample.probs"], e / e.sum(), atol=1e-12)
    order = np.argsort(-e, kind="stable")
    assert int(s["sample.kept_top_k"]) == 5
    kept = e[order[:5]] / e[order[:5]].sum()
    n_p = next(i + 1 for i in range(5) if kept[: i + 1].sum() >= 0.8)
    assert int(s["sample.kept_top_p"]) == n_p
    final = np.zeros_like(e)
    final[order[:n_p]] = kept[:n_p] / kept[:n_p].sum()
    np.testing.assert_allclose(s["sample.final"], final, atol=1e-12)
    assert s["sample.final"].sum() == pytest.approx(1.0, abs=1e-12)


def test_a_tiny_temperature_is_greedy_not_nan(word_model):
    m = word_model()
    g = m.generate([1, 2], max_new_tokens=3, temperature=1e-300, seed=0)
    assert g.generated_ids == m.generate([1, 2], max_new_tokens=3, temperature=0).generated_ids
    assert np.isfinite(g.steps[0]["sample.probs"]).all()


def test_greedy_sampling_takes_the_first_of_a_stable_sort():
    rng = np.random.default_rng(3)
    for trial in range(20):
        logits = rng.standard_normal(50).round(1)  # rounding makes ties common
        if trial == 0:
            logits[[3, 7]] = logits.max() + 1  # an exact tie: the lower id wins
        want = int(np.argsort(-logits, kind="stable")[0])
        rec = Recorder()
        assert sample(logits, GenerationSettings(), np.random.default_rng(0), rec) == want
        assert rec.store["sample.final"][want] == 1.0 and rec.store["sample.final"].sum() == 1.0
        if trial == 0:
            assert want == 3


@pytest.mark.parametrize("kw,message", [
    (dict(temperature=-0.5), "temperature must be a number ≥ 0"),
    (dict(temperature=float("nan")), "temperature must be a number ≥ 0"),
    (dict(top_p=0.0), "top-p must be in (0, 1]"),
    (dict(top_p=1.5), "top-p must be in (0, 1]"),
    (dict(top_k=0), "top-k must be a whole number ≥ 1"),
    (dict(max_new_tokens=16), "overflows the context"),
    (dict(max_new_tokens=-1), "max-new-tokens must be a whole number ≥ 0"),
])
def test_bad_values_raise_a_clear_error(kw, message, word_model):
    m = word_model()
    with pytest.raises(TracerError, match=None) as e:
        m.generate([1], **kw)
    assert message in str(e.value)


# --------------------------------------------------------------------------- stopping


def test_stops_at_the_end_token(word_model):
    vocab = ["A", "B", "C", "<end>"]
    b_U = np.array([0.0, 0.0, 0.0, 50.0])  # the end token always wins
    m = word_model(vocab=vocab, given={"b_U": b_U})
    g = m.generate("A B", max_new_tokens=5)
    assert g.generated_ids == [3] and g.stopped == "end_token"
    assert len(g.steps) == 1  # nothing runs after the end token


def test_stops_at_a_stop_string(word_model):
    vocab = ["A", "B", "C", "<end>"]
    m = word_model(vocab=vocab, given={"b_U": np.array([0.0, 0.0, 50.0, -50.0])})  # always C
    g = m.generate("A B", max_new_tokens=6, stop=["C C"])
    assert g.text == "C C" and g.stopped == "stop_string"
    g = m.generate("A B", max_new_tokens=3, stop=["B"])  # never generated: runs to the limit
    assert g.text == "C C C" and g.stopped == "max_new_tokens"


# --------------------------------------------------------------------------- transformers parity (fixture)


@pytest.mark.skipif(not (FIXTURE / "reference.npz").exists(), reason="GPT-2 fixture not built")
def test_greedy_continuation_matches_transformers_and_the_cache_verifies_in_float32():
    with np.load(FIXTURE / "reference.npz", allow_pickle=False) as z:
        ids, greedy = z["input_ids"].tolist(), z["greedy_ids"].tolist()
    m = tracer.load(str(FIXTURE / "transformers"))
    g = m.generate(ids, max_new_tokens=len(greedy), temperature=0)
    assert g.generated_ids == greedy
    r = verify_cache(m, g)
    assert r["ok"] and r["dtype"] == "float32" and r["max_abs_diff"] <= 1e-5 * r["scale"]
    # the lens's last row is transformers' greedy choice, for every pass
    assert [int(s["lens.top_token"][-1, -1]) for s in g.steps] == greedy
