"""Classroom mode (`tracer demo`): one forward pass and the generation loop, one step per screen.

The steps follow the seed article's order — tokens, embedding lookup, position vector, Q/K/V,
scores and the causal mask, softmax, the weighted sum, multi-head, the other layers, the
unembedding, softmax and temperature, the chosen token, append and repeat, and the KV cache —
each with a few sentences of narration written for this project (the Query / Key / Value
analogy of a search term, an index and the content is the article's) and the numbers of one
recorded run (`tracer.trace.Generation`). Screens only read recorded arrays; they never run the
model again. The small arithmetic a class does by hand (e^score, a what-if temperature) is done
on recorded values and labelled as such.

Three ways to show the same screens:
  - interactive, when stdin and stdout are terminals: Enter/space/→ next, b/← back, a number then
    Enter jumps, q quits; `--auto SECONDS` advances by itself. Keys are read raw (termios cbreak)
    and the terminal is restored on exit, on errors and on Ctrl-C;
  - printed in order without waiting, otherwise (pipes, CI, `< /dev/null`): scriptable;
  - `--export deck.html`: one self-contained HTML page with a section per screen (inline styles,
    system fonts, nothing fetched from the network), written instead of showing the screens.
`--quiz` adds a "predict, then press Enter" screen before values the class can work out.
"""

from __future__ import annotations

import fnmatch
import html
import io
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from .errors import TracerError
from .generate import tempered_softmax
from .tokens import label, show_token

MAX_WIDTH = 100  # columns: legible on a projector
MARK = "▶"  # marks the token being followed, so it never depends on color alone
FOCUS_STYLES = ["bold reverse"]  # the current style of the followed token's row (the deck swaps it)
DECK_FOCUS = "bold #000000 on #ffe27a"  # reverse video has no colors to swap in HTML: a strong yellow
ARTICLE_PROMPT = ("You are a business consultant, please analyze the impact of rising oil prices "
                  "on the automotive industry.")
PROMPT_NEW_TOKENS = 3  # tokens generated for `--prompt`: enough to see G and H appended
TOP = 6  # rows of candidate tables


# --------------------------------------------------------------------------- what one demo shows


@dataclass
class Demo:
    """One recorded run and how to name its parts."""

    gen: object  # tracer.trace.Generation
    tokenizer: object
    title: str = ""
    checks: list = field(default_factory=list)  # tracer.checks.Check, shown beside their steps
    precision: int = 3
    layer: int = 0  # the layer shown token by token
    head: int = 0  # the head shown in the single-head steps

    def __post_init__(self):
        self.trace = self.gen.steps[0]
        self.cfg = self.trace.config
        self.n = len(self.trace.tokens)  # prompt length
        self.focus = 1 if self.n > 1 else 0  # the article follows B through the first layer
        self.last = self.n - 1  # the token that predicts the next one
        self.settings = dict(self.gen.meta.get("settings") or {})
        self.title = self.title or str(self.gen.meta.get("model") or "tracer")

    # names -----------------------------------------------------------------------------------
    def text(self, pos: int, step: int = -1) -> str:
        tokens = self.gen.steps[step].tokens
        return show_token(self.tokenizer.token_str(int(tokens[pos])))

    def who(self, pos: int, step: int = -1) -> str:
        """The article's letter, plus the token's text when that says more (B ␣are)."""
        t = self.text(pos, step)
        return label(pos) if t == label(pos) else f"{label(pos)} {t}"

    def token_name(self, token_id: int) -> str:
        return show_token(self.tokenizer.token_str(int(token_id)))

    def new_name(self, pos: int, token_id: int) -> str:
        """A generated token: its letter, and its text when that differs (G = ␣the)."""
        t = self.token_name(token_id)
        return label(pos) if t == label(pos) else f"{label(pos)} = {t}"

    def letters(self, n: int) -> str:
        """The first n positions as the article writes a sequence: ABCDEF (A…T when long)."""
        return self.span(0, n)

    def span(self, a: int, b: int) -> str:
        """Positions a … b-1 as letters: CDE, or C…T when long."""
        if b - a <= 12:
            return "".join(label(i) for i in range(a, b))
        return f"{label(a)}…{label(b - 1)}"

    # numbers ---------------------------------------------------------------------------------
    def num(self, x, width: int = 0) -> str:
        x = float(x)
        if np.isneginf(x):
            s = "−∞"
        elif not np.isfinite(x):
            s = str(x)
        else:
            s = f"{x:.{self.precision}f}"
            if float(s) == 0:
                s = s.lstrip("-")
        return s.rjust(width)

    def vec(self, v, dims: int = 8) -> str:
        """[ 0.900, -0.100, …] aligned for stacking; long vectors as the first 4 … last 2 numbers."""
        v = np.asarray(v, dtype=float).reshape(-1)
        w = max(self.precision + 3, max((len(self.num(x)) for x in v), default=1))
        sep = ", " if min(len(v), dims) <= 6 else " "
        if len(v) <= dims:
            return "[" + sep.join(self.num(x, w) for x in v) + "]"
        head = " ".join(self.num(x, w) for x in v[:4])
        tail = " ".join(self.num(x, w) for x in v[-2:])
        return f"[{head} … {tail}]"

    def prob(self, p) -> str:
        """Probabilities: small ones keep their digits (2.6e-05), instead of showing 0.000."""
        p = float(p)
        return f"{p:.{self.precision}f}" if p == 0 or p >= 10 ** -self.precision else f"{p:.1e}"

    def block(self, name: str, layer: int | None = None) -> np.ndarray:
        layer = self.layer if layer is None else layer
        return self.trace[f"blocks.{layer}.{name}"]

    def ordinal_head(self, head: int) -> str:
        return f"head {head + 1} of {self.cfg.n_heads}"


@dataclass
class Step:
    """One screen: a heading, a few sentences, the numbers, and an optional question."""

    name: str
    narration: str
    body: RenderableType
    question: RenderableType | None = None  # shown first with --quiz: the inputs, not the answer
    ask: str = ""  # what to predict
    checks: list = field(default_factory=list)


