"""A generation of several sequences (rows, as beams are) and with a second model's passes (a draft,
as speculative decoding has), built by hand from real passes of small models with the loop's own
pieces (`RowState`, `run_pass`, `finish`): the passes a forked or rewound KV cache computes equal a
full recompute by the naive per-number decoder; the trace file (version 2) keeps every pass's
arrays, tokens, row, model and parent; version 1 files (`tests/data/traces/`, written by the tracer
before rows existed) still load, and a plain run still writes them byte for byte; the KV cache view,
the loop, `--json`, the page and `tracer show` say whose each pass is."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.cli import app
from tracer.core.config import Config
from tracer.errors import TracerError
from tracer.render import loop as LP
from tracer.render.jsonout import dumps, trace_json
from tracer.render.page import page_data
from tracer.render.view import View
from tracer.run.generate import RowState, finish, run_pass
from tracer.run.settings import GenerationSettings
from tracer.run.trace import DRAFT, TARGET, Generation, file_version

from .reference import naive_forward

TRACES = Path(__file__).parent / "data" / "traces"
WORDS = [f"w{i}" for i in range(23)]
SETTINGS = GenerationSettings(max_new_tokens=3)
TOL = 1e-10  # float64 models: a cached pass and a full recompute differ by rounding only


@pytest.fixture(scope="module")
def models(request):
    """The target (the conftest's word model: 2 layers, d_model 8) and a draft over the same words
    (1 layer, d_model 4: another config, so its passes' shapes differ from the target's)."""
    word_model, make_model = request.getfixturevalue("word_model"), request.getfixturevalue("make_model")
    draft_cfg = Config(d_vocab=len(WORDS), n_ctx=16, d_model=4, n_heads=1, n_layers=1, dtype="float64")
    return word_model(seed=3), make_model(draft_cfg, WORDS, name="draft-words", init_seed=7)


def naive_last(model, seq) -> np.ndarray:
    """The last position's logits of `seq`, recomputed whole, one number at a time."""
    return naive_forward(model.config, model.params, list(seq))["logits"][-1]  # [d_vocab]


def second_best(step) -> int:
    return int(np.argsort(-np.asarray(step["sample.probs"]), kind="stable")[1])


@pytest.fixture(scope="module")
def beams(models):
    return two_rows(models[0])


def two_rows(m, prompt=(1, 2, 3)) -> Generation:
    """Two rows from one prompt pass (as beam search keeps them): row 1 forks row 0's cache and takes
    the second-best token; then row 0 gives up its own sequence and continues row 1's (a beam taking
    over another's prefix), while row 1 goes on too. Passes, in the order run:
    0 (row 0: the prompt), 1 (row 0), 2 (row 1, from row 0), 3 (row 0, from row 1), 4 (row 1)."""
    prompt = list(prompt)
    rng = np.random.default_rng(0)
    a = RowState(m, prompt, cache=True, capacity=8)
    p0, _, top = run_pass(m, a, SETTINGS, rng)
    b = a.fork(1)
    a.append(top, m.tokenizer)
    b.append(second_best(p0), m.tokenizer)
    p1, _, _ = run_pass(m, a, SETTINGS, rng)
    p2, _, t2 = run_pass(m, b, SETTINGS, rng)
    a = b.fork(0)  # row 0 now continues row 1's sequence, from a copy of its cache
    a.append(t2, m.tokenizer)
    b.append(second_best(p2), m.tokenizer)
    p3, _, t3 = run_pass(m, a, SETTINGS, rng)
    p4, _, t4 = run_pass(m, b, SETTINGS, rng)
    a.append(t3, m.tokenizer)
    b.append(t4, m.tokenizer)
    gen = finish(m, prompt, [p0, p1, p2, p3, p4], [a, b], SETTINGS)
    gen.rows[0].score, gen.rows[1].score = -1.25, -2.5  # as beam search would score them
    return gen


@pytest.fixture(scope="module")
def speculative(models):
    """One round as speculative decoding runs it (llama.cpp's order): the target's prompt pass and its
    token t; the draft, from the prompt and t, proposing two tokens (two draft passes); one target
    pass over t and both proposals, whose every position says what the target chooses next; the
    proposals kept while they agree, then the target's own next token; the rest rewound out of both
    caches. Returns the generation, t, the proposals and how many were kept."""
    m, d = models
    prompt = [4, 5]
    rng = np.random.default_rng(0)
    target = RowState(m, prompt, True, 8)
    first, _, t = run_pass(m, target, SETTINGS, rng)
    target.append(t, m.tokenizer)
    draft = RowState(d, prompt + [t], True, 8)
    passes, proposed = [first], []
    for _ in range(2):
        q, _, token = run_pass(d, draft, SETTINGS, rng, which=DRAFT)
        q.meta = d.meta()
        passes.append(q)
        proposed.append(token)
        draft.append(token, d.tokenizer)
        target.append(token, m.tokenizer)
    verify, logits, _ = run_pass(m, target, SETTINGS, rng)  # positions of t and both proposals, at once
    passes.append(verify)
    wanted = [int(np.argmax(row)) for row in logits]  # [pos]: the target's choice after each of them
    kept = next((i for i, token in enumerate(proposed) if token != wanted[i]), len(proposed))
    n = len(prompt) + 1 + kept
    target.rewind(n)
    draft.rewind(n)
    target.append(wanted[kept], m.tokenizer)
    target.stopped = "max_new_tokens"
    return finish(m, prompt, passes, [target], SETTINGS), t, proposed, kept


def same_pass(a, b) -> None:
    """Two passes alike: every array (dtype and bits), tokens, texts, start, row, model, parent, config."""
    assert list(a) == list(b)
    for name in a:
        x, y = np.asarray(a[name]), np.asarray(b[name])
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), name
    assert list(a.tokens) == list(b.tokens) and a.token_strs == b.token_strs
    assert (a.start, a.row, a.model, a.parent, a.config) == (b.start, b.row, b.model, b.parent, b.config)


