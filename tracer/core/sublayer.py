"""What a block entry is: a whole sublayer (an attention kind, an MLP kind), owning its forward pass,
its backward pass, its weights' layout, what it records (names with axes), how the store holds
those values, what a pass costs, and its cache — the interface every kind of `tracer.core.blocks`'
tables implements, and the norm that sits around every sublayer.

A layer reads like nanoGPT's block, whatever its kinds:

    x = x + attention(ln1(x))      # w.attn.kind.run(cfg, w.attn, ln1(x), rec.scope("attn"), span)
    x = x + mlp(ln2(x))            # w.mlp.kind.run(cfg, w.mlp, ln2(x), rec.scope("mlp"), span)
    x = x + per_layer_input(x)     # Gemma 4: w.ple.kind.run(cfg, w.ple, x, rec.scope("ple"), span)
    x = x · scalar                 # Gemma 4: each layer's own number

`cfg` is the layer's view (`cfg.layer(l)`: its own d_head, key/value heads and d_mlp where layers differ).

The decoder, the backward pass, the fast layout and the store call an entry's methods and never
name a kind (TransformerLens picks a component per sublayer, `components/mlps/moe.py`; llama.cpp
calls one `build_moe_ffn` from every MoE architecture; llm.c pairs `*_forward` with `*_backward`).
A new kind — attention with sinks, routed experts, linear attention with a recurrent state — is one
subclass registered with `tracer.core.blocks.register`. Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .hooks import Hook
from .record import NOTHING, Recorder


@dataclass
class Span:
    """What one pass computes at one layer: positions `start` … `start + n − 1` (earlier ones are in
    the cache), RoPE's (cos, sin) for them at this layer (None without rotary positions), this
    layer's cache (what the attention kind's `new_cache` made; None: no cache, every position is
    computed from scratch), the pass's board and the layer's own input, if the model gives one."""

    start: int
    n: int
    turn: tuple | None = None  # ([pos, d_head / 2], [pos, d_head / 2])
    cache: Any = None
    board: dict | None = None  # one pass's, shared by its layers: what a layer leaves for later ones (Gemma 4's keys
    # and values a later layer attends with) and, going backwards, the gradients it leaves for earlier ones
    layer_input: Any = None  # [pos, d_ple] this layer's own input from the token (Gemma 4's per-layer input), if any
    d_layer_input: Any = None  # going backwards: its gradient, which the kind that read it leaves here
    stream: Any = None  # [pos, d_model] the residual stream a sublayer's norm was given (a kind that reads it unnormalized:
    d_stream: Any = None  # Gemma 4's router); going backwards, the gradient such a kind leaves for it


class Sublayer:
    """A block entry: one kind of sublayer. Subclasses set the class attributes and implement the
    methods; `tracer.core.blocks.register` enters an instance in its scope's table."""

    key: str = ""  # the config's value naming this kind
    scope: str = ""  # "attn" or "mlp": the recorder's scope and the parameters' prefix in `blocks.{l}.`
    hooks: dict[str, Hook] = {}  # names within the scope, in the order `run` records them
    hold: dict[str, tuple] = {}  # block-relative name → the store's ways of holding it (`tracer.core.store`)
    title: str = ""  # the model line's words
    name: str = ""  # what the demo calls it
    plain: str = ""  # the demo's words: what it does to each token
    steps: tuple = ()  # (hook within the block, its name, words with {shape}) for each step the walkthrough shows
    example: dict = {}  # the config fields a small model of this kind needs besides its key (tests, docs)
    shown_as: str = ""  # which of the walkthrough's views shows it token by token (`tracer.render.layer`): "heads", "state"
    normed: bool = True  # the block's norms sit around it (ln1 / ln2 and their `_post`); False: it has its own, if any

    # -- parameters and layout
    def shapes(self, cfg, l: int) -> dict[str, tuple[int, ...]]:
        """Layer l's parameters after `blocks.{l}.{scope}.`, in a fixed order, with their shapes."""
        raise NotImplementedError

    def layout(self, cfg, params: dict, l: int, fused=None):
        """Layer l's weights (`params`: by full TransformerLens name) in the layout `run` multiplies
        by; the object has `kind` (this entry). `fused`: a loader's ready-made fused matrix, if any."""
        raise NotImplementedError

    # -- the passes
    def run(self, cfg, w, x: np.ndarray, rec: Recorder, span: Span) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
        """The sublayer on its (normalized) input, recording inline under `rec` (scoped to the sublayer)."""
        raise NotImplementedError

    def backward(self, cfg, w, dy: np.ndarray, acts, p: str, grads: dict, x: np.ndarray, span: Span) -> np.ndarray:
        """Back through `run`: the output's gradient `dy` → the input's; each parameter's gradient
        into `grads` under its full name. `acts`: the recorded pass; `p`: `blocks.{l}.{scope}.`;
        `x`: the input `run` was given."""
        raise NotImplementedError

    def needed(self, cfg) -> tuple[str, ...]:
        """What `backward` reads, as globs within the scope (`hook_z`, `hook_rot_[qk]`)."""
        return ()

    # -- what a pass costs and keeps
    def axes(self, cfg) -> dict[str, tuple[int, ...]]:
        """The lengths of the axes its own names use beyond the model's (`tracer.core.hooks.sizes`)."""
        return {}

    def n_params(self, cfg, l: int = 0) -> int:
        """Numbers it multiplies by in layer l."""
        return sum(int(np.prod(s)) for s in self.shapes(cfg, l).values())

    def active_params(self, cfg, l: int = 0) -> int:
        """Of `n_params`, those one token is multiplied by (routed experts: the router and k experts)."""
        return self.n_params(cfg, l)

    def check(self, cfg) -> None:
        """Refuse a config whose fields this kind reads but cannot use (a TracerError naming the field
        and its value), before any weight is made or read."""

    def macs(self, cfg, n_new: int, n_seen: int) -> int:
        """Multiply-adds of one pass computing `n_new` positions over `n_seen` keys."""
        raise NotImplementedError

    def record_bytes(self, cfg, n_new: int, n_seen: int) -> int:
        """Numbers one recorded pass holds at most (every value whole), per layer."""
        raise NotImplementedError

    def n_heads(self, cfg) -> int:
        """The heads whose outputs W_O merges (what `--head` and `--ablate L:H` count in this layer)."""
        return cfg.n_heads

    def cache_row(self, cfg, l: int = 0) -> int:
        """Numbers this layer's cache keeps per position (0: none, or a state whatever the length)."""
        return 0

    def cache_bytes(self, cfg, n: int, l: int = 0) -> int:
        """Bytes layer l's cache (`new_cache`, `cfg` the layer's view) holds for `n` positions: `cache_row` numbers
        per position (a state whatever n is overrides it)."""
        return n * self.cache_row(cfg, l) * np.dtype(cfg.dtype).itemsize

    def new_cache(self, cfg, capacity: int, owner, layer: int = 0):
        """Layer `layer`'s cache for a generation of up to `capacity` positions (`owner`: the
        `tracer.core.decoder.KVCache`, whose `length` says how many are filled), or None."""
        return None

    def records(self, cfg, name: str) -> bool:
        """Whether a run of `cfg` records `name` (within the scope) at all: one of its names, and, for
        names some configs only record, that this one does."""
        return name in self.hooks

    def width(self, cfg) -> int:
        """The hidden width its `steps` show (a dense MLP's d_mlp; Gemma 4's MLP beside experts: dense_d_mlp)."""
        return cfg.d_mlp

    def block_words(self, cfg) -> str:
        """What the header's block line says of this kind ("" where it says nothing: softmax attention)."""
        return self.title

    def vector_words(self, cfg, l: int) -> dict[str, tuple[str, str]]:
        """The walkthrough's name and words for Q, K or V at layer l where this kind makes it otherwise than
        x·W + b (Gemma 4's normalized values: {"V": ("{L}_V = RMS({src}·W_V{slice})", "the value ÷ …")}, slots
        as `tracer.render.words`' "head.vector" and {source}, {scale}); {}: none."""
        return {}

    def __repr__(self) -> str:
        return f"<{self.scope} kind {self.key!r}>"


