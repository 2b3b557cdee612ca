"""The demo's screens in the order of `tracer.sections`, the stated values placed beside the screen that
computes them, and one screen laid out (heading, narration, numbers, checks, footer), printed or paged."""

from __future__ import annotations

import numpy as np
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ... import sections
from ...core import hooks
from ..checks import CheckBook
from ..words import say
from .base import Demo, FirstThatFits, Page, Step, sentence
from .copying import step_copying  # noqa: F401  each screen enters itself in tracer.sections (@screen)
from .decoding import step_speculative  # noqa: F401
from .experts import step_experts  # noqa: F401
from .layer import step_tokens  # noqa: F401
from .output import step_layers
from .state import step_state  # noqa: F401  a linear-attention layer's screen (a hybrid model's)


def screen_of(name: str):
    """The maker of the screen that shows a stated value of the prompt pass: layer 0's and the rest by
    their step (`tracer.sections`: the steps each screen shows), a later layer's on the other layers'
    screen; None: the last screen takes it (the loop, the lens)."""
    layer, _ = hooks.split(name)
    if layer:
        return step_layers
    step = hooks.step_of(name)
    return next((sections.drawn("screen", screen)[0] for screen, shows in sections.demo_screens() if step in shows), None)


def build_steps(d: Demo) -> list[Step]:
    """The screens of `tracer.sections`, in order: those this run has something for (a model without
    layers shows nothing of a layer; step_copying only a prompt that repeats a token), each with the
    stated values it shows."""
    steps = []
    for name, _ in sections.demo_screens():
        make, layers = sections.drawn("screen", name)
        if layers and not d.cfg.n_layers:  # a model without layers: nothing of a layer to show
            continue
        s = make(d)
        if s is not None:  # a screen this run has nothing for (step_copying on a prompt that repeats nothing)
            s.remake = make
            steps.append(s)
    book = CheckBook(d.checks)
    for s in steps:
        s.checks = book.take_where(lambda c: screen_of(c.name) is s.remake)
    next(s for s in steps if s.name == "Append and repeat").checks += book.rest()  # later passes, and anything unmatched
    return steps


def pages_of(steps: list[Step], quiz: bool) -> list[Page]:
    """A page per screen (the question first, with --quiz): for printing, where nothing scrolls away."""
    pages = []
    for i, s in enumerate(steps):
        if quiz and s.question is not None:
            pages.append(Page(i, True))
        pages.append(Page(i, False))
    return pages


def fit_pages(d: Demo, steps: list[Step], quiz: bool, console: Console, keys: bool = True) -> list[Page]:
    """Pages that fit `console`'s height with the heading in view. A screen too tall is first folded
    onto one: its blank lines left out, its holding stated values said in a line, each ✗ in one line,
    its long tables with fewer rows (the step rebuilt in `steps`); only what still does not fit is cut
    between its blocks (the narration on the first page, "continued" on the others)."""
    room = console.height - 1  # the last line stays free: printing on it would scroll the heading away

    def tall(renderable) -> int:
        return len(console.render_lines(renderable, console.options, pad=False))

    pages = []
    for i, s in enumerate(steps):
        for q in ([True] if quiz and s.question is not None else []) + [False]:
            one = _one_screen(d, steps, i, q, lambda p: tall(screen(d, steps, p, keys=keys)) <= room)
            if one is not None:
                pages.append(one)
                continue
            blocks = blocks_of(d, steps[i], q)
            heights = [tall(b) for b in blocks]
            first = tall(screen(d, steps, Page(i, q, (0, 0), 0, 2), keys=keys))  # heading, narration, footer
            later = tall(screen(d, steps, Page(i, q, (0, 0), 1, 2), keys=keys))
            cuts, start, used = [], 0, first
            for j, h in enumerate(heights):
                if used + h > room and j > start:  # this block starts the next page
                    cuts.append((start, j))
                    start, used = j, later
                    if h == 1 and isinstance(blocks[j], Text) and not blocks[j].plain:
                        start, used = j + 1, later - 1  # a page starts with no blank line
                used += h
            cuts.append((start, len(blocks)))
            pages += [Page(i, q, c, k, len(cuts)) for k, c in enumerate(cuts)]
    return pages


def _one_screen(d: Demo, steps: list[Step], i: int, quiz: bool, fits) -> Page | None:
    """The first way of showing step i on one screen that `fits`: as it is; without its blank lines;
    its stated values (all holding) in one line; each ✗ in one line; then, rebuilt with fewer rows in
    its long tables (`Demo.rows`, down to 4), without blank lines and with ✗ in one line. None: none fits."""
    s = steps[i]
    ok = bool(s.checks) and all(c.ok for c in s.checks)
    failing = any(not c.ok for c in s.checks)
    ways = [Page(i, quiz), Page(i, quiz, tight=True)]
    ways += [Page(i, quiz, summed=True), Page(i, quiz, tight=True, summed=True)] if ok else []
    ways += [Page(i, quiz, tight=True, compact=True)] if failing else []
    for page in ways:
        if fits(page):
            return page
    rows = d.rows
    for fewer in range(rows - 1, 3, -1):
        d.rows = fewer
        try:
            shorter = s.remake(d)
        finally:
            d.rows = rows
        shorter.checks = s.checks
        steps[i] = shorter
        page = Page(i, quiz, tight=True, summed=ok, compact=failing)
        if fits(page):
            return page
    steps[i] = s
    return None


