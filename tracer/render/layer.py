"""One layer, token by token, in the seed article's words: the input ("A queries the embedding
matrix…", "+ position vector P1"), the layer norm, what the causal mask hides, each head's Q, K and V,
its scores and softmax weights, the weighted sum ("0.450×A_V + 0.550×B_V = …"), the heads merged
through W_O, the residual and the MLP. Llama-shaped blocks say where they differ: no position
vector but Q and K rotated by position (RoPE), the RMS norm without the mean, key/value heads
shared by groups of query heads, the gated SwiGLU MLP, a sliding window. Reads the recorded
arrays only (`Ctx`)."""

from __future__ import annotations

import numpy as np
from rich.console import group
from rich.table import Table
from rich.text import Text

from ..sections import renders
from .context import Ctx
from .experts import recorded, routing
from .linear import output_gate, state_steps
from .fmt import bar, letters, num, prob, shape
from .storage import example_words, split_words
from .text import indent, line, section
from .words import say
from ..core.equations import largest_first
from .sinks import sink_at, sink_logit, sink_share

BRIEF_KV_ROWS = 8  # brief mode lists K and V vectors when a token sees at most this many
BRIEF_KEYS = 8  # brief mode shows the strongest keys of a longer score table, and "… N more"


def strongest(pattern, k: int):  # [key_pos] → the k keys with the largest weights, in key order
    """The k keys a query weighs most (all of them when there are at most k)."""
    if pattern is None or len(pattern) <= k:
        return list(range(len(pattern) if pattern is not None else 0))
    return sorted(int(j) for j in largest_first(pattern)[:k])


@group()
def token_at_layer(ctx: Ctx, t: int, layer: int, parts: frozenset = frozenset({"embed", "attention"})):
    """Token t through one layer: its heading, then every step indented below it. `parts`: "embed"
    (the layer's input: embedding and position vector), "attention" (the rest of the layer)."""
    k = ctx.step_of(t)
    head_line = line((f"{ctx.labels[t]}:", "bold"), f"  {ctx.text(ctx.ids[t])}  (position {t})")
    if k > 0:
        head_line.append(say("token.generated", k=str(k)), style="italic")
    yield head_line
    yield indent(token_steps(ctx, t, layer, parts))


@group()
def token_steps(ctx: Ctx, t: int, layer: int, parts: frozenset):
    """Input, layer norm, what the mask hides, every shown head, then W_O, the residual and the MLP."""
    cfg, L = ctx.cfg, ctx.labels[t]
    b = f"blocks.{layer}."
    x = ctx.at(b + "hook_resid_pre", t)
    if layer == 0 and "embed" in parts:
        E = ctx.at("hook_embed", t)
        if E is not None:
            yield ctx.eq(say("embed.row", L=L, shape=shape(cfg.d_vocab, cfg.d_model), id=str(ctx.ids[t])), f"E_{L}", ctx.v(E))
            yield from ctx.checks_at("hook_embed", t)
        if cfg.has_positions:
            P = ctx.at("hook_pos_embed", t)
            kind = cfg.position_kind.short
            if P is not None:
                yield ctx.eq(say("embed.position", t=str(t), kind=kind), f"P_{L}", ctx.v(P))
                yield from ctx.checks_at("hook_pos_embed", t)
            if x is not None:
                yield ctx.eq(say("embed.sum", L=L), f"x_{L}", ctx.v(x))
        elif x is not None:
            if cfg.embed_scale:  # Gemma
                yield line(say("embed.scale", d_model=str(cfg.d_model), factor=f"{cfg.d_model ** 0.5:.{ctx.p}f}"))
            yield ctx.eq(cfg.position_kind.instead.format(L=L) + (say("embed.times", d_model=str(cfg.d_model)) if cfg.embed_scale else ""),
                         f"x_{L}", ctx.v(x))
    elif x is not None and layer > 0:
        yield ctx.eq(say("layer.input", L=L, prev=str(layer - 1)), f"x_{L}", ctx.v(x))
    if layer > 0 or "embed" in parts:
        yield from ctx.checks_at(b + "hook_resid_pre", t)
    if "attention" not in parts:
        return
    if cfg.layer_norm and cfg.norm_place_kind.before:  # (OLMo 2 has no norm before the sublayers)
        ln = ctx.at(b + "ln1.hook_normalized", t)
        if ln is not None:
            yield ctx.eq(cfg.norm_kind.before_attention(f"x_{L}"), f"{norm_name(cfg)}(x_{L})", ctx.v(ln))
            yield from ctx.checks_at(b + "ln1.hook_normalized", t)
    yield VIEWS[cfg.attention_of(layer).shown_as](ctx, t, layer)  # the heads' scores, or a linear layer's state
    yield after_attention(ctx, t, layer)


