"""After the last layer: every layer at a glance for the last token, "how to predict G" (the final
vector, W_U, the logits, softmax with the temperature, the chosen token, ABCDEF → ABCDEFG), and
every position's prediction with its loss (the seed Q&A: every row is computed, generation reads
the last). Reads the recorded arrays only."""

from __future__ import annotations

import numpy as np
from rich.console import Group, group
from rich.table import Table
from rich.text import Text

from ..sections import renders
from ..tokenizers.tokens import label, named
from .context import Ctx
from .experts import experts_of_layer, experts_overview
from .linear import overview_cells
from .fmt import count, integer, layer_runs, num, prob, shape, span, stok
from .sampling import sampling_stages
from .text import compact_rows, indent, line, missing, section
from .view import BRIEF_HEADS
from .words import say
from ..core.equations import largest_first


def _head_cells(ctx: Ctx, rows) -> list[str]:
    """Per head, the key with the largest weight. `rows`: per head a [key_pos] array, or None."""
    H = ctx.cfg.n_heads
    if rows is None:
        return ["—"] * (H if H <= BRIEF_HEADS else 1)
    best = [int(np.argmax(r)) for r in rows]
    if H <= BRIEF_HEADS:
        return [f"{ctx.labels[j]} {num(r[j], 2)}" for j, r in zip(best, rows)]
    return [" ".join(ctx.labels[j] for j in best)]


def _layer_cells(ctx: Ctx, layer: int, t: int, rows) -> list[str]:
    """The head cells of `layer` for token t: the key each head weighs most, or, on a layer with no
    weights (linear attention), what each head's state keeps and how much t writes."""
    cells = _head_cells(ctx, rows)
    states = overview_cells(ctx, layer, t, ctx.cfg.n_heads) if rows is None else None
    if states is None:
        return cells
    return states if len(cells) > 1 else [" ".join(states[:2]) + " …"]


def _overview_table(ctx: Ctx, first_col: str) -> Table:
    H = ctx.cfg.n_heads
    tab = Table(padding=(0, 1), show_edge=True)
    tab.add_column(first_col, justify="right", style="bold", no_wrap=True)  # 80 columns keep every number whole
    tab.add_column("‖x‖ in", justify="right", no_wrap=True)
    tab.add_column("‖x‖ out", justify="right", no_wrap=True)
    if H <= BRIEF_HEADS:
        for h in range(H):  # the sentence above says what the cell is: the most-attended token and its weight
            tab.add_column(f"head {h}", justify="left", no_wrap=True)
    else:
        tab.add_column(say("layers.most", last=str(H - 1)), no_wrap=False)
    return tab


def unchanged_layers(get, n_layers: int) -> list[int]:
    """The layers whose output is their input at every position (to 1e-6 of its size), read from the
    recorded residual stream (`get(hook)` → [pos, d_model] or None): the article scenario's 23 pass-throughs."""
    out = []
    for layer in range(n_layers):
        xi, xo = get(f"blocks.{layer}.hook_resid_pre"), get(f"blocks.{layer}.hook_resid_post")
        if xi is None or xo is None or np.shape(xi) != np.shape(xo):
            continue
        xi, xo = np.asarray(xi, dtype=float), np.asarray(xo, dtype=float)
        if np.all(np.isfinite(xi)) and np.allclose(xo, xi, rtol=1e-6, atol=1e-6 * max(float(np.abs(xi).max()), 1e-30)):
            out.append(layer)
    return out


def pass_through_words(layers: list[int], n_layers: int) -> str | None:
    """What a run's pass-through layers do, in one sentence (the terminal, the demo and the page)."""
    if not layers:
        return None
    rest = [l for l in range(n_layers) if l not in layers]
    doing = f"only {layer_runs(rest)} changes them" if rest else "no layer changes them"
    return (f"In this model {layer_runs(layers)} of the {n_layers} pass every vector on unchanged (output = input, "
            f"no context mixed in); {doing}.")


def _norm(x, p: int) -> str:
    return num(np.linalg.norm(np.asarray(x, dtype=float)), p) if x is not None else "—"


