"""Softmax attention as a block entry: the whole sublayer (the fused Q|K|V product, the Q/K norm, the
rotation, Q·K, the scale, the soft-cap and the causal mask, the softmax, the weighted sum of values,
W_O), its backward pass, its layout, what it records, how the store holds its big arrays, and its
KV cache. Every head at once (reshape/einsum, never a loop over heads); grouped-query attention when
the config has fewer key/value heads. `tracer.core.blocks` registers it as the attention kind
"softmax"; kinds that differ (attention sinks, linear attention) are subclasses or siblings.

Recorded under TransformerLens's names (in `blocks.{l}.attn.`): `hook_q`, `hook_k`, `hook_v`
[pos, head, d_head] (K and V per key/value head), the Q/K norms' `q_norm.hook_scale` /
`hook_normalized` (Qwen3, OLMo 2, Gemma 3), `hook_rot_q` / `hook_rot_k` under rotary positions,
`hook_dots` (the raw Q·K, before the scale and the mask: teaching needs it), `hook_attn_scores`
and `hook_pattern` [head, query_pos, key_pos], `hook_z`, and `hook_result` (each head's output after
its slice of W_O, before the heads are summed: a recipe, computed when read). Core module: imports
numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .affine import Affine
from .derivatives import (d_affine, d_attend, d_attention_scores, d_causal_softmax, d_merge_heads, d_scale_and_mask,
                          d_split_heads)
from .equations import (attend, attention_scores, causal_softmax, head_results, merge_heads, scale_and_mask, sigmoid,
                        sink_softmax, split_heads)
from .hooks import Hook, h
from .qkv import fuse_qkv, fuse_qkv_weights, split_qkv, split_qkv_weights
from .record import NOTHING, Recorder
from .store import Causal, Later, Recipe, long_prefill
from .sublayer import Span, Sublayer, d_norm, norm

# --------------------------------------------------------------------------- the store's recipes


def scores_of(cfg, l: int, dots: np.ndarray) -> np.ndarray:  # [head, query_pos, key_pos] → same
    """The scores from Q·K: the layer's scale, soft-cap and mask (its sliding window, if any)."""
    return scale_and_mask(dots, cfg.scores_scale, cfg.window_of(l), cfg.attn_softcap)


def dots_of(cfg, l: int, q: np.ndarray, k: np.ndarray) -> np.ndarray:  # → [head, query_pos, key_pos]
    return attention_scores(q, k)


def meeting(cfg, l: int = 0) -> tuple[str, str]:
    """The names (within a block) of the Q and K that meet in Q·K: the rotated ones where layer l turns them."""
    return cfg.position_kind.meets if cfg.rotates(l) else ("attn.hook_q", "attn.hook_k")


# --------------------------------------------------------------------------- the layout and the cache


@dataclass
class AttentionWeights:
    """One layer's softmax attention in the layout its products want."""

    kind: "SoftmaxAttention"
    qkv: Affine  # [d_model, (head + 2·kv_head)·d_head]: [W_Q | W_K | W_V], each block of heads side by side
    W_O: np.ndarray  # [head, d_head, d_model]
    out: Affine  # W_O as [head·d_head, d_model], with b_O
    q_norm: tuple | None = None  # the Q/K norms' (gain, bias) (`cfg.qk_norm_kind`), else None
    k_norm: tuple | None = None
    window: int | None = None  # this layer's sliding window (`cfg.window_of`), None: every earlier key
    refetched = ("W_O",)  # what the recipe of each head's result keeps: a streamed layer's is expanded again when read


