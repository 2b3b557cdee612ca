"""Sampling the next token, stage by stage, in transformers' order: logits → penalties → ÷ temperature →
softmax → top-k → top-p → min-p → renormalise → the seeded draw → the token, one column per
candidate; what each stage changed or removed, with the penalties' arithmetic for the chosen token and
its nearest rivals ("␣the: count 2 → 3.104 − 0.5 − 2×0.1 = 2.404"); and each stage's probabilities
for the page's picture (`stage_probs`). Reads `sample.*` only."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..tokenizers.tokens import show_token
from .fmt import integer, num, prob, short, tok
from .text import Fit, missing
from .words import say
from ..core.equations import largest_first


def candidate_rows(probs: np.ndarray, chosen: int, k: int) -> tuple[np.ndarray, list[int]]:
    """Token ids by probability (ties by id), and the ranks to show: the top k, the chosen one last if lower."""
    order = largest_first(probs)  # [d_vocab]
    ranks = list(range(min(k, len(order))))
    where = int(np.flatnonzero(order == chosen)[0])
    if where not in ranks:
        ranks = ranks[: max(k - 1, 0)] + [where]
    return order, ranks


def sampling_stages(step, tokenizer, view) -> Group:
    """logits → ÷ temperature → softmax → top-k → top-p → renormalise → seeded draw → token, for the top candidates.

    One column per candidate (most likely first; the chosen one always shown), one row per stage,
    so the table reads top to bottom in the order the numbers are computed.
    """
    gone = missing(step, ["sample.scaled", "sample.probs", "sample.final", "sample.token"])
    title = Text("Sampling the next token", style="bold")
    if gone is not None:
        return Group(title, gone)
    d = _draw(step)
    p, T, greedy, chosen = view.precision, d.T, d.greedy, d.chosen
    scaled, probs, final, order, cum = step["sample.scaled"], d.probs, d.final, d.order, d.cum
    n_vocab, n_k, n_p, top_k, top_p = d.n_vocab, d.n_k, d.n_p, d.top_k, d.top_p
    logits = step["logits"][-1] if "logits" in step else None
    head = Text(draw_stages(step), style="bold")

    def build(max_cols: int) -> Table:
        _, ranks = candidate_rows(probs, chosen, min(view.top_k, max_cols))
        t = Table(title=f"The top {len(ranks)} of {integer(n_vocab)} candidates, stage by stage", title_justify="left")
        t.add_column("stage", no_wrap=True)
        for r in ranks:
            t.add_column(f"#{r + 1}", justify="right", no_wrap=True)
        ids = [int(order[r]) for r in ranks]
        rows = [("token", [short(show_token(tokenizer.token_str(i)), 9) for i in ids]),
                ("id", [str(i) for i in ids])]
        if logits is not None:
            rows.append(("logit", [num(logits[i], p) for i in ids]))
        if d.counts is not None:
            rows.append(("count", [str(int(d.counts[i])) for i in ids]))
            rows.append(("penalized", [num(d.penalized[i], p) for i in ids]))
        if not greedy:
            rows.append((f"÷ {num(T, 2)}", [num(scaled[i], p) for i in ids]))
        rows.append(("softmax", [prob(probs[i], p) for i in ids]))
        if not greedy:
            rows.append((f"top-k {top_k if top_k is not None else 'off'}", ["kept" if r < n_k else "cut" for r in ranks]))
            rows.append((f"top-p {top_p if top_p is not None else 'off'}",
                         [("kept" if r < n_p else "cut") if r < n_k else "" for r in ranks]))
            if d.min_p is not None:
                rows.append((f"min-p {d.min_p:g}", [("kept" if r < d.n else "cut") if r < n_p else "" for r in ranks]))
            rows.append(("renormalised", [prob(final[i], p) if r < d.n else "0" for r, i in zip(ranks, ids)]))
            rows.append(("band", [f"{num(cum[r - 1] if r > 0 else 0.0, 2)}–{num(cum[r], 2)}" if r < d.n else ""
                                  for r in ranks]))
        rows.append(("chosen", ["◀" if i == chosen else "" for i in ids]))
        for name, cells in rows:
            t.add_row(name, *cells, style="bold" if name == "chosen" else None)
        return t

    return Group(head, Fit(build, view.top_k), *(Text(x) for x in sampling_notes(step, tokenizer, p)))


def _draw(step) -> SimpleNamespace:
    """What the draw of one pass read and kept: the settings, the probabilities before and after the cuts,
    the candidates by probability and the upper edge of each kept one's band."""
    s = step.settings
    probs, final = step["sample.probs"], step["sample.final"]
    n_p = int(step["sample.kept_top_p"]) if "sample.kept_top_p" in step else int(np.count_nonzero(final))
    n = int(step["sample.kept_min_p"]) if "sample.kept_min_p" in step else n_p
    order = largest_first(probs)  # [d_vocab] most likely first, ties by id
    return SimpleNamespace(
        T=s.temperature, greedy=s.temperature == 0, seed=s.seed, probs=probs, final=final, n_p=n_p, order=order,
        top_k=s.top_k, top_p=s.top_p, min_p=s.min_p if "sample.kept_min_p" in step else None, n=n, settings=s,
        counts=step["sample.counts"] if "sample.counts" in step else None,
        penalized=step["sample.penalized"] if "sample.penalized" in step else None,
        chosen=int(step["sample.token"]), n_vocab=len(probs),
        n_k=int(step["sample.kept_top_k"]) if "sample.kept_top_k" in step else int(np.count_nonzero(final)),
        u=float(step["sample.uniform"]) if "sample.uniform" in step else None,
        cum=np.cumsum(final[order[:n]]))  # [n_keep] upper edge of each kept candidate's band


