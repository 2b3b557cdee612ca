"""The demo's first screens, the input side of one layer: tokens, the embedding lookup, the position
vector, Query/Key/Value, scores and the causal mask, softmax, the weighted sum, and multi-head."""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ...tokenizers.tokens import label
from .. import fmt
from ..sinks import sink_logit
from ..storage import example_words
from ..summary import overflow_note
from ...sections import screen
from ..words import say
from ..text import folded
from .base import MARK, Demo, FirstThatFits, Step, mark, pairs, row_style, sentence, table


HAND_DIMS = 8  # a vector the screen shows whole (`Demo.vec`): its dot products can be worked out by hand


@screen("tokens")
def step_tokens(d: Demo) -> Step:
    tok = d.tokenizer
    t = table("", "token", "text", "id", "position", right=("id", "position"))
    for pos in d.positions():
        if pos is None:
            t.add_row("", "⋮", "", "", "", style="dim")
            continue
        t.add_row(mark(pos == d.focus), label(pos), d.text(pos, 0), str(int(d.trace.tokens[pos])), str(pos),
                  style=row_style(pos == d.focus))
    cfg = d.cfg
    about = sentence(("model: ", "bold"), say("demo.tokens.model", model=str(d.trace.meta.get("model", "?")),
                                              layers=fmt.count(cfg.n_layers, "layer"), d_model=str(cfg.d_model),
                                              heads=fmt.count(cfg.n_heads, "head"), n_vocab=f"{tok.n_vocab:,}",
                                              vocab=str(tok.name)))
    spaces = any(ch in d.text(p) for p in range(len(d.gen.steps[-1].tokens)) for ch in "␣↵")
    parts = [t, Text(say("demo.tokens.spaces") if spaces else ""), about]  # said under the table that shows them
    first = int(d.trace.tokens[0])
    if d.n > 1 and first in set(tok.special_tokens.values()):  # <bos> (Gemma, Llama): the letters are shifted by one
        parts.insert(1, Text(say("demo.tokens.bos", token=d.text(0), first=f"“{d.text(1)}”")))
    info = d.trace.meta.get("training")
    if isinstance(info, dict):
        parts.append(Text(say("demo.tokens.trained", steps=str(info.get("steps", "?")),
                              corpus=str(info.get("corpus_about") or info.get("corpus", "a corpus"))), style="italic"))
    elif not d.trace.meta.get("trained"):
        parts.append(Text(say("demo.tokens.untrained"), style="italic"))
    overflow = overflow_note(d.gen)
    if overflow is not None:
        parts += [Text(), overflow]
    return Step("Tokens", say("demo.tokens", n_vocab=f"{tok.n_vocab:,}", L=label(d.focus), mark=MARK), Group(*parts))


@screen("embedding")
def step_embedding(d: Demo) -> Step:
    E = d.trace["hook_embed"]  # [pos, d_model]
    t = table("", "token", "id", f"row of W_E  (the token's {d.cfg.d_model} numbers)", right=("id",))
    for pos in d.positions():
        if pos is None:
            t.add_row("", "⋮", "", "", style="dim")
            continue
        t.add_row(mark(pos == d.focus), d.who(pos, 0), str(int(d.trace.tokens[pos])), d.vec(E[pos]),
                  style=row_style(pos == d.focus))
    shape = sentence(("W_E", "bold"), say("demo.embed.shape", n_vocab=f"{d.cfg.d_vocab:,}", d_model=str(d.cfg.d_model)))
    learned = say("demo.embed.learned") if d.trace.meta.get("trained") else say("demo.embed.not_learned")
    return Step("Embedding lookup", say("demo.embed", d_model=str(d.cfg.d_model), learned=learned),
                Group(shape, Text(), t))


@screen("position")
def step_position(d: Demo) -> Step:
    cfg = d.cfg
    if not cfg.n_layers:
        return _no_layers_position(d)
    x = d.block("hook_resid_pre", 0)  # [pos, d_model] the input to the first layer
    f = d.focus
    how = cfg.position_kind.plain
    if d.rotary:
        return _rotary_position(d)
    if not cfg.has_positions:
        return Step("Position vector", say("demo.position.none"), Group(Text(say("demo.position.none_body"))))
    P = d.trace["hook_pos_embed"]  # [pos, d_model]
    E = d.trace["hook_embed"]  # [pos, d_model]
    eq = pairs([
        (f"  E_{label(f)}", d.vector(E[f])),
        (f"+ P_{label(f)}", d.vector(P[f])),
        (f"= x_{label(f)}", d.vector(x[f], "bold")),
    ])
    where = Text(say("demo.position.where", L=label(f), id=str(int(d.trace.tokens[f])), t=str(f), place=str(f + 1)))
    t = table("", "token", "x = E + P  (every token)")
    for pos in d.positions():
        if pos is None:
            t.add_row("", "⋮", "", style="dim")
            continue
        t.add_row(mark(pos == f), d.who(pos, 0), d.vec(x[pos]), style=row_style(pos == f))
    return Step("Position vector", say("demo.position", how=how), Group(eq, Text(), where, Text(), t))


