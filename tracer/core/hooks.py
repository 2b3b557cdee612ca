"""Every name a run records, written once: its axes, the step of the walkthrough that shows it,
whether it holds whole numbers (token ids, counts) rather than floats, and whether it holds −∞ by
design (`masked`: the attention scores, where the causal mask or a sliding window hides a key; a hook
may return −∞ there, and only there).

The decoder records the layers' names under `blocks.{l}.` (`LAYER`: the block's own names around the
names each sublayer kind declares, entered by `tracer.core.blocks.register`), the embedding's, the final
norm's, the sampler's, the predictions' and the logit lens's outside them (`TOP`), in TransformerLens's
axis order without the batch axis. This table is what a saved trace is checked against
(`shape`, in `trace`'s loading), what a scenario's `[[expect]]` may name besides the decoder's own
(`CHECKABLE`), and where the demo's screens and the page's steps put a stated value (`step_of`).
`tests/test_hook_names.py` runs every block switch and checks that each name recorded is here, with
these axes' sizes, and that every name here is recorded by some configuration.

Axes: `pos` the pass's new positions, `key` every position so far, `head` query heads, `kv`
key/value heads, `d_head`, `half` (d_head / 2: the rotation's pairs; `half_local` on the sliding-window
layers), `d_model`, `d_mlp`, `d_vocab`, `layer` and `d_ple` (Gemma 4's per-layer inputs: one row per layer),
`one` (a length-1 axis: a norm's scale), `layers+1` (the lens's rows: each layer's input, then the
last layer's output), `lens` (the positions the logit lens covers), `cand` (a beam's continuations: K, the
search's, not the config's), `drafted` (a verifying pass's drafted tokens); `q_rows` / `k_rows` are the
Q/K norm's rows (`[head]` per head, none when it normalizes a position's numbers whole) and
`q_width` / `k_width` the length it divides; a sublayer kind may add axes of its own (`Sublayer.axes`:
the experts of a routed MLP, …).

Steps (their page step and demo screen: `tracer/sections.py`): tokens, embed (the token's row of W_E), position (the position vector
added), rotation (rotary positions: the angles, Q and K turned), input (a layer's input: at layer 0, embedding + position), qkv, scores, softmax,
sum (the weighted sum of values), heads (concatenation, W_O, and a norm after the attention), mlp
(the residual, the second norm, the MLP), unembed (the final norm, W_U, the logits), sample
(penalties, temperature, top-k, top-p, min-p), chosen (the token drawn), positions (every position's prediction),
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
    masked: bool = False  # −∞ where the causal mask (or a sliding window) hides a key: a hook may return it there
    excludes: bool = False  # −∞ anywhere removes that entry (a router's score: the expert is never chosen)


def h(axes: str, step: str, whole: bool = False, ids: bool = False, masked: bool = False, excludes: bool = False) -> Hook:
    """A Hook from its axes written as one string (`"pos head d_head"`)."""
    return Hook(tuple(axes.split()), step, whole or ids, ids, masked, excludes)


_NORM = {"hook_scale": "pos one", "hook_normalized": "pos d_model"}  # a norm over the model's width

TOP: dict[str, Hook] = {  # outside the layers, in the order a pass records them
    "hook_embed": h("pos d_model", "embed"),
    "hook_pos_embed": h("pos d_model", "position"),
    "ple.hook_token": h("layer pos d_ple", "embed"),  # per-layer inputs (Gemma 4, `tracer.core.per_layer_input`)
    "ple.hook_proj": h("layer pos d_ple", "embed"),
    "ple.norm.hook_scale": h("layer pos one", "embed"),
    "ple.norm.hook_normalized": h("layer pos d_ple", "embed"),
    "hook_per_layer_inputs": h("layer pos d_ple", "embed"),
    "rope.hook_angle": h("pos half", "rotation"),  # position × θ_i, the same in every layer
    "rope.hook_angle_local": h("pos half_local", "rotation"),  # with the sliding-window layers' base (and width)
    **{f"ln_final.{k}": h(a, "unembed") for k, a in _NORM.items()},
    "unembed.hook_in": h("pos d_model", "unembed"),
    "logits": h("pos d_vocab", "unembed"),
    "verify.drafted": h("drafted", "verify", ids=True),  # speculative decoding's verifying pass: the draft's tokens,
    "verify.predicted": h("drafted+1", "verify", ids=True),  # the model's own choice at each position,
    "verify.target_prob": h("drafted", "verify"),  # p and q of each drafted token,
    "verify.draft_prob": h("drafted", "verify"),
    "verify.uniform": h("drafted", "verify"),  # the accept draws (NaN: none drawn),
    "verify.accepted": h("", "verify", whole=True),  # and how many were accepted (tracer.run.speculative)
    "sample.counts": h("d_vocab", "sample", whole=True),  # each token's count in the penalties' window
    "sample.penalized": h("d_vocab", "sample"),  # the logits after the repetition, presence and frequency penalties
    "sample.scaled": h("d_vocab", "sample"),
    "sample.probs": h("d_vocab", "sample"),
    "sample.kept_top_k": h("", "sample", whole=True),
    "sample.kept_top_p": h("", "sample", whole=True),
    "sample.kept_min_p": h("", "sample", whole=True),
    "sample.final": h("d_vocab", "sample"),
    "sample.uniform": h("", "sample"),
    "sample.token": h("", "chosen", ids=True),
    "predict.top_token": h("pos", "positions", ids=True),
    "predict.top_prob": h("pos", "positions"),
    "predict.next_token": h("pos", "positions", ids=True),
    "predict.next_prob": h("pos", "positions"),
    "loss.per_position": h("pos", "positions"),
    "lens.positions": h("lens", "lens", whole=True),
    "lens.top_token": h("layers+1 lens", "lens", ids=True),
    "lens.top_prob": h("layers+1 lens", "lens"),
    "lens.target": h("lens", "lens", ids=True),
    "lens.target_prob": h("layers+1 lens", "lens"),
    "lens.target_rank": h("layers+1 lens", "lens", whole=True),
    "beam.score": h("", "beams"),  # beam search (tracer.run.beams): the summed log-probability the beam carried in
    "beam.tokens": h("cand", "beams", ids=True),  # its K best continuations
    "beam.totals": h("cand", "beams"),  # their summed log-probabilities
    "beam.fate": h("cand", "beams", whole=True),  # 0 pruned, 1 a beam goes on with it, 2 it ended a finished sequence
}

# A layer's names (after `blocks.{l}.`), in the order a layer records them: the block's own (the residual
# stream, the norms around each sublayer, what each sublayer adds) around the names of the sublayers'
# kinds, which each block entry declares (`tracer.core.sublayer.Sublayer.hooks`) and
# `tracer.core.blocks.register` enters here (`register`): the table is complete once the block table
# is imported, as it is wherever a `Config` exists.
AROUND_ATTENTION = {"hook_resid_pre": h("pos d_model", "input"), **{f"ln1.{k}": h(a, "qkv") for k, a in _NORM.items()}}
AFTER_ATTENTION = {**{f"ln1_post.{k}": h(a, "heads") for k, a in _NORM.items()}, "hook_attn_out": h("pos d_model", "heads"),
                   "hook_resid_mid": h("pos d_model", "mlp"), **{f"ln2.{k}": h(a, "mlp") for k, a in _NORM.items()}}
AFTER_MLP = {**{f"ln2_post.{k}": h(a, "mlp") for k, a in _NORM.items()}, "hook_mlp_out": h("pos d_model", "mlp"),
             "hook_resid_ple": h("pos d_model", "mlp")}  # the stream a per-layer input is added to (Gemma 4)
AT_THE_END = {"hook_ple_out": h("pos d_model", "mlp"),  # what the per-layer input adds
              "hook_resid_unscaled": h("pos d_model", "mlp"),  # before the layer's own scalar (Gemma 4)
              "hook_resid_post": h("pos d_model", "mlp")}
SUBLAYERS: dict[str, dict[str, Hook]] = {"attn": {}, "mlp": {}, "ple": {}}  # scope → every registered kind's names, in order
LAYER: dict[str, Hook] = {}  # rebuilt by `register`, in place (modules hold it)


def _merged(names: list[str], new: list[str]) -> list[str]:
    """`names` with the names of `new` it lacks, each placed after the name `new` has before it (so
    that both orders hold: a kind that adds a name between two others finds it there)."""
    out = list(names)
    for i, name in enumerate(new):
        if name in out:
            continue
        before = next((new[j] for j in range(i - 1, -1, -1) if new[j] in out), None)
        out.insert(out.index(before) + 1 if before is not None else 0, name)
    return out


def register(scope: str, names: dict[str, Hook]) -> None:
    """Enter a sublayer kind's names (within `scope`, in its recording order) into LAYER. A name two
    kinds share is the same step of the walkthrough; its axes may differ (linear attention's hook_q is
    per key head, softmax attention's per query head): `find` given a config reads the layer's kind's."""
    table = SUBLAYERS[scope]
    for name, hook in names.items():
        if name in table and (table[name].step, table[name].whole, table[name].ids) != (hook.step, hook.whole, hook.ids):
            raise ValueError(f"{scope}.{name} is declared twice with different steps or kinds of number")
    order = _merged(list(table), list(names))
    merged = {n: table.get(n) or names[n] for n in order}
    table.clear()
    table.update(merged)
    LAYER.clear()
    LAYER.update({**AROUND_ATTENTION, **{f"attn.{n}": v for n, v in SUBLAYERS["attn"].items()}, **AFTER_ATTENTION,
                  **{f"mlp.{n}": v for n, v in SUBLAYERS["mlp"].items()}, **AFTER_MLP,
                  **{f"ple.{n}": v for n, v in SUBLAYERS["ple"].items()}, **AT_THE_END})


NOT_RECORDED = {"tokens": "tokens", "generated": "loop"}  # names a scenario may check that are not hooks: step
CHECKABLE = tuple(n for n, h in TOP.items() if h.step in ("sample", "chosen"))  # a scenario's checks, beside the decoder's


def split(name: str) -> tuple[int | None, str]:
    """(layer, leaf) of a recorded name: (3, 'attn.hook_z') of 'blocks.3.attn.hook_z', (None, name) outside."""
    if name.startswith("blocks."):
        layer, _, leaf = name[len("blocks."):].partition(".")
        if layer.isascii() and layer.isdigit() and len(layer) <= 9 and leaf:  # a hostile file's 5,000 digits: no int
            return int(layer), leaf
    return None, name


def find(name: str, cfg=None) -> Hook | None:
    """The table's entry for a recorded name (`blocks.{l}.…` or outside the layers), or None; given the
    config, a layer's name as that layer's sublayer kind declares it (its own axes)."""
    layer, leaf = split(name)
    if layer is None:
        return TOP.get(leaf)
    if cfg is not None and layer < cfg.n_layers:
        scope, _, own = leaf.partition(".")
        kind = cfg.kind_of(layer, scope) if scope in SUBLAYERS else None
        if kind is not None:
            return kind.hooks.get(own)
    return LAYER.get(leaf)


def step_of(name: str) -> str | None:
    """The step that shows `name` (one of STEPS), or None for a name the table does not know."""
    hook = find(name)
    return hook.step if hook is not None else NOT_RECORDED.get(name)


def sizes(cfg, n_new: int, n_keys: int, n_lens: int | None = None, layer: int | None = None,
          n_cand: int | None = None, n_drafted: int | None = None) -> dict[str, tuple[int, ...]]:
    """Each axis's length (a tuple: the Q/K norm's rows are zero or one axes) for a pass of `n_new`
    positions over `n_keys` keys, the logit lens over `n_lens`, a beam's `n_cand` continuations and a
    verifying pass's `n_drafted` tokens (when known)."""
    from .layer_sizes import rope_width

    model = cfg
    if layer is not None and 0 <= layer < cfg.n_layers:  # this layer's sizes (Gemma 4's layers differ)
        cfg = cfg.layer(layer)
    dh, qk = cfg.d_head, cfg.qk_norm_kind
    out = {"pos": (n_new,), "key": (n_keys,), "head": (cfg.n_heads,), "kv": (cfg.kv_heads,), "d_head": (dh,),
           "half": (rope_width(model, False) // 2,), "half_local": (rope_width(model, True) // 2,),
           "d_model": (cfg.d_model,), "d_mlp": (cfg.d_mlp,), "d_vocab": (cfg.d_vocab,),
           "one": (1,), "layers+1": (cfg.n_layers + 1,), "lens": () if n_lens is None else (n_lens,)}
    if n_cand is not None:
        out["cand"] = (n_cand,)
    if n_drafted is not None:
        out["drafted"], out["drafted+1"] = (n_drafted,), (n_drafted + 1,)
    for m, heads in (("q", cfg.n_heads), ("k", cfg.kv_heads)):
        out[f"{m}_rows"] = (heads,) if qk.per_head else ()
        out[f"{m}_width"] = (qk.width(heads, dh),)
    for kind in model.sublayer_kinds:  # a kind's own axes (experts, a state's width, …)
        out.update(kind.axes(cfg))
    if layer is not None and 0 <= layer < cfg.n_layers:  # this layer's kinds' sizes win (a dense MLP among experts)
        for kind in (cfg.attention_of(layer), cfg.mlp_of(layer)):
            if kind is not None:
                out.update(kind.axes(cfg))
    return out


def shape(name: str, cfg, n_new: int, n_keys: int, n_lens: int | None = None, n_cand: int | None = None,
          n_drafted: int | None = None) -> tuple[int, ...] | None:
    """The shape a pass records under `name` (see `sizes`), or None for names the table does not know
    (and for the lens's names when `n_lens` is not known, a beam's when `n_cand` is not, …)."""
    hook = find(name, cfg)
    if hook is None or ("lens" in hook.axes and n_lens is None):
        return None
    each = sizes(cfg, n_new, n_keys, n_lens, split(name)[0], n_cand, n_drafted)
    if any(axis not in each for axis in hook.axes):  # a length of the run not known here
        return None
    return tuple(n for axis in hook.axes for n in each[axis])


def axis_of(name: str, *axes: str) -> int | None:
    """Where the first of `axes` is among `name`'s axes (the index of a check's position or head), or None."""
    hook = find(name)
    if hook is None:
        return None
    return next((hook.axes.index(a) for a in axes if a in hook.axes), None)
