"""Each step's words, written once: the sentences of the walkthrough that the classroom page says too.

The terminal renderers (`layer`, `predict`, `loop`, `lens`) print `say(key, **slots)`; the page
(`render.page`) receives `WORDS` whole in its JSON (`words`) and its script fills the same
templates with the numbers it already has (`say(key, {slots})` in `page/core.js`), so the two never
word a step differently. A slot is a name in braces, `{L}` the token's letter; every value is given
already formatted (a string; in the script also an element, a token's text or a button, which
makes the sentence a list of parts), so Python's `str.format` and the script's fill agree. A sentence whose
slots are all known when the page is written (the KV cache's notes, the logit lens's verdict, the
model line) is sent finished instead, from the renderer's own function. What only the page says (its
step titles and path labels, controls, hover readouts, notes) is here too, beside its step's sentences, so that the
page's scripts hold no sentence at all; the compare page's (`compare.*`) come after the checks.

The demo (`render/demo/`) says its screens from here too: its own longer narration, questions and
frame under "demo.*", screen by screen, and the keys above where it says what the walkthrough says.
The pages are sent `PAGE_WORDS`, every entry but the demo's (they show no demo screen), the prompt
box's (`serve.*`, which `tracer serve` sends its own script as `SERVE_WORDS`) and the rows' (`rows.*`:
whose each pass of a generation of several rows is, which the page is sent finished).

The words of attention sinks and of a mixture of experts are in `words_experts.py`, those of the kinds beyond
softmax attention (linear attention's state, a hybrid's cache) in `words_kinds.py` (one kind's words, beside each
other), and a led lesson's (`lesson.*`: `tracer serve --lesson`) in `words_lesson.py`, all added here; the
lesson's are sent to its own script only (`LESSON_PAGE_WORDS`).

`tests/test_words.py` checks that the page's scripts hold no prose of their own and none of these
sentences, that the demo's modules hold no sentence of their own, that every key either reads is
here, and that every template here is said.
"""

from __future__ import annotations

from .words_decoding import DECODING
from .words_experts import EXPERT_WORDS
from .words_reading import READING_WORDS
from .words_kinds import KIND_WORDS
from .words_lesson import LESSON_WORDS

