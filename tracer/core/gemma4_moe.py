"""Gemma 4's MLP with experts beside it (`enable_moe_block`: Gemma 4 26B-A4B) as one block entry: every
layer has a dense GeGLU MLP *and* a mixture of experts, side by side, each with its own norms, their sum
normalized once more before it joins the residual stream:

    dense  = post_1( GeGLU(ln2(x)) )                                     # the block's ln2: pre_feedforward_layernorm
    routed = post_2( Σ_j weight_j · E_j(pre_2(x)) )                      # the router reads x itself:
    weights: softmax(RMS(x) · scale / √d_model · W_router), the k best, renormalized, × the expert's own scale
    mlp(x) = dense + routed                                              # then the block's ln2_post and the residual

The experts are `tracer.core.experts`' routed experts (router "softmax_topk" with `norm_topk`, middle
"geglu"); what differs is the router's input (the stream x, RMS-normalized without a gain, times its
`router_scale` / √d_model: recorded as `mlp.router_in.*`), the experts' input (`pre_2(x)`:
`mlp.experts_pre.*`), the per-expert scale on the weights (`expert_scale`), and the dense MLP beside
them (parameters `mlp.dense.*`, `dense_d_mlp` wide). Recorded: the dense MLP's `hook_pre` / `hook_pre_linear`
/ `hook_post` (as any dense MLP's) and its output `hook_dense_out`, the norms' `hook_scale` / `hook_normalized`, the
experts' names as every routed model records them, their weighted sum `hook_experts_out`.
The entry reads x before ln2 from `Span.stream` and leaves x's gradient from the router and the experts'
norm in `Span.d_stream` going backwards. Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .affine import Affine
from .derivatives import d_affine, d_geglu
from .equations import geglu
from .experts import ROUTERS, ExpertsWeights, RoutedExperts
from .hooks import h
from .mlps import _GATED, DenseAmongExperts, GEGLU
from .record import Recorder
from .sublayer import Span, d_norm, norm

NORMS = ("dense_post", "router_in", "experts_pre", "experts_post")  # the entry's own norms (`router_in` without a gain)
_NORM_HOOKS = {f"{n}.{k}": h(a, "mlp") for n in NORMS for k, a in (("hook_scale", "pos one"), ("hook_normalized", "pos d_model"))}


class DenseBesideExperts(DenseAmongExperts):
    """The dense GeGLU MLP beside the experts: `dense_d_mlp` wide (d_mlp is each expert's)."""


DENSE = DenseBesideExperts("geglu_beside_experts", geglu, d_geglu, _GATED, GEGLU.title, GEGLU.name, GEGLU.plain,
                           GEGLU.steps)


@dataclass
class Gemma4MoeWeights(ExpertsWeights):
    """The experts (as every routed kind's), and what Gemma 4 adds: the dense MLP's weights, the norms'
    gains (`router_in`'s: router_scale / √d_model) and the per-expert scale."""

    dense: object = None  # `tracer.core.mlps.MlpWeights`
    gains: dict | None = None  # norm name → (gain [d_model], None)
    expert_scale: np.ndarray | None = None  # [expert]


class Gemma4Moe(RoutedExperts):
    """A dense GeGLU MLP and routed GeGLU experts side by side (Gemma 4's `enable_moe_block`)."""

    key = "geglu_and_experts"
    title = "GeGLU MLP beside a mixture of experts"
    name = "MLP and experts"
    plain = ("a small gated network works on each token, and beside it a router sends the token to a few of many "
             "small networks (the experts); the two results are added")
    example = {"n_experts": 4, "experts_per_token": 2, "dense_d_mlp": 6, "router": "softmax_topk", "norm_topk": True,
               "expert_mlp": "geglu", "norm": "rms"}
    hooks = {  # in the order `run` records them: the router's, the experts' part, then the dense MLP's
        **{k: v for k, v in _NORM_HOOKS.items() if k.startswith("router_in.")},
        "hook_router_logits": RoutedExperts.hooks["hook_router_logits"],
        **{k: v for k, v in _NORM_HOOKS.items() if k.startswith("experts_pre.")},
        **{n: hk for n, hk in RoutedExperts.hooks.items() if n.startswith("hook_expert_")},
        "hook_experts_out": h("pos d_model", "mlp"),
        **{k: v for k, v in _NORM_HOOKS.items() if k.startswith("experts_post.")},
        **{n: h("pos d_dense", "mlp") for n in DENSE.hooks},  # the dense MLP's hook_pre, hook_pre_linear, hook_post
        "hook_dense_out": h("pos d_model", "mlp"),
        **{k: v for k, v in _NORM_HOOKS.items() if k.startswith("dense_post.")},
    }

    steps = (("mlp.hook_pre", "gate", "GeGLU MLP beside the experts: gate = ln2(x)·W_gate ({shape})"),
             ("mlp.hook_pre_linear", "up", "up = ln2(x)·W_in ({shape})"),
             ("mlp.hook_post", "post", "GELU(gate) ⊙ up (GELU with the tanh approximation)"))

    def width(self, cfg) -> int:
        """The dense MLP's width (the walkthrough's shapes of its steps)."""
        return cfg.dense_d_mlp

    def reads(self, x: str) -> tuple[str, str]:
        return "router_in(x)", "experts_pre(x)"

    def check(self, cfg) -> None:
        super().check(cfg)
        from ..errors import TracerError, is_whole

        if not is_whole(cfg.dense_d_mlp, 1):
            raise TracerError(f"config: dense_d_mlp must be a whole number ≥ 1 for {self.key}, got {cfg.dense_d_mlp!r}")
        if cfg.shared_d_mlp or cfg.dense_layers or cfg.router_bias or cfg.expert_bias:
            raise TracerError(f"config: {self.key} has no shared expert, dense_layers or biases (got shared_d_mlp "
                              f"{cfg.shared_d_mlp!r}, dense_layers {cfg.dense_layers!r})")
        if cfg.norm_kind.bias:
            raise TracerError(f"config: {self.key}'s own norms are RMS norms (a gain, no bias); set norm to rms")

    def axes(self, cfg):
        return {**super().axes(cfg), "d_dense": (cfg.dense_d_mlp,)}

    def shapes(self, cfg, l: int = 0) -> dict[str, tuple[int, ...]]:
        d = cfg.d_model
        experts = {n: s for n, s in super().shapes(cfg, l).items() if n != "W_router"}
        return {**{"dense." + n: s for n, s in DENSE.shapes(cfg, l).items()}, "dense_post.w": (d,),
                "W_router": (d, cfg.n_experts), "router_scale": (d,), "expert_scale": (cfg.n_experts,),
                "experts_pre.w": (d,), **experts, "experts_post.w": (d,)}

    def layout(self, cfg, params: dict, l: int, fused=None) -> Gemma4MoeWeights:
        p = f"blocks.{l}.mlp."
        dense = DENSE.layout(cfg, {p + n: params[p + "dense." + n] for n in DENSE.shapes(cfg, l)}, l)
        gain = params[p + "router_scale"] * np.asarray(cfg.d_model ** -0.5, dtype=params[p + "router_scale"].dtype)
        gains = {"dense_post": (params[p + "dense_post.w"], None), "router_in": (gain, None),  # (gain, no bias)
                 "experts_pre": (params[p + "experts_pre.w"], None), "experts_post": (params[p + "experts_post.w"], None)}
        return Gemma4MoeWeights(self, Affine(params[p + "W_router"], None), params[p + "W_gate"], params[p + "W_in"],
                                params[p + "W_out"], dense=dense, gains=gains, expert_scale=params[p + "expert_scale"])

    # -- the passes

    def run(self, cfg, w: Gemma4MoeWeights, x: np.ndarray, rec: Recorder, span: Span) -> np.ndarray:  # [pos, d_model] → same
        stream = span.stream  # [pos, d_model]: x before ln2
        lead = stream.shape[:-1]
        r = norm(cfg, stream, w.gains["router_in"], rec.scope("router_in"))  # [pos, d_model]: RMS(x) · scale / √d_model
        logits = rec("hook_router_logits", w.router(r))  # [pos, expert]
        xe = norm(cfg, stream, w.gains["experts_pre"], rec.scope("experts_pre"))  # [pos, d_model]
        routed = self.routed(cfg, w, xe.reshape(-1, xe.shape[-1]), logits, lead, rec)  # [rows, d_model]
        routed = rec("hook_experts_out", routed.reshape(stream.shape))  # [pos, d_model]
        routed = norm(cfg, routed, w.gains["experts_post"], rec.scope("experts_post"))  # [pos, d_model]
        out = rec("hook_dense_out", DENSE.run(cfg, w.dense, x, rec, span))  # [pos, d_model]: GeGLU(ln2(x))
        return norm(cfg, out, w.gains["dense_post"], rec.scope("dense_post")) + routed  # [pos, d_model]

    def weigh(self, cfg, w: Gemma4MoeWeights, chosen: np.ndarray, weights: np.ndarray) -> np.ndarray:  # [rows, k] → [rows, k]
        return weights * w.expert_scale[chosen]  # the chosen experts' own scales

    def d_weigh(self, cfg, w: Gemma4MoeWeights, dweights: np.ndarray, chosen: np.ndarray, logits: np.ndarray,
                dW: dict) -> np.ndarray:  # [rows, k] → [rows, k]
        _, before = ROUTERS[cfg.router].route(cfg, logits)  # [rows, k]: the weights before the scale
        dW["expert_scale"] = np.zeros(w.expert_scale.shape, dtype=dweights.dtype)
        np.add.at(dW["expert_scale"], chosen, dweights * before)
        return dweights * w.expert_scale[chosen]

    def backward(self, cfg, w: Gemma4MoeWeights, dy: np.ndarray, acts, p: str, grads: dict, x: np.ndarray,
                 span: Span) -> np.ndarray:  # [..., pos, d_model] → [..., pos, d_model]
        stream = span.stream  # [..., pos, d_model]
        rows = (-1, stream.shape[-1])
        dW: dict = {n: np.zeros(s, dtype=x.dtype) for n, s in RoutedExperts.shapes(self, cfg).items()
                    if n in ("W_gate", "W_in", "W_out")}
        g = {}  # the norms' gains' gradients
        droutes = d_norm(cfg, dy, w.gains["experts_post"], acts, p + "experts_post.", g, "experts_post")  # [..., pos, d_model]
        xe = w.gains["experts_pre"][0] * acts[p + "experts_pre.hook_normalized"]  # [..., pos, d_model]
        dxe, dlogits = self.d_routed(cfg, w, droutes.reshape(rows), acts, p, xe.reshape(rows), dW)  # [rows, ·] ×2
        r = w.gains["router_in"][0] * acts[p + "router_in.hook_normalized"]  # [..., pos, d_model]
        dr, dW["W_router"], _ = d_affine(dlogits, r.reshape(rows), w.router.W)  # [rows, d_model]
        d_stream = d_norm(cfg, dr.reshape(stream.shape), w.gains["router_in"], acts, p + "router_in.", g, "router_in")
        span.d_stream = d_stream + d_norm(cfg, dxe.reshape(stream.shape), w.gains["experts_pre"], acts, p + "experts_pre.",
                                          g, "experts_pre")
        dout = d_norm(cfg, dy, w.gains["dense_post"], acts, p + "dense_post.", g, "dense_post")
        dense: dict = {}  # the dense MLP's gradients under its own names (W_gate, …), here `dense.W_gate`, …
        dx = DENSE.backward(cfg, w.dense, dout, acts, p, dense, x, span)
        grads.update({p + "dense." + n[len(p):]: v for n, v in dense.items()})
        dW["router_scale"] = g.pop("router_in.w") * np.asarray(cfg.d_model ** -0.5, dtype=x.dtype)
        for n, v in {**dW, **g}.items():
            grads[p + n] = v
        return dx

    def needed(self, cfg) -> tuple[str, ...]:
        return ("hook_pre", "hook_pre_linear", "hook_post", "hook_router_logits", "hook_expert_*", *(f"{n}.hook_*" for n in NORMS))

    def records(self, cfg, name: str) -> bool:
        return name in self.hooks

    def block_words(self, cfg) -> str:
        return f"a GeGLU MLP ({cfg.dense_d_mlp:,} wide) beside " + super().block_words(cfg)

    def expert_words(self, cfg) -> str:
        return ("gate = x·W_gate[{e}], up = x·W_in[{e}], GeGLU: GELU(gate) ⊙ up, × W_out[{e}] (x: the stream through "
                "its own norm)")

    def route_words(self, cfg) -> str:
        return (super().route_words(cfg) + ", each weight × its expert's own scale; the router reads the stream "
                "through an RMS norm of its own (× scale / √d_model), not the MLP's input")

    def active_params(self, cfg, l: int = 0) -> int:
        f, d = cfg.d_mlp, cfg.d_model
        return self.n_params(cfg, l) - (cfg.n_experts - cfg.experts_per_token) * 3 * d * f

    def macs(self, cfg, n_new: int, n_seen: int) -> int:
        d, f, k = cfg.d_model, cfg.d_mlp, cfg.experts_per_token
        return n_new * (d * cfg.n_experts + 3 * k * d * f + 3 * d * cfg.dense_d_mlp)

    def record_bytes(self, cfg, n_new: int, n_seen: int) -> int:
        d, f, k = cfg.d_model, cfg.d_mlp, cfg.experts_per_token
        return n_new * (cfg.n_experts + 2 * k + 3 * k * f + k * d + 3 * cfg.dense_d_mlp + 10 * d + 4)


GEMMA4_MOE = Gemma4Moe()
