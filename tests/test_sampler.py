"""The draw, stage by stage (`tracer.run.sampler`): penalties, temperature, top-k, top-p, min-p, the draw.

References: transformers' own logits processors (`RepetitionPenaltyLogitsProcessor`,
`TemperatureLogitsWarper`, `TopKLogitsWarper`, `TopPLogitsWarper`, `MinPLogitsWarper`, applied in
`generate()`'s order to the logits tracer recorded) for the distribution drawn from; transformers'
`generate(do_sample=False, repetition_penalty=R)` on the same fixture folders for the greedy tokens;
hand arithmetic for the presence and frequency penalties (llama.cpp's and the OpenAI API's), the
window of `penalty_last_n` and min-p. A stage that is off records nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.cli import app
from tracer.core.record import Recorder
from tracer.errors import TracerError
from tracer.run.sampler import sample, token_counts
from tracer.run.settings import GenerationSettings

DATA = Path(__file__).parent / "data"
FOLDERS = ["llama-tiny", "qwen2-tiny", "gpt2-tiny/transformers"]


def processors(s: GenerationSettings):
    """transformers' processors for settings `s`, in `generate()`'s order (`_get_logits_processor`)."""
    from transformers.generation.logits_process import (LogitsProcessorList, MinPLogitsWarper,
                                                        RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)

    out = LogitsProcessorList()
    if s.repetition_penalty != 1:
        out.append(RepetitionPenaltyLogitsProcessor(s.repetition_penalty))
    out.append(TemperatureLogitsWarper(s.temperature))
    if s.top_k is not None:
        out.append(TopKLogitsWarper(s.top_k))
    if s.top_p is not None:
        out.append(TopPLogitsWarper(s.top_p))
    if s.min_p is not None:
        out.append(MinPLogitsWarper(s.min_p))
    return out


CASES = [dict(temperature=0.7, repetition_penalty=1.3),
         dict(temperature=1.2, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.5),
         dict(temperature=0.9, min_p=0.2),
         dict(temperature=2.0, top_p=0.8, min_p=0.02, repetition_penalty=0.7)]  # R < 1 rewards repeats


@pytest.mark.parametrize("folder", FOLDERS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_distribution_drawn_from_is_transformers_processors(folder, case):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    m = tracer.load(str(DATA / folder))
    gen = m.generate([5, 9, 5, 17, 9, 5], max_new_tokens=6, seed=case, **CASES[case])
    procs = processors(gen.settings)
    cut = 0
    for p in gen.passes:
        ids = torch.tensor([p.tokens.tolist()])  # the context so far: prompt and generated tokens
        scores = torch.tensor(np.asarray(p["logits"][-1], dtype=np.float32))[None]  # [1, d_vocab] as recorded
        want = torch.softmax(procs(ids, scores), dim=-1)[0].double().numpy()  # [d_vocab]
        np.testing.assert_allclose(p["sample.final"], want, rtol=0, atol=2e-6)  # float32 rounding
        assert int(np.count_nonzero(p["sample.final"])) == int(np.count_nonzero(want))  # the same tokens cut
        cut += int(np.count_nonzero(want == 0))
        if gen.settings.repetition_penalty != 1:
            logits = np.asarray(p["logits"][-1], dtype=np.float64)
            seen = np.isin(np.arange(len(logits)), p.tokens)
            R = gen.settings.repetition_penalty
            np.testing.assert_allclose(p["sample.penalized"],
                                       np.where(seen, np.where(logits < 0, logits * R, logits / R), logits), rtol=0, atol=0)
    s = gen.settings
    assert cut > 0 or (s.top_k, s.top_p, s.min_p) == (None, None, None)  # the cuts cut something: the comparison can fail
    if s.repetition_penalty != 1:  # and the penalty moved some logit
        assert max(np.abs(p["sample.penalized"] - p["logits"][-1]).max() for p in gen.passes) > 1e-2


@pytest.mark.parametrize("folder", FOLDERS)
def test_greedy_with_a_repetition_penalty_gives_transformers_tokens(folder):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForCausalLM.from_pretrained(DATA / folder).eval()
    m = tracer.load(str(DATA / folder))
    prompt = [5, 9, 5, 17, 9, 5]
    changed = False
    for R in (1.0, 1.3, 2.5):
        gen = m.generate(prompt, max_new_tokens=12, repetition_penalty=R)
        with torch.no_grad():
            out = hf.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, repetition_penalty=R,
                              eos_token_id=None, pad_token_id=0)
        want = out[0, len(prompt):].tolist()
        assert gen.generated_ids == want[:len(gen.generated_ids)], R
        assert len(gen.generated_ids) == 12 or gen.stopped == "end_token"
        plain = m.generate(prompt, max_new_tokens=12).generated_ids
        changed |= R != 1 and gen.generated_ids != plain
    assert changed  # the penalty changed the tokens somewhere: the comparison can fail


def test_presence_and_frequency_penalties_by_hand():
    logits = np.array([3.104, 1.0, -0.5, 2.0, 0.25])  # [d_vocab] 5 tokens
    context = [0, 2, 0, 3]  # token 0 twice, 2 and 3 once, 1 and 4 never
    s = GenerationSettings(presence_penalty=0.5, frequency_penalty=0.1)
    rec = Recorder()
    token = sample(logits, s, np.random.default_rng(0), rec, context)
    assert rec.store["sample.counts"].tolist() == [2, 0, 1, 1, 0]
    # ␣the: count 2 → 3.104 − 0.5 − 2×0.1 = 2.404, and so on
    np.testing.assert_allclose(rec.store["sample.penalized"], [2.404, 1.0, -1.1, 1.4, 0.25], rtol=0, atol=1e-12)
    assert token == 0  # still the most likely
    both = GenerationSettings(repetition_penalty=2.0, presence_penalty=0.5, frequency_penalty=0.1)
    rec = Recorder()
    sample(logits, both, np.random.default_rng(0), rec, context)
    # the repetition penalty first (÷ 2 above 0, × 2 below), then the presence and frequency penalties
    np.testing.assert_allclose(rec.store["sample.penalized"], [1.552 - 0.7, 1.0, -1.0 - 0.6, 1.0 - 0.6, 0.25], atol=1e-12)
    assert int(np.argmax(rec.store["sample.penalized"])) == 1 and int(rec.store["sample.token"]) == 1


def test_penalty_last_n_counts_only_the_window():
    assert token_counts([0, 1, 1, 2, 3], 5, None).tolist() == [1, 2, 1, 1, 0]
    assert token_counts([0, 1, 1, 2, 3], 5, 2).tolist() == [0, 0, 1, 1, 0]
    assert token_counts([0, 1, 1, 2, 3], 5, 0).tolist() == [0] * 5
    assert token_counts([0, 1], 5, 99).tolist() == [1, 1, 0, 0, 0]
    assert not GenerationSettings(repetition_penalty=1.5, penalty_last_n=0).penalized  # a window of nothing


def test_min_p_keeps_what_reaches_p_times_the_top_probability():
    probs = np.array([0.05, 0.40, 0.02, 0.30, 0.23])
    s = GenerationSettings(temperature=1.0, min_p=0.5)  # keep p ≥ 0.5 × 0.40 = 0.20: B, D, E
    rec = Recorder()
    sample(np.log(probs), s, np.random.default_rng(1), rec)
    assert int(rec.store["sample.kept_min_p"]) == 3
    np.testing.assert_allclose(rec.store["sample.final"], np.array([0, 0.40, 0, 0.30, 0.23]) / 0.93, atol=1e-12)
    rec = Recorder()
    sample(np.log(probs), s.replace(min_p=1.0), np.random.default_rng(1), rec)  # only the top one
    assert int(rec.store["sample.kept_min_p"]) == 1 and rec.store["sample.final"][1] == 1.0


def test_a_stage_that_is_off_records_nothing(word_model):
    m = word_model()
    plain = m.generate([1, 2, 3], max_new_tokens=2, temperature=0.8).passes[0]
    assert not any(n in plain for n in ("sample.counts", "sample.penalized", "sample.kept_min_p"))
    on = m.generate([1, 2, 3], max_new_tokens=2, temperature=0.8, min_p=0.1, frequency_penalty=0.2).passes[1]
    assert all(n in on for n in ("sample.counts", "sample.penalized", "sample.kept_min_p"))
    assert on["sample.counts"].sum() == len(on.tokens)  # the whole context, prompt and generated


def test_greedy_with_penalties_takes_the_most_likely_penalized_token(word_model):
    m = word_model(seed=2)
    gen = m.generate([1, 2, 1, 2], max_new_tokens=5, frequency_penalty=3.0)
    for p in gen.passes:
        assert int(p["sample.token"]) == int(np.argmax(p["sample.penalized"]))
        counts = np.bincount(p.tokens, minlength=m.config.d_vocab)
        np.testing.assert_allclose(p["sample.penalized"], p["logits"][-1] - 3.0 * counts, rtol=0, atol=1e-12)
    assert gen.generated_ids != m.generate([1, 2, 1, 2], max_new_tokens=5).generated_ids  # the penalty mattered


@pytest.mark.parametrize("args,needle", [
    (["--min-p", "0"], "min-p must be in (0, 1]"), (["--min-p", "1.5"], "--min-p"),
    (["--repetition-penalty", "0"], "repetition-penalty must be a number > 0"), (["--repetition-penalty", "-1"], "--repetition-penalty"),
    (["--presence-penalty", "-0.5"], "--presence-penalty"), (["--frequency-penalty", "nan"], "frequency-penalty"),
    (["--penalty-last-n", "-1"], "--penalty-last-n"),
])
def test_bad_stage_values_are_one_line_exit_2(args, needle, runner):
    r = runner.invoke(app, ["trace", "A B C", *args])
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("kw,message", [
    (dict(min_p=0), r"min-p must be in \(0, 1\]"), (dict(repetition_penalty=float("nan")), "repetition-penalty"),
    (dict(presence_penalty=-1), "presence-penalty must be a number ≥ 0"),
])
def test_bad_stage_values_in_the_api(kw, message):
    with pytest.raises(TracerError, match=message):
        tracer.load("abc").generate("A B", **kw)


def test_the_json_and_the_file_keep_the_stages(runner, tmp_path):
    r = runner.invoke(app, ["trace", "A B A B", "-n", "2", "-t", "0.9", "--min-p", "0.1", "--repetition-penalty", "1.2",
                            "--presence-penalty", "0.3", "--penalty-last-n", "3", "--json", "--save", str(tmp_path / "s.npz")])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["settings"]
    assert (got["min_p"], got["repetition_penalty"], got["presence_penalty"], got["penalty_last_n"]) == (0.1, 1.2, 0.3, 3)
    back = tracer.Generation.load(tmp_path / "s.npz")
    assert back.settings.min_p == 0.1 and back.settings.penalty_last_n == 3
    assert back.passes[0]["sample.counts"].sum() == 3 and "sample.kept_min_p" in back.passes[1]
