"""The walkthrough: a recorded generation shown in the seed article's order and words.

1 Tokens (A, B, … with their text, id and position), 2 the first layer token by token
("A queries the embedding matrix…", "+ position vector P1", Q, K, V per head, the causal mask,
Q·K, softmax, "0.450×A_V + 0.550×B_V = …", heads concatenated through W_O, residual, layer
norm, MLP), 3 the other layers at a glance, 4 "How to Predict G" (final vector, W_U, logits,
softmax with temperature, top-k, the chosen token, ABCDEF → ABCDEFG), 5 every position's
prediction, 6 attention heatmaps, then the generation loop and the checks of stated values.

It reads recorded arrays only (a `tracer.trace.Generation`); it never recomputes the model.
Weights are not in a trace, so matrices appear by their shapes (from the config). A trace
recorded with a names filter renders what it holds and lists what is missing. Stated values
(`view.checks`, from a scenario) appear beside the step that shows their hook, with ✓ or ✗;
the rest are listed at the end with "N of M stated values agree". `--token` may also name a
generated token: its own pass is shown, with the keys and values it reused from the KV cache.
Follows the seed article (`shared/seeds/000_…txt`).
"""

from __future__ import annotations

import numpy as np
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ..errors import TracerError
from ..tokens import label, show_token
from . import generation as gv  # the generation views (issue 6): loop, KV cache, every position, lens
from .fmt import bar, integer, letters, num, prob, shape, value, vec
from .heatmap import heatmaps

BRIEF_TOKENS = 4  # brief mode shows every token up to this many, else A, B and the last
BRIEF_HEADS = 4  # brief mode shows every head up to this many, else head 0
BRIEF_KV_ROWS = 8  # brief mode lists K and V vectors when a token sees at most this many
OK, BAD = "✓", "✗"


# --------------------------------------------------------------------------- what the reader asked for


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


# --------------------------------------------------------------------------- checks placed beside their step


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

    def rest(self) -> list:
        return [c for i, c in enumerate(self.checks) if i not in self.placed]


def _diff(c, p: int) -> str:
    if not np.isfinite(c.diff):
        return "shapes differ"
    if c.diff == 0:
        return "0"
    if c.diff < 0.5 * 10.0**-p:
        return f"{c.diff:.1e}"
    return num(c.diff, p)


def _check_name(c) -> str:
    idx = ", ".join(str(i) for i in c.index)
    return f"{c.name}[{idx}]" + (f" (step {c.step})" if c.step else "")


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


# --------------------------------------------------------------------------- context


class Ctx:
    """Everything the sections share: the trace, options, labels, and what was missing."""

    def __init__(self, gen, tokenizer, view, width: int):
        self.gen = gen
        self.tok = tokenizer
        self.view = view
        self.width = width
        self.step = gen.steps[0]
        self.cfg = self.step.config
        self.n = len(self.step.tokens)
        self.ids = [int(i) for i in gen.tokens]
        self.labels = [label(i) for i in range(len(gen.tokens) + 1)]
        self.p = view.precision
        self.dims = view.dims
        self.missing: set[str] = set()
        self.book = CheckBook(view.checks)
        self.n_all = len(gen.steps[-1].tokens)  # positions that had a pass (prompt, then generated)
        self.token = parse_token(view.token, self.n, self.n_all)
        self.layers = parse_index(view.layer, self.cfg.n_layers, "layer", "--layer") if self.cfg.n_layers else []
        self.heads = parse_index(view.head, self.cfg.n_heads, "head", "--head")
        self.head_chosen = str(view.head).strip().lower() != "all"

    def get(self, name: str, step=None):
        step = self.step if step is None else step
        if name in step.arrays:
            return step.arrays[name]
        self.missing.add(name)
        return None

    def step_of(self, t: int) -> int:
        """The pass that computed position t: the prompt pass for the prompt, else the pass that read t."""
        if t < self.n:
            return 0
        for k, st in enumerate(self.gen.steps):
            if len(st.tokens) - 1 == t:
                return k
        raise TracerError(f"trace: no pass computed position {t}")

    def at(self, name: str, t: int, step: int | None = None):
        """The row of per-position array `name` for position t (from its own pass by default)."""
        k = self.step_of(t) if step is None else step
        st = self.gen.steps[k]
        arr = self.get(name, st)
        if arr is None:
            return None
        return arr[t - st.start]

    def att(self, name: str, h: int, t: int):
        """Head h's row of an attention array [head, query_pos, key_pos] for query t: [key_pos]."""
        st = self.gen.steps[self.step_of(t)]
        arr = self.get(name, st)
        if arr is None:
            return None
        return arr[h, t - st.start, : t + 1]

    def cached_from(self, j: int, t: int) -> int | None:
        """The pass whose K/V cache supplied key j to query t's pass, or None when t's pass computed j."""
        st = self.gen.steps[self.step_of(t)]
        return None if j >= st.start else self.step_of(j)

    def checks_at(self, name: str, t: int, head: int | None = None, attention: bool = False) -> list:
        k = self.step_of(t)
        row = t - self.gen.steps[k].start
        if attention:
            prefix = (head, row)
        else:
            prefix = (row,) if head is None else (row, head)
        return self.checks(name, prefix, k)

    def v(self, x) -> str:
        return vec(x, self.p, self.dims)

    def text(self, i: int) -> str:
        return show_token(self.tok.token_str(i))

    def checks(self, name: str, prefix: tuple, step: int | None = 0) -> list:
        got = self.book.take(name, prefix, step)
        return [Padding(check_line(c, self.p, self.dims), (0, 0, 0, 2), expand=False) for c in got]

    def shown_tokens(self) -> list[int]:
        if self.token is not None:
            return [self.token]
        if self.view.brief and self.n > BRIEF_TOKENS:
            return [0, 1, self.n - 1]
        return list(range(self.n))

    def shown_heads(self) -> list[int]:
        if self.head_chosen or not self.view.brief or self.cfg.n_heads <= BRIEF_HEADS:
            return self.heads
        return [0]


