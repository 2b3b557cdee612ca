"""`tracer trace`, `tracer show` and `--export` through the CLI (typer's CliRunner), with the
default embedded model (24 layers, d_model 8, 2 heads, GPT-2 tokens, seeded untrained weights)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from tracer.cli import app

PROMPT = "The cat sat"  # three GPT-2 tokens: The, ␣cat, ␣sat


@pytest.fixture(scope="module")
def runner():
    return CliRunner(env={"NO_COLOR": "1", "COLUMNS": "100"})


def run(runner, *args):
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def traced(runner):
    r = run(runner, "trace", PROMPT)
    assert r.exit_code == 0, r.output
    return r.stdout


def test_trace_shows_every_section(traced):
    out = re.sub(r"\s+", " ", traced)
    for words in ("1 · Tokens", "from the gpt2 vocabulary of 50,257 tokens",
                  "2 · First layer (layer 0 of 24), token by token",
                  "A queries the embedding matrix W_E (50,257 × 8) at row 464",  # 'The' is GPT-2 id 464
                  "+ position vector (W_pos row 0, learned)", "the causal mask hides B and C",
                  "3 · All 24 layers", "4 · Predicting the next token (how to predict D)",
                  "× W_U (8 × 50,257; W_E transposed, tied)", "5 · Every position predicts",
                  "6 · Attention heatmaps", "predictions are meaningless until real weights are loaded",
                  "ABC → ABCD"):
        assert words in out, words
    assert "␣cat" in traced and "\x1b[" not in traced


def test_save_then_show_gives_the_same_walkthrough(runner, tmp_path, traced):
    path = tmp_path / "t.npz"
    r = run(runner, "trace", PROMPT, "--save", str(path))
    assert r.exit_code == 0, r.output
    assert r.stdout == traced
    r = run(runner, "show", str(path))
    assert r.exit_code == 0, r.output
    assert r.stdout == traced


@pytest.mark.parametrize("suffix", [".html", ".svg", ".txt"])
def test_export_writes_what_was_shown(runner, tmp_path, suffix, traced):
    path = tmp_path / ("out" + suffix)
    r = run(runner, "trace", PROMPT, "--export", str(path))
    assert r.exit_code == 0, r.output
    text = path.read_text(encoding="utf-8")
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
    if suffix == ".txt":
        assert text == r.stdout == traced
    elif suffix == ".html":
        assert text.startswith("<!DOCTYPE html>")
        assert "queries the embedding matrix" in text and "<link" not in text and "<script" not in text
    else:
        assert text.lstrip().startswith("<svg") and "@font-face" not in text
        assert "queries" in text


def test_export_bad_suffix(runner, tmp_path):
    r = run(runner, "trace", PROMPT, "--export", str(tmp_path / "x.pdf"))
    assert r.exit_code == 2
    assert "--export" in r.stderr and ".html, .svg, .txt" in r.stderr


@pytest.mark.parametrize("args, names", [
    (["--token", "Z"], ("--token Z", "A–", "(positions 0–")),
    (["--token", "9"], ("--token 9", "A–", "(positions 0–")),
    (["--layer", "24"], ("--layer 24", "0–23", "'all'")),
    (["--layer", "first"], ("--layer first", "0–23", "'all'")),
    (["--head", "2"], ("--head 2", "0–1", "'all'")),
])
def test_bad_view_options(runner, args, names):
    """One line on stderr naming the option, its value and the valid range; exit code 2."""
    r = run(runner, "trace", PROMPT, *args)
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("tracer: " + names[0] + ":") and "\n" not in err
    for part in names[1:]:
        assert part in err, err
    assert "Traceback" not in r.output and r.stdout == ""


def test_show_bad_token(runner, tmp_path):
    path = tmp_path / "t.npz"
    assert run(runner, "trace", PROMPT, "--save", str(path)).exit_code == 0
    r = run(runner, "show", str(path), "--token", "K")
    assert r.exit_code == 2
    assert r.stderr.startswith("tracer: --token K:") and "(positions 0–" in r.stderr


def test_view_options(runner):
    r = run(runner, "trace", PROMPT, "--token", "B", "--layer", "5", "--head", "1", "--dims", "4", "--precision", "2")
    assert r.exit_code == 0, r.output
    out = re.sub(r"\s+", " ", r.stdout)
    assert "Layer 5 (layer 5 of 24), token by token" in out
    assert "B: ␣cat (position 1)" in out and "A: The" not in out
    assert "head 1 of 2" in out and "head 0 of 2" not in out
    assert "x_B = [" in out
    # --dims 4: an 8-wide vector shows 2 … 2 and its norm; --precision 2: two decimals
    assert re.search(r"x_B = \[-?\d\.\d\d, -?\d\.\d\d, …, -?\d\.\d\d, -?\d\.\d\d\] \(8 dims, ‖·‖ \d\.\d\d\)", out)


def test_full_and_all_layers(runner):
    r = run(runner, "trace", PROMPT, "--full", "--layer", "all", "--max-new-tokens", "2")
    assert r.exit_code == 0, r.output
    out = re.sub(r"[ \t]+", " ", r.stdout)
    assert "2.24 · Layer 23 (layer 23 of 24), token by token" in out
    assert out.count("C: ␣sat (position 2)") == 24
    assert out.count("layer 23, head 1") == 1
