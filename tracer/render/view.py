"""What the reader asked to see (which token, layer and head, how many numbers, how precisely),
checked against the model once, before anything runs or is written (`View.resolve`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import TracerError
from ..tokens import label


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

    def resolve(self, config, n_prompt: int, n_all: int | None = None) -> "Resolved":
        """The options as positions and indices for a model of `config` and a prompt of `n_prompt`
        tokens followed by generated tokens up to position `n_all` - 1 (those that had a pass of
        their own); a TracerError naming the option when one does not fit."""
        if self.dims < 1:
            raise TracerError(f"--dims must be ≥ 1, got {self.dims}")
        if not 0 <= self.precision <= 12:
            raise TracerError(f"--precision must be between 0 and 12, got {self.precision}")
        layers = parse_index(self.layer, config.n_layers, "layer", "--layer") if config.n_layers else []
        heads = parse_index(self.head, config.n_heads, "head", "--head")
        token = parse_token(self.token, n_prompt, n_all)
        return Resolved(self, token, layers, heads, str(self.head).strip().lower() != "all")


@dataclass(frozen=True)
class Resolved:
    """A View checked against a model and a prompt: positions and indices, ready to show."""

    view: View
    token: int | None  # the position to show step by step, or None for every prompt token
    layers: list  # the layers shown token by token
    heads: list  # the heads to show
    head_chosen: bool  # --head named one head (not 'all')


def parse_token(value_: str | None, n: int, n_all: int | None = None) -> int | None:
    """--token: a letter (B) or a 0-based position (1) of the prompt (or of a generated token that
    had its own pass, up to n_all), or None."""
    if value_ is None:
        return None
    n_all = n if n_all is None else n_all
    s = str(value_).strip()
    pos = None
    if s.isdigit() and s.isascii():
        pos = int(s)
    elif s.isalpha() and s.isascii():
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
        raise TracerError(f"--token {value_}: {has}")
    return pos


def parse_index(value_: str, n: int, what: str, option: str) -> list[int]:
    """--layer / --head: a number in 0..n-1 or 'all'."""
    s = str(value_).strip().lower()
    if s == "all":
        return list(range(n))
    if s.lstrip("+").isdigit() and int(s) < n:
        return [int(s)]
    if n == 0:
        raise TracerError(f"{option} {value_}: the model has no {what}s")
    has = f"{what} 0" if n == 1 else f"{what}s 0–{n - 1}"
    raise TracerError(f"{option} {value_}: the model has {has} (or 'all')")
