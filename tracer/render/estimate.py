"""How many lines the walkthrough will print, from the resolved view alone (before anything runs):
per section, from the tokens, heads and layers it shows (`Resolved`) and the model's sizes. Used to
refuse a view of minutes and megabytes before running it (--max-lines); what is printed is counted
again, exactly, before its first line (`render.show_generation`: that count decides the pager too).
The figures follow the renderers' layout: a line per equation (two when a vector does not fit beside
its name), a row per table entry, a sentence per note."""

from __future__ import annotations

import math

from .. import sections
from ..sections import estimates
from .header import block_words, head_roles_line, layer_kinds, training_line, weights_warning
from .storage import example_words, expansion_words, split_words, storage_words
from .text import BRIEF_CORNER, FULL_CORNER
from .words import say


def estimated_lines(r) -> int:
    """The walkthrough's lines for view `r` (a `view.Resolved`: each section that it shows)."""
    total = header_lines(r)
    for _, names in sections.numbered():
        if r.shows(*names):
            total += sections.drawn("lines", names[0])(r)
    return total + r.before + checks_lines(r)


def checks_lines(r) -> int:
    """A scenario's stated values, each a sentence beside its step (or a count, with --section), and
    the tally."""
    checks = r.view.checks
    if not checks and not r.stated:
        return 0
    if r.view.sections:
        return 4
    each = sum(wrapped(r, 100 + (60 if not c.ok else 0), 2) for c in checks) if checks else round(1.6 * r.stated)
    return 2 + each


def vector_chars(r, size: int) -> float:
    """The width of a printed vector of `size` numbers: '[a, b, …, y, z] (N dims, ‖·‖ x)'."""
    p, dims = r.view.precision, r.view.dims
    number = p + 2.5 + (1 if p == 0 else 0)  # -0.123 and 0.123 alike
    if size <= dims:
        return 2 + size * (number + 2) - 2
    return 2 + dims * (number + 2) + 1 + len(f" ({size:,} dims, ‖·‖ ") + number + 1


def eq_lines(r, desc: int, name: int, size: int, indent: int = 2) -> int:
    """`text.eq`: 'desc: name = [vector]' (`desc` and `name` characters long, a vector of `size`
    numbers) on one line when it fits, else the words, then the vector hanging below the name."""
    room = r.width - 2
    vec = vector_chars(r, size)
    if desc + 2 + name + 3 + vec <= min(room, r.width - indent):
        return 1
    words = math.ceil((desc + 1) / (r.width - indent)) if desc else 0
    return words + math.ceil(vec / max(room - (2 + name + 3) - indent + 2, 10))


def wrapped(r, chars: float, indent: int = 2) -> int:
    """A sentence of `chars` characters, wrapped to the width."""
    return max(1, math.ceil(chars / max(r.width - indent, 20)))


def header_lines(r) -> int:
    """`walkthrough.header`: the model and its block, the settings, how it was trained, stored and
    expanded, where the weights came from (a framed warning)."""
    cfg, meta = r.config, r.meta
    lines = wrapped(r, 95 + len(block_words(cfg)) + len(layer_kinds(cfg)), 0) + 1
    if isinstance(meta.get("training"), dict):
        lines += wrapped(r, len(training_line(meta["training"])), 0)
    stored = storage_words(meta)
    lines += wrapped(r, len(stored), 0) if stored else 0
    expanded = expansion_words(meta)  # how the weights became float32 (once, or layer by layer)
    lines += wrapped(r, len(expanded), 0) if expanded else 0
    lines += wrapped(r, 150, 0) if isinstance(meta.get("ablation"), dict) or meta.get("hooked") else 0
    warning = weights_warning(meta) if meta else None
    return lines + (wrapped(r, len(warning), 4) + 2 if warning else 0)


@estimates("tokens")
def tokens_lines(r) -> int:
    return r.n_prompt + 5 + wrapped(r, 215, 0)