class LayerKV:
    """One layer's keys and values of the positions seen so far, reused by later passes."""

    def __init__(self, owner, capacity: int, kv_heads: int, d_head: int, dtype):
        self.owner = owner  # the KVCache: its `length` is how many positions are filled
        self.k = np.empty((capacity, kv_heads, d_head), dtype=dtype)  # [pos, kv_head, d_head] (rotated, with RoPE)
        self.v = np.empty((capacity, kv_heads, d_head), dtype=dtype)  # [pos, kv_head, d_head]

    def extend(self, k: np.ndarray, v: np.ndarray):  # [pos, kv_head, d_head] ×2 → [key_pos, kv_head, d_head] ×2
        """Keep this pass's keys and values; return every key and value so far."""
        start = self.owner.length
        end = start + k.shape[0]
        self.k[start:end] = k
        self.v[start:end] = v
        if not start:  # the first pass: its own keys and values are all there are
            return k, v
        return self.k[:end], self.v[:end]

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


# --------------------------------------------------------------------------- the entry


class SoftmaxAttention(Sublayer):
    """Causal self-attention: each query weighs the keys it may see (all the earlier ones, or the
    layer's sliding window), takes that blend of their values, and W_O merges the heads."""

    key = "softmax"
    scope = "attn"
    title = "softmax attention"
    shown_as = "heads"
    hooks = {
        "hook_q": h("pos head d_head", "qkv"),
        "hook_k": h("pos kv d_head", "qkv"),
        "hook_v": h("pos kv d_head", "qkv"),
        **{f"{m}_norm.{k}": h(f"pos {m}_rows {a}", "qkv") for m in "qk"
           for k, a in (("hook_scale", "one"), ("hook_normalized", f"{m}_width"))},
        "hook_rot_q": h("pos head d_head", "rotation"),
        "hook_rot_k": h("pos kv d_head", "rotation"),
        "hook_dots": h("head pos key", "scores"),
        "hook_attn_scores": h("head pos key", "scores", masked=True),
        "hook_pattern": h("head pos key", "softmax"),
        "hook_z": h("pos head d_head", "sum"),
        "hook_result": h("pos head d_model", "heads"),
    }
    hold = {
        "attn.hook_pattern": (Causal(0.0),),
        "attn.hook_attn_scores": (Recipe(scores_of, ("attn.hook_dots",), exact=True), Causal(-np.inf)),
        "attn.hook_dots": (Recipe(dots_of, lambda cfg, l: tuple(meeting(cfg, l)), when=long_prefill, remember=True),),
        "attn.hook_result": (Later(),),
    }

    # -- parameters and layout

    def shapes(self, cfg, l: int) -> dict[str, tuple[int, ...]]:
        H, KV, dm, dh = cfg.n_heads, cfg.kv_heads, cfg.d_model, cfg.d_head
        heads = {"Q": H, "K": KV, "V": KV}  # grouped-query attention: fewer K/V heads
        out = {f"W_{m}": (heads[m], dm, dh) for m in "QKV"}
        out.update({f"b_{m}": (heads[m], dh) for m in "QKV"})
        out.update(cfg.qk_norm_kind.shapes(cfg.norm_kind, H, KV, dh))  # Q/K norms' gains (Qwen3, OLMo 2)
        return {**out, "W_O": (H, dh, dm), "b_O": (dm,)}

    def layout(self, cfg, params: dict, l: int, fused=None) -> AttentionWeights:
        a = f"blocks.{l}.attn."
        W = fused if fused is not None else fuse_qkv_weights(params[a + "W_Q"], params[a + "W_K"], params[a + "W_V"])
        b = fuse_qkv(params[a + "b_Q"], params[a + "b_K"], params[a + "b_V"])  # [(head + 2·kv_head)·d_head]
        W_O = params[a + "W_O"]  # [head, d_head, d_model]
        return AttentionWeights(self, Affine(W, b), W_O, Affine(W_O.reshape(-1, W_O.shape[-1]), params[a + "b_O"]),
                                q_norm=_qk_norm_weights(cfg, params, a + "q_norm"),
                                k_norm=_qk_norm_weights(cfg, params, a + "k_norm"), window=cfg.window_of(l))

    # -- the passes

    def run(self, cfg, w: AttentionWeights, x: np.ndarray, rec: Recorder, span: Span) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
        q, k, v = self.project(cfg, w, x, rec, span)  # [pos, head, d_head]; [key_pos, kv_head, d_head] ×2
        dots = rec("hook_dots", attention_scores(q, k))  # [head, query_pos, key_pos]
        scores = rec("hook_attn_scores", scale_and_mask(dots, cfg.scores_scale, w.window, cfg.attn_softcap))
        pattern = rec("hook_pattern", self.weights(cfg, w, scores, rec))  # [head, query_pos, key_pos]
        z = rec("hook_z", attend(pattern, v))  # [pos, head, d_head]
        z = self.z_out(cfg, w, x, z, rec)  # what W_O merges (an output gate's product: Qwen3.5)
        rec.later("hook_result", head_results, z, w.W_O, shape=(*z.shape[:-1], w.W_O.shape[-1]))
        return w.out(merge_heads(z))  # [pos, d_model]

    def project(self, cfg, w: AttentionWeights, x: np.ndarray, rec: Recorder, span: Span):
        """The queries, and every key and value they may see (the cached positions', then these): the fused
        product cut into heads, the Q/K norms, the rotation, the cache."""
        q, k, v = split_heads(w.qkv(x), cfg.n_heads, cfg.kv_heads)  # [pos, head, d_head], [pos, kv_head, d_head] ×2
        q, k, v = rec("hook_q", q), rec("hook_k", k), rec("hook_v", v)
        if w.q_norm is not None:  # Qwen3 / OLMo 2: Q and K normalized (per head, or whole) before the rotation
            q, k = qk_norm(cfg, q, w.q_norm, rec.scope("q_norm")), qk_norm(cfg, k, w.k_norm, rec.scope("k_norm"))
        if span.turn is not None:  # rotary positions: Q and K turned by their position's angles
            rotate = cfg.position_kind.forward
            q, k = rec("hook_rot_q", rotate(q, *span.turn)), rec("hook_rot_k", rotate(k, *span.turn))
        if span.cache is not None:
            k, v = span.cache.extend(k, v)  # [key_pos, kv_head, d_head]: the cached positions' keys and values, then these
        return q, k, v

    def z_out(self, cfg, w: AttentionWeights, x: np.ndarray, z: np.ndarray, rec: Recorder) -> np.ndarray:
        """What W_O merges, of the weighted sums z: z itself (a subclass may gate it)."""
        return z

    def d_z_out(self, cfg, w: AttentionWeights, dz_out: np.ndarray, acts, p: str, grads: dict, x: np.ndarray):
        """Back through `z_out`: (z's gradient, the gradient it adds to the input x, or None)."""
        return dz_out, None

    def weights(self, cfg, w: AttentionWeights, scores: np.ndarray, rec: Recorder) -> np.ndarray:
        """The attention weights from the scores: each row's softmax over the keys it may see."""
        return causal_softmax(scores)  # [head, query_pos, key_pos]

    def d_weights(self, cfg, w: AttentionWeights, dpattern: np.ndarray, acts, p: str, grads: dict) -> np.ndarray:
        """Back through `weights`: the pattern's gradient → the scores'."""
        return d_causal_softmax(dpattern, acts[p + "hook_pattern"])

    def backward(self, cfg, w: AttentionWeights, dy: np.ndarray, acts, p: str, grads: dict, x: np.ndarray,
                 span: Span) -> np.ndarray:  # [..., pos, d_model] → [..., pos, d_model]
        H, dh, dm = cfg.n_heads, cfg.d_head, cfg.d_model
        z, pattern = acts[p + "hook_z"], acts[p + "hook_pattern"]
        block = p[: -len("attn.")]
        q_name, k_name = meeting(cfg, int(block.split(".")[1]))  # under RoPE, the rotated Q and K
        q, k, v = acts[block + q_name], acts[block + k_name], acts[p + "hook_v"]
        z_out = self.z_out_recorded(acts, p, z)
        dmerged, dW_O, grads[p + "b_O"] = d_affine(dy, z_out.reshape(*z_out.shape[:-2], -1), w.out.W)
        grads[p + "W_O"] = dW_O.reshape(H, dh, dm)
        dz, dx_gate = self.d_z_out(cfg, w, d_merge_heads(dmerged, H), acts, p, grads, x)
        dpattern, dv = d_attend(dz, pattern, v)
        dscores = self.d_weights(cfg, w, dpattern, acts, p, grads)
        if cfg.attn_softcap is not None:  # Gemma 2: back through cap · tanh(s / cap), from the capped scores
            dscores = cfg.softcap_kind.backward(dscores, acts[p + "hook_attn_scores"], cfg.attn_softcap)
        dq, dk = d_attention_scores(d_scale_and_mask(dscores, cfg.scores_scale), q, k)
        dx = self.d_project(cfg, w, dq, dk, dv, acts, p, grads, x, span)
        return dx if dx_gate is None else dx + dx_gate

    def d_project(self, cfg, w: AttentionWeights, dq, dk, dv, acts, p: str, grads: dict, x: np.ndarray,
                  span: Span) -> np.ndarray:  # → [..., pos, d_model]
        """Back through `project`: the gradients of the Q and K that met and of the values weighed → the input's."""
        H, KV = cfg.n_heads, cfg.kv_heads
        dq, dk = self.d_turn(cfg, w, dq, dk, acts, p, grads, span)
        dx, dW_qkv, db_qkv = d_affine(d_split_heads(dq, dk, dv), x, w.qkv.W)
        for m, dW, db in zip("QKV", split_qkv_weights(dW_qkv, H, KV), split_qkv(db_qkv, H, KV)):  # each head's [d_model, d_head]
            grads[p + f"W_{m}"], grads[p + f"b_{m}"] = dW, db
        return dx

    def d_turn(self, cfg, w: AttentionWeights, dq, dk, acts, p: str, grads: dict, span: Span):
        """Back through the rotation and the Q/K norms to the projections' Q and K (dk None: no K of its own)."""
        if span.turn is not None:  # back through the rotation to the projections' Q and K
            d_rotate = cfg.position_kind.backward
            dq, dk = d_rotate(dq, *span.turn), (d_rotate(dk, *span.turn) if dk is not None else None)
        if w.q_norm is not None:  # back through the Q/K norms (Qwen3, OLMo 2) to the projections' Q and K
            dq = d_qk_norm(cfg, dq, w.q_norm, acts, p + "q_norm.", grads, p + "q_norm")
            dk = d_qk_norm(cfg, dk, w.k_norm, acts, p + "k_norm.", grads, p + "k_norm") if dk is not None else None
        return dq, dk

    def z_out_recorded(self, acts, p: str, z: np.ndarray) -> np.ndarray:
        """What `z_out` gave in the recorded pass."""
        return z

    def block_words(self, cfg) -> str:
        return ""  # what every model has: the header says nothing of it

    def needed(self, cfg) -> tuple[str, ...]:
        soft = ("hook_attn_scores",) if cfg.attn_softcap is not None else ()  # its derivative is read from the capped scores
        return ("hook_[qkvz]", "hook_rot_[qk]", "?_norm.hook_*", "hook_pattern") + soft

    # -- what a pass costs and keeps

    def macs(self, cfg, n_new: int, n_seen: int) -> int:
        H, dh, dm = cfg.n_heads, cfg.d_head, cfg.d_model
        keys = n_new * n_seen - (n_new * (n_new - 1)) // 2  # causal: visible (query, key) pairs
        return n_new * dm * cfg.qkv_width + 2 * H * dh * keys + n_new * H * dh * dm  # Q, K, V; Q·K and the sum; W_O

    def record_bytes(self, cfg, n_new: int, n_seen: int) -> int:
        return n_new * 4 * cfg.n_heads * cfg.d_head + 3 * cfg.n_heads * n_new * n_seen  # Q, K, V, Z; dots, scores, weights

    def cache_row(self, cfg, l: int = 0) -> int:
        """Numbers the cache keeps of one position in layer l: its key and value in every key/value head."""
        return 2 * cfg.kv_heads * cfg.d_head

    def new_cache(self, cfg, capacity: int, owner, layer: int = 0) -> LayerKV:
        return LayerKV(owner, capacity, cfg.kv_heads, cfg.d_head, cfg.dtype)


