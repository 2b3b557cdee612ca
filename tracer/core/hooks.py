"""Every name a run records, written once: its axes, the step of the walkthrough that shows it, and
whether it holds whole numbers (token ids, counts) rather than floats.

The decoder records the layers' names under `blocks.{l}.` (`LAYER`), the embedding's, the final
norm's, the sampler's, the predictions' and the logit lens's outside them (`TOP`), in TransformerLens's
axis order without the batch axis. This table is what a saved trace is checked against
(`shape`, in `trace`'s loading), what a scenario's `[[expect]]` may name besides the decoder's own
(`CHECKABLE`), and where the demo's screens and the page's steps put a stated value (`step_of`).
`tests/test_hook_names.py` runs every block switch and checks that each name recorded is here, with
these axes' sizes, and that every name here is recorded by some configuration.

Axes: `pos` the pass's new positions, `key` every position so far, `head` query heads, `kv`
key/value heads, `d_head`, `half` (d_head / 2: the rotation's pairs), `d_model`, `d_mlp`, `d_vocab`,
`one` (a length-1 axis: a norm's scale), `layers+1` (the lens's rows: each layer's input, then the
last layer's output), `lens` (the positions the logit lens covers); `q_rows` / `k_rows` are the
Q/K norm's rows (`[head]` per head, none when it normalizes a position's numbers whole) and
`q_width` / `k_width` the length it divides.

Steps (their page step and demo screen: `tracer/sections.py`): tokens, embed (the token's row of W_E), position (the position vector
added), rotation (rotary positions: the angles, Q and K turned), input (a layer's input: at layer 0, embedding + position), qkv, scores, softmax,
sum (the weighted sum of values), heads (concatenation, W_O, and a norm after the attention), mlp
(the residual, the second norm, the MLP), unembed (the final norm, W_U, the logits), sample
(temperature, top-k, top-p), chosen (the token drawn), positions (every position's prediction),
lens, loop (what every pass generated)."""

from __future__ import annotations

from dataclasses import dataclass

from ..sections import recorded_steps

STEPS = recorded_steps()  # what the page's steps and the demo's screens show (tracer/sections.py): a Hook's `step`


@dataclass(frozen=True)
class Hook:
    """One recorded name: its axes, its step, and what its numbers are."""

    axes: tuple[str, ...]
    step: str
    whole: bool = False  # whole numbers (counts, ranks, positions), not floats
    ids: bool = False  # token ids (whole numbers that must name a vocabulary token)


def _h(axes: str, step: str, whole: bool = False, ids: bool = False) -> Hook:
    return Hook(tuple(axes.split()), step, whole or ids, ids)


_NORM = {"hook_scale": "pos one", "hook_normalized": "pos d_model"}  # a norm over the model's width

TOP: dict[str, Hook] = {  # outside the layers, in the order a pass records them
    "hook_embed": _h("pos d_model", "embed"),
    "hook_pos_embed": _h("pos d_model", "position"),
    "rope.hook_angle": _h("pos half", "rotation"),  # position × θ_i, the same in every layer
    "rope.hook_angle_local": _h("pos half", "rotation"),  # with the sliding-window layers' base
    **{f"ln_final.{k}": _h(a, "unembed") for k, a in _NORM.items()},
    "unembed.hook_in": _h("pos d_model", "unembed"),
    "logits": _h("pos d_vocab", "unembed"),
    "sample.scaled": _h("d_vocab", "sample"),
    "sample.probs": _h("d_vocab", "sample"),
    "sample.kept_top_k": _h("", "sample", whole=True),
    "sample.kept_top_p": _h("", "sample", whole=True),
    "sample.final": _h("d_vocab", "sample"),
    "sample.uniform": _h("", "sample"),
    "sample.token": _h("", "chosen", ids=True),
    "predict.top_token": _h("pos", "positions", ids=True),
    "predict.top_prob": _h("pos", "positions"),
    "predict.next_token": _h("pos", "positions", ids=True),
    "predict.next_prob": _h("pos", "positions"),
    "loss.per_position": _h("pos", "positions"),
    "lens.positions": _h("lens", "lens", whole=True),
    "lens.top_token": _h("layers+1 lens", "lens", ids=True),
    "lens.top_prob": _h("layers+1 lens", "lens"),
    "lens.target": _h("lens", "lens", ids=True),
    "lens.target_prob": _h("layers+1 lens", "lens"),
    "lens.target_rank": _h("layers+1 lens", "lens", whole=True),
}

