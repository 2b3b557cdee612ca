"""Beam search (`tracer.run.beams`) against transformers' `generate(num_beams=N, num_return_sequences=N,
do_sample=False, length_penalty=α, early_stopping=True)` on the fixture folders transformers made: the
same N sequences, best first, with the same scores (within float32 rounding), when no end token ends a
beam and when one does (an end token chosen so that it does); with a repetition penalty too. Every pass of
every beam is recorded (rows, parents, each beam's candidates and what became of them), saved and loaded;
the tree is shown in the terminal; `--json` gains `beams`; bad values are one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.cli import app
from tracer.errors import TracerError
from tracer.run.trace import FINISHED, KEPT
from tracer.run.trace import Generation

DATA = Path(__file__).parent / "data"
PROMPT = [5, 9, 5, 17, 9, 5]


def transformers_beams(folder, prompt, n_new, N, alpha, eos, penalty=1.0):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForCausalLM.from_pretrained(DATA / folder).eval()
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=n_new, num_beams=N, num_return_sequences=N,
                          do_sample=False, length_penalty=alpha, early_stopping=True, repetition_penalty=penalty,
                          eos_token_id=list(eos), pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    seqs = [[t for t in row[len(prompt):].tolist()] for row in out.sequences]
    return seqs, out.sequences_scores.double().numpy()


def trimmed(ids, eos):
    """A returned sequence without transformers' padding after its end token."""
    for i, t in enumerate(ids):
        if t in eos:
            return ids[: i + 1]
    return ids


def same_as_transformers(gen, seqs, scores, eos) -> None:
    assert [r.generated_ids for r in gen.rows] == [trimmed(s, eos) for s in seqs]
    np.testing.assert_allclose([r.score for r in gen.rows], scores, rtol=1e-6, atol=2e-5)  # float32 log-softmax sums
    assert [r.score for r in gen.rows] == sorted((r.score for r in gen.rows), reverse=True)  # best first


@pytest.mark.parametrize("folder,N,alpha", [("llama-tiny", 2, 1.0), ("llama-tiny", 4, 0.5), ("qwen2-tiny", 3, 2.0),
                                            ("gpt2-tiny/transformers", 3, 1.0), ("qwen2-tiny", 5, -0.5)])
def test_the_n_best_sequences_and_scores_are_transformers(folder, N, alpha):
    m = tracer.load(str(DATA / folder))
    eos = m.tokenizer.eos_ids
    gen = m.generate(PROMPT, max_new_tokens=7, beams=N, length_penalty=alpha)
    seqs, scores = transformers_beams(folder, PROMPT, 7, N, alpha, eos)
    same_as_transformers(gen, seqs, scores, eos)
    assert all(r.stopped == "max_new_tokens" and len(r.generated_ids) == 7 for r in gen.rows)
    assert len(gen.passes) == 1 + 6 * N  # the prompt pass, then one pass per beam per step
    greedy = m.generate(PROMPT, max_new_tokens=7).generated_ids
    assert any(r.generated_ids != greedy for r in gen.rows)  # beams are not just greedy: the test can fail


@pytest.mark.parametrize("folder,N,alpha", [("llama-tiny", 3, 1.0), ("qwen2-tiny", 2, 0.0), ("llama-tiny", 4, -1.0),
                                            ("gpt2-tiny/transformers", 3, 0.0)])
def test_an_end_token_ends_beams_early_as_in_transformers(folder, N, alpha, monkeypatch):
    m = tracer.load(str(DATA / folder))
    free = m.generate(PROMPT, max_new_tokens=6, beams=N)
    end = free.rows[0].generated_ids[0]  # the token the best beam takes first: make it the end token
    monkeypatch.setattr(type(m.tokenizer), "eos_ids", property(lambda self: (end,)))
    gen = m.generate(PROMPT, max_new_tokens=6, beams=N, length_penalty=alpha)
    seqs, scores = transformers_beams(folder, PROMPT, 6, N, alpha, (end,))
    same_as_transformers(gen, seqs, scores, (end,))
    stops = [r.stopped for r in gen.rows]
    assert all(r.generated_ids[-1] == end for r in gen.rows if r.stopped == "end_token")
    if alpha <= 0:  # no reward for length: the sequence that ends at once is among the best (it is not with α = 1 here)
        assert "end_token" in stops


