"""What the reader asked to see (which token, layer and head, how many numbers, how precisely),
checked against the model once, before anything runs or is written (`View.resolve`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import TracerError
from ..tokens import label

# The walkthrough's sections, in the article's order (`--section`): the tokens; the first layer's
# input (embedding + position vector) and the rest of the layer token by token; every layer at a
# glance; predicting the next token; every position's prediction; the attention heatmaps; the
# generation loop and the KV cache; the logit lens.
SECTIONS = ("tokens", "embed", "attention", "layers", "predict", "positions", "heatmap", "loop", "lens")
MAX_LINES = 20_000  # a view that would print more is refused with a hint (`--max-lines 0`: no limit)


@dataclass(frozen=True)
class View:
    token: str | None = None  # a letter (B) or a 0-based position (1); None: every token of the prompt
    layer: str = "0"  # the layer shown token by token: a number or "all"
    head: str = "all"  # a head number or "all"
    dims: int = 8  # vectors longer than this show first … last dims and the norm
    precision: int = 3  # decimals
    brief: bool = True  # brief: the token-by-token view for the chosen layer only; full: more of everything
    top_k: int = 10  # rows of the next-token table
    checks: tuple = field(default_factory=tuple)  # tracer.checks.Check, shown beside their steps
    sections: tuple = ()  # names from SECTIONS to show; empty: all of them
    max_lines: int = MAX_LINES  # refuse a view that would print more lines than this (0: no limit)

    def resolve(self, config, n_prompt: int, n_all: int | None = None, width: int = 100) -> "Resolved":
        """The options as positions and indices for a model of `config` and a prompt of `n_prompt`
        tokens followed by generated tokens up to position `n_all` - 1 (those that had a pass of
        their own); a TracerError naming the option when one does not fit, or when the view would
        print more than `max_lines` lines at `width` columns."""
        if self.dims < 1:
            raise TracerError(f"--dims must be ≥ 1, got {self.dims}")
        if not 0 <= self.precision <= 12:
            raise TracerError(f"--precision must be between 0 and 12, got {self.precision}")
        unknown = [s for s in self.sections if s not in SECTIONS]
        if unknown:
            raise TracerError(f"--section {unknown[0]}: the sections are {', '.join(SECTIONS)}")
        layers = parse_index(self.layer, config.n_layers, "layer", "--layer") if config.n_layers else []
        heads = parse_index(self.head, config.n_heads, "head", "--head")
        token = parse_token(self.token, n_prompt, n_all)
        resolved = Resolved(self, token, layers, heads, str(self.head).strip().lower() != "all")
        lines = resolved.estimated_lines(config, n_prompt, n_all or n_prompt, width)
        if self.max_lines and lines > self.max_lines:
            raise TracerError(
                f"this view would print about {lines:,} lines (--max-lines {self.max_lines:,}); show a part: "
                f"--section ({', '.join(SECTIONS)}), one token (--token), one layer (--layer N), or --brief; "
                f"--max-lines 0 prints it all")
        return resolved


@dataclass(frozen=True)
class Resolved:
    """A View checked against a model and a prompt: positions and indices, ready to show."""

    view: View
    token: int | None  # the position to show step by step, or None for every prompt token
    layers: list  # the layers shown token by token
    heads: list  # the heads to show
    head_chosen: bool  # --head named one head (not 'all')

    def estimated_lines(self, cfg, n: int, n_all: int, width: int = 100) -> int:
        """Roughly how many lines the walkthrough prints (to refuse one of minutes and megabytes before
        rendering it): per section, from the sizes alone."""
        brief, H = self.view.brief, cfg.n_heads
        heads = len(self.heads) if (self.head_chosen or not brief or H <= 4) else 1
        shown = [self.token] if self.token is not None else (list(range(n)) if not brief or n <= 4 else [0, 1, n - 1])
        steps = max(n_all - n + 1, 1)
        total = 8 + (n + 10 if self.shows("tokens") else 0)
        per_number = max(width // 9, 1)  # numbers per line of a wrapped vector or weighted sum
        if self.shows("embed", "attention"):
            for layer in self.layers:
                for t in shown:
                    keys = t + 1
                    rows = min(keys, 8) if brief else keys
                    per_head = 8 + (keys if keys <= 8 or not brief else 1) + rows + 2 * (rows // per_number + 1)
                    total += 6 + (8 if layer == 0 else 0) + (heads * per_head + 14 if self.shows("attention") else 0)
        if self.shows("layers"):
            total += cfg.n_layers + 8 + (0 if brief else cfg.n_layers * (n + 6))
        if self.shows("predict"):
            total += 34 + 2 * self.view.top_k
        if self.shows("positions"):
            total += min(n, 16 if brief else n) + 12
        if self.shows("heatmap"):
            per_row = max(1, (width + 3) // (3 * min(n, width // 3) + 8))
            maps = len(self.layers) if (not brief or len(self.layers) == 1) else 1
            total += maps * -(-heads // per_row) * (min(n, width // 3) + 3) + 4
        if self.shows("loop"):
            total += steps * (5 + (0 if brief else cfg.n_layers + 2)) + steps + 14
        if self.shows("lens"):
            total += cfg.n_layers + 12
        return total

    def shows(self, *names: str) -> bool:
        """Whether any of these sections is shown."""
        return not self.view.sections or any(n in self.view.sections for n in names)


def parse_token(value_: str | None, n: int, n_all: int | None = None) -> int | None:
    """--token: a letter (B) or a 0-based position (1) of the prompt (or of a generated token that
    had its own pass, up to n_all), or None."""
    if value_ is None:
        return None
    n_all = n if n_all is None else n_all
    s = str(value_).strip()
    pos = None
    if re.fullmatch(r"[0-9]{1,18}", s):  # ASCII digits only (not ², ⑤, ۱), and few enough for int()
        pos = int(s)
    elif re.fullmatch(r"[A-Za-z]{1,12}", s):
        pos = 0
        for ch in s.upper():
            pos = pos * 26 + (ord(ch) - ord("A") + 1)
        pos -= 1
    if pos is None or not 0 <= pos < n_all:
        if n == 1:
            has = "the prompt has token A (position 0)"
        else:
            has = f"the prompt has tokens {label(0)}–{label(n - 1)} (positions 0–{n - 1})"
        if n_all > n:
            more = f"{label(n)} (position {n})" if n_all == n + 1 else \
                f"{label(n)}–{label(n_all - 1)} (positions {n}–{n_all - 1})"
            has += f" and the generated {more}"
        raise TracerError(f"--token {_shown(value_)}: {has}")
    return pos


def parse_index(value_: str, n: int, what: str, option: str) -> list[int]:
    """--layer / --head: a number in 0..n-1 or 'all'."""
    s = str(value_).strip().lower()
    if s == "all":
        return list(range(n))
    if re.fullmatch(r"\+?[0-9]{1,18}", s) and int(s) < n:  # ASCII digits only, and few enough for int()
        return [int(s)]
    if n == 0:
        raise TracerError(f"{option} {_shown(value_)}: the model has no {what}s")
    has = f"{what} 0" if n == 1 else f"{what}s 0–{n - 1}"
    raise TracerError(f"{option} {_shown(value_)}: the model has {has} (or 'all')")


def _shown(value_) -> str:
    """An option's value as a message names it: at most 40 characters."""
    s = str(value_)
    return s if len(s) <= 40 else s[:20] + "…" + s[-10:] + f" ({len(s):,} characters)"