def _qk_norm_weights(cfg, params: dict, name: str) -> tuple | None:
    """A Q/K norm's (gain, bias), or None when the block normalizes neither."""
    if not cfg.qk_norm_kind.on:
        return None
    return params[name + ".w"], params.get(name + ".b") if cfg.norm_kind.bias else None


def qk_norm(cfg, x: np.ndarray, ln: tuple, rec: Recorder = NOTHING) -> np.ndarray:  # [pos, heads, d_head] → same
    """The config's norm on Q or K: over each head's d_head numbers, or over all of them
    (`cfg.qk_norm_kind.flat`), then its gain; recorded as `q_norm.hook_scale` / `hook_normalized`."""
    return norm(cfg, cfg.qk_norm_kind.flat(x), ln, rec).reshape(x.shape)


def d_qk_norm(cfg, dy: np.ndarray, ln: tuple, acts, prefix: str, grads: dict, name: str) -> np.ndarray:
    """Back through `qk_norm`: [..., pos, heads, d_head] → the same, the norm's gain's gradient in `grads`."""
    return d_norm(cfg, cfg.qk_norm_kind.flat(dy), ln, acts, prefix, grads, name).reshape(dy.shape)


# --------------------------------------------------------------------------- attention sinks (gpt-oss)


@dataclass
class SinkWeights(AttentionWeights):
    sinks: np.ndarray = None  # [head] each head's sink logit