def _no_layers_position(d: Demo) -> Step:
    """A model without layers: E (+ P, where positions are added) goes straight to the final norm and W_U."""
    f, added = d.focus, d.cfg.has_positions and not d.rotary
    rows = [(f"  E_{label(f)}", d.vector(d.trace["hook_embed"][f]))]
    if added:
        rows.append((f"+ P_{label(f)}", d.vector(d.trace["hook_pos_embed"][f])))
    note = say("demo.position.no_layers", what=f"E_{label(f)} + P_{label(f)}" if added else f"E_{label(f)}",
               rotary=say("demo.position.no_turn") if d.rotary else "")
    return Step("Position vector", say("layers.none"), Group(pairs(rows), Text(), Text(note)))


def _rotary_position(d: Demo) -> Step:
    """RoPE: no vector is added; the focus token's query turns by an angle proportional to its place."""
    cfg, f, h = d.cfg, d.focus, d.head
    angle = d.trace["rope.hook_angle"]  # [pos, d_head / 2]
    q, q_rot = d.block("attn.hook_q")[f, h], d.block("attn.hook_rot_q")[f, h]  # [d_head] each
    half = cfg.d_head // 2
    rows, normed = [(f"  {label(f)}_Q", d.vector(q))], ""
    qk = cfg.qk_norm_kind
    if qk.on:  # Qwen3 / OLMo 2: Q is normalized (and its gain applied) before it turns
        scale = d.block("attn.q_norm.hook_scale")[f]  # [head, 1] or [1]
        n_q = d.block("attn.q_norm.hook_normalized")[f].reshape(-1, cfg.d_head)[h]  # [d_head]
        rms = float(scale[h, 0] if qk.per_head else scale[0])
        rows.append((f"÷ {rms:.3f}", d.vector(n_q)))
        gain = cfg.norm_kind.gain_form.format(name="attn.q_norm")  # Gemma's: × (1 + w)
        normed = say("demo.rope.normed", how=qk.words.format(m="Q", scale=f"{rms:.3f}", gain=gain))
    eq = pairs([*rows, (f"↻ {label(f)}_Q↻", d.vector(q_rot, "bold"))])
    t = table("", "token", "pos", f"angle of pair 0, 1, … (radians, {half} pairs)", right=("pos",))
    for pos in range(min(d.n, 6)):
        t.add_row(mark(pos == f), d.who(pos, 0), str(pos), d.vec(angle[pos], dims=5), style=row_style(pos == f))
    heading = sentence((say("demo.rope.heading", L=label(f), t=str(f), head=d.ordinal_head(h), layer=d.layer_name()), "bold"))
    return Step("Position: rotated, not added", say("demo.rope", half=str(half), normed=normed),
                Group(heading, Text(), eq, Text(), t))


