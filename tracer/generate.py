"""The generation loop and the sampling draw, both recorded.

The article's loop: run ABCDEF through every layer, turn F's final vector into a probability
for every token, choose G, append it (ABCDEFG) and go again, until the end token. With the KV
cache (on by default) each pass after the first computes Q, K and V only for the newest token
and reuses the cached keys and values of the earlier ones; `cache=False` recomputes the whole
context every step, as the seed Q&A assumes generation must.

Sampling, one recorded stage at a time: logits ÷ temperature (`sample.scaled`) → softmax
(`sample.probs`) → top-k cut → top-p cut → renormalise (`sample.final`) → one seeded uniform
draw (`sample.uniform`) → the token whose band of the cumulative distribution, in order of
probability, holds the draw (`sample.token`). Temperature 0 is greedy: the most likely token,
no draw. numpy's PCG64 generator makes the draws the same on every machine.
Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np

from .decoder import KVCache, forward
from .errors import TracerError
from .record import Recorder
from .trace import Generation, Trace


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not np.isfinite(temperature) or temperature < 0:
        raise TracerError(f"temperature must be a number ≥ 0 (0 is greedy), got {temperature}")
    if top_k is not None and (isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1):
        raise TracerError(f"top-k must be a whole number ≥ 1, got {top_k}")
    if top_p is not None and not (0 < top_p <= 1):
        raise TracerError(f"top-p must be in (0, 1], got {top_p}")


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())  # [d_vocab]
    return e / e.sum()  # [d_vocab]


def sample(logits: np.ndarray, temperature: float, top_k, top_p, rng: np.random.Generator, rec: Recorder) -> int:
    """Choose the next token from the last position's logits [d_vocab], recording each stage."""
    greedy = temperature == 0
    scaled = rec("sample.scaled", logits / (1.0 if greedy else temperature))  # [d_vocab]
    probs = rec("sample.probs", softmax(scaled))  # [d_vocab]
    order = np.argsort(-probs, kind="stable")  # [d_vocab] most likely first, ties by id
    if greedy:
        n_keep = 1
    else:
        n_keep = len(probs) if top_k is None else min(int(top_k), len(probs))
        if top_p is not None and top_p < 1:
            kept = probs[order[:n_keep]]  # [n_keep]
            cum = np.cumsum(kept / kept.sum())  # [n_keep]
            n_keep = min(n_keep, int(np.searchsorted(cum, top_p, side="left")) + 1)
    final = np.zeros_like(probs)  # [d_vocab]
    final[order[:n_keep]] = probs[order[:n_keep]]
    final = rec("sample.final", final / final.sum())  # [d_vocab]
    if greedy:
        token = int(order[0])
    else:
        u = float(rng.random())
        rec("sample.uniform", np.array(u))
        cum = np.cumsum(final[order[:n_keep]])  # [n_keep]
        token = int(order[min(int(np.searchsorted(cum, u, side="right")), n_keep - 1)])
    rec("sample.token", np.array(token))
    return token


def pass_macs(cfg, n_new: int, n_seen: int) -> int:
    """Multiply-adds of one pass computing `n_new` positions that attend over `n_seen` keys."""
    dm, H, dh = cfg.d_model, cfg.n_heads, cfg.d_head
    per_layer = n_new * dm * 3 * H * dh  # Q, K, V
    keys = n_new * n_seen - (n_new * (n_new - 1)) // 2  # causal: visible (query, key) pairs
    per_layer += 2 * H * dh * keys  # Q·K and the weighted sum of V
    per_layer += n_new * H * dh * dm  # W_O
    if cfg.mlp:
        per_layer += 2 * n_new * dm * cfg.d_mlp
    return cfg.n_layers * per_layer + n_new * dm * cfg.d_vocab


def generate(model, ids: list[int], max_new_tokens: int = 1, temperature: float = 0.0, top_k=None, top_p=None,
             seed: int = 0, cache: bool = True, stop=None, names=None, on_step=None) -> Generation:
    """Run the prompt, then generate up to `max_new_tokens` tokens, one recorded pass each.

    With `max_new_tokens=0` the prompt pass still predicts (and records) the next token, but
    nothing is appended.
    """
    cfg = model.config
    check_sampling(temperature, top_k, top_p)
    if isinstance(max_new_tokens, bool) or int(max_new_tokens) != max_new_tokens or max_new_tokens < 0:
        raise TracerError(f"max-new-tokens must be a whole number ≥ 0, got {max_new_tokens}")
    if len(ids) + max_new_tokens > cfg.n_ctx:
        raise TracerError(
            f"max-new-tokens {max_new_tokens} overflows the context: the prompt has {len(ids)} tokens "
            f"and the model reads at most {cfg.n_ctx} (so at most {cfg.n_ctx - len(ids)} new tokens)"
        )
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    rng = np.random.default_rng(seed)
    kv = KVCache(cfg, len(ids) + max(max_new_tokens, 1)) if cache else None
    seq = list(ids)
    generated: list[int] = []
    steps: list[Trace] = []
    stopped = "max_new_tokens"
    start = 0
    while True:
        rec = Recorder(names)
        new = seq[start:] if kv is not None else seq
        logits = forward(cfg, model.params, new, rec, cache=kv, fused=model.fused)  # [pos, d_vocab]
        token = sample(logits[-1], temperature, top_k, top_p, rng, Recorder(prefix="", store=rec.store, _wanted=lambda n: True))
        step_start = start if kv is not None else 0
        steps.append(Trace(rec.store, np.asarray(seq, dtype=np.int64), cfg,
                           [model.tokenizer.token_str(t) for t in seq], {}, step_start))
        if on_step is not None:
            on_step(len(steps), max(max_new_tokens, 1))
        if len(generated) >= max_new_tokens:
            break
        generated.append(token)
        start = len(seq)
        seq.append(token)
        if model.tokenizer.end_id is not None and token == model.tokenizer.end_id:
            stopped = "end_token"
            break
        text = model.tokenizer.decode(generated)
        if any(s and s in text for s in stops):
            stopped = "stop_string"
            break
        if len(generated) >= max_new_tokens:
            break
    meta = {
        **model.meta(),
        "settings": {"max_new_tokens": int(max_new_tokens), "temperature": float(temperature),
                     "top_k": top_k, "top_p": top_p, "seed": int(seed), "cache": bool(cache), "stop": stops,
                     "stopped": stopped},
    }
    for s in steps:
        s.meta = dict(meta)
    return Generation(steps, list(ids), generated, model.tokenizer.decode(generated) if generated else "", meta)
