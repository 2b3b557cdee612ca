"""The words of the layer kinds that are not softmax attention, written once and entered in
`tracer.render.words.WORDS` (which `say` fills): linear attention's state (Gated DeltaNet, Qwen3.5's
linear layers: `render/linear.py`), the output gate of gated softmax attention, and what a hybrid
model's cache keeps per layer (`render/loop.py`). Kept apart from `words.py`
only for its size; the same rules hold (`tests/test_words.py`)."""

from __future__ import annotations

KIND_WORDS: dict[str, str] = {
    # the header: a model whose layers are of different kinds
    "kinds.layers": "{n} layers: {kinds}",
    "kinds.one": "{n} {title} on {where}",
    # linear attention token by token (render/linear.py)
    "linear.title": "linear attention (Gated DeltaNet): ",
    "linear.intro": "{L} computes no scores over earlier tokens and weighs none of their keys: it reads a state S that "
                    "{seen} wrote into, token by token: one {d_k} × {d_v} matrix per head, the same size after 6 tokens "
                    "or 6,000.",
    "linear.first": "{L} is the first token: S starts at zeros, and {L} writes the first values into it.",
    "linear.project": "ln1(x)·W_Q|W_K|W_V ({shape}): {L}'s q, k and v channels side by side, before the convolution",
    "linear.conv": "short causal convolution: each of the {conv} channels adds up {L}'s input and the {before} before "
                   "it, each times its own weight (W_conv: {shape}), then SiLU:",
    "linear.conv_zeros": "{n} × zeros (before A)",
    "linear.conv_out": "SiLU(the weighted sum), {L}'s q, k and v channels after the convolution",
    "linear.split": "cut into q and k ({k_heads} × {d_k}) and v ({v_heads} × {d_v}); q and k are divided by their "
                    "length (L2 norm: ‖q‖ = ‖k‖ = 1){shared}",
    "linear.shared": "; each key head serves {n} value heads",
    "linear.head": " of {H}: its own state S, {d_k} × {d_v}",
    "linear.head_shared": " of {H}: its own state S, {d_k} × {d_v}; q and k of key head {g}, shared with value heads "
                          "{first}–{last}",
    "linear.beta": "β = sigmoid(ln1(x)·W_β[{h}]) = {beta}: how much of its value {L} writes",
    "linear.decay": "decay g = −exp(A_log)·softplus(ln1(x)·W_decay[{h}] + dt_bias) = {g}; exp(g) = {keep}: the state "
                    "keeps {keep} of itself before {L} writes",
    "linear.before": "S before {L}: the state after {prev}{cached}",
    "linear.from_cache": " (from the cache: pass {k} computed it)",
    "linear.zeros": "S before {L}: zeros (nothing written yet)",
    "linear.recall": "what the state recalls for {L}'s key: (exp(g)·S)ᵀ k",
    "linear.error": "the error: what {L}'s value adds to that, v − Sᵀk",
    "linear.write": "write along k with weight β: S ← exp(g)·S + k ⊗ β(v − Sᵀk), the state after {L}",
    "linear.cell_worked": "one number of it by hand, row k{i}, column v{j} (the one this token changed most): "
                          "{keep} × {s} + {k} × {beta} × {e} = {after} (exp(g) × S before + k{i} × β × error{j})",
    "linear.read": "read with the query: o = Sᵀq ÷ √d_k (√{d_k}), {L}'s output of head {h}",
    "linear.gate": "the gate: ln1(x)·W_Z[{h}]",
    "linear.gated": "gated norm: o ÷ its root mean square ({rms}) × out_norm.w ⊙ SiLU(gate)",
    "linear.compact": "head {h}: β {beta}, the state keeps {keep} of itself; the same steps give (--full shows them)",
    "linear.corner": "(the first {rows} × {cols} of {d_k} × {d_v}; --full shows more)",
    "linear.corner_page": "(the first {rows} × {cols} of {d_k} × {d_v}; tracer trace --full shows more)",
    "linear.rest": "{heads}: the same steps with their own state (--head N shows one, --full shows all)",
    "linear.no_head": "layer {layer} has heads 0–{last}: --head {h} names none of its states",
    "linear.keeps": "This layer keeps no keys and values and no attention weights over earlier tokens: one {d_k} × {d_v} "
                    "state per head ({H} heads) and the convolution's last {before} inputs, {bytes} in all ({dtype}), "
                    "the same for 6 tokens or 6,000.",
    "linear.versus": " A softmax layer of this model keeps {per_token} more per token in its KV cache (a key and a value "
                     "of {kv} × {d_head} numbers): {now} after these {n} tokens, {full} at {n_ctx}.",
    "linear.overview": "On a linear-attention layer no head attends to a token: its cell is what the state keeps of "
                       "itself (×, exp(g)) and how much {L} writes (β).",
    "linear.cell": "×{keep} β{beta}",
    "linear.heatmap": "Layer {layer} is linear attention: no attention weights to draw, each token reads a state instead "
                      "(--section attention --layer {layer} shows it token by token)",
    "linear.heatmap_other": "; --layer {other} draws a softmax layer's weights.",
    "linear.grid": "layer {layer}: what each head's state keeps of itself (×h, exp(g)) and how much each token writes (βh)",
    "linear.grid_legend": "Row: the token; digit = the number in tenths, █ ≥ 0.95: a head that keeps much remembers "
                          "long, one that writes much lets the token overwrite what its key recalls.",
    # gated softmax attention: each head's weighted sum through its gate (render/layer.py)
    "gate.sigmoid": "the output gate: sigmoid(ln1(x)·W_G[{h}] + b_G), how much of each number passes",
    "gate.out": "z × gate, what W_O merges from head {h}",
    "heads.wo_no_bias": "× W_O ({shape}), back to {d_model} dims",
    # the demo's screen of a linear-attention layer (render/demo/state.py), and its KV cache screen's words
    "demo.state": "Layer {layer} works differently: it is linear attention (Gated DeltaNet). {L} computes no scores "
                  "over the earlier tokens; each head keeps one state S, {d_k} × {d_v} numbers the tokens before "
                  "wrote into. {L} lets S fade a little (times exp(g)), asks what S recalls for its key k (Sᵀk), "
                  "writes the difference from its own value v along k, weighted by β, and reads S with its query q. "
                  "S stays the same size for 6 tokens or 6,000. The next screens follow layer {softmax}, a softmax "
                  "layer, whose keys and values grow with every token.",
    "demo.state.heading": "layer {layer}, head 0 of {H}, {L}: its state S is {d_k} × {d_v}",
    "demo.state.after": "S after {L} (its first rows and columns)",
    "demo.cache.hybrid": " Only the softmax layers keep keys and values; the linear-attention layers ({layers}) carry "
                         "a state of one size from pass to pass instead: {kept}.",
    "demo.cache.softmax": "{n} softmax",
    "demo.cache.kind": "{layers}, {keeps}, {now} each after {n} tokens",
    # what a hybrid model's cache keeps, layer by layer (render/loop.py)
    "cache.kinds": "What each layer keeps for the next pass (bytes per layer; the last row: the whole cache)",
    "cache.layer": "layer",
    "cache.all": "all {n}",
    "cache.keeps": "keeps",
    "cache.now": "after {n} tokens",
    "cache.ctx": "at {n_ctx}",
    "cache.grows": "keys and values (softmax attention): {per_token} more per token",
    "cache.state": "a state per head (linear attention): the same size at any length",
    "cache.rows": "Each reused row is that token's keys and values in every softmax layer: 2 × {layers} × {kv} × {d_head} "
                  "dims = {numbers} numbers, computed once and kept; {linear} (linear attention) keep{s} no rows, only "
                  "a state per head, the same size at any length.",
    "cache.recurrence": "The Q&A also says transformers have \"no such recurrence and hidden-states\". This model's "
                        "linear-attention layers ({layers}) do have one: each carries its state S from pass to pass, "
                        "as an RNN carries its hidden state, and a new token updates S instead of adding a row.",
}