class SinkAttention(SoftmaxAttention):
    """Softmax attention with a sink per head (gpt-oss): a learned logit joins each row's softmax and
    takes part of the weight, so the pattern over the keys no longer sums to 1 (`hook_sink_share`
    [head, pos]: what went to the sink). Written as its differences from softmax attention."""

    key = "sinks"
    title = "attention with sinks"
    hooks = {k: v for name, hook in SoftmaxAttention.hooks.items()  # the sink's share is recorded just before the pattern
             for k, v in ((("hook_sink_share", h("head pos", "softmax")),) if name == "hook_pattern" else ()) + ((name, hook),)}

    def shapes(self, cfg, l: int) -> dict[str, tuple[int, ...]]:
        return {**super().shapes(cfg, l), "sinks": (cfg.n_heads,)}

    def layout(self, cfg, params: dict, l: int, fused=None) -> SinkWeights:
        base = super().layout(cfg, params, l, fused)
        return SinkWeights(**{**vars(base), "kind": self}, sinks=params[f"blocks.{l}.attn.sinks"])

    def weights(self, cfg, w: SinkWeights, scores: np.ndarray, rec: Recorder) -> np.ndarray:
        pattern, share = sink_softmax(scores, w.sinks)  # [head, query_pos, key_pos], [head, query_pos]
        rec("hook_sink_share", share)
        return pattern

    def d_weights(self, cfg, w: SinkWeights, dpattern: np.ndarray, acts, p: str, grads: dict) -> np.ndarray:
        pattern, share = acts[p + "hook_pattern"], acts[p + "hook_sink_share"]
        inner = (dpattern * pattern).sum(axis=-1, keepdims=True)  # [..., head, query_pos, 1]
        dsink = -(share[..., None] * inner)  # the sink's logit: its share times (0 − Σ dp·p)
        grads[p + "sinks"] = dsink.reshape(-1, *dsink.shape[-3:]).sum(axis=(0, 2, 3))
        return pattern * (dpattern - inner)

    def block_words(self, cfg) -> str:
        return "attention sinks (a learned logit per head takes part of each softmax)"

    def needed(self, cfg) -> tuple[str, ...]:
        return (*super().needed(cfg), "hook_sink_share")

    def record_bytes(self, cfg, n_new: int, n_seen: int) -> int:
        return super().record_bytes(cfg, n_new, n_seen) + cfg.n_heads * n_new


