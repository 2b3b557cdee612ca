"""Classroom mode (`tracer demo`): one forward pass and the generation loop, one step per screen.

The steps follow the seed article's order — tokens, embedding lookup, position vector, Q/K/V,
scores and the causal mask, softmax, the weighted sum, multi-head, the other layers, the
unembedding, softmax and temperature, the chosen token, append and repeat, and the KV cache —
each with a few sentences of narration written for this project (the Query / Key / Value
analogy of a search term, an index and the content is the article's) and the numbers of one
recorded run. Every sentence a screen says is a `say(key, …)` of `render/words.py` ("demo.*",
screen by screen, and the walkthrough's keys where it says the same). Screens only read recorded arrays; the small arithmetic a class does by hand
(e^score, a what-if temperature) is done on recorded values and labelled as such.

Three ways to show the same screens (`show_demo`): interactive when stdin and stdout are terminals
(Enter/space/→ next, b/← back, a number then Enter jumps, q quits; `--auto SECONDS`); printed in
order otherwise (pipes, CI); or `--export deck.html`, one self-contained page. `--quiz` adds a
"predict, then press Enter" screen before values the class can work out.

  - `base`: the recorded run (`Demo`), a screen (`Step`), table helpers;
  - `layer`, `output`, `copying`: the screens (each enters itself in `tracer.sections`, which orders them);
    `screens`: the checks beside them, one screen's layout;
  - `pager`: keys and paging at a terminal; `deck`: the HTML page.
"""

from __future__ import annotations

import sys

from rich.console import Console

from ..text import safe_console
from ..words import say
from .base import MAX_WIDTH, Demo, Page, Step
from .deck import check_deck_path, deck_html, write_deck
from .pager import Pager, RawKeys, interactive, key_name, run_interactive
from .screens import build_steps, fit_pages, pages_of, print_all, screen

__all__ = ["MAX_WIDTH", "Demo", "Page", "Pager", "RawKeys", "Step", "build_steps", "check_deck_path",
           "deck_html", "fit_pages", "fitted", "key_name", "pages_of", "print_all", "run_interactive", "screen", "show_demo", "write_deck"]


def show_demo(d: Demo, console: Console, quiz: bool = False, auto: float | None = None, export: str | None = None,
              stdin=None) -> None:
    """Build the screens, then write the deck (`export`), page through them at a terminal, or print them
    all. A run that overflowed is shown as recorded (∞, nan), without warnings."""
    import numpy as np

    with np.errstate(all="ignore"):
        _show_demo(d, console, quiz, auto, export, sys.stdin if stdin is None else stdin)


def _show_demo(d: Demo, console: Console, quiz: bool, auto: float | None, export: str | None, stdin) -> None:
    if export is not None:  # preparing a deck for students: write it, do not start the walkthrough
        write_deck(d, export, quiz)
        n = len(pages_of(build_steps(d), quiz))
        safe_console(stderr=True).print(say("demo.wrote", path=export, n=str(n)), highlight=False, markup=False)
    elif interactive(stdin, console):  # a screen at a time: every page fits the terminal, heading in view
        run_interactive(d, *fitted(d, console, quiz), console, stdin, auto)
    else:
        steps = build_steps(d)
        print_all(d, steps, pages_of(steps, quiz), console)


def fitted(d: Demo, console: Console, quiz: bool = False) -> tuple[list[Step], list[Page]]:
    """The steps and pages of a walk at this terminal: long tables sized to its height, every page
    fitting it (`fit_pages`)."""
    d.rows = max(4, min(16, console.height - 16))
    steps = build_steps(d)
    return steps, fit_pages(d, steps, quiz, console)