def section(title: str) -> Rule:
    return Rule(Text(title, style="bold"), align="left", style="blue")


def line(*parts) -> Text:
    """A sentence of (text, style) pieces or plain strings."""
    return Text.assemble(*parts)


def indent(*items, by: int = 2) -> Padding:
    return Padding(Group(*items), (0, 0, 0, by), expand=False)


def hang(words: str, width: int, indent_: int) -> str:
    """`words` wrapped at spaces to `width`, continuation lines indented by `indent_` (a hanging indent)."""
    lines, cur = [], ""
    parts: list[str] = []
    for w in words.split(" "):  # a parenthesised note, "(1,024 dims, ‖·‖ 3.210)", stays on one line
        if parts and parts[-1].startswith("(") and not parts[-1].endswith(")"):
            parts[-1] += " " + w
        else:
            parts.append(w)
    for w in parts:
        limit = width - (indent_ if lines else 0)
        if cur and len(cur) + 1 + len(w) > limit:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    lines.append(cur)
    return ("\n" + " " * indent_).join(lines)


def eq(ctx: "Ctx", desc: str, name: str, vector: str, room: int = 2) -> RenderableType:
    """'desc: name = [vector]' on one line when it fits, else desc, then the equation hanging below it."""
    rhs = f" = {vector}" if name else f"= {vector}"
    sep = ": " if desc and name else " "
    width = ctx.width - room
    if len(desc) + len(sep) + len(name) + len(rhs) <= width:
        return Text.assemble(desc + sep if desc else "", (name, "bold"), rhs)
    pad = "  " if desc else ""
    lead = pad + name + (" = " if name else "= ")
    body = hang(vector, width - len(lead), 0).replace("\n", "\n" + " " * len(lead))
    t = Text(desc + (":" if name else "") + "\n") if desc else Text()
    t.append(pad)
    t.append(name, style="bold")
    t.append((" = " if name else "= ") + body)
    return t


# --------------------------------------------------------------------------- header


def block_words(cfg) -> str:
    pos = {"learned": "learned positions", "sinusoidal": "sin/cos positions", "explicit": "given position vectors",
           "none": "no position vectors"}[cfg.positional]
    parts = [pos, "layer norm" if cfg.layer_norm else "no layer norm", "MLP" if cfg.mlp else "no MLP",
             "residual" if cfg.residual else "no residual",
             "scores ÷ √d_head" if cfg.scale_scores else "unscaled scores"]
    return ", ".join(parts)


def header(ctx: Ctx) -> list[RenderableType]:
    cfg, meta = ctx.cfg, ctx.gen.meta
    s = meta.get("settings") or {}
    out = [line(("tracer", "bold"), f" · model {meta.get('model', '?')}: {cfg.n_layers} layers, d_model {cfg.d_model}, "
                f"{cfg.n_heads} head{'s' if cfg.n_heads != 1 else ''} (d_head {cfg.d_head}), {cfg.dtype}; "
                f"{block_words(cfg)}")]
    if s:
        t = float(s.get("temperature", 0) or 0)
        bits = ["temperature 0 (greedy)" if t == 0 else f"temperature {t:g}"]
        if s.get("top_k") is not None:
            bits.append(f"top-k {s['top_k']}")
        if s.get("top_p") is not None:
            bits.append(f"top-p {s['top_p']:g}")
        bits.append(f"seed {s.get('seed', 0)}")
        bits.append("KV cache on" if s.get("cache", True) else "KV cache off")
        bits.append(f"{len(ctx.gen.generated_ids)} new token{'s' if len(ctx.gen.generated_ids) != 1 else ''}")
        out.append(Text(", ".join(bits), style="dim"))
    words = weights_warning(meta)
    if words:
        out.append(Panel(Text(words, style="bold"), border_style="yellow", expand=False))
    return out


