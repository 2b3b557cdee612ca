"""Expanding a lazily read checkpoint to the weights the decoder reads: once, whole, when it fits the
memory budget (today's speed: nothing is expanded again); else layer by layer (`tracer.core.streamed`).

`expand(source, budget)` takes a `tracer.readers.source.Source` (duck-typed: its sizes, `expand_all`,
`layer(l)`, `top(...)`, `stored`) and gives (params, fused Q|K|V list, Weights or None, a summary
for the trace's meta). A budget smaller than one layer needs is refused, before any pass, with the
numbers. The unembedding is expanded beside the layers when it fits with one layer, else applied
in row blocks; the embedding of a streamed model is read a row per token. Core module: numpy only.
"""

from __future__ import annotations

from ..errors import TracerError, ValueRefused
from .fast import layout_layer, layout_top
from . import memory
from .memory import gb
from .params import param_shapes
from .streamed import Layers, Params, RowLookup, StreamedUnembed, StreamedW


def expand(source, budget: int | None = None):
    """(params, fused, weights, summary): see the module docstring."""
    cfg = source.cfg
    chosen = budget is not None
    room = memory.memory_room()
    budget = min(int(budget), room) if chosen else memory.default_budget()
    total = source.total_bytes()
    if total <= budget:
        params, fused = source.expand_all()
        return params, fused, None, source.summary(False, budget)
    source.lazy_experts = bool(getattr(source, "stacks", None))  # a mixture of experts: each expert when routed to
    per = source.max_layer_bytes(streamed=True)
    if per > budget:
        if per > room:
            raise TracerError(f"{source.where}: one layer needs {gb(per)} expanded to float32 ({source.describe()} in the "
                              f"file), more than this process can take {gb(room)} (the whole model needs {gb(total)})")
        said = f"a memory budget of {gb(budget)}" if chosen else \
            f"the default memory budget of {gb(budget)} (half the memory available)"
        raise ValueRefused(f"{said} is below one layer's {gb(per)} expanded to float32 ({source.where}: "
                           f"{source.describe()} in the file; the whole model needs {gb(total)}); {gb(per)} or more "
                           f"runs it layer by layer", "memory")
    return streamed_weights(source, cfg, budget, per)


def streamed_weights(source, cfg, budget: int, per: int):
    """The weights of a model expanded layer by layer within `budget` bytes (`per`: one layer's)."""
    unembed_fits = source.unembed_bytes() + per <= budget
    tied = cfg.tied_unembed
    whole = {"W_U"} if unembed_fits and not tied else ({"W_E"} if unembed_fits else set())  # expanded once
    top = source.top(whole)
    room = budget - (source.unembed_bytes() if unembed_fits else 0)
    ahead = getattr(source, "prefetch", None)

    def prefetch(l: int) -> int:  # layer l's file bytes read ahead; after the last layer, the unembedding's only
        return ahead(l) if l < cfg.n_layers or not unembed_fits else 0  # when a pass reads it (in row blocks)

    layers = Layers(cfg.n_layers, lambda l: _build(source, cfg, l), room, per, source.param,
                    prefetch if ahead is not None else None)
    embed_stored = source.stored[source.embed_name]
    W_E = top["W_E"] if "W_E" in top else RowLookup(embed_stored)
    if unembed_fits:
        W_U = top["W_E"].T if tied else top["W_U"]
        weights = layout_top(cfg, {**top, "W_E": W_E}, layers, W_U)
    else:
        rows = source.stored[source.embed_name if tied else source.unembed_name]
        weights = layout_top(cfg, {**top, "W_E": W_E}, layers, None, StreamedUnembed(StreamedW(rows), top["b_U"]))
    names = [n for n in param_shapes(cfg) if n in top or n.startswith("blocks.") or n in ("W_E", "W_U")]
    lazy_big = {"W_E": embed_stored.expand}
    if not tied and source.unembed_name is not None:
        lazy_big["W_U"] = lambda: source.stored[source.unembed_name].expand().T
    params = Params(top, layers, names, lazy_big)
    summary = source.summary(True, budget)
    summary["unembedding"] = "expanded" if unembed_fits else "row blocks"
    return params, None, weights, summary


def _build(source, cfg, l: int):
    """Layer l expanded and laid out for the products: (Layer, its parameters)."""
    params, fused = source.layer(l)
    return layout_layer(cfg, params, l, fused), params
