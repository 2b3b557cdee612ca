"""Speculative decoding (`tracer.run.speculative`): with temperature 0 the tokens are exactly plain greedy
decoding's, on abc, on a GQA fixture (llama-tiny), with a second model as the draft (qwen3-tiny for qwen2-tiny,
the same tokenizer) and on SmolLM2 (when its file is in the test cache), with the passes counted: one pass of
the model per round, each computing the drafted positions at once; with temperature > 0 every accept/reject
decision, residual distribution and draw checked by hand arithmetic on a small vocabulary, and the rule's
output distribution checked against the model's own by a chi-square test. The draft's passes are recorded
as its own (its config in the file), `--json` gains `speculative`, and bad drafts are refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.cli import app
from tracer.core.equations import largest_first
from tracer.core.record import Recorder
from tracer.errors import TracerError
from tracer.run.overflow import non_finite
from tracer.run.rows import RowState
from tracer.run.settings import GenerationSettings
from tracer.run.speculative import residual, verifier
from tracer.run.trace import DRAFT, TARGET, Generation

DATA = Path(__file__).parent / "data"


def counted(gen, n_new: int) -> dict:
    """The pass counts `meta["speculative"]` states, checked against the passes and rounds themselves."""
    spec = gen.meta["speculative"]
    assert non_finite(gen) is None  # verify.*'s NaN (not judged, not drawn) is not taken for an overflow
    targets = [p for p in gen.passes if p.model == TARGET]
    drafts = [p for p in gen.passes if p.model == DRAFT]
    assert spec["target_passes"] == len(targets) == 1 + len(spec["rounds"]) and spec["draft_passes"] == len(drafts)
    assert sum(len(r["drafted_ids"]) for r in spec["rounds"]) == len(drafts)
    for r, p in zip(spec["rounds"], targets[1:]):  # one pass of the model per round, over every drafted position
        k = len(r["drafted_ids"])
        assert [int(t) for t in p["verify.drafted"]] == r["drafted_ids"] and int(p["verify.accepted"]) == r["accepted"]
        if gen.settings.cache:
            assert p.n_new == k + 1 and p["logits"].shape[0] == k + 1
    if gen.stopped == "max_new_tokens":  # the first token, then accepted + 1 a round
        assert len(gen.generated_ids) == n_new == 1 + sum(r["accepted"] + 1 for r in spec["rounds"])
    return spec


@pytest.mark.parametrize("model,draft", [("abc", "layer:0"), ("abc", "layer:2"), ("abc", "layer:3"),
                                         (str(DATA / "llama-tiny"), "layer:0"), (str(DATA / "llama-tiny"), "layer:1"),
                                         (str(DATA / "qwen2-tiny"), str(DATA / "qwen3-tiny")), ("abc", "tiny")])
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_speculative_decoding_is_plain_greedy_decoding(model, draft, k):
    m = tracer.load(model)
    for prompt, n in (("A B C", 12), ("the cat sat on the", 9)):
        plain = m.generate(prompt, max_new_tokens=n)
        spec = m.generate(prompt, max_new_tokens=n, draft=draft, draft_tokens=k)
        assert spec.generated_ids == plain.generated_ids and spec.stopped == plain.stopped
        counted(spec, n)
    pen = dict(max_new_tokens=8, repetition_penalty=1.4, frequency_penalty=0.3)  # the model's choice after penalties
    assert m.generate("A B A B", draft=draft, draft_tokens=k, **pen).generated_ids == m.generate("A B A B", **pen).generated_ids


def test_a_good_draft_saves_passes_of_the_model():
    m = tracer.load("abc")
    spec = counted(m.generate("A B C D", max_new_tokens=12, draft="layer:2"), 12)
    assert spec["target_passes"] < 12 and sum(r["accepted"] for r in spec["rounds"]) >= 6
    assert spec["rounds"][0]["accepted"] == 4  # the letter run: every draft of the first round accepted


def test_smollm2_greedy_speculative_is_plain_greedy(smollm2):
    prompt = "The capital of France is"
    plain = smollm2.generate(prompt, max_new_tokens=10)
    for draft in ("layer:20", "layer:28"):
        spec = smollm2.generate(prompt, max_new_tokens=10, draft=draft, draft_tokens=3)
        assert spec.generated_ids == plain.generated_ids
        counted(spec, 10)


def test_the_draft_passes_are_the_drafts_and_saved_as_such(tmp_path):
    m = tracer.load("abc")
    gen = m.generate("A B C", max_new_tokens=8, draft="layer:1", draft_tokens=3)
    drafts = [p for p in gen.passes if p.model == DRAFT]
    assert drafts and all(p.config.n_layers == 2 and "blocks.1.hook_resid_post" in p and "blocks.2.hook_resid_pre" not in p
                          for p in drafts)
    target = [p for p in gen.passes if p.model == TARGET]
    lens = target[0]["lens.top_token"]  # the draft is the logit lens after layer 1: its first guess is the lens's
    first = next(p for p in drafts)
    assert int(first["sample.token"]) == int(np.argmax(first["logits"][-1]))
    np.testing.assert_allclose(first["logits"][-1], _lens_logits(m, first.tokens, 1), rtol=0, atol=2e-4)
    assert lens.shape[0] == m.config.n_layers + 1
    assert gen.steps == target  # row 0's passes of the model: every verifying pass
    gen.save(tmp_path / "s.npz")
    back = Generation.load(tmp_path / "s.npz")
    assert [p.model for p in back.passes] == [p.model for p in gen.passes] and back.meta["speculative"] == gen.meta["speculative"]
    assert [p.config.n_layers for p in back.passes] == [p.config.n_layers for p in gen.passes]
    assert back.generated_ids == gen.generated_ids


def _lens_logits(m, tokens, L):
    """The logit lens after layer L, from a full recorded pass of the model: ln_final and W_U on the stream."""
    t = m.run(list(tokens))
    x = np.asarray(t[f"blocks.{L}.hook_resid_post"][-1], dtype=np.float64)  # [d_model]
    w, b = m.params["ln_final.w"], m.params["ln_final.b"]
    x = (x - x.mean()) / np.sqrt(x.var() + m.config.ln_eps) * w + b
    return x @ np.asarray(m.params["W_E"], dtype=np.float64).T


# --------------------------------------------------------------------------- sampled: by hand


def test_the_sampled_rule_by_hand_on_a_small_vocabulary(word_model, make_model):
    from tracer.core.config import Config

    m = word_model(seed=5)  # 23 words, float64
    words = [m.tokenizer.token_str(i) for i in range(m.config.d_vocab)]
    d = make_model(Config(d_vocab=len(words), n_ctx=16, d_model=4, n_heads=1, n_layers=1, dtype="float64"), words,
                   name="draft-words", init_seed=9)
    m.__dict__["_drafts"] = {"small": d}  # the draft model by name, as Model.draft_model keeps what it loaded
    T = 1.3
    seen = {"accepted": 0, "rejected": 0, "bonus": 0}
    for seed in range(12):
        gen = m.generate([1, 2, 3], max_new_tokens=7, temperature=T, seed=seed, draft="small", draft_tokens=2)
        rng = np.random.default_rng(seed)
        stream = lambda: float(rng.random())  # noqa: E731  the run's one PCG64 stream, in the order it drew
        assert float(gen.passes[0]["sample.uniform"]) == stream()  # the model's prompt pass draws the first token
        drafts = []
        for p in gen.passes[1:]:
            if p.model == DRAFT:
                assert float(p["sample.uniform"]) == stream()
                drafts.append(p)
                continue
            k, a = len(p["verify.drafted"]), int(p["verify.accepted"])
            L = np.asarray(p["logits"])[-(k + 1):]
            for i in range(k if a == k else a + 1):  # each judged draft: u < min(1, p/q) accepts
                dtok = int(p["verify.drafted"][i])
                e = np.exp((L[i] - L[i].max()) / T)
                p_i = e / e.sum()  # the model's distribution at that position, by hand
                q_i = np.asarray(drafts[len(drafts) - k + i]["sample.final"])
                u = stream()
                assert float(p["verify.uniform"][i]) == u
                np.testing.assert_allclose([p["verify.target_prob"][i], p["verify.draft_prob"][i]], [p_i[dtok], q_i[dtok]],
                                           rtol=0, atol=1e-12)
                assert (u < min(1.0, p_i[dtok] / q_i[dtok])) == (i < a)
            if a < k:  # rejected: the residual max(0, p − q), renormalised, then the band the next u falls in
                e = np.exp((L[a] - L[a].max()) / T)
                p_a = e / e.sum()
                q_a = np.asarray(drafts[len(drafts) - k + a]["sample.final"])
                r = np.maximum(p_a - q_a, 0)
                r /= r.sum()
                np.testing.assert_allclose(p["sample.final"], r, rtol=0, atol=1e-12)
                seen["rejected"] += 1
            else:
                seen["bonus"] += 1
            seen["accepted"] += a
            u = stream()
            order = largest_first(p["sample.final"])
            cum = np.cumsum(np.asarray(p["sample.final"])[order])
            assert float(p["sample.uniform"]) == u and int(p["sample.token"]) == int(order[np.searchsorted(cum, u, side="right")])
        counted(gen, 7)
    assert all(seen.values()), seen  # accepts, rejects and all-accepted rounds all happened


def test_the_rule_draws_from_the_models_distribution(word_model):
    """The accept/reject rule on fixed p and q (4 tokens): over many draws, the token it gives follows p
    (chi-square, df 3, alpha 0.001: 16.266), though the drafted token follows q."""
    p = np.array([0.1, 0.4, 0.2, 0.3])
    q = np.array([0.5, 0.1, 0.3, 0.1])
    s = GenerationSettings(temperature=1.0)
    m = word_model()
    counts = np.zeros(4)
    rng = np.random.default_rng(7)
    for _ in range(6000):
        d = int(rng.choice(4, p=q))
        row = RowState(m, [1, d], cache=False, capacity=4)
        logits = np.log(np.vstack([p, p]))  # [2, 4] the model's logits at both positions (p either way)
        rec = Recorder()
        token = verifier(s, [d], [q], row, rng)(logits, 0, rec)
        counts[d if int(rec.store["verify.accepted"]) == 1 else token] += 1  # the first token: d, or the residual's
    expected = 6000 * p
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 16.266, (counts, expected)
    wrong = 6000 * q
    assert float(((counts - wrong) ** 2 / wrong).sum()) > 100  # the draft's own distribution is rejected


def test_the_residual_of_equal_distributions_is_the_distribution():
    p = np.array([0.25, 0.75])
    np.testing.assert_allclose(residual(p, p), p)
    np.testing.assert_allclose(residual(np.array([0.5, 0.5]), np.array([0.9, 0.1])), [0, 1])


# --------------------------------------------------------------------------- shown, and refused


def test_json_speculative_and_the_terminals_rounds(runner):
    r = runner.invoke(app, ["trace", "A B C", "-n", "8", "--draft", "layer:2", "--json"])
    assert r.exit_code == 0, r.stderr
    spec = json.loads(r.stdout)["speculative"]
    assert sorted(spec) == ["draft", "draft_passes", "draft_tokens", "rounds", "target_passes"]
    assert spec["draft"] == "layer:2" and spec["draft_tokens"] == 4
    assert all(sorted(x) == ["accepted", "drafted_ids", "next_id"] for x in spec["rounds"])
    r = runner.invoke(app, ["trace", "A B C", "-n", "8", "--draft", "layer:2", "--section", "loop"], env={"COLUMNS": "150"})
    text = " ".join(r.stdout.split())
    assert "Round 1: the draft proposed" in text and "✓ accepted" in text
    assert f"8 tokens in {spec['target_passes']} passes of the model instead of 8" in text
    assert "Wouldn't you have X probability distributions" in text and "The verifying pass uses all of them" in text
    assert "overflowed" not in text  # the NaN of what was not judged or drawn is no overflow


@pytest.mark.parametrize("args,needle", [
    (["--draft", "layer:4"], "layer 4 is not one of this model's layers 0–3"),
    (["--draft", "layer:-1"], "layer -1 is not one of"),
    (["--draft", "layer:x"], "draft must be a model or layer:L"),
    (["--draft", str(DATA / "llama-tiny")], "has another vocabulary"),
    (["--draft", "layer:1", "--draft-tokens", "0"], "--draft-tokens"),
    (["--draft", "layer:1", "--draft-tokens", "1000000"], "--draft-tokens"),
    (["--draft-tokens", "3"], "draft-tokens works with --draft"),
    (["--draft", "layer:1", "-n", "0"], "draft needs --max-new-tokens"),
])
def test_bad_drafts_are_one_line_exit_2_before_any_pass(args, needle, runner):
    r = runner.invoke(app, ["trace", "A B C", *args])
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_a_draft_of_another_vocabulary_is_refused_by_the_api():
    m = tracer.load(str(DATA / "qwen2-tiny"))
    with pytest.raises(TracerError, match="another vocabulary"):
        m.generate("hello", max_new_tokens=2, draft=str(DATA / "llama-tiny"))
    assert math.isfinite(m.generate("hello", max_new_tokens=2, draft="layer:0").passes[-1]["logits"].sum())