def weights_warning(meta: dict) -> str | None:
    """What the reader must know about where the weights came from, or None for trained weights."""
    if meta.get("trained"):
        return None
    how = meta.get("weights")
    if how == "given":
        return ("These weights are written by hand in the scenario, not trained: every number below is real "
                "arithmetic on them, and the predictions show what these chosen weights do, not what a trained "
                "model would say.")
    if how == "partly given":
        return ("Some weights are given by the scenario and the rest are seeded at random (untrained): every number "
                "below is real arithmetic, but the predictions are meaningless until real weights are loaded.")
    return ("These weights are untrained (seeded at random): every number below is real arithmetic, but the "
            "predictions are meaningless until real weights are loaded (--model gpt2, a GPT-2 folder, or a scenario).")


# --------------------------------------------------------------------------- 1 tokens


def token_rows(ctx: Ctx) -> Table:
    t = Table(show_edge=True, padding=(0, 1))
    t.add_column("token", style="bold")
    t.add_column("text")
    t.add_column("id", justify="right")
    t.add_column("position", justify="right")
    for pos, i in enumerate(ctx.ids[: ctx.n]):
        t.add_row(ctx.labels[pos], ctx.text(i), str(i), str(pos))
    return t


def tokens_section(ctx: Ctx) -> list[RenderableType]:
    n = ctx.n
    first = f"{ctx.labels[0]}–{ctx.labels[n - 1]}" if n > 1 else "A"
    return [
        section("1 · Tokens"),
        line(f"The prompt splits into {n} token{'s' if n != 1 else ''}, {first}, from the {ctx.tok.name} vocabulary of "
             f"{integer(ctx.tok.n_vocab)} tokens (␣ marks a leading space)."),
        token_rows(ctx),
        *ctx.checks("tokens", (), None),
    ]


# --------------------------------------------------------------------------- 2 one layer, token by token


def token_at_layer(ctx: Ctx, t: int, layer: int) -> list[RenderableType]:
    cfg, L = ctx.cfg, ctx.labels[t]
    b = f"blocks.{layer}."
    k = ctx.step_of(t)
    head_line = line((f"{L}:", "bold"), f"  {ctx.text(ctx.ids[t])}  (position {t})")
    if k > 0:
        head_line.append(f", generated: its own pass, step {k}", style="italic")
    out: list[RenderableType] = [head_line]
    body: list[RenderableType] = []
    x = ctx.at(b + "hook_resid_pre", t)
    if layer == 0:
        E = ctx.at("hook_embed", t)
        if E is not None:
            body.append(eq(ctx, f"{L} queries the embedding matrix W_E ({shape(cfg.d_vocab, cfg.d_model)}) at row "
                                f"{ctx.ids[t]}", f"E_{L}", ctx.v(E)))
            body += ctx.checks_at("hook_embed", t)
        if cfg.positional != "none":
            P = ctx.at("hook_pos_embed", t)
            kind = {"learned": "learned", "sinusoidal": "sin/cos", "explicit": "given"}[cfg.positional]
            if P is not None:
                body.append(eq(ctx, f"+ position vector (W_pos row {t}, {kind})", f"P{t + 1}", ctx.v(P)))
                body += ctx.checks_at("hook_pos_embed", t)
            if x is not None:
                body.append(eq(ctx, f"= the sum, {L}'s input to layer 0", f"x_{L}", ctx.v(x)))
        elif x is not None:
            body.append(eq(ctx, "no position vectors (positional = none), so the input is E itself", f"x_{L}", ctx.v(x)))
    elif x is not None:
        body.append(eq(ctx, f"{L}'s output of layer {layer - 1}", f"x_{L}", ctx.v(x)))
    body += ctx.checks_at(b + "hook_resid_pre", t)
    if cfg.layer_norm:
        ln = ctx.at(b + "ln1.hook_normalized", t)
        if ln is not None:
            body.append(eq(ctx, f"layer norm: (x_{L} − mean) ÷ std; then ln1(x_{L}) = LN(x_{L}) × ln1.w + ln1.b meets W_Q, W_K, W_V",
                           f"LN(x_{L})", ctx.v(ln)))
            body += ctx.checks_at(b + "ln1.hook_normalized", t)
    heads = ctx.shown_heads()
    body.append(visibility(ctx, t))
    for h in heads:
        body += head_at_token(ctx, t, layer, h)
    if len(heads) < cfg.n_heads:
        rest = [h for h in range(cfg.n_heads) if h not in heads]
        body.append(Text(f"heads {rest[0]}–{rest[-1]}: the same steps with their own W_Q, W_K, W_V "
                         f"(--head N shows one, --full shows all)", style="dim"))
    body += after_attention(ctx, t, layer)
    out.append(indent(*body))
    return out


