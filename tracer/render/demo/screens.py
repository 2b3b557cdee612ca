"""The demo's screens in order, the stated values placed beside the screen that computes them, and
one screen laid out (heading, narration, numbers, checks, footer), printed or paged."""

from __future__ import annotations

import numpy as np
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ..checks import CheckBook
from .base import Demo, Page, Step, sentence
from .layer import (step_embedding, step_multihead, step_position, step_qkv, step_scores, step_softmax, step_tokens,
                    step_weighted_sum)
from .output import step_append, step_cache, step_chosen, step_layers, step_temperature, step_unembed



STEPS = (step_tokens, step_embedding, step_position, step_qkv, step_scores, step_softmax, step_weighted_sum,
         step_multihead, step_layers, step_unembed, step_temperature, step_chosen, step_append, step_cache)


CHECK_NAMES = {
    "Tokens": ["tokens"],
    "Embedding lookup": ["hook_embed"],
    "Position vector": ["hook_pos_embed", "blocks.0.hook_resid_pre"],
    "Query, Key and Value": ["blocks.0.attn.hook_[qkv]", "blocks.0.ln1.*"],
    "Scores and the mask": ["blocks.0.attn.hook_dots", "blocks.0.attn.hook_attn_scores"],
    "Softmax: scores become weights": ["blocks.0.attn.hook_pattern"],
    "Weighted sum of values": ["blocks.0.attn.hook_z"],
    "Multi-head: concat and W_O": ["blocks.0.*"],
    "The other layers": ["blocks.*"],
    "Unembedding: one score per token": ["ln_final.*", "unembed.*", "logits"],
    "Softmax and temperature": ["sample.scaled", "sample.probs", "sample.final", "sample.uniform"],
    "The chosen token": ["sample.token"],
}


def build_steps(d: Demo) -> list[Step]:
    steps = [make(d) for make in STEPS]
    book = CheckBook(d.checks)
    for s in steps:
        s.checks = book.take_matching(CHECK_NAMES.get(s.name, []))
    steps[STEPS.index(step_append)].checks += book.rest()  # later passes, and anything unmatched
    return steps


def pages_of(steps: list[Step], quiz: bool) -> list[Page]:
    pages = []
    for i, s in enumerate(steps):
        if quiz and s.question is not None:
            pages.append(Page(i, True))
        pages.append(Page(i, False))
    return pages


def _checked_value(d: Demo, x) -> str:
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        return " ".join(str(v) for v in x) if isinstance(x, (list, tuple)) else str(x)
    return d.num(a) if a.ndim == 0 else d.vec(a, dims=6)


def _checks_table(d: Demo, checks: list) -> Table:
    """A scenario's stated values beside this step: ✓ in one line; ✗ with what was stated and recorded."""
    t = Table.grid(padding=(0, 1))
    t.add_column(no_wrap=True)
    t.add_column()
    for c in checks:
        name = c.label or f"{c.name}{list(c.index)}"
        t.add_row(Text("✓" if c.ok else "✗", style="bold"), Text(name, style=None if c.ok else "bold"))
        if not c.ok:
            diff = f" · off by {c.diff:.{d.precision}f}" if np.isfinite(c.diff) else ""
            t.add_row("", f"stated {_checked_value(d, c.expected)} · recorded {_checked_value(d, c.computed)}{diff}")
    return Group(sentence(("stated values, checked", "bold"), f"  ({sum(c.ok for c in checks)} of {len(checks)} hold)"), t)


def screen(d: Demo, steps: list[Step], page: Page, status: str = "", keys: bool = False) -> Group:
    s = steps[page.step]
    n = len(steps)
    title = f"Step {page.step + 1} of {n} · {s.name}" + (" — your turn" if page.quiz else "")
    parts: list[RenderableType] = [
        Rule(Text(title, style="bold"), align="left", characters="━", style="bold"),
        Padding(Text(s.narration), (0, 0, 0, 1), expand=False),
        Text(),
    ]
    if page.quiz:
        parts += [s.question, Text(), Panel(Text(f"{s.ask}\nPredict, then press Enter.", style="bold"),
                                            expand=False, border_style="bold")]
    else:
        parts.append(s.body)
        if s.checks:
            parts += [Text(), _checks_table(d, s.checks)]
    footer = f"[{page.step + 1}/{n}]  {d.title}"
    parts += [Text(), Rule(style="dim"), Text(footer, style="dim", no_wrap=True, overflow="ellipsis")]
    if keys:
        parts.append(Text("Enter/space/→ next   b/← back   number+Enter jump   q quit", style="dim"))
    if status:
        parts.append(Text(status, style="bold"))
    return Group(*parts)


def print_all(d: Demo, steps: list[Step], pages: list[Page], console: Console) -> None:
    for i, page in enumerate(pages):
        if i:
            console.print()
        console.print(screen(d, steps, page))