@dataclass
class Page:
    step: int  # 0-based index into the steps
    quiz: bool  # the question page of a step (answer hidden)


# --------------------------------------------------------------------------- small table helpers


def _table(*columns: str, title: str | None = None, right: tuple = ()) -> Table:
    t = Table(title=title, title_justify="left", title_style="bold", header_style="bold", pad_edge=False,
              show_edge=False, box=None, padding=(0, 1))
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left", no_wrap=True)
    return t


def _mark(is_focus: bool) -> str:
    return MARK if is_focus else " "


def _row_style(is_focus: bool) -> str | None:
    return FOCUS_STYLES[-1] if is_focus else None


@contextmanager
def focus_style(style: str):
    """Build screens with another highlight (the HTML deck) and put the old one back."""
    FOCUS_STYLES.append(style)
    try:
        yield
    finally:
        FOCUS_STYLES.pop()


def _pairs(rows: list[tuple]) -> Table:
    """Label → value lines, aligned, each value on one line (vectors are never split)."""
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold", no_wrap=True)
    t.add_column(no_wrap=True)
    for r in rows:
        t.add_row(*r)
    return t


def _line(*parts: tuple[str, str] | str) -> Text:
    return Text.assemble(*parts)


# --------------------------------------------------------------------------- the steps, in order


def step_tokens(d: Demo) -> Step:
    tok = d.tokenizer
    t = _table("", "token", "text", "id", "position", right=("id", "position"))
    for pos in range(d.n):
        t.add_row(_mark(pos == d.focus), label(pos), d.text(pos, 0), str(int(d.trace.tokens[pos])), str(pos),
                  style=_row_style(pos == d.focus))
    cfg = d.cfg
    about = _line(("model: ", "bold"), f"{d.trace.meta.get('model', '?')} — {cfg.n_layers} layers, "
                  f"{cfg.d_model} numbers per token (d_model), {cfg.n_heads} head{'s' if cfg.n_heads > 1 else ''}, "
                  f"vocabulary of {tok.n_vocab:,} tokens ({tok.name})")
    parts = [t, Text(), about]
    if not d.trace.meta.get("trained"):
        parts.append(Text("The weights are not trained (seeded or set by hand): the arithmetic is real, but "
                          "what it predicts was not learned from text.", style="italic"))
    return Step(
        "Tokens",
        f"The model never sees words, only numbers. The prompt is cut into tokens — pieces from a fixed "
        f"vocabulary of {tok.n_vocab:,} — and each token becomes its id. Like the article, we name the tokens "
        f"A, B, C, … by their place. We will follow {label(d.focus)} ({MARK}) through the first layer.",
        Group(*parts),
    )


def step_embedding(d: Demo) -> Step:
    E = d.trace["hook_embed"]  # [pos, d_model]
    t = _table("", "token", "id", f"row of W_E  (the token's {d.cfg.d_model} numbers)", right=("id",))
    for pos in range(d.n):
        t.add_row(_mark(pos == d.focus), d.who(pos, 0), str(int(d.trace.tokens[pos])), d.vec(E[pos]),
                  style=_row_style(pos == d.focus))
    shape = _line(("W_E", "bold"), f"  [{d.cfg.d_vocab:,} tokens × {d.cfg.d_model} numbers]: one row per token "
                  f"of the vocabulary")
    return Step(
        "Embedding lookup",
        f"Each token id picks one row of the embedding matrix W_E. That row is the token's starting vector: "
        f"{d.cfg.d_model} numbers the model learned in training (the article imagines them as features like "
        f"color or 'is it alive'). Nothing is computed yet — it is a table lookup.",
        Group(shape, Text(), t),
    )


def step_position(d: Demo) -> Step:
    cfg = d.cfg
    x = d.block("hook_resid_pre", 0)  # [pos, d_model] the input to the first layer
    f = d.focus
    how = {
        "explicit": "Here they are given by hand, as the article's P1 = [0.1, 0.1, …].",
        "learned": "GPT-2 learns one position vector per place (the matrix W_pos).",
        "sinusoidal": "Here they are made of sines and cosines of the position (the original Transformer's recipe).",
    }.get(cfg.positional, "")
    if cfg.positional == "none":
        body = Group(Text("This model adds no position vector: the first layer's input is the embedding itself."))
        return Step("Position vector", "Some models add no position vector and let attention work order out "
                    "from the mask alone. This one is such a model.", body)
    P = d.trace["hook_pos_embed"]  # [pos, d_model]
    E = d.trace["hook_embed"]  # [pos, d_model]
    eq = _pairs([
        (f"  E_{label(f)}", d.vec(E[f])),
        (f"+ P{f + 1}", d.vec(P[f])),
        (f"= x_{label(f)}", Text(d.vec(x[f]), style="bold")),
    ])
    where = Text(f"E_{label(f)}: row {int(d.trace.tokens[f])} of W_E;  P{f + 1}: the position vector of place {f + 1} "
                 f"(row {f} of W_pos);  x_{label(f)}: the first layer's input")
    t = _table("", "token", "x = E + P  (every token)")
    for pos in range(d.n):
        t.add_row(_mark(pos == f), d.who(pos, 0), d.vec(x[pos]), style=_row_style(pos == f))
    return Step(
        "Position vector",
        f"The same word at a different place must look different, so each place adds its own position "
        f"vector: P1 for the first place, P2 for the second, and so on. {how} Token vector plus position "
        f"vector is what enters the first layer.",
        Group(eq, Text(), where, Text(), t),
    )


