"""One table of block switches: each norm, sublayer kind (attention, MLP) and positional scheme a
config may name is an entry holding its forward and backward functions, its parameters' shapes,
what the fast layout and the store need of it, the hooks it records and the words that describe it.
A sublayer kind owns its whole sublayer (`tracer.core.sublayer.Sublayer`: softmax attention in
`tracer.core.attention`, the dense MLPs in `tracer.core.mlps`) and is entered with `register`.

`Config` keeps the switches as strings (saved traces and config files hold them) and gives the
entries: `cfg.norm_kind` (`NORMS[cfg.norm]`), `cfg.attention_of(l)` (`ATTENTIONS[cfg.attention]`),
`cfg.mlp_of(l)` / `cfg.mlp_kind` (`MLPS[cfg.mlp]`, None without an MLP), `cfg.position_kind`
(`POSITIONS[cfg.positional]`). `decoder`, `backward`, `params`, `fast`, `store`
and the renderers read the entry instead of comparing the strings; a new family's norm (Gemma's
`(1 + w)` gain), MLP (GeGLU) or positions (local/global rotary) is a new entry, not a new branch in
each of them. TransformerLens picks its components from the config in `transformer_block.py`; here
the choice is this one table. The forward halves are `tracer.core.equations`', the backward halves
`tracer.core.derivatives`'. Core module: imports numpy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from . import hooks
from .attention import GATED, SINKS, SOFTMAX
from .derivatives import (d_normalize, d_one_plus_gain, d_position_vectors, d_rms_normalize, d_rotate, d_scale_and_shift,
                          d_softcap)
from .equations import (normalize, one_plus_gain, position_vectors, rms_normalize, rotate, scale_and_shift,
                        sinusoidal_positions, softcap)
from .experts import EXPERTS
from .gemma4_attention import GEMMA4
from .gemma4_moe import GEMMA4_MOE
from .linear_attention import LINEAR
from .mlps import DENSE_AMONG_EXPERTS, GEGLU, GELU, SWIGLU  # noqa: F401 (DENSE_AMONG_EXPERTS: Config.mlp_of)
from .per_layer_input import PER_LAYER_INPUT
from .sublayer import Sublayer

# --------------------------------------------------------------------------- norms


@dataclass(frozen=True)
class Norm:
    """A norm: `forward(x, eps)` → (normalized, scale), recorded as `hook_normalized` and `hook_scale`;
    then `gain(normalized, w, b)` (b None without a bias). `backward(dn, normalized, scale)` → dx and
    `d_gain(dy, normalized, w)` → (dn, dw, db) undo them."""

    key: str  # the config's `norm`
    forward: Callable
    backward: Callable
    params: tuple[str, ...]  # each a [d_model] vector, named `{norm}.{param}`: the gain w (and the bias b)
    title: str  # "layer norm"
    short: str  # the name in LN(x)
    formula: str  # what `forward` computes, of {x}
    detail: str  # said once, where the first norm is shown
    plain: str  # the demo's words, where the norm is met first
    plain_final: str  # the demo's words for the final norm, before W_U
    gain: Callable = scale_and_shift
    d_gain: Callable = d_scale_and_shift
    hooks: tuple[str, ...] = ("hook_scale", "hook_normalized")
    gain_form: str = "× {name}.w"  # how the gain is written, of {name} (Gemma's: × (1 + {name}.w))

    @property
    def bias(self) -> bool:
        return "b" in self.params

    def shapes(self, d_model: int) -> dict[str, tuple[int, ...]]:
        return {p: (d_model,) for p in self.params}

    def gain_words(self, name: str) -> str:
        """× ln1.w + ln1.b, or × ln1.w for a norm without bias."""
        return f"× {name}.w + {name}.b" if self.bias else self.gain_form.format(name=name)

    def before_attention(self, x: str) -> str:
        """The sentence for ln1, where the norm is met first (x: the input's name, as x_A)."""
        return (f"{self.title}: {self.formula.format(x=x)}{self.detail}; then ln1({x}) = {self.short}({x}) "
                f"{self.gain_words('ln1')}{'' if self.bias else ' (no bias)'} meets W_Q, W_K, W_V")

    def before_mlp(self) -> str:
        return f"{self.title}: {self.formula.format(x='x')}, later {self.gain_words('ln2')}, before the MLP"

    def final(self) -> str:
        return f"final {self.title}: {self.formula.format(x='x')}, later {self.gain_words('ln_final')}"

    def after_final(self) -> str:
        return f"after the final {self.title}: {self.formula.format(x='x')} {self.gain_words('ln_final')}"


NORMS: dict[str, Norm] = {n.key: n for n in (
    Norm("layer", normalize, d_normalize, ("w", "b"), "layer norm", "LN", "({x} − mean) ÷ std", "",
         "GPT-2 first layer-normalizes x: it rescales each token's numbers to mean 0 and spread 1.",
         "GPT-2 layer-normalizes it first."),
    Norm("rms", rms_normalize, d_rms_normalize, ("w",), "RMS norm", "RMS", "{x} ÷ √(mean({x}²) + ε)",
         ", no mean subtracted",
         "First x is normalized: GPT-2's layer norm rescales each token's numbers to mean 0 and spread 1; "
         "this model's RMS norm only divides them by their root mean square.",
         "This model first divides it by its root mean square: the final RMS norm."),
    Norm("gemma_rms", rms_normalize, d_rms_normalize, ("w",), "RMS norm with (1 + w) gain", "RMS",
         "{x} ÷ √(mean({x}²) + ε)", ", no mean subtracted; Gemma's RMS norm multiplies by (1 + w), its weights stored as "
         "the gain minus 1",
         "First x is normalized: GPT-2's layer norm rescales each token's numbers to mean 0 and spread 1; "
         "this model's RMS norm only divides them by their root mean square (and multiplies by 1 + w).",
         "This model first divides it by its root mean square: the final RMS norm, times (1 + w).",
         gain=one_plus_gain, d_gain=d_one_plus_gain, gain_form="× (1 + w), w = {name}.w"),
)}

# --------------------------------------------------------------------------- sublayers: attention and MLP kinds

ATTENTIONS: dict[str, Sublayer] = {}  # the config's `attention` → the kind (`tracer.core.attention`, …)
MLPS: dict[str, Sublayer] = {}  # the config's `mlp` → the kind (`tracer.core.mlps`, `tracer.core.experts`)
PLES: dict[str, Sublayer] = {}  # a third sublayer after the MLP: per-layer inputs (`Config.ple_kind`, when `d_ple` is set)
TABLES = {"attn": ATTENTIONS, "mlp": MLPS, "ple": PLES}


def register(kind: Sublayer) -> Sublayer:
    """Enter a sublayer kind in its scope's table and its recorded names in the hook table
    (`tracer.core.hooks.register`). A new kind — from a module of tracer or from a test — is one call."""
    table = TABLES[kind.scope]
    if kind.key in table and table[kind.key] is not kind:
        raise ValueError(f"a {kind.scope} kind {kind.key!r} is registered already")
    hooks.register(kind.scope, kind.hooks)
    table[kind.key] = kind
    return kind


def unregister(kind: Sublayer) -> None:
    """Take a kind out of its table and its names out of the hook table (a test's toy, when its test is done)."""
    table = TABLES[kind.scope]
    if table.get(kind.key) is kind:
        del table[kind.key]
    hooks.SUBLAYERS[kind.scope].clear()
    for other in list(table.values()):
        hooks.register(other.scope, other.hooks)


for _kind in (SOFTMAX, SINKS, GATED, LINEAR, GEMMA4, GELU, SWIGLU, GEGLU, EXPERTS, GEMMA4_MOE, PER_LAYER_INPUT):
    register(_kind)
DEFAULT_MLP = "gelu"  # what `mlp = true` means (GPT-2's)
DEFAULT_ATTENTION = "softmax"


def mlp_key(value):
    """The config's `mlp` as a key of MLPS, or False: true is GPT-2's MLP, "none" and false none."""
    if value is True:
        return DEFAULT_MLP
    if value is False or value == "none":
        return False
    return value

# --------------------------------------------------------------------------- positions


@dataclass(frozen=True)
class Positions:
    """How a token's position enters. Added vectors (`adds`): `forward(W_pos, start, n)` → the rows
    added to the embeddings, `backward(dx, W_pos, start)` → W_pos's gradient. Rotary (`rotary`):
    `forward(x, cos, sin)` turns Q and K, `backward(dout, cos, sin)` turns their gradients back.
    None: nothing is added and nothing turns."""

    key: str  # the config's `positional`
    forward: Callable | None
    backward: Callable | None
    adds: bool = False  # a W_pos row is added to each embedding
    rotary: bool = False  # Q and K are rotated by position (the fast layout's RoPE frequencies)
    computed: Callable | None = None  # W_pos computed from its shape, never given
    title: str = ""  # the model line's words
    short: str = ""  # the kind of W_pos row
    plain: str = ""  # the demo's words
    instead: str = ""  # without a W_pos row: what layer 0's input is, of {L} (the token's label)
    source: str = "embedding + position"  # the page's words for layer 0's input

    @property
    def meets(self) -> tuple[str, str]:
        """The names (within a block) of the Q and K that meet in Q·K: the rotated ones under rotary positions."""
        return ("attn.hook_rot_q", "attn.hook_rot_k") if self.rotary else ("attn.hook_q", "attn.hook_k")

    @property
    def hooks(self) -> tuple[str, ...]:
        if self.rotary:
            return ("rope.hook_angle", "attn.hook_rot_q", "attn.hook_rot_k")
        return ("hook_pos_embed",) if self.adds else ()

    def shapes(self, n_ctx: int, d_model: int) -> dict[str, tuple[int, ...]]:
        return {"W_pos": (n_ctx, d_model)} if self.adds else {}


def _added(key: str, title: str, short: str, plain: str, computed=None) -> Positions:
    return Positions(key, position_vectors, d_position_vectors, adds=True, computed=computed, title=title,
                     short=short, plain=plain)


POSITIONS: dict[str, Positions] = {p.key: p for p in (
    _added("learned", "learned positions", "learned",
           "GPT-2 learns one position vector per place (the matrix W_pos)."),
    _added("sinusoidal", "sin/cos positions", "sin/cos",
           "Here they are made of sines and cosines of the position (the original Transformer's recipe).",
           computed=sinusoidal_positions),
    _added("explicit", "given position vectors", "given",
           "Here they are given by hand, as the article's P1 = [0.1, 0.1, …]."),
    Positions("none", None, None, title="no position vectors", source="the embedding",
              instead="no position vectors (positional = none), so the input is E itself"),
    Positions("rope", rotate, d_rotate, rotary=True, title="rotary positions",
              source="the embedding; no position vector is added, Q and K are rotated by position",
              instead="no position vector is added (rotary positions): {L}'s query and key are rotated by its "
                      "position in every layer instead, so the input is E itself"),
)}

# --------------------------------------------------------------------------- Q/K norms


@dataclass(frozen=True)
class QkNorm:
    """A norm on the projections' Q and K, before the rotation (Qwen3: each head's d_head numbers;
    OLMo 2: all of a position's Q, or K, numbers at once): the config's norm (`Norm.forward`, then
    its gain), recorded as `attn.q_norm.hook_scale` / `hook_normalized` (and `k_norm`), with the
    gains `attn.q_norm.w` / `attn.k_norm.w`, as TransformerLens names them. `flat(x)` gives what
    the norm works on ([pos, head, d_head], or [pos, head·d_head]); its result is reshaped back."""

    key: str  # the config's `qk_norm`
    on: bool = False
    per_head: bool = True  # over each head's d_head numbers; False: over every head's numbers at once
    title: str = ""  # the model line's words
    words: str = ""  # what the walkthrough says, of {m} (Q or K), {scale} (its root mean square), {gain}

    @property
    def hooks(self) -> tuple[str, ...]:
        return tuple(f"attn.{m}_norm.{h}" for m in "qk" for h in ("hook_scale", "hook_normalized")) if self.on else ()

    def width(self, heads: int, d_head: int) -> int:
        """The length of the vector one norm divides: d_head, or every head's numbers."""
        return d_head if self.per_head else heads * d_head

    def shapes(self, norm: Norm, n_heads: int, kv_heads: int, d_head: int) -> dict[str, tuple[int, ...]]:
        """The parameters after `blocks.{l}.attn.`: the gain (and bias) of each of Q's and K's norms."""
        if not self.on:
            return {}
        return {f"{m}_norm.{p}": (self.width(heads, d_head),) for m, heads in (("q", n_heads), ("k", kv_heads))
                for p in norm.params}

    def flat(self, x):  # [..., heads, d_head] → [..., heads, d_head] or [..., heads·d_head]
        return x if self.per_head else x.reshape(*x.shape[:-2], -1)


QK_NORMS: dict[str, QkNorm] = {q.key: q for q in (
    QkNorm("none"),
    QkNorm("per_head", True, True, "Q and K normalized per head",
           "{m} is normalized per head before the rotation: each head's {m} ÷ its root mean square "
           "(here {scale}), then {gain} (Qwen3's and Gemma 3's Q/K norm)"),
    QkNorm("whole", True, False, "Q and K normalized whole",
           "{m} is normalized whole before it is cut into heads and rotated: all of this token's {m} numbers "
           "÷ their root mean square (here {scale}), then {gain} (OLMo 2's Q/K norm)"),
)}

# --------------------------------------------------------------------------- where the norms are


@dataclass(frozen=True)
class NormPlace:
    """Where a block's norms sit: before each sublayer (GPT-2, Llama: `ln1`, `ln2`), after it, on its
    output before the residual adds it (OLMo 2: `ln1_post`, `ln2_post`, TransformerLens's names), or
    both (Gemma 2 and 3). Each norm records `hook_scale` and `hook_normalized` under its name; the
    output norms come before `hook_attn_out` / `hook_mlp_out`, which are what the residual adds."""

    key: str  # the config's `norm_place`
    before: bool
    after: bool
    title: str = ""  # the model line's words ("" for norms before the sublayers only)
    words: str = ""  # what the walkthrough says at an output norm, of {out} (attn_out, mlp_out), {what}, {scale}, {gain}
    plain: str = ""  # the demo's words, where the norm before attention would be met

    def names(self, ln: str) -> tuple[str, ...]:
        """The norms around one sublayer, of its `ln1` / `ln2`, in the order they are applied."""
        return ((ln,) if self.before else ()) + ((ln + "_post",) if self.after else ())

    @property
    def per_sublayer(self) -> int:
        return int(self.before) + int(self.after)


NORM_PLACES: dict[str, NormPlace] = {n.key: n for n in (
    NormPlace("before", True, False),
    NormPlace("after", False, True, "norms after attention and the MLP, none before",
              "normalized after the {what}, not before (OLMo 2): {out} ÷ its root mean square (here {scale}), "
              "then {gain}, and only that is added to the residual stream",
              "This model does not normalize x first: OLMo 2 normalizes the outputs of attention and of the MLP "
              "instead (each divided by its root mean square), just before they are added back."),
    NormPlace("both", True, True, "a norm before and after attention and the MLP",
              "normalized again after the {what} (Gemma: a norm before and after each sublayer): {out} ÷ its root "
              "mean square (here {scale}), then {gain}, and only that is added to the residual stream"),
)}

# --------------------------------------------------------------------------- soft-capping


@dataclass(frozen=True)
class SoftCap:
    """Gemma 2's soft-cap of the attention scores (`Config.attn_softcap`: after the scale, before the
    mask and softmax; `hook_attn_scores` holds the capped scores, as TransformerLens records them) and
    of the final logits (`Config.final_softcap`: `logits` holds the capped ones). `forward(x, cap)` →
    cap · tanh(x / cap); `backward(dy, y, cap)` → dx from the capped y."""

    key: str
    forward: Callable
    backward: Callable
    title: str  # the model line's words, of {where}, {cap}
    formula: str  # of {cap}

    def template(self, what: str, cap: float) -> str:
        """"scores soft-capped: 50 · tanh(s / 50): {before} → {after}" (the page fills the two slots)."""
        return f"{what} soft-capped: {self.formula.format(cap=f'{cap:g}')}: {{before}} → {{after}}"

    def words(self, what: str, cap: float, before: float, after: float) -> str:
        """"scores soft-capped: 50 · tanh(s / 50): 3.217 → 3.213"."""
        return self.template(what, cap).format(before=f"{before:.3f}", after=f"{after:.3f}")


SOFTCAP = SoftCap("tanh", softcap, d_softcap, "{where} soft-capped at {cap} (Gemma 2)", "{cap} · tanh(s / {cap})")
