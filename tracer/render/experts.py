"""A token's trip through a mixture of experts, in the article's words one level up: the router's
scores, the k experts it keeps and their weights, each chosen expert's output, and the layer's output
as their weighted sum — "0.612×E3(x) + 0.388×E5(x)", the shape of "0.4×A_V + 0.6×B_V" — and how many
experts the token did not use. Also the table of every token's experts in a layer (the `layers`
section and the heatmaps). Reads the recorded arrays only (`mlp.hook_router_logits`,
`hook_expert_indices`, `hook_expert_weights`, `hook_expert_out`, the shared expert's), so it shows any
model whose MLP recorded them."""

from __future__ import annotations

import numpy as np
from rich.console import group
from rich.table import Table
from rich.text import Text

from ..core.equations import largest_first
from .context import Ctx
from .fmt import count, num, prob, shape
from .text import indent, line
from .words import say

ROUTER_SHOWN = 4  # router scores listed beyond the chosen experts


def recorded(ctx: Ctx, layer: int, t: int) -> bool:
    """Whether this layer's MLP recorded a routing for position t."""
    return ctx.at(f"blocks.{layer}.mlp.hook_expert_indices", t) is not None


def routing(ctx: Ctx, t: int, layer: int, x_name: str):
    """Token t through layer `layer`'s experts: router, choice, the chosen experts, the weighted sum.
    `x_name`: what the MLP was given, as the walkthrough writes it (ln2(x))."""
    cfg, L, p = ctx.cfg, ctx.labels[t], ctx.p
    b = f"blocks.{layer}.mlp."
    logits, chosen = ctx.at(b + "hook_router_logits", t), ctx.at(b + "hook_expert_indices", t)
    weights, outs = ctx.at(b + "hook_expert_weights", t), ctx.at(b + "hook_expert_out", t)
    if logits is None or chosen is None or weights is None:
        return
    kind = cfg.mlp_of(layer)
    x_router, x_name = kind.reads(x_name)  # what the router and the experts are given (Gemma 4: each its own norm of x)
    E, k = len(logits), len(chosen)
    chosen = [int(e) for e in chosen]
    top = [int(e) for e in largest_first(logits)[: min(E, k + ROUTER_SHOWN)]]
    scores = ", ".join(f"E{e} {num(logits[e], p)}" for e in top) + (say("experts.more", n=str(E - len(top))) if E > len(top) else "")
    bias = say("experts.bias") if cfg.router_bias else ""
    yield line((say("experts.title"), "bold"), say("experts.router", x=x_router, shape=shape(cfg.d_model, E), bias=bias,
                                                   E=str(E), scores=scores))
    yield line(say("experts.choice", how=kind.route_words(cfg),
                   chosen=", ".join(f"E{e} {prob(w, p)}" for e, w in zip(chosen, weights))))
    if outs is not None:
        for j, e in enumerate(chosen):  # the first one's steps in words, the others' "the same"
            said = say("experts.one", e=str(e), middle=kind.expert_words(cfg).format(e=e)) if j == 0 else \
                say("experts.same", e=str(e))
            yield ctx.eq(said, f"E{e}({x_name})", ctx.v(outs[j]))
        terms = " + ".join(f"{num(w, p)}×E{e}({x_name})" for e, w in zip(chosen, weights))
        mixed = np.einsum("k,kd->d", np.asarray(weights, dtype=np.float64), np.asarray(outs, dtype=np.float64))
        yield ctx.eq(say("experts.sum", terms=terms), f"moe_{L}", ctx.v(mixed))
    shared = ctx.at(b + "hook_shared_out", t)
    gate = ctx.at(b + "hook_shared_gate", t)
    if shared is not None and gate is not None:
        yield ctx.eq(say("experts.shared", gate=num(float(gate[0]), p), width=str(cfg.shared_d_mlp)), f"shared_{L}",
                     ctx.v(shared))
    for moved in ctx.gen.meta.get("ablation", {}).get("rerouted", []):  # --ablate L:expert:E: this token before and after
        if moved.get("layer") != layer:
            continue
        for at in moved.get("positions", []):
            if at.get("pos") == t and ctx.step_of(t) == 0:
                show = lambda pairs: ", ".join(f"E{e} {prob(w, p)}" for e, w in pairs)  # noqa: E731
                yield line(say("experts.rerouted", removed=", ".join(f"E{e}" for e in moved["removed"]),
                               before=show(at["before"]), after=show(at["after"])))
    unused = E - len(set(chosen))
    yield Text(say("experts.skipped", unused=str(unused), E=str(E), share=f"{100 * unused / E:.1f}"), style="dim")


