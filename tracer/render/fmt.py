"""Number, vector and shape formatting for the renderers: one place decides how a number looks.

Numbers are written with a fixed number of decimals (`--precision`), never as "-0.000";
probabilities too small for those decimals switch to scientific notation so that a tiny
probability never reads as zero. Vectors longer than `--dims` show their first and last
dims and their norm, as a reader of a 1024-wide model wants. Imports numpy only.
"""

from __future__ import annotations

import math

import numpy as np


def num(x, p: int = 3) -> str:
    """A number with `p` decimals: '0.450', '-1.250', '0.000' (never '-0.000'), '−∞' for -inf."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "−∞" if x < 0 else "∞"
    s = f"{x:.{p}f}"
    if s.startswith("-") and float(s) == 0:
        s = s[1:]
    return s


def prob(x, p: int = 3) -> str:
    """A probability: `p` decimals, or scientific when smaller than the last decimal ('3.1e-05')."""
    x = float(x)
    if 0 < x < 0.5 * 10.0**-p:
        return f"{x:.1e}"
    return num(x, p)


def integer(n) -> str:
    """A whole number with thousands separators: 50,257."""
    return f"{int(n):,}"


def shape(*dims) -> str:
    """A matrix shape as the article writes it: '8 × 50,257'."""
    return " × ".join(integer(d) for d in dims)


def norm(v) -> float:
    return float(np.linalg.norm(np.asarray(v, dtype=float)))


def vec(v, p: int = 3, dims: int = 8) -> str:
    """'[0.800, -0.200, 0.400]'; longer than `dims`: '[a, b, c, d, …, w, x, y, z] (1,024 dims, ‖·‖ 3.210)'."""
    a = np.asarray(v, dtype=float).reshape(-1)  # [n]
    if a.size <= dims:
        return "[" + ", ".join(num(x, p) for x in a) + "]"
    head = max(dims // 2, 1)
    tail = max(dims - head, 1)
    body = ", ".join(num(x, p) for x in a[:head]) + ", …, " + ", ".join(num(x, p) for x in a[-tail:])
    return f"[{body}] ({integer(a.size)} dims, ‖·‖ {num(norm(a), p)})"


def value(v, p: int = 3, dims: int = 8) -> str:
    """A stated or computed value: a number, or a (nested) list written as vectors; text as written."""
    try:
        a = np.asarray(v, dtype=float)
    except (TypeError, ValueError):
        return repr(v)
    if a.ndim == 0:
        return num(a, p)
    if a.ndim == 1:
        return vec(a, p, dims)
    return "[" + ", ".join(value(row, p, dims) for row in a) + "]"


def letters(labels: list[str]) -> str:
    """'A', 'A and B', 'A, B and C'; long runs are shortened to 'A–F'."""
    if not labels:
        return "none"
    if len(labels) > 2:
        return f"{labels[0]}–{labels[-1]}"
    if len(labels) == 1:
        return labels[0]
    return ", ".join(labels[:-1]) + " and " + labels[-1]


def bar(w: float, width: int = 10) -> str:
    """A bar of block characters for a weight in [0, 1] (readable without color)."""
    w = min(max(float(w), 0.0), 1.0)
    eighths = int(round(w * width * 8))
    full, part = divmod(eighths, 8)
    return "█" * full + ("" if part == 0 else " ▏▎▍▌▋▊▉"[part])
