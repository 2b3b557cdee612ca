"""The demo's later screens: the other layers, the unembedding, softmax and temperature, the chosen
token, append and repeat, and the KV cache. The what-if temperatures redo softmax on recorded
logits (labelled as such on the screen); multi-add counts come from the shapes (`Config.pass_macs`)."""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.text import Text

from ...core.equations import largest_first, tempered_softmax
from ...tokenizers.tokens import label
from .. import fmt
from ..linear import overview_cells_of
from ..loop import cache_kinds, cache_layers
from ..predict import pass_through_words, unchanged_layers
from ...sections import screen
from ..words import say
from ..text import folded
from .base import FOCUS_STYLES, MARK, TOP, Demo, Step, mark, pairs, row_style, sentence, table


def _looks(d: Demo, l: int, last: int, heads: list[int]) -> list[str]:
    """Each head's most-weighted key; on a linear-attention layer (no weights) what its state keeps and β."""
    name = f"blocks.{l}.attn.hook_pattern"
    if name not in d.trace:
        cells = overview_cells_of(d.trace, l, last, len(heads))
        return cells if cells is not None else ["—"] * len(heads)
    p = d.trace[name][:, last]  # [head, key_pos]
    return [f"{label(int(np.argmax(p[h])))} {d.num(p[h].max())}" for h in heads]


@screen("layers", layers=True)
def step_layers(d: Demo) -> Step:
    cfg, last = d.cfg, d.last
    H = cfg.n_heads
    heads = list(range(min(H, 4)))
    cols = ["layer", "in", "out"] + [f"head {h}" for h in heads]
    t = table(*cols, right=("layer", "in", "out"))
    for l in folded(cfg.n_layers, d.rows):  # every layer, or the first ones, ⋮, the last ones
        if l is None:
            t.add_row("⋮", *([""] * (len(cols) - 1)))
            continue
        x_in = d.trace[f"blocks.{l}.hook_resid_pre"][last]  # [d_model]
        x_out = d.trace[f"blocks.{l}.hook_resid_post"][last]  # [d_model]
        looks = _looks(d, l, last, heads)
        t.add_row(str(l), f"{np.linalg.norm(x_in):.2f}", f"{np.linalg.norm(x_out):.2f}", *looks)
    more = say("demo.layers.more", n=str(len(heads)), H=str(H)) if H > len(heads) else ""
    final = d.trace[f"blocks.{cfg.n_layers - 1}.hook_resid_post"][last] if cfg.n_layers else d.trace["hook_embed"][last]
    out = say("demo.layers.last", L=label(last), layer=str(cfg.n_layers - 1)) if cfg.n_layers else \
        say("demo.layers.embedded", L=label(last))
    body = Group(sentence((say("demo.layers.heading", L=label(last), more=more), "bold")),
                 Text(say("demo.layers.columns") + (" " + say("linear.overview", L=label(last)) if d.state_layer is not None
                                                    else "")), Text(), t, Text(), pairs([(out, d.vector(final))]))
    same = pass_through_words(unchanged_layers(d.trace.get, cfg.n_layers), cfg.n_layers)
    why = [n["text"] for n in d.notes if n.get("section") == "layers"]
    doing = f"{same} {' '.join(why)}".rstrip() if same else say("demo.layers.mixes")
    lead = (say("demo.layers.next") if same else
            say("demo.layers.repeat", n=str(cfg.n_layers), last=str(cfg.n_layers - 1)) if cfg.n_layers > 1 else
            say("demo.layers.one"))
    return Step("The other layers", say("demo.layers", lead=lead, doing=doing, L=label(last)), body)


def _top(values: np.ndarray, k: int) -> list[int]:
    return [int(i) for i in largest_first(values)[:k]]


