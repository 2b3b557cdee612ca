"""The generation loop and the sampling draw, both recorded.

The article's loop: run ABCDEF through every layer, turn F's final vector into a probability
for every token, choose G, append it (ABCDEFG) and go again, until the end token. With the KV
cache (on by default) each pass after the first computes Q, K and V only for the newest token
and reuses the cached keys and values of the earlier ones; `cache=False` recomputes the whole
context every step, as the seed Q&A assumes generation must. The sequence being generated is a
`RowState` (nanochat's name: its tokens, its own KV cache) and each pass is `run_pass` for a row;
`finish` makes the `Generation` of the passes and rows (`tracer.run.rows`). With `beams` the run is a
beam search (`tracer.run.beams`: rows forked from one another), with `draft` speculative decoding
(`tracer.run.speculative`: a draft model's passes, its rejected tokens rewound out of both caches);
`check_run` refuses what a model cannot do with the settings before any pass.

Each pass ends with the draw of the next token, one recorded stage at a time (penalties, temperature,
top-k, top-p, min-p, the draw: `tracer.run.sampler`).

Each pass also records what every position predicts (`predict.*`, `loss.per_position`) and the
logit lens (`lens.*`), see `tracer.run.lens`. `verify_cache` reruns a generation with the other cache
setting and compares the logits and tokens. Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np

from ..core.fast import add_out_rows
from .overflow import REACHED_NAMES
from .rows import RowState, Ticking, finish, record_predictions, run_pass, ticking, why_stop  # noqa: F401  (the loop's pieces, imported from here too)
from .sampler import sample  # noqa: F401
from .settings import GenerationSettings, SettingError
from .trace import Generation


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


def generate(model, ids: list[int], settings: GenerationSettings, names=None, on_step=None,
             lens: bool | None = None, hooks=None, draft=None, on_layer=None) -> Generation:
    """Run the prompt `ids`, then generate up to `settings.max_new_tokens` tokens, one recorded pass each.

    `ids` fit the context with room for the new tokens (`Model.tokenize` checks that). With
    `max_new_tokens=0` the prompt pass still predicts (and records) the next token, but nothing
    is appended. `on_step(done, total)` is called after each pass (a progress bar). `lens=False`
    skips the logit lens (it needs the residual streams recorded); `True` records it for every
    pass; None (the default) records it for the prompt pass, and for every later pass only on
    models under LENS_EVERY_PASS_MAX parameters (on GPT-2 sizes the lens costs more than the
    decode step itself). `draft`: the model that proposes tokens when `settings.draft` is set (`Model.draft_model`).
    `on_layer()` is called before each layer of every pass (the draft's, each beam's too) and before the logit
    lens's chunks of layers: what it raises ends the run there (`tracer serve`'s time limit).
    """
    with np.errstate(all="ignore"):  # a run that overflows records ∞ and NaN where they arise: no warnings
        return _generate(model, ids, settings, names, on_step, lens, hooks, draft, on_layer)


def check_run(model, settings: GenerationSettings) -> None:
    """What this model cannot do with these settings, refused before any pass (a SettingError naming the setting):
    beam search or speculative decoding without a new token, more beam continuations than the vocabulary holds."""
    from .beams import candidates_kept

    s = settings
    for name in ("beams", "draft"):
        if getattr(s, name) is not None and s.max_new_tokens < 1:
            raise SettingError(name, "needs --max-new-tokens ≥ 1 (it makes new tokens)")
    if s.beams is not None:
        K = candidates_kept(s.beams, len(set(model.tokenizer.eos_ids)))
        if K > model.config.d_vocab:
            raise SettingError("beams", f"{s.beams} weighs {K} continuations a step, more than the {model.config.d_vocab:,} "
                                        f"tokens of the vocabulary")


def _generate(model, ids: list[int], settings: GenerationSettings, names, on_step, lens, hooks=None,
              draft=None, on_layer=None) -> Generation:
    cfg, s = model.config, settings
    lens_every_pass = lens is True or (lens is None and cfg.n_params() < LENS_EVERY_PASS_MAX)
    if s.cache and s.max_new_tokens >= OUT_ROWS_MIN_NEW:
        add_out_rows(cfg, model.weights)
    rng = np.random.default_rng(s.seed)
    if s.beams is not None:
        from .beams import beam_search

        return beam_search(model, ids, s, rng, names, on_step, lambda n: lens_every_pass or (lens is not False and n == 0),
                           hooks, on_layer)
    if s.draft is not None:
        from .speculative import speculative

        if draft is None:
            raise SettingError("draft", "names a draft, but no draft model was given (Model.generate loads it)")
        return speculative(model, draft, ids, s, rng, names, on_step,
                           lambda n: lens_every_pass or (lens is not False and n == 0), hooks, on_layer)
    row = RowState(model, ids, s.cache, len(ids) + max(s.max_new_tokens, 1))
    passes: list = []
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
