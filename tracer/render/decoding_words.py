"""The words of how a model is decoded (issue 36), beside `words.py` and merged into its `WORDS`: the draw's
stages (penalties, min-p), beam search as a tree, speculative decoding's rounds, the model file's suggested
settings and branching from a clicked token. Said with `words.say` like every other sentence."""

from __future__ import annotations

DECODING: dict[str, str] = {
    # the draw's stages (render/sampling.py, the page's logits step)
    "sample.repetition": "repetition", "sample.presence": "presence", "sample.frequency": "frequency",
    "sample.penalties_stage": "penalties ({which})",
    "sample.penalties": "Penalties: the {n} distinct tokens of {window} have their logits changed ({rules}); every "
                        "other token keeps its own.",
    "sample.rule_repetition": "repetition {R}: a positive logit ÷ {R}, a negative one × {R}",
    "sample.rule_presence": "then presence − {A}", "sample.rule_frequency": "then frequency − {B} × the count",
    "sample.window_all": "the context (prompt and generated tokens, {n} counted)",
    "sample.window_last": "the last {n} tokens of the context",
    "sample.arith": "{token}: count {count} → {sum}",
    "sample.unchanged": "unchanged {logit}",
    "sample.overtaken": "The penalties moved {before}, the most likely before them, below {after}.",
    "sample.min_p": "min-p {p}: keeps the tokens whose probability is at least {p} × {top} (the most likely one's) = "
                    "{threshold}: {n} of the {of} left after top-p.",
    "sample.picture": "Each stage of the draw, the probabilities before and after it ({n} most likely tokens; a cut "
                      "token falls to 0 and the rest are renormalised):",
    "sample.stage_of": "stage {i} of {n}: {stage}",
    "sample.stage_model": "the model's probabilities (softmax of the logits)",
    "sample.stage_penalties": "after the penalties ({which})",
    "sample.stage_temperature": "÷ temperature {T}",
    "sample.stage_greedy": "temperature 0: all on the most likely token",
    "sample.stage_top_k": "top-k {k}: {n} kept",
    "sample.stage_top_p": "top-p {p}: {n} kept",
    "sample.stage_min_p": "min-p {p}: {n} kept",
    "sample.changed": "changed {n}",
    "sample.prev": "◀ stage", "sample.next": "stage ▶",
    # beam search as a tree (render/beams.py, the page's beams step)
    "title.beams": "Beam search: the tree", "path.beams": "Beams",
    "beams.title": "Beam search, {n} beams (length penalty {alpha}): each beam's continuations, their summed "
                   "log-probabilities, kept, finished or pruned",
    "beams.rule": "Each step every beam runs one pass; its next-token log-probabilities, added to the sum it carries, "
                  "give its continuations ({k} shown per beam). Of all beams' continuations the {n} best that do not "
                  "end go on as the next step's beams; one among the {n} best that ends (the end token, or the last "
                  "token allowed) is finished; the rest are pruned.",
    "beams.root": "the prompt (sum 0)",
    "beams.kept": "{token} {total}: kept → beam {beam}",
    "beams.finished": "{token} {total}: finished",
    "beams.pruned": "{token} {total}: pruned",
    "beams.more": "… {n} more pruned",
    "beams.result": "The {n} finished sequences, best first:",
    "beams.score": "score = sum {sum} ÷ {n}^{alpha} = {score}",
}