def expert_table(ctx: Ctx, layer: int) -> Table | None:
    """Every shown token's experts in one layer, most weight first: "E3 0.61  E5 0.39"."""
    rows = []
    for t in ctx.shown_tokens():
        chosen = ctx.at(f"blocks.{layer}.mlp.hook_expert_indices", t)
        weights = ctx.at(f"blocks.{layer}.mlp.hook_expert_weights", t)
        if chosen is None or weights is None:
            return None
        rows.append((t, [f"E{int(e)} {prob(w, 2)}" for e, w in zip(chosen, weights)]))
    tab = Table(box=None, show_header=True, pad_edge=False)
    tab.add_column(say("experts.token"))
    tab.add_column(say("experts.chosen"))
    for t, cells in rows:
        tab.add_row(f"{ctx.labels[t]} {ctx.text(ctx.ids[t])}", "  ".join(cells))
    return tab


@group()
def experts_of_layer(ctx: Ctx, layer: int):
    """The `layers` section's part for a mixture of experts (--full): which experts each token chose in `layer`."""
    cfg = ctx.cfg
    tab = expert_table(ctx, layer)
    if tab is None:
        return
    yield line((say("experts.layer", layer=str(layer)), "bold"),
               say("experts.layer_of", experts=count(cfg.n_experts, "expert"), k=str(cfg.experts_per_token)))
    yield indent(tab)


def routing_matrix(chosen: np.ndarray, weights: np.ndarray, n_experts: int) -> np.ndarray:  # [pos, k] ×2 → [pos, expert]
    """Each token's weight on each expert: its routing weight where it chose the expert, 0 elsewhere."""
    out = np.zeros((chosen.shape[0], n_experts))
    np.put_along_axis(out, np.asarray(chosen, dtype=np.int64), np.asarray(weights, dtype=np.float64), axis=-1)
    return out


def expert_grid(matrix: np.ndarray, labels: list[str], title: str, max_width: int = 80) -> Text:
    """Tokens down the side, the experts some token chose across: each cell the token's routing weight
    on that expert (the attention heatmap's digits and colors), · where it did not choose it."""
    from .heatmap import _style, glyph

    used = [int(e) for e in np.flatnonzero((matrix > 0).any(axis=0))]
    cw = max(3, max(len(f"E{e}") for e in used) + 1) if used else 3
    lw = max(len(s) for s in labels) + 1
    fit = max(1, (max_width - lw) // cw)
    shown = used[:fit]
    out = Text(no_wrap=True, overflow="crop")
    out.append(title, style="bold")
    if len(shown) < len(used):
        out.append(say("experts.grid_some", shown=str(len(shown)), used=str(len(used))), style="dim")
    out.append("\n" + " " * lw)
    for e in shown:
        out.append(f"E{e}".rjust(cw), style="bold")
    for q, lab in enumerate(labels):
        out.append("\n" + lab.rjust(lw - 1) + " ", style="bold")
        for e in shown:
            w = float(matrix[q, e])
            out.append("·".rjust(cw), style="dim") if w == 0 else out.append(glyph(w).rjust(cw), style=_style(w))
    return out


def expert_heatmaps(ctx: Ctx, layers) -> list:
    """The heatmap section's routing grids: tokens × experts for each layer that routed."""
    out = []
    for layer in layers:
        chosen = ctx.get(f"blocks.{layer}.mlp.hook_expert_indices")
        weights = ctx.get(f"blocks.{layer}.mlp.hook_expert_weights")
        if chosen is None or weights is None:
            continue
        matrix = routing_matrix(np.asarray(chosen), np.asarray(weights), ctx.cfg.mlp_of(layer).axes(ctx.cfg)["expert"][0])
        out.append(expert_grid(matrix, ctx.labels[: ctx.n], say("experts.grid", layer=str(layer)), ctx.width))
    if out:
        out.append(Text(say("experts.grid_legend"), style="dim"))
    return out


def experts_overview(ctx: Ctx, t: int) -> Table | None:
    """The `layers` section's routing of token t: its experts and their weights in every layer."""
    tab = Table(box=None, show_header=True, pad_edge=False)
    tab.add_column(say("experts.layer_col"))
    tab.add_column(say("experts.chosen"))
    routed = False
    for layer in range(ctx.cfg.n_layers):
        if not ctx.records(f"blocks.{layer}.mlp.hook_expert_indices"):  # a dense layer among the experts
            tab.add_row(str(layer), say("experts.dense"), style="dim")
            continue
        chosen = ctx.at(f"blocks.{layer}.mlp.hook_expert_indices", t)
        weights = ctx.at(f"blocks.{layer}.mlp.hook_expert_weights", t)
        if chosen is None or weights is None:
            continue
        tab.add_row(str(layer), "  ".join(f"E{int(e)} {prob(w, 2)}" for e, w in zip(chosen, weights)))
        routed = True
    return tab if routed else None
