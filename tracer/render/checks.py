"""A scenario's stated values shown beside the step that computed them (✓ or ✗, and the difference).

`CheckBook` places each check once: the walkthrough takes the checks of the hook and index it is
showing, the demo those whose names match a screen's; whatever no step took is listed at the end.
"""

from __future__ import annotations


import numpy as np
from rich.text import Text

from .fmt import num, value

OK, BAD = "✓", "✗"


class CheckBook:
    """The stated values of a replay; sections take the ones they display."""

    def __init__(self, checks):
        self.checks = list(checks)
        self.placed: set[int] = set()

    def take(self, name: str, prefix: tuple, step: int | None = 0) -> list:
        """Unplaced checks of hook `name` whose index starts with `prefix` (and is at least as long),
        recorded in pass `step` (None: any pass)."""
        out = []
        for i, c in enumerate(self.checks):
            idx = tuple(x if isinstance(x, str) else int(x) for x in c.index)  # "0:2" slices stay strings
            if (i not in self.placed and c.name == name and (step is None or int(c.step) == step)
                    and len(idx) >= len(prefix) and idx[: len(prefix)] == tuple(prefix)):
                self.placed.add(i)
                out.append(c)
        return out

    def take_where(self, wanted, step: int = 0) -> list:
        """Unplaced checks of pass `step` for which `wanted(check)` holds, in order."""
        out = []
        for i, c in enumerate(self.checks):
            if i not in self.placed and int(c.step) == step and wanted(c):
                self.placed.add(i)
                out.append(c)
        return out

    def rest(self) -> list:
        """The checks no step took, and marks them placed."""
        out = [c for i, c in enumerate(self.checks) if i not in self.placed]
        self.placed = set(range(len(self.checks)))
        return out


def _diff(c, p: int) -> str:
    if np.isnan(c.diff):
        return "not a number (nan)"
    if np.isinf(c.diff):
        return "shapes differ" if np.shape(c.expected) != np.shape(c.computed) else "∞"
    if c.diff == 0:
        return "0"
    if c.diff < 0.5 * 10.0**-p:
        return f"{c.diff:.1e}"
    return num(c.diff, p)


def _check_name(c) -> str:
    idx = ", ".join(str(i) for i in c.index)
    return f"{c.name}[{idx}]" + (f" (pass {c.step})" if c.step else "")


def check_line(c, p: int, dims: int, where: bool = False) -> Text:
    """One stated value beside its step: '✗ article (B): "Q·A_K = 0.6": stated 0.6, computed 0.670, difference 0.070'."""
    cp = max(p, _decimals(c.expected) + 1)
    t = Text()
    t.append(OK if c.ok else BAD, style="bold green" if c.ok else "bold red")
    t.append(" " + (c.label or _check_name(c)), style="italic")
    if where and c.label:
        t.append(f" ({_check_name(c)})", style="dim")
    t.append(": ")
    t.append(f"stated {value(c.expected, _decimals(c.expected), dims)}, computed ")
    t.append(value(c.computed, cp, dims), style="bold")
    t.append(f", difference {_diff(c, cp)}")
    if not c.ok and np.isfinite(c.diff):
        t.append(f" (more than the tolerance {c.tolerance:g})", style="red")
    return t


def _decimals(x) -> int:
    """Decimals as the value was written (0.6 → 1); at least 1."""
    best = 1
    try:
        flat = np.asarray(x, dtype=float).reshape(-1)[:64]
    except (TypeError, ValueError):
        return 1
    for v in flat:
        s = repr(float(v))
        if "e" in s:
            return 4
        best = max(best, len(s.split(".")[1].rstrip("0")) if "." in s else 0)
    return min(best, 8)
