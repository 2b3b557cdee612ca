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
    # a candidate clicked: the token forced and the generation continued (the page's logits step, tracer serve)
    "branch.click": "Click a candidate to force it here and see what would have followed.",
    "branch.static": "Forcing {token} at pass {k} continues from {text}. This page cannot run it; this command does "
                     "(the text is tokenized again): {command}",
    "branch.served": "Forcing {token} at pass {k}: running on from {text}; the branch appears beside the others, "
                     "above. The same from a terminal: {command}",
    "serve.trunk": "the run", "serve.forced": "{token} forced at pass {k}",
    "serve.branches": "Branches: what followed each choice (click a branch's title to open its steps)",
    # the model file's suggested sampling (render/header.py, `tracer models`)
    "file.suggests": "This file suggests {what} (general.sampling.*); {how}.",
    "file.defaults": "the samplers' neutral values",
    "file.used": "this run uses them where no option was given (--sampling file)",
    "file.unused": "--sampling file uses them",
    "file.other": " It also names samplers tracer does not have: {what}.",
    # speculative decoding's rounds (render/speculative.py, the page's speculative step, the demo's screen)
    "title.speculative": "Speculative decoding: draft, then verify in one pass", "path.speculative": "Speculative",
    "spec.title": "Speculative decoding: the draft {draft} proposes up to {k} tokens a round; the model checks them "
                  "all in one pass",
    "spec.rule_greedy": "Temperature 0: a drafted token is accepted while it is the model's own choice at its position "
                        "(the argmax after the penalties), so the tokens are exactly plain greedy decoding's.",
    "spec.rule_sampled": "Temperature above 0: a drafted token d is accepted with probability min(1, p(d) / q(d)) (p the "
                         "model's distribution at its position, q the draft's; a seeded uniform u below it accepts); at "
                         "the first rejection the model's token is drawn from max(0, p − q) renormalised, so the output "
                         "follows the model's own distribution.",
    "spec.round": "Round {i}: the draft proposed {proposed} ({k}, one pass of the draft each); the model's one pass over "
                  "{n} positions predicts at every one of them:",
    "spec.last": "Round {i}: one token left to make: nothing to draft, the model's pass gives {next}.",
    "spec.outcome": "→ {a} of {k} accepted; then the model's own token {next} ({how}): {gained} token(s) for one pass "
                    "of the model.",
    "spec.own": "its choice at the first rejected position",
    "spec.resampled": "drawn from max(0, p − q) at the rejected position",
    "spec.bonus": "every draft accepted: the last position's prediction gives it for free",
    "spec.free": "the next token, for free",
    "spec.total": "{n} tokens in {passes} passes of the model instead of {n} (plus {drafts} passes of the draft); "
                  "{accepted} of {drafted} drafted tokens accepted ({rate}).",
    "demo.draw.title": "The draw, stage by stage",
    "demo.draw": "Before the draw, the runners people use change the scores: a penalty for each token already in "
                 "the context, then temperature, top-k, top-p and min-p, in transformers' order. Each row below is "
                 "a recorded number; the sentences give the arithmetic for the chosen token and its rivals.",
    "demo.beams.title": "Beam search",
    "demo.beams": "Beam search draws nothing: it keeps the {n} best sequences by summed log-probability; at each "
                  "step every beam's continuations compete, the best go on, the rest are pruned.",
    "demo.speculative.title": "Speculative decoding",
    "demo.speculative": "A draft ({draft}) guesses the next few tokens cheaply, one pass each; the model then runs "
                        "ONE pass over all of them and keeps the guesses it agrees with.",
    "demo.speculative.more": "({n} more rounds: tracer trace --section loop shows them all)",
    "spec.answer": "The Q&A asks why every position's vector goes through the final linear layer: “Wouldn't you have X "
                   "probability distributions when in reality you only want one?” In the plain loop only the last is "
                   "used. The verifying pass uses all of them: the distribution at each drafted position judges the "
                   "draft's token there, so one pass can accept several tokens.",
}