WORDS: dict[str, str] = {
    # the tokens (render/walkthrough.py, page step 1)
    "tokens.intro": "The prompt splits into {tokens}, {first}, from the {vocab} vocabulary of {n_vocab} tokens (␣ marks "
                    "a leading space). Positions, layers, heads and passes count from 0, as in the code: A is position 0, "
                    "layer 0 the first layer.",
    "token.generated": ", generated: computed by pass {k}",
    # what only the page says (its step titles, controls, notes) sits beside its step's sentences, as here
    "title.tokens": "Tokens", "path.tokens": "Tokens",  # a page step's title, and its label on the page's path
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
    "title.embed": "Embedding + position", "path.embed": "Embedding",
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
    "title.qkv": "Q, K, V per head", "path.qkv": "Q · K · V",
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
    "rope.scaling.llama3": " (Llama 3 scaling divides the slow ones by {factor})",
    "rope.scaling.yarn": " (YaRN divides the slow ones by {factor}, and cos and sin are × {mscale})",
    "rope.scaling.linear": " (linear scaling divides every one by {factor})",
    "rope.partial": "; only the first {width} of {d_head} numbers turn, the rest pass unchanged",
    "rope.proportional": " (proportional RoPE: only the first {turned} of the {half} pairs turn; the others keep angle 0)",
    "rope.here": "; here [{angles}] radians",
    "rope.then": ". Q·K then depends on how far apart two tokens are, not on where they are.",
    "rope.before": " Q and K below are before the rotation (tracer trace shows them after).",
    "qkv.key_before": "K (key, before the rotation)",
    "qkv.strongest": "the {n} keys {L} weighs most; {more} more visible keys are not listed",
    "qkv.absent": "the keys and values of {positions} are not in this page (see “left out”)",
    # the scores (step 4)
    "title.scores": "Scores, the causal mask, softmax", "path.scores": "Scores",
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
    "title.sum": "The weighted sum", "path.sum": "Sum",
    "sum.intro": "{new} is the values of the tokens it sees, each weighed by its attention weight, added up.",
    "sum.none": "no attention weights recorded here",
    "sum.more": " + … ({n} more terms, weights summing to {rest})",
    "sum.new": "{L}'s new representation",
    "sum.from_head": " from head {h}",
    # attention sinks and a mixture of experts (the softmax and the MLP steps): words_experts.py, added below
    # the heads and W_O, the residual, the MLP (steps 6 and 7)
    "title.heads": "The heads and W_O", "path.heads": "Heads",
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
    "title.mlp": "Residual, layer norm, MLP", "path.mlp": "MLP",
    "mlp.none": "This model has no MLP (mlp = false), as in the article's simplified block.",
    "mlp.residual": "residual: add the layer's input back",
    "mlp.no_residual": "no residual (residual = false): the MLP reads attn_out_{L}",
    "mlp.wout": "× W_out ({shape}) + b_out",
    "out.mlp": "residual: + mlp_out",
    "out.scaled": "× the layer's scalar ({scalar})",
    "out.mlp_alone": "no residual: the MLP output itself",
    "out.attn": "residual: x_{L} + attn_out_{L}",
    "out.attn_alone": "no residual (residual = false): attn_out_{L} itself",
    "out.next": "the input of layer {next}",
    "out.final": "its final vector",
    "out.of": "{how} → {L}'s output of layer {layer}, {next}",
    # all layers (step 8)
    "title.layers": "All layers", "path.layers": "Layers",
    "layers.none": "This model has no layers: the embedding goes straight to W_U.",
    "layers.intro": "Every layer repeats the steps above on the previous layer's output. For {L} (position {t}): "
                    "the size ‖x‖ of its vector going in and out, and the token each head attends to most "
                    "(with its weight).",
    "layers.click": " Click a row to choose that layer.",
    "layers.most": "most-attended token, heads 0–{last}",
    # predicting the next token (step 9)
    "title.predict": "Logits, temperature, top-k, the choice", "path.predict": "Logits",
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
    "title.loop": "The loop and the KV cache", "path.loop": "Loop",
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
    # a generation of several rows (beams) or with a draft model's passes: the terminal's loop and KV cache
    # table say whose each pass is; the page is sent these finished (`rows.*` is not in PAGE_WORDS)
    "rows.row": "row {row}",
    "rows.continues": "row {row}, continuing row {parent}",
    "rows.draft": " (the draft model)",
    "rows.pass": "{who}: ",
    "rows.first": "; computes all {n} rows (its model's first pass: nothing of its own in a cache yet)",
    "rows.not_kept": "(not kept: no row's sequence goes on with it, as with a pruned beam's or a rejected draft's "
                     "token)",
    "rows.caches": "This generation holds {rows} and {drafts} pass(es) of a draft model. Each row keeps its own KV "
                   "cache (a row that continues another starts from a copy of that row's), and the draft model its "
                   "own: a pass reuses only its own row's and model's keys and values.",
    "rows.generated": "Row {row} generated {n} token(s): {text}; stopped: {why}{score}.",
    "rows.score": "; score {score}",
    "verify.ok": "✓ the KV cache changes no logit beyond rounding and no token",
    "verify.bad": "✗ the KV cache and full recompute disagree",
    # every position predicts (step 11)
    "title.positions": "Every position predicts", "path.positions": "Positions",
    "positions.rows": "The decoder turns every position's final vector into logits (the unembedding is applied to all "
                      "rows at once); row p predicts the token at p + 1. loss = −log p(actual), in nats. * the token "
                      "the sampler chose.",
    "positions.click": " Generation reads only the last row of each pass (◀). Click a row to follow its token.",
    "positions.mean": "Training (teacher forcing) scores every row against the token that really follows: mean loss "
                      "over rows {rows} = {mean} nats (a uniform guess over {n} tokens: {uniform}).",
    # the logit lens (step 12)
    "lens.title": "Logit lens: each layer's residual stream through {through}",
    "lens.through": "the final {norm} and W_U", "lens.through_none": "W_U alone (this model has no final norm)",
    "title.lens": "The logit lens", "path.lens": "Lens",
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
    "title.checks": "The stated values, checked", "path.checks": "Checks",
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
    # ------------------------------------------------------------------ tracer serve's prompt box (serve/page.py, serve.js)
    "serve.prompt": "type a prompt and press Enter",
    "serve.off": "Empty: {off}.",  # a setting's box, after its help (tracer.run.settings)
    "serve.most": "At most {n} here.",
    "serve.chat": "apply the model's chat template to the prompt",
    "serve.no_chat": "{model} has no chat template",
    "serve.empty": "type a prompt first",
    "serve.running": "running {model}…",
    "serve.running_again": "running {model} (try {n})…",
    "serve.busy": "the server is busy with other prompts: trying again in {wait} s",
    "serve.answered": "the server answered {status}",
    "serve.retry_in": " (retry in {wait} s)",
    "serve.unreachable": "the server cannot be reached: is tracer serve still running?",
    "serve.done": "{prompt} prompt tokens, {new} in {seconds} s",
    "scores.capped_key": " (key {key}), before the mask and softmax",
    "predict.softcapped": "{unembed}, then soft-capped: {formula}",
    # ------------------------------------------------------------------ the demo (render/demo/), screen by screen
    # the demo narrates each screen in its own longer sentences; where it says what the walkthrough says (the
    # scores' and the heads' narration, the score's divisor) it takes the keys above
    # Tokens (demo/layer.py step_tokens)
    "demo.tokens": "The model never sees words, only numbers: the prompt is cut into tokens, pieces from a fixed "
                   "vocabulary of {n_vocab}, each one an id. Like the article, we name them A, B, C, … by place; "
                   "positions, layers, heads and passes (a pass: one run of the model, which chooses one new token) "
                   "count from 0, as in the code. We follow {L} ({mark}) through the first layer.",
    "demo.tokens.spaces": "␣ marks a leading space (␣B is \" B\"), ↵ a line break.",
    "demo.tokens.model": "{model} — {layers}, {d_model} numbers per token (d_model), {heads}, vocabulary of {n_vocab} "
                         "tokens ({vocab})",
    "demo.tokens.trained": "Trained by `tracer train` ({steps} steps) on {corpus}.",
    "demo.tokens.untrained": "The weights are not trained (seeded or set by hand): the arithmetic is real, but what it "
                             "predicts was not learned from text.",
    # Embedding lookup (step_embedding)
    "demo.embed": "Each token id picks one row of the embedding matrix W_E. That row is the token's starting vector: "
                  "{d_model} numbers {learned} (the article imagines them as features like color or 'is it alive'). "
                  "Nothing is computed yet — it is a table lookup.",
    "demo.embed.learned": "the model learned in training",
    "demo.embed.not_learned": "which a trained model would have learned (these are set by hand or at random)",
    "demo.embed.shape": "  [{n_vocab} tokens × {d_model} numbers]: one row per token of the vocabulary",
    # Position vector (step_position), or Position: rotated, not added (_rotary_position)
    "demo.position": "The same word at a different place must look different, so each position adds its own position "
                     "vector: P_A at position 0, P_B at position 1, and so on (the article's P1, P2, …). {how} Token "
                     "vector plus position vector is what enters the first layer.",
    "demo.position.where": "E_{L}: row {id} of W_E;  P_{L}: the position vector of position {t} (row {t} of W_pos; the "
                           "article counts places from 1 and calls it P{place});  x_{L}: the first layer's input",
    "demo.position.none": "Some models add no position vector and let attention work order out from the mask alone. "
                          "This one is such a model.",
    "demo.position.none_body": "This model adds no position vector: the first layer's input is the embedding itself.",
    "demo.position.no_layers": "Without layers no token looks at another: {what}, normalized, meets W_U{rotary} (the "
                               "screens of a layer are left out).",
    "demo.position.no_turn": "; rotary positions, which turn Q and K inside a layer, change nothing here",
    "demo.rope": "This model adds no position vector. Instead, in every layer, each query and key is rotated by its "
                 "position (rotary position embedding, RoPE): the numbers come in pairs (q_i, q_(i+{half})), and each "
                 "pair turns by position × θ_i, fast for the first pairs and slow for the last. Two rotated vectors' "
                 "dot product then depends only on how far apart the tokens are, which is what attention needs to "
                 "know.{normed}",
    "demo.rope.normed": " {how}; only then it turns.",
    "demo.rope.heading": "{L} at position {t}, {head}, {layer}",
    # Query, Key and Value (step_qkv)
    "demo.qkv": "Three weight matrices turn every token's vector into three new ones. The article borrows the roles "
                "from database search: the Query is like a search term (what this token is looking for), the Key is "
                "like an index entry (what it can be found by), and the Value is the content it hands over when "
                "found.{norm}",
    "demo.qkv.where": "{head}: W_Q, W_K, W_V are each [{d_model} × {d_head}]{shared}",
    "demo.qkv.shared": "; K and V come from key/value head {g} of {KV}, shared with {others}",
    "demo.query": "{L}'s query  Q{r} = ",
    "demo.qkv.keys": "what each token offers to be found by",
    "demo.qkv.values": "what each token hands over",
    "demo.qkv.later": "{hidden}: later tokens. They have keys and values too, but {L} may not look ahead (the causal "
                      "mask, next step).",
    # Scores and the mask (step_scores): scores.compare and scores.masked, then
    "demo.scores.root": "{by} ≈ {root}",
    "demo.scores.not_d_head": " (Gemma's choice, not √d_head)",
    "demo.scores.scaled": " Then each score is divided by {by}, which keeps them in a range softmax handles well.",
    "demo.scores.unscaled": " (This model does not scale the scores, as in the article; GPT-2 divides them by √d_head.)",
    "demo.scores.softcap": " Gemma 2 then soft-caps them so none passes ±{cap}, before the mask: {formula} for {L}'s key.",
    "demo.scores.rotated": " Q and K are the rotated ones (the position screen).",
    "demo.scores.mask_title": "the causal mask",
    "demo.scores.mask": ": ● may look, · hidden (row: the query, column: the key){first}",
    "demo.scores.mask_first": "; the first {rows} of {n} tokens",
    "demo.scores.ask_by_hand": "Work out {dots}: multiply Q and K number by number, then add up.",
    "demo.scores.ask_guess": "Which key will {L}'s query score highest: {keys}? (With {d_head} numbers each, too many "
                             "to multiply by hand: guess, then see.)",
    "demo.scores.which": "which of {first}_K … {last}_K",
    # Softmax: scores become weights (step_softmax)
    "demo.softmax": "Softmax turns scores into weights that are positive and add up to 1: raise e to each score "
                    "(subtracting the largest first changes nothing but keeps the numbers small), then divide by the "
                    "total. Masked keys get e^−∞ = 0. Check the article by hand: it rounds softmax([0.6, 0.8]) to "
                    "[0.4, 0.6], but exactly it is [0.450, 0.550].",
    "demo.softmax.ask": "Predict the weights softmax({scores}) — they must add up to 1.",
    # Weighted sum of values (step_weighted_sum)
    "demo.sum": "{L}'s new vector is a blend of the values it can see, mixed in the proportions softmax chose — the "
                "article's 0.4×A_V + 0.6×B_V, here with the real weights. A key that matched well hands over more of "
                "its content.",
    "demo.sum.vector": "{L}'s new vector",
    # Multi-head: concat and W_O (step_multihead): heads.one or heads.many, then
    "demo.heads.then": "Then {rest}.",
    "demo.heads.residual": "the input is added back (the residual connection)",
    "demo.heads.neither": "Like the article's model, this one has no residual connection and no MLP.",
    # The other layers (demo/output.py step_layers)
    "demo.layers": "{lead} {doing} From here on we follow {L}, the last token: its final vector is the one that "
                   "predicts what comes next.",
    "demo.layers.next": "Each layer's output is the next layer's input.",
    "demo.layers.repeat": "Each layer's output is the next layer's input, and the same recipe runs again with new "
                          "weights in each of the {n} layers (0 to {last}).",
    "demo.layers.one": "This model has one layer, layer 0: its output is the final vector.",
    "demo.layers.mixes": "Every layer mixes more context into every token.",
    "demo.layers.heading": "{L}, the last token, in every layer{more}",
    "demo.layers.more": " (first {n} of {H} heads)",
    "demo.layers.columns": "in, out: the length of its vector; head n: the key that head weights most, and the weight",
    "demo.layers.last": "{L} out of layer {layer} (the last)",
    "demo.layers.embedded": "{L}, embedded",
    # Copying: the induction head (demo/copying.py step_copying)
    "demo.copy": "{last} was seen before, as {earlier}, and what followed it then, {target}, is a good guess for what "
                 "follows now, if the model can look it up. A head that looks from a repeated token to the token after "
                 "its earlier occurrence is an induction head: it hands that token on, and the model copies. "
                 "(Induction heads usually lean on a head in an earlier layer that looks one token back.)",
    "demo.copy.heading": "{last}'s weight on {target}, the heads that put the most there",
    "demo.copy.without": "This run is without {what}: the weights above are still computed, but the removed heads hand "
                         "on zeros; the chosen token's screen shows the prediction beside the clean run's.",
    "demo.copy.remove": "Remove {them} and watch the copy fail: add {flags} to this command (LAYER:* removes all of a "
                        "layer's heads).",
    # Unembedding: one score per token (step_unembed)
    "demo.unembed": "One more matrix, W_U, turns {L}'s {d_model} numbers into {d_vocab} scores (logits), one for every "
                    "token of the vocabulary.{norm}{tied} Every position gets such a row — that is how training checks "
                    "all positions at once — but generation only needs the last one.",
    "demo.unembed.tied": " The embedding matrix W_E is reused here, turned on its side.",
    "demo.unembed.logits": "[{d_model} × {d_vocab}]  → one logit per vocabulary token",
    "demo.unembed.this_row": "   ← generation uses this row",
    "demo.unembed.ask": "After \"{prompt}\", which token will get the largest logit — what will {L} predict?",
    # Softmax and temperature (step_temperature)
    "demo.temperature": "Softmax turns the logits into probabilities over the whole vocabulary. Temperature divides the "
                        "logits first: below 1 it sharpens (the favourite gets more), above 1 it flattens (surprises "
                        "get a chance); temperature 0 means simply take the most likely token. As the article says, "
                        "temperature acts only here, at the very end.",
    "demo.temperature.greedy": "the probabilities below use T = 1; greedy simply takes the top one",
    "demo.temperature.divided": "the logits are divided by {T} before softmax",
    "demo.temperature.what_if": "The 'if T =' columns redo only softmax on the same recorded logits.",
    # The chosen token (step_chosen)
    "demo.chosen.greedy": "At temperature 0 the choice is simply the most likely token.",
    "demo.chosen.sampled": "A seeded random number u between 0 and 1 is drawn. Lay the kept tokens' probabilities end "
                           "to end (the bands): the token whose band holds u is chosen, so likely tokens win often, not "
                           "always.",
    "demo.chosen.no_draw": "temperature 0: no random draw — the most likely token wins",
    "demo.chosen.draw": "random draw u = ",
    "demo.chosen.seeded": "  (seeded: the same seed draws the same u on every machine)",
    "demo.chosen.predicts": "{L} predicts  {mark} ",
    "demo.chosen.letter": "The new token gets the next letter: {L}.",
    "demo.chosen.ask": "Which token is chosen? Find the band that holds u.",
    # Append and repeat (step_append)
    "demo.append": "The chosen token is appended to the sequence, and the whole stack runs again to predict the one "
                   "after it — {prompt} → {longer} → … — until the end token or the length limit. Each new token needs "
                   "another pass through {layers}.",
    "demo.stopped.end_token": "it produced the end token",
    "demo.stopped.stop_string": "it produced a stop string",
    "demo.stopped.max_new_tokens": "it reached the limit of {n}",
    # The KV cache (step_cache)
    "demo.cache": "Must every pass redo all the earlier tokens? The seed Q&A says so, but no: earlier tokens cannot "
                  "see later ones, so their keys and values never change. Generation keeps them in a cache and "
                  "computes Q, K and V only for the newest token — it still attends over the whole sequence.",
    "demo.cache.off": "This run did not use the cache (--no-cache): every pass recomputed the keys and values of every "
                      "token, as the seed Q&A assumes.",
    "demo.cache.one_pass": "This run made a single pass, so there was no later pass for the cache to save work on.",
    "demo.cache.on": "In this run, pass 1 computed Q, K and V for {L} alone and reused the cached keys and values of "
                     "{reused} in each of the {layers} layers (`tracer trace --verify-cache` shows that the logits "
                     "agree with a full recompute).",
    "demo.cache.counted": "multiply-adds: counted from the matrices' shapes, not timed",
    # every screen's frame (demo/screens.py, pager.py, deck.py, __init__.py)
    "demo.title": "Step {i} of {n} · {name}",
    "demo.your_turn": " — your turn",
    "demo.predict": "Predict, then press Enter.",
    "demo.checks": "stated values, checked",
    "demo.checks.hold": "  ({ok} of {n} hold)",
    "demo.checks.all": ": all {n} hold",
    "demo.checks.one": ": it holds",
    "demo.checks.replay": " (tracer replay lists them)",
    "demo.checks.wrong": "stated {stated} · recorded {recorded}{off}",
    "demo.checks.off": " · off by {diff}",
    "demo.continued": "continued on the next page (Enter) …",
    "demo.keys": "[{i}/{n}] Enter/→ next · b/← back · number+Enter jump · q quit · {title}",
    "demo.last_step": "This is the last step. b goes back, q quits.",
    "demo.no_step": "There is no step {n}: steps are 1 to {steps}.",
    "demo.go_to": "go to step {typed}_  (Enter)",
    "demo.too_tall": "(this screen has {tall} lines, the terminal {height}: scroll up, or make the font smaller)",
    "demo.deck.title": "tracer demo — {title}",
    "demo.deck.about": "One step of a transformer decoder per section, with the numbers of one recorded run.",
    "demo.deck.made": "Made with tracer ({command}). The Query/Key/Value analogy (search term, index, content) is the "
                      "seed article's.",
    "demo.wrote": "wrote {path}: {n} screens, one self-contained page",
}

