"""Sampling the next token, stage by stage: logits → ÷ temperature → softmax → top-k → top-p →
renormalise → the seeded draw → the token, one column per candidate. Reads `sample.*` only."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..tokenizers.tokens import show_token
from .fmt import integer, num, prob, short, tok
from .text import Fit, missing
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
        if not greedy:
            rows.append((f"÷ {num(T, 2)}", [num(scaled[i], p) for i in ids]))
        rows.append(("softmax", [prob(probs[i], p) for i in ids]))
        if not greedy:
            rows.append((f"top-k {top_k if top_k is not None else 'off'}", ["kept" if r < n_k else "cut" for r in ranks]))
            rows.append((f"top-p {top_p if top_p is not None else 'off'}",
                         [("kept" if r < n_p else "cut") if r < n_k else "" for r in ranks]))
            rows.append(("renormalised", [prob(final[i], p) if r < n_p else "0" for r, i in zip(ranks, ids)]))
            rows.append(("band", [f"{num(cum[r - 1] if r > 0 else 0.0, 2)}–{num(cum[r], 2)}" if r < n_p else ""
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
    order = largest_first(probs)  # [d_vocab] most likely first, ties by id
    return SimpleNamespace(
        T=s.temperature, greedy=s.temperature == 0, seed=s.seed, probs=probs, final=final, n_p=n_p, order=order,
        top_k=s.top_k, top_p=s.top_p,
        chosen=int(step["sample.token"]), n_vocab=len(probs),
        n_k=int(step["sample.kept_top_k"]) if "sample.kept_top_k" in step else int(np.count_nonzero(final)),
        u=float(step["sample.uniform"]) if "sample.uniform" in step else None,
        cum=np.cumsum(final[order[:n_p]]))  # [n_keep] upper edge of each kept candidate's band


def draw_stages(step) -> str:
    """The draw's stages in one line: "logits → ÷ temperature 0.80 → softmax → top-k 5 → … → token"."""
    d = _draw(step)
    stages = ["logits", f"÷ temperature {num(d.T, 2)}" if not d.greedy else "temperature 0 (greedy)", "softmax"]
    if not d.greedy:
        stages += [f"top-k {d.top_k}" if d.top_k is not None else "top-k off",
                   f"top-p {d.top_p}" if d.top_p is not None else "top-p off", "renormalise",
                   f"draw u (seed {d.seed})"]
    return " → ".join(stages + ["token"])


def sampling_notes(step, tokenizer, p: int) -> list[str]:
    """What each stage of the draw did, in sentences (under the terminal's table, and on the page's logits
    step): the temperature, top-k, top-p, the renormalisation and where the seeded u fell."""
    d = _draw(step)
    T, seed, greedy, chosen, probs, order, cum = d.T, d.seed, d.greedy, d.chosen, d.probs, d.order, d.cum
    n_vocab, n_k, n_p, top_k, top_p, u = d.n_vocab, d.n_k, d.n_p, d.top_k, d.top_p, d.u
    notes = []
    if greedy:
        notes.append(f"Temperature 0 is greedy: the most likely token, {tok(tokenizer, chosen)}, is chosen; "
                     "no random number is drawn (top-k and top-p do not matter).")
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
        notes.append(f"renormalise: the {n_p} kept probabilities add up to {prob(mass, p)}; each is divided by it, "
                     "so they sum to 1.")
        if u is not None:
            band = min(int(np.searchsorted(cum, u, side="right")), n_p - 1)
            lo = float(cum[band - 1]) if band > 0 else 0.0
            notes.append(f"draw: numpy's PCG64 generator seeded with {seed} gives u = {num(u, max(p, 4))}, "
                         f"uniform in [0, 1). Stacking the kept tokens' probabilities as bands from 0 to 1, u falls in "
                         f"band #{band + 1} [{num(lo, max(p, 4))}, {num(cum[band], max(p, 4))}), which is "
                         f"{tok(tokenizer, chosen)}. The same seed draws the same u on every machine.")
    return notes
