"""The generation loop and the sampling draw, both recorded.

The article's loop: run ABCDEF through every layer, turn F's final vector into a probability
for every token, choose G, append it (ABCDEFG) and go again, until the end token. With the KV
cache (on by default) each pass after the first computes Q, K and V only for the newest token
and reuses the cached keys and values of the earlier ones; `cache=False` recomputes the whole
context every step, as the seed Q&A assumes generation must. The sequence being generated is a
`RowState` (nanochat's name: its tokens, its own KV cache) and each pass is `run_pass` for a row;
`finish` makes the `Generation` of the passes and rows. Beam search (rows forked from one another,
`RowState.fork`) and speculative decoding (a draft model's passes, its rejected tokens rewound out of
both caches, `RowState.rewind`) are built of the same pieces (`tracer.run.trace`'s rows).

Sampling, one recorded stage at a time: logits ÷ temperature (`sample.scaled`) → softmax
(`sample.probs`) → top-k cut → top-p cut → renormalise (`sample.final`) → one seeded uniform
draw (`sample.uniform`) → the token whose band of the cumulative distribution, in order of
probability, holds the draw (`sample.token`). `sample.kept_top_k` and `sample.kept_top_p` count
the candidates left after each cut (the most likely ones, ties by id). Temperature 0 is greedy:
the most likely token, no draw. numpy's PCG64 generator makes the draws the same on every machine.

Each pass also records what every position predicts (`predict.*`, `loss.per_position`) and the
logit lens (`lens.*`), see `tracer.run.lens`. `verify_cache` reruns a generation with the other cache
setting and compares the logits and tokens. Core module: imports numpy only.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from ..core.decoder import KVCache, forward
from ..core.equations import largest_first, scale_logits, tempered_softmax
from ..core.fast import add_out_rows
from .lens import logit_lens, position_predictions
from .overflow import REACHED_NAMES
from ..core.record import Recorder
from .settings import GenerationSettings
from .trace import TARGET, Generation, Row, Trace


def top_k_count(n_vocab: int, top_k) -> int:
    """Candidates left after the top-k cut."""
    return n_vocab if top_k is None else min(int(top_k), n_vocab)


def top_p_count(sorted_probs: np.ndarray, top_p) -> int:
    """Smallest number of the most likely candidates whose renormalised probabilities reach `top_p`."""
    if top_p is None or top_p >= 1:
        return len(sorted_probs)
    cum = np.cumsum(sorted_probs / sorted_probs.sum())  # [n_keep]
    return min(len(sorted_probs), int(np.searchsorted(cum, top_p, side="left")) + 1)


def sample(logits: np.ndarray, temperature: float, top_k, top_p, rng: np.random.Generator, rec: Recorder) -> int:
    """Choose the next token from the last position's logits [d_vocab], recording each stage."""
    greedy = temperature == 0
    rec("sample.scaled", scale_logits(logits, temperature))  # [d_vocab]
    probs = rec("sample.probs", tempered_softmax(logits, temperature))  # [d_vocab]
    # [d_vocab] most likely first, ties by id; greedy needs only the first (argmax: no 50k sort per step)
    order = np.argmax(probs, keepdims=True) if greedy else largest_first(probs)
    n_k = 1 if greedy else top_k_count(len(probs), top_k)
    n_p = 1 if greedy else top_p_count(probs[order[:n_k]], top_p)
    rec("sample.kept_top_k", np.array(n_k))
    rec("sample.kept_top_p", np.array(n_p))
    final = np.zeros_like(probs)  # [d_vocab]
    final[order[:n_p]] = probs[order[:n_p]]
    final = rec("sample.final", final / final.sum())  # [d_vocab] renormalised
    if greedy:
        token = int(order[0])
    else:
        u = float(rng.random())
        rec("sample.uniform", np.array(u))
        cum = np.cumsum(final[order[:n_p]])  # [n_keep] upper edge of each candidate's band
        token = int(order[min(int(np.searchsorted(cum, u, side="right")), n_p - 1)])
    rec("sample.token", np.array(token))
    return token


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


LENS_EVERY_PASS_MAX = 50_000_000  # parameters
OUT_ROWS_MIN_NEW = 200  # new tokens from which the one-position W_out layout pays for itself (tracer.core.fast.add_out_rows)


def recording_plan(json: bool = False, save: bool = False, lens_shown: bool = True) -> dict:
    """What a run must record for what will be read from it, as `Model.generate`'s `names` and `lens`:
    everything for a saved trace (`save`) or a walkthrough; for the JSON record alone (`json`
    without `save`) only what places an overflow in its sublayer (`overflow.REACHED_NAMES`: the
    residual stream, the norms' scales) and no logit lens; no lens either when the walkthrough does
    not show it (`lens_shown`: it costs a pass over W_U). `model.generate(p, **recording_plan(json=True))`."""
    json_only = json and not save
    unseen = json_only or (not lens_shown and not save)
    return {"names": list(REACHED_NAMES) if json_only else None, "lens": False if unseen else None}


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


