"""The words of two kinds of block entry, written once beside each other: attention sinks (gpt-oss: a
learned logit per head that joins each softmax, so the weights over the keys sum to less than 1) and a
mixture of experts (a router, the k experts it keeps, their weighted sum). `tracer/render/words.py`
adds them to `WORDS` (the terminal, the page and the demo say them with `say`, as every other
sentence); they live here because they are one kind's words, as STYLE.md has it ("a new kind is one
entry, its reader and its words"), and words.py is full. The same rules hold: a slot is a name in
braces, every value is given already formatted, the demo's own under "demo.*"."""

from __future__ import annotations

EXPERT_WORDS: dict[str, str] = {
    # attention sinks: the scores step (render/layer.py, page step 4) and the demo's softmax and sum screens
    "scores.with_sink": ", softmax with the head's sink → weights that sum to less than 1",
    "scores.then_sink": " {scaled}; softmax, with the head's sink as one more score, turns them into weights that sum "
                        "to less than 1 over the keys.",
    "softmax.sink": "softmax([{scores}] and the sink's {sink}) = [{weights}] and {share} to the sink",
    "sink.share": "head {h}'s sink takes {share} of the weight (a learned logit that joins the softmax as one more key, "
                  "with no value): the weights above sum to {rest}, not 1",
    "sink.row": "sink",
    "heatmap.sinks": " With attention sinks (a learned logit per head in each softmax) a row sums to less than 1: the "
                     "sink takes the rest.",
    # a mixture of experts (the MLP step of a routed model)
    "experts.title": "mixture of experts: ",
    "experts.router": "the router scores every one of the {E} experts for {x}: {x}·W_router ({shape}){bias}; "
                      "the highest: {scores}",
    "experts.bias": " + b_router",
    "experts.more": ", … ({n} more)",
    "experts.choice": "{how}: {chosen}",
    "experts.one": "expert {e}: {middle}",
    "experts.same": "expert {e}: the same steps with its own weights",
    "experts.rerouted": "without {removed} (--ablate): in the clean run this token chose {before}; it was sent to {after}",
    "experts.sum": "{terms} = the experts' part of the MLP's output (as attention's weighted sum of values, one level up)",
    "experts.shared": "+ the shared expert every token goes through (width {width}), × its sigmoid gate {gate}",
    "experts.out": "the chosen experts' weighted sum{shared}: what the MLP adds",
    "experts.out_shared": " + the shared expert's part",
    "experts.dense_out": "× W_out ({shape}): the dense MLP's part",
    "experts.out_beside": "the dense part and the experts' part, each normalized on its own (÷ its root mean square, "
                          "× dense_post.w and × experts_post.w), added: what the MLP adds",
    "experts.skipped": "{unused} of {E} experts not used by this token: {share}% of this layer's expert weights untouched",
    "experts.not_used": "not used",
    "experts.rest": "{n} more, not used",
    "experts.removed": "removed (--ablate)",
    "experts.token": "token",
    "experts.chosen": "experts chosen (weight)",
    "experts.layer": "layer {layer}: ",
    "experts.layer_of": "each token's experts, of {experts}, {k} per token, most weight first",
    "experts.layer_col": "layer",
    "experts.dense": "a dense MLP: no routing, every token through one network",
    "experts.overview": "{L}'s experts in every layer, most weight first (the router's weights):",
    "experts.grid": "layer {layer}: each token's experts",
    "experts.grid_some": " (the first {shown} of the {used} experts some token chose)",
    "experts.grid_legend": "Row: the token; column: an expert some token chose; digit = the router's weight in tenths, "
                           "█ ≥ 0.95, · not chosen by that token.",
    # what only the page says of them: the MLP step's table and map, their hover readouts
    "experts.table": "{L}'s router scores, most first",
    "experts.cell": "layer {layer}: {q} ({q_text}) → expert {e}: weight {w}, router score {s}",
    "experts.cell_not": "layer {layer}: {q} ({q_text}) did not choose expert {e}{s}",
    "experts.cell_score": " (router score {s})",
    "experts.map_click": "Click a row to follow that token; hover a cell for its numbers.",
    "experts.dense_layer": "Layer {layer} is a dense MLP among the experts: every token goes through one network "
                           "(width {width}).",
    # the demo's experts screen (demo/experts.py), after the heads and W_O, for a routed model
    "demo.experts": "In this model the MLP is many small networks, the experts. A router scores every expert for each "
                    "token, keeps the {k} best and adds up their outputs with its weights — the article's 0.4×A_V + "
                    "0.6×B_V one level up: attention mixes tokens, the router mixes experts. The other experts do not "
                    "run for this token.",
    "demo.experts.heading": "{L}, layer {layer}: router scores ({x}·W_router{bias}), {k} kept",
    "demo.experts.model": "; this model: {block}",
    "demo.experts.ask": "Which {k} experts does {L} go to, and with what weights? ({how})",
    "demo.experts.remove": "Take an expert out of the routing and watch its tokens go to their next choice: add --ablate "
                           "{flag} to this command.",
    "demo.experts.rerouted": "Without {removed} (--ablate), {who} went to their next choice:",
    "demo.experts.nobody": "Without {removed} (--ablate): no prompt token had chosen it, so nothing was rerouted.",
    "demo.softmax.sink": " This model also gives each head a sink: one more learned score that joins the softmax like a "
                         "key with no value. Here it takes {share} of {L}'s weight, so the keys' weights add up to {rest}, "
                         "not 1.",
    "demo.softmax.ask_sink": "Predict the weights softmax({scores}) — the sink's score {sink} joins the softmax too, so "
                             "the keys' weights add up to less than 1.",
}