@screen("unembed")
def step_unembed(d: Demo) -> Step:
    cfg, last = d.cfg, d.last
    x = d.trace["unembed.hook_in"][last]  # [d_model]
    logits = d.trace["logits"]  # [pos, d_vocab]
    t = table("rank", "token", "id", "logit", right=("rank", "id", "logit"))
    for r, i in enumerate(_top(logits[last], TOP)):
        t.add_row(str(r + 1), d.token_name(i), str(i), d.num(logits[last, i]))
    every = table("", "position", "its top next token", right=())
    fit = max(4, min(TOP, d.rows - 2))  # 6 rows; fewer where a small terminal folds the screen (`fit_pages`)
    rows = list(range(d.n)) if d.n <= fit else [0, 1, None] + list(range(d.n - (fit - 3), d.n))
    for p in rows:
        if p is None:
            every.add_row("", "⋮", "")
            continue
        best = int(np.argmax(logits[p]))
        every.add_row(mark(p == last), d.who(p, 0),
                      d.token_name(best) + (say("demo.unembed.this_row") if p == last else ""),
                      style=row_style(p == last))
    ln = f" ({cfg.norm_kind.plain_final})" if cfg.layer_norm else ""
    tied = say("demo.unembed.tied") if cfg.tied_unembed else ""
    final = [(say("predict.final", L=label(last)), d.vector(x)),
             ("× W_U", say("demo.unembed.logits", d_model=str(cfg.d_model), d_vocab=f"{cfg.d_vocab:,}"))]
    body = Group(pairs(final), Text(), t, Text(), every)
    question = pairs(final)
    prompt = " ".join(d.text(p, 0) for p in range(min(d.n, 12))).replace("␣", "") + (" …" if d.n > 12 else "")
    narration = say("demo.unembed", L=label(last), d_model=str(cfg.d_model), d_vocab=f"{cfg.d_vocab:,}", norm=ln,
                    tied=tied)
    return Step("Unembedding: one score per token", narration, body, question,  # asked before any screen ranks them
                ask=say("demo.unembed.ask", prompt=prompt, L=label(last)))


@screen("temperature")
def step_temperature(d: Demo) -> Step:
    s = d.settings
    T = s.temperature
    logits = d.trace["logits"][d.last]  # [d_vocab]
    probs = d.trace["sample.probs"]  # [d_vocab] recorded
    scaled = d.trace["sample.scaled"]  # [d_vocab] recorded
    what_if = {t: tempered_softmax(logits, t) for t in (0.5, 2.0)}  # arithmetic on recorded logits
    t = table("token", "logit", "÷ T", "probability", "if T = 0.5", "if T = 2",
               right=("logit", "÷ T", "probability", "if T = 0.5", "if T = 2"))
    for i in _top(probs, TOP):
        t.add_row(d.token_name(i), d.num(logits[i]), d.num(scaled[i]), d.prob(probs[i]),
                  d.prob(what_if[0.5][i]), d.prob(what_if[2.0][i]))
    top = _top(probs, TOP)
    if len(probs) > TOP:
        others = [float(1.0 - p[top].sum()) for p in (probs, what_if[0.5], what_if[2.0])]
        t.add_row(f"({len(probs) - TOP:,} others)", "", "", *(d.prob(o) for o in others), style="dim")
    settings = f"temperature {T:g}" + (" (greedy)" if T == 0 else "")
    if s.top_k is not None:
        settings += f", top-k {s.top_k}"
    if s.top_p is not None:
        settings += f", top-p {s.top_p}"
    how = say("demo.temperature.greedy") if T == 0 else say("demo.temperature.divided", T=f"{T:g}")
    body = Group(sentence(("this run: ", "bold"), settings, f" — {how}"), Text(), t,
                 Text(say("demo.temperature.what_if"), style="italic"))
    return Step("Softmax and temperature", say("demo.temperature"), body)


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
        t = table("", "token", "id", "probability", right=("id", "probability"))
        for i in order:
            is_chosen = reveal and i == chosen
            t.add_row(mark(is_chosen), d.token_name(i), str(i), d.prob(probs[i]), style=row_style(is_chosen))
        parts = [Text(say("demo.chosen.no_draw")), Text(), t]
    else:
        order = [i for i in _top(final, TOP) if final[i] > 0]
        u = float(s["sample.uniform"])
        t = table("", "token", "kept probability", "band", right=("kept probability",))
        lo = 0.0
        for i in order:
            hi = lo + float(final[i])
            is_chosen = reveal and i == chosen
            t.add_row(mark(is_chosen), d.token_name(i), d.prob(final[i]), f"{lo:.{d.precision}f} – {hi:.{d.precision}f}",
                      style=row_style(is_chosen))
            lo = hi
        kept = int((final > 0).sum())
        if kept > len(order):
            t.add_row("", f"({kept - len(order):,} more)", d.prob(1.0 - lo), f"{lo:.{d.precision}f} – 1.000", style="dim")
        parts = [sentence((say("demo.chosen.draw"), "bold"), f"{u:.{d.precision + 1}f}", say("demo.chosen.seeded")),
                 Text(), t]
    if reveal:
        parts += [Text(), sentence((say("demo.chosen.predicts", L=label(d.last), mark=MARK), "bold"),
                                (d.new_name(d.n, chosen), FOCUS_STYLES[-1]),
                                f"   (id {chosen}, probability {d.prob(probs[chosen])})")]
    return Group(*parts)


