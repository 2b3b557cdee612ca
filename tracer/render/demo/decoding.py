"""The demo's screens of how the model is decoded: the draw stage by stage (after temperature's, when a
penalty or min-p changes the draw: the terminal's stage table and its arithmetic, `render.sampling`), beam
search's tree (`render.beams`), and speculative decoding (after the KV cache's): each round's drafted tokens,
the model's one verifying pass and its verdicts, the passes counted against the plain loop's, and the seed
Q&A's "X probability distributions" answered (`render.speculative`'s rounds). A run without the setting has
no such screen."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from ...sections import screen
from ..beams import beam_tree
from ..sampling import sampling_stages
from ..speculative import round_table, round_words, spec_rounds
from ..view import View
from ..words import say
from .base import Demo, Step


@screen("draw")
def step_draw(d: Demo) -> Step | None:
    if "sample.counts" not in d.trace and "sample.kept_min_p" not in d.trace:  # nothing beyond temperature's screen
        return None
    body = sampling_stages(d.trace, d.tokenizer, View(precision=d.precision, top_k=min(d.rows, 8)))
    return Step(say("demo.draw.title"), say("demo.draw"), body)


@screen("beams")
def step_beams(d: Demo) -> Step | None:
    if not d.gen.beams:
        return None
    return Step(say("demo.beams.title"), say("demo.beams", n=str(d.settings.beams)),
                beam_tree(d.gen, d.tokenizer, View(precision=d.precision)))


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
