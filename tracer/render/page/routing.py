"""What the page carries of a mixture of experts and of attention sinks, layer by layer, for the carried
positions (`data.choose`): each position's router scores (the highest), the experts it chose and their
weights, each chosen expert's output and their weighted sum, the shared expert's part, and what
`--ablate L:expert:E` rerouted; each head's sink share per position and its logit, worked back from a
recorded row (`render.sinks.sink_logit`). The page's MLP step lays out the routing as the terminal's
walkthrough does (`render.experts`), with a tokens × experts map per layer; its scores step, the sink's
row. Reads recorded arrays only; the weighted sum is worked out on the recorded outputs (float64), as
the terminal does."""

from __future__ import annotations

import numpy as np

from ..experts import ROUTER_SHOWN
from ..sinks import sink_logit
from .data import Rows, cut, r6, r6s, vector_block


def experts_data(rows: Rows, cfg, layer: int, carried: list[int], whole: int, meta: dict) -> dict | None:
    """Layer `layer`'s routing of the carried positions, or None where it does not route (a dense layer
    among experts, a model without experts, a names filter that left the routing out)."""
    b = f"blocks.{layer}.mlp."
    if not all(rows.has(b + n) for n in ("hook_router_logits", "hook_expert_indices", "hook_expert_weights")):
        return None
    kind = cfg.mlp_of(layer)
    chosen, weights, top, mixed, norms = [], [], [], [], []
    has_out = rows.has(b + "hook_expert_out")
    for t in carried:
        logits = np.asarray(rows.row(b + "hook_router_logits", t), dtype=np.float64)  # [expert]
        ch = np.asarray(rows.row(b + "hook_expert_indices", t)).astype(int)  # [k]
        w = np.asarray(rows.row(b + "hook_expert_weights", t), dtype=np.float64)  # [k]
        chosen.append([int(e) for e in ch])
        weights.append(r6s(w))
        order = np.argsort(-np.where(np.isfinite(logits), logits, -np.inf), kind="stable")[: len(ch) + ROUTER_SHOWN]
        top.append([[int(e), r6(logits[e])] for e in order])  # ±∞ (a removed expert) is carried as null
        if has_out:
            m = np.einsum("k,kd->d", w, np.asarray(rows.row(b + "hook_expert_out", t), dtype=np.float64))  # [d_model]
            mixed.append(cut(m, whole))
            norms.append(r6(np.linalg.norm(m)))
    E = int(np.asarray(rows.row(b + "hook_router_logits", carried[0])).shape[-1]) if carried else cfg.n_experts
    moved = [r for r in (meta.get("ablation") or {}).get("rerouted") or [] if int(r.get("layer", -1)) == layer]
    shared = vector_block(rows, b + "hook_shared_out", carried, cfg.d_model, whole, False)
    return {"E": E, "k": cfg.experts_per_token, "route": kind.route_words(cfg), "expert": kind.expert_words(cfg),
            "bias": bool(cfg.router_bias), "block": kind.block_words(cfg),
            "reads": list(kind.reads("x")) if kind.reads("x") != ("x", "x") else None,  # Gemma 4: the router's, the experts' own
            "chosen": chosen, "weights": weights, "top": top,
            "out": vector_block(rows, b + "hook_expert_out", carried, cfg.d_model, whole, True) if has_out else None,
            "mixed": {"dims": int(cfg.d_model), "whole": bool(cfg.d_model <= whole), "rows": mixed, "norm": norms}
            if has_out else None,
            "shared": shared, "shared_width": cfg.shared_d_mlp,
            "gate": [r6(rows.row(b + "hook_shared_gate", t)[0]) for t in carried] if shared else None,
            "removed": sorted({int(e) for r in moved for e in r.get("removed", [])}),
            "rerouted": {str(int(q["pos"])): {"before": q["before"], "after": q["after"]}
                         for r in moved for q in r.get("positions", [])}}


def sink_data(rows: Rows, layer: int, carried: list[int], H: int) -> dict | None:
    """Each head's sink share of each carried position's weight ([head][carried]) and its logit ([head],
    worked back from the position whose share leaves the most digits to do it: nearest one half); None
    for attention without sinks."""
    name = f"blocks.{layer}.attn.hook_sink_share"  # [head, pos]
    if not rows.has(name):
        return None
    shares = {}
    for t in carried:
        st = rows.gen.steps[rows.pass_of[t]]
        shares[t] = np.asarray(st.arrays[name])[:, t - st.start]  # [head]
    logits = []
    for h in range(H):
        t = min(carried, key=lambda t: abs(float(shares[t][h]) - 0.5))
        scores = rows.att(f"blocks.{layer}.attn.hook_attn_scores", h, t)
        logit = sink_logit(scores, float(shares[t][h])) if scores is not None else None
        logits.append(None if logit is None else r6(logit))
    return {"share": [[r6(shares[t][h]) for t in carried] for h in range(H)], "logit": logits}


def add_routing(layers: list[dict], rows: Rows, cfg, carried: list[int], whole: int, meta: dict) -> None:
    """Each layer's routing (`moe`) and sinks (`sink`) added to `data.layers_data`'s entries."""
    for layer, entry in enumerate(layers):
        entry["moe"] = experts_data(rows, cfg, layer, carried, whole, meta)
        entry["sink"] = sink_data(rows, layer, carried, cfg.n_heads)