def token_lines(r, t: int, layer: int, parts: frozenset) -> int:
    """`layer.token_at_layer`: token t through one layer (parts: "embed", its input to layer 0;
    "attention": the rest), line by line."""
    cfg, d = r.config, r.config.d_model
    lines = 1  # B:  ␣B  (position 1)
    if layer == 0 and "embed" in parts:
        if cfg.has_positions:
            lines += eq_lines(r, 60, 3, d) + eq_lines(r, 40, 3, d) + eq_lines(r, 31, 3, d)
        else:
            lines += eq_lines(r, 60, 3, d) + (1 if cfg.embed_scale else 0)  # E, then E is the input
            lines += eq_lines(r, len(cfg.position_kind.instead) + (16 if cfg.embed_scale else 0), 3, d)
    elif layer > 0:
        lines += eq_lines(r, 22, 3, d)
    if "attention" not in parts:
        return lines
    before = cfg.layer_norm and cfg.norm_place_kind.before
    lines += eq_lines(r, len(cfg.norm_kind.before_attention("x_B")), len(cfg.norm_kind.short) + 5, d) if before else 0
    lines += VIEW_LINES[cfg.attention_of(layer).shown_as](r, t, layer)  # the heads' scores, or a state
    return lines + after_lines(r, layer)


def heads_lines(r, t: int, layer: int) -> int:
    """`layer.heads_steps`: what the mask hides, RoPE's turn, each shown head."""
    cfg = r.config
    hidden = len(range(t + 1, r.n_all if t >= r.n_prompt else r.n_prompt))
    lines = wrapped(r, 62 + (55 if hidden else 40) + (60 if cfg.sliding_window else 0))  # what the mask hides
    lines += wrapped(r, 300 + (40 if cfg.rope_scaling else 0)) if cfg.position_kind.rotary else 0
    sinks = cfg.attention_of(layer).records(cfg, "hook_sink_share")
    lines += sum(head_lines(r, t, h, sinks) for h in r.shown_heads if h < cfg.n_heads)
    gated = cfg.attention_of(layer).records(cfg, "hook_z_gated")  # the output gate: two more vectors a head
    lines += sum(eq_lines(r, 75, 12, cfg.d_head) + eq_lines(r, 40, 12, cfg.d_head) for h in r.shown_heads) if gated else 0
    return lines + (1 if len(r.shown_heads) < cfg.n_heads else 0)


def state_lines(r, t: int, layer: int) -> int:
    """`linear.state_steps`: the projection, the convolution, each shown head's state update (brief: the
    first in full, the others a line each), and once a layer what it keeps."""
    cfg = r.config
    (kh, _, dk), (vh, _, dv), (conv, K) = (cfg.attention_of(layer).shapes(cfg, layer)[n] for n in ("W_K", "W_V", "W_conv"))
    inputs = min(t + 1, K) * eq_lines(r, 0, 14 if t >= r.n_prompt else 4, conv)  # this token's and the K − 1 before
    lines = wrapped(r, 230) + eq_lines(r, 95, 4, conv) + wrapped(r, 165) + inputs + (1 if t < K - 1 else 0)
    lines += eq_lines(r, 75, 7, conv) + wrapped(r, 175)
    heads = [h for h in r.shown_heads if h < vh]
    corner = BRIEF_CORNER if r.view.brief else FULL_CORNER
    matrix = 2 + min(dk, corner) + (1 if max(dk, dv) > corner else 0)
    whole = eq_lines(r, 0, 9, dk) * 2 + eq_lines(r, 0, 9, dv) + wrapped(r, 120) + wrapped(r, 75) + wrapped(r, 150)
    whole += (1 if t == 0 else matrix) + matrix + sum(eq_lines(r, w, 9, dv) for w in (45, 50, 60, 30, 65))
    whole += wrapped(r, 150)  # one number of the state worked by hand
    shown_whole = len(heads) if not r.view.brief or r.head_chosen else min(len(heads), 1)
    lines += shown_whole * whole + (len(heads) - shown_whole) * eq_lines(r, 90, 12, dv)
    lines += 1 if 0 < len(heads) < vh else 0
    return lines + (wrapped(r, 420) if r.tokens and t == r.tokens[0] else 0)


VIEW_LINES = {"heads": heads_lines, "state": state_lines}  # `Sublayer.shown_as` → its view's lines (`render.layer.VIEWS`)