def visibility(ctx: Ctx, t: int) -> Text:
    """Which keys and values token t can see, which come from the KV cache, which the causal mask hides."""
    L = ctx.labels[t]
    st = ctx.gen.steps[ctx.step_of(t)]
    seen = ctx.labels[: t + 1]
    hidden = ctx.labels[t + 1 : len(st.tokens)]
    if t == 0:
        sees = f"{L} can see only itself (position 0)"
    else:
        sees = f"{L} can see the keys and values of {letters(seen)} (positions 0–{t})"
    if st.start > 0:
        sees += (f"; those of {letters(ctx.labels[: st.start])} come from the KV cache "
                 f"(“cache k”: computed by pass k)")
    if hidden:
        where = f"position {t + 1}" if len(hidden) == 1 else f"positions {t + 1}–{len(st.tokens) - 1}"
        return line(sees + "; ", ("the causal mask hides ", "bold"), (letters(hidden), "bold"),
                    f" ({where}, later tokens: score −∞, weight 0)")
    return line(sees + "; the causal mask hides nothing: ", (f"{L} is the last token", "bold"))


def head_at_token(ctx: Ctx, t: int, layer: int, h: int) -> list[RenderableType]:
    cfg, L, p = ctx.cfg, ctx.labels[t], ctx.p
    a = f"blocks.{layer}.attn."
    H = cfg.n_heads
    out: list[RenderableType] = []
    wshape = f"{shape(H, cfg.d_model, cfg.d_head)}, one {shape(cfg.d_model, cfg.d_head)} slice per head" if H > 1 \
        else shape(cfg.d_model, cfg.d_head)
    if H > 1:
        out.append(line((f"head {h}", "bold underline"), f" of {H}  (W_Q, W_K, W_V: {wshape})"))
    else:
        out.append(line(f"W_Q, W_K, W_V: {wshape} each"))
    sl = f"[{h}]" if H > 1 else ""
    src = f"ln1(x_{L})" if cfg.layer_norm else f"x_{L}"  # with layer norm, W_Q meets LN(x)·ln1.w + ln1.b
    have = {}
    for m in "QKV":
        row = ctx.at(a + f"hook_{m.lower()}", t)
        have[m] = row is not None
        if row is not None:
            out.append(eq(ctx, "", f"{L}_{m} = {src}·W_{m}{sl} + b_{m}", ctx.v(row[h])))
            out += ctx.checks_at(a + f"hook_{m.lower()}", t, h)
    n_keys = t + 1
    cached = [ctx.cached_from(j, t) for j in range(n_keys)]
    if have["K"] and have["V"] and n_keys > 1 and (n_keys <= BRIEF_KV_ROWS or not ctx.view.brief):
        kv = Table(box=None, padding=(0, 1), show_edge=False, pad_edge=False)
        kv.add_column("", style="bold")
        from_cache = any(c is not None for c in cached)
        if from_cache:
            kv.add_column("from", no_wrap=True)
        kv.add_column("K (key)")
        kv.add_column("V (value)")
        for j in range(n_keys):
            kj, vj = ctx.at(a + "hook_k", j, cached[j]), ctx.at(a + "hook_v", j, cached[j])
            if kj is None or vj is None:
                continue
            row = [ctx.labels[j]]
            if from_cache:
                row.append(f"cache {cached[j]}" if cached[j] is not None else "new")
            kv.add_row(*row, ctx.v(kj[h]), ctx.v(vj[h]))
        out.append(indent(kv))
    elif n_keys > BRIEF_KV_ROWS:
        out.append(Text(f"(the {n_keys} K and V vectors: --full lists them)", style="dim"))
    dots = ctx.att(a + "hook_dots", h, t)
    scores = ctx.att(a + "hook_attn_scores", h, t)
    pattern = ctx.att(a + "hook_pattern", h, t)
    if pattern is None and scores is None and dots is None:
        return out
    sc = scores if scores is not None else dots
    scaled = cfg.scale_scores and scores is not None
    tab = Table(box=None, padding=(0, 1), show_edge=False, pad_edge=False, show_footer=pattern is not None)
    tab.add_column("key", style="bold", footer="sum")
    if dots is not None:
        tab.add_column(f"{L}_Q·K", justify="right")
    if scaled:
        tab.add_column(f"÷ √{cfg.d_head}", justify="right")
    if pattern is not None:
        tab.add_column("weight", justify="right", footer=num(float(pattern.sum()), p))
        tab.add_column("", no_wrap=True, style="cyan")
    for j in range(n_keys):
        row = [ctx.labels[j]]
        if dots is not None:
            row.append(num(dots[j], p))
        if scaled:
            row.append(num(scores[j], p))
        if pattern is not None:
            row += [prob(pattern[j], p), bar(pattern[j], 10)]
        tab.add_row(*row)
    how = f"{L}_Q · each visible key" + (f", ÷ √d_head = √{cfg.d_head}" if scaled else "") + \
        (", softmax → weights that sum to 1" if pattern is not None else "")
    out.append(line("attention scores: ", how))
    out.append(indent(tab))
    out += ctx.checks_at(a + "hook_dots", t, h, attention=True)
    out += ctx.checks_at(a + "hook_attn_scores", t, h, attention=True)
    if pattern is not None and sc is not None and n_keys <= BRIEF_KV_ROWS:
        out.append(line(f"softmax([{', '.join(num(x, p) for x in sc)}]) = "
                        f"[{', '.join(num(x, p) for x in pattern)}]"))
    if pattern is not None:
        out += ctx.checks_at(a + "hook_pattern", t, h, attention=True)
    z = ctx.at(a + "hook_z", t)
    if pattern is not None and z is not None:
        terms = " + ".join(f"{num(pattern[j], p)}×{ctx.labels[j]}_V" for j in range(n_keys))
        whose = f"{L}'s new representation" + (f" from head {h}" if H > 1 else "")
        out.append(eq(ctx, f"{terms} = {whose}", "", ctx.v(z[h])))
        out += ctx.checks_at(a + "hook_z", t, h)
    return out


