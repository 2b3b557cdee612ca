"""Speculative decoding with real numbers: a draft proposes tokens one by one, the model checks them all
in one pass, using the prediction at every position (the seed Q&A's "X probability distributions").

The draft is a second model sharing the vocabulary (`Model.draft_model`), or the model's own first
L + 1 layers followed by its final norm and unembedding: the logit lens after layer L (`first_layers`).
The model's prompt pass draws the first token, as the plain loop's does. Then each round (llama.cpp's
`speculative` example, Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
Decoding", Algorithm 1):
  1. the draft runs K passes (its own KV cache), drawing d_1 … d_K from its distributions q_i with the
     run's settings (recorded as the draft's passes: `sample.final` is q_i);
  2. the model runs one pass over the last accepted token and d_1 … d_K (K + 1 positions at once);
     at each position i its distribution p_i (penalties, temperature, cuts: `sampler.distribution`)
     judges d_{i+1};
  3. temperature 0: d_{i+1} is accepted while it is the model's own choice (argmax after the
     penalties), so the output is exactly plain greedy decoding's; temperature > 0: accepted with
     probability min(1, p_i(d)/q_i(d)) (one seeded uniform draw each), so the output follows the
     model's own distribution;
  4. the model's own token follows: at the first rejection drawn from max(0, p_i − q_i) renormalised
     (greedy: its argmax), or, when all K were accepted, from p_K (a token for free). The rejected
     tokens are rewound out of both caches (`RowState.rewind`).
A round gives accepted + 1 tokens for one pass of the model (the plain loop: one token a pass). K is
cut so that no round passes `max_new_tokens`.

The model's verifying pass records, besides the pass itself, `verify.drafted` [k] (the draft's tokens),
`verify.predicted` [k + 1] (the model's own most likely token at each position, after the penalties),
`verify.target_prob` and `verify.draft_prob` [k] (p_i and q_i of each drafted token), `verify.uniform`
[k] (the accept draws; NaN where none was drawn: greedy, or after the first rejection) and
`verify.accepted` []; its `sample.*` is the draw of the model's own token at the position it follows
(`sample.final` the distribution drawn from: p, or the residual max(0, p − q) renormalised).
The generation's `meta["speculative"]`: {draft, draft_tokens, rounds: [{drafted_ids, accepted, next_id}],
target_passes, draft_passes}. Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.equations import largest_first
from ..core.record import Recorder
from .rows import RowState, finish, run_pass, why_stop
from .sampler import distribution, draw, penalize, sample, token_counts
from .settings import SettingError
from .trace import DRAFT, Generation

STAGES = ["sample.counts", "sample.penalized", "sample.scaled", "sample.probs", "sample.kept_top_k",
          "sample.kept_top_p", "sample.kept_min_p"]  # recorded for a rejection's draw, whose final is the residual


def first_layers(cfg, n: int):
    """`cfg` cut to its first `n` layers (the per-layer fields cut with it): self-speculation's draft."""
    keep = range(n)
    return replace(cfg, n_layers=n,
                   layer_types=None if cfg.layer_types is None else tuple(cfg.layer_types[:n]),
                   windowed=None if cfg.windowed is None else tuple(l for l in cfg.windowed if l in keep),
                   dense_layers=None if cfg.dense_layers is None else tuple(l for l in cfg.dense_layers if l in keep))


def own_choice(logits: np.ndarray, settings, context) -> int:
    """The model's most likely token after the penalties (what greedy decoding takes)."""
    if settings.penalized:
        logits = penalize(logits, token_counts(context, len(logits), settings.penalty_last_n), settings)
    return int(np.argmax(logits))


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:  # [d_vocab] ×2 → [d_vocab]
    """max(0, p − q) renormalised: where a rejected draft's probability goes (p itself when p = q)."""
    r = np.maximum(p - q, 0.0)
    return r / r.sum() if r.sum() > 0 else p