@screen("qkv", layers=True)
def step_qkv(d: Demo) -> Step:
    cfg, f, h = d.cfg, d.focus, d.head
    q = d.block("attn.hook_q")[:, h]  # [pos, d_head]
    k = d.block("attn.hook_k")[:, d.kv_head]  # [pos, d_head]
    v = d.block("attn.hook_v")[:, d.kv_head]  # [pos, d_head]
    shared = "" if cfg.kv_heads == cfg.n_heads else say(
        "demo.qkv.shared", g=str(d.kv_head), KV=str(cfg.kv_heads),
        others=fmt.count(cfg.n_heads // cfg.kv_heads - 1, "other query head"))
    where = sentence((f"{d.layer_name()}, ", "bold"), say("demo.qkv.where", head=d.ordinal_head(h), d_model=str(cfg.d_model),
                                                    d_head=str(cfg.d_head), shared=shared))
    qline = sentence((say("demo.query", L=label(f), r=""), "bold"), d.vec(q[f]))
    t = Table.grid(padding=(0, 2))
    t.add_column(no_wrap=True)
    t.add_column(no_wrap=True, style="bold")
    t.add_column(no_wrap=True)
    t.add_row("", Text("keys", style="bold"), Text(say("demo.qkv.keys"), style="italic"))
    for pos in range(f + 1):
        t.add_row(mark(pos == f), f"{label(pos)}_K", d.vec(k[pos]), style=row_style(pos == f))
    t.add_row("", Text("values", style="bold"), Text(say("demo.qkv.values"), style="italic"))
    for pos in range(f + 1):
        t.add_row(mark(pos == f), f"{label(pos)}_V", d.vec(v[pos]), style=row_style(pos == f))
    stored = [Text(w, style="dim") for w in example_words(d.gen.meta, f"blocks.{d.layer}.attn.W_Q", "W_Q")]  # how the file keeps it
    parts = [where, *stored, Text(), qline, Text(), t]
    if f + 1 < d.n:
        hidden = f"{label(f + 1)}–{label(d.n - 1)}" if f + 2 < d.n else label(f + 1)
        parts += [Text(), Text(say("demo.qkv.later", hidden=hidden, L=label(f)))]
    ln = f" ({cfg.norm_kind.plain if cfg.norm_place_kind.before else cfg.norm_place_kind.plain})" if cfg.layer_norm else ""
    return Step("Query, Key and Value", say("demo.qkv", norm=ln), Group(*parts))


def _scores_table(d: Demo, hide: bool) -> FirstThatFits:
    """The keys and their scores; on a narrow screen each K shows fewer of its numbers, not a cut score."""
    return FirstThatFits(*(_scores_rows(d, hide, lead) for lead in (4, 3, 2)))


def _scores_rows(d: Demo, hide: bool, lead: int) -> Table:
    cfg, f, h = d.cfg, d.focus, d.head
    dots = d.block("attn.hook_dots")[h, f]  # [key_pos] raw Q·K
    scores = d.block("attn.hook_attn_scores")[h, f]  # [key_pos] scaled and masked
    _, k, r = d.query_key()  # [pos, d_head]
    cols = ["", "key", "K" + r] + ([] if hide else ["Q·K"])
    div = f"÷ √{cfg.attn_scalar or cfg.d_head:g}"  # Gemma: √query_pre_attn_scalar
    if cfg.scale_scores and not hide:
        cols.append(div)
    t = table(*cols, right=("Q·K", div))
    hidden = list(range(f + 1, d.n))
    rows = list(range(f + 1)) + [None if i is None else hidden[i] for i in folded(len(hidden), 3)]
    for pos in rows:
        if pos is None:
            t.add_row("", "⋮", *([""] * (len(cols) - 2)), style="dim")
            continue
        visible = pos <= f and (cfg.sliding_window is None or pos > f - cfg.sliding_window)
        row = [mark(pos == f), d.who(pos, 0), d.vec(k[pos], lead=lead) if visible else "hidden by the mask"]
        if not hide:
            row.append(d.num(dots[pos]) if visible else "masked")
            if cfg.scale_scores:
                row.append(d.num(scores[pos]))
        t.add_row(*row, style=row_style(pos == f) if visible else "dim")
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
        t.add_row(mark(i == d.focus), label(i).rjust(3) + " ", *cells, style=row_style(i == d.focus))
    return t


@screen("scores", layers=True)
def step_scores(d: Demo) -> Step:
    cfg, f = d.cfg, d.focus
    q, _, r = d.query_key()
    qline = sentence((say("demo.query", L=label(f), r=r), "bold"), d.vec(q[f]))
    if cfg.attn_scalar:  # Gemma: √query_pre_attn_scalar
        by = say("demo.scores.root", by=say("scores.by_scalar", scalar=f"{cfg.attn_scalar:g}"),
                 root=f"{np.sqrt(cfg.attn_scalar):.2f}") + say("demo.scores.not_d_head")
    else:
        by = say("demo.scores.root", by=say("scores.by_d_head", d_head=str(cfg.d_head)),
                 root=f"{np.sqrt(cfg.d_head):.2f}")
    scale = say("demo.scores.scaled", by=by) if cfg.scale_scores else say("demo.scores.unscaled")
    if cfg.attn_softcap is not None and cfg.scale_scores:  # Gemma 2: then soft-capped, before the mask
        dots, scores = d.block("attn.hook_dots")[d.head, f], d.block("attn.hook_attn_scores")[d.head, f]
        j = int(np.argmax(np.where(np.isfinite(scores), np.abs(dots), -1.0)))
        scale += say("demo.scores.softcap", cap=f"{cfg.attn_softcap:g}", L=label(j),
                     formula=cfg.softcap_kind.words("scores", cfg.attn_softcap, float(dots[j]) * cfg.scores_scale,
                                                    float(scores[j])))
    narration = (f"{say('scores.compare', L=label(f))} {say('scores.masked')}{scale}"
                 + (say("demo.scores.rotated") if r else ""))
    body = Group(qline, Text(), _scores_table(d, hide=False))
    if f + 1 >= d.n:  # no later key in the table to show the mask: draw the mask's grid instead
        first = say("demo.scores.mask_first", rows=str(MASK_ROWS), n=str(d.n)) if d.n > MASK_ROWS else ""
        body = Group(*body.renderables, Text(),
                     sentence((say("demo.scores.mask_title"), "bold"), say("demo.scores.mask", first=first)),
                     _mask_grid(d))
    question = Group(qline, Text(), _scores_table(d, hide=True))
    visible = ", ".join(f"Q·{label(j)}_K" for j in range(f + 1))
    by_hand = cfg.d_head <= HAND_DIMS  # every number of Q and K on the screen
    keys = " or ".join(f"{label(j)}_K" for j in range(f + 1)) if f < 3 else \
        say("demo.scores.which", first=label(0), last=label(f))
    ask = (say("demo.scores.ask_by_hand", dots=visible) if by_hand else
           say("demo.scores.ask_guess", L=label(f), keys=keys, d_head=str(cfg.d_head)))
    return Step("Scores and the mask", narration, body, question, ask=ask)


def sink(d: Demo) -> tuple[float, float | None] | None:
    """The shown head's attention sink (gpt-oss) for the followed token: its share of the weight and its
    logit, worked back from the recorded row (`render.sinks.sink_logit`); None without sinks."""
    share = d.trace.arrays.get(f"blocks.{d.layer}.attn.hook_sink_share")  # [head, pos]
    if share is None:
        return None
    s = float(share[d.head, d.focus])
    return s, sink_logit(d.block("attn.hook_attn_scores")[d.head, d.focus, : d.focus + 1], s)


def _softmax_table(d: Demo, hide: bool) -> Table:
    f, h = d.focus, d.head
    scores = d.block("attn.hook_attn_scores")[h, f]  # [key_pos]
    pattern = d.block("attn.hook_pattern")[h, f]  # [key_pos]
    visible = scores[: f + 1]  # [key_pos ≤ query]
    e = np.exp(visible - visible.max())  # [key_pos ≤ query] the by-hand step, on recorded scores
    sunk = sink(d)
    cols = ["", "key", "score"] + ([] if hide else ["e^(score − max)", "weight"])
    t = table(*cols, right=("score", "e^(score − max)", "weight"))
    for pos in range(min(d.n, f + 2)):
        vis = pos <= f
        row = [mark(pos == f), d.who(pos, 0), d.num(scores[pos])]
        if not hide:
            row += [d.num(e[pos]) if vis else "0", d.num(pattern[pos])]
        t.add_row(*row, style=row_style(pos == f) if vis else "dim")
    if f + 2 < d.n:
        t.add_row("", f"{label(f + 2)}…{label(d.n - 1)}" if f + 2 < d.n - 1 else label(f + 2), "−∞",
                  *([] if hide else ["0", d.num(0)]), style="dim")
    e_sink = share = 0.0
    if sunk is not None:  # one more score in the softmax, with no value: the sink's row
        share, logit = sunk
        e_sink = float(np.exp(logit - visible.max())) if logit is not None else np.nan
        t.add_row("", say("sink.row"), d.num(logit) if logit is not None else "—",
                  *([] if hide else [d.num(e_sink) if logit is not None else "—", d.num(share)]), style="italic")
    if not hide:
        t.add_row("", "sum", "", d.num(e.sum() + e_sink), d.num(pattern.sum() + share), style="bold")
    return t


@screen("softmax", layers=True)
def step_softmax(d: Demo) -> Step:
    f = d.focus
    scores = d.block("attn.hook_attn_scores")[d.head, f, : f + 1]
    body = Group(_softmax_table(d, hide=False))
    question = Group(_softmax_table(d, hide=True))
    listed, sunk = ", ".join(d.num(s) for s in scores), sink(d)
    if sunk is None:
        return Step("Softmax: scores become weights", say("demo.softmax"), body, question,
                    ask=say("demo.softmax.ask", scores=listed))
    share, logit = sunk
    narration = say("demo.softmax") + say("demo.softmax.sink", share=d.num(share), L=label(f), rest=d.num(1 - share))
    return Step("Softmax: scores become weights", narration, body, question,
                ask=say("demo.softmax.ask_sink", scores=listed, sink=d.num(logit) if logit is not None else "—"))


@screen("weighted_sum", layers=True)
def step_weighted_sum(d: Demo) -> Step:
    f, h = d.focus, d.head
    w = d.block("attn.hook_pattern")[h, f]  # [key_pos]
    v = d.block("attn.hook_v")[:, d.kv_head]  # [pos, d_head]
    z = d.block("attn.hook_z")[f, h]  # [d_head]
    seen = list(range(f + 1))
    shown = seen if len(seen) <= 6 else seen[:3] + seen[-3:]
    terms = [f"{d.num(w[j])}×{label(j)}_V" for j in shown]
    formula = " + ".join(terms) if len(seen) <= 6 else " + ".join(terms[:3]) + " + … + " + " + ".join(terms[3:])
    t = table("", "key", "weight", "× V", right=("weight",))
    for j in shown:
        t.add_row(mark(j == f), d.who(j, 0), d.num(w[j]), d.vec(v[j]), style=row_style(j == f))
    t.add_row("", "sum", d.num(w[: f + 1].sum()), Text(d.vec(z), style="bold"))
    new = say("demo.sum.vector", L=label(f))
    body = [sentence((f"{new} = ", "bold"), formula), Text(), t, Text(), pairs([(f"= {new}", d.vector(z))])]
    sunk = sink(d)
    if sunk is not None:  # the weights summed to less than 1: say where the rest went
        body += [Text(), Text(say("sink.share", h=str(h), share=d.num(sunk[0]), rest=d.num(1 - sunk[0])))]
    body = Group(*body)
    return Step("Weighted sum of values", say("demo.sum", L=label(f)), body)


@screen("multihead", layers=True)
def step_multihead(d: Demo) -> Step:
    cfg, f, l = d.cfg, d.focus, d.layer
    H = cfg.n_heads
    pattern = d.block("attn.hook_pattern")[:, f]  # [head, key_pos]
    z = d.block("attn.hook_z")[f]  # [head, d_head]
    gated = f"blocks.{l}.attn.hook_z_gated" in d.trace  # an output gate: W_O merges the gated sums
    merged = d.block("attn.hook_z_gated")[f] if gated else z  # [head, d_head]
    t = table("head", "looks most at", "its output z", right=("head",))
    heads = list(range(H)) if H <= 8 else list(range(4)) + list(range(H - 2, H))
    for hh in heads:
        j = int(np.argmax(pattern[hh]))
        t.add_row(str(hh), f"{label(j)} ({d.num(pattern[hh, j])})", d.vec(z[hh]))
        if H > 8 and hh == 3:
            t.add_row("⋮", "", "")
    concat = merged.reshape(-1)  # [head * d_head]
    out = d.block("hook_attn_out")[f]  # [d_model]
    rows = [
        (f"{'gated, ' if gated else ''}concat {H}×{cfg.d_head}", d.vector(concat)),
        (f"× W_O [{H * cfg.d_head}×{cfg.d_model}]", d.vector(out)),
    ]
    # each row a new vector: the running sum, what the MLP adds to it, and the layer's output once (bold)
    done = f"= out of layer {l}"
    if cfg.residual and cfg.mlp:
        rows.append(("+ x (residual)", d.vector(d.block("hook_resid_mid")[f])))
        rows.append((f"{cfg.mlp_kind.name} {cfg.d_model}→{cfg.d_mlp}→{cfg.d_model} adds", d.vector(d.block("hook_mlp_out")[f])))
        rows.append((f"+ that {done}", d.vector(d.block("hook_resid_post")[f], "bold")))
    elif cfg.residual or cfg.mlp:  # the one step left gives the layer's output
        step = "+ x (residual)" if cfg.residual else f"{cfg.mlp_kind.name} {cfg.d_model}→{cfg.d_mlp}→{cfg.d_model}"
        rows.append((f"{step} {done}", d.vector(d.block("hook_resid_post")[f], "bold")))
    else:
        rows[-1] = (f"{rows[-1][0]} {done}", d.vector(out, "bold"))
    eq = pairs(rows)
    multi = (say("heads.one") if H == 1 else say("heads.many", H=str(H))) + " "
    rest = []
    if cfg.residual:
        rest.append(say("demo.heads.residual"))
    if cfg.mlp:
        rest.append(cfg.mlp_kind.plain)
    tail = say("demo.heads.then", rest=" and ".join(rest)) if rest else say("demo.heads.neither")
    return Step("Multi-head: concat and W_O", multi + tail, Group(sentence((f"{label(f)}, {d.layer_name()}", "bold")), Text(), t, Text(), eq))
