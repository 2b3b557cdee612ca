"""What the page carries of a linear-attention layer (Gated DeltaNet, Qwen3.5's layer 0), which has no
scores and no weights to draw: per carried position and head, how much the state keeps of itself (exp g)
and how much the token writes (β), each head's gated read-out (what W_O merges), the state's size, and
the words of what the layer keeps against a softmax layer's KV cache (`render.linear`, sent finished).
The script's `stateSlide` lays it out in the Q/K/V, scores, sum and heads steps of such a layer. Reads
recorded arrays only."""

from __future__ import annotations

import numpy as np

from ..linear import keeps_words
from .data import Rows, r6, vector_block


def state_block(rows: Rows, cfg, layer: int, carried: list[int], whole: int) -> dict | None:
    """{"d_k", "d_v", "heads", "beta", "keep" ([carried][head]), "o" (a per-head vector block), "keeps"}, or
    None when the layer keeps no state (softmax attention) or did not record it."""
    a = f"blocks.{layer}.attn."
    if not cfg.attention_of(layer).records(cfg, "hook_state") or not rows.has(a + "hook_beta"):
        return None
    shapes = cfg.attention_of(layer).shapes(cfg, layer)
    heads, _, d_v = shapes["W_V"]
    beta = [[r6(x) for x in rows.row(a + "hook_beta", t)] for t in carried]
    keep = [[r6(x) for x in np.exp(np.asarray(rows.row(a + "hook_decay", t), dtype=np.float64))] for t in carried]
    return {"d_k": int(shapes["W_K"][2]), "d_v": int(d_v), "heads": int(heads), "beta": beta, "keep": keep,
            "o": vector_block(rows, a + "hook_z_gated", carried, d_v, whole, True),
            "keeps": keeps_words(cfg, layer, rows.n_prompt)}


def with_states(layers: list[dict], rows: Rows, cfg, carried: list[int], whole: int) -> list[dict]:
    """`layers_data`'s entries, each with its `state` (None but on a linear-attention layer, whose q, k, v
    and z are then left out: they are of other shapes than the heads' the script lays out) and, where an
    output gate stands between the weighted sums and W_O (Qwen3.5's softmax layers), `z_out`: what W_O
    merges, each head's z × sigmoid(gate) (None elsewhere)."""
    for layer, entry in enumerate(layers):
        entry["state"] = state_block(rows, cfg, layer, carried, whole)
        if entry["state"] is not None:
            entry.update(q=None, k=None, v=None, z=None)
        gated = entry["state"] is None and cfg.attention_of(layer).records(cfg, "hook_z_gated")
        entry["z_out"] = vector_block(rows, f"blocks.{layer}.attn.hook_z_gated", carried, cfg.d_head, whole, True) \
            if gated else None
    return layers
