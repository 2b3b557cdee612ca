"""The demo's first screens, the input side of one layer: tokens, the embedding lookup, the position
vector, Query/Key/Value, scores and the causal mask, softmax, the weighted sum, and multi-head."""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ...tokens import label
from .. import fmt
from ..storage import example_words
from ..summary import overflow_note
from ..words import say
from .base import MARK, Demo, Step, mark, pairs, row_style, sentence, table



HAND_DIMS = 8  # a vector the screen shows whole (`Demo.vec`): its dot products can be worked out by hand
SPACE_WORDS = "␣ marks a leading space (␣B is \" B\"), ↵ a line break. "


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
    about = sentence(("model: ", "bold"), f"{d.trace.meta.get('model', '?')} — {fmt.count(cfg.n_layers, 'layer')}, "
                  f"{cfg.d_model} numbers per token (d_model), {fmt.count(cfg.n_heads, 'head')}, "
                  f"vocabulary of {tok.n_vocab:,} tokens ({tok.name})")
    spaces = any(ch in d.text(p) for p in range(len(d.gen.steps[-1].tokens)) for ch in "␣↵")
    parts = [t, Text(SPACE_WORDS.strip() if spaces else ""), about]  # said under the table that shows them
    info = d.trace.meta.get("training")
    if isinstance(info, dict):
        parts.append(Text(f"Trained by `tracer train` ({info.get('steps', '?')} steps) on "
                          f"{info.get('corpus_about') or info.get('corpus', 'a corpus')}.", style="italic"))
    elif not d.trace.meta.get("trained"):
        parts.append(Text("The weights are not trained (seeded or set by hand): the arithmetic is real, but "
                          "what it predicts was not learned from text.", style="italic"))
    overflow = overflow_note(d.gen)
    if overflow is not None:
        parts += [Text(), overflow]
    return Step(
        "Tokens",
        f"The model never sees words, only numbers: the prompt is cut into tokens, pieces from a fixed "
        f"vocabulary of {tok.n_vocab:,}, each one an id. Like the article, we name them A, B, C, … by place; "
        f"positions, layers, heads and passes (a pass: one run of the model, which chooses one new token) count "
        f"from 0, as in the code. We follow {label(d.focus)} ({MARK}) through the first layer.",
        Group(*parts),
    )


def step_embedding(d: Demo) -> Step:
    E = d.trace["hook_embed"]  # [pos, d_model]
    t = table("", "token", "id", f"row of W_E  (the token's {d.cfg.d_model} numbers)", right=("id",))
    for pos in d.positions():
        if pos is None:
            t.add_row("", "⋮", "", "", style="dim")
            continue
        t.add_row(mark(pos == d.focus), d.who(pos, 0), str(int(d.trace.tokens[pos])), d.vec(E[pos]),
                  style=row_style(pos == d.focus))
    shape = sentence(("W_E", "bold"), f"  [{d.cfg.d_vocab:,} tokens × {d.cfg.d_model} numbers]: one row per token "
                  f"of the vocabulary")
    return Step(
        "Embedding lookup",
        f"Each token id picks one row of the embedding matrix W_E. That row is the token's starting vector: "
        f"{d.cfg.d_model} numbers " + ("the model learned in training" if d.trace.meta.get("trained") else
                                       "which a trained model would have learned (these are set by hand or at random)")
        + " (the article imagines them as features like color or 'is it alive'). Nothing is computed yet — "
        "it is a table lookup.",
        Group(shape, Text(), t),
    )