@renders("layers")
@group()
def layers_section(ctx: Ctx, number: str):
    cfg = ctx.cfg
    if cfg.n_layers == 0:
        return
    t = ctx.token if ctx.token is not None else ctx.n - 1
    L = ctx.labels[t]
    yield section(f"{number} · All {count(cfg.n_layers, 'layer')}")
    yield line(say("layers.intro", L=L, t=str(t)))
    tab = _overview_table(ctx, "layer")
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."
        rows = [ctx.att(b + "attn.hook_pattern", h, t) for h in range(cfg.n_heads)]
        tab.add_row(str(layer), _norm(ctx.at(b + "hook_resid_pre", t), ctx.p), _norm(ctx.at(b + "hook_resid_post", t), ctx.p),
                    *_layer_cells(ctx, layer, t, None if rows[0] is None else rows))
    yield tab
    if any(overview_cells(ctx, layer, t, 1) is not None for layer in range(cfg.n_layers)):
        yield line(say("linear.overview", L=L))
    routed = experts_overview(ctx, t)  # a mixture of experts: which experts the token went to, layer by layer
    if routed is not None:
        yield line(say("experts.overview", L=L))
        yield routed
    same = pass_through_words(unchanged_layers(ctx.get, cfg.n_layers), cfg.n_layers)
    if same:
        yield line(same)
    if ctx.view.brief:
        yield Text("--full: a table per layer with a row per token; --layer N: layer N token by token", style="dim")
        return
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
                        _norm(None if xo is None else xo[s], ctx.p), *_layer_cells(ctx, layer, s, rows))
        yield tab
        yield experts_of_layer(ctx, layer)  # a mixture of experts: each token's experts in this layer


def _top(probs: np.ndarray, k: int) -> np.ndarray:
    k = min(k, probs.shape[-1])
    idx = np.argpartition(-probs, k - 1)[:k]  # [k]
    return idx[largest_first(probs[idx])]  # [k] most likely first


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
    if ctx.text(new_id) != ctx.labels[n_before]:
        t.append(f"   ({named(n_before, ctx.text(new_id))})")
    return t


def predicted(pos: int, text: str) -> str:
    """The token predicted for position `pos`, as a sentence says it: its letter when the text is the letter
    ("G"), else the text at its place ("↵ at H"), never "predicts H" for a newline."""
    said = named(pos, text)
    return label(pos) if said.startswith(f"{label(pos)} = ") else said


@renders("predict")
@group()
def predict_section(ctx: Ctx, number: str):
    cfg = ctx.cfg
    last = ctx.n - 1
    chosen = ctx.step.arrays.get("sample.token")
    L, G = ctx.labels[last], ctx.labels[ctx.n] if chosen is None else predicted(ctx.n, ctx.text(int(chosen)))
    yield section(f"{number} · Predicting the next token (how to predict {G})")
    yield line(say("predict.intro", layers=count(cfg.n_layers, "layer"), L=L, G=G))
    yield indent(prediction(ctx))
    if not ctx.gen.meta.get("trained") and ctx.gen.meta.get("weights") != "given":
        yield Text(say("predict.untrained"), style="yellow")