def test_a_repetition_penalty_in_beam_search_is_transformers(monkeypatch):
    m = tracer.load(str(DATA / "llama-tiny"))
    eos = m.tokenizer.eos_ids
    gen = m.generate(PROMPT, max_new_tokens=6, beams=3, repetition_penalty=1.8)
    seqs, scores = transformers_beams("llama-tiny", PROMPT, 6, 3, 1.0, eos, penalty=1.8)
    same_as_transformers(gen, seqs, scores, eos)
    assert gen.rows[0].generated_ids != m.generate(PROMPT, max_new_tokens=6, beams=3).rows[0].generated_ids


def test_every_pass_of_every_beam_is_recorded_as_rows_and_parents(word_model, tmp_path):
    m = word_model(seed=4)
    gen = m.generate([1, 2, 3], max_new_tokens=4, beams=3)
    K = 6  # max(2, 1 + no end token) × 3
    assert gen.beams and not gen.plain and len(gen.rows) == 3
    by_step = {}
    for p in gen.passes:
        by_step.setdefault(len(p.tokens), []).append(p)
        assert p["beam.tokens"].shape == (K,) and p["beam.totals"].shape == (K,) and p["beam.fate"].shape == (K,)
        np.testing.assert_allclose(p["beam.totals"], float(p["beam.score"]) + np.log(p["sample.probs"][p["beam.tokens"]]),
                                   rtol=0, atol=1e-10)  # its sum + log p of each continuation
    assert [len(v) for v in by_step.values()] == [1, 3, 3, 3] and sorted({p.row for p in gen.passes}) == [0, 1, 2]
    for n, (k, ps) in enumerate(list(by_step.items())[:-1]):  # what each step kept is what the next step ran
        went = sorted((list(p.tokens) + [int(t)] for p in ps for t, f in zip(p["beam.tokens"], p["beam.fate"]) if f == KEPT))
        assert went == sorted(list(q.tokens) for q in by_step[k + 1])
    for q in gen.passes:  # a beam that continues another beam's sequence names it as its parent
        if q.parent is not None:
            assert q.parent != q.row
    for r in range(3):  # each finished sequence's passes: one per length, each a prefix of it
        chain = gen.lineage(r)
        assert [len(p.tokens) for p in chain] == [3, 4, 5, 6]
        assert gen.row_tokens(r)[:6] == list(chain[-1].tokens)
        last = chain[-1]
        assert int(gen.rows[r].generated_ids[-1]) in last["beam.tokens"][last["beam.fate"] == FINISHED]
    gen.save(tmp_path / "b.npz")
    back = Generation.load(tmp_path / "b.npz")
    assert back.beams and [r.generated_ids for r in back.rows] == [r.generated_ids for r in gen.rows]
    assert [r.score for r in back.rows] == [r.score for r in gen.rows]
    assert all(np.array_equal(a["beam.fate"], b["beam.fate"]) for a, b in zip(gen.passes, back.passes))
    assert back.steps == back.lineage(0) and len(back.steps) == 4


def test_json_beams_and_the_terminals_tree(runner):
    r = runner.invoke(app, ["trace", "A B C", "-n", "3", "--beams", "3", "--json"])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert [sorted(b) for b in out["beams"]] == [["ids", "score", "text"]] * 3
    scores = [b["score"] for b in out["beams"]]
    assert scores == sorted(scores, reverse=True) and out["generated_ids"] == out["beams"][0]["ids"]
    m = tracer.load("abc")
    assert out["beams"][1]["text"] == m.tokenizer.decode(out["beams"][1]["ids"])
    r = runner.invoke(app, ["trace", "A B C", "-n", "3", "--beams", "3", "--section", "loop"], env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "Beam search, 3 beams" in text and "pruned" in text and "kept" in text and "finished" in text


@pytest.mark.parametrize("args,needle", [
    (["--beams", "1"], "--beams"), (["--beams", "1000000"], "--beams"),
    (["--beams", "2", "-t", "0.8"], "beams cannot go with --temperature"),
    (["--length-penalty", "0.5"], "length-penalty works with --beams"),
    (["--beams", "2", "-n", "0"], "beams needs --max-new-tokens"),
])
def test_bad_beam_values_are_one_line_exit_2(args, needle, runner):
    r = runner.invoke(app, ["trace", "A B C", *args])
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_more_beams_than_the_vocabulary_holds_is_refused(word_model):
    m = word_model()  # 23 words: K = 2N continuations must fit
    with pytest.raises(TracerError, match="beams"):
        m.generate([1, 2], max_new_tokens=2, beams=12)