@group()
def heads_steps(ctx: Ctx, t: int, layer: int):
    """Softmax attention at token t: what the mask hides, RoPE's turn, every shown head's Q, K, V, scores,
    weights and weighted sum."""
    cfg = ctx.cfg
    heads = ctx.shown_heads()
    yield visibility(ctx, t, layer)
    if cfg.rotates(layer):
        yield rotation(ctx, t, layer)
        yield from ctx.checks_at("rope.hook_angle", t)
    for h in heads:
        if h < cfg.n_heads:
            yield head_at_token(ctx, t, layer, h)
    if len(heads) < cfg.n_heads:
        rest = [h for h in range(cfg.n_heads) if h not in heads]
        yield Text(f"heads {rest[0]}–{rest[-1]}: the same steps with their own W_Q, W_K, W_V "
                        f"(--head N shows one, --full shows all)", style="dim")


VIEWS = {"heads": heads_steps, "state": state_steps}  # `Sublayer.shown_as` → what shows the layer token by token


def norm_name(cfg) -> str:
    return cfg.norm_kind.short


def kv_head(cfg, h: int) -> int:
    """The key/value head query head h reads (itself, without grouped-query attention)."""
    return h // (cfg.n_heads // cfg.kv_heads)


def rotation(ctx: Ctx, t: int, layer: int = 0) -> Text:
    """RoPE at position t: the angle each pair of a head's dimensions turns by (from `rope.hook_angle`;
    Gemma 3's sliding-window layers: `rope.hook_angle_local`, of their own base)."""
    cfg, L = ctx.cfg, ctx.labels[t]
    local = cfg.rope_local_theta is not None and cfg.is_local(layer)
    angle = ctx.at("rope.hook_angle_local" if local else "rope.hook_angle", t)
    if angle is None:
        return Text("")
    half = len(angle)
    first = ", ".join(f"{float(a):.{ctx.p}f}" for a in angle[: min(4, half)])
    more = f", … ({half} angles)" if half > 4 else ""
    return line((say("rope.title"), "bold"), rotation_words(cfg, layer).format(L=L, t=str(t)),
                say("rope.here", angles=first + more), say("rope.then"))