WORDS.update(DECODING)  # how the model is decoded: the draw's stages, beams, speculative decoding (words_decoding.py)
WORDS.update(EXPERT_WORDS)  # attention sinks' and a mixture of experts' words (render/words_experts.py)
WORDS.update(READING_WORDS)  # how to read a result right: the lens's ranks, --attribute, … (render/words_reading.py)
WORDS.update(KIND_WORDS)  # linear attention's and a hybrid cache's words (render/words_kinds.py)
WORDS.update(LESSON_WORDS)  # a led lesson's bars and terminal lines (render/words_lesson.py)

# what the page's script fills: every step's words but the demo's own (the page shows no demo screen)
PAGE_WORDS: dict[str, str] = {key: words for key, words in WORDS.items()
                              if not key.startswith(("demo.", "serve.", "rows.", "lesson."))}
SERVE_WORDS: dict[str, str] = {key: words for key, words in WORDS.items() if key.startswith("serve.")}  # serve.js's
LESSON_PAGE_WORDS: dict[str, str] = {key: words for key, words in LESSON_WORDS.items()  # lesson.js's
                                     if not key.startswith("lesson.terminal.")}


def say(key: str, /, **slots: str) -> str:
    """The sentence `key` with its slots filled (every slot it names must be given)."""
    return WORDS[key].format(**slots)