LAYER: dict[str, Hook] = {  # after `blocks.{l}.`, in the order a layer records them
    "hook_resid_pre": _h("pos d_model", "input"),
    **{f"ln1.{k}": _h(a, "qkv") for k, a in _NORM.items()},
    "attn.hook_q": _h("pos head d_head", "qkv"),
    "attn.hook_k": _h("pos kv d_head", "qkv"),
    "attn.hook_v": _h("pos kv d_head", "qkv"),
    **{f"attn.{m}_norm.{k}": _h(f"pos {m}_rows {a}", "qkv") for m in "qk"
       for k, a in (("hook_scale", "one"), ("hook_normalized", f"{m}_width"))},
    "attn.hook_rot_q": _h("pos head d_head", "rotation"),
    "attn.hook_rot_k": _h("pos kv d_head", "rotation"),
    "attn.hook_dots": _h("head pos key", "scores"),
    "attn.hook_attn_scores": _h("head pos key", "scores"),
    "attn.hook_pattern": _h("head pos key", "softmax"),
    "attn.hook_z": _h("pos head d_head", "sum"),
    "attn.hook_result": _h("pos head d_model", "heads"),
    **{f"ln1_post.{k}": _h(a, "heads") for k, a in _NORM.items()},
    "hook_attn_out": _h("pos d_model", "heads"),
    "hook_resid_mid": _h("pos d_model", "mlp"),
    **{f"ln2.{k}": _h(a, "mlp") for k, a in _NORM.items()},
    "mlp.hook_pre": _h("pos d_mlp", "mlp"),
    "mlp.hook_pre_linear": _h("pos d_mlp", "mlp"),
    "mlp.hook_post": _h("pos d_mlp", "mlp"),
    **{f"ln2_post.{k}": _h(a, "mlp") for k, a in _NORM.items()},
    "hook_mlp_out": _h("pos d_model", "mlp"),
    "hook_resid_post": _h("pos d_model", "mlp"),
}

NOT_RECORDED = {"tokens": "tokens", "generated": "loop"}  # names a scenario may check that are not hooks: step
CHECKABLE = tuple(n for n, h in TOP.items() if h.step in ("sample", "chosen"))  # a scenario's checks, beside the decoder's


def split(name: str) -> tuple[int | None, str]:
    """(layer, leaf) of a recorded name: (3, 'attn.hook_z') of 'blocks.3.attn.hook_z', (None, name) outside."""
    if name.startswith("blocks."):
        layer, _, leaf = name[len("blocks."):].partition(".")
        if layer.isascii() and layer.isdigit() and len(layer) <= 9 and leaf:  # a hostile file's 5,000 digits: no int
            return int(layer), leaf
    return None, name


def find(name: str) -> Hook | None:
    """The table's entry for a recorded name (`blocks.{l}.…` or outside the layers), or None."""
    layer, leaf = split(name)
    return (TOP if layer is None else LAYER).get(leaf)


def step_of(name: str) -> str | None:
    """The step that shows `name` (one of STEPS), or None for a name the table does not know."""
    hook = find(name)
    return hook.step if hook is not None else NOT_RECORDED.get(name)


def sizes(cfg, n_new: int, n_keys: int, n_lens: int | None = None) -> dict[str, tuple[int, ...]]:
    """Each axis's length (a tuple: the Q/K norm's rows are zero or one axes) for a pass of `n_new`
    positions over `n_keys` keys, the logit lens over `n_lens`."""
    dh, qk = cfg.d_head, cfg.qk_norm_kind
    out = {"pos": (n_new,), "key": (n_keys,), "head": (cfg.n_heads,), "kv": (cfg.kv_heads,), "d_head": (dh,),
           "half": (dh // 2,), "d_model": (cfg.d_model,), "d_mlp": (cfg.d_mlp,), "d_vocab": (cfg.d_vocab,),
           "one": (1,), "layers+1": (cfg.n_layers + 1,), "lens": () if n_lens is None else (n_lens,)}
    for m, heads in (("q", cfg.n_heads), ("k", cfg.kv_heads)):
        out[f"{m}_rows"] = (heads,) if qk.per_head else ()
        out[f"{m}_width"] = (qk.width(heads, dh),)
    return out


def shape(name: str, cfg, n_new: int, n_keys: int, n_lens: int | None = None) -> tuple[int, ...] | None:
    """The shape a pass records under `name` (see `sizes`), or None for names the table does not know
    (and for the lens's names when `n_lens` is not known)."""
    hook = find(name)
    if hook is None or ("lens" in hook.axes and n_lens is None):
        return None
    each = sizes(cfg, n_new, n_keys, n_lens)
    return tuple(n for axis in hook.axes for n in each[axis])


def axis_of(name: str, *axes: str) -> int | None:
    """Where the first of `axes` is among `name`'s axes (the index of a check's position or head), or None."""
    hook = find(name)
    if hook is None:
        return None
    return next((hook.axes.index(a) for a in axes if a in hook.axes), None)
