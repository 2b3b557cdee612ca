"""The attention heatmap: one grid per head, query tokens down the side, key tokens across.

Each cell is the softmax weight that the row's token gives the column's key: a colored cell
(viridis, dark → yellow, which survives projectors and color blindness) holding a digit, so the
grid reads the same without color: the digit is the weight in tenths (0 below 0.05), █ is 0.95
or more, · marks a key the causal mask hides, and ! a weight that is not a finite number (a run
that overflowed: NaN, ∞). Reads `hook_pattern` [head, query_pos, key_pos].
"""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.style import Style
from rich.table import Table
from rich.text import Text

from .words import say

# viridis at 0, 0.25, 0.5, 0.75, 1
_STOPS = np.array([(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)], dtype=float)
NOT_FINITE = "!"  # a weight that is NaN or ±∞: the arithmetic overflowed


def color(w: float) -> tuple[int, int, int]:
    """Viridis at w in [0, 1]."""
    x = min(max(float(w), 0.0), 1.0) * (len(_STOPS) - 1)
    i = min(int(x), len(_STOPS) - 2)
    t = x - i
    r, g, b = _STOPS[i] * (1 - t) + _STOPS[i + 1] * t
    return int(r), int(g), int(b)


def glyph(w: float) -> str:
    """The character for a weight, readable without color."""
    if not np.isfinite(w):
        return NOT_FINITE
    if w >= 0.95:
        return "█"
    return str(min(9, int(w * 10 + 0.5)))


def _style(w: float) -> Style:
    if not np.isfinite(w):
        return Style(color="white", bgcolor="red", bold=True)
    r, g, b = color(w)
    bg = f"rgb({r},{g},{b})"
    if w >= 0.95:  # the █ glyph in the cell's own color: a solid cell in color, a block without
        return Style(color=bg, bgcolor=bg)
    fg = "black" if (0.299 * r + 0.587 * g + 0.114 * b) > 140 else "white"
    return Style(color=fg, bgcolor=bg)


def grid(pattern: np.ndarray, query_labels: list[str], key_labels: list[str], title: str,
         max_width: int = 80) -> Text:
    """One head's heatmap as lines of text. `pattern` [query_pos, key_pos]; the queries are the
    last len(query_labels) keys. When it does not fit `max_width`, the latest tokens are kept."""
    n_q, n_k = pattern.shape
    cw = max(2, max(len(s) for s in key_labels) + 1)  # cell width
    lw = max(len(s) for s in query_labels) + 1  # row label width
    fit = max(1, (max_width - lw) // cw)
    k0 = max(0, n_k - fit)  # first key shown
    q0 = max(0, n_q - fit)  # first query shown
    out = Text(no_wrap=True, overflow="crop")
    out.append(title, style="bold")
    if k0 > 0:
        out.append(f" (latest {n_k - k0} of {n_k} tokens)", style="dim")
    out.append("\n" + " " * lw)
    for k in range(k0, n_k):
        out.append(key_labels[k].rjust(cw), style="bold")
    first_query_key = n_k - n_q  # key index of the first query
    for q in range(q0, n_q):
        out.append("\n" + query_labels[q].rjust(lw - 1) + " ", style="bold")
        for k in range(k0, n_k):
            if k > first_query_key + q:
                out.append("·".rjust(cw), style="dim")
            else:
                w = float(pattern[q, k])
                out.append(glyph(w).rjust(cw), style=_style(w))
    return out


def heatmaps(pattern: np.ndarray, query_labels: list[str], key_labels: list[str], heads: list[int],
             layer: int, width: int = 80) -> Group:
    """A heatmap for each head in `heads`, side by side when the terminal is wide enough.
    `pattern` [head, query_pos, key_pos]."""
    grids = [grid(pattern[h], query_labels, key_labels, f"layer {layer}, head {h}", width) for h in heads]
    one = max(len(line) for g in grids for line in g.plain.split("\n"))
    per_row = max(1, min(len(grids), (width + 3) // (one + 3)))
    rows = []
    for i in range(0, len(grids), per_row):
        chunk = grids[i : i + per_row]
        if len(chunk) == 1:
            rows.append(chunk[0])
            continue
        t = Table.grid(padding=(0, 3))
        for _ in chunk:
            t.add_column(no_wrap=True)
        t.add_row(*chunk)
        rows.append(t)
    shown = np.asarray(pattern)[heads]  # [head, query_pos, key_pos]
    overflowed = not np.isfinite(shown).all()
    rows.append(Text(say("heatmap.legend") + (f", {NOT_FINITE} not a finite number (nan or ∞)" if overflowed else ""), style="dim"))
    return Group(*rows)