def rotation_words(cfg, layer: int) -> str:
    """How RoPE turns a token's query and key in this layer, with the token's {L} and {t} left to fill
    (the page fills them too)."""
    local = cfg.rope_local_theta is not None and cfg.is_local(layer)
    theta = cfg.rope_local_theta if local else cfg.rope_theta
    base = (say("rope.local") if local else say("rope.global")) if cfg.rope_local_theta else ""
    here = cfg.layer(layer)  # the layer's own head size (Gemma 4's full layers are wider)
    dh, width = here.d_head, here.rotary_width
    scaling = cfg.rope_scaling if not local else None  # the local layers turn by their base alone
    if scaling and scaling.get("rope_type") == "proportional":  # Gemma 4: a fraction of the pairs turn
        said = say("rope.proportional", turned=str(int(float(scaling["partial_rotary_factor"]) * dh // 2)), half=str(dh // 2))
    else:
        said = scaling_words(cfg) if scaling else ""
    words = say("rope.turns", L="{L}", t="{t}", half=str(width // 2), theta=f"{theta:g}", d_head=str(width), base=base,
                scaling=said)
    return words + (say("rope.partial", width=str(width), d_head=str(dh)) if width != dh else "")


def scaling_words(cfg) -> str:
    """The RoPE scaling's words (Llama 3's, YaRN's, linear), or none."""
    from ..core.equations import rope_attention_factor

    rs = cfg.rope_scaling or {}
    key = {"llama3": "rope.scaling.llama3", "yarn": "rope.scaling.yarn", "linear": "rope.scaling.linear"}.get(
        rs.get("rope_type", rs.get("type")))
    return say(key, factor=f"{float(rs.get('factor', 1)):g}", mscale=f"{rope_attention_factor(rs):.4g}") if key else ""


def qk_normed(ctx: Ctx, prefix: str, t: int, m: str, head: int):
    """Qwen3's and OLMo 2's Q/K norm at token t: the table's words with this token's root mean
    square, and the normalized vector (this head's part of it)."""
    kind, L = ctx.cfg.qk_norm_kind, ctx.labels[t]
    scale, normalized = ctx.at(prefix + "hook_scale", t), ctx.at(prefix + "hook_normalized", t)
    if scale is None or normalized is None:
        return
    scale = scale[head] if kind.per_head else scale  # [1]
    part = normalized[head] if kind.per_head else normalized.reshape(-1, ctx.cfg.layer(layer_of(prefix)).d_head)[head]  # [d_head]
    gain = ctx.cfg.norm_kind.gain_words(prefix.split(".", 2)[-1].rstrip("."))
    yield ctx.eq(kind.words.format(m=m, scale=f"{float(scale[0]):.{ctx.p}f}", gain=gain), f"{L}_{m} normalized",
                 ctx.v(part))
    yield from ctx.checks_at(prefix + "hook_normalized", t)


def layer_of(name: str) -> int:
    """The layer of a name within `blocks.{l}.`."""
    return int(name.split(".", 2)[1])


def visibility(ctx: Ctx, t: int, layer: int = 0) -> Text:
    """Which keys and values token t can see, which come from the KV cache, which the causal mask hides."""
    L = ctx.labels[t]
    st = ctx.gen.steps[ctx.step_of(t)]
    seen = ctx.labels[: t + 1]
    hidden = ctx.labels[t + 1 : len(st.tokens)]
    sees = say("sees.self", L=L) if t == 0 else say("sees.keys", L=L, seen=letters(seen), t=str(t))
    if st.start > 0:
        sees += say("sees.cache", cached=letters(ctx.labels[: st.start]))
    w = ctx.cfg.window_of(layer)
    if ctx.cfg.windowed is not None and w is None:
        sees += say("sees.global", layer=str(layer))
    if w is not None and t >= w:
        sees += say("sees.window", window=str(w), hidden=letters(ctx.labels[: t - w + 1]), last=str(t - w))
    if hidden:
        where = f"position {t + 1}" if len(hidden) == 1 else f"positions {t + 1}–{len(st.tokens) - 1}"
        return line(sees + "; ", (say("mask.hides"), "bold"), (letters(hidden), "bold"), say("mask.later", where=where))
    return line(sees + "; " + say("mask.nothing"), (say("mask.last", L=L), "bold"))


@group()
def head_at_token(ctx: Ctx, t: int, layer: int, h: int):
    cfg, L, p = ctx.cfg.layer(layer), ctx.labels[t], ctx.p  # the layer's own sizes
    a = f"blocks.{layer}.attn."
    H, KV = cfg.n_heads, cfg.kv_heads
    g = kv_head(cfg, h)
    wshape = say("head.slices", all=shape(H, cfg.d_model, cfg.d_head), slice=shape(cfg.d_model, cfg.d_head)) if H > 1 \
        else shape(cfg.d_model, cfg.d_head)
    if KV < H:
        group_of = [q for q in range(H) if kv_head(cfg, q) == g]
        yield line((f"head {h}", "bold underline"), say("head.gqa", H=str(H), shape=wshape, g=str(g), KV=str(KV),
                                                         kv_shape=shape(KV, cfg.d_model, cfg.d_head),
                                                         first=str(group_of[0]), last=str(group_of[-1])))
    elif H > 1:
        yield line((f"head {h}", "bold underline"), say("head.of", H=str(H), shape=wshape))
    else:
        yield line(say("head.one", shape=wshape))
    if h == ctx.shown_heads()[0] and t == ctx.shown_tokens()[0]:  # once: how W_Q is stored, one number worked
        for words in example_words(ctx.gen.meta, f"blocks.{layer}.attn.W_Q", f"W_Q of layer {layer}"):
            yield indent(Text(words, style="dim"))
    sl = f"[{h}]" if H > 1 else ""
    kl = f"[{g}]" if H > 1 else ""
    src = f"ln1(x_{L})" if cfg.layer_norm and cfg.norm_place_kind.before else f"x_{L}"  # W_Q meets LN(x)·ln1.w + ln1.b
    rope = cfg.rotates(layer)
    shared = [q for q in ctx.shown_heads() if q < h and kv_head(cfg, q) == g]  # a head shown above read the same K, V
    have = {}
    own = cfg.attention_of(layer).vector_words(cfg, layer)  # where the kind makes K or V otherwise (Gemma 4)
    scale = ctx.at(a + "v_norm.hook_scale", t)  # [kv_head, 1]: Gemma 4's value norm
    for m in "QKV":
        row = ctx.at(a + f"hook_{m.lower()}", t)
        have[m] = row is not None
        if m != "Q" and shared:
            if m == "K":
                yield Text(f"{L}_K and {L}_V: key/value head {g}'s, the same as for head {shared[0]} above", style="dim")
            continue
        if row is not None:
            which = h if m == "Q" else g
            slots = dict(L=L, m=m, src=src, slice=sl if m == "Q" else kl, source=str(cfg.kv_source[layer]) if cfg.kv_source
                         else "", scale=f"{float(scale[g, 0]):.{p}f}" if scale is not None else "")
            name, why = own[m] if m in own else (None, "")
            yield ctx.eq(why.format(**slots), name.format(**slots) if name else say("head.vector", **slots), ctx.v(row[which]))
            yield from ctx.checks_at(a + f"hook_{m.lower()}", t, which)
        if cfg.qk_norm_kind.on and m in "QK":
            yield from qk_normed(ctx, a + f"{m.lower()}_norm.", t, m, h if m == "Q" else g)
        if rope and m in "QK":
            rot = ctx.at(a + f"hook_rot_{m.lower()}", t)
            if rot is not None:
                yield ctx.eq(f"rotated by position {t}", f"{L}_{m}↻", ctx.v(rot[h if m == 'Q' else g]))
                yield from ctx.checks_at(a + f"hook_rot_{m.lower()}", t, h if m == "Q" else g)
    n_keys = t + 1
    cached = [ctx.cached_from(j, t) for j in range(n_keys)]
    if have["K"] and have["V"] and n_keys > 1 and not shared and (n_keys <= BRIEF_KV_ROWS or not ctx.view.brief):
        kv = Table(box=None, padding=(0, 1), show_edge=False, pad_edge=False)
        kv.add_column("", style="bold")
        from_cache = any(c is not None for c in cached)
        if from_cache:
            kv.add_column("from", no_wrap=True)
        kv.add_column("K↻ (key, rotated)" if rope else "K (key)")
        kv.add_column("V (value)")
        for j in range(n_keys):
            kj = ctx.at(a + ("hook_rot_k" if rope else "hook_k"), j, cached[j])
            vj = ctx.at(a + "hook_v", j, cached[j])
            if kj is None or vj is None:
                continue
            row = [ctx.labels[j]]
            if from_cache:
                row.append(f"cache {cached[j]}" if cached[j] is not None else "new")
            kv.add_row(*row, ctx.v(kj[g]), ctx.v(vj[g]))
        yield indent(kv)
    elif n_keys > BRIEF_KV_ROWS and not shared:
        yield Text(f"(the {n_keys} K and V vectors: --full lists them)", style="dim")
    dots = ctx.att(a + "hook_dots", h, t)
    scores = ctx.att(a + "hook_attn_scores", h, t)
    pattern = ctx.att(a + "hook_pattern", h, t)
    if pattern is None and scores is None and dots is None:
        return
    sc = scores if scores is not None else dots
    scaled = cfg.scale_scores and scores is not None
    tab = Table(box=None, padding=(0, 1), show_edge=False, pad_edge=False, show_footer=pattern is not None)
    tab.add_column("key", style="bold", footer="sum")
    if dots is not None:
        tab.add_column(f"{L}_Q↻·K↻" if rope else f"{L}_Q·K", justify="right")
    if scaled:
        capped = f", {cfg.attn_softcap:g}·tanh(s/{cfg.attn_softcap:g})" if cfg.attn_softcap is not None else ""
        tab.add_column(f"÷ √{cfg.attn_scalar or cfg.d_head:g}{capped}", justify="right")
    if pattern is not None:
        tab.add_column("weight", justify="right", footer=num(float(pattern.sum()), p))
        tab.add_column("", no_wrap=True, style="cyan")
    shown = strongest(pattern, BRIEF_KEYS) if ctx.view.brief and pattern is not None else list(range(n_keys))
    for j in shown:
        row = [ctx.labels[j]]
        if dots is not None:
            row.append(num(dots[j], p))
        if scaled:
            row.append(num(scores[j], p))
        if pattern is not None:
            row += [prob(pattern[j], p), bar(pattern[j], 10)]
        tab.add_row(*row)
    if len(shown) < n_keys:  # pattern is not None: the weights chose the keys shown
        rest = n_keys - len(shown)
        left = float(pattern.sum() - pattern[shown].sum())
        tab.add_row(f"… {rest} more", *([""] * (len(tab.columns) - 3)), prob(left, p), "(--full lists them)",
                    style="dim")
    divisor = say("scores.by_scalar", scalar=f"{cfg.attn_scalar:g}") if cfg.attn_scalar else say("scores.by_d_head", d_head=str(cfg.d_head))
    sinks = ctx.get(a + "hook_sink_share", ctx.gen.steps[ctx.step_of(t)]) is not None
    how = f"{L}_Q · each visible key" + (f", ÷ {divisor}" if scaled else "") + \
        ((say("scores.with_sink") if sinks else ", softmax → weights that sum to 1") if pattern is not None else "")
    yield line("attention scores: ", how)
    yield indent(tab)
    if cfg.attn_softcap is not None and dots is not None and scores is not None and cfg.scores_scale is not None:
        seen = np.isfinite(scores)  # Gemma 2: the scaled scores soft-capped, before the mask (the largest one shown)
        if seen.any():
            j = int(np.argmax(np.where(seen, np.abs(dots), -1.0)))
            yield line(cfg.softcap_kind.words("scores", cfg.attn_softcap, float(dots[j]) * cfg.scores_scale,
                                              float(scores[j])) + say("scores.capped_key", key=ctx.labels[j]))
    yield from ctx.checks_at(a + "hook_dots", t, h, attention=True)
    yield from ctx.checks_at(a + "hook_attn_scores", t, h, attention=True)
    if pattern is not None and sc is not None and n_keys <= BRIEF_KV_ROWS:
        scores_, weights_ = ", ".join(num(x, p) for x in sc), ", ".join(num(x, p) for x in pattern)
        share = sink_at(ctx, a, t, h)
        sink = None if share is None else sink_logit(sc, share)
        yield line(say("softmax", scores=scores_, weights=weights_) if sink is None else
                   say("softmax.sink", scores=scores_, sink=num(sink, p), weights=weights_, share=prob(share, p)))
    if pattern is not None:
        yield from ctx.checks_at(a + "hook_pattern", t, h, attention=True)
        yield from sink_share(ctx, a, t, h)
    z = ctx.at(a + "hook_z", t)
    if pattern is not None and z is not None:
        terms = " + ".join(f"{num(pattern[j], p)}×{ctx.labels[j]}_V" for j in shown)
        if len(shown) < n_keys:
            terms += say("sum.more", n=str(n_keys - len(shown)), rest=prob(float(pattern.sum() - pattern[shown].sum()), p))
        whose = say("sum.new", L=L) + (say("sum.from_head", h=str(h)) if H > 1 else "")
        yield ctx.eq(f"{terms} = {whose}", "", ctx.v(z[h]))
        yield from ctx.checks_at(a + "hook_z", t, h)
    yield from output_gate(ctx, t, a, h)


def output_norm(ctx: Ctx, t: int, prefix: str, what: str, name: str, out, words: str):
    """A sublayer's output (`out`: what the residual adds) and, where the block normalizes it (OLMo 2's
    `ln1_post` / `ln2_post`), the output before its norm (normalized × scale: the same numbers) and the norm."""
    cfg = ctx.cfg
    if not cfg.norm_place_kind.after:  # no norm on the output: nothing more to read (or to call missing)
        yield ctx.eq(words, name, ctx.v(out))
        return
    n, scale = ctx.at(prefix + "hook_normalized", t), ctx.at(prefix + "hook_scale", t)
    if n is None or scale is None:
        yield ctx.eq(words, name, ctx.v(out))
        return
    yield ctx.eq(words, name, ctx.v(n * scale))
    ln = prefix.split(".", 2)[-1].rstrip(".")
    yield ctx.eq(cfg.norm_place_kind.words.format(what=what, out=name, scale=f"{float(scale[0]):.{ctx.p}f}",
                                                  gain=cfg.norm_kind.gain_words(ln)), f"{ln}({name})", ctx.v(out))


@group()
def after_attention(ctx: Ctx, t: int, layer: int):
    """Concat of heads and W_O, residual, layer norm and MLP, (Gemma 4's per-layer input and scalar,) the layer's output."""
    cfg, L, b = ctx.cfg.layer(layer), ctx.labels[t], f"blocks.{layer}."
    dm = cfg.d_model
    gated = ctx.records(b + "attn.hook_z_gated")  # an output gate (or a linear layer's gated norm) before W_O
    z = ctx.at(b + ("attn.hook_z_gated" if gated else "attn.hook_z"), t)  # [head, d_head]: what W_O merges
    H, dh = z.shape if z is not None else (cfg.n_heads, cfg.d_head)
    attn_out = ctx.at(b + "hook_attn_out", t)
    if H > 1 and z is not None:
        yield ctx.eq(say("heads.concat", H=str(H), d_head=str(dh), n=str(H * dh)), f"z_{L}" + (" gated" if gated else ""),
                     ctx.v(z.reshape(-1)))
    added = f"attn_out_{L}"  # what the residual adds: attention's output, or (OLMo 2) its norm
    if attn_out is not None:
        biased = "b_O" in cfg.attention_of(layer).shapes(cfg, layer)
        yield from output_norm(ctx, t, b + "ln1_post.", "attention", added, attn_out,
                               say("heads.wo" if biased else "heads.wo_no_bias", shape=shape(H * dh, dm), d_model=str(dm)))
        yield from ctx.checks_at(b + "hook_attn_out", t)
        added = f"ln1_post({added})" if cfg.norm_place_kind.after else added
    if cfg.mlp:
        mid = ctx.at(b + "hook_resid_mid", t)
        if mid is not None:
            if cfg.residual:
                yield ctx.eq(say("mlp.residual"), f"x_{L} + {added}", ctx.v(mid))
            else:
                yield line(say("mlp.no_residual", L=L))
            yield from ctx.checks_at(b + "hook_resid_mid", t)
        if cfg.layer_norm and cfg.norm_place_kind.before:
            ln2 = ctx.at(b + "ln2.hook_normalized", t)
            if ln2 is not None:
                yield ctx.eq(cfg.norm_kind.before_mlp(), f"{norm_name(cfg)}(x)", ctx.v(ln2))
        if t == ctx.shown_tokens()[0]:  # once: where a fused gate_up_proj was split (Phi-3)
            for words in split_words(ctx.gen.meta, b + "mlp.W_gate"):
                yield indent(Text(words, style="dim"))
        yield from routing(ctx, t, layer, "ln2(x)" if cfg.norm_place_kind.before else "x")  # a mixture of experts
        kind = cfg.mlp_of(layer)
        width = kind.width(cfg) if kind.steps else cfg.d_mlp  # a dense layer among experts: its own width
        for hook, name, words in kind.steps:  # x·W_in and GELU, or SwiGLU's gate, up and their product
            value = ctx.at(b + hook, t)
            if value is not None:
                said = words.format(shape=shape(dm, width))
                yield ctx.eq(said if cfg.norm_place_kind.before else said.replace("ln2(x)", "x"), name, ctx.v(value))
        mo = ctx.at(b + "hook_mlp_out", t)
        if mo is not None:
            shared = ctx.at(b + "mlp.hook_shared_out", t) is not None
            words = say("experts.out", shared=say("experts.out_shared") if shared else "") if recorded(ctx, layer, t) \
                else say("mlp.wout", shape=shape(width, dm))
            dense = ctx.at(b + "mlp.hook_dense_out", t)
            if dense is not None:  # a dense MLP beside the experts (Gemma 4): its output, then the two parts' sum
                yield ctx.eq(say("experts.dense_out", shape=shape(width, dm)), f"dense_{L}", ctx.v(dense))
                words = say("experts.out_beside")
            yield from output_norm(ctx, t, b + "ln2_post.", "MLP", f"mlp_out_{L}", mo, words)
            yield from ctx.checks_at(b + "hook_mlp_out", t)
    yield from per_layer_input(ctx, t, layer)
    post_ = ctx.at(b + "hook_resid_post", t)
    unscaled = ctx.at(b + "hook_resid_unscaled", t) if cfg.layer_scalar else None
    if post_ is not None:
        if unscaled is not None:  # Gemma 4: the sum times the layer's scalar (read off the two recorded vectors)
            i = int(np.argmax(np.abs(unscaled)))
            how = say("out.scaled", scalar=num(float(post_[i]) / float(unscaled[i]), ctx.p) if unscaled[i] else "?")
        elif cfg.mlp:
            how = say("out.mlp") if cfg.residual else say("out.mlp_alone")
        else:
            how = say("out.attn", L=L) if cfg.residual else say("out.attn_alone", L=L)
        nxt = say("out.next", next=str(layer + 1)) if layer + 1 < cfg.n_layers else say("out.final")
        yield ctx.eq(say("out.of", how=how, L=L, layer=str(layer), next=nxt), f"out_{L}", ctx.v(post_))
        yield from ctx.checks_at(b + "hook_resid_post", t)


def per_layer_input(ctx: Ctx, t: int, layer: int):
    """Gemma 4's third step: the layer's own input from the token (`hook_per_layer_inputs`), gated by the stream,
    projected back and normalized (`hook_ple_out`), added; then the sum before the layer's scalar."""
    cfg, L, b = ctx.cfg.layer(layer), ctx.labels[t], f"blocks.{layer}."
    kind = cfg.ple_kind
    if kind is None:
        return
    st = ctx.gen.steps[ctx.step_of(t)]
    given = ctx.get("hook_per_layer_inputs", st)  # [layer, pos, d_ple]
    if given is not None:
        yield ctx.eq(kind.input_words.format(layer=str(layer), L=L, width=str(cfg.d_ple), d_model=str(cfg.d_model)),
                     f"ple_{layer}({L})", ctx.v(given[layer, t - st.start]))
    for hook, name, words in kind.steps:
        value = ctx.at(b + hook, t)
        if value is not None:
            yield ctx.eq(words.format(shape=shape(cfg.d_model, cfg.d_ple), width=str(cfg.d_ple)), name, ctx.v(value))
    out = ctx.at(b + "hook_ple_out", t)
    if out is not None:
        yield ctx.eq(kind.out_words.format(shape=shape(cfg.d_ple, cfg.d_model)), f"ple_out_{L}", ctx.v(out))
    after = ctx.at(b + ("hook_resid_unscaled" if cfg.layer_scalar else "hook_resid_post"), t)
    if after is not None and out is not None and cfg.layer_scalar:
        yield ctx.eq(kind.added_words, f"x_{L} + ple_out_{L}", ctx.v(after))


@group()
def layer_section(ctx: Ctx, layer: int, number: str, parts: frozenset = frozenset({"embed", "attention"})):
    cfg = ctx.cfg
    if "attention" not in parts:
        yield section(f"{number} · The first layer's input: embedding and position vector, token by token")
    else:
        name = "First layer" if layer == 0 else f"Layer {layer}"
        yield section(f"{number} · {name} (layer {layer} of {cfg.n_layers}), token by token")
    if layer > 0:
        yield line(f"Each token starts from its output of layer {layer - 1}, which already holds context from "
                       f"the tokens to its left, and repeats the same steps with this layer's own W_Q, W_K, W_V.")
    shown = ctx.shown_tokens()
    for i, t in enumerate(shown):
        if i > 0 and t - shown[i - 1] > 1:
            skip = list(range(shown[i - 1] + 1, t))
            yield Text(f"{letters([ctx.labels[s] for s in skip])}: the same steps, each seeing the tokens to its "
                           f"left (--token {ctx.labels[skip[0]]} shows one, --full shows all)", style="dim")
        yield token_at_layer(ctx, t, layer, parts)


@renders("embed")  # and "attention", which joins it
@group()
def layer_sections(ctx: Ctx, number: str):
    """Section 2, in part or whole: the first layer's input (embed), or each --layer layer token by
    token (attention), numbered 2.1, 2.2, … when there are several; a model without layers says so."""
    parts = frozenset(s for s in ("embed", "attention") if ctx.resolved.shows(s))
    if not ctx.cfg.n_layers:
        yield section(f"{number} · Layers")
        yield Text(say("layers.none"))
        return
    layers = ctx.layers if "attention" in parts else [0]
    for i, layer in enumerate(layers):
        yield layer_section(ctx, layer, number if len(layers) == 1 else f"{number}.{i + 1}", parts)
