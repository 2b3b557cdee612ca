"""What the reader asked to see (which token, layer and head, how many numbers, how precisely),
checked against the model once, before anything runs or is written (`View.resolve`), into the one
value every renderer and the page read (`Resolved`: the tokens, heads and layers shown)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from ..errors import TracerError
from .. import sections  # the walkthrough's sections (`--section`), in the article's order
from ..tokenizers.tokens import label

MAX_LINES = 20_000  # a view that would print more is refused with a hint (`--max-lines 0`: no limit)
BRIEF_TOKENS = 4  # brief mode shows every token up to this many, else A, B and the last
BRIEF_HEADS = 4  # brief mode shows every head up to this many, else head 0


@dataclass(frozen=True)
class View:
    token: str | None = None  # a letter (B) or a 0-based position (1); None: every token of the prompt
    layer: str = "0"  # the layer shown token by token: a number or "all"
    head: str = "all"  # a head number or "all"
    dims: int = 8  # vectors longer than this show first … last dims and the norm
    precision: int = 3  # decimals
    brief: bool = True  # brief: the token-by-token view for the chosen layer only; full: more of everything
    top_k: int = 10  # rows of the next-token table
    checks: tuple = field(default_factory=tuple)  # tracer.run.checks.Check, shown beside their steps
    sections: tuple = ()  # names of tracer.sections to show; empty: all of them
    max_lines: int = MAX_LINES  # refuse a view that would print more lines than this (0: no limit)

    def resolve(self, config, n_prompt: int, n_all: int | None = None, width: int = 100,
                meta: dict | None = None, before: int = 0, stated: int = 0) -> "Resolved":
        """The options as positions and indices for a model of `config` and a prompt of `n_prompt`
        tokens followed by generated tokens up to position `n_all` - 1 (those that had, or can have,
        a pass of their own); a TracerError naming the option when one does not fit, or when the view
        would print more than `max_lines` lines at `width` columns (`Resolved.estimated_lines`; `meta`:
        the model's or the trace's, for the lines the header and the notes take; `before`: lines printed
        ahead of the walkthrough, a scenario's title and notes; `stated`: the stated values a replay
        will check, before the run has checked them)."""
        if self.dims < 1:
            raise TracerError(f"--dims must be ≥ 1, got {self.dims}")
        if not 0 <= self.precision <= 12:
            raise TracerError(f"--precision must be between 0 and 12, got {self.precision}")
        unknown = [s for s in self.sections if s not in sections.names()]
        if unknown:
            raise TracerError(f"--section {unknown[0]}: the sections are {', '.join(sections.names())}")
        layers = parse_index(self.layer, config.n_layers, "layer", "--layer") if config.n_layers else []
        most = max([config.attention_of(l).n_heads(config) for l in range(config.n_layers)] + [config.n_heads])
        heads = parse_index(self.head, most, "head", "--head")  # a linear-attention layer may have more heads
        token = parse_token(self.token, n_prompt, n_all)
        chosen = str(self.head).strip().lower() != "all"
        resolved = Resolved(self, token, layers, heads, chosen, shown_tokens(token, n_prompt, self.brief),
                            shown_heads(heads, chosen, self.brief), heatmap_layers(layers, self.layer, self.brief),
                            config, n_prompt, n_all or n_prompt, width, dict(meta or {}), before, stated)
        resolved.check_lines(resolved.estimated_lines())
        return resolved


def shown_tokens(token: int | None, n: int, brief: bool) -> list[int]:
    """The positions shown token by token: --token's; every prompt token (--full, or a short prompt);
    else A, B and the last."""
    if token is not None:
        return [token]
    return [0, 1, n - 1] if brief and n > BRIEF_TOKENS else list(range(n))


def shown_heads(heads: list[int], chosen: bool, brief: bool) -> list[int]:
    """The heads shown: --head's, or all of them (--full, or at most BRIEF_HEADS), else head 0."""
    return heads if chosen or not brief or len(heads) <= BRIEF_HEADS else heads[:1]


def heatmap_layers(layers: list[int], option: str, brief: bool) -> list[int]:
    """The layers with a heatmap: --layer's (one, or 'all'), every --layer layer with --full."""
    return layers if len(layers) <= 1 or not brief or str(option).strip().lower() == "all" else layers[:1]


@dataclass(frozen=True)
class Resolved:
    """A View checked against a model and a prompt, resolved once: which tokens, heads and layers are
    shown, for every renderer (the walkthrough, the page) and for the line estimate."""

    view: View
    token: int | None  # the position to show step by step, or None for every prompt token
    layers: list  # the layers shown token by token
    heads: list  # --head's heads (all of them for 'all')
    head_chosen: bool  # --head named one head (not 'all')
    tokens: list  # the positions shown token by token (`shown_tokens`)
    shown_heads: list  # the heads shown (`shown_heads`)
    heatmaps: list  # the layers with an attention heatmap (`heatmap_layers`)
    config: object  # the model's Config
    n_prompt: int  # prompt tokens
    n_all: int  # positions that have (or can have) a pass of their own
    width: int = 100  # columns
    meta: dict = field(default_factory=dict)  # the model's or the trace's meta: what the header says
    before: int = 0  # lines printed ahead of the walkthrough (a scenario's title and notes)
    stated: int = 0  # stated values to check, while `view.checks` does not hold them yet

    def with_checks(self, checks) -> "Resolved":
        """The same view with a scenario's stated values to place beside their steps."""
        return dataclasses.replace(self, view=dataclasses.replace(self.view, checks=tuple(checks)))

    def for_run(self, gen, width: int | None = None) -> "Resolved":
        """The view for the recorded run `gen`: a generation that stopped early has fewer positions
        than `resolve` allowed (a --token among them is an error now)."""
        n_all = len(gen.steps[-1].tokens)
        if n_all != self.n_all:
            parse_token(self.view.token, self.n_prompt, n_all)
        return dataclasses.replace(self, n_all=n_all, width=self.width if width is None else width, meta=dict(gen.meta))

    def estimated_lines(self) -> int:
        """About how many lines the walkthrough prints (to refuse one of minutes and megabytes before
        anything runs), from the shown tokens, heads and layers and the model's sizes."""
        from .estimate import estimated_lines

        return estimated_lines(self)

    def check_lines(self, lines: int, about: bool = True) -> None:
        """A TracerError when `lines` (estimated, or counted) exceed --max-lines."""
        if self.view.max_lines and lines > self.view.max_lines:
            raise TracerError(
                f"this view would print {'about ' if about else ''}{lines:,} lines (--max-lines {self.view.max_lines:,}); "
                f"show a part: --section ({', '.join(sections.names())}), one token (--token), one layer (--layer N), or --brief; "
                f"--max-lines 0 prints it all")

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
