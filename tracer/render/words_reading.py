"""Words that say how to read a result right, written beside each other: the logit lens's rank column, what
--attribute's gradient × input is taken over and what it cannot say (an ablation measures), which rows a
generation step computes and where every row's prediction is used, the special token a tokenizer puts
first, and how to leave the pager. `tracer/render/words.py` adds them to `WORDS` (words.py is full); the
same rules hold: a slot is a name in braces, every value given already formatted, the demo's under "demo.*"."""

from __future__ import annotations

READING_WORDS: dict[str, str] = {
    "lens.rank": "rank of {token}",
    "lens.rank_note": "The last column: the rank of {token} (the token that follows {at}) at {at} among the {n} "
                      "tokens, row by row (1: the top).",
    "pager.prompt": "tracer: space or ↓ for more, b or ↑ back, q quits (what you read stays on the screen)",
    # --attribute (under the tokens)
    "attribute.title": "Which prompt token mattered to {target}: gradient × input, the sum over each position's input "
                       "to layer 0 ({input}) of value × ∂logit/∂value",
    "attribute.input": "embedding + position", "attribute.input_none": "its embedding: this model adds no position vector",
    "attribute.caveat": "Gradient × input is a linear estimate at this one input, not a measurement: a negative score "
                        "does not mean the token works against {target} (the cue a model copies by can score below zero), "
                        "and knocking something out can disagree with it. To measure, remove a part and run again: "
                        "--ablate L:H (a head), L:mlp, L:*.",
    "positions.last": "◀ Generation reads only the last row ({L}) to choose the next token. The rows a step computes: "
                      "the prompt pass runs every prompt row through every layer, because their keys and values are "
                      "what later tokens attend to (the KV cache keeps them); each later step with the cache computes "
                      "only its one new row, and without the cache (--no-cache) every row again. Only the last "
                      "row's logits are needed to generate (engines skip the rest; tracer computes them to show "
                      "them). Every row's prediction is used elsewhere: in training, where each position's loss "
                      "counts, so one pass learns from every position; and in speculative decoding, where one verify "
                      "pass checks every drafted token at once, one row each.",
    "demo.tokens.bos": "A is {token}, a special token the tokenizer puts before the text (the model expects it "
                       "there), so the prompt's own tokens start at B: the letters name places, not the prompt's "
                       "words (B is the prompt's first token, {first}), and a head's weight on A is its weight on {token}.",
}