def penalty_names(s) -> str:
    """The penalties that are on, in words: "repetition 1.3, presence 0.5, frequency 0.1"."""
    on = [(say("sample.repetition"), s.repetition_penalty, 1.0), (say("sample.presence"), s.presence_penalty, 0.0),
          (say("sample.frequency"), s.frequency_penalty, 0.0)]
    return ", ".join(f"{name} {v:g}" for name, v, off in on if v != off)


def penalty_arithmetic(logit: float, count: int, s, p: int) -> str:
    """How the penalties made a token's logit: "3.104 − 0.5 − 2×0.1 = 2.404" (count 0: unchanged)."""
    x, terms = float(logit), num(logit, p)
    if count == 0:
        return say("sample.unchanged", logit=terms)
    R = s.repetition_penalty
    if R != 1:
        terms += f" × {R:g}" if x < 0 else f" ÷ {R:g}"
        x = x * R if x < 0 else x / R
    if s.presence_penalty:
        terms, x = terms + f" − {s.presence_penalty:g}", x - s.presence_penalty
    if s.frequency_penalty:
        terms, x = terms + f" − {count}×{s.frequency_penalty:g}", x - count * s.frequency_penalty
    return f"{terms} = {num(x, p)}"


def draw_stages(step) -> str:
    """The draw's stages in one line: "logits → ÷ temperature 0.80 → softmax → top-k 5 → … → token"."""
    d = _draw(step)
    stages = ["logits"] + ([say("sample.penalties_stage", which=penalty_names(d.settings))] if d.counts is not None else [])
    stages += [f"÷ temperature {num(d.T, 2)}" if not d.greedy else "temperature 0 (greedy)", "softmax"]
    if not d.greedy:
        stages += [f"top-k {d.top_k}" if d.top_k is not None else "top-k off",
                   f"top-p {d.top_p}" if d.top_p is not None else "top-p off",
                   *([f"min-p {d.min_p:g}"] if d.min_p is not None else []), "renormalise",
                   f"draw u (seed {d.seed})"]
    return " → ".join(stages + ["token"])


def penalty_notes(step, tokenizer, p: int, rivals: int = 3) -> list[str]:
    """What the penalties did: which tokens they changed, and the arithmetic for the chosen token and its
    nearest rivals (the most likely after the penalties, and the most likely before them if it fell)."""
    d = _draw(step)
    if d.counts is None:
        return []
    s, logits = d.settings, step["logits"][-1] if "logits" in step else None
    counts, after = d.counts, d.penalized
    seen = int(np.count_nonzero(counts))
    window = (say("sample.window_all", n=integer(counts.sum())) if s.penalty_last_n is None
              else say("sample.window_last", n=integer(counts.sum())))
    rules = [say("sample.rule_repetition", R=f"{s.repetition_penalty:g}")] if s.repetition_penalty != 1 else []
    rules += [say("sample.rule_presence", A=f"{s.presence_penalty:g}")] if s.presence_penalty else []
    rules += [say("sample.rule_frequency", B=f"{s.frequency_penalty:g}")] if s.frequency_penalty else []
    notes = [say("sample.penalties", n=integer(seen), window=window, rules=", ".join(rules))]
    if logits is None:
        return notes
    ids = [d.chosen] + [int(i) for i in largest_first(after)[: rivals + 1] if int(i) != d.chosen][:rivals]
    top_before = int(largest_first(logits)[0])
    if top_before not in ids:
        ids.append(top_before)
    for i in ids:
        notes.append(say("sample.arith", token=tok(tokenizer, i), count=str(int(counts[i])),
                         sum=penalty_arithmetic(float(logits[i]), int(counts[i]), s, p)))
    if top_before != int(largest_first(after)[0]):
        notes.append(say("sample.overtaken", before=tok(tokenizer, top_before), after=tok(tokenizer, int(largest_first(after)[0]))))
    return notes