@screen("chosen")
def step_chosen(d: Demo) -> Step:
    greedy = "sample.uniform" not in d.trace
    how = say("demo.chosen.greedy") if greedy else say("demo.chosen.sampled")
    parts = [_candidates(d, reveal=True), Text(say("demo.chosen.letter", L=label(d.n)))]
    if isinstance(d.gen.meta.get("ablation"), dict):  # --ablate: what the removed part did to this choice
        from ..header import ablation_words

        parts.append(Text(ablation_words(d.gen.meta["ablation"], d.tokenizer) + ".", style="bold"))
    answer = Group(*parts)
    if greedy:  # the two screens before ranked the tokens: asking again would give the answer away
        return Step("The chosen token", how, answer)
    return Step("The chosen token", how, answer, _candidates(d, reveal=False),
                ask=say("demo.chosen.ask"))


@screen("append")
def step_append(d: Demo) -> Step:
    g = d.gen
    t = table("pass", "reads", "sequence so far", "→ next", "probability", right=("pass", "probability"))
    for n, s in enumerate(g.steps):
        seen = len(s.tokens)
        tok = int(s["sample.token"])
        appended = n < len(g.generated_ids)
        nxt = d.new_name(seen, tok) if appended else f"({d.token_name(tok)}: not appended)"
        reads = d.letters(seen) if s.start == 0 else f"{d.span(s.start, seen)} (new)"
        t.add_row(str(n), reads, d.letters(seen), nxt, d.prob(s["sample.probs"][tok]))
    limit = d.settings.max_new_tokens
    stopped = {"end_token": say("demo.stopped.end_token"), "stop_string": say("demo.stopped.stop_string"),
               "max_new_tokens": say("demo.stopped.max_new_tokens", n=fmt.count(limit, "new token"))}.get(g.stopped, "")
    words = " ".join(d.token_name(i) for i in g.generated_ids) or "(nothing)"
    body = Group(t, Text(), sentence(("generated: ", "bold"), words),
                 sentence(("stopped because ", "bold"), stopped) if stopped else Text())
    n_total = len(g.tokens)
    narration = say("demo.append", prompt=d.letters(d.n), longer=d.letters(min(n_total, d.n + 1)),
                    layers=f"all {d.cfg.n_layers} layers" if d.cfg.n_layers > 1 else fmt.count(d.cfg.n_layers, "layer"))
    return Step("Append and repeat", narration, body)


@screen("cache", layers=True)
def step_cache(d: Demo) -> Step:
    g, cfg = d.gen, d.cfg
    cache_on = d.settings.cache
    t = table("pass", "new token", "K, V computed", "K, V reused", "multiply-adds", "without cache", "saved",
               right=("multiply-adds", "without cache", "saved"))
    for n, s in enumerate(g.steps):
        seen = len(s.tokens)
        computed = int(s["blocks.0.attn.hook_k"].shape[0]) if cfg.n_layers else s.n_new  # rows recorded this pass
        reused = seen - computed
        with_ = cfg.pass_macs(computed, seen)
        without = cfg.pass_macs(seen, seen)
        saved = f"{100 * (1 - with_ / without):.0f}%" if without else ""
        new = label(seen - 1) if n else "(prompt)"
        t.add_row(str(n), new, d.span(reused, seen), d.letters(reused) if reused else "—", f"{with_:,}",
                  f"{without:,}", saved)
    if not cache_on:
        state = say("demo.cache.off")
    elif len(g.steps) == 1:
        state = say("demo.cache.one_pass")
    else:
        grows, fixed = cache_layers(cfg)
        state = say("demo.cache.on", L=label(d.n), reused=d.letters(d.n),  # a hybrid: only its softmax layers reuse rows
                    layers=say("demo.cache.softmax", n=str(len(grows))) if fixed else str(cfg.n_layers))
        held = len(g.steps[-1].tokens)  # the positions the cache holds after the last pass
        kinds = cache_kinds(cfg, held)  # a hybrid: its linear-attention layers keep a state, not keys and values
        if kinds is not None:
            state += say("demo.cache.hybrid", layers=fmt.layer_runs(fixed), kept="; ".join(
                say("demo.cache.kind", layers=row[0], keeps=row[1], now=row[2], n=str(held)) for row in kinds["rows"]))
    return Step("The KV cache", say("demo.cache"),
                Group(Text(state), Text(), t, Text(say("demo.cache.counted"), style="italic")))
