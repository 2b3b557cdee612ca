"""Gemma 4's attention as a block entry, written as its differences from softmax attention
(`tracer.core.attention.SoftmaxAttention`, whose scores, softmax, weighted sum and W_O it keeps):

  - every layer's values are RMS-normalized without a gain, each head's d_head numbers ÷ their root mean
    square (`v_norm.hook_scale` [pos, kv_head, 1]; `hook_v` holds the normalized values: what the pattern
    weighs);
  - on the layers `cfg.k_eq_v` lists (Gemma 4's full layers, `attention_k_eq_v`) there is no W_V: the
    values are the keys' projection, taken before the K norm (K = V);
  - a layer whose `cfg.kv_source` is an earlier layer (Gemma 4's last `num_kv_shared_layers`) has no W_K,
    W_V or K norm: it attends with that layer's keys and values — from this pass and, in a generation, from
    that layer's cache (it keeps none of its own: its cache is 0 bytes, `SharedKV`). It records them for
    its new positions as its own `hook_k`, `hook_v` and `hook_rot_k`, so that whatever reads a layer's K
    and V reads what it attended with. Going backwards, their gradients are handed back to that layer.

The scores are not divided by anything (`scale_scores` false: Gemma 4's scaling is 1, Q and K being
normalized). Transformers' reference: `Gemma4TextAttention` (models/gemma4/modeling_gemma4.py).
Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .affine import Affine
from .attention import AttentionWeights, SoftmaxAttention, qk_norm
from .derivatives import d_affine, d_rms_normalize
from .equations import rms_normalize
from .hooks import h
from .layer_sizes import kv_source_of
from .qkv import fuse_qkv_weights
from .record import Recorder
from .sublayer import Span


@dataclass
class Gemma4Weights(AttentionWeights):
    layer: int = 0  # this layer
    source: int = 0  # the layer whose keys and values it attends with: itself, or an earlier one (KV sharing)
    keys_as_values: bool = False  # no W_V: the values are the keys' projection (K = V)


class SharedKV:
    """What a layer that attends with an earlier layer's keys and values keeps of its own: nothing
    (`source`'s cache holds them)."""

    nbytes = 0

    def __init__(self, source: int):
        self.source = source


class Gemma4Attention(SoftmaxAttention):
    key = "gemma4"
    title = "Gemma 4's attention"
    hooks = {k: v for name, hook in SoftmaxAttention.hooks.items()  # the value norm's scale, just before the values
             for k, v in ((("v_norm.hook_scale", h("pos kv one", "qkv")),) if name == "hook_v" else ()) + ((name, hook),)}
    example = {"scale_scores": False, "k_eq_v": (0,)}  # (with its norms and rotation: tests/test_family_gemma4.py)

    @staticmethod
    def _keys_as_values(cfg, l: int) -> bool:
        return cfg.k_eq_v is not None and l in cfg.k_eq_v

    def _own(self, cfg, l: int) -> tuple[str, ...]:
        """The projections layer l has of its own: Q, K, V; Q, K (K = V); or Q alone (shared keys and values)."""
        return ("Q",) if kv_source_of(cfg, l) != l else ("Q", "K") if self._keys_as_values(cfg, l) else ("Q", "K", "V")

    def shapes(self, cfg, l: int) -> dict[str, tuple[int, ...]]:
        own = self._own(cfg, l)
        gone = {f"{p}_{m}" for m in "KV" if m not in own for p in "Wb"} | ({"k_norm.w", "k_norm.b"} if "K" not in own else set())
        return {k: s for k, s in super().shapes(cfg, l).items() if k not in gone}

    def layout(self, cfg, params: dict, l: int, fused=None) -> Gemma4Weights:
        a = f"blocks.{l}.attn."
        own = self._own(cfg, l)
        if len(own) == 3:
            W = fuse_qkv_weights(params[a + "W_Q"], params[a + "W_K"], params[a + "W_V"])
        else:  # [d_model, (head (+ kv_head))·d_head]: W_Q's heads side by side (then W_K's)
            W = np.concatenate([params[a + f"W_{m}"].swapaxes(0, 1).reshape(cfg.d_model, -1) for m in own], axis=1)
        b = np.concatenate([params[a + f"b_{m}"].reshape(-1) for m in own])
        W_O = params[a + "W_O"]  # [head, d_head, d_model]
        gain = lambda m: (params[a + f"{m}_norm.w"], params.get(a + f"{m}_norm.b")) if cfg.qk_norm_kind.on and (  # noqa: E731
            m == "q" or "K" in own) else None
        return Gemma4Weights(self, Affine(W, b), W_O, Affine(W_O.reshape(-1, W_O.shape[-1]), params[a + "b_O"]),
                             q_norm=gain("q"), k_norm=gain("k"), window=cfg.window_of(l), layer=l,
                             source=kv_source_of(cfg, l), keys_as_values=self._keys_as_values(cfg, l))

    # -- the pass

    def project(self, cfg, w: Gemma4Weights, x: np.ndarray, rec: Recorder, span: Span):
        H, KV, dh = cfg.n_heads, cfg.kv_heads, cfg.d_head
        lead = x.shape[:-1]
        proj = w.qkv(x)  # [pos, (head + 2·kv_head)·d_head], fewer columns without W_V or W_K
        q = rec("hook_q", proj[..., : H * dh].reshape(*lead, H, dh))  # [pos, head, d_head]
        if w.source != w.layer:
            return self._shared(cfg, w, q, rec, span)
        k = rec("hook_k", proj[..., H * dh: (H + KV) * dh].reshape(*lead, KV, dh))  # [pos, kv_head, d_head]
        v = k if w.keys_as_values else proj[..., (H + KV) * dh:].reshape(*lead, KV, dh)  # K = V: the keys' projection
        v, scale = rms_normalize(v, cfg.ln_eps)  # [pos, kv_head, d_head]: each value ÷ its root mean square, no gain
        rec("v_norm.hook_scale", scale)
        v = rec("hook_v", v)
        k_proj = k
        if w.q_norm is not None:
            q, k = qk_norm(cfg, q, w.q_norm, rec.scope("q_norm")), qk_norm(cfg, k, w.k_norm, rec.scope("k_norm"))
        if span.turn is not None:
            rotate = cfg.position_kind.forward
            q, k = rec("hook_rot_q", rotate(q, *span.turn)), rec("hook_rot_k", rotate(k, *span.turn))
        k_new, v_new = k, v
        if span.cache is not None:
            k, v = span.cache.extend(k, v)  # [key_pos, kv_head, d_head]
        if span.board is not None:  # for the layers that attend with these keys and values
            span.board[w.layer] = (k_proj, k_new, v_new, k, v)
        return q, k, v

    def _shared(self, cfg, w: Gemma4Weights, q: np.ndarray, rec: Recorder, span: Span):
        """Q turned as this layer's own; the keys and values layer `source` left on the pass's board (every
        position so far: its cache's, then this pass's), recorded for this pass's positions."""
        k_proj, k_new, v_new, k, v = span.board[w.source]
        n = k_new.shape[-3]
        rec("hook_k", k_proj)
        got = rec("hook_v", v_new)
        v = v if got is v_new else np.concatenate([v[..., : v.shape[-3] - n, :, :], got], axis=-3)
        if w.q_norm is not None:
            q = qk_norm(cfg, q, w.q_norm, rec.scope("q_norm"))
        if span.turn is not None:
            q = rec("hook_rot_q", cfg.position_kind.forward(q, *span.turn))
            got = rec("hook_rot_k", k_new)
            k = k if got is k_new else np.concatenate([k[..., : k.shape[-3] - n, :, :], got], axis=-3)
        return q, k, v

    def cache_row(self, cfg, l: int = 0) -> int:
        return 0 if kv_source_of(cfg, l) != l else super().cache_row(cfg, l)

    def new_cache(self, cfg, capacity: int, owner, layer: int = 0):
        source = kv_source_of(cfg, layer)
        return SharedKV(source) if source != layer else super().new_cache(cfg, capacity, owner, layer)

    # -- backward

    def d_project(self, cfg, w: Gemma4Weights, dq, dk, dv, acts, p: str, grads: dict, x: np.ndarray,
                  span: Span) -> np.ndarray:
        H, KV, dh, d = cfg.n_heads, cfg.kv_heads, cfg.d_head, cfg.d_model
        board = span.board if span.board is not None else {}
        if w.source != w.layer:  # the keys and values were layer `source`'s: their gradients go back to it
            before = board.get(("d_kv", w.source))
            board[("d_kv", w.source)] = (dk, dv) if before is None else (before[0] + dk, before[1] + dv)
            dq, _ = self.d_turn(cfg, w, dq, None, acts, p, grads, span)
            parts = (dq,)
        else:
            later = board.pop(("d_kv", w.layer), None)  # what the layers sharing these keys and values sent back
            if later is not None:
                dk, dv = dk + later[0], dv + later[1]
            dq, dk = self.d_turn(cfg, w, dq, dk, acts, p, grads, span)
            dv = d_rms_normalize(dv, acts[p + "hook_v"], acts[p + "v_norm.hook_scale"])  # back through the value norm
            parts = (dq, dk + dv) if w.keys_as_values else (dq, dk, dv)
        flat = np.concatenate([g.reshape(*g.shape[:-2], -1) for g in parts], axis=-1)  # [..., pos, columns]
        dx, dW, db = d_affine(flat, x, w.qkv.W)
        at = 0
        for m, heads in zip(self._own(cfg, w.layer), (H, KV, KV)):  # each head's [d_model, d_head]
            grads[p + f"W_{m}"] = dW[:, at: at + heads * dh].reshape(d, heads, dh).swapaxes(0, 1)
            grads[p + f"b_{m}"] = db[at: at + heads * dh].reshape(heads, dh)
            at += heads * dh
        return dx

    # -- words

    def vector_words(self, cfg, l: int) -> dict[str, tuple[str, str]]:
        if kv_source_of(cfg, l) != l:
            return {"K": ("{L}_K = layer {source}'s", "this layer has no W_K or W_V: it attends with the keys and values "
                                                      "layer {source} computed (KV sharing)"),
                    "V": ("{L}_V = layer {source}'s", "")}
        if self._keys_as_values(cfg, l):
            return {"V": ("{L}_V = RMS({src}·W_K{slice})", "no W_V in this layer (K = V): the value is the key's projection "
                                                           "before the K norm, ÷ its root mean square (here {scale}), no gain")}
        return {"V": ("{L}_V = RMS({src}·W_V{slice})", "the value ÷ its root mean square (here {scale}), no gain (Gemma 4's "
                                                       "value norm)")}

    def block_words(self, cfg) -> str:
        """The header's: the value norm, K = V, the shared keys and values, the heads of other sizes."""
        said = ["values normalized (÷ root mean square, no gain)"]
        if cfg.k_eq_v:
            said.append(f"K = V (no W_V) on layer{'s' * (len(cfg.k_eq_v) > 1)} {', '.join(map(str, cfg.k_eq_v))}")
        shared = [(l, s) for l, s in enumerate(cfg.kv_source or ()) if s != l]
        if shared:
            said.append("shared keys and values: " + ", ".join(f"layer {l} uses layer {s}'s" for l, s in shared))
        other = sorted({(cfg.layer(l).d_head, cfg.layer(l).kv_heads) for l in range(cfg.n_layers)} - {(cfg.d_head, cfg.kv_heads)})
        for dh, kv in other:
            layers = [l for l in range(cfg.n_layers) if (cfg.layer(l).d_head, cfg.layer(l).kv_heads) == (dh, kv)]
            said.append(f"d_head {dh} with {kv} key/value head{'s' * (kv > 1)} on layer{'s' * (len(layers) > 1)} "
                        f"{', '.join(map(str, layers))}")
        return "; ".join(said)


GEMMA4 = Gemma4Attention()
