"""The draw of the next token, one recorded stage at a time, in transformers' `generate()` order.

penalties (`sample.counts`: how often each token occurs in the counted window of the context;
`sample.penalized`: the logits after them) → ÷ temperature (`sample.scaled`) → softmax
(`sample.probs`) → top-k cut → top-p cut → min-p cut → renormalise (`sample.final`, the distribution
the token is drawn from) → one seeded uniform draw (`sample.uniform`) → the token whose band of the
cumulative distribution, in order of probability, holds the draw (`sample.token`).
`sample.kept_top_k`, `sample.kept_top_p` and `sample.kept_min_p` count the candidates left after
each cut (the most likely ones, ties by id). Temperature 0 is greedy: the most likely token after
the penalties, no draw (top-k, top-p and min-p do not matter). numpy's PCG64 generator makes the
draws the same on every machine. A stage that is off records nothing (no penalty: no
`sample.counts` nor `sample.penalized`; no min-p: no `sample.kept_min_p`), so it costs nothing.

The penalties, for every token already in the counted window (the whole context, prompt and
generated tokens, or its last `penalty_last_n`): transformers' `RepetitionPenaltyLogitsProcessor`
(a positive logit ÷ R, a negative one × R), then llama.cpp's and the OpenAI API's presence and
frequency penalties (logit − A·[count > 0] − B·count; llama.cpp's `llama_sampler_penalties_apply`
does both in this order). min-p (transformers' `MinPLogitsWarper`, llama.cpp's `min_p`): keep the
tokens whose probability is at least P times the most likely one's. Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np

from ..core.equations import largest_first, scale_logits, tempered_softmax
from ..core.record import Recorder


def top_k_count(n_vocab: int, top_k) -> int:
    """Candidates left after the top-k cut."""
    return n_vocab if top_k is None else min(int(top_k), n_vocab)


def top_p_count(sorted_probs: np.ndarray, top_p) -> int:
    """Smallest number of the most likely candidates whose renormalised probabilities reach `top_p`."""
    if top_p is None or top_p >= 1:
        return len(sorted_probs)
    cum = np.cumsum(sorted_probs / sorted_probs.sum())  # [n_keep]
    return min(len(sorted_probs), int(np.searchsorted(cum, top_p, side="left")) + 1)


def min_p_count(sorted_probs: np.ndarray, min_p) -> int:
    """Candidates (most likely first) whose probability is at least `min_p` × the first one's (at least one)."""
    if min_p is None:
        return len(sorted_probs)
    return max(1, int(np.count_nonzero(sorted_probs >= min_p * sorted_probs[0])))


def token_counts(context, n_vocab: int, last_n: int | None) -> np.ndarray:  # → [d_vocab]
    """How often each token occurs in the counted window: the whole context, or its last `last_n` tokens."""
    ids = np.asarray(context, dtype=np.int64)  # [pos]
    window = ids if last_n is None else ids[len(ids) - min(last_n, len(ids)):]  # [≤ pos]
    return np.bincount(window, minlength=n_vocab)[:n_vocab]  # [d_vocab]


def penalize(logits: np.ndarray, counts: np.ndarray, settings) -> np.ndarray:  # [d_vocab] ×2 → [d_vocab]
    """The logits after the repetition, presence and frequency penalties (float64)."""
    x = np.array(logits, dtype=np.float64)  # [d_vocab] a copy
    seen = counts > 0  # [d_vocab]
    R = settings.repetition_penalty
    if R != 1:
        x[seen] = np.where(x[seen] < 0, x[seen] * R, x[seen] / R)
    if settings.presence_penalty:
        x -= settings.presence_penalty * seen
    if settings.frequency_penalty:
        x -= settings.frequency_penalty * counts
    return x  # [d_vocab]


def stages(logits: np.ndarray, settings, rec: Recorder, context=()) -> tuple[np.ndarray, np.ndarray, int]:
    """Every stage before the draw, recorded: the distribution the token is drawn from [d_vocab], the
    candidates most likely first (only the first when greedy: no sort over the vocabulary), and how
    many of them are kept."""
    s, greedy = settings, settings.temperature == 0
    if s.penalized:
        counts = rec("sample.counts", token_counts(context, len(logits), s.penalty_last_n))  # [d_vocab]
        logits = rec("sample.penalized", penalize(logits, counts, s))  # [d_vocab]
    rec("sample.scaled", scale_logits(logits, s.temperature))  # [d_vocab]
    probs = rec("sample.probs", tempered_softmax(logits, s.temperature))  # [d_vocab]
    order = np.argmax(probs, keepdims=True) if greedy else largest_first(probs)  # [d_vocab] most likely first, ties by id
    n_k = 1 if greedy else top_k_count(len(probs), s.top_k)
    n_p = 1 if greedy else top_p_count(probs[order[:n_k]], s.top_p)
    rec("sample.kept_top_k", np.array(n_k))
    rec("sample.kept_top_p", np.array(n_p))
    n = n_p
    if s.min_p is not None:
        n = 1 if greedy else min_p_count(probs[order[:n_p]], s.min_p)
        rec("sample.kept_min_p", np.array(n))
    final = np.zeros_like(probs)  # [d_vocab]
    final[order[:n]] = probs[order[:n]]
    return rec("sample.final", final / final.sum()), order, n  # [d_vocab] renormalised


def draw(final: np.ndarray, order: np.ndarray, n: int, greedy: bool, rng: np.random.Generator, rec: Recorder) -> int:
    """The token: the first candidate when greedy, else the one whose band of the cumulative distribution
    (most likely first) holds one seeded uniform number."""
    if greedy:
        token = int(order[0])
    else:
        u = float(rng.random())
        rec("sample.uniform", np.array(u))
        cum = np.cumsum(final[order[:n]])  # [n_keep] upper edge of each candidate's band
        token = int(order[min(int(np.searchsorted(cum, u, side="right")), n - 1)])
    rec("sample.token", np.array(token))
    return token


def sample(logits: np.ndarray, settings, rng: np.random.Generator, rec: Recorder, context=()) -> int:
    """Choose the next token from the last position's logits [d_vocab] after `context` (the token ids it
    follows, which the penalties count), recording each stage."""
    final, order, n = stages(logits, settings, rec, context)
    return draw(final, order, n, settings.temperature == 0, rng, rec)


def distribution(logits: np.ndarray, settings, context=()) -> np.ndarray:  # [d_vocab] → [d_vocab]
    """The distribution `sample` would draw from, unrecorded (greedy: all on the most likely token)."""
    return stages(logits, settings, Recorder(names=[]), context)[0]
