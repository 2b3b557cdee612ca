"""Changing the model while it runs: hooks that ablate a head, a layer's attention or its MLP, patch in
a value from another run, or add a vector to the residual stream (for `Model.run(…, hooks=…)` and
`Model.generate(…, hooks=…)`, TransformerLens's `run_with_hooks`; `tracer.core.record.Hooks` applies them).

Each helper returns `{hook name: fn}`; `combine` joins several (functions on one name run in turn).
The CLI's `--ablate L:H`, `L:H:mean`, `L:*` (every head of layer L), `L:mlp` is read once into an
`Ablation` (`tracer.run.ablation`), which gives these hooks and the ablation's record. A head is ablated where
the heads are combined: its share of `hook_z` [pos, head, d_head], which W_O turns into the attention
output, is set to zeros, or (mean) to its mean over the pass's positions. Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np

from ..errors import TracerError


def ablate_head(layer: int, head: int, how: str = "zero") -> dict:
    """Head `head` of layer `layer` removed: its z (the weighted sum of values) zero, or its mean over positions."""
    if how not in ("zero", "mean"):
        raise TracerError(f"ablation {layer}:{head}:{how}: 'zero' or 'mean'")

    def fn(z: np.ndarray) -> np.ndarray:  # [pos, head, d_head]
        out = np.array(z)
        out[:, head] = 0.0 if how == "zero" else z[:, head].mean(axis=0)
        return out

    return {f"blocks.{layer}.attn.hook_z": fn}


def ablate_attention(layer: int, n_heads: int, how: str = "zero") -> dict:
    """Every head of layer `layer` removed (the layer's attention adds only b_O)."""
    return combine(*(ablate_head(layer, h, how) for h in range(n_heads)))


def ablate_expert(layer: int, expert: int) -> dict:
    """Expert `expert` of layer `layer` taken out of the routing: its router score −∞ before the top k is
    chosen, so every token that chose it goes to its next choice (and the weights are worked out again)."""
    def fn(logits: np.ndarray) -> np.ndarray:  # [pos, expert]
        out = np.array(logits)
        out[..., expert] = -np.inf
        return out

    return {f"blocks.{layer}.mlp.hook_router_logits": fn}


def ablate_mlp(layer: int) -> dict:
    """Layer `layer`'s MLP removed: its output to the residual stream is zeros."""
    return {f"blocks.{layer}.hook_mlp_out": lambda out: np.zeros_like(out)}


def patch(name: str, value, positions=None) -> dict:
    """`name`'s value replaced by `value` (another run's, of the same shape), or only at `positions`
    (the first axis) when given: activation patching."""
    value = np.asarray(value)

    def fn(v: np.ndarray) -> np.ndarray:
        if positions is None:
            return value
        out = np.array(v)
        out[list(positions)] = value[list(positions)]
        return out

    return {name: fn}


def add_to_residual(layer: int, vector, positions=None) -> dict:
    """`vector` [d_model] added to the residual stream entering layer `layer` (every position, or `positions`)."""
    vector = np.asarray(vector)

    def fn(x: np.ndarray) -> np.ndarray:  # [pos, d_model]
        out = np.array(x)
        out[slice(None) if positions is None else list(positions)] += vector
        return out

    return {f"blocks.{layer}.hook_resid_pre": fn}


def combine(*hook_dicts: dict) -> dict:
    """Several hook dicts as one: functions on the same name are applied one after the other."""
    out: dict = {}
    for d in hook_dicts:
        for name, fn in d.items():
            out[name] = _chain(out[name], fn) if name in out else fn
    return out


def _chain(first, then):
    """A hook running `first`, then `then`, each given the name too when it asks for it."""
    from ..core.record import caller

    first, then = caller(first), caller(then)

    def run(value, name):
        return then(first(value, name), name)

    return run


PREDICTION_TOP = 5  # the next tokens `activation_patching` reports of each run

def prediction_change(model, ids, hooks: dict) -> dict:
    """The next-token prediction after `ids` without and with `hooks` (one pass each, only the logits
    recorded): {"clean": {top_id, p_top}, "changed": {top_id, p_top, p_clean_top}}, probabilities in float64."""
    def last(trace) -> np.ndarray:  # [d_vocab]
        logits = np.asarray(trace["logits"][-1], dtype=np.float64)
        e = np.exp(logits - logits.max())
        return e / e.sum()

    clean = last(model.run(list(ids), names=["logits"]))
    changed = last(model.run(list(ids), names=["logits"], hooks=hooks))
    top, new = int(np.argmax(clean)), int(np.argmax(changed))
    return {"clean": {"top_id": top, "p_top": float(clean[top])},
            "changed": {"top_id": new, "p_top": float(changed[new]), "p_clean_top": float(changed[top])}}


def rerouted(model, ids, layers_experts: dict, hooks: dict) -> list[dict]:
    """Where taking experts out of the routing sent the prompt's tokens: for each layer in `layers_experts`
    (layer → the experts removed), each position that chose one of them in the clean run, with its
    experts and weights before and after ({layer, removed, positions: [{pos, before, after}]},
    before/after as [[expert, weight], …], most weight first)."""
    names = [f"blocks.{l}.mlp.hook_expert_{x}" for l in layers_experts for x in ("indices", "weights")]
    clean, changed = model.run(list(ids), names=names), model.run(list(ids), names=names, hooks=hooks)
    out = []
    for layer, removed in sorted(layers_experts.items()):
        m = f"blocks.{layer}.mlp.hook_expert_"
        pairs = lambda t, p: [[int(e), float(w)] for e, w in zip(t[m + "indices"][p], t[m + "weights"][p])]  # noqa: E731
        moved = [{"pos": p, "before": pairs(clean, p), "after": pairs(changed, p)} for p in range(len(ids))
                 if set(int(e) for e in clean[m + "indices"][p]) & set(removed)]
        out.append({"layer": int(layer), "removed": sorted(int(e) for e in removed), "positions": moved})
    return out


def activation_patching(model, a_ids, b_ids) -> dict:
    """Two prompts of one length: where does A's answer live? Their answer tokens (A's top next token a,
    B's b), the logit difference ld = logit(a) − logit(b) at the last position of each run, how far the
    residual streams are apart at each layer's input and position, and, for each layer l and position p,
    B's run with A's `blocks.{l}.hook_resid_pre` patched in at p: the fraction of the difference it
    recovers, (ld_patched − ld_B) / (ld_A − ld_B) (TransformerLens's `patching` module's metric); and each
    run's PREDICTION_TOP most likely next tokens ("predictions": [A's, B's] {top_ids, top_p})."""
    a_ids, b_ids = list(a_ids), list(b_ids)
    if len(a_ids) != len(b_ids):
        raise TracerError(f"compare: the prompts must have the same number of tokens; A has {len(a_ids)}, "
                          f"B has {len(b_ids)}")
    names = ["blocks.*.hook_resid_pre", "logits"]
    ra, rb = model.run(a_ids, names=names), model.run(b_ids, names=names)
    a_top, b_top = int(np.argmax(ra["logits"][-1])), int(np.argmax(rb["logits"][-1]))

    def ld(trace) -> float:
        last = np.asarray(trace["logits"][-1], dtype=np.float64)
        return float(last[a_top] - last[b_top])

    ld_a, ld_b = ld(ra), ld(rb)
    n_layers, n = model.config.n_layers, len(a_ids)
    recovered = np.zeros((n_layers, n))  # [layer, pos]
    distance = np.zeros((n_layers, n))  # [layer, pos] ‖resid_A − resid_B‖
    for layer in range(n_layers):
        name = f"blocks.{layer}.hook_resid_pre"
        distance[layer] = np.linalg.norm(ra[name].astype(np.float64) - rb[name], axis=-1)
        for p in range(n):
            patched = model.run(b_ids, names=["logits"], hooks=patch(name, ra[name], positions=[p]))
            recovered[layer, p] = (ld(patched) - ld_b) / (ld_a - ld_b) if ld_a != ld_b else float("nan")
    return {"answers": [a_top, b_top], "ld": [ld_a, ld_b], "differs": [int(x != y) for x, y in zip(a_ids, b_ids)],
            "recovered": recovered.tolist(), "distance": distance.tolist(),
            "predictions": [_top(_probs(ra), PREDICTION_TOP), _top(_probs(rb), PREDICTION_TOP)]}


HEAD_ABLATION_WORK = 2e9  # multiply-adds the page's precomputed head ablations may cost in all (a few seconds)


def head_ablation_cost(cfg, n_tokens: int) -> dict:
    """What zero-ablating every head once costs: {"runs": every layer's heads, "params": the model's size,
    "per_token": the weights a token is multiplied by (the unembedding too, not the embedding rows it
    reads), "tokens", "work": runs × tokens × per_token multiply-adds}."""
    from ..core.params import param_shapes

    shapes = param_shapes(cfg)
    params = sum(int(np.prod(s)) for s in shapes.values())
    lookups = sum(int(np.prod(shapes[n])) for n in ("W_E", "W_pos") if n in shapes)  # rows read, not multiplied
    per_token = params - lookups + (0 if "W_U" in shapes else cfg.d_vocab * cfg.d_model)  # tied: W_E unembeds too
    runs = sum(cfg.attention_of(l).n_heads(cfg) for l in range(cfg.n_layers))  # a linear layer: its value heads
    return {"runs": runs, "params": params, "per_token": per_token, "tokens": int(n_tokens),
            "work": float(runs) * n_tokens * per_token}


def _probs(trace) -> np.ndarray:  # [d_vocab] the last position's next-token probabilities, float64
    logits = np.asarray(trace["logits"][-1], dtype=np.float64)
    e = np.exp(logits - logits.max())
    return e / e.sum()


def _top(p: np.ndarray, k: int) -> dict:  # the k most likely ids (ties: the lower id first) and their p
    ids = np.argsort(-p, kind="stable")[:k]
    return {"top_ids": [int(i) for i in ids], "top_p": [float(p[i]) for i in ids]}


def head_ablations(model, ids, top_k: int = 5, limit: float | None = None) -> dict:
    """For every (layer, head), the next-token prediction after `ids` (the last position) with that one
    head zero-ablated (`ablate_head`), beside the clean run's: {"done": True, **cost, "clean": {top_ids,
    top_p}, "heads": [layer][head] {top_ids, top_p, p_clean_top (the clean top token's p without the
    head), top_changed}}, probabilities in float64. Over `limit` multiply-adds (`head_ablation_cost`)
    (default HEAD_ABLATION_WORK) nothing is run: {"done": False, **cost, "limit"}; nor when the clean run's
    numbers are not finite (an overflow): {…, "not_finite": True}."""
    limit = HEAD_ABLATION_WORK if limit is None else limit
    ids = list(ids)
    cost = head_ablation_cost(model.config, len(ids))
    if cost["work"] > limit:
        return {"done": False, **cost, "limit": float(limit)}
    clean = _probs(model.run(ids, names=["logits"]))
    if not np.isfinite(clean).all():  # an overflowing run: a head's zeros beside NaN are not an ablation to show
        return {"done": False, **cost, "limit": float(limit), "not_finite": True}
    top = int(np.argmax(clean))
    heads = []
    for layer in range(model.config.n_layers):
        row = []
        for head in range(model.config.attention_of(layer).n_heads(model.config)):
            try:
                p = _probs(model.run(ids, names=["logits"], hooks=ablate_head(layer, head)))
            except TracerError:  # the head's other values were already NaN or ∞: the hook check refuses them
                return {"done": False, **cost, "limit": float(limit), "not_finite": True}
            row.append({**_top(p, top_k), "p_clean_top": float(p[top]), "top_changed": int(np.argmax(p)) != top})
        heads.append(row)
    return {"done": True, **cost, "limit": float(limit), "clean": _top(clean, top_k), "heads": heads}