def step_qkv(d: Demo) -> Step:
    cfg, f, h = d.cfg, d.focus, d.head
    q = d.block("attn.hook_q")[:, h]  # [pos, d_head]
    k = d.block("attn.hook_k")[:, h]  # [pos, d_head]
    v = d.block("attn.hook_v")[:, h]  # [pos, d_head]
    where = _line(("first layer, ", "bold"), f"{d.ordinal_head(h)}: W_Q, W_K, W_V are each "
                  f"[{cfg.d_model} × {cfg.d_head}]")
    qline = _line((f"{label(f)}'s query  Q = ", "bold"), d.vec(q[f]))
    t = Table.grid(padding=(0, 2))
    t.add_column(no_wrap=True)
    t.add_column(no_wrap=True, style="bold")
    t.add_column(no_wrap=True)
    t.add_row("", Text("keys", style="bold"), Text("what each token offers to be found by", style="italic"))
    for pos in range(f + 1):
        t.add_row(_mark(pos == f), f"{label(pos)}_K", d.vec(k[pos]), style=_row_style(pos == f))
    t.add_row("", Text("values", style="bold"), Text("what each token hands over", style="italic"))
    for pos in range(f + 1):
        t.add_row(_mark(pos == f), f"{label(pos)}_V", d.vec(v[pos]), style=_row_style(pos == f))
    parts = [where, Text(), qline, Text(), t]
    if f + 1 < d.n:
        hidden = f"{label(f + 1)}–{label(d.n - 1)}" if f + 2 < d.n else label(f + 1)
        parts += [Text(), Text(f"{hidden}: later tokens. They have keys and values too, but {label(f)} may not "
                               f"look ahead (the causal mask, next step).")]
    ln = " (GPT-2 first layer-normalizes x: it rescales each token's numbers to mean 0 and spread 1.)" \
        if cfg.layer_norm else ""
    return Step(
        "Query, Key and Value",
        "Three weight matrices turn every token's vector into three new ones. The article borrows the roles "
        "from database search: the Query is like a search term (what this token is looking for), the Key is "
        "like an index entry (what it can be found by), and the Value is the content it hands over when "
        f"found.{ln}",
        Group(*parts),
    )


def _scores_table(d: Demo, hide: bool) -> Table:
    cfg, f, h = d.cfg, d.focus, d.head
    dots = d.block("attn.hook_dots")[h, f]  # [key_pos] raw Q·K
    scores = d.block("attn.hook_attn_scores")[h, f]  # [key_pos] scaled and masked
    k = d.block("attn.hook_k")[:, h]  # [pos, d_head]
    cols = ["", "key", "K"] + ([] if hide else ["Q·K"])
    if cfg.scale_scores and not hide:
        cols.append(f"÷ √{cfg.d_head}")
    t = _table(*cols, right=("Q·K", f"÷ √{cfg.d_head}"))
    hidden = list(range(f + 1, d.n))
    rows = list(range(f + 1)) + (hidden if len(hidden) <= 4 else hidden[:2] + [None] + hidden[-1:])
    for pos in rows:
        if pos is None:
            t.add_row("", "⋮", *([""] * (len(cols) - 2)), style="dim")
            continue
        visible = pos <= f
        row = [_mark(pos == f), d.who(pos, 0), d.vec(k[pos]) if visible else "hidden by the mask"]
        if not hide:
            row.append(d.num(dots[pos]) if visible else "masked")
            if cfg.scale_scores:
                row.append(d.num(scores[pos]))
        t.add_row(*row, style=_row_style(pos == f) if visible else "dim")
    return t


MASK_ROWS = 10  # the mask grid shows the first tokens only: its pattern is the same for any length


def _mask_grid(d: Demo) -> Table:
    n = min(d.n, MASK_ROWS)
    t = Table(box=None, padding=(0, 0), pad_edge=False, show_edge=False, header_style="bold")
    t.add_column("")
    t.add_column("query", no_wrap=True)
    for j in range(n):
        t.add_column(label(j).rjust(2), justify="right")
    for i in range(n):
        cells = [("●" if j <= i else "·").rjust(2) for j in range(n)]
        t.add_row(_mark(i == d.focus), label(i).rjust(3) + " ", *cells, style=_row_style(i == d.focus))
    return t


def step_scores(d: Demo) -> Step:
    cfg, f, h = d.cfg, d.focus, d.head
    q = d.block("attn.hook_q")[f, h]  # [d_head]
    qline = _line((f"{label(f)}'s query  Q = ", "bold"), d.vec(q))
    scale = (f" Then GPT-2 divides each score by √d_head = √{cfg.d_head} ≈ {np.sqrt(cfg.d_head):.2f}, which keeps "
             "them in a range softmax handles well.") if cfg.scale_scores else \
        " (This model does not scale the scores, as in the article; GPT-2 divides them by √d_head.)"
    narration = (f"{label(f)}'s query is compared with every key it may see: multiply them number by number "
                 "and add up (a dot product). A large score means 'this key matches what I am looking for'. "
                 f"Keys of later tokens are masked: a token may not look ahead, so they get −∞ and will get "
                 f"weight 0.{scale}")
    body = Group(qline, Text(), _scores_table(d, hide=False), Text(),
                 _line(("the causal mask", "bold"), ": ● may look, · hidden (row: the query, column: the key)" +
                       (f"; the first {MASK_ROWS} of {d.n} tokens" if d.n > MASK_ROWS else "")),
                 _mask_grid(d))
    question = Group(qline, Text(), _scores_table(d, hide=True))
    visible = ", ".join(f"Q·{label(j)}_K" for j in range(f + 1))
    return Step("Scores and the mask", narration, body, question,
                ask=f"Work out {visible}: multiply Q and K number by number, then add up.")


def _softmax_table(d: Demo, hide: bool) -> Table:
    f, h = d.focus, d.head
    scores = d.block("attn.hook_attn_scores")[h, f]  # [key_pos]
    pattern = d.block("attn.hook_pattern")[h, f]  # [key_pos]
    visible = scores[: f + 1]  # [key_pos ≤ query]
    e = np.exp(visible - visible.max())  # [key_pos ≤ query] the by-hand step, on recorded scores
    cols = ["", "key", "score"] + ([] if hide else ["e^(score − max)", "weight"])
    t = _table(*cols, right=("score", "e^(score − max)", "weight"))
    for pos in range(min(d.n, f + 2)):
        vis = pos <= f
        row = [_mark(pos == f), d.who(pos, 0), d.num(scores[pos])]
        if not hide:
            row += [d.num(e[pos]) if vis else "0", d.num(pattern[pos])]
        t.add_row(*row, style=_row_style(pos == f) if vis else "dim")
    if f + 2 < d.n:
        t.add_row("", f"{label(f + 2)}…{label(d.n - 1)}" if f + 2 < d.n - 1 else label(f + 2), "−∞",
                  *([] if hide else ["0", d.num(0)]), style="dim")
    if not hide:
        t.add_row("", "sum", "", d.num(e.sum()), d.num(pattern.sum()), style="bold")
    return t