# --------------------------------------------------------------------------- the loop's pieces


def test_forked_rows_compute_what_a_full_recompute_gives(beams, models):
    m, _ = models
    p0, p1, p2, p3, p4 = beams.passes
    assert [(p.row, p.parent, p.start, len(p.tokens)) for p in beams.passes] == [
        (0, None, 0, 3), (0, None, 3, 4), (1, 0, 3, 4), (0, 1, 4, 5), (1, None, 4, 5)]
    assert list(p2.tokens[:3]) == list(p1.tokens[:3]) and p2.tokens[3] != p1.tokens[3]  # two tokens at D
    assert list(p3.tokens[:4]) == list(p2.tokens)  # row 0 took over row 1's sequence
    for p in beams.passes:  # each forked cache held exactly the keys and values of its row's sequence
        np.testing.assert_allclose(p["logits"][-1], naive_last(m, p.tokens), rtol=0, atol=TOL)
    assert beams.row_tokens(0) == [int(t) for t in p3.tokens] + [int(p3["sample.token"])]
    assert beams.row_tokens(1) == [int(t) for t in p4.tokens] + [int(p4["sample.token"])]
    assert beams.steps == [p0, p2, p3]  # row 0's sequence: the prompt pass, row 1's pass it took over, its own
    assert beams.lineage(1) == [p0, p2, p4]
    # both rows went on from the second-best token at D: the prompt pass's own draw, and pass 1's, were dropped
    assert [beams.kept(p) for p in beams.passes] == [False, False, True, True, True]
    assert not beams.plain and file_version(beams) == 2


def test_a_draft_round_computes_what_a_full_recompute_gives(speculative, models):
    m, d = models
    gen, t, proposed, kept = speculative
    assert [p.model for p in gen.passes] == [TARGET, DRAFT, DRAFT, TARGET] and all(p.row == 0 for p in gen.passes)
    verify = gen.passes[3]
    assert (verify.start, verify.n_new) == (2, 3) and list(verify.tokens[2:]) == [t] + proposed
    for p in gen.passes:
        np.testing.assert_allclose(p["logits"][-1], naive_last(m if p.model == TARGET else d, p.tokens), rtol=0, atol=TOL)
    whole = naive_forward(m.config, m.params, list(verify.tokens))["logits"][2:]  # [pos, d_vocab]
    np.testing.assert_allclose(verify["logits"], whole, rtol=0, atol=TOL)  # every proposal checked in one pass
    assert gen.passes[1].config == d.config and gen.passes[1].meta["model"] == "draft-words"
    assert gen.generated_ids == [t] + proposed[:kept] + [int(np.argmax(whole[kept]))]
    assert gen.steps == [gen.passes[0], verify]
    # the verify pass draws from its last position: its token follows only when both proposals were kept
    assert [gen.kept(p) for p in gen.passes[1:]] == [kept >= 1, kept >= 2, kept == 2]


def test_rewinding_forgets_the_rejected_tokens_in_the_cache(models):
    m, _ = models
    rng = np.random.default_rng(1)
    row = RowState(m, [1, 2], True, 8)
    run_pass(m, row, SETTINGS, rng)
    for t in (7, 8, 9):
        row.append(t, m.tokenizer)
    run_pass(m, row, SETTINGS, rng)
    row.rewind(3)  # keep 1 2 7
    assert row.seq == [1, 2, 7] and row.generated == [7] and row.kv.length == 3 and row.start == 3
    row.append(11, m.tokenizer)
    p, _, _ = run_pass(m, row, SETTINGS, rng)
    assert (p.start, list(p.tokens)) == (3, [1, 2, 7, 11])
    np.testing.assert_allclose(p["logits"][-1], naive_last(m, [1, 2, 7, 11]), rtol=0, atol=TOL)