def after_attention(ctx: Ctx, t: int, layer: int) -> list[RenderableType]:
    """Concat of heads and W_O, residual, layer norm and MLP, the layer's output."""
    cfg, L, b = ctx.cfg, ctx.labels[t], f"blocks.{layer}."
    H, dh, dm = cfg.n_heads, cfg.d_head, cfg.d_model
    out: list[RenderableType] = []
    z = ctx.at(b + "attn.hook_z", t)
    attn_out = ctx.at(b + "hook_attn_out", t)
    if H > 1 and z is not None:
        out.append(eq(ctx, f"concatenate the {H} heads' outputs ({H} × {dh} = {H * dh} numbers)", f"z_{L}",
                      ctx.v(z.reshape(-1))))
    if attn_out is not None:
        out.append(eq(ctx, f"× W_O ({shape(H * dh, dm)}) + b_O, back to {dm} dims", f"attn_out_{L}", ctx.v(attn_out)))
        out += ctx.checks_at(b + "hook_attn_out", t)
    if cfg.mlp:
        mid = ctx.at(b + "hook_resid_mid", t)
        if mid is not None:
            if cfg.residual:
                out.append(eq(ctx, "residual: add the layer's input back", f"x_{L} + attn_out_{L}", ctx.v(mid)))
            else:
                out.append(line(f"no residual (residual = false): the MLP reads attn_out_{L}"))
            out += ctx.checks_at(b + "hook_resid_mid", t)
        if cfg.layer_norm:
            ln2 = ctx.at(b + "ln2.hook_normalized", t)
            if ln2 is not None:
                out.append(eq(ctx, "layer norm: (x − mean) ÷ std, later × ln2.w + ln2.b, before the MLP", "LN(x)",
                              ctx.v(ln2)))
        pre, post, mo = ctx.at(b + "mlp.hook_pre", t), ctx.at(b + "mlp.hook_post", t), ctx.at(b + "hook_mlp_out", t)
        if pre is not None:
            out.append(eq(ctx, f"MLP: × W_in ({shape(dm, cfg.d_mlp)}) + b_in", "pre", ctx.v(pre)))
        if post is not None:
            out.append(eq(ctx, "GELU", "post", ctx.v(post)))
        if mo is not None:
            out.append(eq(ctx, f"× W_out ({shape(cfg.d_mlp, dm)}) + b_out", f"mlp_out_{L}", ctx.v(mo)))
            out += ctx.checks_at(b + "hook_mlp_out", t)
    post_ = ctx.at(b + "hook_resid_post", t)
    if post_ is not None:
        if cfg.mlp:
            how = "residual: + mlp_out" if cfg.residual else "no residual: the MLP output itself"
        else:
            how = f"residual: x_{L} + attn_out_{L}" if cfg.residual else f"no residual (residual = false): attn_out_{L} itself"
        nxt = f"the input of layer {layer + 1}" if layer + 1 < cfg.n_layers else "its final vector"
        out.append(eq(ctx, f"{how} → {L}'s output of layer {layer}, {nxt}", f"out_{L}", ctx.v(post_)))
        out += ctx.checks_at(b + "hook_resid_post", t)
    return out


def layer_section(ctx: Ctx, layer: int, number: str) -> list[RenderableType]:
    cfg = ctx.cfg
    name = "First layer" if layer == 0 else f"Layer {layer}"
    out: list[RenderableType] = [section(f"{number} · {name} (layer {layer} of {cfg.n_layers}), token by token")]
    if layer > 0:
        out.append(line(f"Each token starts from its output of layer {layer - 1}, which already holds context from "
                        f"the tokens to its left, and repeats the same steps with this layer's own W_Q, W_K, W_V."))
    shown = ctx.shown_tokens()
    for i, t in enumerate(shown):
        if i > 0 and t - shown[i - 1] > 1:
            skip = list(range(shown[i - 1] + 1, t))
            out.append(Text(f"{letters([ctx.labels[s] for s in skip])}: the same steps, each seeing the tokens to its "
                            f"left (--token {ctx.labels[skip[0]]} shows one, --full shows all)", style="dim"))
        out += token_at_layer(ctx, t, layer)
    return out


