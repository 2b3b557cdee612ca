"""What the residual stream predicts: at every position (teacher forcing) and after every layer (logit lens).

Every position's prediction. The decoder turns every position's final vector into logits, not
only the last one (the seed Q&A's question). Row p predicts the token at p + 1: in training that
token is known (teacher forcing) and the loss is -log softmax(logits[p])[token p + 1]; in
generation only the last row is used. Recorded per pass, one row per position the pass computed
(row i is position `start + i`):
  - `predict.top_token [pos]`, `predict.top_prob [pos]`: the most likely next token (temperature 1);
  - `predict.next_token [pos]`: the token that actually follows (for the last row: the token the
    sampler chose), `predict.next_prob [pos]` its probability, `loss.per_position [pos]` its
    cross-entropy -log p, in nats.

The logit lens (nostalgebraist, 2020; TransformerLens's `accumulated_resid` + `apply_ln`): the
residual stream before each layer (`blocks.{l}.hook_resid_pre`) and after the last one
(`blocks.{L-1}.hook_resid_post`) goes through the final layer norm and W_U as if the model
stopped there. Row r is "after r layers" (row 0: the embedding plus position; row L: the real
logits). Recorded per pass:
  - `lens.positions [lens_pos]`: which positions (absolute) the lens covers — the last ones of
    the pass, as many as `budget` multiply-adds allow (all of them for small models);
  - `lens.top_token [layer+1, lens_pos]`, `lens.top_prob [layer+1, lens_pos]`;
  - `lens.target [lens_pos]`: the token each position is judged against (as `predict.next_token`);
  - `lens.target_prob [layer+1, lens_pos]`, `lens.target_rank [layer+1, lens_pos]` (0: top-1).
Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np

from ..core.decoder import norm
from ..core.fast import norm_weights, times_columns
from ..core.params import unembedding

LENS_BUDGET = 3_000_000_000  # multiply-adds per pass the lens may spend: GPT-2 small gets its last 6 positions (what the brief view shows)
PREDICT_CHUNK = 2_000_000  # logits turned into probabilities at once for every position's prediction (8 MB in float32)
LENS_CHUNK = 8_000_000  # logits held at once (rows × d_vocab): 32 MB in float32, one chunk for a GPT-2 small lens


def top_and_target(logits: np.ndarray, target: np.ndarray):
    """Per row of `logits` [rows, d_vocab]: the top token, and the log-probabilities (float64) of
    the top token and of `target`, plus how many tokens score higher than the target.

    Only the normalizer log Σ exp(x - max) is needed, so no [rows, d_vocab] log-probabilities are
    built (a float64 copy of them would take 412 MB for 1,024 GPT-2 positions): exp runs in
    place in the logits' dtype and the sum accumulates in float64.
    """
    rows = np.arange(logits.shape[0])  # [rows]
    best = logits.argmax(axis=-1)  # [rows] the same as the argmax of the log-probabilities
    top = logits[rows, best]  # [rows] each row's maximum
    tgt = logits[rows, target]  # [rows]
    e = logits - top[:, None]  # [rows, d_vocab] all ≤ 0
    np.exp(e, out=e)
    lse = np.log(e.sum(axis=-1, dtype=np.float64))  # [rows] log Σ exp(x - max)
    rank = (logits > tgt[:, None]).sum(axis=-1)  # [rows] tokens scored higher than the target
    return best, -lse, (tgt.astype(np.float64) - top) - lse, rank


def next_tokens(tokens, start: int, chosen: int) -> np.ndarray:
    """The token each computed position should predict: the next one in the sequence, then the chosen one."""
    tokens = np.asarray(tokens, dtype=np.int64)  # [pos]
    return np.append(tokens[start + 1 :], np.int64(chosen))  # [pos - start]


def position_predictions(logits: np.ndarray, tokens, start: int, chosen: int, on_chunk=None) -> dict[str, np.ndarray]:
    """Each computed position's top next token and the loss of the token that actually follows, in chunks
    of rows (each row alone: the same numbers; `on_chunk()` is called before each, a deadline raises there)."""
    nxt = next_tokens(tokens, start, chosen)  # [pos]
    rows = max(1, PREDICT_CHUNK // max(logits.shape[-1], 1))
    parts = []
    for i in range(0, logits.shape[0], rows):
        if on_chunk is not None:
            on_chunk()
        parts.append(top_and_target(logits[i : i + rows], nxt[i : i + rows]))
    top, top_logp, next_logp = (np.concatenate([p[k] for p in parts]) for k in range(3))  # [pos] each
    return {
        "predict.top_token": top.astype(np.int64),  # [pos]
        "predict.top_prob": np.exp(top_logp),  # [pos]
        "predict.next_token": nxt,  # [pos]
        "predict.next_prob": np.exp(next_logp),  # [pos]
        "loss.per_position": -next_logp,  # [pos]
    }


def residual_streams(cfg, arrays) -> list[np.ndarray] | None:
    """The residual stream before each layer and after the last: L + 1 arrays [pos, d_model]."""
    if cfg.n_layers == 0:
        if "hook_embed" not in arrays or (cfg.has_positions and "hook_pos_embed" not in arrays):
            return None
        x = arrays["hook_embed"] + (arrays["hook_pos_embed"] if cfg.has_positions else 0)  # [pos, d_model]
        return [x]
    names = [f"blocks.{l}.hook_resid_pre" for l in range(cfg.n_layers)] + [f"blocks.{cfg.n_layers - 1}.hook_resid_post"]
    if any(n not in arrays for n in names):
        return None
    return [arrays[n] for n in names]


def lens_logits(cfg, params, W_U: np.ndarray, resid: np.ndarray) -> np.ndarray:
    """The final layer norm and W_U applied to a residual stream, as if the model stopped here
    (and Gemma 2's soft-cap of the logits).

    The same sum as the decoder's unembedding, computed as x @ W_U so that the logits come out in
    C order: the lens reduces each row, which numpy does faster on C-order rows.
    """
    x = norm(cfg, resid, norm_weights(cfg, params, "ln_final"))  # [pos, d_model]
    if isinstance(W_U, np.ndarray):  # in the unembedding's blocks, as a streamed W_U is multiplied
        logits = times_columns(x, lambda lo, hi: W_U[:, lo:hi], W_U.shape[1], W_U.dtype)  # [pos, d_vocab]
    else:
        logits = x @ W_U  # [pos, d_vocab] (`tracer.core.streamed.StreamedW`)
    logits += params["b_U"]
    if cfg.final_softcap is not None:  # Gemma 2: the logits soft-capped, as the decoder's are
        logits = cfg.softcap_kind.forward(logits, cfg.final_softcap)
    return logits


def lens_width(cfg, n: int, budget: int = LENS_BUDGET) -> int:
    """How many of a pass's last `n` positions the lens covers within `budget` multiply-adds."""
    per_position = (cfg.n_layers + 1) * cfg.d_model * cfg.d_vocab
    return int(min(n, max(1, budget // per_position)))


def summarize(logits: np.ndarray, target: np.ndarray):
    """Top token, its probability, the target's probability and rank, per row of `logits` [rows, d_vocab]."""
    best, top_logp, tgt_logp, rank = top_and_target(logits, target)
    return best, np.exp(top_logp), np.exp(tgt_logp), rank


def logit_lens(cfg, params, arrays, tokens, start: int, chosen: int, positions: int | None = None,
               W_U: np.ndarray | None = None, on_chunk=None) -> dict[str, np.ndarray] | None:
    """The lens arrays for one pass (None when its residual streams were not recorded).

    Every layer's rows go through W_U together, in chunks (one read of W_U per chunk, not per layer);
    the last row is the recorded logits themselves when they were recorded. `on_chunk()` is called
    before each chunk (a deadline raises there).
    """
    streams = residual_streams(cfg, arrays)
    if streams is None:
        return None
    n = streams[0].shape[0]
    width = lens_width(cfg, n) if positions is None else int(min(max(positions, 1), n))
    W_U = unembedding(cfg, params) if W_U is None else W_U
    target = next_tokens(tokens, start, chosen)[n - width :]  # [lens_pos]
    final = arrays.get("logits")
    exact = final is not None and final.shape[0] == n
    todo = streams[:-1] if exact else streams
    parts = []
    if todo:
        stacked = np.concatenate([x[n - width :] for x in todo])  # [layer * lens_pos, d_model]
        targets = np.tile(target, len(todo))  # [layer * lens_pos]
        chunk = max(width, (LENS_CHUNK // cfg.d_vocab) // width * width)  # whole layers per chunk
        for i in range(0, stacked.shape[0], chunk):
            if on_chunk is not None:
                on_chunk()
            logits = lens_logits(cfg, params, W_U, stacked[i : i + chunk])  # [rows, d_vocab]
            parts.append(summarize(logits, targets[i : i + chunk]))
    if exact:
        parts.append(summarize(final[n - width :], target))
    top, top_p, tgt_p, rank = (np.concatenate([p[k] for p in parts]).reshape(len(streams), width) for k in range(4))
    return {
        "lens.positions": np.arange(start + n - width, start + n, dtype=np.int64),  # [lens_pos]
        "lens.top_token": top.astype(np.int64),  # [layer+1, lens_pos]
        "lens.top_prob": top_p,  # [layer+1, lens_pos]
        "lens.target": target,  # [lens_pos]
        "lens.target_prob": tgt_p,  # [layer+1, lens_pos]
        "lens.target_rank": rank.astype(np.int64),  # [layer+1, lens_pos]
    }


def record_logit_lens(model, trace, positions: int | None = None) -> bool:
    """Add the `lens.*` and `predict.*`/`loss.*` arrays to a recorded pass (a `Trace`); False if it cannot.

    For a trace from `Model.run` the last position's target is its top token (nothing was sampled);
    `positions=n` covers the last n positions whatever they cost.
    """
    arrays = trace.arrays
    if "sample.token" in arrays:
        chosen = int(arrays["sample.token"])
    elif "logits" in arrays:
        chosen = int(np.argmax(arrays["logits"][-1]))
    else:
        return False
    if "logits" in arrays:
        arrays.update(position_predictions(arrays["logits"], trace.tokens, trace.start, chosen))
    lens = logit_lens(model.config, model.params, arrays, trace.tokens, trace.start, chosen, positions,
                      model.weights.unembed.W)
    if lens is None:
        return False
    arrays.update(lens)
    return True
