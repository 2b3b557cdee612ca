"""The decoder: embed → blocks → unembed, each block attention and an MLP added to the residual stream.

Reads like nanoGPT's `Block.forward` and picoGPT's `gpt2`:

    x = x + attention(ln1(x))
    x = x + mlp(ln2(x))

with the switches of `tracer.core.config.Config` (no layer norm, no MLP, no residual: the seed article's
simplified block; rotary positions, RMS norm, the SwiGLU MLP and grouped-query attention: Llama,
Qwen2 and Mistral). Which norm, MLP and positions: the config's entries in the table of block
switches (`cfg.norm_kind`, `cfg.mlp_kind`, `cfg.position_kind`: `tracer.core.blocks`), whose functions
the decoder calls. The equations themselves are in `tracer.core.equations`; the weights come in the
layouts the products want (`tracer.core.fast`). Every intermediate is recorded where it is made,
under TransformerLens's hook names without the batch axis (`rec("hook_q", q)`); two extras that
teaching needs: `blocks.{l}.attn.hook_dots` (the raw Q·K, before scaling and the mask) and
`blocks.{l}.attn.hook_result` (each head's output after its slice of W_O, before the heads are
summed: recorded as a recipe, computed when read). With rotary positions Q and K are recorded
before (`hook_q`, `hook_k`) and after (`hook_rot_q`, `hook_rot_k`) their rotation; the SwiGLU MLP
records x·W_gate (`hook_pre`), x·W_in (`hook_pre_linear`) and SiLU(gate)·up (`hook_post`), as
TransformerLens names them; Qwen3's and OLMo 2's Q/K norms record `attn.q_norm.hook_scale`,
`attn.q_norm.hook_normalized` (and `k_norm`'s) between `hook_q` and `hook_rot_q`; OLMo 2's norms of the sublayers' outputs record `ln1_post.*` and
`ln2_post.*` (TransformerLens's names) before `hook_attn_out` / `hook_mlp_out`; `rope.hook_angle` holds each position's angles (one per pair of a
head's dimensions, the same in every layer). Gemma 2's soft-cap (`cfg.attn_softcap`, the table's `SOFTCAP`) bends the scaled scores before the mask, so `hook_attn_scores` holds the capped ones (TransformerLens's place), and `cfg.final_softcap` the logits. Under grouped-query attention `hook_k` and `hook_v` hold the
key/value heads (fewer than the query heads). How a recorded value is held is the store's
business (`tracer.core.store`).

`forward` takes an optional `KVCache`: then only the new positions are computed, and the keys
and values of the earlier ones are reused, as generation does. Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np

from .config import Config
from .equations import (attend, attention_scores, causal_softmax, embed, head_results, merge_heads, rope_angles,
                        scale_and_mask, split_heads)
from .fast import Layer, Weights, layout
from .params import init_weights
from .record import NOTHING, Recorder


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
    turn = None
    if w.rope is not None:  # rotary positions: the angle each pair of a head's dimensions turns by, here
        angle = rec("rope.hook_angle", rope_angles(w.rope, start, n).astype(cfg.dtype))  # [pos, d_head / 2]
        turn = np.cos(angle), np.sin(angle)  # [pos, d_head / 2] each
    turn_local = turn
    if w.rope_local is not None:  # Gemma 3: the sliding-window layers turn by a local base's angles
        angle = rec("rope.hook_angle_local", rope_angles(w.rope_local, start, n).astype(cfg.dtype))  # [pos, d_head / 2]
        turn_local = np.cos(angle), np.sin(angle)
    for l in range(len(w.layers)):  # by index, and `layer` let go: nothing keeps layer l alive while l + 1 is expanded (`tracer.core.streamed`)
        layer = w.layers[l]
        x = block(cfg, layer, x, rec.scope(f"blocks.{l}"), cache.layers[l] if cache is not None else None,
                  turn_local if layer.local else turn)
        del layer
    if cache is not None:
        cache.length = start + n
    x = rec("unembed.hook_in", norm(cfg, x, w.ln_final, rec.scope("ln_final")))  # [pos, d_model]
    logits = w.unembed(x)  # [pos, d_vocab]
    if cfg.final_softcap is not None:  # Gemma 2: cap · tanh(logits / cap)
        logits = cfg.softcap_kind.forward(logits, cfg.final_softcap)
    return rec("logits", logits)  # [pos, d_vocab]


def block(cfg: Config, w: Layer, x: np.ndarray, rec: Recorder, kv=None, turn=None) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
    """One layer: attention, then the MLP, each added back to its input."""
    x = rec("hook_resid_pre", x)
    attn_out = attention(cfg, w, norm(cfg, x, w.ln1, rec.scope("ln1")), rec.scope("attn"), kv, turn)  # [pos, d_model]
    if w.ln1_post is not None:  # OLMo 2, Gemma: the output normalized (instead, or too)
        attn_out = norm(cfg, attn_out, w.ln1_post, rec.scope("ln1_post"))
    x = residual(cfg, x, rec("hook_attn_out", attn_out))  # x + attention(ln1(x))
    if cfg.mlp:
        x = rec("hook_resid_mid", x)
        mlp_out = mlp(cfg, w, norm(cfg, x, w.ln2, rec.scope("ln2")), rec.scope("mlp"))  # [pos, d_model]
        if w.ln2_post is not None:
            mlp_out = norm(cfg, mlp_out, w.ln2_post, rec.scope("ln2_post"))
        x = residual(cfg, x, rec("hook_mlp_out", mlp_out))  # x + mlp(ln2(x))
    return rec("hook_resid_post", x)


def residual(cfg: Config, x: np.ndarray, out: np.ndarray) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
    """A sublayer's output added to its input (or, with `residual = false`, the output alone)."""
    return x + out if cfg.residual else out


