"""What an attention head does, read off its recorded weights: previous-token heads and induction heads.

A previous-token head puts its weight on the token just before the query (A → the token left of
it). An induction head, on a sequence that repeats, looks from a token to the token that followed
the same token's earlier occurrence (… red fox jumps … red → fox), which lets the model copy the
continuation; induction heads need a previous-token head in an earlier layer (Olsson et al., 2022,
"In-context Learning and Induction Heads"). The scores here are TransformerLens's usual ones:
the mean weight on that key, over the queries where it exists. Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np


def previous_token_scores(pattern: np.ndarray) -> np.ndarray:  # [head, query_pos, key_pos] → [head]
    """Each head's mean weight on the key just before the query (queries 1…n-1 of a prompt pass)."""
    n = pattern.shape[-1]
    if n < 2:
        return np.zeros(pattern.shape[0])
    q = np.arange(1, n)  # [query]
    return pattern[:, q, q - 1].mean(axis=-1)  # [head]


def induction_targets(tokens) -> np.ndarray:  # [pos] → [pos]
    """For each position, the position after its token's most recent earlier occurrence (−1 if none)."""
    last: dict[int, int] = {}
    out = np.full(len(tokens), -1, dtype=np.int64)
    for i, t in enumerate(int(x) for x in tokens):
        if t in last and last[t] + 1 < i:
            out[i] = last[t] + 1
        last[t] = i
    return out


def induction_scores(pattern: np.ndarray, tokens) -> np.ndarray:  # [head, query_pos, key_pos], [pos] → [head]
    """Each head's mean weight on the token after the query token's earlier occurrence."""
    target = induction_targets(tokens)  # [pos]
    q = np.flatnonzero(target >= 0)  # [query]
    if q.size == 0:
        return np.zeros(pattern.shape[0])
    return pattern[:, q, target[q]].mean(axis=-1)  # [head]


def repeated_sequence(n: int, vocab: list[int], seed: int = 0) -> list[int]:
    """n tokens drawn at random from `vocab` (no token twice), then the same n again: the test
    sequence for induction heads."""
    rng = np.random.default_rng(seed)
    first = [int(vocab[i]) for i in rng.permutation(len(vocab))[:n]]
    return first + first


def head_scores(trace, tokens) -> dict[str, np.ndarray]:
    """Per kind, a [layer, head] array of scores from a recorded prompt pass (`Trace`)."""
    cfg = trace.config
    layers = [f"blocks.{l}.attn.hook_pattern" for l in range(cfg.n_layers)]
    prev = np.stack([previous_token_scores(trace[name]) for name in layers])  # [layer, head]
    ind = np.stack([induction_scores(trace[name], tokens) for name in layers])  # [layer, head]
    return {"previous_token": prev, "induction": ind}