@group()
def prediction(ctx: Ctx):
    """The final vector, W_U, the logits, softmax with the temperature, the chosen token."""
    cfg, step, p = ctx.cfg, ctx.step, ctx.p
    last = ctx.n - 1
    L, G = ctx.labels[last], ctx.labels[ctx.n]
    if cfg.layer_norm:
        ln = ctx.get("ln_final.hook_normalized")
        if ln is not None:
            yield ctx.eq(cfg.norm_kind.final(), f"{cfg.norm_kind.short}(out_{L})", ctx.v(ln[-1]))
    fin = ctx.get("unembed.hook_in")
    if fin is not None:
        yield ctx.eq(say("predict.final", L=L), "f", ctx.v(fin[-1]))
        yield from ctx.checks("unembed.hook_in", (last,))
    tied = say("predict.tied") if cfg.tied_unembed else ""
    unembed = say("predict.unembed", shape=shape(cfg.d_model, cfg.d_vocab), tied=tied)
    logits = ctx.get("logits")
    if logits is not None:
        if cfg.final_softcap is not None:  # Gemma 2: the logits soft-capped after W_U
            cap, top = cfg.final_softcap, int(np.argmax(logits[-1]))
            yield ctx.eq(say("predict.softcapped", unembed=unembed, formula=cfg.softcap_kind.formula.format(cap=f"{cap:g}")),
                         "logits", ctx.v(logits[-1]))
            after = float(logits[-1][top])
            before = float(cap * np.arctanh(np.clip(after / cap, -1 + 1e-7, 1 - 1e-7)))  # the capped logit's x·W_U
            yield line(cfg.softcap_kind.words("logits", cap, before, after) + " (the top logit)")
        else:
            yield ctx.eq(unembed, "logits", ctx.v(logits[-1]))
        yield from ctx.checks("logits", (last,))
    temp = ctx.gen.settings.temperature
    scaled = ctx.get("sample.scaled")
    probs = ctx.get("sample.probs")
    chosen = step.arrays.get("sample.token")
    if temp == 0:
        yield line(say("predict.greedy"), (say("predict.greedy_bold"), "bold"), say("predict.greedy_rest"))
    yield from ctx.checks("sample.probs", ())
    if temp != 0 or "sample.penalized" in step.arrays:  # every stage of the draw: penalties, ÷ temperature, softmax,
        yield sampling_stages(step, ctx.tok, ctx.view)  # top-k, top-p, min-p, the uniform number
    elif probs is not None:
        yield top_table(ctx, probs, logits[-1] if logits is not None else None,
                             scaled if temp != 0 else None, step.arrays.get("sample.final") if temp != 0 else None,
                             int(chosen) if chosen is not None else None, temp, G)
        u = step.arrays.get("sample.uniform")
        if u is not None:
            yield line(f"the seeded uniform draw u = {num(float(u), max(p, 4))} falls in the band of the chosen "
                            f"token (bands stacked in order of probability, after the top-k / top-p cuts)")
    if chosen is not None:
        c = int(chosen)
        appended = len(ctx.gen.generated_ids) > 0
        end = c in ctx.tok.eos_ids
        name = ctx.text(c) if end or ctx.text(c) == G else named(ctx.n, ctx.text(c))
        yield (line((say("predict.chosen"), "bold"), (name, "bold"), f" (id {c}"
                    + (f", probability {prob(probs[c], p)})" if probs is not None else ")")))
        if end:
            yield line(sequence_line(ctx, ctx.n, None), ": " + say("predict.end", token=ctx.text(c)))
        else:
            yield (sequence_line(ctx, ctx.n, c) if appended else
                   line(sequence_line(ctx, ctx.n, None), " (not appended: --max-new-tokens 0)"))
        yield from ctx.checks("generated", (), None)


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


@renders("positions")
@group()
def every_position_section(ctx: Ctx, number: str):
    yield section(f"{number} · Every position predicts")
    yield every_position(ctx.step, ctx.tok, ctx.view)


def every_position(step, tokenizer, view) -> Group:
    """Each position's top next token, the token that actually follows, and its loss; generation uses the last row."""
    gone = missing(step, ["predict.top_token", "predict.top_prob", "predict.next_token", "predict.next_prob",
                          "loss.per_position"])
    title = Text("Every position predicts the next token", style="bold")
    if gone is not None:
        return Group(title, gone)
    p = view.precision
    top, top_p = step["predict.top_token"], step["predict.top_prob"]
    nxt, nxt_p, loss = step["predict.next_token"], step["predict.next_prob"], step["loss.per_position"]
    start, n = step.start, len(step.tokens)
    last = n - 1 - start  # row of the last position
    t = Table(title="Every position's prediction (teacher forcing, as in training)", title_justify="left")
    for col, just in (("", "left"), ("token", "left"), ("top next", "left"), ("p", "right"),
                      ("actual next", "left"), ("p(actual)", "right"), ("loss", "right"), ("", "left")):
        t.add_column(col, justify=just, no_wrap=True)
    for r in compact_rows(len(loss), view.brief):
        if r is None:
            t.add_row("…", "", "", "", "", "", "", "")
            continue
        pos = start + r
        t.add_row(label(pos), stok(tokenizer, step.tokens[pos]), stok(tokenizer, top[r]), prob(top_p[r], p),
                  stok(tokenizer, nxt[r]) + ("*" if r == last else ""), prob(nxt_p[r], p), num(loss[r], p),
                  "◀" if r == last else "", style="bold" if r == last else None)
    notes = [say("positions.rows")]
    if last > 0:
        mean = float(np.mean(loss[:last]))
        notes.append(say("positions.mean", rows=span(start, start + last), mean=num(mean, p),
                         n=integer(step.config.d_vocab), uniform=num(np.log(step.config.d_vocab), p)))
    notes.append(say("positions.last", L=label(n - 1)))
    if start > 0:
        notes.append(f"This pass computed only {span(start, n)}: the earlier rows came from the KV cache and have no "
                     "logits in this pass (the prompt pass, step 0, has every row).")
    return Group(t, *(Text(s) for s in notes))