# --------------------------------------------------------------------------- 3 the other layers


def _head_cells(ctx: Ctx, rows) -> list[str]:
    """Per head, the key with the largest weight. `rows`: per head a [key_pos] array, or None."""
    H = ctx.cfg.n_heads
    if rows is None:
        return ["—"] * (H if H <= BRIEF_HEADS else 1)
    best = [int(np.argmax(r)) for r in rows]
    if H <= BRIEF_HEADS:
        return [f"{ctx.labels[j]} {num(r[j], 2)}" for j, r in zip(best, rows)]
    return [" ".join(ctx.labels[j] for j in best)]


def _overview_table(ctx: Ctx, first_col: str) -> Table:
    H = ctx.cfg.n_heads
    tab = Table(padding=(0, 1), show_edge=True)
    tab.add_column(first_col, justify="right", style="bold")
    tab.add_column("‖x‖ in", justify="right")
    tab.add_column("‖x‖ out", justify="right")
    if H <= BRIEF_HEADS:
        for h in range(H):
            tab.add_column(f"head {h} → most", justify="left", no_wrap=True)
    else:
        tab.add_column(f"most-attended token, heads 0–{H - 1}", no_wrap=False)
    return tab


def _norm(x, p: int) -> str:
    return num(np.linalg.norm(np.asarray(x, dtype=float)), p) if x is not None else "—"


def layers_section(ctx: Ctx, number: str) -> list[RenderableType]:
    cfg = ctx.cfg
    if cfg.n_layers == 0:
        return []
    t = ctx.token if ctx.token is not None else ctx.n - 1
    L = ctx.labels[t]
    out: list[RenderableType] = [section(f"{number} · All {cfg.n_layers} layers")]
    out.append(line(f"Every layer repeats the steps above on the previous layer's output. For {L} (position {t}): "
                    f"the size ‖x‖ of its vector going in and out, and the token each head attends to most "
                    f"(with its weight)."))
    tab = _overview_table(ctx, "layer")
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."
        rows = [ctx.att(b + "attn.hook_pattern", h, t) for h in range(cfg.n_heads)]
        tab.add_row(str(layer), _norm(ctx.at(b + "hook_resid_pre", t), ctx.p), _norm(ctx.at(b + "hook_resid_post", t), ctx.p),
                    *_head_cells(ctx, None if rows[0] is None else rows))
    out.append(tab)
    if ctx.view.brief:
        out.append(Text("--full: a table per layer with a row per token; --layer N: layer N token by token", style="dim"))
        return out
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."
        xi, xo = ctx.get(b + "hook_resid_pre"), ctx.get(b + "hook_resid_post")
        pat = ctx.get(b + "attn.hook_pattern")
        tab = _overview_table(ctx, "token")
        tab.title = f"layer {layer}"
        tab.title_justify = "left"
        for s in range(ctx.n):
            rows = None if pat is None else [pat[h, s, : s + 1] for h in range(cfg.n_heads)]
            tab.add_row(ctx.labels[s], _norm(None if xi is None else xi[s], ctx.p),
                        _norm(None if xo is None else xo[s], ctx.p), *_head_cells(ctx, rows))
        out.append(tab)
    return out


# --------------------------------------------------------------------------- 4 predicting the next token


def _top(probs: np.ndarray, k: int) -> np.ndarray:
    k = min(k, probs.shape[-1])
    idx = np.argpartition(-probs, k - 1)[:k]  # [k]
    return idx[np.argsort(-probs[idx], kind="stable")]  # [k] most likely first


def sequence_line(ctx: Ctx, n_before: int, new_id: int | None) -> Text:
    seq = ctx.labels[:n_before]
    joiner = "" if n_before + 1 <= 26 else " "
    t = Text()
    if n_before > 12:
        t.append(joiner.join(seq[:3]) + joiner + "…" + joiner + joiner.join(seq[-2:]), style="bold")
    else:
        t.append(joiner.join(seq), style="bold")
    if new_id is None:
        return t
    t.append(" → ")
    if n_before > 12:
        t.append(joiner.join(seq[:3]) + joiner + "…" + joiner + joiner.join(seq[-2:]), style="bold")
    else:
        t.append(joiner.join(seq), style="bold")
    t.append(ctx.labels[n_before], style="bold reverse")
    t.append(f"   ({ctx.labels[n_before]} = {ctx.text(new_id)})")
    return t