def step_position(d: Demo) -> Step:
    cfg = d.cfg
    x = d.block("hook_resid_pre", 0)  # [pos, d_model] the input to the first layer
    f = d.focus
    how = cfg.position_kind.plain
    if d.rotary:
        return _rotary_position(d)
    if not cfg.has_positions:
        body = Group(Text("This model adds no position vector: the first layer's input is the embedding itself."))
        return Step("Position vector", "Some models add no position vector and let attention work order out "
                    "from the mask alone. This one is such a model.", body)
    P = d.trace["hook_pos_embed"]  # [pos, d_model]
    E = d.trace["hook_embed"]  # [pos, d_model]
    eq = pairs([
        (f"  E_{label(f)}", d.vec(E[f])),
        (f"+ P_{label(f)}", d.vec(P[f])),
        (f"= x_{label(f)}", Text(d.vec(x[f]), style="bold")),
    ])
    where = Text(f"E_{label(f)}: row {int(d.trace.tokens[f])} of W_E;  P_{label(f)}: the position vector of position {f} "
                 f"(row {f} of W_pos; the article counts places from 1 and calls it P{f + 1});  "
                 f"x_{label(f)}: the first layer's input")
    t = table("", "token", "x = E + P  (every token)")
    for pos in d.positions():
        if pos is None:
            t.add_row("", "⋮", "", style="dim")
            continue
        t.add_row(mark(pos == f), d.who(pos, 0), d.vec(x[pos]), style=row_style(pos == f))
    return Step(
        "Position vector",
        f"The same word at a different place must look different, so each position adds its own position "
        f"vector: P_A at position 0, P_B at position 1, and so on (the article's P1, P2, …). {how} Token vector "
        f"plus position vector is what enters the first layer.",
        Group(eq, Text(), where, Text(), t),
    )


def _rotary_position(d: Demo) -> Step:
    """RoPE: no vector is added; the focus token's query turns by an angle proportional to its place."""
    cfg, f, h = d.cfg, d.focus, d.head
    angle = d.trace["rope.hook_angle"]  # [pos, d_head / 2]
    q, q_rot = d.block("attn.hook_q")[f, h], d.block("attn.hook_rot_q")[f, h]  # [d_head] each
    half = cfg.d_head // 2
    rows, normed = [(f"  {label(f)}_Q", d.vec(q))], ""
    qk = cfg.qk_norm_kind
    if qk.on:  # Qwen3 / OLMo 2: Q is normalized (and its gain applied) before it turns
        scale = d.block("attn.q_norm.hook_scale")[f]  # [head, 1] or [1]
        n_q = d.block("attn.q_norm.hook_normalized")[f].reshape(-1, cfg.d_head)[h]  # [d_head]
        rms = float(scale[h, 0] if qk.per_head else scale[0])
        rows.append((f"÷ {rms:.3f}", d.vec(n_q)))
        normed = " " + qk.words.format(m="Q", scale=f"{rms:.3f}", gain="× attn.q_norm.w") + "; only then it turns."
    eq = pairs([*rows, (f"↻ {label(f)}_Q↻", Text(d.vec(q_rot), style="bold"))])
    t = table("", "token", "pos", f"angle of pair 0, 1, … (radians, {half} pairs)", right=("pos",))
    for pos in range(min(d.n, 6)):
        t.add_row(mark(pos == f), d.who(pos, 0), str(pos), d.vec(angle[pos], dims=5), style=row_style(pos == f))
    return Step(
        "Position: rotated, not added",
        f"This model adds no position vector. Instead, in every layer, each query and key is rotated by its "
        f"position (rotary position embedding, RoPE): the numbers come in pairs (q_i, q_(i+{half})), and each "
        f"pair turns by position × θ_i, fast for the first pairs and slow for the last. Two rotated vectors' dot "
        f"product then depends only on how far apart the tokens are, which is what attention needs to know.{normed}",
        Group(sentence((f"{label(f)} at position {f}, {d.ordinal_head(h)}, first layer", "bold")), Text(), eq, Text(), t),
    )


