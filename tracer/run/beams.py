"""Beam search, every pass of every beam recorded: transformers' `generate(num_beams=N,
num_return_sequences=N, do_sample=False, length_penalty=α, early_stopping=True)`, step for step
(`GenerationMixin._beam_search`: `_get_top_k_continuations`, `_get_running_beams_for_next_iteration`,
`_update_finished_beams`).

Each step every running beam runs one pass (the first step only the prompt's: the other beams start
at −10⁹ in transformers and are never chosen). A beam's next-token log-probabilities are
log_softmax(logits), after the penalties when they are on (transformers' processors act on the
log-probabilities in beam search), plus the summed log-probability it carries. Of all beams'
continuations the K = max(2, 1 + end tokens) · N best are considered, best first: among the first N,
one that ends (the end token, or the last allowed token) enters the finished list with its sum ÷
length^α (length: the tokens it generated, the end token too), the finished list keeping its N best;
the N best that do not end go on as the beams of the next step (a beam taken by two continuations is
forked: its sequence and its KV cache copied, `RowState.fork`). Search stops when the finished list is
full (early_stopping=True) or at `max_new_tokens`. The result is the N finished sequences, best first.

Recorded per pass besides the pass itself (its `sample.*` draw is the greedy one, the beam's own most
likely token): `beam.score` [] the sum the beam carried in, `beam.tokens` [cand] its K best
continuations, `beam.totals` [cand] their sums, `beam.fate` [cand] what became of each (`PRUNED`,
`KEPT`: a beam of the next step goes on with it, `FINISHED`: it ended a sequence that entered the finished
list). A pass's row is the beam (0…N−1) it ran for at its step and its parent the beam whose sequence
it continued; the generation's rows are the finished sequences, best first, each with its score.
Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np

from .rows import RowState, finish, run_pass
from .sampler import penalize, token_counts
from .trace import FINISHED, KEPT, PRUNED, Generation  # noqa: F401  (beam.fate's values)

NONE = -1.0e9  # transformers' score of what cannot be chosen


def log_softmax(logits: np.ndarray) -> np.ndarray:  # [d_vocab] → [d_vocab]
    x = np.asarray(logits, dtype=np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def candidates_kept(n_beams: int, n_ends: int) -> int:
    """K: the continuations considered each step (transformers' `beams_to_keep`)."""
    return max(2, 1 + n_ends) * n_beams


def beam_search(model, ids: list[int], settings, rng, names=None, on_step=None, lens_of=None,
                hooks=None, on_layer=None) -> Generation:
    """The beam search of the module docstring; `lens_of(n)`: whether the n-th pass records the logit lens;
    `on_layer()`: called before each layer of every beam's pass (`run_pass`)."""
    s, tok = settings, model.tokenizer
    N, alpha, V = s.beams, s.length_penalty, model.config.d_vocab
    ends = sorted(set(tok.eos_ids))
    K = candidates_kept(N, len(ends))
    beams = [RowState(model, ids, s.cache, len(ids) + s.max_new_tokens)]
    scores = [0.0]
    finished: list[tuple[float, list[int], object]] = []  # (score, generated ids, last pass) best first, at most N
    passes = []
    for step in range(s.max_new_tokens):
        last = step == s.max_new_tokens - 1  # every continuation reaches the length limit
        cands = []  # (sum, flat index b·V + t, beam, token, pass, slot in the pass's own K)
        ran = []
        for b, row in enumerate(beams):
            p, logits, _ = run_pass(model, row, s, rng, names, hooks, lens_of(len(passes)), on_layer=on_layer)
            passes.append(p)
            ran.append(p)
            logp = log_softmax(logits[-1])  # [d_vocab]
            if s.penalized:
                logp = penalize(logp, token_counts(row.seq, V, s.penalty_last_n), s)
            total = scores[b] + logp  # [d_vocab]
            own = np.argsort(-total, kind="stable")[:K]  # [cand] this beam's best continuations
            p.arrays.put("beam.score", np.array(scores[b]))
            p.arrays.put("beam.tokens", own.astype(np.int64))
            p.arrays.put("beam.totals", total[own])
            cands += [(float(total[t]), b * V + int(t), b, int(t), p, i) for i, t in enumerate(own)]
            if on_step is not None:
                on_step(len(passes), s.max_new_tokens * N)
        cands.sort(key=lambda c: (-c[0], c[1]))
        top = cands[:K]
        fate = {id(p): np.zeros(K, dtype=np.int64) for p in ran}
        ended = [last or c[3] in ends for c in top]
        new = []
        for c, end in list(zip(top, ended))[:N]:  # the first N that end enter the finished list, which keeps its N best
            if end:
                gen_ids = beams[c[2]].generated + [c[3]]
                new.append(((c[0] / (len(gen_ids) ** alpha), gen_ids, c[4]), c))
        finished = sorted(finished + [f for f, _ in new], key=lambda f: -f[0])[:N]
        for f, c in new:
            if any(f is g for g in finished):
                fate[id(c[4])][c[5]] = FINISHED
        going = [c for c, end in zip(top, ended) if not end][:N]
        for c in going:
            fate[id(c[4])][c[5]] = KEPT
        for p in ran:
            p.arrays.put("beam.fate", fate[id(p)])
        if len(finished) == N or last:
            break
        beams, scores = advance(beams, going, tok), [c[0] for c in going]
    rows = [finished_row(f, tok) for f in finished]
    return finish(model, ids, passes, rows, s, hooks)


def advance(beams: list, going: list, tokenizer) -> list:
    """The next step's beams: beam j continues `going[j]`'s beam with its token; a beam two continue is forked
    first (its sequence and KV cache copied), the first of them keeps the original."""
    taken = {}
    for j, c in enumerate(going):
        taken.setdefault(c[2], []).append(j)
    out = [None] * len(going)
    for b, js in taken.items():
        copies = [beams[b].fork(j) for j in js[1:]]  # before the original changes
        for j, row in zip(js, [beams[b], *copies]):
            row.index, row.parent = j, (b if b != j else None)
            row.append(going[j][3], tokenizer)
            out[j] = row
    return out


class _Finished:
    """A finished sequence as `finish` reads a row: its generated ids, why it stopped and its score."""

    def __init__(self, generated: list[int], stopped: str, score: float):
        self.generated, self.stopped, self.score = generated, stopped, score


def finished_row(f, tokenizer) -> _Finished:
    score, gen_ids, _ = f
    return _Finished(list(gen_ids), "end_token" if gen_ids[-1] in tokenizer.eos_ids else "max_new_tokens", score)