def norm(cfg: Config, x: np.ndarray, ln: tuple | None, rec: Recorder = NOTHING) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
    """The norm (when the model has one): layer norm's zero mean and unit variance, or RMS norm's
    unit root mean square (`cfg.norm_kind`); then the gain (and layer norm's bias)."""
    if ln is None:
        return x
    kind = cfg.norm_kind
    normalized, scale = kind.forward(x, cfg.ln_eps)  # [pos, d_model], [pos, 1]
    rec("hook_scale", scale)
    return kind.gain(rec("hook_normalized", normalized), *ln)


def qk_norm(cfg: Config, x: np.ndarray, ln: tuple, rec: Recorder = NOTHING) -> np.ndarray:  # [pos, heads, d_head] → same
    """The config's norm on Q or K: over each head's d_head numbers, or over all of them
    (`cfg.qk_norm_kind.flat`), then its gain; recorded as `attn.q_norm.hook_scale` / `hook_normalized`."""
    return norm(cfg, cfg.qk_norm_kind.flat(x), ln, rec).reshape(x.shape)


def attention(cfg: Config, w: Layer, x: np.ndarray, rec: Recorder, kv=None, turn=None) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
    """Causal self-attention, every head at once: each query weighs the keys it may see (all the
    earlier ones, or the layer's sliding window: `w.window`), takes that blend of their values, and
    W_O merges the heads. `turn`: RoPE's (cos, sin) for these positions."""
    q, k, v = split_heads(w.qkv(x), cfg.n_heads, cfg.kv_heads)  # [pos, head, d_head], [pos, kv_head, d_head] ×2
    q, k, v = rec("hook_q", q), rec("hook_k", k), rec("hook_v", v)
    if w.q_norm is not None:  # Qwen3 / OLMo 2: Q and K normalized (per head, or whole) before the rotation
        q, k = qk_norm(cfg, q, w.q_norm, rec.scope("q_norm")), qk_norm(cfg, k, w.k_norm, rec.scope("k_norm"))
    if turn is not None:  # rotary positions: Q and K turned by their position's angles
        rotate = cfg.position_kind.forward
        q, k = rec("hook_rot_q", rotate(q, *turn)), rec("hook_rot_k", rotate(k, *turn))
    if kv is not None:
        k, v = kv.extend(k, v)  # [key_pos, kv_head, d_head]: the cached positions' keys and values, then these
    dots = rec("hook_dots", attention_scores(q, k))  # [head, query_pos, key_pos]
    scores = rec("hook_attn_scores", scale_and_mask(dots, cfg.scores_scale, w.window, cfg.attn_softcap))
    pattern = rec("hook_pattern", causal_softmax(scores))  # [head, query_pos, key_pos]
    z = rec("hook_z", attend(pattern, v))  # [pos, head, d_head]
    rec.later("hook_result", head_results, z, w.W_O, shape=(*z.shape[:-1], w.W_O.shape[-1]))
    return w.out(merge_heads(z))  # [pos, d_model]


def mlp(cfg: Config, w: Layer, x: np.ndarray, rec: Recorder) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
    """Two affine maps with GELU between them, on each position alone; or SwiGLU's three:
    SiLU(x·W_gate) ⊙ (x·W_in), then W_out (`cfg.mlp_kind` says which)."""
    inputs = [rec(hook, product(x)) for hook, product in w.mlp_inputs]  # [pos, d_mlp] each: x·W_in (SwiGLU: x·W_gate first)
    post = rec("hook_post", cfg.mlp_kind.forward(*inputs))  # [pos, d_mlp]
    return w.mlp_out(post)  # [pos, d_model]


class KVCache:
    """Keys and values of the positions seen so far, per layer, reused by later passes."""

    def __init__(self, cfg: Config, capacity: int):
        shape = (cfg.n_layers, capacity, cfg.kv_heads, cfg.d_head)
        self.k = np.empty(shape, dtype=cfg.dtype)  # [layer, pos, kv_head, d_head] (rotated, with RoPE)
        self.v = np.empty(shape, dtype=cfg.dtype)  # [layer, pos, kv_head, d_head]
        self.length = 0  # positions filled
        self.layers = [LayerCache(self, l) for l in range(cfg.n_layers)]  # each layer's part, made once

    @property
    def capacity(self) -> int:
        return self.k.shape[1]

    def layer(self, l: int) -> "LayerCache":
        return self.layers[l]


class LayerCache:
    """One layer's part of a KVCache."""

    def __init__(self, cache: KVCache, l: int):
        self.cache, self.l = cache, l

    def extend(self, k: np.ndarray, v: np.ndarray):  # [pos, kv_head, d_head] ×2 → [key_pos, kv_head, d_head] ×2
        """Keep this pass's keys and values; return every key and value so far."""
        c, start = self.cache, self.cache.length
        end = start + k.shape[0]
        c.k[self.l, start:end] = k
        c.v[self.l, start:end] = v
        if not start:  # the first pass: its own keys and values are all there are
            return k, v
        return c.k[self.l, :end], c.v[self.l, :end]


def hook_names(cfg: Config) -> list[str]:
    """Every name `forward` records for `cfg`, in order (from a one-token run, so it is exact). RoPE's
    scaling changes the angles, not the names: dropped, since a GGUF's per-pair factors fit only its d_head."""
    small = Config(**{**cfg.to_dict(), **dict(d_vocab=2, n_ctx=1, d_model=cfg.n_heads, d_head=2, d_mlp=1, rope_scaling=None)})
    rec = Recorder()
    forward(small, init_weights(small, 0), [0], rec)
    return list(rec.store)