def step_qkv(d: Demo) -> Step:
    cfg, f, h = d.cfg, d.focus, d.head
    q = d.block("attn.hook_q")[:, h]  # [pos, d_head]
    k = d.block("attn.hook_k")[:, d.kv_head]  # [pos, d_head]
    v = d.block("attn.hook_v")[:, d.kv_head]  # [pos, d_head]
    where = sentence(("first layer, ", "bold"), f"{d.ordinal_head(h)}: W_Q, W_K, W_V are each "
                  f"[{cfg.d_model} × {cfg.d_head}]" + (
                      f"; K and V come from key/value head {d.kv_head} of {cfg.kv_heads}, shared with "
                      f"{fmt.count(cfg.n_heads // cfg.kv_heads - 1, 'other query head')}" if cfg.kv_heads < cfg.n_heads else ""))
    qline = sentence((f"{label(f)}'s query  Q = ", "bold"), d.vec(q[f]))
    t = Table.grid(padding=(0, 2))
    t.add_column(no_wrap=True)
    t.add_column(no_wrap=True, style="bold")
    t.add_column(no_wrap=True)
    t.add_row("", Text("keys", style="bold"), Text("what each token offers to be found by", style="italic"))
    for pos in range(f + 1):
        t.add_row(mark(pos == f), f"{label(pos)}_K", d.vec(k[pos]), style=row_style(pos == f))
    t.add_row("", Text("values", style="bold"), Text("what each token hands over", style="italic"))
    for pos in range(f + 1):
        t.add_row(mark(pos == f), f"{label(pos)}_V", d.vec(v[pos]), style=row_style(pos == f))
    stored = [Text(w, style="dim") for w in example_words(d.gen.meta, "blocks.0.attn.W_Q", "W_Q")]  # how the file keeps it
    parts = [where, *stored, Text(), qline, Text(), t]
    if f + 1 < d.n:
        hidden = f"{label(f + 1)}–{label(d.n - 1)}" if f + 2 < d.n else label(f + 1)
        parts += [Text(), Text(f"{hidden}: later tokens. They have keys and values too, but {label(f)} may not "
                               f"look ahead (the causal mask, next step).")]
    ln = f" ({cfg.norm_kind.plain if cfg.norm_place_kind.before else cfg.norm_place_kind.plain})" if cfg.layer_norm else ""
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
    _, k, r = d.query_key()  # [pos, d_head]
    cols = ["", "key", "K" + r] + ([] if hide else ["Q·K"])
    div = f"÷ √{cfg.attn_scalar or cfg.d_head:g}"  # Gemma: √query_pre_attn_scalar
    if cfg.scale_scores and not hide:
        cols.append(div)
    t = table(*cols, right=("Q·K", div))
    hidden = list(range(f + 1, d.n))
    rows = list(range(f + 1)) + (hidden if len(hidden) <= 3 else hidden[:1] + [None] + hidden[-1:])
    for pos in rows:
        if pos is None:
            t.add_row("", "⋮", *([""] * (len(cols) - 2)), style="dim")
            continue
        visible = pos <= f and (cfg.sliding_window is None or pos > f - cfg.sliding_window)
        row = [mark(pos == f), d.who(pos, 0), d.vec(k[pos]) if visible else "hidden by the mask"]
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


