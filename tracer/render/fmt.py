"""How a number, a vector, a shape or a token looks, for every renderer (trace, replay, demo, deck).

Numbers are written with a fixed number of decimals (`--precision`), never as "-0.000", and ±∞
as "∞"/"−∞"; probabilities too small for those decimals switch to scientific notation so that a
tiny probability never reads as zero. Vectors longer than `--dims` show their first and last
dims and their norm, as a reader of a 1024-wide model wants; `column_vec` aligns the numbers for
vectors stacked in a column. Tokens show their whitespace (␣) and are named by letters A, B, …
as the seed article names them. Imports numpy only.
"""

from __future__ import annotations

import math

import numpy as np

from ..tokenizers.tokens import label, show_token


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


def count(n: int, noun: str) -> str:
    """'1 layer', '24 layers', '2 heads' (with thousands separators)."""
    return f"{int(n):,} {noun}" + ("" if int(n) == 1 else "s")


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


def layer_runs(layers: list[int]) -> str:
    """[1, 2, …, 23] → 'layers 1–23'; [2] → 'layer 2'; [1, 2, 5] → 'layers 1–2 and 5'."""
    runs, start = [], None
    for i, l in enumerate(layers):
        start = l if start is None else start
        if i + 1 == len(layers) or layers[i + 1] != l + 1:
            runs.append(str(l) if start == l else f"{start}–{l}")
            start = None
    if len(layers) == 1:
        return f"layer {runs[0]}"
    return "layers " + (runs[0] if len(runs) == 1 else ", ".join(runs[:-1]) + " and " + runs[-1])


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
    """A bar of block characters for a weight in [0, 1] (readable without color); none for NaN."""
    w = float(w)
    if math.isnan(w):
        return ""
    w = min(max(w, 0.0), 1.0)
    eighths = int(round(w * width * 8))
    full, part = divmod(eighths, 8)
    return "█" * full + ("" if part == 0 else " ▏▎▍▌▋▊▉"[part])


def column_vec(v, p: int = 3, dims: int = 8, lead: int = 4) -> str:
    """'[ 0.900, -0.100, …]' with every number right-aligned, for vectors stacked in a column; longer
    than `dims`: the first `lead` … the last 2 numbers."""
    a = np.asarray(v, dtype=float).reshape(-1)  # [n]
    shown = a if len(a) <= dims else np.concatenate([a[:lead], a[-2:]])  # [≤ dims]
    w = max(p + 3, max((len(num(x, p)) for x in shown), default=1))  # the numbers shown set the width
    if len(a) <= dims:
        return "[" + ", ".join(num(x, p).rjust(w) for x in a) + "]"
    head = ", ".join(num(x, p).rjust(w) for x in a[:lead])
    tail = ", ".join(num(x, p).rjust(w) for x in a[-2:])
    return f"[{head}, …, {tail}]"


def cprob(x) -> str:
    """A probability in at most 4 characters: '.45', '1.00', '3e-5'."""
    x = float(x)
    if x >= 0.995:
        return "1.00"
    if x >= 0.005:
        return f"{x:.2f}"[1:]
    if x <= 0:
        return "0"
    return f"{x:.0e}".replace("e-0", "e-")


# --------------------------------------------------------------------------- tokens


def short(text: str, width: int = 10) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def tok(tokenizer, i) -> str:
    """A token's text with visible whitespace, quoted: '␣are'."""
    return "'" + show_token(tokenizer.token_str(int(i))) + "'"


def stok(tokenizer, i, width: int = 10) -> str:
    """A token's text with visible whitespace, cut to `width` characters (for narrow columns)."""
    return short(show_token(tokenizer.token_str(int(i))), width)


def sequence(a: int, b: int, limit: int = 26) -> str:
    """The letters of positions a..b-1 written together: 'ABCDEF'; more than `limit`: 'A…AD'."""
    if b - a <= limit:
        return "".join(label(i) for i in range(a, b))
    return f"{label(a)}…{label(b - 1)}"


def span(a: int, b: int) -> str:
    """Letters of positions a..b-1: 'A–F', 'G', 'none'."""
    return letters([label(i) for i in range(a, b)])


def size(nbytes: float) -> str:
    """A byte count in B, KB, MB or GB (powers of 1000), three significant digits."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{int(nbytes)} B"
