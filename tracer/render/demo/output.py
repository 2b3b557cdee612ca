"""The demo's later screens: the other layers, the unembedding, softmax and temperature, the chosen
token, append and repeat, and the KV cache. The what-if temperatures redo softmax on recorded
logits (labelled as such on the screen); multi-add counts come from the shapes (`Config.pass_macs`)."""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.text import Text

from ...equations import largest_first, tempered_softmax
from ...tokens import label
from ..predict import pass_through_words, unchanged_layers
from .base import FOCUS_STYLES, MARK, TOP, Demo, Step, folded, mark, pairs, row_style, sentence, table



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
        p = d.trace[f"blocks.{l}.attn.hook_pattern"][:, last]  # [head, key_pos]
        looks = [f"{label(int(np.argmax(p[h])))} {d.num(p[h].max())}" for h in heads]
        t.add_row(str(l), f"{np.linalg.norm(x_in):.2f}", f"{np.linalg.norm(x_out):.2f}", *looks)
    more = f" (first {len(heads)} of {H} heads)" if H > len(heads) else ""
    final = d.trace[f"blocks.{cfg.n_layers - 1}.hook_resid_post"][last] if cfg.n_layers else d.trace["hook_embed"][last]
    body = Group(
        sentence((f"{label(last)}, the last token, in every layer{more}", "bold")),
        Text("in, out: the length of its vector; head n: the key that head weights most, and the weight"),
        Text(),
        t,
        Text(),
        pairs([(f"{label(last)} out of layer {cfg.n_layers - 1} (the last)" if cfg.n_layers else f"{label(last)}, embedded",
                d.vec(final))]),
    )
    same = pass_through_words(unchanged_layers(d.trace.get, cfg.n_layers), cfg.n_layers)
    why = [n["text"] for n in d.notes if n.get("section") == "layers"]
    doing = f"{same} {' '.join(why)} ".rstrip() + " " if same else "Every layer mixes more context into every token. "
    lead = ("Each layer's output is the next layer's input. " if same else
            f"Each layer's output is the next layer's input, and the same recipe runs again with new weights in each "
            f"of the {cfg.n_layers} layers (0 to {cfg.n_layers - 1}). " if cfg.n_layers > 1 else
            "This model has one layer, layer 0: its output is the final vector. ")
    return Step(
        "The other layers",
        f"{lead}{doing}From here on we follow "
        f"{label(last)}, the last token: its final vector is the one that predicts what comes next.",
        body,
    )


def _top(values: np.ndarray, k: int) -> list[int]:
    return [int(i) for i in largest_first(values)[:k]]


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
                      d.token_name(best) + ("   ← generation uses this row" if p == last else ""),
                      style=row_style(p == last))
    ln = f" ({cfg.norm_kind.plain_final})" if cfg.layer_norm else ""
    tied = " GPT-2 reuses the embedding matrix W_E here, turned on its side." if cfg.tied_unembed else ""
    body = Group(
        pairs([(f"{label(last)}'s final vector", d.vec(x)),
                ("× W_U", f"[{cfg.d_model} × {cfg.d_vocab:,}]  → one logit per vocabulary token")]),
        Text(),
        t,
        Text(),
        every,
    )
    question = pairs([(f"{label(last)}'s final vector", d.vec(x)),
                      ("× W_U", f"[{cfg.d_model} × {cfg.d_vocab:,}]  → one logit per vocabulary token")])
    prompt = " ".join(d.text(p, 0) for p in range(min(d.n, 12))).replace("␣", "") + (" …" if d.n > 12 else "")
    return Step(
        "Unembedding: one score per token",
        f"One more matrix, W_U, turns {label(last)}'s {cfg.d_model} numbers into {cfg.d_vocab:,} scores "
        f"(logits), one for every token of the vocabulary.{ln}{tied} Every position gets such a row — that is "
        "how training checks all positions at once — but generation only needs the last one.",
        body, question,  # asked here, before any screen ranks the tokens
        ask=f"After \"{prompt}\", which token will get the largest logit — what will {label(last)} predict?",
    )


