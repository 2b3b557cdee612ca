"""`tracer/sections.py`, the one list of the article's steps, against what reads it: the terminal's sections
and their numbers, `--section`'s choices and help, the line estimate, the page's path of steps (sent with
its data, each step's slide in the script's `SLIDES`), and the demo's screens; and a section added to the
list from this file alone (with its renderer, estimate, words, demo screen and slide entered from here)
that reaches every one of them (in Chromium: `tests/test_page_browser.py`)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console, Group
from rich.text import Text

import tracer
import tracer.render.page as page_module
from tracer import sections
from tracer.render import demo, resolved_for
from tracer.render.page import page_data
from tracer.render.view import View
from tracer.render.walkthrough import walkthrough
from tracer.render.words import WORDS
from tracer.run.checks import Check

DATA = Path(__file__).parent / "data"
LLAMA = str(DATA / "llama-tiny")
HERE = str(Path(__file__).resolve().parent.parent)
SCRIPTS = "".join(p.read_text(encoding="utf-8") for p in sorted(Path(page_module.__file__).parent.glob("*.js")))


@pytest.fixture(scope="module")
def run():
    m = tracer.load(LLAMA)
    return m, m.generate("A B C", max_new_tokens=1)


def text_of(renderables, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, record=True)
    console.print(Group(*renderables))
    return console.export_text()


def test_the_terminal_the_page_and_the_demo_read_the_list(run):
    m, gen = run
    assert sections.names() == ("tokens", "embed", "attention", "layers", "predict", "positions", "heatmap", "loop", "lens")
    assert sections.numbered() == [(1, ("tokens",)), (2, ("embed", "attention")), (3, ("layers",)), (4, ("predict",)),
                                   (5, ("positions",)), (6, ("heatmap",)), (7, ("loop",)), (8, ("lens",))]
    headings = re.findall(r"^(\d+(?:\.\d+)?) · ", text_of(walkthrough(gen, m.tokenizer, resolved_for(gen, View()))), re.M)
    assert headings == ["1", "2", "3", "4", "5", "6", "7", "8"]
    for number, names in sections.numbered():  # every section drawn and estimated, joining ones by their first
        assert callable(sections.drawn("terminal", names[0])) and callable(sections.drawn("lines", names[0]))
    with pytest.raises(LookupError, match="attention"):
        sections.drawn("terminal", "attention")
    # the page: its path in its own order (the loop told right after the prediction), the checks' step last
    ids = ["tokens", "embed", "qkv", "scores", "sum", "heads", "mlp", "layers", "predict", "loop", "positions", "lens"]
    runs = ["beams", "speculative"]  # the steps of a beam search's or a speculative run's page, after the loop
    assert [s for s, _ in sections.page_steps()] == ids[:10] + runs + ids[10:]
    d = page_data(gen, m.tokenizer)
    assert [s[0] for s in d["steps"]] == ids and d["steps"][2] == ["qkv", WORDS["path.qkv"], WORDS["title.qkv"]]
    value = float(gen.steps[0].arrays["logits"][0, 0])
    stated = Check("logits", (0, 0), value, value, 1e-6)
    assert [s[0] for s in page_data(gen, m.tokenizer, checks=[stated])["steps"]] == ids + ["checks"]
    assert set(re.findall(r"^SLIDES\.(\w+) = function", SCRIPTS, re.M)) == {*ids, *runs, "checks"}
    # the demo: its screens in the list's order, each maker entered once
    screens = [name for name, _ in sections.demo_screens()]
    assert screens == ["tokens", "embedding", "position", "state", "qkv", "scores", "softmax", "weighted_sum", "multihead",
                       "experts", "layers", "copying", "unembed", "temperature", "draw", "chosen", "append", "cache",
                       "beams", "speculative"]
    makers = [sections.drawn("screen", name)[0] for name in screens]
    built = [s.remake for s in demo.build_steps(demo.Demo(gen, m.tokenizer))]
    assert built == [f for f in makers if f in built] and len(built) >= len(makers) - 6  # copying: only a repeat;
    assert sections.drawn("screen", "state")[0] not in built  # state: only a model with a linear-attention layer;
    # experts: only a mixture of experts; draw, beams, speculative: only a run with penalties or min-p, beams, a draft


def test_what_draws_a_step_enters_it_under_a_name_of_the_list():
    with pytest.raises(ValueError, match="'toy' is not one of"):
        sections.renders("toy")
    with pytest.raises(ValueError, match="'attention' is not one of"):  # it joins embed: embed's renderer draws it
        sections.estimates("attention")
    with pytest.raises(ValueError, match="'nope' is not one of"):
        sections.screen("nope")
    assert "attention" in sections.names()  # but --section takes it


TOY = sections.Section("toy", "a toy step", page={"toy": ("lens",)}, demo={"toy": ()})


def toy_section(ctx, number: str):
    from tracer.render.text import section

    return Group(section(f"{number} · A toy step"), Text(f"{ctx.n} tokens"))


@pytest.fixture
def toy(monkeypatch):
    """The list with TOY appended, and everything that draws it entered from here (undone after the test)."""
    monkeypatch.setattr(sections, "SECTIONS", sections.SECTIONS + (TOY,))
    monkeypatch.setattr(sections, "_DRAWN", {kind: dict(entries) for kind, entries in sections._DRAWN.items()})
    monkeypatch.setitem(WORDS, "path.toy", "Toy")
    monkeypatch.setitem(WORDS, "title.toy", "A toy step")
    sections.renders("toy")(toy_section)
    sections.estimates("toy")(lambda r: 2)  # its heading and its line

    @sections.screen("toy")
    def step_toy(d):
        return demo.Step("A toy step", "A step added from a test.", Text(f"{d.last + 1} tokens"))

    return step_toy


def test_a_section_added_to_the_list_reaches_the_terminal_the_page_and_the_demo(run, toy):
    m, gen = run
    assert sections.names()[-1] == "toy" and sections.help_words().endswith(", lens, toy (a toy step)")
    assert sections.numbered()[-1] == (9, ("toy",))
    # the terminal: its section, numbered after the others, alone with --section toy; its estimate counted
    resolved = resolved_for(gen, View(sections=("toy",)))
    shown = text_of(walkthrough(gen, m.tokenizer, resolved))
    assert "9 · A toy step" in shown and f"{len(gen.steps[0].tokens)} tokens" in shown and "1 · Tokens" not in shown
    assert "9 · A toy step" in text_of(walkthrough(gen, m.tokenizer, resolved_for(gen, View())))
    without = resolved_for(gen, View(sections=("lens",)))
    assert resolved.estimated_lines() - without.estimated_lines() == 2 - sections.drawn("lines", "lens")(without)
    with pytest.raises(tracer.TracerError, match="the sections are tokens, .*, lens, toy"):
        View(sections=("nope",)).resolve(m.config, 3, 4)
    # the page: its step last in the path, worded; a stated value of the steps it shows goes to it
    d = page_data(gen, m.tokenizer)
    assert d["steps"][-1] == ["toy", "Toy", "A toy step"]
    from tracer.render.page.passes import page_step

    assert page_step("lens.top_token") == "lens"  # the lens's own step shows it first
    # the demo: its screen last
    steps = demo.build_steps(demo.Demo(gen, m.tokenizer))
    assert steps[-1].remake is toy and steps[-1].name == "A toy step"


CLI_WITH_TOY = """
import sys
from rich.text import Text
from tracer import sections
sections.SECTIONS += (sections.Section("toy", "a toy step"),)
sections.renders("toy")(lambda ctx, number: Text(f"{number} · a toy step of {ctx.n} tokens"))
sections.estimates("toy")(lambda r: 1)
from tracer.cli import main
sys.argv = ["tracer", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("args, rc, wanted", [
    (["trace", "--help"], 0, "lens, toy (a toy step)"),
    (["trace", "A B", "--model", LLAMA, "-n", "0", "--section", "toy"], 0, "9 · a toy step of 4 tokens"),  # <|begin_of_text|>, A, ␣, B
    (["trace", "A B", "--model", LLAMA, "--section", "nope"], 2, "'heatmap', 'loop', 'lens', 'toy'"),
])
def test_a_section_added_to_the_list_is_one_of_the_section_choices(args, rc, wanted):
    """--section's choices are made when the CLI is imported: a process that adds a section first gets it."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb", "PYTHONPATH": HERE}
    r = subprocess.run([sys.executable, "-c", CLI_WITH_TOY, *args], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == rc, r.stderr
    out = " ".join((r.stdout + r.stderr).split())
    assert wanted in out, out[-2000:]
    if rc == 0 and "--section" in args:
        assert "1 · Tokens" not in out