def step_softmax(d: Demo) -> Step:
    f = d.focus
    scores = d.block("attn.hook_attn_scores")[d.head, f, : f + 1]
    narration = ("Softmax turns scores into weights that are positive and add up to 1: raise e to each score "
                 "(subtracting the largest first changes nothing but keeps the numbers small), then divide by "
                 "the total. Masked keys get e^−∞ = 0. Check the article by hand: it rounds softmax([0.6, 0.8]) "
                 "to [0.4, 0.6], but exactly it is [0.450, 0.550].")
    body = Group(_softmax_table(d, hide=False))
    question = Group(_softmax_table(d, hide=True))
    return Step("Softmax: scores become weights", narration, body, question,
                ask=f"Predict the weights softmax({', '.join(d.num(s) for s in scores)}) — they must add up to 1.")


def step_weighted_sum(d: Demo) -> Step:
    f, h = d.focus, d.head
    w = d.block("attn.hook_pattern")[h, f]  # [key_pos]
    v = d.block("attn.hook_v")[:, h]  # [pos, d_head]
    z = d.block("attn.hook_z")[f, h]  # [d_head]
    seen = list(range(f + 1))
    shown = seen if len(seen) <= 6 else seen[:3] + seen[-3:]
    terms = [f"{d.num(w[j])}×{label(j)}_V" for j in shown]
    formula = " + ".join(terms) if len(seen) <= 6 else " + ".join(terms[:3]) + " + … + " + " + ".join(terms[3:])
    t = _table("", "key", "weight", "× V", right=("weight",))
    for j in shown:
        t.add_row(_mark(j == f), d.who(j, 0), d.num(w[j]), d.vec(v[j]), style=_row_style(j == f))
    t.add_row("", "sum", d.num(w[: f + 1].sum()), Text(d.vec(z), style="bold"))
    body = Group(
        _line((f"{label(f)}'s new vector = ", "bold"), formula),
        Text(),
        t,
        Text(),
        _pairs([(f"= {label(f)}'s new vector", d.vec(z))]),
    )
    return Step(
        "Weighted sum of values",
        f"{label(f)}'s new vector is a blend of the values it can see, mixed in the proportions softmax chose — "
        f"the article's 0.4×A_V + 0.6×B_V, here with the real weights. A key that matched well hands over more "
        f"of its content.",
        body,
    )


def step_multihead(d: Demo) -> Step:
    cfg, f, l = d.cfg, d.focus, d.layer
    H = cfg.n_heads
    pattern = d.block("attn.hook_pattern")[:, f]  # [head, key_pos]
    z = d.block("attn.hook_z")[f]  # [head, d_head]
    t = _table("head", "looks most at", "its output z", right=("head",))
    heads = list(range(H)) if H <= 8 else list(range(4)) + list(range(H - 2, H))
    for hh in heads:
        j = int(np.argmax(pattern[hh]))
        t.add_row(str(hh + 1), f"{label(j)} ({d.num(pattern[hh, j])})", d.vec(z[hh]))
        if H > 8 and hh == 3:
            t.add_row("⋮", "", "")
    concat = z.reshape(-1)  # [head * d_head]
    out = d.block("hook_attn_out")[f]  # [d_model]
    rows = [
        (f"concat {H}×{cfg.d_head}", d.vec(concat)),
        (f"× W_O [{H * cfg.d_head}×{cfg.d_model}]", d.vec(out)),
    ]
    if cfg.residual:
        rows.append(("+ x (residual)", d.vec(d.block("hook_resid_mid" if cfg.mlp else "hook_resid_post")[f])))
    if cfg.mlp:
        rows.append((f"+ MLP {cfg.d_model}→{cfg.d_mlp}→{cfg.d_model}", d.vec(d.block("hook_resid_post")[f])))
    rows.append((f"out of layer {l + 1}", Text(d.vec(d.block("hook_resid_post")[f]), style="bold")))
    eq = _pairs(rows)
    if H == 1:
        multi = ("This model has a single head, so the 'concatenation' is just that head's output; W_O still "
                 "maps it back to the model's width. ")
    else:
        multi = (f"A layer runs {H} heads side by side, each with its own W_Q, W_K and W_V, so each can look "
                 "for something different (the article: one for grammar, one for meaning). Their outputs are "
                 "laid end to end and one matrix, W_O, merges them. ")
    rest = []
    if cfg.residual:
        rest.append("the input is added back (the residual connection)")
    if cfg.mlp:
        rest.append("a small two-layer network (the MLP) works on each token alone")
    tail = ("Then " + " and ".join(rest) + ".") if rest else \
        "Like the article's model, this one has no residual connection and no MLP."
    return Step("Multi-head: concat and W_O", multi + tail, Group(_line((f"{label(f)}, first layer", "bold")), Text(), t, Text(), eq))


def _layer_rows(L: int) -> list[int | None]:
    """Every layer when they fit on a projected screen; else the first 8, ⋮, the last 7."""
    if L <= 16:
        return list(range(L))
    return list(range(8)) + [None] + list(range(L - 7, L))