def sampling_notes(step, tokenizer, p: int) -> list[str]:
    """What each stage of the draw did, in sentences (under the terminal's table, and on the page's logits
    step): the temperature, top-k, top-p, the renormalisation and where the seeded u fell."""
    d = _draw(step)
    T, seed, greedy, chosen, probs, order, cum = d.T, d.seed, d.greedy, d.chosen, d.probs, d.order, d.cum
    n_vocab, n_k, n_p, top_k, top_p, u = d.n_vocab, d.n_k, d.n_p, d.top_k, d.top_p, d.u
    notes = penalty_notes(step, tokenizer, p)
    if greedy:
        notes.append(f"Temperature 0 is greedy: the most likely token, {tok(tokenizer, chosen)}, is chosen; "
                     "no random number is drawn (top-k, top-p and min-p do not matter).")
    else:
        notes.append(f"softmax(logits ÷ {num(T, 2)}): a temperature above 1 flattens the distribution, below 1 sharpens it.")
        notes.append(f"top-k: {'keeps the ' + str(n_k) + ' most likely' if top_k is not None else 'off, keeps all'} "
                     f"of {integer(n_vocab)} tokens.")
        mass = float(probs[order[:n_p]].sum())
        if top_p is not None and top_p < 1:
            notes.append(f"top-p {top_p}: keeps the {n_p} most likely of those, the fewest whose probabilities "
                         f"(renormalised after top-k) reach {top_p}.")
        else:
            notes.append("top-p: off, keeps them all.")
        if d.min_p is not None:
            top = float(probs[order[0]])
            notes.append(say("sample.min_p", p=f"{d.min_p:g}", top=prob(top, p), threshold=prob(d.min_p * top, p),
                             n=integer(d.n), of=integer(n_p)))
            mass = float(probs[order[:d.n]].sum())
        notes.append(f"renormalise: the {d.n} kept probabilities add up to {prob(mass, p)}; each is divided by it, "
                     "so they sum to 1.")
        if u is not None:
            band = min(int(np.searchsorted(cum, u, side="right")), d.n - 1)
            lo = float(cum[band - 1]) if band > 0 else 0.0
            notes.append(f"draw: numpy's PCG64 generator seeded with {seed} gives u = {num(u, max(p, 4))}, "
                         f"uniform in [0, 1). Stacking the kept tokens' probabilities as bands from 0 to 1, u falls in "
                         f"band #{band + 1} [{num(lo, max(p, 4))}, {num(cum[band], max(p, 4))}), which is "
                         f"{tok(tokenizer, chosen)}. The same seed draws the same u on every machine.")
    return notes


def stage_probs(step, tokenizer, top: int = 10) -> dict | None:
    """Each stage of the draw as the probabilities of the same few tokens before and after it (the page's
    picture a teacher steps through): {ids, stages: [{label, p, changed}]}, `changed` the tokens the stage
    changed or cut; None when the pass records no draw. Stage 0 is the model's own softmax(logits)."""
    if "logits" not in step or not all(n in step for n in ("sample.probs", "sample.final", "sample.token")):
        return None
    d = _draw(step)
    logits = np.asarray(step["logits"][-1], dtype=np.float64)  # [d_vocab]

    def soft(x):  # [d_vocab] → [d_vocab]
        e = np.exp(x - x.max())
        return e / e.sum()

    model = soft(logits)  # [d_vocab]
    ids = [int(i) for i in d.order[:top]]
    for extra in (d.chosen, int(largest_first(model)[0])):
        if extra not in ids:
            ids.append(extra)
    stages = [(say("sample.stage_model"), model, 0)]
    if d.counts is not None:
        moved = int(np.count_nonzero(d.penalized != logits))
        stages.append((say("sample.stage_penalties", which=penalty_names(d.settings)), soft(d.penalized), moved))
    if d.greedy:
        stages.append((say("sample.stage_greedy"), d.final, d.n_vocab - 1))
    else:
        stages.append((say("sample.stage_temperature", T=num(d.T, 2)), d.probs, 0))

        def kept(n):  # [d_vocab] the n most likely, renormalised
            out = np.zeros_like(d.probs)
            out[d.order[:n]] = d.probs[d.order[:n]]
            return out / out.sum()

        stages.append((say("sample.stage_top_k", k=str(d.top_k) if d.top_k is not None else "off", n=integer(d.n_k)),
                       kept(d.n_k), d.n_vocab - d.n_k))
        stages.append((say("sample.stage_top_p", p=f"{d.top_p:g}" if d.top_p is not None else "off", n=integer(d.n_p)),
                       kept(d.n_p), d.n_k - d.n_p))
        if d.min_p is not None:
            stages.append((say("sample.stage_min_p", p=f"{d.min_p:g}", n=integer(d.n)), d.final, d.n_p - d.n))
    return {"ids": ids, "chosen": d.chosen,
            "stages": [{"label": lbl, "p": [round(float(p[i]), 6) for i in ids], "changed": int(changed)}
                       for lbl, p, changed in stages]}