def generate(model, ids: list[int], settings: GenerationSettings, names=None, on_step=None,
             lens: bool | None = None, hooks=None, on_layer=None) -> Generation:
    """Run the prompt `ids`, then generate up to `settings.max_new_tokens` tokens, one recorded pass each.

    `ids` fit the context with room for the new tokens (`Model.tokenize` checks that). With
    `max_new_tokens=0` the prompt pass still predicts (and records) the next token, but nothing
    is appended. `on_step(done, total)` is called after each pass (a progress bar). `lens=False`
    skips the logit lens (it needs the residual streams recorded); `True` records it for every
    pass; None (the default) records it for the prompt pass, and for every later pass only on
    models under LENS_EVERY_PASS_MAX parameters (on GPT-2 sizes the lens costs more than the
    decode step itself). `on_layer()` is called before each layer of every pass and before the logit
    lens's chunks of layers: what it raises ends the run there (`tracer serve`'s time limit).
    """
    with np.errstate(all="ignore"):  # a run that overflows records ∞ and NaN where they arise: no warnings
        return _generate(model, ids, settings, names, on_step, lens, hooks, on_layer)


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
             hooks=None, lens: bool = True, which: str = TARGET, on_layer=None) -> tuple[Trace, np.ndarray, int]:
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
    token = sample(logits[-1], settings.temperature, settings.top_k, settings.top_p, rng, Recorder(store=rec.store))
    start = row.start if row.kv is not None else 0
    record_predictions(model, rec, logits, row.seq, start, token, lens, on_layer)
    step = Trace(rec.store, np.asarray(row.seq, dtype=np.int64), cfg, list(row.strs), {}, start, settings,
                 row.index, which, row.parent, tokenizer=model.tokenizer)
    row.start, row.parent = len(row.seq), None  # its next pass continues its own sequence from there
    return step, logits, token


def why_stop(row: RowState, token: int, settings: GenerationSettings, tokenizer, ends: set) -> str | None:
    """Why `row` stops after appending `token` (None: it goes on): an end token (`ends`: the
    tokenizer's `eos_ids`), a stop string, the limit."""
    if token in ends:  # the end token, or a chat turn's end (<|im_end|>, <|eot_id|>)
        return "end_token"
    text = tokenizer.decode(row.generated)
    if any(x and x in text for x in settings.stop):
        return "stop_string"
    return "max_new_tokens" if len(row.generated) >= settings.max_new_tokens else None


def _generate(model, ids: list[int], settings: GenerationSettings, names, on_step, lens, hooks=None,
              on_layer=None) -> Generation:
    cfg, s = model.config, settings
    lens_every_pass = lens is True or (lens is None and cfg.n_params() < LENS_EVERY_PASS_MAX)
    if s.cache and s.max_new_tokens >= OUT_ROWS_MIN_NEW:
        add_out_rows(cfg, model.weights)
    rng = np.random.default_rng(s.seed)
    row = RowState(model, ids, s.cache, len(ids) + max(s.max_new_tokens, 1))
    passes: list[Trace] = []
    ends = set(model.tokenizer.eos_ids)
    while True:
        step, _, token = run_pass(model, row, s, rng, names, hooks, lens_every_pass or (lens is not False and not passes),
                                  on_layer=on_layer)
        passes.append(step)
        if on_step is not None:
            on_step(len(passes), max(s.max_new_tokens, 1))
        if len(row.generated) >= s.max_new_tokens:
            break
        row.append(token, model.tokenizer)
        row.stopped = why_stop(row, token, s, model.tokenizer, ends)
        if row.stopped is not None:
            break
    return finish(model, ids, passes, [row], s, hooks)


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
                        r.stopped or "max_new_tokens"))
    return Generation(passes, list(ids), meta=meta, settings=settings, rows=done, tokenizer=model.tokenizer)


# --------------------------------------------------------------------------- verifying the KV cache

TOLERANCE = {"float32": 1e-5, "float64": 1e-12}  # per unit of the logits' scale (see `verify_cache`)


def last_logits(gen: Generation) -> list[np.ndarray]:
    """The last position's logits of every pass: the row generation uses."""
    return [np.asarray(s["logits"][-1], dtype=np.float64) for s in gen.steps]  # [d_vocab] each


def rerun(model, gen: Generation, cache: bool, on_step=None) -> Generation:
    """`gen` again from its prompt with its settings (the KV cache `cache`), recording only the logits."""
    return generate(model, list(gen.prompt_ids), gen.settings.replace(cache=cache), names=["logits"], on_step=on_step,
                    lens=False)


def verify_cache(model, gen: Generation, on_step=None) -> dict:
    """Rerun `gen` with the other cache setting (same seed and settings) and compare.

    Compares the last position's logits of every pass and the generated tokens. The logits agree
    when their largest absolute difference is within `tolerance` (1e-5 in float32, 1e-12 in
    float64) times `scale` = max(1, largest |logit|): the same arithmetic in a different order
    (one row instead of all rows) differs by a few units in the last place of the largest numbers.
    Returns a JSON-able dict.
    """
    cached = gen.settings.cache
    if not all("logits" in st for st in gen.steps):
        gen = rerun(model, gen, cached, on_step)
    other = rerun(model, gen, not cached, on_step)
    with_cache, without = (gen, other) if cached else (other, gen)
    a, b = last_logits(with_cache), last_logits(without)
    with np.errstate(all="ignore"):  # ∞ - ∞ in an overflowing run: NaN, compared as such
        diffs = [float(np.max(np.abs(x - y))) for x, y in zip(a, b)]  # per pass
    scale = max([1.0] + [float(np.max(np.abs(x))) for x in a + b])
    tol = TOLERANCE.get(model.config.dtype, 1e-5)
    max_diff = max(diffs) if diffs else 0.0
    tokens_equal = list(with_cache.generated_ids) == list(without.generated_ids) and len(a) == len(b)
    return {
        "compared": "KV cache vs full recompute",
        "dtype": model.config.dtype,
        "steps": len(diffs),
        "per_step_max_abs_diff": diffs,
        "max_abs_diff": max_diff,
        "tolerance": tol,
        "scale": scale,
        "bound": tol * scale,
        "generated_cache": [int(t) for t in with_cache.generated_ids],
        "generated_no_cache": [int(t) for t in without.generated_ids],
        "tokens_equal": bool(tokens_equal),
        "ok": bool(tokens_equal and max_diff <= tol * scale),
    }