# --------------------------------------------------------------------------- the norm around a sublayer


def norm(cfg, x: np.ndarray, ln: tuple | None, rec: Recorder = NOTHING) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
    """The norm (when the model has one): layer norm's zero mean and unit variance, or RMS norm's
    unit root mean square (`cfg.norm_kind`); then the gain (and layer norm's bias)."""
    if ln is None:
        return x
    kind = cfg.norm_kind
    normalized, scale = kind.forward(x, cfg.ln_eps)  # [pos, d_model], [pos, 1]
    rec("hook_scale", scale)
    return kind.gain(rec("hook_normalized", normalized), *ln)


def normed(cfg, x: np.ndarray, ln: tuple | None, acts, prefix: str) -> np.ndarray:
    """What `norm` gave, from the recorded normalized input times the gain (plus the bias), or x without a norm."""
    return x if ln is None else cfg.norm_kind.gain(acts[prefix + "hook_normalized"], *ln)


def d_norm(cfg, dy: np.ndarray, ln: tuple | None, acts, prefix: str, grads: dict, name: str) -> np.ndarray:
    """Back through `norm` (nothing to do without a norm): the gain's (and bias's) gradients into
    `grads` under `{name}.w` / `{name}.b`."""
    if ln is None:
        return dy
    kind = cfg.norm_kind
    normalized = acts[prefix + "hook_normalized"]
    dn, grads[name + ".w"], db = kind.d_gain(dy, normalized, ln[0])
    if kind.bias:
        grads[name + ".b"] = db
    return kind.backward(dn, normalized, acts[prefix + "hook_scale"])