# --------------------------------------------------------------------------- the file


@pytest.mark.parametrize("which", ["beams", "speculative"])
def test_every_pass_round_trips_through_a_version_2_file(which, beams, speculative, tmp_path):
    gen = beams if which == "beams" else speculative[0]
    path = tmp_path / "g.npz"
    gen.save(path)
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        assert meta["version"] == 2 and len(meta["steps"]) == len(gen.passes)
        assert [s["row"] for s in meta["steps"]] == [p.row for p in gen.passes]
        assert [s["model"] for s in meta["steps"]] == [p.model for p in gen.passes]
        assert ("draft" in meta) == (which == "speculative")
    back = Generation.load(path)
    assert len(back.passes) == len(gen.passes)
    for a, b in zip(gen.passes, back.passes):
        same_pass(a, b)
        assert a.meta["model"] == b.meta["model"]
    assert [r.to_dict() for r in back.rows] == [r.to_dict() for r in gen.rows]
    assert places(gen.steps, gen.passes) == places(back.steps, back.passes)
    assert back.prompt_ids == gen.prompt_ids and back.settings == gen.settings and back.stopped == gen.stopped
    back.save(tmp_path / "again.npz")
    assert digest(tmp_path / "again.npz") == digest(path)


def places(some, passes) -> list[int]:
    """Where each of `some` is among `passes` (by identity: a pass's arrays do not compare as one value)."""
    return [next(i for i, p in enumerate(passes) if p is s) for s in some]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


V1 = sorted(TRACES.glob("*-v1.npz"))


@pytest.mark.parametrize("path", V1, ids=[p.stem for p in V1])
def test_version_1_files_load_and_a_plain_run_writes_them_again(path, tmp_path):
    gen = Generation.load(path)
    assert gen.plain and len(gen.rows) == 1 and gen.steps == gen.passes
    assert all((p.row, p.model, p.parent) == (0, TARGET, None) for p in gen.passes)
    gen.save(tmp_path / "again.npz")  # the lowest version that holds it: version 1, the same bytes
    with np.load(path, allow_pickle=False) as z:
        old_meta = json.loads(str(z["meta"]))
    if "settings" in old_meta:
        assert digest(tmp_path / "again.npz") == digest(path)
    else:  # a single pass saved before settings were never None: the same arrays, and now its (greedy) settings
        with np.load(path, allow_pickle=False) as a, np.load(tmp_path / "again.npz", allow_pickle=False) as b:
            assert set(a.files) == set(b.files)
            assert all(np.array_equal(a[k], b[k]) for k in a.files if k != "meta")
            new_meta = json.loads(str(b["meta"]))
        assert {k: v for k, v in new_meta.items() if k != "settings"} == old_meta
        assert new_meta["settings"]["max_new_tokens"] == 0 and new_meta["settings"]["temperature"] == 0


def test_a_version_1_file_holds_what_this_tracer_computes_again():
    """`rotary-sampled-v1.npz`: `tracer trace "A B" --model rotary -n 2 -t 0.8 --seed 1 --save`, run by the
    tracer before rows existed; this one, rerun, gives the same passes."""
    old = Generation.load(TRACES / "rotary-sampled-v1.npz")
    new = tracer.load("rotary").generate("A B", max_new_tokens=2, temperature=0.8, seed=1)
    assert old.generated_ids == new.generated_ids and old.stopped == new.stopped
    for a, b in zip(old.passes, new.passes):
        assert list(a) == list(b) and a.start == b.start and list(a.tokens) == list(b.tokens)
        for name in a:
            np.testing.assert_allclose(np.asarray(a[name], dtype=float), np.asarray(b[name], dtype=float),
                                       rtol=1e-12, atol=1e-12, err_msg=name)


