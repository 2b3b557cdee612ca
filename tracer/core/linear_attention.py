"""Linear attention with a recurrent state (Gated DeltaNet: Qwen3.5, Qwen3-Next) as a block entry.

Where softmax attention keeps every earlier token's key and value and scores them all, this layer keeps
one state matrix S [d_k, d_v] per value head and updates it with each token: decay, then a delta-rule
write of the token's key and value, then a read-out with its query —

    S ← S · exp(g_t)                       (decay: g = −exp(A_log) · softplus(x·W_decay + dt_bias) ≤ 0)
    S ← S + k_t ⊗ β_t (v_t − Sᵀk_t)        (write: β = sigmoid(x·W_beta), the new value minus what S recalls)
    o_t = Sᵀ q_t / √d_k                    (read)

with q, k and v from one projection through a short causal convolution (each channel mixes its last
`linear_conv` inputs, then SiLU), q and k L2-normalized, the key heads shared by groups of value heads,
and the read-out normalized per head and gated (RMS(o) · w ⊙ SiLU(x·W_Z)) before W_O. The state is the
same size for a 6-token and a 6,000-token prompt: what the KV cache is to softmax attention, S (and the
convolution's last inputs) is here, carried from pass to pass (`new_cache`). Transformers' reference is
`torch_recurrent_gated_delta_rule` (models/qwen3_5); llama.cpp's `build_delta_net`.

Recorded (in `blocks.{l}.attn.`): `hook_qkv_pre` [pos, conv] (x·W_Q|W_K|W_V before the convolution),
`hook_qkv_conv` (after it and SiLU), `hook_q`, `hook_k` [pos, k_head, d_k] (L2-normalized), `hook_v`
[pos, v_head, d_v], `hook_beta` and `hook_decay` (g, the log of the decay factor) [pos, v_head],
`hook_state` [pos, v_head, d_k, d_v] (S after each position: a recipe, recomputed from the recorded values
by the same recurrence when read), `hook_z` [pos, v_head, d_v] (the read-out), `hook_gate_z` (x·W_Z) and
`hook_z_gated` (after the gated norm). The prefill runs the token-by-token recurrence (vectorized over
heads). Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import TracerError, is_whole
from .affine import Affine
from .delta_rule import causal_conv, delta_rule, gated_norm, grouped, l2_normalize, silu, softplus, states_of
from .equations import merge_heads, sigmoid
from .hooks import h
from .linear_backward import backward as linear_backward
from .record import Recorder
from .store import Later
from .sublayer import Span, Sublayer

# --------------------------------------------------------------------------- the layout and the state


@dataclass
class LinearWeights:
    kind: "LinearAttention"
    qkv: Affine  # [d_model, conv]: the q, k and v channels side by side (no bias)
    z: Affine  # [d_model, v_head·d_v]
    beta: np.ndarray  # [d_model, v_head]
    decay: np.ndarray  # [d_model, v_head]
    conv: np.ndarray  # [conv, K]
    A_log: np.ndarray  # [v_head]
    dt_bias: np.ndarray  # [v_head]
    norm_w: np.ndarray  # [d_v]
    W_O: np.ndarray  # [v_head, d_v, d_model]
    out: Affine  # [v_head·d_v, d_model]


class LayerState:
    """One layer's recurrent state and the convolution's last inputs, carried from pass to pass: the same
    size whatever the length of the prompt."""

    def __init__(self, owner, cfg):
        self.owner = owner
        conv = 2 * cfg.linear_k_heads * cfg.linear_d_k + cfg.linear_v_heads * cfg.linear_d_v
        self.tail = np.zeros((cfg.linear_conv - 1, conv), dtype=cfg.dtype)  # [K − 1, conv]
        self.S = np.zeros((cfg.linear_v_heads, cfg.linear_d_k, cfg.linear_d_v), dtype=cfg.dtype)  # [v_head, d_k, d_v]

    @property
    def nbytes(self) -> int:
        return self.tail.nbytes + self.S.nbytes


# --------------------------------------------------------------------------- the entry


class LinearAttention(Sublayer):
    key = "linear_attention"
    scope = "attn"
    title = "linear attention (Gated DeltaNet: a state instead of a KV cache)"
    shown_as = "state"
    example = {"layer_types": None, "linear_k_heads": 1, "linear_v_heads": 2, "linear_d_k": 2, "linear_d_v": 3,
               "linear_conv": 3}
    hooks = {
        "hook_qkv_pre": h("pos conv", "qkv"),
        "hook_qkv_conv": h("pos conv", "qkv"),
        "hook_q": h("pos k_head d_k", "qkv"),
        "hook_k": h("pos k_head d_k", "qkv"),
        "hook_v": h("pos v_head d_v", "qkv"),
        "hook_beta": h("pos v_head", "scores"),
        "hook_decay": h("pos v_head", "scores"),
        "hook_state": h("pos v_head d_k d_v", "softmax"),
        "hook_z": h("pos v_head d_v", "sum"),
        "hook_gate_z": h("pos v_head d_v", "heads"),
        "hook_z_gated": h("pos v_head d_v", "heads"),
    }
    hold = {"attn.hook_state": (Later(),)}  # a recipe of the same recurrence, computed when read

    def check(self, cfg) -> None:
        for name in ("linear_k_heads", "linear_v_heads", "linear_d_k", "linear_d_v"):
            if not is_whole(getattr(cfg, name), 1):
                raise TracerError(f"config: {name} must be a whole number ≥ 1 for linear attention, got {getattr(cfg, name)!r}")
        if not is_whole(cfg.linear_conv, 1):
            raise TracerError(f"config: linear_conv (the convolution's kernel) must be a whole number ≥ 1, got {cfg.linear_conv!r}")
        if cfg.linear_v_heads % cfg.linear_k_heads:
            raise TracerError(f"config: linear_v_heads {cfg.linear_v_heads} is not a multiple of linear_k_heads "
                              f"{cfg.linear_k_heads} (each key head serves the same number of value heads)")

    def axes(self, cfg):
        return {"k_head": (cfg.linear_k_heads,), "v_head": (cfg.linear_v_heads,), "d_k": (cfg.linear_d_k,),
                "d_v": (cfg.linear_d_v,), "conv": (2 * cfg.linear_k_heads * cfg.linear_d_k + cfg.linear_v_heads * cfg.linear_d_v,)}

    def shapes(self, cfg, l: int = 0) -> dict[str, tuple[int, ...]]:
        d, kh, vh, dk, dv = cfg.d_model, cfg.linear_k_heads, cfg.linear_v_heads, cfg.linear_d_k, cfg.linear_d_v
        conv = 2 * kh * dk + vh * dv
        return {"W_Q": (kh, d, dk), "W_K": (kh, d, dk), "W_V": (vh, d, dv), "W_Z": (vh, d, dv), "W_beta": (d, vh),
                "W_decay": (d, vh), "W_conv": (conv, cfg.linear_conv), "A_log": (vh,), "dt_bias": (vh,),
                "out_norm.w": (dv,), "W_O": (vh, dv, d)}

    def layout(self, cfg, params: dict, l: int, fused=None) -> LinearWeights:
        a = f"blocks.{l}.attn."
        flat = lambda W: W.transpose(1, 0, 2).reshape(W.shape[1], -1)  # noqa: E731  [heads, d, x] → [d, heads·x]
        qkv = np.concatenate([flat(params[a + "W_Q"]), flat(params[a + "W_K"]), flat(params[a + "W_V"])], axis=1)
        W_O = params[a + "W_O"]
        return LinearWeights(self, Affine(qkv, None), Affine(flat(params[a + "W_Z"]), None), params[a + "W_beta"],
                             params[a + "W_decay"], params[a + "W_conv"], params[a + "A_log"], params[a + "dt_bias"],
                             params[a + "out_norm.w"], W_O, Affine(W_O.reshape(-1, W_O.shape[-1]), None))

    def _split(self, cfg, c: np.ndarray):  # [pos, conv] → q, k [pos, k_head, d_k], v [pos, v_head, d_v]
        kd = cfg.linear_k_heads * cfg.linear_d_k
        n = c.shape[0]
        return (c[:, :kd].reshape(n, -1, cfg.linear_d_k), c[:, kd: 2 * kd].reshape(n, -1, cfg.linear_d_k),
                c[:, 2 * kd:].reshape(n, -1, cfg.linear_d_v))

    def run(self, cfg, w: LinearWeights, x: np.ndarray, rec: Recorder, span: Span) -> np.ndarray:  # [pos, d_model] → same
        if x.ndim != 2:
            raise TracerError("linear attention runs one sequence at a time (no batch axis)")
        state = span.cache
        vh = cfg.linear_v_heads
        pre = rec("hook_qkv_pre", w.qkv(x))  # [pos, conv]
        tail = state.tail if state is not None else np.zeros((cfg.linear_conv - 1, pre.shape[1]), dtype=pre.dtype)
        conv = rec("hook_qkv_conv", silu(causal_conv(pre, w.conv, tail)))  # [pos, conv]
        q, k, v = self._split(cfg, conv)
        q, k, v = rec("hook_q", l2_normalize(q)[0]), rec("hook_k", l2_normalize(k)[0]), rec("hook_v", v)
        beta = rec("hook_beta", sigmoid(x @ w.beta))  # [pos, v_head]
        g = rec("hook_decay", -np.exp(w.A_log) * softplus(x @ w.decay + w.dt_bias))  # [pos, v_head] ≤ 0
        S0 = state.S if state is not None else np.zeros((vh, cfg.linear_d_k, cfg.linear_d_v), dtype=x.dtype)
        o, S_last = delta_rule(grouped(q, vh), grouped(k, vh), v, beta, g, S0, every=False)  # [pos, v_head, d_v], [v_head, d_k, d_v]
        rec.later("hook_state", lambda q_, k_, v_, b_, g_, S0_: states_of(grouped(q_, vh), grouped(k_, vh), v_, b_, g_, S0_),
                  q, k, v, beta, g, S0.copy(), shape=(len(q), *S0.shape))
        o = rec("hook_z", o)  # [pos, v_head, d_v]: the read-out
        z = rec("hook_gate_z", w.z(x).reshape(o.shape))  # [pos, v_head, d_v]
        gated = rec("hook_z_gated", self.gated_norm(cfg, o, z, w.norm_w))
        if state is not None:  # carried to the next pass: the convolution's last inputs and the state
            both = np.concatenate([tail, pre], axis=0)
            state.tail = both[len(both) - len(tail):].copy()
            state.S = S_last  # a new array of this pass's
        return w.out(merge_heads(gated))  # [pos, d_model]

    @staticmethod
    def gated_norm(cfg, o, z, w):
        return gated_norm(o, z, w, cfg.ln_eps)

    def new_cache(self, cfg, capacity: int, owner, layer: int = 0) -> LayerState:
        return LayerState(owner, cfg)

    def n_heads(self, cfg) -> int:
        return cfg.linear_v_heads  # one state per value head; W_O merges their gated read-outs

    def cache_bytes(self, cfg, n: int, l: int = 0) -> int:  # the state and the convolution's last inputs: whatever n is
        conv = 2 * cfg.linear_k_heads * cfg.linear_d_k + cfg.linear_v_heads * cfg.linear_d_v
        numbers = cfg.linear_v_heads * cfg.linear_d_k * cfg.linear_d_v + (cfg.linear_conv - 1) * conv
        return numbers * np.dtype(cfg.dtype).itemsize

    def macs(self, cfg, n_new: int, n_seen: int) -> int:
        d, kh, vh, dk, dv = cfg.d_model, cfg.linear_k_heads, cfg.linear_v_heads, cfg.linear_d_k, cfg.linear_d_v
        proj = n_new * d * (2 * kh * dk + 2 * vh * dv + 2 * vh) + n_new * vh * dv * d
        return proj + n_new * 4 * vh * dk * dv  # the recurrence: decay, recall, write, read

    def record_bytes(self, cfg, n_new: int, n_seen: int) -> int:
        kh, vh, dk, dv = cfg.linear_k_heads, cfg.linear_v_heads, cfg.linear_d_k, cfg.linear_d_v
        return n_new * (2 * (2 * kh * dk + vh * dv) + 2 * kh * dk + 4 * vh * dv + 2 * vh)  # the state is a recipe

    def block_words(self, cfg) -> str:
        return ""  # the header says it with the layers' kinds (`Config.layer_types`)

    # -- backward (through time)

    def backward(self, cfg, w: LinearWeights, dy, acts, p: str, grads: dict, x, span: Span):
        """Back through time, for a pass from the start (a zero state): training and gradient × input."""
        return linear_backward(cfg, w, dy, acts, p, grads, x)

    def needed(self, cfg) -> tuple[str, ...]:
        return ("hook_qkv_pre", "hook_qkv_conv", "hook_q", "hook_k", "hook_v", "hook_beta", "hook_decay", "hook_z",
                "hook_gate_z", "hook_z_gated")


LINEAR = LinearAttention()