def predict_section(ctx: Ctx, number: str) -> list[RenderableType]:
    cfg, step, p = ctx.cfg, ctx.step, ctx.p
    last = ctx.n - 1
    L, G = ctx.labels[last], ctx.labels[ctx.n]
    out: list[RenderableType] = [section(f"{number} · Predicting the next token (how to predict {G})")]
    out.append(line(f"Only after the last of the {cfg.n_layers} layers does {L}, the last token, predict {G}: "
                    f"its final vector meets the unembedding W_U, which gives one score (logit) per vocabulary token."))
    body: list[RenderableType] = []
    if cfg.layer_norm:
        ln = ctx.get("ln_final.hook_normalized")
        if ln is not None:
            body.append(eq(ctx, "final layer norm: (x − mean) ÷ std, later × ln_final.w + ln_final.b",
                           f"LN(out_{L})", ctx.v(ln[-1])))
    fin = ctx.get("unembed.hook_in")
    if fin is not None:
        body.append(eq(ctx, f"{L}'s final vector", "f", ctx.v(fin[-1])))
        body += ctx.checks("unembed.hook_in", (last,))
    tied = "; W_E transposed, tied" if cfg.tied_unembed else ""
    logits = ctx.get("logits")
    if logits is not None:
        body.append(eq(ctx, f"× W_U ({shape(cfg.d_model, cfg.d_vocab)}{tied}) + b_U", "logits", ctx.v(logits[-1])))
        body += ctx.checks("logits", (last,))
    s = ctx.gen.meta.get("settings") or {}
    temp = float(s.get("temperature", 0) or 0)
    scaled = ctx.get("sample.scaled")
    probs = ctx.get("sample.probs")
    chosen = step.arrays.get("sample.token")
    if temp == 0:
        body.append(line("softmax(logits) = probabilities, which sum to 1; ", ("temperature 0: greedy", "bold"),
                         ", the most likely token is chosen, no random draw"))
    body += ctx.checks("sample.probs", ())
    if temp != 0:  # every stage of the draw: ÷ temperature, softmax, top-k, top-p, the uniform number
        body.append(gv.sampling_stages(step, ctx.tok, ctx.view))
    elif probs is not None:
        body.append(top_table(ctx, probs, logits[-1] if logits is not None else None,
                              scaled if temp != 0 else None, step.arrays.get("sample.final") if temp != 0 else None,
                              int(chosen) if chosen is not None else None, temp, G))
        u = step.arrays.get("sample.uniform")
        if u is not None:
            body.append(line(f"the seeded uniform draw u = {num(float(u), max(p, 4))} falls in the band of the chosen "
                             f"token (bands stacked in order of probability, after the top-k / top-p cuts)"))
    if chosen is not None:
        c = int(chosen)
        appended = len(ctx.gen.generated_ids) > 0
        body.append(line(("chosen: ", "bold"), (f"{G} = {ctx.text(c)}", "bold"), f" (id {c}"
                         + (f", probability {prob(probs[c], p)})" if probs is not None else ")")))
        body.append(sequence_line(ctx, ctx.n, c) if appended else
                    line(sequence_line(ctx, ctx.n, None), " (not appended: --max-new-tokens 0)"))
        body += ctx.checks("generated", (), None)
    out.append(indent(*body))
    if not ctx.gen.meta.get("trained") and ctx.gen.meta.get("weights") != "given":
        out.append(Text("(untrained weights: this prediction is meaningless until real weights are loaded)",
                        style="yellow"))
    return out


def top_table(ctx: Ctx, probs, logits, scaled, final, chosen: int | None, temp: float, G: str) -> Table:
    """Rank, token, id, logit, probability of the most likely tokens (and the chosen one)."""
    p = ctx.p
    top = _top(probs, ctx.view.top_k)
    tab = Table(title=f"top {len(top)} of {integer(len(probs))}", title_justify="left", padding=(0, 1))
    tab.add_column("rank", justify="right")
    tab.add_column("token", no_wrap=True)
    tab.add_column("id", justify="right")
    if logits is not None:
        tab.add_column("logit", justify="right")
    if scaled is not None:
        tab.add_column(f"÷ {temp:g}", justify="right")
    tab.add_column("probability", justify="right")
    if final is not None:
        tab.add_column("after cuts", justify="right")
    tab.add_column("", no_wrap=True)
    rows = [int(i) for i in top]
    if chosen is not None and chosen not in rows:
        rows.append(chosen)
    for i in rows:
        rank = rows.index(i) + 1 if i in top else int((probs > probs[i]).sum()) + 1
        r = [str(rank), ctx.text(i), str(i)]
        if logits is not None:
            r.append(num(logits[i], p))
        if scaled is not None:
            r.append(num(scaled[i], p))
        r.append(prob(probs[i], p))
        if final is not None:
            r.append(prob(final[i], p))
        r.append(f"← chosen: {G}" if i == chosen else "")
        tab.add_row(*r, style="bold" if i == chosen else None)
    return tab