def rewrite(src: Path, dst: Path, change) -> Path:
    with np.load(src, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    change(meta)
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(dst, **arrays)
    return dst


@pytest.mark.parametrize("change, says", [
    (lambda m: m["steps"][2].update(row=5), "pass 2: row 5 or parent 0 is not one of the 2 rows"),
    (lambda m: m["steps"][2].update(parent=-1), "parent -1 is not one of the 2 rows"),
    (lambda m: m["steps"][1].update(model="oracle"), "model 'oracle' is not 'target'"),
    (lambda m: m["steps"][2].update(ids=[1, 2, 3, 99]), "'ids' is not 4 token ids"),
    (lambda m: m["steps"][0].update(row=1), "pass 0 is not row 0's prompt pass"),
    (lambda m: m["rows"][0].update(generated_ids=[0]), "row 0 is not the generated_ids"),
    (lambda m: m.update(rows=[]), "'rows' is not a list of 1 to 1,024 rows"),
    (lambda m: m["rows"][1].update(score="high"), "row 1 is not {generated_ids, text, stopped, score}"),
    (lambda m: m.pop("rows"), "KeyError: 'rows'"),
])
def test_damaged_version_2_metadata_is_refused_in_one_line(beams, tmp_path, change, says):
    good = tmp_path / "good.npz"
    beams.save(good)
    with pytest.raises(TracerError, match="damaged trace metadata") as e:
        Generation.load(rewrite(good, tmp_path / "bad.npz", change))
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_draft_entry_is_checked_against_the_drafts_config(speculative, tmp_path):
    good = tmp_path / "good.npz"
    speculative[0].save(good)
    with np.load(good, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["steps.1.blocks.1.hook_resid_post"] = arrays["steps.1.blocks.0.hook_resid_post"]  # the draft has 1 layer
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(TracerError, match="is in layer 1, but its config has 1 layer"):
        Generation.load(tmp_path / "bad.npz")
    bad = rewrite(good, tmp_path / "nodraft.npz", lambda m: m.pop("draft"))
    with pytest.raises(TracerError, match="model 'draft' is not 'target'"):
        Generation.load(bad)


# --------------------------------------------------------------------------- what the renderers say


def test_the_kv_cache_view_and_the_loop_say_whose_each_pass_is(beams, speculative, models, render_text):
    m, _ = models
    text = render_text(LP.kv_cache_view(beams, m.tokenizer, View()), 120)
    table = {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("│ ").split("│")]
                                               for line in text.splitlines() if line.startswith("│"))}
    assert [table[str(n)][:3] for n in range(5)] == [
        ["row 0", "| ABC", "0 + 3"], ["row 0", "ABC | D", "3 + 1"], ["row 1, continuing row 0", "ABC | D", "3 + 1"],
        ["row 0, continuing row 1", "ABCD | E", "4 + 1"], ["row 1", "ABCD | E", "4 + 1"]]
    flat = " ".join(text.split())
    assert "This generation holds 2 rows and 0 pass(es) of a draft model" in flat
    loop = " ".join(render_text(LP.generation_steps(beams, m.tokenizer, View()), 120).split())
    assert "pass 3: row 0, continuing row 1: reads" in loop and "pass 4: row 1: reads" in loop
    assert "not kept: no row's sequence goes on with it" in loop  # pass 1, whose token both rows dropped
    assert "Row 1 generated 3 token(s)" in loop and "; score -2.5000." in loop
    gen = speculative[0]
    text = " ".join(render_text(LP.kv_cache_view(gen, m.tokenizer, View()), 120).split())
    assert "row 0 (the draft model)" in text and "1 row and 2 pass(es) of a draft model" in text


def test_json_lists_every_row_and_every_pass(beams, speculative, models):
    m, _ = models
    out = json.loads(dumps(trace_json(beams, m.tokenizer)))
    assert [(p["row"], p["model"], p["parent"]) for p in out["passes"]] == [
        (0, "target", None), (0, "target", None), (1, "target", 0), (0, "target", 1), (1, "target", None)]
    assert [r["generated_ids"] for r in out["rows"]] == [r.generated_ids for r in beams.rows]
    assert out["generated_ids"] == beams.generated_ids and [r["score"] for r in out["rows"]] == [-1.25, -2.5]
    spec = json.loads(dumps(trace_json(speculative[0], m.tokenizer)))
    assert [p["model"] for p in spec["passes"]] == ["target", "draft", "draft", "target"]
    plain = json.loads(dumps(trace_json(m.generate([1, 2], max_new_tokens=2), m.tokenizer)))
    assert "rows" not in plain and "passes" not in plain  # one row of the target's passes: the record as before


def test_the_page_carries_whose_each_pass_is(beams, models):
    m, _ = models
    d = page_data(beams, m.tokenizer)
    assert [q["who"] for q in d["rows"]["passes"]] == ["row 0", "row 0", "row 1, continuing row 0",
                                                       "row 0, continuing row 1", "row 1"]
    assert [q["step"] for q in d["rows"]["passes"]] == [0, None, 1, 2, None]  # row 0's sequence: `passes`
    assert len(d["passes"]) == 3 and "rows" not in page_data(m.generate([1, 2], max_new_tokens=1), m.tokenizer)


@pytest.mark.parametrize("which", ["beams", "speculative"])
def test_tracer_show_renders_a_version_2_file(which, beams, speculative, runner, tmp_path):
    gen = beams if which == "beams" else speculative[0]
    gen.save(tmp_path / "g.npz")
    r = runner.invoke(app, ["show", str(tmp_path / "g.npz"), "--section", "loop"])
    assert r.exit_code == 0, r.output
    assert "(the draft model)" in r.output if which == "speculative" else "row 1, continuing row 0" in r.output