def step_layers(d: Demo) -> Step:
    cfg, last = d.cfg, d.last
    H = cfg.n_heads
    heads = list(range(min(H, 4)))
    cols = ["layer", "in", "out"] + [f"head {h + 1}" for h in heads]
    t = _table(*cols, right=("layer", "in", "out"))
    for l in _layer_rows(cfg.n_layers):
        if l is None:
            t.add_row("⋮", *([""] * (len(cols) - 1)))
            continue
        x_in = d.trace[f"blocks.{l}.hook_resid_pre"][last]  # [d_model]
        x_out = d.trace[f"blocks.{l}.hook_resid_post"][last]  # [d_model]
        p = d.trace[f"blocks.{l}.attn.hook_pattern"][:, last]  # [head, key_pos]
        looks = [f"{label(int(np.argmax(p[h])))} {d.num(p[h].max(), 0)}" for h in heads]
        t.add_row(str(l + 1), f"{np.linalg.norm(x_in):.2f}", f"{np.linalg.norm(x_out):.2f}", *looks)
    more = f" (first {len(heads)} of {H} heads)" if H > len(heads) else ""
    final = d.trace[f"blocks.{cfg.n_layers - 1}.hook_resid_post"][last] if cfg.n_layers else d.trace["hook_embed"][last]
    body = Group(
        _line((f"{label(last)}, the last token, in every layer{more}", "bold")),
        Text("in, out: the length of its vector; head n: the key that head weights most, and the weight"),
        Text(),
        t,
        Text(),
        _pairs([(f"{label(last)} after layer {cfg.n_layers}", d.vec(final))]),
    )
    return Step(
        "The other layers",
        f"Each layer's output is the next layer's input, and the same recipe runs again with new weights "
        f"in each of the {cfg.n_layers} layers. Every pass mixes more context into every token. From here on we follow "
        f"{label(last)}, the last token: its final vector is the one that predicts what comes next.",
        body,
    )


def _top(values: np.ndarray, k: int) -> list[int]:
    return [int(i) for i in np.argsort(-values, kind="stable")[:k]]


def step_unembed(d: Demo) -> Step:
    cfg, last = d.cfg, d.last
    x = d.trace["unembed.hook_in"][last]  # [d_model]
    logits = d.trace["logits"]  # [pos, d_vocab]
    t = _table("rank", "token", "id", "logit", right=("rank", "id", "logit"))
    for r, i in enumerate(_top(logits[last], TOP)):
        t.add_row(str(r + 1), d.token_name(i), str(i), d.num(logits[last, i]))
    every = _table("", "position", "its top next token", right=())
    rows = list(range(d.n)) if d.n <= 6 else [0, 1, None] + list(range(d.n - 3, d.n))
    for p in rows:
        if p is None:
            every.add_row("", "⋮", "")
            continue
        best = int(np.argmax(logits[p]))
        every.add_row(_mark(p == last), d.who(p, 0),
                      d.token_name(best) + ("   ← generation uses this row" if p == last else ""),
                      style=_row_style(p == last))
    ln = " (GPT-2 layer-normalizes it first.)" if cfg.layer_norm else ""
    tied = " GPT-2 reuses the embedding matrix W_E here, turned on its side." if cfg.tied_unembed else ""
    body = Group(
        _pairs([(f"{label(last)}'s final vector", d.vec(x)),
                ("× W_U", f"[{cfg.d_model} × {cfg.d_vocab:,}]  → one logit per vocabulary token")]),
        Text(),
        t,
        Text(),
        every,
    )
    return Step(
        "Unembedding: one score per token",
        f"One more matrix, W_U, turns {label(last)}'s {cfg.d_model} numbers into {cfg.d_vocab:,} scores "
        f"(logits), one for every token of the vocabulary.{ln}{tied} Every position gets such a row — that is "
        "how training checks all positions at once — but generation only needs the last one.",
        body,
    )


def step_temperature(d: Demo) -> Step:
    T = float(d.settings.get("temperature", 0.0))
    logits = d.trace["logits"][d.last]  # [d_vocab]
    probs = d.trace["sample.probs"]  # [d_vocab] recorded
    scaled = d.trace["sample.scaled"]  # [d_vocab] recorded
    what_if = {t: tempered_softmax(logits, t) for t in (0.5, 2.0)}  # arithmetic on recorded logits
    t = _table("token", "logit", "÷ T", "probability", "if T = 0.5", "if T = 2",
               right=("logit", "÷ T", "probability", "if T = 0.5", "if T = 2"))
    for i in _top(probs, TOP):
        t.add_row(d.token_name(i), d.num(logits[i]), d.num(scaled[i]), d.prob(probs[i]),
                  d.prob(what_if[0.5][i]), d.prob(what_if[2.0][i]))
    top = _top(probs, TOP)
    if len(probs) > TOP:
        others = [float(1.0 - p[top].sum()) for p in (probs, what_if[0.5], what_if[2.0])]
        t.add_row(f"({len(probs) - TOP:,} others)", "", "", *(d.prob(o) for o in others), style="dim")
    settings = f"temperature {T:g}" + (" (greedy)" if T == 0 else "")
    if d.settings.get("top_k") is not None:
        settings += f", top-k {d.settings['top_k']}"
    if d.settings.get("top_p") is not None:
        settings += f", top-p {d.settings['top_p']}"
    how = ("the probabilities below use T = 1; greedy simply takes the top one" if T == 0 else
           f"the logits are divided by {T:g} before softmax")
    body = Group(_line(("this run: ", "bold"), settings, f" — {how}"), Text(), t,
                 Text("The 'if T =' columns redo only softmax on the same recorded logits.", style="italic"))
    return Step(
        "Softmax and temperature",
        "Softmax turns the logits into probabilities over the whole vocabulary. Temperature divides the logits "
        "first: below 1 it sharpens (the favourite gets more), above 1 it flattens (surprises get a chance); "
        "temperature 0 means simply take the most likely token. As the article says, temperature acts only "
        "here, at the very end.",
        body,
    )


