"""Each step's words, written once: the sentences of the walkthrough that the classroom page says too.

The terminal renderers (`layer`, `predict`, `loop`, `lens`) print `say(key, **slots)`; the page
(`render.page`) receives `WORDS` whole in its JSON (`words`) and its script fills the same
templates with the numbers it already has (`say(key, {slots})` in `page/core.js`), so the two never
word a step differently. A slot is a name in braces, `{L}` the token's letter; every value is given
already formatted (a string; in the script also an element, a token's text or a button, which
makes the sentence a list of parts), so Python's `str.format` and the script's fill agree. A sentence whose
slots are all known when the page is written (the KV cache's notes, the logit lens's verdict, the
model line) is sent finished instead, from the renderer's own function. What only the page says (its
step titles, controls, hover readouts, notes) is here too, beside its step's sentences, so that the
page's scripts hold no sentence at all; the compare page's (`compare.*`) come after the checks.

`tests/test_words.py` checks that the page's scripts hold no prose of their own and none of these
sentences, that every key they read is here, and that every template here is said.
"""

from __future__ import annotations

WORDS: dict[str, str] = {
    # the tokens (render/walkthrough.py, page step 1)
    "tokens.intro": "The prompt splits into {tokens}, {first}, from the {vocab} vocabulary of {n_vocab} tokens (␣ marks "
                    "a leading space). Positions, layers, heads and passes count from 0, as in the code: A is position 0, "
                    "layer 0 the first layer.",
    "token.generated": ", generated: computed by pass {k}",
    # what only the page says (its step titles, controls, notes) sits beside its step's sentences, as here
    "title.tokens": "Tokens",
    "tokens.click": " Click a token to follow it through every step.",
    "tokens.in_prompt": "the prompt",
    "tokens.read": "generated; pass {k} read it",
    "tokens.end": "generated: the end token, so generation stops",
    "tokens.after": "generated, appended after the last pass",
    "tokens.never_run": "appended after the last pass: never run",
    "tokens.absent": "({tokens} not in this page)",
    "page.absent": "not in this page",
    "page.left_out": "Left out of this page (its size): {what}.",
    # the layer's input (render/layer.py, page step 2)
    "title.embed": "Embedding + position",
    "embed.intro": "Each token becomes a vector of {d_model} numbers: its row of the embedding matrix{plus}.",
    "embed.plus": ", plus the vector of its position",
    "embed.row": "{L} queries the embedding matrix W_E ({shape}) at row {id}",
    "embed.position": "+ position vector (W_pos row {t}, {kind})",
    "embed.sum": "= the sum, {L}'s input to layer 0",
    "embed.scale": "Gemma multiplies the embedding by √d_model: x scaled by √{d_model} = {factor} before layer 0",
    "embed.times": ", times √{d_model}",
    "layer.input": "{L}'s output of layer {prev}",
    "layer.input0": "{L}'s input to layer 0 ({source})",
    "embed.table": "Every token's input to layer 0 (a row each)",
    # what a token sees (step 3)
    "title.qkv": "Q, K, V per head",
    "qkv.intro": "Layer {layer}, head {h} of {H}. The article's analogy: the query is what {L} searches for, each key is "
                 "what a token can be found by, each value is the content it hands over.",
    "sees.self": "{L} can see only itself (position 0)",
    "sees.keys": "{L} can see the keys and values of {seen} (positions 0–{t})",
    "sees.cache": "; those of {cached} come from the KV cache (“cache k”: computed by pass k)",
    "sees.global": "; layer {layer} has no sliding window (a global layer)",
    "sees.window": "; the sliding window ({window} keys) hides {hidden} (positions 0–{last}: score −∞, weight 0)",
    "mask.hides": "the causal mask hides ",
    "mask.later": " ({where}, later tokens: score −∞, weight 0)",
    "mask.nothing": "the causal mask hides nothing: ",
    "mask.last": "{L} is the last token",
    # a head's matrices and vectors (step 3)
    "head.slices": "{all}, one {slice} slice per head",
    "head.of": " of {H}  (W_Q, W_K, W_V: {shape})",
    "head.gqa": " of {H}  (W_Q: {shape}); it shares key/value head {g} of {KV} (W_K, W_V: {kv_shape}) with query heads "
                "{first}–{last} (grouped-query attention)",
    "head.one": "W_Q, W_K, W_V: {shape} each",
    "head.vector": "{L}_{m} = {src}·W_{m}{slice} + b_{m}",
    "rope.title": "rotary positions: ",
    "rope.turns": "after W_Q and W_K, {L}'s query and key are rotated by its position {t}: pair (q_i, q_(i+{half})) "
                  "turns by angle {t}·θ_i, θ_i = {theta}^(−2i/{d_head}){base}{scaling}",
    "rope.local": " (the local base of the sliding-window layers)",
    "rope.global": " (the global base)",
    "rope.scaling": " (Llama 3 scaling divides the slow ones)",
    "rope.here": "; here [{angles}] radians",
    "rope.then": ". Q·K then depends on how far apart two tokens are, not on where they are.",
    "rope.before": " Q and K below are before the rotation (tracer trace shows them after).",
    "qkv.key_before": "K (key, before the rotation)",
    "qkv.strongest": "the {n} keys {L} weighs most; {more} more visible keys are not listed",
    "qkv.absent": "the keys and values of {positions} are not in this page (see “left out”)",
    # the scores (step 4)
    "title.scores": "Scores, the causal mask, softmax",
    "scores.by_scalar": "√query_pre_attn_scalar = √{scalar}",
    "scores.by_d_head": "√d_head = √{d_head}",
    "softmax": "softmax([{scores}]) = [{weights}]",
    "scores.compare": "{L}'s query is compared with every key it may see: multiply them number by number and add up "
                      "(a dot product). A large score means 'this key matches what I am looking for'.",
    "scores.masked": "Keys of later tokens are masked: a token may not look ahead, so they get −∞ and will get weight 0.",
    "scores.unscaled": "This model does not scale the scores, as in the article",
    "scores.divided": "Each score is divided by {by}",
    "scores.softcapped": ", then soft-capped, {cap} · tanh(s / {cap}) (Gemma 2), before the mask",
    "scores.then": " {scaled}; softmax turns them into weights that sum to 1.",
    "scores.none": "no attention recorded for this token here",
    "scores.some_absent": "some of them are not in this page",
    "mask.hidden": "hidden by the causal mask",
    "heatmap.title": "Layer {layer}, head {h}: all the weights",
    "heatmap.label": "attention weights, layer {layer}, head {h}",
    "heatmap.hover": "Hover a cell for its numbers; click a row to follow that token.",
    "heatmap.cell": "layer {layer}, head {h}: {q} ({q_text}) → {k} ({k_text}): weight {w}{score}",
    "heatmap.score": ", score {s}",
    "heatmap.masked": "{q} → {k}: hidden by the causal mask (score −∞, weight 0)",
    "heatmap.rows": "Row: the token that attends; column: the key it reads; {legend}.",
    "heatmap.last": "the map shows the last {n} of the {total} positions in this page",
    "ablate.every_head": "step 6: every head knocked out",
    "heatmap.legend": "digit = weight in tenths, █ ≥ 0.95, · hidden by the causal mask",
    # the weighted sum (step 5)
    "title.sum": "The weighted sum",
    "sum.intro": "{new} is the values of the tokens it sees, each weighed by its attention weight, added up.",
    "sum.none": "no attention weights recorded here",
    "sum.more": " + … ({n} more terms, weights summing to {rest})",
    "sum.new": "{L}'s new representation",
    "sum.from_head": " from head {h}",
    # the heads and W_O, the residual, the MLP (steps 6 and 7)
    "title.heads": "The heads and W_O",
    "heads.one": "This model has a single head, so the 'concatenation' is just that head's output; W_O still maps it "
                 "back to the model's width.",
    "heads.many": "A layer runs {H} heads side by side, each with its own W_Q, W_K and W_V, so each can look for "
                  "something different (the article: one for grammar, one for meaning). Their outputs are laid end "
                  "to end and one matrix, W_O, merges them.",
    "heads.concat": "concatenate the {H} heads' outputs ({H} × {d_head} = {n} numbers)",
    "heads.wo": "× W_O ({shape}) + b_O, back to {d_model} dims",
    "heads.click": " Click a map to choose its head; below, knock a head out and see the prediction without it.",
    "heads.choose": "head {layer}:{h}: choose it{more}",
    "heads.see_without": " and see the prediction without it",
    "heads.card": ": choose it; the card says the prediction without head {layer}:{h}",
    "norm.after": "{product}, then {norm}:",
    "ablate.title": "Knock one head out: what {L} predicts without it",
    "ablate.how": "Each button runs the prompt again with one head's z set to zeros where the heads are combined (what "
                  "{command} does); click one, or choose a layer and a head above.",
    "ablate.none": "head ablations not precomputed for this page",
    "ablate.missing": "no ablation of head {layer}:{h} in this page",
    "ablate.recorded": "the run as recorded",
    "ablate.without": "without head {layer}:{h}",
    "ablate.below_top": "without it, {token} has p {p}, below its top {n}",
    "ablate.button": "head {layer}:{h}: the prediction without it",
    "ablate.grid": "heads to knock out",
    "ablate.caption": "p({token}) without each head (clean {p}); ✗ the top-1 changes{compact}",
    "ablate.compact": "; a row per layer, a column per head",
    "title.mlp": "Residual, layer norm, MLP",
    "mlp.none": "This model has no MLP (mlp = false), as in the article's simplified block.",
    "mlp.residual": "residual: add the layer's input back",
    "mlp.no_residual": "no residual (residual = false): the MLP reads attn_out_{L}",
    "mlp.wout": "× W_out ({shape}) + b_out",
    "out.mlp": "residual: + mlp_out",
    "out.mlp_alone": "no residual: the MLP output itself",
    "out.attn": "residual: x_{L} + attn_out_{L}",
    "out.attn_alone": "no residual (residual = false): attn_out_{L} itself",
    "out.next": "the input of layer {next}",
    "out.final": "its final vector",
    "out.of": "{how} → {L}'s output of layer {layer}, {next}",
    # all layers (step 8)
    "title.layers": "All layers",
    "layers.none": "This model has no layers: the embedding goes straight to W_U.",
    "layers.intro": "Every layer repeats the steps above on the previous layer's output. For {L} (position {t}): "
                    "the size ‖x‖ of its vector going in and out, and the token each head attends to most "
                    "(with its weight).",
    "layers.click": " Click a row to choose that layer.",
    "layers.most": "most-attended token, heads 0–{last}",
    # predicting the next token (step 9)
    "title.predict": "Logits, temperature, top-k, the choice",
    "predict.intro": "After the last of the {layers}, {L}, the last token, predicts {G}: its final vector meets the "
                     "unembedding W_U, which gives one score (logit) per vocabulary token.",
    "predict.final": "{L}'s final vector",
    "predict.unembed": "× W_U ({shape}{tied}) + b_U",
    "predict.tied": "; W_E transposed, tied",
    "predict.greedy": "softmax(logits) = probabilities, which sum to 1; ",
    "predict.greedy_bold": "temperature 0: greedy",
    "predict.greedy_rest": ", the most likely token is chosen, no random draw",
    "predict.chosen": "chosen: ",
    "predict.end": "{token} is the end token, so generation stops (it takes no position of its own)",
    "predict.untrained": "(untrained weights: this prediction is meaningless until real weights are loaded)",
    "predict.none": "no sampling recorded in this pass",
    "temperature.reset": "back to the run's {T}",
    "temperature.one": "T = 1 (softmax)",
    "temperature.zero": "T = 0 (argmax)",
    "temperature.zero_run": "T = 0 (argmax: this run)",
    "temperature.argmax": "T = 0: argmax over all {n} recorded logits of pass {k}: the largest logit gets probability 1, "
                          "every other 0 (greedy decoding; no softmax, no draw).",
    "temperature.softmax": "softmax(logits ÷ {T}) over all {n} recorded logits of pass {k}, computed in this page: below 1 "
                           "sharpens, above 1 flattens; moving T draws nothing again.",
    "temperature.absent": "pass {k}'s logits are not in this page (see \"left out\"): the recorded probabilities, at the "
                          "run's temperature.",
    "temperature.scale": "the top {n} at T {T}; each bar's height is its probability, on one 0–1 scale",
    # the loop (step 10)
    "title.loop": "The loop and the KV cache",
    "loop.intro": "The article's loop: add the chosen token to the sequence and run the layers again, until the end "
                  "token. Choose a pass with the pass buttons (or a row below).",
    "loop.reads_prompt": "reads {span} (the prompt)",
    "loop.reads": "reads {named}",
    "loop.computes": "; computes {new}, reuses {old} from the KV cache",
    "loop.recomputes": "; recomputes all {n} rows (no cache)",
    "loop.predicts": "predicts ",
    "loop.top3": " (p {p}; top 3: {alts})",
    "loop.not_appended": "(not appended: the run stops here, {why})",
    "loop.cached": "keys and values from pass {k}",
    "loop.computed": "computed in this pass",
    "loop.macs": "multiply-adds: {macs} in this pass; {full} to recompute every row ({saved}% saved).",
    "loop.table": "KV cache ({state}): rows reused and computed per pass",
    "loop.cache_off": "off: --no-cache",
    "verify.ok": "✓ the KV cache changes no logit beyond rounding and no token",
    "verify.bad": "✗ the KV cache and full recompute disagree",
    # every position predicts (step 11)
    "title.positions": "Every position predicts",
    "positions.rows": "The decoder turns every position's final vector into logits (the unembedding is applied to all "
                      "rows at once); row p predicts the token at p + 1. loss = −log p(actual), in nats. * the token "
                      "the sampler chose.",
    "positions.click": " Generation reads only the last row of each pass (◀). Click a row to follow its token.",
    "positions.mean": "Training (teacher forcing) scores every row against the token that really follows: mean loss "
                      "over rows {rows} = {mean} nats (a uniform guess over {n} tokens: {uniform}).",
    # the logit lens (step 12)
    "lens.title": "Logit lens: each layer's residual stream through the final {norm} and W_U",
    "title.lens": "The logit lens",
    "lens.question": ", as if the model stopped there: when does the prediction appear?",
    "lens.none": "no logit lens recorded in this run",
    "lens.borrowed": "pass {k} has no lens of its own; pass 0's:",
    "lens.last": "the last {n} of the {total} positions the lens covers",
    # the header and the checks
    "header.model": "model {name}: {layers}, d_model {d_model}, {heads} (d_head {d_head}), {dtype}; {block}",
    "header.run": "{line}. The run: {settings}.",
    # the page's card of the followed token, and its controls
    "detail.following": "Following {L} {text}",
    "detail.where": "position {t}, id {id}{generated}{at}",
    "detail.at": " · layer {layer}, head {h}",
    "detail.last": "{L} is the last token of pass {k}: it chooses {token}",
    "detail.norms": "{first} into layer 0 → {last} out of layer {layer}",
    "detail.predicts": "{top} {p}; next is {next} {next_p}; loss {loss}",
    "detail.legend": "{L}'s vectors, step by step (▶ this step's; hover a number for 6 digits): E embedding row, P "
                     "position, x in the layer's input, {norm} its {norm_title}, Q K V of the head, z the weighted sum, "
                     "attn_out after W_O, out the layer's output, f the final vector.",
    "detail.left_out": "Left out of this page: {what}.",
    "checks.agree": "{ok} of {n} stated values agree",
    "checks.disagree": " ({bad} disagree)",
    "title.checks": "The stated values, checked",
    "checks.here": "Stated values checked here",
    "checks.more": "{n} here, for {where} (click to see)",
    "checks.bad": "The stated values that disagree",
    "checks.all": "Every stated value, by step",
    # the compare page (render/compare.py, page/compare.js)
    "compare.prompts": "Two prompts, one answer each",
    "compare.line": "{A} “{a}”  ·  {B} “{b}”: {tokens} each, {positions} (≠, bold).",
    "compare.run_predicts": "{name}'s run predicts",
    "compare.title": "Activation patching: where does A's answer live?",
    "compare.patching": "Each cell: B's run with A's residual stream (blocks.L.hook_resid_pre) put in at that layer's input "
                        "and that position alone, and the fraction of the difference it gives back, (ld_patched − ld_B) ÷ "
                        "(ld_A − ld_B): 1 is A's answer, 0 is B's.",
    "compare.scale": "colour scale: 0 (B's answer) dark purple to 1 (A's answer) yellow",
    "compare.scale_note": " (below 0 and above 1 take the end colours, nan is grey; each cell holds its number)",
    "compare.cell": "B's run with A's blocks.{layer}.hook_resid_pre at position {pos} (A {a}, B {b}): {what}",
    "compare.nan": "nan, nothing to recover (A's and B's logit differences are equal)",
    "compare.recovers": "recovers {v} of the logit difference",
    "compare.hover": "Hover or focus a cell for its whole number.",
    "scores.capped_key": " (key {key}), before the mask and softmax",
    "predict.softcapped": "{unembed}, then soft-capped: {formula}",
}


def say(key: str, /, **slots: str) -> str:
    """The sentence `key` with its slots filled (every slot it names must be given)."""
    return WORDS[key].format(**slots)
