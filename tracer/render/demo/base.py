"""What one demo shows: the recorded run (`Demo`), a screen (`Step`), a page of the walk (`Page`),
and the small table helpers the screens share. Numbers go through `tracer.render.fmt`, like every
other renderer's."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

from rich.console import RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ...tokenizers.tokens import label, named, show_token
from .. import fmt
from ..text import folded

MAX_WIDTH = 100  # columns: legible on a projector


MARK = "▶"  # marks the token being followed, so it never depends on color alone


FOCUS_STYLES = ["bold reverse"]  # the current style of the followed token's row (the deck swaps it)


DECK_FOCUS = "bold #000000 on #ffe27a"  # reverse video has no colors to swap in HTML: a strong yellow


TOP = 6  # rows of candidate tables
WHO_CHARS = 10  # a token's text beside its letter, at most


# --------------------------------------------------------------------------- what one demo shows


@dataclass
class Demo:
    """One recorded run and how to name its parts."""

    gen: object  # tracer.run.trace.Generation
    tokenizer: object
    title: str = ""
    checks: list = field(default_factory=list)  # tracer.run.checks.Check, shown beside their steps
    notes: list = field(default_factory=list)  # a scenario's [[note]]s ({"text", "label", "section"}), beside their step
    precision: int = 3
    layer: int = 0  # the layer shown token by token
    head: int = 0  # the head shown in the single-head steps
    rows: int = 16  # rows a long table may show (a small terminal shows fewer: `fit_pages`)

    def __post_init__(self):
        self.trace = self.gen.steps[0]
        self.cfg = self.trace.config
        self.n = len(self.trace.tokens)  # prompt length
        self.focus = 1 if self.n > 1 else 0  # the article follows B through the first layer
        self.last = self.n - 1  # the token that predicts the next one
        self.settings = self.gen.settings  # a GenerationSettings (a single pass: greedy, no new token)
        self.title = self.title or str(self.gen.meta.get("model") or "tracer")
        self._follow_a_softmax_layer()

    def _follow_a_softmax_layer(self) -> None:
        """A hybrid whose shown layer scores no keys (linear attention, Qwen3.5's layer 0): the screens of
        Q, K, V, the scores and the heads follow its first softmax layer, and `state_layer` is the first
        layer that keeps a state (the state screen's); None where no layer does."""
        cfg = self.cfg
        scored = [l for l in range(cfg.n_layers) if cfg.attention_of(l).records(cfg, "hook_pattern")]
        if scored and self.layer not in scored:
            self.layer = scored[0]
        self.state_layer = next((l for l in range(cfg.n_layers) if cfg.attention_of(l).records(cfg, "hook_state")), None)

    def layer_name(self) -> str:
        """'first layer', or 'layer 1' where the screens follow a later layer (a hybrid's first softmax layer)."""
        return "first layer" if self.layer == 0 else f"layer {self.layer}"

    # names -----------------------------------------------------------------------------------
    def text(self, pos: int, step: int = -1) -> str:
        tokens = self.gen.steps[step].tokens
        return show_token(self.tokenizer.token_str(int(tokens[pos])))

    def who(self, pos: int, step: int = -1) -> str:
        """The article's letter, plus the token's text when that says more (B ␣are)."""
        t = self.text(pos, step)
        if len(t) > WHO_CHARS:  # a long special token (<|begin_of_text|>) would squeeze the numbers out
            t = t[: WHO_CHARS - 1] + "…"
        return label(pos) if t == label(pos) else f"{label(pos)} {t}"

    def token_name(self, token_id: int) -> str:
        return show_token(self.tokenizer.token_str(int(token_id)))

    def new_name(self, pos: int, token_id: int) -> str:
        """A generated token: its letter, and its text when that differs (G = ␣G; ↵ at H, never H = ↵)."""
        t = self.token_name(token_id)
        return label(pos) if t == label(pos) else named(pos, t)

    def positions(self) -> list[int | None]:
        """The prompt's positions a per-token table lists (`folded`), the followed token among the first ones."""
        return folded(self.n, self.rows, self.focus + 1)

    def letters(self, n: int) -> str:
        """The first n positions as the article writes a sequence: ABCDEF (A…T when long)."""
        return self.span(0, n)

    def span(self, a: int, b: int) -> str:
        """Positions a … b-1 as letters: CDE, or C…T when long."""
        return fmt.sequence(a, b, limit=12)

    # numbers (tracer.render.fmt, at this demo's precision) ---------------------------------------
    def num(self, x) -> str:
        return fmt.num(x, self.precision)

    def vector(self, v, style: str = "") -> "Vec":
        """A vector for `pairs`, shown at the width the screen allows."""
        return Vec(v, self.precision, style)

    def vec(self, v, dims: int = 8, lead: int = 4) -> str:
        """[ 0.900, -0.100, …] aligned for stacking; long vectors as the first `lead` … last 2 numbers."""
        return fmt.column_vec(v, self.precision, dims, lead)

    def prob(self, p) -> str:
        return fmt.prob(p, self.precision)

    def block(self, name: str, layer: int | None = None):
        layer = self.layer if layer is None else layer
        return self.trace[f"blocks.{layer}.{name}"]

    def ordinal_head(self, head: int) -> str:
        return f"head {head} of {self.cfg.n_heads}"

    @property
    def kv_head(self) -> int:
        """The key/value head the shown head reads (itself, without grouped-query attention)."""
        return self.head // (self.cfg.n_heads // self.cfg.kv_heads)

    @property
    def rotary(self) -> bool:
        return self.cfg.position_kind.rotary

    def query_key(self):
        """The shown head's Q [pos, d_head] and K [pos, d_head] as they meet in Q·K: rotated by
        position under RoPE; and the mark their names carry (↻ for rotated)."""
        pre = "attn.hook_rot_" if self.rotary else "attn.hook_"
        return self.block(pre + "q")[:, self.head], self.block(pre + "k")[:, self.kv_head], "↻" if self.rotary else ""


@dataclass
class Step:
    """One screen: a heading, a few sentences, the numbers, and an optional question."""

    name: str
    narration: str
    body: RenderableType
    question: RenderableType | None = None  # shown first with --quiz: the inputs, not the answer
    ask: str = ""  # what to predict
    checks: list = field(default_factory=list)
    remake: object = field(default=None, repr=False, compare=False)  # the screen's maker (its @screen function), to rebuild it with fewer rows


@dataclass
class Page:
    step: int  # 0-based index into the steps
    quiz: bool  # the question page of a step (answer hidden)
    blocks: tuple | None = None  # (first, end) of the step's blocks on this page; None: all of them
    part: int = 0  # which page of a step too tall for one screen (0-based)
    parts: int = 1  # how many pages the step takes
    tight: bool = False  # the step's blank spacer lines left out, so that it fits one screen
    summed: bool = False  # its stated values, all holding, said in one line (so that it fits one screen)
    compact: bool = False  # each ✗ stated value in one line where the width allows (so that it fits one screen)


# --------------------------------------------------------------------------- small table helpers


def table(*columns: str, title: str | None = None, right: tuple = ()) -> Table:
    t = Table(title=title, title_justify="left", title_style="bold", header_style="bold", pad_edge=False,
              show_edge=False, box=None, padding=(0, 1))
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left", no_wrap=True)
    return t


def mark(is_focus: bool) -> str:
    return MARK if is_focus else " "


def row_style(is_focus: bool) -> str | None:
    return FOCUS_STYLES[-1] if is_focus else None


@contextmanager
def focus_style(style: str):
    """Build screens with another highlight (the HTML deck) and put the old one back."""
    FOCUS_STYLES.append(style)
    try:
        yield
    finally:
        FOCUS_STYLES.pop()


@dataclass(frozen=True)
class Vec:
    """A vector a line shows at the width the screen allows (`Demo.vector`): its first `lead` numbers, …, its
    last two."""

    values: object  # [n]
    precision: int
    style: str = ""

    def text(self, lead: int) -> Text:
        return Text(fmt.column_vec(self.values, self.precision, 8, lead), style=self.style)


def pairs(rows: list[tuple]) -> Table | FirstThatFits:
    """Label → value lines, aligned, each value on one line (vectors are never split); where a value is
    a `Vec`, the lines show fewer of each vector's numbers on a narrow screen rather than cut one."""

    def laid_out(lead: int) -> Table:
        t = Table.grid(padding=(0, 2))
        t.add_column(style="bold", no_wrap=True)
        t.add_column(no_wrap=True)
        for label_, value in rows:
            t.add_row(label_, value.text(lead) if isinstance(value, Vec) else value)
        return t

    if not any(isinstance(value, Vec) for _, value in rows):
        return laid_out(4)
    return FirstThatFits(*(laid_out(lead) for lead in (4, 3, 2)))


def sentence(*parts: tuple[str, str] | str) -> Text:
    return Text.assemble(*parts)


class FirstThatFits:
    """The first of `choices` (widest first) whose width fits the width rich gives it, else the last:
    a table that drops a number from each vector rather than cut a score short on an 80-column screen."""

    def __init__(self, *choices: RenderableType):
        self.choices = choices

    def __rich_console__(self, console, options):
        wide = options.update(max_width=1 << 16)  # measured unclamped: how wide each would be
        yield next((c for c in self.choices[:-1] if Measurement.get(console, wide, c).maximum <= options.max_width),
                   self.choices[-1])
