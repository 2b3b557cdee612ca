"""The demo's mixture-of-experts screen, after the heads and W_O, for a model whose MLP routes: the followed
token's router scores, the k experts kept with their weights and outputs, the weighted sum written as the
article writes attention's ("0.984×E3(x) + 0.016×E2(x)"), the experts it did not use and how many of the
model's parameters a token uses; with `--ablate L:expert:E`, who was sent where. Reads the recorded
routing (`mlp.hook_router_logits`, `hook_expert_indices`, `hook_expert_weights`, `hook_expert_out`, the
shared expert's) and `gen.meta["ablation"]["rerouted"]`; the weighted sum is worked out on the recorded
outputs, as the terminal's walkthrough does (`render.experts`)."""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.text import Text

from ...sections import screen
from ...tokenizers.tokens import label
from .. import fmt
from ..words import say
from .base import Demo, FirstThatFits, Step, mark, pairs, row_style, sentence, table

OTHERS = 2  # experts not chosen listed under the chosen ones (the next highest scores)
MOVED = 3  # rerouted tokens listed


def rerouted(d: Demo) -> list[dict]:
    """--ablate L:expert:E's record: per layer, the experts removed and the prompt tokens sent elsewhere."""
    return list((d.gen.meta.get("ablation") or {}).get("rerouted") or [])


def routed_layer(d: Demo) -> int | None:
    """The layer the screen shows: the first one an expert was removed from (--ablate), else the layer the
    demo follows, else the first that routes (a dense layer among experts has no router); None: no routing."""
    routes = [l for l in range(d.cfg.n_layers) if f"blocks.{l}.mlp.hook_expert_indices" in d.trace.arrays]
    removed = [int(r["layer"]) for r in rerouted(d) if int(r["layer"]) in routes]
    if removed:
        return removed[0]
    return d.layer if d.layer in routes else next(iter(routes), None)


def tokens_named(positions: list[int]) -> str:
    """'A–E' for a run of positions, 'A, C and F' otherwise (the first five and how many more when long)."""
    labels = [label(p) for p in positions]
    if len(labels) <= 2 or positions == list(range(positions[0], positions[-1] + 1)):
        return fmt.letters(labels)
    if len(labels) > 6:
        labels = labels[:5] + [f"{len(labels) - 5} more"]
    return ", ".join(labels[:-1]) + " and " + labels[-1]


def pick(pairs_: list) -> str:
    """'E3 0.984, E2 0.016': experts and their weights, most weight first."""
    return ", ".join(f"E{int(e)} {fmt.prob(w, 3)}" for e, w in pairs_)


def _routing_table(d: Demo, layer: int, hide: bool, lead: int, removed: set[int]):
    """The chosen experts (score, weight, output), the next highest scores not used, the removed ones, the sum."""
    f, b = d.focus, f"blocks.{layer}.mlp."
    logits = d.trace[b + "hook_router_logits"][f]  # [expert]
    chosen = [int(e) for e in d.trace[b + "hook_expert_indices"][f]]  # [k] most weight first
    weights = d.trace[b + "hook_expert_weights"][f]  # [k]
    outs = d.trace.arrays.get(b + "hook_expert_out")  # [pos, k, d_model]
    cols = ["", "expert", "router score"] + ([] if hide else ["weight", "its output"])
    t = table(*cols, right=("router score", "weight"))
    for j, e in enumerate(chosen):
        row = [mark(not hide), f"E{e}", d.num(logits[e])]
        if not hide:
            row += [d.num(weights[j]), fmt.column_vec(outs[f, j], d.precision, 8, lead) if outs is not None else ""]
        t.add_row(*row, style=None if hide else row_style(True))
    others = [int(e) for e in np.argsort(-np.asarray(logits, dtype=np.float64), kind="stable")
              if int(e) not in chosen and int(e) not in removed and np.isfinite(logits[int(e)])]
    fit = max(0, min(OTHERS, d.rows - len(chosen) - 2))  # a small terminal lists fewer (`fit_pages`)
    for e in others[:fit]:
        t.add_row("", f"E{e}", d.num(logits[e]), *([] if hide else [say("experts.not_used"), ""]), style="dim")
    if len(others) > fit:  # the words in the widest column, so that they widen none
        rest = say("experts.rest", n=str(len(others) - fit))
        t.add_row("", "⋮", *([rest] if hide else ["", "", rest]), style="dim")
    for e in sorted(removed):
        t.add_row("", f"E{e}", "−∞", *([] if hide else ["", say("experts.removed")]), style="dim")
    if not hide and outs is not None:
        mixed = np.einsum("k,kd->d", np.asarray(weights, dtype=np.float64), np.asarray(outs[f], dtype=np.float64))
        t.add_row("", "sum", "", d.num(np.sum(weights)), Text(fmt.column_vec(mixed, d.precision, 8, lead), style="bold"))
    return t