def _candidates(d: Demo, reveal: bool) -> Group:
    """The tokens the draw chooses among. Greedy: the top few (listed by id on the question page, so
    the answer is not simply the first row). Sampling: the kept tokens' bands, most likely first."""
    s = d.trace
    chosen = int(s["sample.token"])
    greedy = "sample.uniform" not in s
    probs = s["sample.probs"]  # [d_vocab] before any cut
    final = s["sample.final"]  # [d_vocab] after top-k / top-p, renormalised
    if greedy:
        order = _top(probs, TOP)
        if not reveal:
            order = sorted(order)
        t = _table("", "token", "id", "probability", right=("id", "probability"))
        for i in order:
            mark = reveal and i == chosen
            t.add_row(_mark(mark), d.token_name(i), str(i), d.prob(probs[i]), style=_row_style(mark))
        parts = [Text("temperature 0: no random draw — the most likely token wins"), Text(), t]
    else:
        order = [i for i in _top(final, TOP) if final[i] > 0]
        u = float(s["sample.uniform"])
        t = _table("", "token", "kept probability", "band", right=("kept probability",))
        lo = 0.0
        for i in order:
            hi = lo + float(final[i])
            mark = reveal and i == chosen
            t.add_row(_mark(mark), d.token_name(i), d.prob(final[i]), f"{lo:.{d.precision}f} – {hi:.{d.precision}f}",
                      style=_row_style(mark))
            lo = hi
        kept = int((final > 0).sum())
        if kept > len(order):
            t.add_row("", f"({kept - len(order):,} more)", d.prob(1.0 - lo), f"{lo:.{d.precision}f} – 1.000", style="dim")
        parts = [_line(("random draw u = ", "bold"), f"{u:.{d.precision + 1}f}",
                       "  (seeded: the same seed draws the same u on every machine)"), Text(), t]
    if reveal:
        parts += [Text(), _line((f"{label(d.last)} predicts  {MARK} ", "bold"),
                                (d.new_name(d.n, chosen), FOCUS_STYLES[-1]),
                                f"   (id {chosen}, probability {d.prob(probs[chosen])})")]
    return Group(*parts)


def step_chosen(d: Demo) -> Step:
    greedy = "sample.uniform" not in d.trace
    how = ("At temperature 0 the choice is simply the most likely token." if greedy else
           "A seeded random number u between 0 and 1 is drawn. Lay the kept tokens' probabilities end to end "
           "(the bands): the token whose band holds u is chosen, so likely tokens win often, not always.")
    return Step("The chosen token", f"{how} The new token gets the next letter: {label(d.n)}.",
                _candidates(d, reveal=True), _candidates(d, reveal=False),
                ask="Which token is chosen?" + (" Find the largest probability." if greedy else
                                                " Find the band that holds u."))


def step_append(d: Demo) -> Step:
    g = d.gen
    t = _table("pass", "reads", "sequence so far", "→ next", "probability", right=("pass", "probability"))
    for n, s in enumerate(g.steps):
        seen = len(s.tokens)
        tok = int(s["sample.token"])
        appended = n < len(g.generated_ids)
        nxt = d.new_name(seen, tok) if appended else f"({d.token_name(tok)}: not appended)"
        reads = d.letters(seen) if s.start == 0 else f"{d.span(s.start, seen)} (new)"
        t.add_row(str(n + 1), reads, d.letters(seen), nxt, d.prob(s["sample.probs"][tok]))
    stopped = {"end_token": "it produced the end token", "stop_string": "it produced a stop string",
               "max_new_tokens": f"it reached the limit of {d.settings.get('max_new_tokens', len(g.generated_ids))} "
                                 "new tokens"}.get(d.settings.get("stopped"), "")
    words = " ".join(d.token_name(i) for i in g.generated_ids) or "(nothing)"
    body = Group(t, Text(), _line(("generated: ", "bold"), words),
                 _line(("stopped because ", "bold"), stopped) if stopped else Text())
    n_total = len(g.tokens)
    return Step(
        "Append and repeat",
        f"The chosen token is appended to the sequence, and the whole stack runs again to predict the one "
        f"after it — {d.letters(d.n)} → {d.letters(min(n_total, d.n + 1))} → … — until the end token or the "
        f"length limit. Each new token needs another pass through all {d.cfg.n_layers} layers.",
        body,
    )


def step_cache(d: Demo) -> Step:
    from .generate import pass_macs

    g, cfg = d.gen, d.cfg
    cache_on = bool(d.settings.get("cache", True))
    t = _table("pass", "new token", "K, V computed", "K, V reused", "multiply-adds", "without cache", "saved",
               right=("multiply-adds", "without cache", "saved"))
    for n, s in enumerate(g.steps):
        seen = len(s.tokens)
        computed = int(s["blocks.0.attn.hook_k"].shape[0]) if cfg.n_layers else s.n_new  # rows recorded this pass
        reused = seen - computed
        with_ = pass_macs(cfg, computed, seen)
        without = pass_macs(cfg, seen, seen)
        saved = f"{100 * (1 - with_ / without):.0f}%" if without else ""
        new = label(seen - 1) if n else "(prompt)"
        t.add_row(str(n + 1), new, d.span(reused, seen), d.letters(reused) if reused else "—", f"{with_:,}",
                  f"{without:,}", saved)
    if not cache_on:
        state = ("This run did not use the cache (--no-cache): every pass recomputed the keys and values of "
                 "every token, as the seed Q&A assumes.")
    elif len(g.steps) == 1:
        state = "This run made a single pass, so there was no later pass for the cache to save work on."
    else:
        state = (f"In this run, pass 2 computed Q, K and V for {label(d.n)} alone and reused the cached keys "
                 f"and values of {d.letters(d.n)} in each of the {cfg.n_layers} layers (`tracer trace --verify-cache` "
                 "shows that the logits agree with a full recompute).")
    return Step(
        "The KV cache",
        "Must every pass redo all the earlier tokens? The seed Q&A says so, but no: earlier tokens cannot see "
        "later ones, so their keys and values never change. Generation keeps them in a cache and computes "
        "Q, K and V only for the newest token — it still attends over the whole sequence.",
        Group(Text(state), Text(), t, Text("multiply-adds: counted from the shapes (tracer.generate.pass_macs)",
                                           style="italic")),
    )


STEPS = (step_tokens, step_embedding, step_position, step_qkv, step_scores, step_softmax, step_weighted_sum,
         step_multihead, step_layers, step_unembed, step_temperature, step_chosen, step_append, step_cache)

