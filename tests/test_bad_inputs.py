"""Bad input through the whole CLI: one clear line, the right exit code, never a traceback.

Exit codes (documented in the README): 0 success, 2 bad input (a prompt, option, model name,
scenario, weights or trace file), 1 an internal error (a bug in tracer). Each row of the table
below is run through `typer.testing.CliRunner`; rows marked `SUB` also run as a real process
(`python -m tracer …`), which is what a user sees, including how the interpreter exits.

The malformed scenario files of tests/test_scenario.py (tests/data/scenarios_bad) are not
repeated here; a few other scenario files run through a real process instead. The damaged
files are written once per session, from a good weights file and a good trace.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.cli import app
from tracer.core.config import Config
from tracer.formats.files import save_weights
from tracer.core.params import init_weights
from tracer.tokenizers.tokens import get_tokenizer

SUB = "sub"  # also run as a real subprocess


# --------------------------------------------------------------------------------------------
# Files: one good trace and weights file, and damaged copies of each


def _resave(src: dict, path: Path, **changes) -> None:
    arrays = {k: v for k, v in src.items() if k not in changes or changes[k] is not None}
    arrays.update({k: v for k, v in changes.items() if v is not None})
    np.savez(path, **arrays)


@pytest.fixture(scope="session")
def small(gpt2_config) -> Config:
    """The model of the weights files below: GPT-2's vocabulary, one layer."""
    return gpt2_config(n_layers=1)