@screen("experts", layers=True)
def step_experts(d: Demo) -> Step | None:
    layer = routed_layer(d)
    if layer is None:
        return None
    cfg, f, L = d.cfg, d.focus, label(d.focus)
    b = f"blocks.{layer}.mlp."
    kind = cfg.mlp_of(layer)
    chosen = [int(e) for e in d.trace[b + "hook_expert_indices"][f]]
    weights = d.trace[b + "hook_expert_weights"][f]
    E, k = int(d.trace[b + "hook_router_logits"].shape[-1]), len(chosen)
    moved = [r for r in rerouted(d) if int(r["layer"]) == layer]
    removed = {int(e) for r in moved for e in r["removed"]}
    x_router, x = kind.reads("ln2(x)" if cfg.layer_norm and cfg.norm_place_kind.before else "x")  # Gemma 4: their own norms
    heading = sentence((say("demo.experts.heading", L=L, layer=str(layer), x=x_router, k=str(k),
                            bias=say("experts.bias") if cfg.router_bias else ""), "bold"))

    def routing(hide: bool):
        return FirstThatFits(*(_routing_table(d, layer, hide, lead, removed) for lead in (4, 3, 2)))

    terms = " + ".join(f"{d.num(w)}×E{e}({x})" for e, w in zip(chosen, weights))
    parts = [heading, Text(), routing(False), Text(),
             sentence((f"{L}'s {kind.name} = ", "bold"), terms)]
    shared, gate = d.trace.arrays.get(b + "hook_shared_out"), d.trace.arrays.get(b + "hook_shared_gate")
    if shared is not None and gate is not None:  # Qwen2-MoE: one more expert, always used, with its own gate
        g = d.num(float(gate[f, 0]))  # the model line below says what the shared expert is
        parts.append(pairs([(f"+ shared expert × gate {g}", d.vector(shared[f]))]))
    unused = E - len(set(chosen))
    parts.append(Text(say("experts.skipped", unused=str(unused), E=str(E), share=f"{100 * unused / E:.1f}")
                      + say("demo.experts.model", block=kind.block_words(cfg))))
    parts += [Text(), *_ablation(d, layer, moved, chosen)]
    question = Group(heading, Text(), routing(True))
    ask = say("demo.experts.ask", k=str(k), L=L, how=kind.route_words(cfg))
    return Step("Experts: the router's choice", say("demo.experts", k=str(k)), Group(*parts), question, ask=ask)


def _ablation(d: Demo, layer: int, moved: list[dict], chosen: list[int]) -> list:
    """With --ablate L:expert:E: the tokens that had chosen E and where they went; without: the flag to try."""
    if not moved:
        return [Text(say("demo.experts.remove", flag=f"{layer}:expert:{chosen[0]}"))]
    out = []
    for r in moved:
        removed = " and ".join(f"E{int(e)}" for e in r["removed"]) + f" of layer {layer}"
        positions = r["positions"]
        if not positions:
            out.append(Text(say("demo.experts.nobody", removed=removed)))
            continue
        who = tokens_named([int(q["pos"]) for q in positions])
        out.append(Text(say("demo.experts.rerouted", removed=removed, who=who)))
        t = table("", "token", "clean run", "this run")
        fit = max(1, min(MOVED, d.rows - 4))  # fewer on a small terminal (`fit_pages`); the sentence names them all
        shown = positions if len(positions) <= fit else positions[: max(1, fit - 1)]
        for q in shown:
            pos = int(q["pos"])
            t.add_row(mark(pos == d.focus), d.who(pos, 0), pick(q["before"]), pick(q["after"]), style=row_style(pos == d.focus))
        if len(shown) < len(positions) and fit > 1:
            t.add_row("", "⋮", "", "")
        out.append(t)
    return out
