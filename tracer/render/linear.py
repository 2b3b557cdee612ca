"""A linear-attention layer token by token, in the seed article's words (Gated DeltaNet: Qwen3.5's linear
layers, `tracer.core.linear_attention`): where softmax attention scores every earlier key ("Q·A_K = 0.6",
"0.4×A_V + 0.6×B_V"), this layer keeps one state S per head and the token reads that instead. Shown: the
projection and the short causal convolution over this token and the K−1 before it; per head q and k
(L2-normalized) and v, β ("how much to write") and the decay factor exp(g) ("the state keeps 0.91 of
itself"), the state before the token, what it recalls for the key (Sᵀk), the error v − Sᵀk written along
k with weight β, the state after, the read-out o = Sᵀq/√d_k and the gated norm; then what the layer keeps
(a fixed state) against what a softmax layer's KV cache adds per token. Also the `layers` overview's cells,
the heatmap's note and the cache table's words of such a layer, and the output gate of Qwen3.5's softmax
layers (sigmoid(gate) and z × gate, what their W_O merges).

Reads the recorded arrays only (`blocks.{l}.attn.hook_qkv_pre`, `hook_qkv_conv`, `hook_q`, `hook_k`,
`hook_v`, `hook_beta`, `hook_decay`, `hook_state`, `hook_z`, `hook_gate_z`, `hook_z_gated`): what S was
before the token is the previous position's recorded state (the cache's, for a token of a later pass),
and exp(g), Sᵀk and v − Sᵀk are arithmetic on recorded numbers, never a rerun of the layer. The
walkthrough (`render.layer`) picks this view by the layer's kind (`Sublayer.shown_as == "state"`)."""

from __future__ import annotations

import numpy as np
from rich.console import group
from rich.table import Table
from rich.text import Text

from .context import Ctx
from .fmt import count, cprob, letters, num, shape, size
from .loop import cache_layers
from .text import BRIEF_CORNER, FULL_CORNER, indent, line
from .words import say
from ..core.equations import sigmoid


def _prefix(layer: int) -> str:
    return f"blocks.{layer}.attn."


def kind_shapes(ctx: Ctx, layer: int) -> dict:
    """The layer's parameters' shapes (`Sublayer.shapes`): the matrices are named by their shapes."""
    return ctx.cfg.attention_of(layer).shapes(ctx.cfg, layer)


def state_before(ctx: Ctx, t: int, layer: int):  # → [v_head, d_k, d_v] or None, and the pass that computed it
    """S before position t: the recorded state after position t − 1 (zeros before the first token); for
    a token of a later pass, the state the cache carried, which that earlier pass recorded."""
    if t == 0:
        return None, None
    return ctx.at(_prefix(layer) + "hook_state", t - 1), ctx.cached_from(t - 1, t)


def update(S_prev, k, v, beta: float, g: float):  # [d_k, d_v], [d_k], [d_v] → the steps of one head's update
    """One head's delta-rule step from recorded numbers: the decayed state, what it recalls for k,
    the error, and the state after (which the recorded state equals)."""
    S = np.exp(g) * (np.zeros((len(k), len(v))) if S_prev is None else np.asarray(S_prev, dtype=np.float64))
    recalled = S.T @ np.asarray(k, dtype=np.float64)  # [d_v]
    error = np.asarray(v, dtype=np.float64) - recalled  # [d_v]
    return S, recalled, error, S + np.outer(k, beta * error)


def worked_cell(S_prev, k, beta: float, g: float, error, after) -> dict:  # [d_k, d_v] or None, [d_k], ·, ·, [d_v], [d_k, d_v]
    """The delta rule on one number of the state, the one this token changed most (k_i·β·error_j largest):
    S_after[i, j] = exp(g)·S[i, j] + k_i·β·(v − Sᵀk)_j, every factor a recorded number (or `update`'s
    arithmetic on them) and `after` the recorded state the sum must equal."""
    write = np.outer(np.asarray(k, dtype=np.float64), beta * np.asarray(error, dtype=np.float64))  # [d_k, d_v]
    i, j = (int(x) for x in np.unravel_index(np.argmax(np.abs(write)), write.shape))
    return {"i": i, "j": j, "keep": float(np.exp(g)), "s": 0.0 if S_prev is None else float(S_prev[i, j]),
            "k": float(k[i]), "beta": float(beta), "e": float(error[j]), "after": float(after[i, j])}


def cell_words(cell: dict, p: int) -> str:
    """`worked_cell`'s sum in words and numbers (the terminal, the demo and the page say it alike)."""
    n = {key: num(cell[key], p) for key in ("keep", "s", "k", "beta", "e", "after")}
    return say("linear.cell_worked", i=str(cell["i"]), j=str(cell["j"]), **n)