# --------------------------------------------------------------------------- 5 every position predicts


def every_position_section(ctx: Ctx, number: str) -> list[RenderableType]:
    return [section(f"{number} · Every position predicts"), gv.every_position(ctx.step, ctx.tok, ctx.view)]


# --------------------------------------------------------------------------- 6 attention heatmaps


def heatmap_section(ctx: Ctx, number: str) -> list[RenderableType]:
    if ctx.cfg.n_layers == 0:
        return []
    layers = ctx.layers if len(ctx.layers) == 1 or not ctx.view.brief or str(ctx.view.layer) == "all" else ctx.layers[:1]
    out: list[RenderableType] = [section(f"{number} · Attention heatmaps")]
    out.append(line("Row: the token that attends; column: the key it reads. Each row sums to 1; "
                    "the triangle above the diagonal is hidden by the causal mask."))
    heads = ctx.shown_heads()
    for layer in layers:
        pat = ctx.get(f"blocks.{layer}.attn.hook_pattern")
        if pat is None:
            continue
        out.append(heatmaps(np.asarray(pat), ctx.labels[: ctx.n], ctx.labels[: ctx.n], heads, layer, ctx.width))
    if len(heads) < ctx.cfg.n_heads:
        out.append(Text(f"(heads {heads[-1] + 1}–{ctx.cfg.n_heads - 1}: --head N or --full)", style="dim"))
    return out


# --------------------------------------------------------------------------- 7 the generation loop


def loop_section(ctx: Ctx, number: str) -> list[RenderableType]:
    return [section(f"{number} · After predicting {ctx.labels[ctx.n]}: the loop"),
            gv.generation_steps(ctx.gen, ctx.tok, ctx.view), gv.kv_cache_view(ctx.gen, ctx.tok, ctx.view)]


def lens_section(ctx: Ctx, number: str) -> list[RenderableType]:
    return [section(f"{number} · Logit lens: when does the prediction appear?"),
            gv.logit_lens_view(ctx.step, ctx.tok, ctx.view)]


# --------------------------------------------------------------------------- checks and what is missing


def checks_section(ctx: Ctx) -> list[RenderableType]:
    checks = ctx.book.checks
    if not checks:
        return []
    rest = ctx.book.rest()
    n_ok = sum(1 for c in checks if c.ok)
    out: list[RenderableType] = [section("Checks")]
    if rest:
        if len(rest) < len(checks):
            out.append(Text("Stated values not shown beside a step above:"))
        out += [check_line(c, ctx.p, ctx.dims, where=True) for c in rest]
    style = "bold green" if n_ok == len(checks) else "bold red"
    out.append(Text(f"{n_ok} of {len(checks)} stated values agree", style=style)
               + Text(f" ({len(checks) - n_ok} disagree)" if n_ok < len(checks) else "", style="bold red"))
    return out


def missing_section(ctx: Ctx) -> list[RenderableType]:
    if not ctx.missing:
        return []
    names = sorted(ctx.missing)
    shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    return [Text(f"Not in this trace (recorded with a names filter), so not shown: {shown}", style="yellow")]


# --------------------------------------------------------------------------- the whole walkthrough


class Trimmed:
    """A renderable without the spaces Rich pads lines with: nothing trails a line in a pipe or an export."""

    def __init__(self, renderable):
        self.renderable = renderable

    def __rich_console__(self, console, options):
        from rich.segment import Segment

        for line_ in console.render_lines(self.renderable, options, pad=False):
            segs = list(line_)
            while segs and not segs[-1].control and (segs[-1].style is None or segs[-1].style.bgcolor is None):
                text = segs[-1].text.rstrip(" ")
                if text:
                    segs[-1] = Segment(text, segs[-1].style)
                    break
                segs.pop()
            yield from segs
            yield Segment.line()



def walkthrough(gen, tokenizer, view, width: int = 100) -> list[RenderableType]:
    """Every section, in the article's order, as a list of Rich renderables."""
    if not gen.steps:
        raise TracerError("trace: it holds no passes")
    ctx = Ctx(gen, tokenizer, view, width)
    parts: list[RenderableType] = []
    parts += header(ctx)
    parts += tokens_section(ctx)
    n = 2
    if ctx.cfg.n_layers == 0:
        parts.append(section("2 · Layers"))
        parts.append(Text("This model has no layers: the embedding goes straight to W_U."))
    for i, layer in enumerate(ctx.layers):
        parts += layer_section(ctx, layer, f"{n}" if len(ctx.layers) == 1 else f"{n}.{i + 1}")
    parts += layers_section(ctx, "3")
    parts += predict_section(ctx, "4")
    parts += every_position_section(ctx, "5")
    parts += heatmap_section(ctx, "6")
    parts += loop_section(ctx, "7")
    parts += lens_section(ctx, "8")
    parts += checks_section(ctx)
    parts += missing_section(ctx)
    return parts
