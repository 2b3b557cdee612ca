"""Each step's words, written once: the sentences of the walkthrough that the classroom page says too.

The terminal renderers (`layer`, `predict`, `loop`, `lens`) print `say(key, **slots)`; the page
(`render.page`) receives `WORDS` whole in its JSON (`words`) and its script fills the same
templates with the numbers it already has (`say(key, {slots})` in `page/core.js`), so the two never
word a step differently. A slot is a name in braces, `{L}` the token's letter; every value is given
already formatted (a string), so Python's `str.format` and the script's fill agree. A sentence whose
slots are all known when the page is written (the KV cache's notes, the logit lens's verdict, the
model line) is sent finished instead, from the renderer's own function.

`tests/test_words.py` checks that the page's script holds none of these sentences itself and that
every key it reads is here.
"""

from __future__ import annotations

WORDS: dict[str, str] = {
    # the tokens (render/walkthrough.py, page step 1)
    "tokens.intro": "The prompt splits into {tokens}, {first}, from the {vocab} vocabulary of {n_vocab} tokens (␣ marks "
                    "a leading space). Positions, layers, heads and passes count from 0, as in the code: A is position 0, "
                    "layer 0 the first layer.",
    "token.generated": ", generated: computed by pass {k}",
    # the layer's input (render/layer.py, page step 2)
    "embed.row": "{L} queries the embedding matrix W_E ({shape}) at row {id}",
    "embed.position": "+ position vector (W_pos row {t}, {kind})",
    "embed.sum": "= the sum, {L}'s input to layer 0",
    "embed.scale": "Gemma multiplies the embedding by √d_model: x scaled by √{d_model} = {factor} before layer 0",
    "embed.times": ", times √{d_model}",
    "layer.input": "{L}'s output of layer {prev}",
    # what a token sees (step 3)
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
    # the scores (step 4)
    "scores.by_scalar": "√query_pre_attn_scalar = √{scalar}",
    "scores.by_d_head": "√d_head = √{d_head}",
    "softmax": "softmax([{scores}]) = [{weights}]",
    "scores.compare": "{L}'s query is compared with every key it may see: multiply them number by number and add up "
                      "(a dot product). A large score means 'this key matches what I am looking for'.",
    "scores.masked": "Keys of later tokens are masked: a token may not look ahead, so they get −∞ and will get weight 0.",
    "heatmap.legend": "digit = weight in tenths, █ ≥ 0.95, · hidden by the causal mask",
    # the weighted sum (step 5)
    "sum.more": " + … ({n} more terms, weights summing to {rest})",
    "sum.new": "{L}'s new representation",
    "sum.from_head": " from head {h}",
    # the heads and W_O, the residual, the MLP (steps 6 and 7)
    "heads.one": "This model has a single head, so the 'concatenation' is just that head's output; W_O still maps it "
                 "back to the model's width.",
    "heads.many": "A layer runs {H} heads side by side, each with its own W_Q, W_K and W_V, so each can look for "
                  "something different (the article: one for grammar, one for meaning). Their outputs are laid end "
                  "to end and one matrix, W_O, merges them.",
    "heads.concat": "concatenate the {H} heads' outputs ({H} × {d_head} = {n} numbers)",
    "heads.wo": "× W_O ({shape}) + b_O, back to {d_model} dims",
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
    "layers.none": "This model has no layers: the embedding goes straight to W_U.",
    "layers.intro": "Every layer repeats the steps above on the previous layer's output. For {L} (position {t}): "
                    "the size ‖x‖ of its vector going in and out, and the token each head attends to most "
                    "(with its weight).",
    # predicting the next token (step 9)
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
    # the loop (step 10)
    "loop.reads_prompt": "reads {span} (the prompt)",
    "loop.reads": "reads {named}",
    "loop.computes": "; computes {new}, reuses {old} from the KV cache",
    "loop.recomputes": "; recomputes all {n} rows (no cache)",
    "loop.predicts": "predicts ",
    "loop.top3": " (p {p}; top 3: {alts})",
    "loop.not_appended": "(not appended: the run stops here, {why})",
    "verify.ok": "✓ the KV cache changes no logit beyond rounding and no token",
    "verify.bad": "✗ the KV cache and full recompute disagree",
    # every position predicts (step 11)
    "positions.rows": "The decoder turns every position's final vector into logits (the unembedding is applied to all "
                      "rows at once); row p predicts the token at p + 1. loss = −log p(actual), in nats. * the token "
                      "the sampler chose.",
    "positions.mean": "Training (teacher forcing) scores every row against the token that really follows: mean loss "
                      "over rows {rows} = {mean} nats (a uniform guess over {n} tokens: {uniform}).",
    # the logit lens (step 12)
    "lens.title": "Logit lens: each layer's residual stream through the final {norm} and W_U",
    # the header and the checks
    "header.model": "model {name}: {layers}, d_model {d_model}, {heads} (d_head {d_head}), {dtype}; {block}",
    "checks.agree": "{ok} of {n} stated values agree",
    "checks.disagree": " ({bad} disagree)",
    "scores.capped_key": " (key {key}), before the mask and softmax",
    "predict.softcapped": "{unembed}, then soft-capped: {formula}",
}


def say(key: str, /, **slots: str) -> str:
    """The sentence `key` with its slots filled (every slot it names must be given)."""
    return WORDS[key].format(**slots)
