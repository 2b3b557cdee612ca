"""Figures the README and docs/page.md state about the default model and the pages, held to what tracer
makes today: W_U's shape in the walkthrough's list of steps, and the size of the exported pages they name
(the README said "W_U (8 × 50,257)" of a 64-wide model and "185 kB" of a 218 kB page)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tracer
from tracer.cli import app

ROOT = Path(__file__).resolve().parents[1]
README, PAGE_DOC = (ROOT / "README.md").read_text(encoding="utf-8"), (ROOT / "docs" / "page.md").read_text(encoding="utf-8")


def test_the_steps_list_gives_the_default_models_w_u_shape():
    cfg = tracer.load("abc").config
    said = re.search(r'"how to predict G": the final vector, W_U \(([\d,]+) × ([\d,]+)\)', " ".join(README.split()))
    assert said is not None
    assert [int(x.replace(",", "")) for x in said.groups()] == [cfg.d_model, cfg.d_vocab]


@pytest.mark.parametrize("args, readme, doc", [
    (["replay", "article"], r"article\.html` \((\d+) kB\)", r"\| `tracer replay article` \| (\d+) kB"),
    (["trace", "A B C D E F", "--model", "tiny", "-n", "3"], None, r"\(`-n 3`\) \| ([\d.]+) MB"),
])
def test_the_page_sizes_said_are_the_pages_made(tmp_path, runner, args, readme, doc):
    """Each size as the docs round it (kB: 1,000 bytes), within 3% of the page exported now."""
    r = runner.invoke(app, [*args, "--export", str(tmp_path / "p.html")], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    made = (tmp_path / "p.html").stat().st_size
    for text, pattern in ((README, readme), (PAGE_DOC, doc)):
        if pattern is None:
            continue
        m = re.search(pattern, " ".join(text.split()))
        assert m is not None, pattern
        said = float(m.group(1)) * (1e3 if "kB" in pattern else 1e6)
        assert abs(said - made) <= 0.03 * made, (pattern, said, made)