def step_temperature(d: Demo) -> Step:
    s = d.settings
    T = s.temperature if s is not None else 0.0
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
    if s is not None and s.top_k is not None:
        settings += f", top-k {s.top_k}"
    if s is not None and s.top_p is not None:
        settings += f", top-p {s.top_p}"
    how = ("the probabilities below use T = 1; greedy simply takes the top one" if T == 0 else
           f"the logits are divided by {T:g} before softmax")
    body = Group(sentence(("this run: ", "bold"), settings, f" — {how}"), Text(), t,
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
        t = table("", "token", "id", "probability", right=("id", "probability"))
        for i in order:
            is_chosen = reveal and i == chosen
            t.add_row(mark(is_chosen), d.token_name(i), str(i), d.prob(probs[i]), style=row_style(is_chosen))
        parts = [Text("temperature 0: no random draw — the most likely token wins"), Text(), t]
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
        parts = [sentence(("random draw u = ", "bold"), f"{u:.{d.precision + 1}f}",
                       "  (seeded: the same seed draws the same u on every machine)"), Text(), t]
    if reveal:
        parts += [Text(), sentence((f"{label(d.last)} predicts  {MARK} ", "bold"),
                                (d.new_name(d.n, chosen), FOCUS_STYLES[-1]),
                                f"   (id {chosen}, probability {d.prob(probs[chosen])})")]
    return Group(*parts)


def step_chosen(d: Demo) -> Step:
    greedy = "sample.uniform" not in d.trace
    how = ("At temperature 0 the choice is simply the most likely token." if greedy else
           "A seeded random number u between 0 and 1 is drawn. Lay the kept tokens' probabilities end to end "
           "(the bands): the token whose band holds u is chosen, so likely tokens win often, not always.")
    parts = [_candidates(d, reveal=True), Text(f"The new token gets the next letter: {label(d.n)}.")]
    if isinstance(d.gen.meta.get("ablation"), dict):  # --ablate: what the removed part did to this choice
        from ..header import ablation_words

        parts.append(Text(ablation_words(d.gen.meta["ablation"], d.tokenizer) + ".", style="bold"))
    answer = Group(*parts)
    if greedy:  # the two screens before ranked the tokens: asking again would give the answer away
        return Step("The chosen token", how, answer)
    return Step("The chosen token", how, answer, _candidates(d, reveal=False),
                ask="Which token is chosen? Find the band that holds u.")


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
    stopped = {"end_token": "it produced the end token", "stop_string": "it produced a stop string",
               "max_new_tokens": f"it reached the limit of "
                                 f"{d.settings.max_new_tokens if d.settings else len(g.generated_ids)} new tokens"
               }.get(g.stopped, "")
    words = " ".join(d.token_name(i) for i in g.generated_ids) or "(nothing)"
    body = Group(t, Text(), sentence(("generated: ", "bold"), words),
                 sentence(("stopped because ", "bold"), stopped) if stopped else Text())
    n_total = len(g.tokens)
    return Step(
        "Append and repeat",
        f"The chosen token is appended to the sequence, and the whole stack runs again to predict the one "
        f"after it — {d.letters(d.n)} → {d.letters(min(n_total, d.n + 1))} → … — until the end token or the "
        f"length limit. Each new token needs another pass through all {d.cfg.n_layers} layers.",
        body,
    )


def step_cache(d: Demo) -> Step:
    g, cfg = d.gen, d.cfg
    cache_on = d.settings.cache if d.settings is not None else True
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
        state = ("This run did not use the cache (--no-cache): every pass recomputed the keys and values of "
                 "every token, as the seed Q&A assumes.")
    elif len(g.steps) == 1:
        state = "This run made a single pass, so there was no later pass for the cache to save work on."
    else:
        state = (f"In this run, pass 1 computed Q, K and V for {label(d.n)} alone and reused the cached keys "
                 f"and values of {d.letters(d.n)} in each of the {cfg.n_layers} layers (`tracer trace --verify-cache` "
                 "shows that the logits agree with a full recompute).")
    return Step(
        "The KV cache",
        "Must every pass redo all the earlier tokens? The seed Q&A says so, but no: earlier tokens cannot see "
        "later ones, so their keys and values never change. Generation keeps them in a cache and computes "
        "Q, K and V only for the newest token — it still attends over the whole sequence.",
        Group(Text(state), Text(), t, Text("multiply-adds: counted from the matrices' shapes, not timed",
                                           style="italic")),
    )
