"""What the page carries of a linear-attention layer (Gated DeltaNet, Qwen3.5's layer 0), which has no
scores and no weights to draw: per carried position and head, how much the state keeps of itself (exp g)
and how much the token writes (β), each head's gated read-out (what W_O merges), the state's size, and
the words of what the layer keeps against a softmax layer's KV cache (`render.linear`, sent finished);
and each head's state update, as the terminal works it (`render.linear.update`, `worked_cell`): q, k and v,
the state before (its corner), what it recalls for k, the error, the state after, one number of it by
hand, the read-out. The script's `stateSlide` lays it out in the Q/K/V, scores, sum and heads steps of such
a layer. Reads recorded arrays only: the state before a position is the one recorded after the position
before it, and Sᵀk and v − Sᵀk are the terminal's arithmetic on them."""

from __future__ import annotations

import numpy as np

from ..linear import cell_words, keeps_words, update, worked_cell
from ..text import BRIEF_CORNER
from .data import Rows, cut, r6, r6s, vector_block


def state_block(rows: Rows, cfg, layer: int, carried: list[int], whole: int, precision: int = 3) -> dict | None:
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
            "keeps": keeps_words(cfg, layer, rows.n_prompt),
            "update": update_block(rows, a, carried, whole, heads, precision)}


def update_block(rows: Rows, a: str, carried: list[int], whole: int, heads: int, precision: int = 3) -> dict | None:
    """Each carried position's update of each head's state: "g" ([carried][head]), the vectors "k", "v", "q",
    "recall", "error" and "o" (blocks as `vector_block`'s, per head), "before" and "after" (the first
    `BRIEF_CORNER` rows and columns; before: None at the first position, where S starts at zeros), "cell" (the
    words of one number worked by hand), "corner"; None without the recorded q, k, v and states."""
    names = ("hook_q", "hook_k", "hook_v", "hook_state", "hook_beta", "hook_decay", "hook_z")
    if not all(rows.has(a + n) for n in names):
        return None
    vectors = ("k", "v", "q", "recall", "error", "o")
    out: dict = {key: [] for key in ("g", "before", "after", "cell")}
    blocks: dict = {key: {"rows": [], "norm": []} for key in vectors}
    corner = slice(0, BRIEF_CORNER)
    for t in carried:
        q, k, v, state, beta, g, z = (np.asarray(rows.row(a + n, t), dtype=np.float64) for n in names)
        group = heads // k.shape[0]  # value heads per key head: value head h reads key head h // group
        prev = np.asarray(rows.row(a + "hook_state", t - 1), dtype=np.float64) if t > 0 else None  # [v_head, d_k, d_v]
        per: dict = {key: [] for key in [*out, *vectors]}
        for h in range(heads):
            S = None if prev is None else prev[h]  # [d_k, d_v]
            _, recalled, error, _ = update(S, k[h // group], v[h], float(beta[h]), float(g[h]))
            for key, vec in zip(vectors, (k[h // group], v[h], q[h // group], recalled, error, z[h])):
                per[key].append(vec)
            per["g"].append(r6(g[h]))
            per["before"].append(None if S is None else [r6s(row[corner]) for row in S[corner]])
            per["after"].append([r6s(row[corner]) for row in state[h][corner]])
            cell = worked_cell(S, k[h // group], float(beta[h]), float(g[h]), error, state[h])
            per["cell"].append(cell_words(cell, precision))
        for key in out:
            out[key].append(per[key])
        for key in vectors:
            blocks[key]["rows"].append([cut(x, whole) for x in per[key]])
            blocks[key]["norm"].append([r6(np.linalg.norm(x)) for x in per[key]])
    d = {key: len(per[key][0]) for key in vectors}
    return {**out, **{key: {"dims": d[key], "whole": d[key] <= whole, **blocks[key]} for key in vectors},
            "corner": BRIEF_CORNER}


def with_states(layers: list[dict], rows: Rows, cfg, carried: list[int], whole: int, precision: int = 3) -> list[dict]:
    """`layers_data`'s entries, each with its `state` (None but on a linear-attention layer, whose q, k, v
    and z are then left out: they are of other shapes than the heads' the script lays out) and, where an
    output gate stands between the weighted sums and W_O (Qwen3.5's softmax layers), `z_out`: what W_O
    merges, each head's z × sigmoid(gate) (None elsewhere)."""
    for layer, entry in enumerate(layers):
        entry["state"] = state_block(rows, cfg, layer, carried, whole, precision)
        if entry["state"] is not None:
            entry.update(q=None, k=None, v=None, z=None)
        gated = entry["state"] is None and cfg.attention_of(layer).records(cfg, "hook_z_gated")
        entry["z_out"] = vector_block(rows, f"blocks.{layer}.attn.hook_z_gated", carried, cfg.d_head, whole, True) \
            if gated else None
    return layers
