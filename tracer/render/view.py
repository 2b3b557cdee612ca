"""What the reader asked to see: which token, layer and head, how many numbers, how precisely."""

from __future__ import annotations

from dataclasses import dataclass, field


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
