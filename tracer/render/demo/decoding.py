"""The demo's screen of speculative decoding (after the KV cache's): each round's drafted tokens, the
model's one verifying pass and its verdicts, the passes counted against the plain loop's, and the seed
Q&A's "X probability distributions" answered (`render.speculative`'s rounds; a run without a draft has
no such screen)."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from ...sections import screen
from ..speculative import round_table, round_words, spec_rounds
from ..words import say
from .base import Demo, Step


@screen("speculative")
def step_speculative(d: Demo) -> Step | None:
    data = spec_rounds(d.gen, d.tokenizer, d.precision)
    if data is None:
        return None
    sampled = not d.settings.greedy
    parts = [Text(say("spec.rule_sampled") if sampled else say("spec.rule_greedy")), Text()]
    for i, r in enumerate(data["rounds"][: d.rows]):
        words = round_words(r, i, d.precision)
        parts.append(Text(words[0], style="bold"))
        if r["drafted"]:
            parts += [round_table(r, d.precision, sampled), Text(words[1])]
    if len(data["rounds"]) > d.rows:
        parts.append(Text(say("demo.speculative.more", n=str(len(data["rounds"]) - d.rows)), style="dim"))
    parts += [Text(), Text(data["words"], style="bold")]
    return Step(say("demo.speculative.title"), say("demo.speculative", draft=data["draft"]) + " " + data["answer"],
                Group(*parts))