# Which recorded names a scenario's stated values are shown beside (the first step that matches).
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
    left = list(d.checks)
    for s in steps:
        patterns = CHECK_NAMES.get(s.name, [])
        mine = [c for c in left if getattr(c, "step", 0) == 0 and any(fnmatch.fnmatchcase(c.name, p) for p in patterns)]
        s.checks = mine
        left = [c for c in left if c not in mine]
    steps[STEPS.index(step_append)].checks += left  # later passes, and anything unmatched
    return steps


def pages_of(steps: list[Step], quiz: bool) -> list[Page]:
    pages = []
    for i, s in enumerate(steps):
        if quiz and s.question is not None:
            pages.append(Page(i, True))
        pages.append(Page(i, False))
    return pages


# --------------------------------------------------------------------------- one screen


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
    return Group(_line(("stated values, checked", "bold"), f"  ({sum(c.ok for c in checks)} of {len(checks)} hold)"), t)


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


# --------------------------------------------------------------------------- loading the run


def _scenario_run(name: str):
    """(generation, tokenizer, title, checks) of a shipped or user scenario; None when this build
    has no scenario support and the default was asked for (the caller falls back to a prompt)."""
    try:
        from . import scenario as sc_mod
    except ImportError:
        sc_mod = None
    if sc_mod is None or not hasattr(sc_mod, "load_scenario"):
        if name == "article":
            return None
        raise TracerError(f"scenario {name!r}: scenario files are not supported by this build; use --prompt")
    if name == "article" and sc_mod.find_scenario(name) is None:
        return None  # not shipped (yet): the article's sentence through --model instead
    if hasattr(sc_mod, "resolve"):
        path = sc_mod.resolve(name)  # a file, or a shipped name; else a TracerError with suggestions
    else:
        path = sc_mod.find_scenario(name)
        if path is None:
            raise TracerError(f"scenario {name!r}: not found (see `tracer scenarios`, or give a .toml file)")
    sc = sc_mod.load_scenario(path)
    gen = sc.run()
    checks = list(sc.check(gen)) if hasattr(sc, "check") else []
    title = getattr(sc, "title", "") or str(name)
    return gen, sc.model.tokenizer, title, checks


def load_demo(scenario: str = "article", prompt: str | None = None, model: str = "tiny") -> Demo:
    import tracer as api

    if prompt is not None:
        m = api.load(model)
        gen = m.generate(prompt, max_new_tokens=_new_tokens(m, prompt))
        return Demo(gen, m.tokenizer, title=f"{m.name}: {prompt[:40]}" + ("…" if len(prompt) > 40 else ""))
    run = _scenario_run(scenario)
    if run is None:
        m = api.load(model)
        gen = m.generate(ARTICLE_PROMPT, max_new_tokens=_new_tokens(m, ARTICLE_PROMPT))
        return Demo(gen, m.tokenizer, title=f"{m.name}: the article's sentence")
    gen, tokenizer, title, checks = run
    return Demo(gen, tokenizer, title=title, checks=checks)


def _new_tokens(m, prompt: str) -> int:
    n = len(m.tokenize(prompt))
    return max(0, min(PROMPT_NEW_TOKENS, m.config.n_ctx - n))


# --------------------------------------------------------------------------- running it


def demo_command(scenario: str = "article", prompt: str | None = None, model: str = "tiny",
                 auto: float | None = None, quiz: bool = False, export: str | None = None,
                 console: Console | None = None, stdin=None) -> None:
    """What `tracer demo` does: load, build the screens, then write the deck, page interactively, or print all."""
    if auto is not None and not (np.isfinite(auto) and auto > 0):
        raise TracerError(f"--auto must be a number of seconds > 0, got {auto}")
    if export is not None:
        check_deck_path(export)
    stdin = sys.stdin if stdin is None else stdin
    console = console or _console()
    if console.is_terminal:
        with console.status("running the model and recording every step…"):
            d = load_demo(scenario, prompt, model)
    else:
        d = load_demo(scenario, prompt, model)
    if d.cfg.n_layers < 1:
        raise TracerError(f"model {d.trace.meta.get('model')!r}: has no layers; the demo walks through at least one")
    steps = build_steps(d)
    pages = pages_of(steps, quiz)
    if export is not None:  # preparing a deck for students: write it, do not start the walkthrough
        write_deck(d, export, quiz)
        Console(stderr=True).print(f"wrote {export}: {len(pages)} screens, one self-contained page", highlight=False)
    elif _interactive(stdin, console):
        run_interactive(d, steps, pages, console, stdin, auto)
    else:
        print_all(d, steps, pages, console)


def _console() -> Console:
    c = Console()
    return Console(width=MAX_WIDTH) if c.width > MAX_WIDTH else c


def _interactive(stdin, console: Console) -> bool:
    try:
        return stdin.isatty() and console.is_terminal and os.name == "posix"
    except (AttributeError, ValueError):
        return False


def print_all(d: Demo, steps: list[Step], pages: list[Page], console: Console) -> None:
    for i, page in enumerate(pages):
        if i:
            console.print()
        console.print(screen(d, steps, page))


class RawKeys:
    """Single key presses from a terminal (cbreak: no echo, no line buffering, Ctrl-C still works)."""

    def __init__(self, stream):
        import termios
        import tty

        self.fd = stream.fileno()
        self.saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)

    def restore(self) -> None:
        import termios

        termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def _byte(self, timeout: float | None) -> str | None:
        import select

        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return None
        b = os.read(self.fd, 1)
        if not b:
            raise EOFError
        return b.decode("latin-1")

    def read(self, timeout: float | None = None) -> str | None:
        """A key name: next, back, quit, enter, backspace, a digit; None on timeout; '' for others."""
        c = self._byte(timeout)
        if c is None:
            return None
        if c == "\x1b":
            seq = ""
            while len(seq) < 8:
                nxt = self._byte(0.05)
                if nxt is None:
                    break
                seq += nxt
                if nxt.isalpha() or nxt == "~":
                    break
            return {"[C": "next", "OC": "next", "[D": "back", "OD": "back", "[6~": "next", "[5~": "back"}.get(seq, "")
        return key_name(c)


