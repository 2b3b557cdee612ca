"""Speculative decoding's rounds, shown: what the draft proposed, what the model's one verifying pass
predicted at each of those positions (the seed Q&A's "X probability distributions", every one used),
which drafted tokens were accepted, the model's own token after them, and the count of the model's
passes against the plain loop's. `spec_rounds` gives the rounds as data (the terminal's
`speculative_view`, the page's slide and the demo's screen show the same); it reads the recorded
`verify.*`, `sample.*` and logits only (`tracer.run.speculative`)."""

from __future__ import annotations

import math

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..run.trace import DRAFT
from .fmt import integer, prob, tok
from .words import say


def _softmax(x) -> np.ndarray:  # [d_vocab] → [d_vocab]
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def spec_rounds(gen, tokenizer, p: int = 3) -> dict | None:
    """The rounds as data: {draft, model, rounds: [{drafted: [{id, text, q, p, predicted, predicted_text,
    verdict, u}], bonus: {predicted, text} or None, accepted, next, next_text, resampled}], tokens,
    target_passes, draft_passes, accepted, drafted, words}; None for a run without a draft."""
    spec = gen.meta.get("speculative")
    if not isinstance(spec, dict):
        return None
    rounds, drafts = [], []
    for q in gen.passes:
        if q.model == DRAFT:
            drafts.append(q)
            continue
        if "verify.accepted" not in q:
            continue
        drafted = [int(t) for t in q["verify.drafted"]]
        k, a = len(drafted), int(q["verify.accepted"])
        logits = np.asarray(q["logits"])[-(k + 1):] if "logits" in q else None  # [k + 1, d_vocab]
        predicted = [int(t) for t in q["verify.predicted"]]
        rows = []
        for i, d in enumerate(drafted):
            own = drafts[len(drafts) - k + i]  # the draft's pass that drew d
            q_d = float(q["verify.draft_prob"][i]) if not math.isnan(q["verify.draft_prob"][i]) else \
                float(own["sample.probs"][d])
            p_d = float(q["verify.target_prob"][i]) if not math.isnan(q["verify.target_prob"][i]) else \
                (float(_softmax(logits[i])[d]) if logits is not None and gen.settings.greedy else None)
            u = float(q["verify.uniform"][i])
            verdict = "accepted" if i < a else "rejected" if i == a else "unjudged"
            rows.append({"id": d, "text": tok(tokenizer, d), "q": q_d, "p": p_d, "predicted": predicted[i],
                         "predicted_text": tok(tokenizer, predicted[i]), "verdict": verdict,
                         "u": None if math.isnan(u) else u, "ratio": None if math.isnan(u) else min(1.0, p_d / q_d)})
        token = int(q["sample.token"])
        rounds.append({"drafted": rows, "accepted": a, "next": token, "next_text": tok(tokenizer, token),
                       "bonus": a == k and k > 0, "resampled": a < k and not gen.settings.greedy,
                       "positions": k + 1, "draft_passes": k})
    n_tokens = len(gen.generated_ids)
    drafted = sum(len(r["drafted"]) for r in rounds)
    accepted = sum(r["accepted"] for r in rounds)
    rate = f"{100 * accepted / drafted:.0f}%" if drafted else "—"
    return {"draft": spec["draft"], "rounds": rounds, "tokens": n_tokens, "target_passes": spec["target_passes"],
            "draft_passes": spec["draft_passes"], "drafted": drafted, "accepted": accepted,
            "words": say("spec.total", n=integer(n_tokens), passes=integer(spec["target_passes"]),
                         drafts=integer(spec["draft_passes"]), accepted=integer(accepted), drafted=integer(drafted),
                         rate=rate),
            "answer": say("spec.answer")}


def round_words(r: dict, i: int, p: int) -> list[str]:
    """A round in sentences: what was proposed, the verdicts, the token that follows."""
    if not r["drafted"]:  # one token left: a plain pass
        return [say("spec.last", i=str(i + 1), next=r["next_text"])]
    proposed = " ".join(d["text"] for d in r["drafted"])
    out = [say("spec.round", i=str(i + 1), proposed=proposed, k=str(len(r["drafted"])), n=str(r["positions"]))]
    how = say("spec.bonus") if r["bonus"] else say("spec.resampled") if r["resampled"] else say("spec.own")
    out.append(say("spec.outcome", a=str(r["accepted"]), k=str(len(r["drafted"])), next=r["next_text"],
                   how=how, gained=str(r["accepted"] + 1)))
    return out


def round_table(r: dict, p: int, sampled: bool) -> Table:
    """One row per drafted token: its probability under the draft (q) and the model (p), the model's own choice
    there, and the verdict (sampled: the uniform number and min(1, p/q) it was compared with)."""
    t = Table(show_edge=False, pad_edge=False)
    heads = ["#", "drafted", "q", "model's choice", "p", "verdict"] + (["u", "min(1, p/q)"] if sampled else [])
    for c in heads:
        t.add_column(c, justify="left" if c in ("drafted", "model's choice", "verdict") else "right", no_wrap=True)
    marks = {"accepted": "✓ accepted", "rejected": "✗ rejected", "unjudged": "not judged"}
    for i, d in enumerate(r["drafted"]):
        rule = ["" if d["u"] is None else prob(d["u"], max(p, 3)), "" if d["ratio"] is None else prob(d["ratio"], max(p, 3))]
        t.add_row(str(i), d["text"], prob(d["q"], p), d["predicted_text"], "" if d["p"] is None else prob(d["p"], p),
                  marks[d["verdict"]], *(rule if sampled else []))
    if r["bonus"]:  # the last position's prediction: the next token
        t.add_row(str(len(r["drafted"])), "", "", r["next_text"], "", say("spec.free"), *(["", ""] if sampled else []))
    return t


def speculative_view(gen, tokenizer, view) -> Group:
    """Every round of speculative decoding: proposals, the verifying pass's predictions, the verdicts."""
    data = spec_rounds(gen, tokenizer, view.precision)
    if data is None:
        return Group()
    parts = [Text(say("spec.title", draft=data["draft"], k=str(gen.settings.draft_tokens)), style="bold"),
             Text(say("spec.rule_greedy") if gen.settings.greedy else say("spec.rule_sampled"))]
    for i, r in enumerate(data["rounds"]):
        words = round_words(r, i, view.precision)
        parts += [Text(words[0], style="bold")] + ([round_table(r, view.precision, not gen.settings.greedy), Text(words[1])] if r["drafted"] else [])
    parts += [Text(data["words"], style="bold"), Text(data["answer"])]
    return Group(*parts)