@pytest.fixture(scope="session")
def d(tmp_path_factory, small) -> Path:
    d = tmp_path_factory.mktemp("bad")
    # weights: a small model the gpt2 tokenizer fits
    params = init_weights(small, 1)
    save_weights(d / "w.npz", small, params)
    save_weights(d / "w.safetensors", small, params)
    good_w = dict(np.load(d / "w.npz", allow_pickle=False))
    raw = (d / "w.safetensors").read_bytes()
    (d / "trunc_w.safetensors").write_bytes(raw[: len(raw) // 2])
    (d / "trunc_w.npz").write_bytes((d / "w.npz").read_bytes()[:5000])
    _resave(good_w, d / "wrongdtype.npz", W_E=np.full((50257, 4), "x"))
    _resave(good_w, d / "wrongshape.npz", W_E=good_w["W_E"].T)
    nan = good_w["blocks.0.attn.W_Q"].copy()
    nan[1, 2, 0] = np.nan
    _resave(good_w, d / "nan.npz", **{"blocks.0.attn.W_Q": nan})
    save_weights(d / "nan.safetensors", small, {**params, "blocks.0.attn.W_Q": nan})
    _resave(good_w, d / "missing.npz", **{"blocks.0.mlp.W_in": None})
    _resave(good_w, d / "badmeta.npz", __meta__=np.array("{not json"))
    _resave(good_w, d / "noconfig.npz", __meta__=None)
    (d / "w.bin").write_bytes(pickle.dumps({"W_E": [1.0]}))
    # a trace of that model
    tracer.load(str(d / "w.npz")).generate("hi there", max_new_tokens=1).save(d / "good.npz")
    good = dict(np.load(d / "good.npz", allow_pickle=False))
    meta = json.loads(str(good["meta"]))
    (d / "notnpz.npz").write_text("this is not an npz file\n")
    (d / "trunc.npz").write_bytes((d / "good.npz").read_bytes()[:3000])
    (d / "rawpickle.npz").write_bytes(pickle.dumps([1, 2, 3]))
    _resave(good, d / "nometa.npz", meta=None)
    _resave(good, d / "newer.npz", meta=np.array(json.dumps({**meta, "version": 99})))
    _resave(good, d / "badjson.npz", meta=np.array("{bad json"))
    _resave(good, d / "objects.npz", extra=np.array([{"a": 1}], dtype=object))
    _resave(good, d / "badshape.npz", **{"blocks.0.attn.hook_pattern": np.zeros(3)})
    _resave(good, d / "badtok.npz", meta=np.array(json.dumps({**meta, "tokenizer": ["gpt2"]})))
    _resave(good, d / "badconfig.npz", meta=np.array(json.dumps({**meta, "config": {**meta["config"], "d_model": -4}})))
    (d / "folder.npz").mkdir()
    # scenarios (a few; tests/test_scenario.py has the full set)
    (d / "syntax.toml").write_text('title = "x"\n[model\nd_model = 4\n')
    (d / "typo.toml").write_text('title = "x"\n[modle]\nd_model = 4\n')
    (d / "notweights.toml").write_text('title = "x"\n[weights]\nfile = "syntax.toml"\n')
    (d / "binary.toml").write_bytes(b"\x00\xff\xfe binary")
    (d / "huge.toml").write_text('[model]\nd_model = 100000\nn_layers = 100\n[tokenizer]\nencoding = "gpt2"\n'
                                 '[prompt]\ntext = "hi"\n')
    return d


# --------------------------------------------------------------------------------------------
# The table: (id, arguments, exit code, a regular expression the message must match[, SUB])

CASES = [
    # prompts
    ("prompt-empty", ["trace", ""], 2, r"prompt: empty", SUB),
    ("prompt-whitespace", ["trace", "  \n\t "], 2, r"prompt: empty but for whitespace \(5 characters: ␣␣↵⇥␣\)"),
    ("prompt-lone-surrogate", ["trace", "ab\udcffcd"], 2, r"not valid UTF-8 text \(an undecodable byte 0xff at character 2\)"),
    ("prompt-too-long", ["trace", "hello " * 1100, "-m", "tiny"], 2, r"prompt: 1,101 tokens, longer than the model's context of 1,024 tokens.*--truncate left", SUB),
    ("prompt-too-long-default", ["trace", "hello " * 70], 2, r"prompt: 71 tokens, longer than the model's context of 64 tokens.*--truncate left"),
    ("tokens-empty", ["tokens", ""], 2, r"prompt: empty"),
    ("tokens-whitespace", ["tokens", "   "], 2, r"prompt: empty but for whitespace"),
    ("tokens-encoding", ["tokens", "hi", "--encoding", "gpt5"], 2, r"encoding 'gpt5' is not available offline.*gpt2"),
    # numeric options
    ("max-new-negative", ["trace", "hi", "--max-new-tokens", "-1"], 2, r"Invalid value for '--max-new-tokens' / '-n': Input should be greater than or equal to 0"),
    ("max-new-overflow", ["trace", "hi", "-n", "5000"], 2, r"5,000 overflows the context: the prompt has 1 token and the model reads at most 64 \(so at most 63 new"),
    ("max-new-not-int", ["trace", "hi", "-n", "1.5"], 2, r"Invalid value for '--max-new-tokens'"),
    ("temperature-negative", ["trace", "hi", "--temperature", "-0.5"], 2, r"Invalid value for '--temperature' / '-t': Input should be greater than or equal to 0", SUB),
    ("temperature-nan", ["trace", "hi", "--temperature", "nan"], 2, r"(Invalid value for '--temperature'|temperature must be a number ≥ 0.*nan)"),
    ("temperature-inf", ["trace", "hi", "--temperature", "inf"], 2, r"temperature must be a number ≥ 0.*inf"),
    ("top-k-zero", ["trace", "hi", "--top-k", "0"], 2, r"Invalid value for '--top-k': Input should be greater than or equal to 1"),
    ("top-p-zero", ["trace", "hi", "--top-p", "0"], 2, r"top-p must be in \(0, 1\], got 0.0"),
    ("top-p-above-one", ["trace", "hi", "--top-p", "1.01"], 2, r"Invalid value for '--top-p': Input should be less than or equal to 1"),
    ("dims-zero", ["trace", "hi", "--dims", "0"], 2, r"Invalid value for '--dims': Input should be greater than or equal to 1"),
    ("dims-text", ["trace", "hi", "--dims", "abc"], 2, r"Invalid value for '--dims'"),
    ("precision-negative", ["trace", "hi", "--precision", "-1"], 2, r"Invalid value for '--precision': Input should be greater than or equal to 0"),
    ("precision-huge", ["trace", "hi", "--precision", "13"], 2, r"Invalid value for '--precision': Input should be less than or equal to 12"),
    ("seed-negative", ["trace", "hi", "--seed", "-1"], 2, r"Invalid value for '--seed': Input should be greater than or equal to 0", SUB),
    ("truncate-side", ["trace", "hi", "--truncate", "middle"], 2, r"Invalid value for '--truncate'.*'middle' is not one of 'left', 'right'"),
    # what to show
    ("token-letter", ["trace", "hi there", "-n", "1", "--token", "Z"], 2, r"--token Z: the prompt has tokens A–B \(positions 0–1\)"),
    ("token-position", ["trace", "hi there", "-n", "1", "--token", "3"], 2, r"--token 3: the prompt has tokens A–B"),
    ("token-garbage", ["trace", "hi", "-n", "0", "--token", "?"], 2, r"--token \?: the prompt has token A \(position 0\)"),
    ("layer-range", ["trace", "hi", "--layer", "4"], 2, r"--layer 4: the model has layers 0–3 \(or 'all'\)", SUB),
    ("layer-negative", ["trace", "hi", "--layer", "-1", "-m", "tiny"], 2, r"--layer -1: the model has layers 0–23"),
    ("head-range", ["trace", "hi", "--head", "4"], 2, r"--head 4: the model has heads 0–3 \(or 'all'\)"),
    ("head-text", ["trace", "hi", "--head", "first", "-m", "tiny"], 2, r"--head first: the model has heads 0–1"),
    # model names
    ("model-near-gpt2", ["trace", "hi", "--model", "gpt3"], 2, r"model 'gpt3': not found \(did you mean 'gpt2'\?\)", SUB),
    ("model-near-tiny", ["trace", "hi", "--model", "tinny"], 2, r"model 'tinny': not found \(did you mean 'tiny'\?\)"),
    ("model-near-scenario", ["trace", "hi", "--model", "artcle"], 2, r"model 'artcle': not found \(did you mean 'article'\?\).*a scenario \(article, "),
    ("model-empty", ["trace", "hi", "--model", ""], 2, r"model '': not a model name or path"),
    ("model-long-name", ["trace", "hi", "--model", "a" * 5000], 2, r"cannot read it \(File name too long\)"),
    # output paths
    ("save-missing-folder", ["trace", "hi", "--save", "{d}/nope/a.npz"], 2, r"--save .*/nope/a.npz: folder '.*/nope' does not exist", SUB),
    ("save-suffix", ["trace", "hi", "--save", "{d}/a.txt"], 2, r"--save .*a.txt: the file must end in .npz"),
    ("save-is-folder", ["trace", "hi", "--save", "{d}/folder.npz"], 2, r"folder.npz: is a folder; give a file name"),
    ("export-missing-folder", ["trace", "hi", "--export", "{d}/nope/a.html"], 2, r"--export .*/nope/a.html: folder .* does not exist"),
    ("export-suffix", ["trace", "hi", "--export", "{d}/a.pdf"], 2, r"--export .*a.pdf: the file must end in .html, .svg, .txt"),
    ("show-export-missing-folder", ["show", "{d}/good.npz", "--export", "{d}/nope/a.txt"], 2, r"folder .*nope.* does not exist"),
    # trace files
    ("trace-missing", ["show", "{d}/nosuch.npz"], 2, r"nosuch.npz: no such file"),
    ("trace-not-npz", ["show", "{d}/notnpz.npz"], 2, r"notnpz.npz: not a readable .npz file \(not a zip archive\)"),
    ("trace-truncated", ["show", "{d}/trunc.npz"], 2, r"trunc.npz: not a readable .npz file"),
    ("trace-raw-pickle", ["show", "{d}/rawpickle.npz"], 2, r"rawpickle.npz: .*a pickle; refused \(tracer never unpickles\)"),
    ("trace-object-array", ["show", "{d}/objects.npz"], 2, r"objects.npz: holds a pickled object; refused", SUB),
    ("trace-no-meta", ["show", "{d}/nometa.npz"], 2, r"nometa.npz: not a tracer trace \(no 'meta' entry\)"),
    ("trace-newer-version", ["show", "{d}/newer.npz"], 2, r"newer.npz: trace format version 99 is newer than this tracer reads \(2\); upgrade tracer"),
    ("trace-meta-not-json", ["show", "{d}/badjson.npz"], 2, r"badjson.npz: its 'meta' entry is not JSON"),
    ("trace-bad-config", ["show", "{d}/badconfig.npz"], 2, r"d_model must be a whole number ≥ 1, got -4"),
    ("trace-array-shape", ["show", "{d}/badshape.npz"], 2, r"badshape.npz: damaged trace: 'blocks.0.attn.hook_pattern' has shape \[3\], its config needs \[2, 2, 2\]"),
    ("trace-tokenizer", ["show", "{d}/badtok.npz"], 2, r"badtok.npz: tokenizer: expected an encoding name or a table, got list"),
    ("trace-layer-range", ["show", "{d}/good.npz", "--layer", "1"], 2, r"--layer 1: the model has layer 0 \(or 'all'\)"),
    # weights files
    ("weights-missing", ["trace", "hi", "--model", "{d}/nosuch.npz"], 2, r"nosuch.npz: no such file"),
    ("weights-truncated-st", ["trace", "hi", "--model", "{d}/trunc_w.safetensors"], 2, r"trunc_w.safetensors: truncated: tensor '.*' needs bytes up to \d+, the file has \d+"),
    ("weights-truncated-npz", ["trace", "hi", "--model", "{d}/trunc_w.npz"], 2, r"trunc_w.npz: not a readable .npz file"),
    ("weights-dtype", ["trace", "hi", "--model", "{d}/wrongdtype.npz"], 2, r"wrongdtype.npz: 'W_E' must hold numbers, got <U1"),
    ("weights-shape", ["trace", "hi", "--model", "{d}/wrongshape.npz"], 2, r"wrongshape.npz: 'W_E': expected \[50257, 4\], got \[4, 50257\]"),
    ("weights-nan", ["trace", "hi", "--model", "{d}/nan.npz"], 2, r"nan.npz: 'blocks.0.attn.W_Q' holds NaN or infinite values \(first at index \[1, 2, 0\]\)", SUB),
    ("weights-nan-safetensors", ["trace", "hi", "--model", "{d}/nan.safetensors"], 2, r"nan.safetensors: 'blocks.0.attn.W_Q' holds NaN or infinite values"),
    ("weights-missing-param", ["trace", "hi", "--model", "{d}/missing.npz"], 2, r"missing.npz: parameter 'blocks.0.mlp.W_in' is missing"),
    ("weights-meta-not-json", ["trace", "hi", "--model", "{d}/badmeta.npz"], 2, r"badmeta.npz: its '__meta__' entry is not a JSON object"),
    ("weights-no-config", ["trace", "hi", "--model", "{d}/noconfig.npz"], 2, r"noconfig.npz: holds no tracer config"),
    ("weights-pickle-checkpoint", ["trace", "hi", "--model", "{d}/w.bin"], 2, r"w.bin: pickled checkpoints are never loaded"),
    # scenarios, through a real process (tests/test_scenario.py covers the rest)
    ("scenario-syntax", ["replay", "{d}/syntax.toml"], 2, r"syntax.toml:2:\d+: TOML syntax error", SUB),
    ("scenario-unknown-key", ["replay", "{d}/typo.toml"], 2, r"typo.toml: modle: unknown key \(did you mean 'model'\?\)", SUB),
    ("scenario-weights-not-weights", ["replay", "{d}/notweights.toml"], 2, r"notweights.toml.*weights.file.*not a weights file"),
    ("scenario-huge", ["replay", "{d}/huge.toml"], 2, r"huge.toml:1: model: too large to allocate: .* GB of weights; tracer refuses more than 8 GB", SUB),
    ("scenario-binary", ["replay", "{d}/binary.toml"], 2, r"binary.toml: not a text file"),
    ("scenario-unknown-name", ["replay", "artcle"], 2, r"scenario 'artcle': no such file and no shipped scenario", SUB),
    ("model-scenario-missing", ["trace", "hi", "--model", "{d}/nosuch.toml"], 2, r"nosuch.toml: no such scenario file"),
    ("prompt-not-in-vocabulary", ["trace", "X Q", "--model", "two_heads"], 2, r"prompt: token 'Q' is not in the vocabulary; this model's words: X, Y, Z, <end>", SUB),
    # other commands
    ("demo-auto-negative", ["demo", "two_heads", "--auto", "-1"], 2, r"--auto must be a number of seconds > 0, got -1"),
    ("demo-unknown-scenario", ["demo", "artcle"], 2, r"scenario 'artcle': no such file and no shipped scenario"),
    ("demo-export-suffix", ["demo", "two_heads", "--export", "{d}/deck.pdf"], 2, r"--export .*deck.pdf: .*must end in .html"),
    ("replay-layer", ["replay", "two_heads", "--layer", "1"], 2, r"--layer 1: the model has layer 0 \(or 'all'\)"),
    ("show-dims", ["show", "{d}/good.npz", "--dims", "0"], 2, r"Invalid value for '--dims': Input should be greater than or equal to 1"),
    ("show-token", ["show", "{d}/good.npz", "--token", "X"], 2, r"--token X: the prompt has tokens A–B \(positions 0–1\)"),
    ("demo-auto-zero", ["demo", "two_heads", "--auto", "0"], 2, r"--auto must be a number of seconds > 0, got 0"),
    ("replay-precision", ["replay", "two_heads", "--precision", "99"], 2, r"Invalid value for '--precision': Input should be less than or equal to 12"),
    ("download-unknown", ["download", "gpt5"], 2, r"model 'gpt5': not a GPT-2 name \(did you mean 'gpt2'\?\)"),
    # the command line itself
    ("unknown-command", ["trcae", "hi"], 2, r"^tracer: no such command: trcae \(did you mean trace\?\); see tracer --help$"),
    ("prompt-starting-with-dash", ["trace", "-5 degrees"], 2, r"no such option: -5; a prompt that starts with '-' goes after --"),
    ("unknown-option", ["trace", "hi", "--temprature", "1"], 2, r"^tracer: no such option: --temprature \(did you mean --temperature\?\); see tracer trace --help$"),
    ("unknown-root-option", ["--bogus"], 2, r"^tracer: no such option: --bogus; see tracer --help$"),
    ("option-without-value", ["trace", "hi", "--top-k"], 2, r"^tracer: Option '--top-k' requires an argument. \(see tracer trace --help\)$"),
    ("prompt-not-quoted", ["trace", "A", "B"], 2, r"unexpected extra argument\(s\) \(B\): a prompt of several words goes in quotes"),
]


def _args(args: list, d: Path) -> list:
    return [a.replace("{d}", str(d)) if isinstance(a, str) else a for a in args]


def _check(code: int, out: str, err: str, want_code: int, pattern: str) -> None:
    both = out + err
    assert code == want_code, f"exit {code}, want {want_code}:\n{both[-2000:]}"
    assert "Traceback" not in both, both[-2000:]
    assert "internal error" not in both, both[-2000:]
    assert re.search(pattern, err), f"stderr does not match {pattern!r}:\n{err[-1000:]}"
    # ours and the command line's usage errors alike: exactly one line that names the problem
    assert len(err.strip().splitlines()) == 1 and err.startswith("tracer: "), err


def test_table_is_big_enough():
    assert len(CASES) >= 30 and len({c[0] for c in CASES}) == len(CASES)
    assert sum(1 for c in CASES if SUB in c[4:]) >= 10


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_cli_runner(case, d, runner):
    _, args, code, pattern = case[:4]
    r = runner.invoke(app, _args(args, d))
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    _check(r.exit_code, r.stdout, r.stderr, code, pattern)


SUB_CASES = [c for c in CASES if SUB in c[4:]]


@pytest.mark.slow
@pytest.mark.parametrize("case", SUB_CASES, ids=[c[0] for c in SUB_CASES])
def test_subprocess(case, d, run_tracer):
    _, args, code, pattern = case[:4]
    p = run_tracer(*_args(args, d))
    _check(p.returncode, p.stdout.decode(), p.stderr.decode(), code, pattern)


@pytest.mark.slow
def test_subprocess_undecodable_argument(run_tracer):
    """A prompt that is not UTF-8 (raw bytes on the command line) is refused, naming the byte."""
    p = run_tracer("trace", b"ab\xffcd")
    _check(p.returncode, p.stdout.decode(), p.stderr.decode(errors="replace"), 2,
           r"prompt: not valid UTF-8 text \(an undecodable byte 0xff at character 2\)")


# --------------------------------------------------------------------------------------------
# Inputs that must work


def _ok(runner, args: list) -> str:
    r = runner.invoke(app, args, env={"COLUMNS": "120"})
    assert r.exit_code == 0, (r.stdout + r.stderr)[-2000:]
    assert "Traceback" not in r.stdout + r.stderr
    return r.stdout


@pytest.mark.parametrize("prompt, visible", [
    ("hi 👋 there", ["\\xf0\\x9f"]),  # an emoji split into byte pieces shows its bytes, not '�'
    ("שלום עולם", []),  # right-to-left letters
    ("zero\u200bwidth", ["⟨U+200B⟩"]),  # zero-width space, shown so it cannot hide
    ("bell\x07 and escape\x1b[2J", ["␇", "␛"]),  # control characters: accepted, shown as control pictures
    ("nul\x00byte", ["␀"]),
    ("<|endoftext|> is text here", []),  # the special token's text is read as plain text
])
def test_unusual_text_works_and_shows(prompt, visible, d, runner):
    small = ["--model", str(d / "w.npz"), "-n", "0"]  # one layer: quick to render in full
    got = json.loads(_ok(runner, ["trace", prompt, "--json", *small]))
    tok = get_tokenizer("gpt2")
    assert got["prompt_ids"] == tok.encode(prompt)  # the whole prompt, as the tokenizer reads it
    assert 50256 not in got["prompt_ids"]
    shown = _ok(runner, ["tokens", prompt])
    assert "\x1b" not in shown and "\x07" not in shown and "\x00" not in shown
    for v in visible:
        assert v in shown, shown
    assert "�" not in shown  # a token holding part of a character shows its bytes instead
    out = _ok(runner, ["trace", prompt, *small])  # and the full walkthrough renders
    assert "\x1b" not in out and "\x00" not in out


def test_rtl_prompt_round_trips_through_json(runner):
    prompt = "مرحبا بالعالم 🌍"
    got = json.loads(_ok(runner, ["trace", prompt, "--json", "-n", "0"]))
    assert got["prompt"] == prompt
    assert get_tokenizer("gpt2").decode(got["prompt_ids"]) == prompt


@pytest.mark.parametrize("side", ["left", "right"])
def test_truncate_keeps_one_end_and_says_so(side, d, runner, small):
    prompt = "".join(f" w{i}" for i in range(20))  # " w12" is 2 tokens in gpt2
    ids = get_tokenizer("gpt2").encode(prompt)
    assert len(ids) > small.n_ctx
    r = runner.invoke(app, ["trace", prompt, "--model", str(d / "w.npz"), "--truncate", side, "-n", "2", "--json"])
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)
    keep = small.n_ctx - 2  # room for the two new tokens
    assert got["prompt_ids"] == (ids[-keep:] if side == "left" else ids[:keep])
    assert len(got["prompt_ids"]) + len(got["generated_ids"]) <= small.n_ctx
    assert re.search(rf"note: the prompt has {len(ids):,} tokens and the model's context is {small.n_ctx}; "
                     rf"kept its {'end' if side == 'left' else 'start'}, {keep:,} tokens \(--truncate {side}\), "
                     rf"dropped {len(ids) - keep:,}", r.stderr), r.stderr


def test_truncate_is_silent_when_the_prompt_fits(runner):
    r = runner.invoke(app, ["trace", "short prompt", "--truncate", "left", "--json"])
    assert r.exit_code == 0 and "note" not in r.stderr
    assert json.loads(r.stdout)["prompt_ids"] == get_tokenizer("gpt2").encode("short prompt")


@pytest.mark.slow
def test_debug_shows_the_traceback(run_tracer):
    """`--debug` is the one way to see Python's traceback, for a bug report."""
    p = run_tracer("--debug", "trace", "hi", "--model", "gpt3")
    err = p.stderr.decode()
    assert p.returncode != 0 and "Traceback" in err and "TracerError" in err


def test_internal_error_is_one_line_and_exit_1(monkeypatch, runner):
    """A bug (any exception that is not a TracerError) exits 1 with one line asking for a report."""
    import tracer.model

    def broken(*a, **k):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(tracer.model.Model, "generate", broken)
    r = runner.invoke(app, ["trace", "hi"])
    assert r.exit_code == 1
    assert r.stderr.strip() == ("tracer: internal error: ZeroDivisionError: boom "
                                "(run with --debug for the traceback; please report it)")


@pytest.mark.slow
def test_broken_pipe_is_quiet(tmp_path):
    """`tracer trace … | head -1`: the reader leaving early is not an error and prints nothing."""
    p = subprocess.run(f'"{sys.executable}" -m tracer trace "hello world" | head -1', shell=True,
                       capture_output=True, env={**os.environ, "NO_COLOR": "1"}, timeout=60)
    assert p.returncode == 0  # the pipeline's status is head's
    err = p.stderr.decode()
    assert "Traceback" not in err and "internal error" not in err and "BrokenPipe" not in err, err


def test_help_of_every_command(runner):
    for cmd in ([], ["trace"], ["show"], ["replay"], ["scenarios"], ["demo"], ["tokens"]):
        r = runner.invoke(app, [*cmd, "--help"])
        assert r.exit_code == 0 and "Traceback" not in r.stdout + r.stderr
    assert "--truncate" in runner.invoke(app, ["trace", "--help"]).stdout


@pytest.mark.slow
def test_a_terminal_that_is_not_utf8(d, run_tracer):
    """Box drawing and ␣ cannot be encoded in ASCII: they become '?', the run still succeeds."""
    p = run_tracer("trace", "hi there", "--model", str(d / "w.npz"), "-n", "0", env={"PYTHONIOENCODING": "ascii"})
    assert p.returncode == 0, p.stderr.decode()
    assert b"Traceback" not in p.stderr and b"internal error" not in p.stderr
    p.stdout.decode("ascii")  # nothing outside ASCII was written
    assert b"model w.npz" in p.stdout


def test_a_prompt_that_starts_with_a_dash_after_double_dash(runner):
    got = json.loads(_ok(runner, ["trace", "--json", "-n", "0", "--", "-5 degrees"]))
    assert got["prompt"] == "-5 degrees"


def test_an_expectation_written_as_1e999_is_a_disagreement_not_a_crash(tmp_path, runner):
    """Found by tests/test_properties.py: the written-digits tolerance of 1e999 overflowed."""
    text = (Path(tracer.__file__).parent.parent / "scenarios" / "two_heads.toml").read_text()
    path = tmp_path / "inf.toml"
    path.write_text(text + '\n[[expect]]\nname = "logits"\nindex = [0, 0]\nvalue = 1e999\n')
    r = runner.invoke(app, ["replay", str(path), "--json"])
    assert r.exit_code == 0, r.stderr
    checks = json.loads(r.stdout)["checks"]
    assert checks[-1]["ok"] is False and checks[-1]["name"] == "logits"


# --------------------------------------------------------------------------------------------
# One rule for every number typed on the command line: ASCII digits (Unicode digits are no number)


@pytest.mark.parametrize("args, flag", [
    (["trace", "A B", "--memory", "١٠GB"], "--memory"), (["trace", "A B", "--memory", "１GB"], "--memory"),
    (["tokens", "A B", "--model", "abc", "--memory", "1.٥GB"], "--memory"), (["serve", "--memory", "٢GB"], "--memory"),
    (["trace", "A B", "--ablate", "١:0"], "--ablate"), (["demo", "--prompt", "A B", "--ablate", "1:٠"], "--ablate"),
    (["trace", "A B", "--layer", "١"], "--layer"), (["trace", "A B", "--head", "۱"], "--head"),
    (["trace", "A B", "--token", "١"], "--token"), (["trace", "A B", "--top-k", "٣"], "--top-k"),
    (["trace", "A B", "-n", "٢"], "--max-new-tokens"), (["trace", "A B", "--seed", "٧"], "--seed"),
    (["trace", "A B", "-t", "٠.5"], "--temperature"), (["trace", "A B", "--dims", "٤"], "--dims"),
    (["demo", "--auto", "٢"], "--auto"), (["serve", "--port", "٨٠٨٠"], "--port"),
])
def test_every_number_typed_on_the_command_line_is_ascii_digits(runner, args, flag):
    """`١٠GB` is not 10 GB, as `١` is no layer: each option refuses digits that are not ASCII, in one line
    naming the option, before anything runs."""
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and r.stdout == "", (r.exit_code, r.output)
    err = r.stderr
    assert len(err.strip().splitlines()) == 1 and err.startswith("tracer: ") and flag in err, err
    assert "Traceback" not in err and "internal error" not in err, err
