"""`tracer compare A B`: two prompts side by side, and activation patching as a terminal heatmap.

Reads what `tracer.run.interventions.activation_patching` measured (plain numbers): the two prompts'
tokens and where they differ, both predictions and the logit difference between A's and B's top
tokens, how far the residual streams are apart, and the fraction of that difference A's residual
stream recovers when it is patched into B's run at one layer and position. The renderer never runs
the model. The sentences are `words.WORDS`' (the fixed ones) and functions here (those with a run's numbers), so that the page of `compare --export FILE.html`
(`render.page.compare`) says what the terminal says.
"""

from __future__ import annotations

import math

from rich.console import group
from rich.style import Style
from rich.table import Table
from rich.text import Text

from ..tokenizers.tokens import label, show_token
from .fmt import num
from .heatmap import color
from .text import line, section
from .words import say


def answers_words(result: dict, tok) -> str:
    """Both answers and the logit difference between them in each run, in one sentence (the terminal's and the page's)."""
    a_top, b_top = result["answers"]
    ld_a, ld_b = result["ld"]
    name = lambda i: show_token(tok.token_str(int(i)))  # noqa: E731
    said = (f"A predicts {name(a_top)}, B predicts {name(b_top)}. The logit difference ld = logit({name(a_top)}) − "
            f"logit({name(b_top)}) at the last position: {num(ld_a)} in A's run, {num(ld_b)} in B's.")
    if ld_a == ld_b:  # one answer (or a tie): every fraction below is 0 ÷ 0
        said += (" The two runs give the same difference, so there is none for patching to recover: every fraction "
                 "below is 0 ÷ 0 (nan). Choose prompts whose answers differ, e.g. by one word the answer copies.")
    return said


def distance_words(result: dict) -> str:
    far = max((max(r) for r in result["distance"]), default=0.0)
    return (f"The residual streams of A and B are apart only where the prompts differ and where attention has "
            f"carried the difference; the largest distance ‖resid_A − resid_B‖ is {num(far)}.")


@group()
def compare_view(result: dict, tok, a_ids, b_ids):
    name = lambda i: show_token(tok.token_str(int(i)))  # noqa: E731
    yield section(say("compare.prompts"))
    t = Table(box=None, padding=(0, 1))
    t.add_column("")
    for p in range(len(a_ids)):
        t.add_column(label(p), justify="center", style="bold" if result["differs"][p] else None)
    t.add_row("A", *[name(i) for i in a_ids])
    t.add_row("B", *[name(i) for i in b_ids])
    t.add_row("", *["≠" if d else "" for d in result["differs"]])
    yield t
    yield line(answers_words(result, tok))
    yield section(say("compare.title"))
    yield line(say("compare.patching"))
    grid = Table(box=None, padding=(0, 1))
    grid.add_column("into layer", justify="right")
    for p in range(len(a_ids)):
        grid.add_column(label(p), justify="right")
    for layer, row in enumerate(result["recovered"]):
        cells = []
        for v in row:
            shown = num(v, 2)  # 'nan', and never '-0.00' (a fraction a hair below 0)
            w = 0.0 if math.isnan(v) else min(max(v, 0.0), 1.0)
            r, g, b = color(w)
            cells.append(Text(shown, style=Style(bgcolor=f"rgb({r},{g},{b})", color="black" if w > 0.5 else "white")))
        grid.add_row(str(layer), *cells)
    yield grid
    yield line(distance_words(result))