def _spacer(block) -> bool:
    """A blank line between a screen's blocks (`Text()`)."""
    return isinstance(block, Text) and not block.plain


def _checked_value(d: Demo, x) -> str:
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        return " ".join(str(v) for v in x) if isinstance(x, (list, tuple)) else str(x)
    return d.num(a) if a.ndim == 0 else d.vec(a, dims=6)


def _check_blocks(d: Demo, checks: list, compact: bool = False) -> list:
    """A scenario's stated values beside this step: a heading, then a block per value (✓ in one line;
    ✗ with what was stated and recorded, on a second line, or after the name where it fits the width
    when `compact`), so that a screen too small for all of them can page them."""
    hold = say("demo.checks.hold", ok=str(sum(c.ok for c in checks)), n=str(len(checks)))
    out = [sentence((say("demo.checks"), "bold"), hold)]
    for c in checks:
        t = Table.grid(padding=(0, 1))
        t.add_column(no_wrap=True)
        t.add_column()
        name = c.label or f"{c.name}{list(c.index)}"
        t.add_row(Text("✓" if c.ok else "✗", style="bold green" if c.ok else "bold red"),
                  Text(name, style=None if c.ok else "bold"))
        if not c.ok:
            off = say("demo.checks.off", diff=f"{c.diff:.{d.precision}f}") if np.isfinite(c.diff) else ""
            detail = say("demo.checks.wrong", stated=_checked_value(d, c.expected),
                         recorded=_checked_value(d, c.computed), off=off)
            if compact:
                t.add_row("", detail)
                out.append(FirstThatFits(Text.assemble(("✗ ", "bold red"), (name, "bold"), "  ", detail), t))  # one line, else two
                continue
            t.add_row("", detail)
        out.append(t)
    return out





def blocks_of(d: Demo, s: Step, quiz: bool, summed: bool = False, compact: bool = False) -> list:
    """What a screen shows under its narration, as blocks a small terminal can page: the question and
    what to predict (quiz), or the numbers and the stated values (`summed`: all holding, in one line;
    `compact`: each ✗ in one line where it fits)."""
    if quiz:
        ask = Panel(Text(f"{s.ask}\n{say('demo.predict')}", style="bold"), expand=False, border_style="bold")
        return [*_parts(s.question), Text(), ask]
    if summed:
        n = len(s.checks)
        return [*_parts(s.body), sentence(("✓ ", "bold green"), (say("demo.checks"), "bold"),
                                          say("demo.checks.all", n=str(n)) if n > 1 else say("demo.checks.one"),
                                          say("demo.checks.replay"))]
    return [*_parts(s.body), *([Text(), *_check_blocks(d, s.checks, compact)] if s.checks else [])]


def _parts(r) -> list:
    return list(r.renderables) if isinstance(r, Group) else [r]


def step_title(i: int, n: int, name: str, quiz: bool) -> str:
    """Screen i's heading (0-based), "— your turn" on a question page; the deck's section says it too."""
    return say("demo.title", i=str(i + 1), n=str(n), name=name) + (say("demo.your_turn") if quiz else "")


def screen(d: Demo, steps: list[Step], page: Page, status: str = "", keys: bool = False) -> Group:
    s = steps[page.step]
    n = len(steps)
    title = step_title(page.step, n, s.name, page.quiz)
    if page.parts > 1:
        title += f" ({page.part + 1}/{page.parts})"
    parts: list[RenderableType] = [Rule(Text(title, style="bold"), align="left", characters="━", style="bold")]
    if page.part == 0:
        parts.append(Padding(Text(s.narration), (0, 0, 0, 1), expand=False))
    if not page.tight:
        parts.append(Text())
    blocks = blocks_of(d, s, page.quiz, page.summed, page.compact)
    a, b = page.blocks if page.blocks is not None else (0, len(blocks))
    parts += [x for x in blocks[a:b] if not (page.tight and _spacer(x))]
    if b < len(blocks):
        parts.append(Text(say("demo.continued"), style="dim italic"))
    footer = f"[{page.step + 1}/{n}]  {d.title}"
    if keys:  # one line: where we are, and the keys
        footer = say("demo.keys", i=str(page.step + 1), n=str(n), title=d.title)
    parts += [Rule(style="dim"), Text(footer, style="dim", no_wrap=True, overflow="ellipsis")]
    if status:
        parts.append(Text(status, style="bold"))
    return Group(*parts)


def print_all(d: Demo, steps: list[Step], pages: list[Page], console: Console) -> None:
    for i, page in enumerate(pages):
        if i:
            console.print()
        console.print(screen(d, steps, page))