def after_lines(r, layer: int = 0) -> int:
    """`layer.after_attention`: the heads concatenated, W_O, the residual, the MLP (or the routing of a
    mixture of experts), the layer's output."""
    cfg, d = r.config, r.config.d_model
    H, dh, _ = cfg.attention_of(layer).shapes(cfg, layer)["W_O"]  # the heads W_O merges, and their width
    lines = eq_lines(r, 55, 3, H * dh) if H > 1 else 0
    post = 2 if cfg.norm_place_kind.after else 1  # OLMo 2: the output before its norm, then the norm
    lines += post * eq_lines(r, 40, 10, d)
    if cfg.mlp:
        lines += eq_lines(r, 36, 16, d)
        lines += eq_lines(r, len(cfg.norm_kind.before_mlp()), 6, d) if cfg.layer_norm and cfg.norm_place_kind.before else 0
        kind = cfg.mlp_of(layer)
        routed = kind.records(cfg, "hook_router_logits")
        lines += routing_lines(r, kind) if routed else len(kind.steps) * eq_lines(r, 30, 4, cfg.d_mlp)
        lines += post * eq_lines(r, 52 if routed else 26, 9, d)
    return lines + eq_lines(r, 65, 5, d)


def routing_lines(r, kind) -> int:
    """`experts.routing`: the router's highest scores, the choice, each chosen expert's output, their weighted
    sum (and the shared expert's part), the experts not used."""
    cfg, d, p = r.config, r.config.d_model, r.view.precision
    k = cfg.experts_per_token
    lines = wrapped(r, 120 + min(cfg.n_experts, k + 4) * (p + 6)) + wrapped(r, len(kind.route_words(cfg)) + k * (p + 6))
    lines += eq_lines(r, 12 + len(kind.expert_words(cfg)), 12, d) + (k - 1) * eq_lines(r, 48, 12, d)
    lines += eq_lines(r, k * (p + 15) + 95, 6, d) + (eq_lines(r, 80, 10, d) if cfg.shared_d_mlp else 0)
    return lines + wrapped(r, 92)