def verifier(settings, drafted: list[int], q_finals: list, row: RowState, rng):
    """The draw of a verifying pass (`run_pass`'s `draw`): judges each drafted token at its position, records
    `verify.*` and the draw of the model's own token, and returns that token."""
    s, k = settings, len(drafted)

    def judge(logits: np.ndarray, start: int, rec: Recorder) -> int:
        L = logits[-(k + 1):]  # [k + 1, d_vocab] the last accepted token's position and each drafted one's
        first = len(row.seq) - k  # the context before the drafts: position first − 1 predicts d_1
        contexts = [row.seq[: first + i] for i in range(k + 1)]
        predicted = [own_choice(L[i], s, contexts[i]) for i in range(k + 1)]
        p_d, q_d, u = np.full(k, np.nan), np.full(k, np.nan), np.full(k, np.nan)
        accepted, p_reject = k, None
        for i, d in enumerate(drafted):
            if s.greedy:
                if d != predicted[i]:
                    accepted = i
                    break
                continue
            p = distribution(L[i], s, contexts[i])  # [d_vocab] the model's
            p_d[i], q_d[i] = p[d], q_finals[i][d]
            u[i] = float(rng.random())
            if u[i] >= min(1.0, p_d[i] / q_d[i]):
                accepted, p_reject = i, p
                break
        rec("verify.drafted", np.asarray(drafted, dtype=np.int64))
        rec("verify.predicted", np.asarray(predicted, dtype=np.int64))
        rec("verify.target_prob", p_d)
        rec("verify.draft_prob", q_d)
        rec("verify.uniform", u)
        rec("verify.accepted", np.array(accepted))
        if p_reject is None:  # greedy, or every draft accepted: the model's own draw at that position
            return sample(L[accepted], s, rng, rec, contexts[accepted])
        sample(L[accepted], s, np.random.default_rng(0), Recorder(STAGES, store=rec.store), contexts[accepted])
        final = rec("sample.final", residual(p_reject, q_finals[accepted]))  # [d_vocab]
        order = largest_first(final)
        return draw(final, order, int(np.count_nonzero(final)), False, rng, rec)

    return judge


def speculative(model, draft, ids: list[int], settings, rng, names=None, on_step=None, lens_of=None,
                hooks=None, on_layer=None) -> Generation:
    """Generate as the module docstring says; `draft`: the proposing model; `lens_of(n)`: whether the model's
    n-th pass records the logit lens (the draft's never do); `on_layer()`: called before each layer of every
    pass, the draft's and the model's (`run_pass`)."""
    s, tok = settings, model.tokenizer
    cap = len(ids) + s.max_new_tokens + s.draft_tokens + 1
    target, proposer = RowState(model, ids, s.cache, cap), RowState(draft, ids, s.cache, cap)
    ends = set(tok.eos_ids)
    first, _, token = run_pass(model, target, s, rng, names, hooks, lens_of(0), on_layer=on_layer)
    passes, rounds, n_target = [first], [], 1
    draft_meta = draft.meta()
    while True:
        target.append(token, tok)
        target.stopped = why_stop(target, token, s, tok, ends)
        if on_step is not None:
            on_step(len(target.generated), s.max_new_tokens)
        if target.stopped is not None:
            break
        k = min(s.draft_tokens, s.max_new_tokens - len(target.generated) - 1)  # no round passes max_new_tokens
        for t in target.seq[len(proposer.seq):]:  # the draft catches up with the accepted tokens
            proposer.append(t, tok)
        drafted, q_finals = [], []
        for _ in range(k):
            q, _, d = run_pass(draft, proposer, s, rng, names, None, False, which=DRAFT, on_layer=on_layer)
            q.meta = dict(draft_meta)
            passes.append(q)
            drafted.append(d)
            q_finals.append(np.asarray(q["sample.final"]))
            proposer.append(d, tok)
        context = len(target.seq)
        for d in drafted:  # on trial: the model's pass computes them all
            target.append(d, tok)
        verify, _, token = run_pass(model, target, s, rng, names, hooks, lens_of(n_target),
                                    draw=verifier(s, drafted, q_finals, target, rng), on_layer=on_layer)
        passes.append(verify)
        n_target += 1
        a = int(verify["verify.accepted"])
        rounds.append({"drafted_ids": [int(d) for d in drafted], "accepted": a, "next_id": int(token)})
        target.rewind(context + a)  # the rejected drafts leave both caches
        proposer.rewind(min(len(proposer.seq), context + a))
        for j in range(a):  # each accepted draft is a generated token: the plain loop's stops apply after each
            target.stopped = why_stop(target, drafted[j], s, tok, ends, target.generated[: len(target.generated) - a + j + 1])
            if target.stopped is not None:
                target.rewind(context + j + 1)
                break
        if target.stopped is not None:
            break
    gen = finish(model, ids, passes, [target], s, hooks)
    gen.meta["speculative"] = {"draft": s.draft, "draft_tokens": s.draft_tokens, "rounds": rounds,
                               "target_passes": n_target, "draft_passes": len(passes) - n_target}
    return gen


def check_draft(model, draft, name: str) -> None:
    """A draft model whose vocabulary is not the model's, refused before any pass (naming `draft`)."""
    a, b = model.tokenizer, draft.tokenizer
    if draft.config.d_vocab != model.config.d_vocab or a.n_vocab != b.n_vocab or \
            any(a.token_str(i) != b.token_str(i) for i in range(a.n_vocab)):
        raise SettingError("draft", f"{name!r} has another vocabulary ({b.n_vocab:,} tokens, {b.name}) than "
                                    f"the model's ({a.n_vocab:,} tokens, {a.name}): a draft must share the tokenizer")
