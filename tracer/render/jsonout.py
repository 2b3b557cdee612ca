"""The `--json` outputs of `trace` and `replay`: one JSON object each, their fields a contract
(README, "Stability"). Infinite and NaN numbers, which JSON lacks, are written as strings. One
writer for both, all ASCII: every character beyond it is a \\u escape, so a C1 control (U+009B)
or a bidi override (U+202E) from a prompt or a scenario never reaches the terminal raw, and the
output survives a terminal that is not UTF-8."""

from __future__ import annotations

import json
import math


def json_safe(x):
    """`x` with every non-finite float as "inf", "-inf" or "nan" (JSON has no such numbers), and numpy
    arrays and scalars as lists and numbers."""
    if isinstance(x, float):
        return x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if hasattr(x, "tolist") and hasattr(x, "dtype"):  # a numpy array or scalar
        return json_safe(x.tolist())
    return x


def dumps(obj) -> str:
    return json.dumps(json_safe(obj), ensure_ascii=True)


def trace_json(gen, tokenizer) -> dict:
    """The `trace --json` record; a generation of several rows or with a draft model's passes adds `rows`
    (every sequence) and `passes` (every pass in the order run: its row, model, parent, start, tokens
    seen, token drawn, and whether its row kept it)."""
    out = {
        "model": gen.meta.get("model"),
        "prompt": gen.meta.get("prompt"),
        "prompt_ids": [int(i) for i in gen.prompt_ids],
        "generated_ids": [int(i) for i in gen.generated_ids],
        "text": gen.text,
        "generated": [tokenizer.token_str(t) for t in gen.generated_ids],
        "tokens": [tokenizer.token_str(t) for t in gen.tokens],
        "settings": {**gen.settings.to_dict(), "stopped": gen.stopped},  # every setting, by its name (tracer.run.settings)
        "verify_cache": gen.meta.get("verify_cache"),
        "storage": gen.meta.get("storage"),  # parameter → its storage type in the file (F32, BF16, Q4_1, …)
        "expansion": gen.meta.get("expansion"),  # expanded to float32 once, or layer by layer within a budget
        "ablation": gen.meta.get("ablation"),
        "attribution": gen.meta.get("attribution"),  # --attribute: target_id, per_position (gradient × input)  # --ablate: what was removed, the clean and the changed prediction
        "non_finite": _non_finite(gen),
    }
    if isinstance(gen.meta.get("speculative"), dict):  # speculative decoding: each round, the passes of both models
        out["speculative"] = gen.meta["speculative"]
    if gen.beams:  # beam search: the finished sequences, best first
        out["beams"] = [{"ids": [int(i) for i in r.generated_ids], "text": r.text, "score": r.score} for r in gen.rows]
    if not gen.plain:
        out["rows"] = [{"row": r, "generated_ids": [int(i) for i in row.generated_ids], "text": row.text,
                        "generated": [tokenizer.token_str(t) for t in row.generated_ids], "stopped": row.stopped,
                        "score": row.score} for r, row in enumerate(gen.rows)]
        out["passes"] = [{"pass": n, "row": int(p.row), "model": p.model, "parent": p.parent, "start": int(p.start),
                          "n_tokens": len(p.tokens), "token": int(p["sample.token"]) if "sample.token" in p else None,
                          "kept": gen.kept(p)} for n, p in enumerate(gen.passes)]
    return out


def _non_finite(gen):
    """The first value that went NaN or ±∞ ({step, name, index, value}), or None for a finite run."""
    from ..run.overflow import non_finite

    found = non_finite(gen)
    return found.to_dict() if found is not None else None


def replay_json(replay) -> dict:
    """A `tracer.replay.Replay` as JSON: the checks, the generated tokens, the notes."""
    scn, gen, checks, tok = replay.scenario, replay.gen, replay.checks, replay.model.tokenizer
    return {
        "title": scn.title,
        "scenario": str(scn.path) if scn.path else None,
        "checks": [c.to_dict() for c in checks],
        "prompt_ids": [int(i) for i in gen.prompt_ids],
        "generated": [tok.token_str(t) for t in gen.generated_ids],
        "generated_ids": [int(i) for i in gen.generated_ids],
        "text": gen.text,
        "passed": sum(c.ok for c in checks),
        "failed": sum(not c.ok for c in checks),
        "notes": scn.notes,
        "non_finite": _non_finite(gen),
    }