def step_scores(d: Demo) -> Step:
    cfg, f = d.cfg, d.focus
    q, _, r = d.query_key()
    qline = sentence((f"{label(f)}'s query  Q{r} = ", "bold"), d.vec(q[f]))
    by = (f"√query_pre_attn_scalar = √{cfg.attn_scalar:g} ≈ {np.sqrt(cfg.attn_scalar):.2f} (Gemma's choice, not √d_head)"
          if cfg.attn_scalar else f"√d_head = √{cfg.d_head} ≈ {np.sqrt(cfg.d_head):.2f}")
    scale = (f" Then each score is divided by {by}, which keeps "
             "them in a range softmax handles well.") if cfg.scale_scores else \
        " (This model does not scale the scores, as in the article; GPT-2 divides them by √d_head.)"
    if cfg.attn_softcap is not None and cfg.scale_scores:  # Gemma 2: then soft-capped, before the mask
        dots, scores = d.block("attn.hook_dots")[d.head, f], d.block("attn.hook_attn_scores")[d.head, f]
        j = int(np.argmax(np.where(np.isfinite(scores), np.abs(dots), -1.0)))
        scale += (f" Gemma 2 then soft-caps them so none passes ±{cfg.attn_softcap:g}, before the mask: "
                  + cfg.softcap_kind.words("scores", cfg.attn_softcap, float(dots[j]) * cfg.scores_scale,
                                           float(scores[j])) + f" for {label(j)}'s key.")
    narration = (f"{say('scores.compare', L=label(f))} {say('scores.masked')}{scale}"
                 + (" Q and K are the rotated ones (the position screen)." if r else ""))
    body = Group(qline, Text(), _scores_table(d, hide=False))
    if f + 1 >= d.n:  # no later key in the table to show the mask: draw the mask's grid instead
        body = Group(*body.renderables, Text(),
                     sentence(("the causal mask", "bold"), ": ● may look, · hidden (row: the query, column: the key)"
                              + (f"; the first {MASK_ROWS} of {d.n} tokens" if d.n > MASK_ROWS else "")),
                     _mask_grid(d))
    question = Group(qline, Text(), _scores_table(d, hide=True))
    visible = ", ".join(f"Q·{label(j)}_K" for j in range(f + 1))
    by_hand = cfg.d_head <= HAND_DIMS  # every number of Q and K on the screen
    keys = " or ".join(f"{label(j)}_K" for j in range(f + 1)) if f < 3 else f"which of {label(0)}_K … {label(f)}_K"
    ask = (f"Work out {visible}: multiply Q and K number by number, then add up." if by_hand else
           f"Which key will {label(f)}'s query score highest: {keys}? (With {cfg.d_head} numbers each, too many to "
           f"multiply by hand: guess, then see.)")
    return Step("Scores and the mask", narration, body, question, ask=ask)


def _softmax_table(d: Demo, hide: bool) -> Table:
    f, h = d.focus, d.head
    scores = d.block("attn.hook_attn_scores")[h, f]  # [key_pos]
    pattern = d.block("attn.hook_pattern")[h, f]  # [key_pos]
    visible = scores[: f + 1]  # [key_pos ≤ query]
    e = np.exp(visible - visible.max())  # [key_pos ≤ query] the by-hand step, on recorded scores
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
    body = Group(
        sentence((f"{label(f)}'s new vector = ", "bold"), formula),
        Text(),
        t,
        Text(),
        pairs([(f"= {label(f)}'s new vector", d.vec(z))]),
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
    t = table("head", "looks most at", "its output z", right=("head",))
    heads = list(range(H)) if H <= 8 else list(range(4)) + list(range(H - 2, H))
    for hh in heads:
        j = int(np.argmax(pattern[hh]))
        t.add_row(str(hh), f"{label(j)} ({d.num(pattern[hh, j])})", d.vec(z[hh]))
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
        kind = cfg.mlp_kind.name
        rows.append((f"+ {kind} {cfg.d_model}→{cfg.d_mlp}→{cfg.d_model}", d.vec(d.block("hook_resid_post")[f])))
    rows.append((f"out of layer {l}", Text(d.vec(d.block("hook_resid_post")[f]), style="bold")))
    eq = pairs(rows)
    multi = (say("heads.one") if H == 1 else say("heads.many", H=str(H))) + " "
    rest = []
    if cfg.residual:
        rest.append("the input is added back (the residual connection)")
    if cfg.mlp:
        rest.append(cfg.mlp_kind.plain)
    tail = ("Then " + " and ".join(rest) + ".") if rest else \
        "Like the article's model, this one has no residual connection and no MLP."
    return Step("Multi-head: concat and W_O", multi + tail, Group(sentence((f"{label(f)}, first layer", "bold")), Text(), t, Text(), eq))