def matrix(S, p: int, corner: int) -> Table:
    """A state as a table: a row per key dimension, a column per value dimension (its corner when larger)."""
    rows, cols = min(S.shape[0], corner), min(S.shape[1], corner)
    tab = Table(box=None, padding=(0, 1), show_edge=False, pad_edge=False, show_header=True)
    tab.add_column("", style="dim", justify="right")
    for j in range(cols):
        tab.add_column(f"v{j}", justify="right", header_style="dim")
    for i in range(rows):
        tab.add_row(f"k{i}", *(num(S[i, j], p) for j in range(cols)))
    return tab


def state_view(ctx: Ctx, S, words: str) -> list:
    """A state with its words, whole when it fits, else its corner and a note."""
    corner = BRIEF_CORNER if ctx.view.brief else FULL_CORNER
    out = [line(words + ":"), indent(matrix(S, ctx.p, corner), by=4)]
    if S.shape[0] > corner or S.shape[1] > corner:
        out.append(indent(Text(say("linear.corner", rows=str(min(S.shape[0], corner)), cols=str(min(S.shape[1], corner)),
                                   d_k=str(S.shape[0]), d_v=str(S.shape[1])), style="dim"), by=4))
    return out


@group()
def state_steps(ctx: Ctx, t: int, layer: int):
    """Token t through a linear-attention layer up to its heads' gated outputs (then `render.layer`'s
    W_O, residual and MLP follow, as for every layer)."""
    cfg, L, a = ctx.cfg, ctx.labels[t], _prefix(layer)
    q, k, v = ctx.at(a + "hook_q", t), ctx.at(a + "hook_k", t), ctx.at(a + "hook_v", t)
    if q is None or k is None or v is None:
        return
    kh, dk = q.shape
    vh, dv = v.shape
    yield line((say("linear.title"), "bold"),
               say("linear.first", L=L) if t == 0 else say("linear.intro", L=L, seen=letters(ctx.labels[:t]),
                                                            d_k=str(dk), d_v=str(dv)))
    yield from convolution(ctx, t, layer)
    yield line(say("linear.split", k_heads=str(kh), d_k=str(dk), v_heads=str(vh), d_v=str(dv),
                   shared=say("linear.shared", n=str(vh // kh)) if kh < vh else ""))
    heads = [h for h in ctx.shown_heads() if h < vh]
    if not heads:
        yield Text(say("linear.no_head", layer=str(layer), last=str(vh - 1), h=str(ctx.shown_heads()[0])), style="dim")
    whole = heads if not ctx.view.brief or ctx.head_chosen else heads[:1]  # brief: the others in a line each
    for h in heads:
        yield head_state(ctx, t, layer, h) if h in whole else head_line(ctx, t, layer, h)
    if len(heads) < vh and heads:
        rest = [str(h) for h in range(vh) if h not in heads]
        yield Text(say("linear.rest", heads=f"heads {', '.join(rest[:-1])} and {rest[-1]}" if len(rest) > 1 else
                       f"head {rest[0]}"), style="dim")
    if t == ctx.shown_tokens()[0]:  # once a layer: what it keeps, against a softmax layer's KV cache
        yield line(keeps_words(ctx.cfg, layer, ctx.n))


def convolution(ctx: Ctx, t: int, layer: int):
    """The projection of token t and the short causal convolution over it and the K − 1 inputs before it."""
    L, a = ctx.labels[t], _prefix(layer)
    pre, conv = ctx.at(a + "hook_qkv_pre", t), ctx.at(a + "hook_qkv_conv", t)
    if pre is None or conv is None:
        return
    shapes = kind_shapes(ctx, layer)
    channels, K = shapes["W_conv"]
    yield ctx.eq(say("linear.project", L=L, shape=shape(ctx.cfg.d_model, channels)), f"c_{L}", ctx.v(pre))
    yield line(say("linear.conv", L=L, conv=str(channels), before=count(K - 1, "input"), shape=shape(channels, K)))
    rows = [Text(say("linear.conv_zeros", n=str(K - 1 - t)))] if t < K - 1 else []
    for j in range(max(t - K + 1, 0), t + 1):  # each input as its own equation: it wraps, never crops, at 80 columns
        row, cached = ctx.at(a + "hook_qkv_pre", j), ctx.cached_from(j, t)
        if row is not None:
            rows.append(ctx.eq("", f"c_{ctx.labels[j]}" + (f" (cache {cached})" if cached is not None else ""), ctx.v(row)))
    yield from rows
    yield ctx.eq(say("linear.conv_out", L=L), f"conv_{L}", ctx.v(conv))


@group()
def head_state(ctx: Ctx, t: int, layer: int, h: int):
    """One head's state update and read-out for token t."""
    L, a, p = ctx.labels[t], _prefix(layer), ctx.p
    q, k, v = ctx.at(a + "hook_q", t), ctx.at(a + "hook_k", t), ctx.at(a + "hook_v", t)
    kh, dk = q.shape
    vh, dv = v.shape
    g_head = h // (vh // kh)  # the key head this value head reads (consecutive groups)
    if kh < vh:
        group_of = [x for x in range(vh) if x // (vh // kh) == g_head]
        words = say("linear.head_shared", H=str(vh), d_k=str(dk), d_v=str(dv), g=str(g_head), first=str(group_of[0]),
                    last=str(group_of[-1]))
    else:
        words = say("linear.head", H=str(vh), d_k=str(dk), d_v=str(dv))
    yield line((f"head {h}", "bold underline"), words)
    sl = f"[{g_head}]"
    yield ctx.eq("", f"{L}_q{sl}", ctx.v(q[g_head]))
    yield ctx.eq("", f"{L}_k{sl}", ctx.v(k[g_head]))
    yield ctx.eq("", f"{L}_v[{h}]", ctx.v(v[h]))
    beta, g = ctx.at(a + "hook_beta", t), ctx.at(a + "hook_decay", t)
    if beta is None or g is None:
        return
    b, gh = float(beta[h]), float(g[h])
    yield line(say("linear.beta", h=str(h), beta=num(b, p), L=L))
    yield line(say("linear.decay", h=str(h), g=num(gh, p), keep=num(np.exp(gh), p), L=L))
    S_prev, cached = state_before(ctx, t, layer)
    if t > 0 and S_prev is None:  # the previous position's state is not in this trace
        return
    if S_prev is None:
        yield line(say("linear.zeros", L=L))
    else:
        where = say("linear.from_cache", k=str(cached)) if cached is not None else ""
        yield from state_view(ctx, np.asarray(S_prev[h]), say("linear.before", L=L, prev=ctx.labels[t - 1], cached=where))
    _, recalled, error, _ = update(None if S_prev is None else S_prev[h], k[g_head], v[h], b, gh)
    yield ctx.eq(say("linear.recall", L=L), "Sᵀk", ctx.v(recalled))
    yield ctx.eq(say("linear.error", L=L), "v − Sᵀk", ctx.v(error))
    after = ctx.at(a + "hook_state", t)
    if after is not None:
        yield from state_view(ctx, np.asarray(after[h]), say("linear.write", L=L))
        cell = worked_cell(None if S_prev is None else S_prev[h], k[g_head], b, gh, error, after[h])
        yield line(cell_words(cell, p))
    o = ctx.at(a + "hook_z", t)
    if o is not None:
        yield ctx.eq(say("linear.read", d_k=str(dk), L=L, h=str(h)), f"o_{L}", ctx.v(o[h]))
    gate, gated = ctx.at(a + "hook_gate_z", t), ctx.at(a + "hook_z_gated", t)
    if gate is not None:
        yield ctx.eq(say("linear.gate", h=str(h)), "gate", ctx.v(gate[h]))
    if gated is not None and o is not None:
        rms = float(np.sqrt(np.mean(np.asarray(o[h], dtype=np.float64) ** 2)))
        yield ctx.eq(say("linear.gated", rms=num(rms, p)), f"o_{L} gated", ctx.v(gated[h]))


def head_line(ctx: Ctx, t: int, layer: int, h: int):
    """One head in brief: its β, what its state keeps, and its gated read-out."""
    a, p = _prefix(layer), ctx.p
    beta, g, gated = ctx.at(a + "hook_beta", t), ctx.at(a + "hook_decay", t), ctx.at(a + "hook_z_gated", t)
    if beta is None or g is None or gated is None:
        return Text("")
    return ctx.eq(say("linear.compact", h=str(h), beta=num(float(beta[h]), p), keep=num(np.exp(float(g[h])), p)),
                  f"o_{ctx.labels[t]} gated", ctx.v(gated[h]))


# --------------------------------------------------------------------------- what the layer keeps


def keeps_words(cfg, layer: int, n: int) -> str:
    """What this linear layer keeps (its state and the convolution's last inputs, in bytes) and, when the
    model has softmax layers too, what one of them keeps per token: the lesson of a hybrid model (the
    walkthrough and the demo)."""
    kind = cfg.attention_of(layer)
    shapes = kind.shapes(cfg, layer)
    _, K = shapes["W_conv"]
    W_V = shapes["W_V"]  # [v_head, d_model, d_v]
    W_K = shapes["W_K"]  # [k_head, d_model, d_k]
    out = say("linear.keeps", d_k=str(W_K[2]), d_v=str(W_V[2]), H=str(W_V[0]), before=str(K - 1),
              bytes=size(kind.cache_bytes(cfg.layer(layer), n, layer)), dtype=cfg.dtype)
    grows, _ = cache_layers(cfg)
    if grows:
        g = grows[0]
        other, view = cfg.attention_of(g), cfg.layer(g)
        out += say("linear.versus", per_token=size(other.cache_bytes(view, 1, g)), kv=str(view.kv_heads), d_head=str(view.d_head),
                   now=size(other.cache_bytes(view, n, g)), n=str(n), full=size(other.cache_bytes(view, cfg.n_ctx, g)),
                   n_ctx=f"{cfg.n_ctx:,}")
    return out


# --------------------------------------------------------------------------- the overview and the heatmap


def overview_cells(ctx: Ctx, layer: int, t: int, heads: int) -> list[str] | None:
    """The `layers` overview's cells of a linear layer for token t: per head, what the state keeps of
    itself (exp g) and how much the token writes (β); None when not recorded."""
    a = _prefix(layer)
    return cells(ctx.at(a + "hook_beta", t), ctx.at(a + "hook_decay", t), heads)


def overview_cells_of(step, layer: int, row: int, heads: int) -> list[str] | None:
    """`overview_cells` from one recorded pass (`step`, a trace) at its row `row` (the demo's)."""
    a = _prefix(layer)
    if a + "hook_beta" not in step or a + "hook_decay" not in step:
        return None
    return cells(step[a + "hook_beta"][row], step[a + "hook_decay"][row], heads)


def cells(beta, g, heads: int) -> list[str] | None:  # [v_head] ×2 → "×.91 β.62" per head
    if beta is None or g is None:
        return None
    return [say("linear.cell", keep=cprob(np.exp(float(g[h]))), beta=cprob(float(beta[h]))) if h < len(beta) else ""
            for h in range(heads)]


def state_grid(ctx: Ctx, layer: int) -> Text | None:
    """The heatmap section's grid of a linear layer: each token's (row) share of the state each head
    keeps (exp g) and how much it writes (β), one column per head, in the attention heatmap's digits and
    colours; None when the layer recorded neither."""
    from .heatmap import _style, glyph

    a = _prefix(layer)
    beta, g = ctx.get(a + "hook_beta"), ctx.get(a + "hook_decay")
    if beta is None or g is None:
        return None
    keep = np.exp(np.asarray(g, dtype=np.float64))  # [pos, v_head]
    beta = np.asarray(beta, dtype=np.float64)  # [pos, v_head]
    labels = ctx.labels[: len(beta)]
    heads = beta.shape[1]
    shown = min(heads, max(1, (ctx.width - 8) // 6))  # two blocks of 3-wide cells
    lw = max(len(s) for s in labels) + 1
    out = Text(no_wrap=True, overflow="crop")
    out.append(" " * lw)
    for name in ("×", "β"):
        out.append(" " + "".join(f"{name}{h}".rjust(3) for h in range(shown)))
    for q, lab in enumerate(labels):
        out.append("\n" + lab.rjust(lw - 1) + " ", style="bold")
        for block in (keep, beta):
            out.append(" ")
            for h in range(shown):
                w = float(block[q, h])
                out.append(glyph(w).rjust(3), style=_style(w))
    return out


def heatmap_note(ctx: Ctx, layer: int) -> list:
    """What the heatmap section shows of a linear layer: why there is no attention map, and its state grid."""
    drawn = [l for l in range(ctx.cfg.n_layers) if ctx.records(f"blocks.{l}.attn.hook_pattern")]
    out = [Text(say("linear.heatmap", layer=str(layer)) + (say("linear.heatmap_other", other=str(drawn[0])) if drawn else ""),
                style="dim")]
    grid = state_grid(ctx, layer)
    if grid is not None:
        out += [Text(say("linear.grid", layer=str(layer)), style="bold"), grid, Text(say("linear.grid_legend"), style="dim")]
    return out


def output_gate(ctx: Ctx, t: int, a: str, h: int):
    """Qwen3.5's gated softmax attention: head h's weighted sum times sigmoid(its gate), what W_O merges."""
    gate, gated = ctx.at(a + "hook_gate", t), ctx.at(a + "hook_z_gated", t)
    if gate is not None and gated is not None:
        yield ctx.eq(say("gate.sigmoid", h=str(h)), "sigmoid(gate)", ctx.v(sigmoid(np.asarray(gate[h], dtype=np.float64))))
        yield ctx.eq(say("gate.out", h=str(h)), f"{ctx.labels[t]}_z gated", ctx.v(gated[h]))
        yield from ctx.checks_at(a + "hook_z_gated", t, h)
