"""The decoder: embed → blocks → unembed, each block attention and an MLP added to the residual stream.

Reads like nanoGPT's `Block.forward` and picoGPT's `gpt2`:

    x = x + attention(ln1(x))
    x = x + mlp(ln2(x))

with the switches of `tracer.core.config.Config` (no layer norm, no MLP, no residual: the seed
article's simplified block; rotary positions, RMS norm, the SwiGLU MLP and grouped-query attention:
Llama, Qwen2 and Mistral). Each sublayer is its kind's entry in the table of block switches
(`tracer.core.blocks`: softmax attention, a dense MLP, …), which owns its whole forward pass
(`Sublayer.run`) and records its own values; the decoder calls the entry and names no kind. The
norms and positions are entries of the same table (`cfg.norm_kind`, `cfg.position_kind`); the
equations themselves are in `tracer.core.equations`; the weights come in the layouts the products
want (`tracer.core.fast`). Every intermediate is recorded where it is made, under TransformerLens's
hook names without the batch axis (`rec("hook_resid_mid", x)`; the table of every name is
`tracer.core.hooks`). With rotary positions `rope.hook_angle` holds each position's angles (one per
pair of a head's dimensions, the same in every layer); OLMo 2's and Gemma's norms of the
sublayers' outputs record `ln1_post.*` and `ln2_post.*` (TransformerLens's names) before
`hook_attn_out` / `hook_mlp_out`; Gemma 2's `cfg.final_softcap` bends the logits. How a recorded
value is held is the store's business (`tracer.core.store`).

Gemma 4 adds a third residual line and a scalar: `x = x + per_layer_input(x)` (its kind, `cfg.ple_kind`, makes
every layer's input from the tokens once per pass and reads its row, `Span.layer_input`), then `x = x · scalar`;
each layer runs on its view of the config (`cfg.layer(l)`: its own head size, key/value heads and MLP width), and
a pass's `Span.board` carries what one layer leaves for a later one (keys and values it shares).

`forward` takes an optional `KVCache`: then only the new positions are computed, and what the
earlier ones left (the keys and values of softmax attention; each attention kind keeps its own,
`Sublayer.new_cache`) is reused, as generation does. Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np

from .config import Config
from .equations import embed, rope_angles, rope_turn
from .fast import Layer, Weights, layout
from .params import init_weights
from .record import NOTHING, Recorder
from .sublayer import Span, norm


def forward(cfg: Config, weights, tokens, rec: Recorder = NOTHING, cache: "KVCache | None" = None) -> np.ndarray:  # [pos] → [pos, d_vocab]
    """Logits for `tokens` (the new tokens only, when a cache holds the earlier ones).
    `weights`: a `tracer.core.fast.Weights`, or the parameters by name (laid out here). `tokens` may be
    a batch [batch, pos] of sequences of one length (training); then every array has a batch axis."""
    w = weights if isinstance(weights, Weights) else layout(cfg, weights)
    tokens = np.asarray(tokens, dtype=np.int64)  # [pos]
    n = tokens.shape[-1]
    start = cache.length if cache is not None else 0
    x = rec("hook_embed", embed(w.W_E, tokens).astype(cfg.dtype, copy=False))  # [pos, d_model]
    if cfg.embed_scale:  # Gemma: × √d_model, as a number of the model's dtype
        x = x * np.dtype(cfg.dtype).type(np.sqrt(cfg.d_model))
    positions = cfg.position_kind  # the table of block switches' entry (`tracer.core.blocks`)
    if positions.adds:
        x = x + rec("hook_pos_embed", positions.forward(w.W_pos, start, n))  # [pos, d_model]
    inputs = None
    if w.per_layer is not None:  # Gemma 4: each layer's own input from the token
        inputs = w.per_layer.kind.inputs(cfg, w.per_layer, tokens, x, rec)  # [layer, pos, d_ple]
    turn = None
    if w.rope is not None:  # rotary positions: the angle each pair of a head's dimensions turns by, here
        angle = rec("rope.hook_angle", rope_angles(w.rope, start, n).astype(cfg.dtype))  # [pos, d_head / 2]
        turn = rope_turn(angle, w.rope_factor)  # [pos, d_head / 2] each: cos, sin (× YaRN's attention factor)
    turn_local = turn
    if w.rope_local is not None:  # Gemma 3: the sliding-window layers turn by a local base's angles
        angle = rec("rope.hook_angle_local", rope_angles(w.rope_local, start, n).astype(cfg.dtype))  # [pos, d_head / 2]
        turn_local = rope_turn(angle)
    board: dict = {}  # what a layer leaves for later ones in this pass (Gemma 4's shared keys and values)
    for l in range(len(w.layers)):  # by index, and `layer` let go: nothing keeps layer l alive while l + 1 is expanded (`tracer.core.streamed`)
        layer = w.layers[l]
        here = (turn_local if layer.local else turn) if layer.rotates else None  # this layer's rotation, if it turns
        span = Span(start, n, here, cache.layers[l] if cache is not None else None, board,
                    inputs[..., l, :, :] if inputs is not None else None)
        x = block(layer.cfg or cfg, layer, x, rec.scope(f"blocks.{l}"), span)  # the layer's view of cfg: its own sizes
        del layer
    if cache is not None:
        cache.length = start + n
    x = rec("unembed.hook_in", norm(cfg, x, w.ln_final, rec.scope("ln_final")))  # [pos, d_model]
    logits = w.unembed(x)  # [pos, d_vocab]
    if cfg.final_softcap is not None:  # Gemma 2: cap · tanh(logits / cap)
        logits = cfg.softcap_kind.forward(logits, cfg.final_softcap)
    return rec("logits", logits)  # [pos, d_vocab]


def block(cfg: Config, w: Layer, x: np.ndarray, rec: Recorder, span: Span) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
    """One layer: attention, then the MLP, each added back to its input (then, in Gemma 4, the layer's
    own input from the token, and the whole times the layer's scalar)."""
    x = rec("hook_resid_pre", x)
    x = residual(cfg, x, rec("hook_attn_out", sublayer(cfg, w.attn, "ln1", w.ln1, w.ln1_post, x, rec, span)))  # x + attention(ln1(x))
    if w.mlp is not None:
        x = rec("hook_resid_mid", x)
        x = residual(cfg, x, rec("hook_mlp_out", sublayer(cfg, w.mlp, "ln2", w.ln2, w.ln2_post, x, rec, span)))  # x + mlp(ln2(x))
    if w.ple is not None:
        x = rec("hook_resid_ple", x)
        x = residual(cfg, x, rec("hook_ple_out", sublayer(cfg, w.ple, "ln3", None, None, x, rec, span)))  # x + per_layer_input(x)
    if w.scalar is not None:
        x = rec("hook_resid_unscaled", x) * w.scalar  # x · scalar
    return rec("hook_resid_post", x)


def sublayer(cfg: Config, w, ln_name: str, ln: tuple | None, ln_post: tuple | None, x: np.ndarray, rec: Recorder,
             span: Span) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
    """One sublayer (its kind's `run`: `w.kind`) on the input normalized by `ln_name`; its output
    normalized too where the model does that (OLMo 2, Gemma: `ln1_post` / `ln2_post`)."""
    kind = w.kind
    span.stream = x  # [pos, d_model] (before the norm: a kind may read it)
    out = kind.run(cfg, w, norm(cfg, x, ln, rec.scope(ln_name)), rec.scope(kind.scope), span)  # [pos, d_model]
    return out if ln_post is None else norm(cfg, out, ln_post, rec.scope(ln_name + "_post"))


def residual(cfg: Config, x: np.ndarray, out: np.ndarray) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
    """A sublayer's output added to its input (or, with `residual = false`, the output alone)."""
    return x + out if cfg.residual else out


class KVCache:
    """What every layer keeps of the positions seen so far, reused by later passes: each layer's
    attention kind makes its part (`Sublayer.new_cache`: softmax attention's keys and values)."""

    def __init__(self, cfg: Config, capacity: int):
        self.capacity = capacity
        self.length = 0  # positions filled
        self.layers = [cfg.attention_of(l).new_cache(cfg.layer(l), capacity, self, l) for l in range(cfg.n_layers)]

    def layer(self, l: int):
        return self.layers[l]

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.layers if c is not None)


def hook_names(cfg: Config) -> list[str]:
    """Every name `forward` records for `cfg`, in order (from a one-token run, so it is exact). RoPE's
    scaling changes the angles, not the names: dropped, since a GGUF's per-pair factors fit only its d_head
    (and partial rotary's width, which must fit the small d_head)."""
    small = Config(**{**cfg.to_dict(), **dict(d_vocab=2, n_ctx=1, d_model=cfg.n_heads, d_head=2, d_mlp=1, rope_scaling=None,
                                              rotary_dim=None if cfg.rotary_dim is None else 2,
                                              layer_d_head=None, layer_d_mlp=None, d_ple=1 if cfg.d_ple else None)})
    rec = Recorder()
    forward(small, init_weights(small, 0), [0], rec)
    return list(rec.store)