# --------------------------------------------------------------------------- an output gate (Qwen3.5)


@dataclass
class GatedWeights(AttentionWeights):
    gate: Affine = None  # [d_model, head·d_head]: x·W_G (+ b_G), each head's gate


class GatedAttention(SoftmaxAttention):
    """Softmax attention whose weighted sums are gated before W_O (Qwen3.5's full-attention layers): each
    head's z times sigmoid(x·W_G), W_G a second half of the query projection. Recorded: `hook_gate`
    [pos, head, d_head] (x·W_G, before the sigmoid) and `hook_z_gated` (what W_O merges)."""

    key = "gated"
    title = "softmax attention with an output gate"
    hooks = {**SoftmaxAttention.hooks}
    hooks = {k: v for name, hook in hooks.items()  # the gate and the gated sums, after z, before each head's result
             for k, v in ((name, hook),) + ((("hook_gate", h("pos head d_head", "heads")),
                                            ("hook_z_gated", h("pos head d_head", "heads"))) if name == "hook_z" else ())}

    def shapes(self, cfg, l: int) -> dict[str, tuple[int, ...]]:
        H, dm, dh = cfg.n_heads, cfg.d_model, cfg.d_head
        return {**super().shapes(cfg, l), "W_G": (H, dm, dh), "b_G": (H, dh)}

    def layout(self, cfg, params: dict, l: int, fused=None) -> GatedWeights:
        base = super().layout(cfg, params, l, fused)
        a = f"blocks.{l}.attn."
        W_G = params[a + "W_G"]  # [head, d_model, d_head]
        gate = Affine(W_G.transpose(1, 0, 2).reshape(W_G.shape[1], -1), params[a + "b_G"].reshape(-1))
        return GatedWeights(**{**vars(base), "kind": self}, gate=gate)

    def z_out(self, cfg, w: GatedWeights, x, z, rec):
        g = rec("hook_gate", w.gate(x).reshape(z.shape))  # [pos, head, d_head]
        return rec("hook_z_gated", z * sigmoid(g))

    def z_out_recorded(self, acts, p, z):
        return acts[p + "hook_z_gated"]

    def d_z_out(self, cfg, w: GatedWeights, dz_out, acts, p, grads, x):
        g = acts[p + "hook_gate"]
        s = sigmoid(g)
        dz = dz_out * s
        dg = dz_out * acts[p + "hook_z"] * s * (1 - s)  # [..., pos, head, d_head]
        dx, dW, db = d_affine(dg.reshape(*dg.shape[:-2], -1), x, w.gate.W)
        grads[p + "W_G"] = dW.reshape(x.shape[-1], cfg.n_heads, -1).transpose(1, 0, 2)
        grads[p + "b_G"] = db.reshape(cfg.n_heads, -1)
        return dz, dx

    def needed(self, cfg) -> tuple[str, ...]:
        return (*super().needed(cfg), "hook_gate", "hook_z_gated")

    def block_words(self, cfg) -> str:
        return "an output gate on each head's weighted sum"

    def macs(self, cfg, n_new: int, n_seen: int) -> int:
        return super().macs(cfg, n_new, n_seen) + n_new * cfg.d_model * cfg.n_heads * cfg.d_head


SOFTMAX = SoftmaxAttention()
GATED = GatedAttention()
SINKS = SinkAttention()
