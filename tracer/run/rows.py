"""The pieces every way of generating is built of (nanochat's `Engine`): a sequence being generated
(`RowState`: its tokens, its own KV cache, the row it continues), one recorded pass of a model for a
row (`run_pass`: the forward pass, the draw, every position's prediction and the logit lens), why a row
stops (`why_stop`), and the `Generation` of the passes and rows (`finish`). The plain loop
(`tracer.run.generate`), beam search (`tracer.run.beams`: rows forked from one another) and speculative
decoding (`tracer.run.speculative`: a draft model's passes, rejected tokens rewound out of both caches)
are made of these. Core module: imports numpy only.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from ..core.decoder import KVCache, forward
from ..core.record import Recorder
from .lens import logit_lens, position_predictions
from .sampler import sample
from .settings import GenerationSettings
from .trace import TARGET, Generation, Row, Trace


def record_predictions(model, rec: Recorder, logits: np.ndarray, seq: list[int], start: int, token: int,
                       lens: bool, on_layer=None) -> None:
    """Every computed position's prediction and loss, and the logit lens, into the pass's recording.
    `on_layer()` is called before each and between the lens's chunks of layers (a deadline raises there)."""
    tick = on_layer or (lambda: None)
    if rec.wants("loss.per_position"):
        tick()
        rec.store.update(position_predictions(logits, seq, start, token, on_layer))
    if lens and rec.wants("lens.top_token"):
        tick()
        found = logit_lens(model.config, model.params, rec.store, seq, start, token, W_U=model.weights.unembed.W,
                           on_chunk=on_layer)
        if found is not None:
            rec.store.update(found)


class Ticking:
    """A model's layers, `tick()` called as the decoder takes each (`forward` reads `weights.layers[l]`, or
    iterates them): a check between two layers (a deadline, a stop) without a hook in the decoder."""

    def __init__(self, layers, tick):
        self._layers, self._tick = layers, tick

    def __len__(self) -> int:
        return len(self._layers)

    def __getitem__(self, l):
        self._tick()
        return self._layers[l]

    def __iter__(self):
        for l in range(len(self._layers)):
            yield self[l]

    def __getattr__(self, name):
        return getattr(self._layers, name)


def ticking(weights, on_layer):
    """`weights` whose layers call `on_layer()` as the decoder takes each (`weights` itself without one)."""
    return weights if on_layer is None else replace(weights, layers=Ticking(weights.layers, on_layer))


class RowState:
    """One sequence being generated (nanochat's `RowState`): its tokens and their texts, the tokens it
    generated, its own KV cache (None: every pass recomputes the whole context), the first position
    its next pass computes, and the row it continues (`parent`) when its sequence and cache were
    copied from another row (`fork`). Beam search keeps one per beam, speculative decoding one per
    model."""

    def __init__(self, model, ids: list[int], cache: bool, capacity: int, index: int = 0):
        self.index, self.parent, self.stopped = index, None, None
        self.seq = list(ids)
        self.strs = [model.tokenizer.token_str(t) for t in self.seq]  # grows with seq: each pass gets a copy
        self.generated: list[int] = []
        self.kv = KVCache(model.config, capacity) if cache else None
        self.start = 0

    def append(self, token: int, tokenizer) -> None:
        """`token` becomes the row's next token (its next pass computes it, with any appended since)."""
        self.generated.append(token)
        self.seq.append(token)
        self.strs.append(tokenizer.token_str(token))

    def fork(self, index: int) -> "RowState":
        """A new row `index` continuing this one: the same tokens, a copy of its cache."""
        other = copy.copy(self)
        other.seq, other.strs, other.generated = list(self.seq), list(self.strs), list(self.generated)
        other.kv, other.index, other.parent = copy.deepcopy(self.kv), index, self.index
        return other

    def rewind(self, n: int) -> None:
        """Keep the first `n` tokens (a draft's rejected tokens dropped): the cache forgets the rest."""
        del self.generated[max(n - (len(self.seq) - len(self.generated)), 0):]
        del self.seq[n:], self.strs[n:]
        self.start = min(self.start, n)
        if self.kv is not None:
            self.kv.length = min(self.kv.length, n)


def run_pass(model, row: RowState, settings: GenerationSettings, rng: np.random.Generator, names=None,
             hooks=None, lens: bool = True, which: str = TARGET, draw=None,
             on_layer=None) -> tuple[Trace, np.ndarray, int]:
    """One recorded pass of `model` for `row`: the positions from `row.start` on, through the row's
    cache (all of them without one), the draw from the last position's logits, every position's
    prediction, and the logit lens when `lens`. Returns the pass (labelled with the row, `which`
    model, and the row it continued), the logits of the positions it computed [pos, d_vocab], and
    the token drawn. The row's cache and `start` move past the positions computed; nothing is appended.
    `on_layer()` is called before each layer and between the predictions' and the lens's chunks (`Ticking`)."""
    cfg = model.config
    rec = Recorder(names, cfg, hooks=hooks)  # hooks (`tracer.core.record.Hooks`) apply in every pass
    new = row.seq[row.start:] if row.kv is not None else row.seq
    logits = forward(cfg, ticking(model.weights, on_layer), new, rec, cache=row.kv)  # [pos, d_vocab]
    start = row.start if row.kv is not None else 0
    if draw is None:
        token = sample(logits[-1], settings, rng, Recorder(store=rec.store), row.seq)
    else:  # another rule of drawing from these logits (speculative decoding's verifying pass)
        token = draw(logits, start, Recorder(store=rec.store))
    record_predictions(model, rec, logits, row.seq, start, token, lens, on_layer)
    step = Trace(rec.store, np.asarray(row.seq, dtype=np.int64), cfg, list(row.strs), {}, start, settings,
                 row.index, which, row.parent, tokenizer=model.tokenizer)
    row.start, row.parent = len(row.seq), None  # its next pass continues its own sequence from there
    return step, logits, token


def why_stop(row: RowState, token: int, settings: GenerationSettings, tokenizer, ends: set,
             generated: list | None = None) -> str | None:
    """Why `row` stops after appending `token` (None: it goes on): an end token (`ends`: the
    tokenizer's `eos_ids`), a stop string, the limit. `generated`: the tokens generated up to `token`
    (default: the row's)."""
    generated = row.generated if generated is None else generated
    if token in ends:  # the end token, or a chat turn's end (<|im_end|>, <|eot_id|>)
        return "end_token"
    text = tokenizer.decode(generated)
    if any(x and x in text for x in settings.stop):
        return "stop_string"
    return "max_new_tokens" if len(generated) >= settings.max_new_tokens else None


def finish(model, ids: list[int], passes: list[Trace], rows: list[RowState], settings: GenerationSettings,
           hooks=None) -> Generation:
    """The generation of `passes` and `rows`: each row's text decoded, the model's metadata on every
    pass (a draft's pass keeps what it set of its own)."""
    meta = model.meta()
    if hooks is not None:
        meta["hooked"] = list(hooks.changed)  # the hook points whose values were replaced
    for step in passes:
        step.meta = {**meta, **step.meta}
    done = []
    for r in rows:
        done.append(Row(r.generated, model.tokenizer.decode(r.generated) if r.generated else "",
                        r.stopped or "max_new_tokens", getattr(r, "score", None)))
    return Generation(passes, list(ids), meta=meta, settings=settings, rows=done, tokenizer=model.tokenizer)