def head_lines(r, t: int, h: int, sinks: bool = False) -> int:
    """`layer.head_at_token`: one head at token t, line by line: its heading, Q, K, V, the keys and
    values, the scores and their weights, the weighted sum."""
    cfg, brief, dh, p = r.config, r.view.brief, r.config.d_head, r.view.precision
    keys = t + 1
    group = cfg.n_heads // cfg.kv_heads
    gqa = cfg.kv_heads < cfg.n_heads
    shared = gqa and any(q < h and q // group == h // group for q in r.shown_heads)
    lines = wrapped(r, 190 if gqa else 60)
    lines += (1 if shared else 3) * eq_lines(r, 0, 28, dh) + (1 if shared else 0)
    rotated = (1 if shared else 2) if cfg.position_kind.rotary else 0
    normed = (1 if shared else 2) if cfg.qk_norm_kind.on else 0
    lines += rotated * eq_lines(r, 21, 4, dh) + normed * eq_lines(r, 70, 14, dh)
    if keys > 1 and not shared and (keys <= 8 or not brief):  # K and V, a row per key
        column = (r.width - 4 - 4 - 2) / 2
        lines += 1 + keys * math.ceil(vector_chars(r, dh) / column)
    elif keys > 8 and not shared:
        lines += 1
    rows = min(keys, 8) if brief else keys
    lines += wrapped(r, 90) + 1 + rows + (1 if rows < keys else 0) + 1  # the sentence, the header, rows, … more, sum
    if keys <= 8:
        lines += wrapped(r, 14 + 2 * keys * (p + 4.5) + (46 if sinks else 0))  # softmax([…]) = […] (and the sink's)
    lines += wrapped(r, 170) if sinks else 0  # what the sink took
    terms = rows * (p + 9) + (60 if rows < keys else 0) + 38
    vec = vector_chars(r, dh)
    if terms + 3 + vec <= r.width - 4:
        return lines + 1
    return lines + math.ceil(terms / (r.width - 2)) + math.ceil(vec / (r.width - 8))  # the weighted sum


@estimates("embed")  # and attention, which joins it
def layer_lines(r) -> int:
    """Section 2: the first layer's input (embed) or each --layer layer token by token (attention)."""
    parts = frozenset(s for s in ("embed", "attention") if r.shows(s))
    layers = r.layers if "attention" in parts else [0] if r.config.n_layers else []
    total = 0
    for layer in layers:
        total += 1 + (wrapped(r, 170, 0) if layer > 0 else 0)  # the heading, what a later layer starts from
        if "attention" in parts and r.tokens and r.shown_heads:  # once a layer: how W_Q is stored
            total += sum(wrapped(r, len(w), 6) for w in example_words(r.meta, f"blocks.{layer}.attn.W_Q", "W_Q of layer 0"))
        if "attention" in parts and r.tokens and r.config.mlp:  # once a layer: where a fused gate_up was split
            total += sum(wrapped(r, len(w), 4) for w in split_words(r.meta, f"blocks.{layer}.mlp.W_gate"))
        total += sum(token_lines(r, t, layer, parts) for t in r.tokens)
        total += sum(1 for a, b in zip(r.tokens, r.tokens[1:]) if b - a > 1)  # "C, D: the same steps…"
    return total


@estimates("layers")
def layers_lines(r) -> int:
    cfg, brief = r.config, r.view.brief
    table = cfg.n_layers + 4
    full = 0 if brief else cfg.n_layers * (r.n_prompt + 5)
    states = wrapped(r, 130, 0) if _state_layers(cfg) else 0  # what a linear layer's cells are
    routed = cfg.n_layers + 2 if cfg.n_experts and cfg.mlp else 0  # a mixture of experts: the token's experts, layer by layer
    if routed and not brief:  # and (--full) each routed layer's table: its heading, the header, a row per token
        routed += sum(r.n_prompt + 2 for l in range(cfg.n_layers) if cfg.mlp_of(l).records(cfg, "hook_router_logits"))
    return wrapped(r, 220, 0) + table + 1 + full + states + routed


def _state_layers(cfg) -> list[int]:
    """The layers shown by their state (linear attention), not by attention weights."""
    return [l for l in range(cfg.n_layers) if cfg.attention_of(l).shown_as == "state"]


@estimates("predict")
def predict_lines(r) -> int:
    return 16 + r.view.top_k + (4 if r.config.layer_norm else 0)


@estimates("positions")
def positions_lines(r) -> int:
    rows = r.n_prompt if not r.view.brief or r.n_prompt <= 16 else 17
    return rows + 13 + wrapped(r, len(say("positions.last", L="A")), 0)  # the last note: which rows a step computes


@estimates("heatmap")
def heatmap_lines(r) -> int:
    n, width = r.n_prompt, r.width
    label = 1 if n <= 26 else 2  # A … Z, then AA …
    cell, side = max(2, label + 1), label + 1
    shown = min(n, max(1, (width - side) // cell))
    one = side + shown * cell  # a grid's width
    heads = [h for h in r.shown_heads if h < r.config.n_heads]
    per_row = max(1, min(len(heads), (width + 3) // (one + 3)))
    rows = -(-len(heads) // per_row)
    per_layer = rows * (shown + 2) + 1
    roles = head_roles_line(r.meta.get("training"))
    cfg = r.config
    states = [l for l in r.heatmaps if l in _state_layers(cfg)]  # a note and a grid of the state's gates
    state = wrapped(r, 200, 0) + wrapped(r, 110, 0) + 1 + r.n_prompt + wrapped(r, 190, 0)
    routed = [l for l in r.heatmaps if cfg.mlp and cfg.mlp_of(l).records(cfg, "hook_router_logits")]
    experts = len(routed) * (n + 2) + (wrapped(r, 130, 0) if routed else 0)  # tokens × experts, a grid per layer
    experts += 1 if any(cfg.attention_of(l).records(cfg, "hook_sink_share") for l in r.heatmaps) else 0  # rows sum to < 1
    return (3 + (len(r.heatmaps) - len(states)) * per_layer + len(states) * state
            + (1 if len(r.shown_heads) < cfg.n_heads else 0) + (wrapped(r, len(roles), 0) if roles else 0) + experts)


@estimates("loop")
def loop_lines(r) -> int:
    steps = max(r.n_all - r.n_prompt + 1, 1)
    lines = steps * (5 + (0 if r.view.brief else r.config.n_layers + 2)) + steps + 16
    if not _state_layers(r.config):
        return lines
    kinds = len({r.config.attention_of(l) for l in range(r.config.n_layers)})  # a hybrid: its notes, a row per kind
    return lines + wrapped(r, 300, 0) + wrapped(r, 110, 0) + 6 + (2 if r.width < 100 else 1) * kinds


@estimates("lens")
def lens_lines(r) -> int:
    return r.config.n_layers + 12