def key_name(c: str) -> str:
    if c in ("\r", "\n"):
        return "enter"
    if c in (" ", "n", "l"):
        return "next"
    if c in ("b", "B", "p", "h"):
        return "back"
    if c in ("q", "Q", "\x04"):
        return "quit"
    if c in ("\x7f", "\x08"):
        return "backspace"
    if c.isdigit():
        return c
    return ""


class Pager:
    """Where the class is: the page, a number being typed, a message. Pure logic, tested without a terminal."""

    def __init__(self, steps: list[Step], pages: list[Page]):
        self.steps = steps
        self.pages = pages
        self.i = 0
        self.typed = ""
        self.message = ""
        self.done = False

    @property
    def page(self) -> Page:
        return self.pages[self.i]

    def first_page_of(self, step: int) -> int:
        return next(i for i, p in enumerate(self.pages) if p.step == step)

    def press(self, key: str | None) -> None:
        """Apply one key (None: the --auto timer)."""
        self.message = ""
        if key is None or key == "next" or (key == "enter" and not self.typed):
            self.typed = ""
            if self.i < len(self.pages) - 1:
                self.i += 1
            elif key is not None:
                self.message = "This is the last step. b goes back, q quits."
        elif key == "back":
            self.typed = ""
            if self.i > 0:
                self.i -= 1
        elif key == "quit":
            self.done = True
        elif key == "backspace":
            self.typed = self.typed[:-1]
        elif key.isdigit():
            self.typed = (self.typed + key)[-3:]
        elif key == "enter":
            n = int(self.typed)
            self.typed = ""
            if 1 <= n <= len(self.steps):
                self.i = self.first_page_of(n - 1)
            else:
                self.message = f"There is no step {n}: steps are 1 to {len(self.steps)}."

    def status(self) -> str:
        if self.typed:
            return f"go to step {self.typed}_  (Enter)"
        return self.message


def run_interactive(d: Demo, steps: list[Step], pages: list[Page], console: Console, stdin,
                    auto: float | None) -> None:
    pager = Pager(steps, pages)
    keys = RawKeys(stdin)
    try:
        console.show_cursor(False)
        shown = None
        while not pager.done:
            state = (pager.i, pager.status())
            if state != shown:
                view = screen(d, steps, pager.page, pager.status(), keys=True)
                tall = len(console.render_lines(view, console.options, pad=False))
                if tall > console.height:
                    view = screen(d, steps, pager.page, (pager.status() + "  " if pager.status() else "") +
                                  f"(this screen has {tall} lines, the terminal {console.height}: scroll up, or "
                                  "make the font smaller)", keys=True)
                console.clear()
                console.print(view)
                shown = state
            at_end = pager.i == len(pages) - 1
            try:
                key = keys.read(auto if auto and not at_end else None)
            except EOFError:
                break
            if key is None and (not auto or at_end):
                continue
            if key == "":
                continue
            pager.press(key)
    finally:
        keys.restore()
        console.show_cursor(True)


# --------------------------------------------------------------------------- the HTML deck


def check_deck_path(path: str) -> None:
    from .weights import check_output_path

    check_output_path(path, "--export", (".html", ".htm"))  # the deck is one HTML page


DECK_CSS = """
body { margin: 0; background: #f4f4f0; color: #111; font-family: system-ui, sans-serif; }
header { padding: 1.2em 2em 0.4em; }
h1 { font-size: 1.6em; margin: 0 0 0.3em; }
nav ol { columns: 2; font-size: 1.05em; margin: 0.4em 0 0; }
nav a { color: #0645ad; }
section { background: #fff; margin: 1.2em 2em; padding: 0.6em 1.4em; border: 1px solid #ccc;
          border-radius: 6px; page-break-after: always; }
section h2 { font-size: 1.25em; margin: 0.5em 0 0.2em; }
pre { font-family: 'DejaVu Sans Mono', Menlo, Consolas, 'Courier New', monospace; font-size: 15px;
      line-height: 1.2; white-space: pre; overflow-x: auto; margin: 0.4em 0 0.8em; }
footer { margin: 1em 2em 2em; color: #555; font-size: 0.9em; }
"""


def deck_html(d: Demo, quiz: bool = False) -> str:
    """One self-contained page: a section per screen, Rich's recording with inline styles."""
    with focus_style(DECK_FOCUS):
        steps = build_steps(d)
    pages = pages_of(steps, quiz)
    sections = []
    for page in pages:
        rec = Console(record=True, width=MAX_WIDTH, file=io.StringIO(), color_system="truecolor",
                      force_terminal=True, legacy_windows=False)
        rec.print(screen(d, steps, page))
        code = rec.export_html(inline_styles=True, code_format="{code}")
        s = steps[page.step]
        anchor = f"step-{page.step + 1}" + ("-quiz" if page.quiz else "")
        title = f"Step {page.step + 1} of {len(steps)} · {s.name}" + (" — your turn" if page.quiz else "")
        sections.append(f'<section id="{anchor}" aria-label="{html.escape(title)}">\n'
                        f'<pre><code>{code}</code></pre>\n</section>')
    toc = "\n".join(f'<li><a href="#step-{i + 1}">{html.escape(s.name)}</a></li>' for i, s in enumerate(steps))
    title = html.escape(f"tracer demo — {d.title}")
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{title}</title>\n'
            f"<style>{DECK_CSS}</style>\n</head>\n<body>\n<header>\n<h1>{title}</h1>\n"
            f"<p>One step of a transformer decoder per section, with the numbers of one recorded run.</p>\n"
            f"<nav><ol>\n{toc}\n</ol></nav>\n</header>\n" + "\n".join(sections) +
            "\n<footer>Made with tracer (<code>tracer demo --export</code>). "
            "The Query/Key/Value analogy (search term, index, content) is the seed article's.</footer>\n"
            "</body>\n</html>\n")


def write_deck(d: Demo, path: str, quiz: bool = False) -> None:
    from .weights import _atomic_write

    check_deck_path(path)
    text = deck_html(d, quiz)
    _atomic_write(path, lambda f: f.write(text.encode("utf-8")))
