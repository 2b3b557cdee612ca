"""What can be wrong with a loaded trace that its loader did not refuse: metadata of the wrong type,
token ids outside the vocabulary, a pass whose tokens and texts disagree (`damage`). The loader
(`tracer.run.trace`) checked every shape and kind of number; NaN and ∞ are arithmetic, not damage.
Core module: imports numpy only."""

from __future__ import annotations

import numpy as np

from ..core import hooks

_META_TYPES = {  # what `generate` writes into a trace's metadata, by key (`settings` are checked on loading)
    "model": str, "prompt": str, "text": str, "trained": bool, "seed": (int, type(None)),
    "tokenizer": (dict, str), "truncated": dict, "training": dict, "weights": str, "verify_cache": dict,
}
_NUMBER, _WHOLE, _TEXT, _FLAG = "a number", "a whole number", "text", "true or false"
_VERIFY_CACHE = {  # what `generate.verify_cache` writes, by key: one kind, or a list of one kind
    "compared": _TEXT, "dtype": _TEXT, "steps": _WHOLE, "per_step_max_abs_diff": [_NUMBER], "max_abs_diff": _NUMBER,
    "tolerance": _NUMBER, "scale": _NUMBER, "bound": _NUMBER, "generated_cache": [_WHOLE],
    "generated_no_cache": [_WHOLE], "tokens_equal": _FLAG, "ok": _FLAG,
}


def _is(kind: str, v) -> bool:
    """A value of a trace's metadata is of `kind` (NaN and ∞ are numbers: an overflowing run's)."""
    if kind == _FLAG:
        return isinstance(v, bool)
    if isinstance(v, bool):
        return False
    if kind == _NUMBER:
        return isinstance(v, (int, float))
    if kind == _WHOLE:
        return isinstance(v, int)
    return isinstance(v, str)


def _verify_cache_damage(result: dict) -> str | None:
    for key, kind in _VERIFY_CACHE.items():
        if key not in result:
            continue
        v, each = result[key], kind[0] if isinstance(kind, list) else None
        if each is not None and not (isinstance(v, list) and all(_is(each, x) for x in v)):
            return f"meta: verify_cache.{key} is not a list of {each.removeprefix('a ')}s"
        if each is None and not _is(kind, v):
            return f"meta: verify_cache.{key} is not {kind}"
    return None


def _intervention_damage(meta: dict, n_vocab: int) -> str | None:
    """What is wrong with --ablate's and --attribute's records in a trace's meta (None: sound or absent)."""
    def token(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n_vocab

    def prob(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    ab = meta.get("ablation")
    if ab is not None:
        clean, changed = (ab.get("clean"), ab.get("changed")) if isinstance(ab, dict) else (None, None)
        if not (isinstance(clean, dict) and isinstance(changed, dict) and token(clean.get("top_id"))
                and token(changed.get("top_id")) and all(prob(d.get(k)) for d, k in
                ((clean, "p_top"), (changed, "p_top"), (changed, "p_clean_top")))
                and isinstance(ab.get("ablated", []), list)
                and isinstance(ab.get("heads", []), list) and all(
                    isinstance(c, list) and len(c) == 2 and all(token(x) for x in c) for c in ab.get("heads", []))):
            return "meta: 'ablation' is not what --ablate records ({ablated, heads, clean, changed})"
    hooked = meta.get("hooked")
    if hooked is not None and not (isinstance(hooked, list) and all(isinstance(n, str) for n in hooked)):
        return "meta: 'hooked' is not a list of the hook names a run changed"
    att = meta.get("attribution")
    if att is not None:
        per = att.get("per_position") if isinstance(att, dict) else None
        if not (isinstance(att, dict) and token(att.get("target_id")) and isinstance(per, list) and all(map(prob, per))):
            return "meta: 'attribution' is not what --attribute records ({target_id, per_position})"
    return None


def damage(gen, n_vocab: int) -> str | None:
    """What is wrong with a loaded trace (metadata of the wrong type, a token id out of range), or
    None when it looks sound; shapes and kinds of number were checked when it was loaded, and NaN
    or ∞ in its values is arithmetic, not damage. `tracer show` asks only after rendering failed,
    so that a bug of ours on a sound file is still reported as one."""
    if not gen.steps:
        return "it holds no passes ('steps' is empty)"
    passes = gen.passes
    for key, kinds in _META_TYPES.items():
        for where, meta in [("meta", gen.meta)] + [(f"step {n} meta", s.meta) for n, s in enumerate(passes)]:
            if key in meta and meta[key] is not None and not isinstance(meta[key], kinds):
                return f"{where}: {key!r} is {type(meta[key]).__name__}"
    if isinstance(gen.meta.get("verify_cache"), dict) and (wrong := _verify_cache_damage(gen.meta["verify_cache"])):
        return wrong
    if (wrong := _intervention_damage(gen.meta, n_vocab)) is not None:
        return wrong
    ids = [gen.prompt_ids] + [row.generated_ids for row in gen.rows]
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for part in ids for i in part):
        return "prompt_ids / generated_ids hold something other than token ids"
    if not gen.prompt_ids or list(gen.prompt_ids) != [int(t) for t in gen.steps[0].tokens]:
        return "prompt_ids do not match the tokens of the first pass"
    for n, step in enumerate(passes):
        where_step = "the first pass" if n == 0 else f"pass {n}"
        n_ok = min(step.config.d_vocab, n_vocab)
        bad = [int(t) for t in np.asarray(step.tokens).ravel() if not 0 <= int(t) < n_ok]
        if bad:
            return f"token id {bad[0]} is outside the vocabulary 0..{n_ok - 1}"
        if not 0 <= step.start < max(len(step.tokens), 1) or not step.tokens.size:
            return f"{where_step} starts at {step.start} but sees {len(step.tokens)} tokens"
        if len(step.token_strs) != len(step.tokens) or not all(isinstance(t, str) for t in step.token_strs):
            return f"{where_step}: token_strs do not match its {len(step.tokens)} tokens"
        lens = np.asarray(step.arrays.get("lens.positions", np.zeros(0, dtype=np.int64)))
        if lens.ndim != 1 or lens.dtype.kind not in "iu" or not ((lens >= 0) & (lens < len(step.tokens))).all():
            return f"{where_step}: 'lens.positions' is not a list of its positions"
        for name in _TOKEN_IDS:  # the loader checked shapes and kinds; ids must also name tokens
            arr = np.asarray(step.arrays[name]) if name in step.arrays else None
            if arr is not None and arr.size and not ((arr >= 0) & (arr < n_ok)).all():
                where = name if n == 0 else f"steps.{n}.{name}"
                return f"{where!r} holds a token id outside the vocabulary 0..{n_ok - 1}"
    return None


_TOKEN_IDS = tuple(name for name, hook in hooks.TOP.items() if hook.ids)  # whole numbers that name tokens
