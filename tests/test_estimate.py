"""The line estimate (issue 21): computed from the resolved view (which tokens, heads and layers are
shown), within 10% of what the walkthrough prints, and --max-lines never lets more through: what is
printed is counted before it is, and a view longer than --max-lines is refused (exit 2)."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest
from rich.console import Console

from tracer.errors import TracerError
from tracer.loaders import load
from tracer.render import resolved_for, show_generation
from tracer.render.view import View

ROOT = Path(__file__).resolve().parent.parent
LLAMA = str(ROOT / "tests/data/llama-tiny")
OSS = str(ROOT / "tests/data/gpt-oss-tiny")  # attention sinks, a mixture of experts: the routing and the sinks' lines
QWEN2_MOE = str(ROOT / "tests/data/qwen2-moe-tiny")  # a dense layer among the experts, a shared expert
README_PROMPT = ("You are a business consultant, please analyze the impact of rising oil prices on the "
                 "automotive industry.")
GRID = list(itertools.product([None, "tokens", "embed", "attention", "layers", "predict", "positions", "heatmap",
                               "loop", "lens"], ["0", "all"], ["all", "0"], [True, False]))


@pytest.fixture(scope="module")
def runs():
    made = {}

    def run(model: str, prompt: str):
        if (model, prompt) not in made:
            m = load(model)
            made[model, prompt] = (m.generate(m.prompt(prompt), max_new_tokens=2), m.tokenizer)
        return made[model, prompt]

    return run


def printed(gen, tok, view: View, width: int = 100) -> int:
    """The lines `show_generation` prints at `width` columns."""
    out = Console(file=io.StringIO(), width=width, color_system=None)
    show_generation(gen, tok, view, console=out)
    return out.file.getvalue().count("\n")


def estimate(gen, view: View, width: int = 100) -> int:
    return resolved_for(gen, view, width).estimated_lines()


@pytest.mark.slow
@pytest.mark.parametrize("model, prompt", [("abc", "A B C D E F"), ("abc", README_PROMPT), ("tiny", "A B C D E F"),
                                           (LLAMA, "A B C D E F"), (OSS, "the cat sat on the mat"),
                                           (QWEN2_MOE, "the cat sat on the mat")])
def test_the_estimate_is_within_ten_percent_of_what_prints(runs, model, prompt):
    gen, tok = runs(model, prompt)
    off = []
    for section, layer, head, brief in GRID if prompt != README_PROMPT else [g for g in GRID if g[1] == "0"]:
        view = View(layer=layer, head=head, brief=brief, sections=(section,) if section else (), max_lines=0)
        lines, guess = printed(gen, tok, view), estimate(gen, view)
        if abs(guess - lines) > 0.1 * lines:
            off.append(f"--section {section} --layer {layer} --head {head} {'--brief' if brief else '--full'}: "
                       f"printed {lines}, estimated {guess}")
    assert not off, "\n".join(off)


def test_the_issues_cases_are_estimated_from_the_layers_shown(runs):
    """Issue 21: `--section heatmap --layer all` was estimated at 30 lines and printed 51–59 (the
    estimate counted one heatmap, the section drew one per layer)."""
    gen, tok = runs("abc", "A B C D E F")
    view = View(layer="all", sections=("heatmap",), max_lines=0)
    assert resolved_for(gen, view).heatmaps == [0, 1, 2, 3]
    lines, guess = printed(gen, tok, view), estimate(gen, view)
    assert 50 <= lines <= 60 and abs(guess - lines) <= 0.1 * lines, (lines, guess)


def test_max_lines_never_lets_more_through(runs):
    """Issue 21: `--section attention --layer all --full` on llama-tiny printed 5,302 lines with
    --max-lines 4820. Now it prints at most --max-lines, or refuses (exit 2) before printing."""
    gen, tok = runs(LLAMA, "A B C D E F")
    view = View(layer="all", brief=False, sections=("attention",), max_lines=0)
    lines = printed(gen, tok, view)
    for limit in (lines - 1, int(lines * 0.95), lines, lines + 10):
        capped = View(layer="all", brief=False, sections=("attention",), max_lines=limit)
        try:
            shown = printed(gen, tok, capped)
        except TracerError as e:
            assert f"--max-lines {limit:,}" in str(e) and limit < lines * 1.1
            continue
        assert shown <= limit


def test_a_view_the_estimate_lets_through_is_counted_before_it_prints(runs, monkeypatch):
    """The estimate is a guess: what is printed is counted as rendered, and a view longer than
    --max-lines is refused before its first line."""
    import tracer.render.estimate as estimate_module

    gen, tok = runs("abc", "A B C D E F")
    monkeypatch.setattr(estimate_module, "estimated_lines", lambda r: 1)
    out = Console(file=io.StringIO(), width=100, color_system=None)
    with pytest.raises(TracerError, match=r"this view would print [0-9,]+ lines \(--max-lines 100\)"):
        show_generation(gen, tok, View(max_lines=100), console=out)
    assert out.file.getvalue() == ""


@pytest.mark.slow
def test_the_cli_refuses_or_prints_within_max_lines(run_tracer):
    """The command line: --max-lines below what the view prints is a one-line error (exit 2); 10%
    above it (the estimate's margin), the view prints."""
    args = ["trace", "A B C D E F", "--model", LLAMA, "--section", "attention", "--layer", "all", "--full", "-n", "2"]
    whole = run_tracer(*args, "--max-lines", "0", text=True)
    lines = whole.stdout.count("\n")
    assert whole.returncode == 0 and lines > 1000
    refused = run_tracer(*args, "--max-lines", str(lines - 50), text=True)
    assert refused.returncode == 2 and refused.stdout == "" and "--max-lines" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    fits = run_tracer(*args, "--max-lines", str(int(lines * 1.1) + 1), text=True)  # the estimate is within 10%
    assert fits.returncode == 0 and fits.stdout == whole.stdout


def test_the_view_is_resolved_once_for_the_terminal_and_the_page(runs):
    """The tokens, heads and layers shown are the resolved view's, and the run's positions check --token."""
    gen, tok = runs("abc", README_PROMPT)
    r = resolved_for(gen, View(layer="all"))
    n = len(gen.steps[0].tokens)
    assert r.tokens == [0, 1, n - 1] and r.shown_heads == [0, 1, 2, 3] and r.layers == r.heatmaps == [0, 1, 2, 3]
    assert resolved_for(gen, View(layer="2", head="1")).heatmaps == [2]
    assert resolved_for(gen, View(layer="2", head="1")).shown_heads == [1]
    assert resolved_for(gen, View(brief=False)).tokens == list(range(n))
    early = View(token=str(n + 5)).resolve(gen.steps[0].config, n, n + 10)  # allowed before the run …
    with pytest.raises(TracerError, match="--token"):
        early.for_run(gen)  # … but the run stopped before that position


@pytest.mark.slow
@pytest.mark.parametrize("args", [["replay", "article"], ["replay", "article", "--layer", "all", "--full"],
                                  ["replay", "two_heads", "--full"], ["replay", "rotary", "--layer", "all"],
                                  ["replay", "gpt2_small_article", "--section", "attention"],
                                  ["trace", "A B C D E F", "--model", "tiny", "--layer", "all", "--full"]])
def test_the_commands_estimate_before_the_run_is_within_ten_percent(run_tracer, args):
    """What the command estimates before it runs anything (the figure --max-lines 1 refuses with; a
    replay's title, notes and stated values counted) against what it prints."""
    import re

    lines = run_tracer(*args, "--max-lines", "0", text=True, timeout=300).stdout.count("\n")
    refused = run_tracer(*args, "--max-lines", "1", text=True, timeout=300)
    assert refused.returncode == 2 and refused.stdout == ""
    guess = int(re.search(r"would print about ([0-9,]+) lines", refused.stderr).group(1).replace(",", ""))
    assert abs(guess - lines) <= 0.1 * lines, (lines, guess)
