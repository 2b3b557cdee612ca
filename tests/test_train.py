"""`tracer train` and `tracer.run.train`: a seeded AdamW loop that learns, saves transformers' GPT-2 layout,
stops cleanly, and refuses what it cannot use with one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.cli import app
from tracer.readers.gpt2 import gpt2_tensors
from tracer.core.params import init_weights
from tracer.run.train import TrainSettings, train

TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--context", "16", "--batch", "4"]
TEXT = "\n".join(["A B C D E F G H I J K", "one two three four five six", "Monday Tuesday Wednesday Thursday"] * 40)


@pytest.fixture
def corpus(tmp_path) -> Path:
    p = tmp_path / "corpus.txt"
    p.write_text(TEXT + "\n", encoding="utf-8")
    return p


def test_training_lowers_the_loss_and_is_seeded():
    ids = np.asarray(tracer.load("tiny").tokenizer.encode(TEXT), dtype=np.int64)
    s = TrainSettings(steps=40, layers=1, d_model=16, heads=2, context=16, batch=4, lr=1e-2, seed=3)
    a, b = train(ids, s), train(ids, s)
    assert a.stopped == "done" and len(a.losses) == 40
    assert np.mean(a.losses[-5:]) < 0.5 * np.mean(a.losses[:3])  # a repetitive text is learned fast
    assert a.losses == b.losses and all(np.array_equal(a.params[n], b.params[n]) for n in a.params)
    c = train(ids, TrainSettings(**{**s.__dict__, "seed": 4}))
    assert c.losses != a.losses
    assert np.all(a.params["b_U"] == 0)  # GPT-2 has no unembedding bias: it is not trained


def test_learning_rate_warms_up_then_decays_along_a_cosine():
    s = TrainSettings(steps=100, lr=1.0, warmup=10)
    lrs = [s.lr_at(i) for i in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)  # linear over 10 steps
    assert all(x >= y for x, y in zip(lrs[9:], lrs[10:]))  # then only down
    assert lrs[-1] == pytest.approx(0.1)  # to a tenth at the last step
    assert lrs[(10 + 99) // 2] == pytest.approx(0.55, abs=0.02)  # half-way along the cosine


def test_a_stop_request_ends_after_a_whole_step():
    ids = np.asarray(tracer.load("tiny").tokenizer.encode(TEXT), dtype=np.int64)
    s = TrainSettings(steps=10, layers=1, d_model=16, heads=2, context=16, batch=2)
    asked = iter([False, False, False, True])
    r = train(ids, s, should_stop=lambda: next(asked))
    assert r.stopped == "interrupted" and len(r.losses) == 3
    full = train(ids, s)
    assert full.losses[:3] == r.losses  # the same three steps as an uninterrupted run
    asked = iter([False, False, False, True])
    again = train(ids, s, should_stop=lambda: next(asked))
    assert all(np.array_equal(r.params[n], again.params[n]) for n in r.params)  # and the weights of step 3, whole


def test_cli_trains_saves_gpt2_layout_and_trace_runs_it(runner, corpus, tmp_path):
    out = tmp_path / "model"
    r = runner.invoke(app, ["train", str(corpus), "--out", str(out), "--steps", "5", *TINY])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "training.json"]
    info = json.loads((out / "training.json").read_text())
    assert info["steps"] == 5 and info["corpus"] == "corpus.txt" and len(info["losses"]) == 5
    assert info["corpus_sha256"] == __import__("hashlib").sha256(corpus.read_bytes()).hexdigest()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "gpt2" and cfg["n_layer"] == 1 and cfg["n_embd"] == 16 and cfg["n_positions"] == 16
    m = tracer.load(str(out))
    assert m.trained and m.config.n_layers == 1
    t = runner.invoke(app, ["trace", "A B C", "--model", str(out), "-n", "1"])
    assert t.exit_code == 0, t.output
    assert "trained by tracer" in t.stdout and "corpus.txt" in t.stdout and "untrained" not in t.stdout
    again = tmp_path / "again"
    runner.invoke(app, ["train", str(corpus), "--out", str(again), "--steps", "5", *TINY])
    for name in ("model.safetensors", "config.json", "training.json"):
        assert (out / name).read_bytes() == (again / name).read_bytes(), name  # same seed, same bytes


def test_saved_tensors_are_transformers_gpt2_names_and_shapes():
    fixture = Path(__file__).parent / "data" / "gpt2-tiny" / "transformers"
    from tracer.formats.files import read_safetensors_header

    header, _ = read_safetensors_header(fixture / "model.safetensors")
    want = {k: v["shape"] for k, v in header.items() if k != "__metadata__"}
    m = tracer.load(str(fixture))
    got = {k: list(v.shape) for k, v in gpt2_tensors(m.config, m.params).items()}
    assert got == want  # the layout transformers' save_pretrained writes
    for k, v in gpt2_tensors(m.config, m.params).items():  # and the same numbers, read back
        ours = np.asarray(v)
        from tracer.formats.files import load_safetensors

        theirs = load_safetensors(fixture / "model.safetensors")[0][k]
        assert np.array_equal(ours, theirs), k


@pytest.mark.parametrize("content, message", [
    (b"", "the corpus is empty"),
    (b"   \n\n", "the corpus is empty"),
    (b"abc\x00def", "a binary file"),
    (b"\xff\xfe\x00a", "a binary file"),
    (b"caf\xe9 au lait", "not UTF-8 text"),
    (b"A B", "training needs at least --context + 1"),
])
def test_unusable_corpora_are_one_line_errors(runner, tmp_path, content, message):
    p = tmp_path / "c.txt"
    p.write_bytes(content)
    r = runner.invoke(app, ["train", str(p), "--out", str(tmp_path / "m"), "--steps", "2", *TINY])
    assert r.exit_code == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "m").exists()


def test_bad_options_and_outputs_are_refused_before_training(runner, corpus, tmp_path):
    def run(*args):
        return runner.invoke(app, ["train", str(corpus), *args])

    r = run("--out", str(tmp_path / "m"), "--steps", "0")
    assert r.exit_code == 2 and "--steps" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run("--out", str(tmp_path / "m"), "--d-model", "10", "--heads", "4")
    assert r.exit_code == 2 and "not divisible" in r.stderr
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    r = run("--out", str(full), "--steps", "2", *TINY)
    assert r.exit_code == 2 and "--force" in r.stderr and (full / "keep.txt").read_text() == "mine"
    r = run("--out", str(full), "--steps", "2", "--force", *TINY)  # --force never deletes what tracer did not write
    assert r.exit_code == 2 and "did not write" in r.stderr and (full / "keep.txt").read_text() == "mine"
    r = run("--out", str(corpus), "--steps", "2")
    assert r.exit_code == 2 and "is a file" in r.stderr
    r = runner.invoke(app, ["train", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "m")])
    assert r.exit_code == 2 and "no such file" in r.stderr
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_loss_that_stops_being_finite_keeps_the_last_good_weights(runner, corpus, tmp_path, monkeypatch):
    import tracer.run.train as tr

    real = tr.loss_and_grads
    calls = {"n": 0}

    def third_goes_nan(cfg, weights, tokens):
        calls["n"] += 1
        loss, grads = real(cfg, weights, tokens)
        return (float("nan") if calls["n"] == 3 else loss), grads

    monkeypatch.setattr(tr, "loss_and_grads", third_goes_nan)
    out = tmp_path / "m"
    r = runner.invoke(app, ["train", str(corpus), "--out", str(out), "--steps", "6", *TINY])
    assert r.exit_code == 2, r.output
    assert "step 3" in r.stderr and "not finite" in r.stderr and "step 2" in r.stderr
    assert json.loads((out / "training.json").read_text())["steps"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_the_last_completed_step_and_leaves_nothing_half_written(corpus, tmp_path, sig):
    out = tmp_path / "m"
    p = subprocess.Popen([sys.executable, "-m", "tracer", "train", str(corpus), "--out", str(out), "--steps", "100000",
                          *TINY], stderr=subprocess.PIPE, text=True, cwd=tmp_path, env={**os.environ, "COLUMNS": "100"})
    deadline = time.time() + 60
    line = ""
    while time.time() < deadline and "step" not in line:
        line = p.stderr.readline()  # the first progress line: a step completed
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    info = json.loads((out / "training.json").read_text())
    assert 1 <= info["steps"] < 100000 and info["stopped"] == "interrupted"
    assert "saved the weights of step" in err
    assert sorted(x.name for x in tmp_path.iterdir()) == ["corpus.txt", "m"]  # no temporary folder left
    m = tracer.load(str(out))
    assert np.isfinite(m.params["W_E"]).all()


def test_init_is_gpt2s_seeded_initialisation():
    s = TrainSettings(layers=1, d_model=16, heads=2, context=16, seed=7)
    r = train(np.arange(40) % 50257, TrainSettings(**{**s.__dict__, "steps": 1}))
    want = init_weights(s.config(), 7)
    assert r.params["W_E"].shape == want["W_E"].shape
    assert not np.array_equal(r.params["W_E"], want["W_E"])  # one step moved it


def test_tracer_corpus_writes_the_shipped_models_corpus_as_the_tool_does(runner, tmp_path):
    """`tracer corpus` ships the generator (a wheel has no tools/): the same bytes as tools/make_corpus.py."""
    import hashlib
    import importlib.util
    import json
    from pathlib import Path

    from tracer.cli import app

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("make_corpus", root / "tools" / "make_corpus.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    r = runner.invoke(app, ["corpus", "--out", str(tmp_path / "c.txt"), "--seed", "3", "--size", "500"])
    assert r.exit_code == 0 and "wrote" in r.stderr and "500 lines" in r.stderr
    assert (tmp_path / "c.txt").read_bytes() == tool.corpus(3, 500).encode("ascii")
    assert runner.invoke(app, ["corpus", "--check", str(tmp_path / "c.txt"), "--seed", "3", "--size", "500"]).exit_code == 0
    r = runner.invoke(app, ["corpus", "--check", str(tmp_path / "c.txt"), "--seed", "4", "--size", "500"])
    assert r.exit_code == 1 and "first at line 1" in r.stderr
    shipped = json.loads((root / "tracer" / "models" / "abc" / "training.json").read_text())
    from tracer.run.corpus import corpus

    assert hashlib.sha256(corpus().encode("ascii")).hexdigest() == shipped["corpus_sha256"]  # the default: abc's corpus
    r = runner.invoke(app, ["corpus", "--out", str(tmp_path / "i.txt"), "--seed", "3", "--size", "500", "--recipe", "induction"])
    assert r.exit_code == 0 and (tmp_path / "i.txt").read_bytes() == tool.corpus(3, 500, "induction").encode("ascii")
    assert tool.corpus(3, 500, "induction") != tool.corpus(3, 500, "recall")
    r = runner.invoke(app, ["corpus", "--out", str(tmp_path / "x.txt"), "--recipe", "inductoin"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "the recipes are induction, recall" in r.stderr, r.stderr
    assert "tracer corpus" in shipped["corpus_about"]


def test_train_help_says_it_trains_gpt2_shaped_models_only(runner):
    from tracer.cli import app

    r = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    out = " ".join(r.output.split())
    assert "trains GPT-2-shaped models only" in out
    assert "Qwen3, OLMo 2, Phi-3, Gemma 2 and Gemma 3 blocks" in out  # what the backward pass covers besides


def test_the_corpus_words_are_gpt2s_word_tokens_and_the_copy_test_is_new_to_it():
    """word_tokens.txt is what tools/make_words.py makes from GPT-2's vocabulary (17,534 single tokens, the
    first 5,000 the common words), and none of copy_cases()'s phrases is in either recipe's corpus: the shipped model's
    copying test asks for what it never saw as a phrase."""
    import importlib.util
    from pathlib import Path

    from tracer.run.corpus import EVERYDAY, common_words, copy_cases, corpus, word_tokens
    from tracer.tokenizers.tokens import get_tokenizer

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("make_words", root / "tools" / "make_words.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert (root / "tracer" / "run" / "word_tokens.txt").read_text(encoding="ascii") == tool.words()
    every, words = word_tokens(), common_words()
    enc = get_tokenizer("gpt2")
    assert len(every) == len(set(every)) == 17534 and all(len(enc.encode(" " + w)) == 1 for w in every)
    assert words == every[:5000] and [enc.encode(" " + w)[0] for w in every] == sorted(enc.encode(" " + w)[0] for w in every)
    assert set(EVERYDAY) <= set(words) and len(set(EVERYDAY)) == len(EVERYDAY) >= 100
    cases = copy_cases()
    assert len(cases) == 40 and cases == copy_cases() and cases != copy_cases(seed=2)
    text = corpus(recipe="recall") + corpus(recipe="induction")
    for prompt, answer in cases:
        first = prompt.split(". ")[0]  # "the X Y Z and the V W"
        x_y_z = " ".join(first.split()[:4])
        assert x_y_z not in text and prompt.split(". ")[1] + answer == x_y_z
        assert len(set(first.split()) - {"the", "and"}) == 5
