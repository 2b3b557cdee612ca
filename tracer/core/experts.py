"""Routed experts (a mixture of experts) as a block entry: the MLP is many MLPs ("experts"); a router
scores every expert for each token, keeps the top k, and the layer's output is the weighted sum of
those k experts' outputs — "0.41×E3(x) + 0.33×E17(x) + 0.15×E5(x) + 0.11×E30(x)", the shape of the
article's "0.4×A_V + 0.6×B_V" one level up. One entry for every family, as llama.cpp's one
`build_moe_ffn` (src/llama-graph.cpp) serves them all; what differs is a switch of the config:

- the router (`router`): softmax over every expert, then the top k (Mixtral, Qwen-MoE, OLMoE; with
  `norm_topk` the k probabilities renormalized to sum to 1: Mixtral, Qwen3-MoE's norm_topk_prob), or the
  top k scores, then a softmax over those k (gpt-oss); a bias on the router (gpt-oss);
- each expert's middle (`expert_mlp`): SwiGLU, or gpt-oss's clamped SwiGLU, with biases (gpt-oss);
- a shared expert every token also goes through, scaled by its own sigmoid gate (Qwen2-MoE:
  `shared_d_mlp`).

Parameters (in `blocks.{l}.mlp.`): `W_router` [d_model, expert] (`b_router`), the experts stacked:
`W_gate`, `W_in` [expert, d_model, d_mlp], `W_out` [expert, d_mlp, d_model] (`b_gate`, `b_in`
[expert, d_mlp], `b_out` [expert, d_model]); the shared expert's `shared.W_gate`, `shared.W_in`
[d_model, d_shared], `shared.W_out` [d_shared, d_model] and `W_shared_gate` [d_model, 1]. Recorded
(TransformerLens-style names, `tracer.core.hooks`): `hook_router_logits` [pos, expert] (the scores
before any choice), `hook_expert_indices` [pos, k] (the chosen experts, most weight first),
`hook_expert_weights` [pos, k], each chosen expert's `hook_expert_pre` / `hook_expert_pre_linear` /
`hook_expert_post` [pos, k, d_mlp] and its output before weighting, `hook_expert_out`
[pos, k, d_model]; the shared expert's `shared.hook_pre`, `hook_pre_linear`, `hook_post`,
`hook_shared_gate` and `hook_shared_out`. Tokens are gathered per expert (each expert one product over
the tokens sent to it), never looped one by one; a naive per-token, per-expert loop is the tests'
reference. The backward pass holds the top-k choice fixed. Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from ..errors import TracerError, is_whole
from .affine import Affine
from .derivatives import d_affine, d_clamped_swiglu, d_geglu, d_route_softmax_topk, d_route_topk_softmax, d_swiglu
from .equations import clamped_swiglu, geglu, mix, route_softmax_topk, route_topk_softmax, sigmoid, swiglu
from .hooks import h
from .record import Recorder
from .sublayer import Span, Sublayer


@dataclass(frozen=True)
class Router:
    """How the router turns scores into the k chosen experts and their weights: `route(cfg, logits)` →
    (chosen [pos, k], weights [pos, k]); `d_route(cfg, dweights, logits, chosen, weights)` → the
    scores' gradient with the choice held fixed."""

    key: str
    route: object
    d_route: object
    words: str  # what it does, for the walkthrough, of {E} and {k}


ROUTERS = {r.key: r for r in (
    Router("softmax_topk", lambda cfg, logits: route_softmax_topk(logits, cfg.experts_per_token, cfg.norm_topk),
           lambda cfg, dw, logits, chosen, weights: d_route_softmax_topk(dw, logits, chosen, cfg.norm_topk),
           "softmax over the {E} experts' scores, the {k} most probable kept"),
    Router("topk_softmax", lambda cfg, logits: route_topk_softmax(logits, cfg.experts_per_token),
           lambda cfg, dw, logits, chosen, weights: d_route_topk_softmax(dw, weights, chosen, cfg.n_experts),
           "the {k} highest of the {E} experts' scores kept, then a softmax over those {k}"),
)}

# each expert's middle: (forward, backward) of (gate, up), given the config
MIDDLES = {
    "swiglu": lambda cfg: (swiglu, d_swiglu),
    "geglu": lambda cfg: (geglu, d_geglu),  # Gemma 4's experts
    "clamped_swiglu": lambda cfg: (partial(clamped_swiglu, alpha=cfg.swiglu_alpha, limit=cfg.swiglu_limit),
                                   partial(d_clamped_swiglu, alpha=cfg.swiglu_alpha, limit=cfg.swiglu_limit)),
}


@dataclass
class ExpertsWeights:
    """One layer's experts: the router as a product, and the stacked experts' matrices, indexed by
    expert (`W_gate[e]` [d_model, d_mlp]: an array, or anything that expands expert e when indexed)."""

    kind: "RoutedExperts"
    router: Affine  # [d_model, expert], b_router
    W_gate: object  # [expert, d_model, d_mlp]
    W_in: object  # [expert, d_model, d_mlp]
    W_out: object  # [expert, d_mlp, d_model]
    b_gate: object = None  # [expert, d_mlp], or None
    b_in: object = None
    b_out: object = None  # [expert, d_model], or None
    shared: tuple | None = None  # the shared expert: (W_gate, W_in [d_model, d_shared], W_out [d_shared, d_model], W_shared_gate [d_model, 1])
    gate_up: object = None  # [expert, d_model, 2·d_mlp]: gate's and up's columns interleaved (gpt-oss's gate_up_proj,
    b_gate_up: object = None  # whose views W_gate and W_in are): one product gives both (`interleaved`), else None


def interleaved(a, b):  # [..., n] ×2 → [..., 2·n], or None
    """The array whose last axis interleaves a's columns and b's (gate, up, gate, up, …: gpt-oss's gate_up_proj)
    when a and b are its views [..., ::2] and [..., 1::2], so that one product gives both; else None."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.ndim < 1 or a.shape != b.shape \
            or a.dtype != b.dtype or a.strides != b.strides:
        return None
    step = a.dtype.itemsize
    if a.strides[-1] != 2 * step or b.__array_interface__["data"][0] != a.__array_interface__["data"][0] + step:
        return None
    return np.lib.stride_tricks.as_strided(a, (*a.shape[:-1], 2 * a.shape[-1]), (*a.strides[:-1], step), writeable=False)


def _groups(chosen: np.ndarray, n_experts: int):
    """The flat slots [row·k + j] grouped by the expert they chose (stable: each expert's in row order), and
    (expert, start, end) of each group some slot chose: slots `order[start:end]` chose that expert."""
    flat = chosen.reshape(-1)  # [rows·k]
    order = np.argsort(flat, kind="stable")  # [rows·k] slots grouped by expert
    ends = np.cumsum(np.bincount(flat, minlength=n_experts))  # [expert]
    starts = ends - np.bincount(flat, minlength=n_experts)
    return order, [(int(e), int(starts[e]), int(ends[e])) for e in np.flatnonzero(ends - starts)]


def _product(x: np.ndarray, W, b, e: int, out: np.ndarray) -> None:  # [n_e, d_in] → out [n_e, d_out]
    """x times expert e's matrix (plus its bias), written into out, by BLAS: from a contiguous copy when the matrix
    is a view with no contiguous axis (numpy would multiply it in its own loop, many times slower)."""
    m = np.asarray(W[e])
    np.matmul(x, m if m.itemsize in m.strides else np.ascontiguousarray(m), out=out)
    if b is not None:
        out += b[e]


def _products(xs: np.ndarray, groups: list, W, b) -> np.ndarray:  # [slots, d_in] grouped by expert → [slots, d_out]
    """Each group's rows of xs times its expert's matrix (plus its bias): one product per expert, written in place."""
    out = np.empty((xs.shape[0], W.shape[-1]), dtype=xs.dtype)  # [slots, d_out]
    for e, lo, hi in groups:
        _product(xs[lo:hi], W, b, e, out[lo:hi])  # [n_e, d_in] · [d_in, d_out]
    return out


def _gate_and_up(xs: np.ndarray, groups: list, w: ExpertsWeights) -> tuple:  # [slots, d_model] grouped → 2 × [slots, d_mlp]
    """x·W_gate (+ b_gate) and x·W_in (+ b_in) of each group, grouped as xs is. Where gate's and up's columns are
    interleaved in one array (`gate_up`), a group of several rows takes one product for both (the same bits as two:
    each column's sum runs alike), a decode step's one-row groups too (the views' own product, numpy's loop over a
    strided matrix, took 4× transformers' whole step on a gpt-oss shape)."""
    if w.gate_up is None:
        return _products(xs, groups, w.W_gate, w.b_gate), _products(xs, groups, w.W_in, w.b_in)
    gate, up = np.empty((2, xs.shape[0], w.W_gate.shape[-1]), dtype=xs.dtype)  # [slots, d_mlp] each
    for e, lo, hi in groups:
        both = np.empty((hi - lo, 2 * gate.shape[1]), dtype=xs.dtype)  # [n_e, 2·d_mlp]: gate, up, gate, up, …
        _product(xs[lo:hi], w.gate_up, w.b_gate_up, e, both)
        gate[lo:hi], up[lo:hi] = both[:, ::2], both[:, 1::2]
    return gate, up


class RoutedExperts(Sublayer):
    """A mixture of experts: the router, the chosen experts, their weighted sum (and a shared expert)."""

    key = "experts"
    scope = "mlp"
    title = "mixture of experts"
    name = "mixture of experts"
    plain = ("a router sends each token to a few of many small networks (the experts), and their outputs are "
             "added up with the router's weights")
    example = {"n_experts": 4, "experts_per_token": 2}
    hooks = {
        "hook_router_logits": h("pos expert", "mlp", excludes=True),  # −∞: that expert removed from the routing
        "hook_expert_indices": h("pos k", "mlp", whole=True),
        "hook_expert_weights": h("pos k", "mlp"),
        "hook_expert_pre": h("pos k d_mlp", "mlp"),
        "hook_expert_pre_linear": h("pos k d_mlp", "mlp"),
        "hook_expert_post": h("pos k d_mlp", "mlp"),
        "hook_expert_out": h("pos k d_model", "mlp"),
        "shared.hook_pre": h("pos d_shared", "mlp"),
        "shared.hook_pre_linear": h("pos d_shared", "mlp"),
        "shared.hook_post": h("pos d_shared", "mlp"),
        "hook_shared_gate": h("pos one", "mlp"),
        "hook_shared_out": h("pos d_model", "mlp"),
    }

    # -- the config's fields this kind reads

    def check(self, cfg) -> None:
        E, k = cfg.n_experts, cfg.experts_per_token
        if not is_whole(E, 1):
            raise TracerError(f"config: n_experts must be a whole number ≥ 1 for routed experts, got {E!r}")
        if not is_whole(k, 1) or k > E:
            raise TracerError(f"config: experts_per_token must be a whole number from 1 to n_experts ({E}), got {k!r}")
        if E > 4096:
            raise TracerError(f"config: n_experts {E:,} is more than tracer reads (at most 4,096)")
        if cfg.router not in ROUTERS:
            raise TracerError(f"config: router must be one of {', '.join(ROUTERS)}, got {cfg.router!r}")
        if cfg.expert_mlp not in MIDDLES:
            raise TracerError(f"config: expert_mlp must be one of {', '.join(MIDDLES)}, got {cfg.expert_mlp!r}")
        for name in ("swiglu_alpha", "swiglu_limit"):
            v = getattr(cfg, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
                raise TracerError(f"config: {name} must be a number > 0, got {v!r}")
        if cfg.shared_d_mlp is not None and not is_whole(cfg.shared_d_mlp, 1):
            raise TracerError(f"config: shared_d_mlp must be a whole number ≥ 1 or absent, got {cfg.shared_d_mlp!r}")
        dense = cfg.dense_layers
        if dense is not None:
            if not isinstance(dense, (list, tuple)) or not all(is_whole(l, 0) and l < cfg.n_layers for l in dense):
                raise TracerError(f"config: dense_layers must list layers 0–{cfg.n_layers - 1}, got {dense!r}")
            if dense and not is_whole(cfg.dense_d_mlp, 1):
                raise TracerError(f"config: dense_d_mlp must be a whole number ≥ 1 with dense_layers, got {cfg.dense_d_mlp!r}")
        for name in ("norm_topk", "router_bias", "expert_bias"):
            if not isinstance(getattr(cfg, name), bool):
                raise TracerError(f"config: {name} must be true or false, got {getattr(cfg, name)!r}")

    def axes(self, cfg):
        return {"expert": (cfg.n_experts,), "k": (cfg.experts_per_token,), "d_shared": (cfg.shared_d_mlp or 0,),
                "d_mlp": (cfg.d_mlp,)}

    # -- parameters and layout

    def shapes(self, cfg, l: int = 0) -> dict[str, tuple[int, ...]]:
        E, d, f = cfg.n_experts, cfg.d_model, cfg.d_mlp
        out = {"W_router": (d, E), **({"b_router": (E,)} if cfg.router_bias else {}),
               "W_gate": (E, d, f), "W_in": (E, d, f), "W_out": (E, f, d)}
        if cfg.expert_bias:
            out.update({"b_gate": (E, f), "b_in": (E, f), "b_out": (E, d)})
        if cfg.shared_d_mlp:
            s = cfg.shared_d_mlp
            out.update({"shared.W_gate": (d, s), "shared.W_in": (d, s), "shared.W_out": (s, d), "W_shared_gate": (d, 1)})
        return out

    def layout(self, cfg, params: dict, l: int, fused=None) -> ExpertsWeights:
        p = f"blocks.{l}.mlp."
        shared = None
        if cfg.shared_d_mlp:
            shared = tuple(params[p + n] for n in ("shared.W_gate", "shared.W_in", "shared.W_out", "W_shared_gate"))
        W_gate, W_in, b_gate, b_in = (params.get(p + n) for n in ("W_gate", "W_in", "b_gate", "b_in"))
        gate_up, b_gate_up = interleaved(W_gate, W_in), interleaved(b_gate, b_in)
        if (b_gate is not None or b_in is not None) and b_gate_up is None:  # biases apart: products apart
            gate_up = None
        return ExpertsWeights(self, Affine(params[p + "W_router"], params.get(p + "b_router")), W_gate, W_in,
                              params[p + "W_out"], b_gate, b_in, params.get(p + "b_out"), shared, gate_up,
                              b_gate_up if gate_up is not None else None)

    # -- the passes

    def run(self, cfg, w: ExpertsWeights, x: np.ndarray, rec: Recorder, span: Span) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1])  # [rows, d_model] (a batch's positions one after another)
        logits = rec("hook_router_logits", w.router(x2).reshape(*lead, -1))  # [pos, expert]
        y = self.routed(cfg, w, x2, logits, lead, rec)  # [rows, d_model]
        if w.shared is not None:
            y = y + self.shared(cfg, w, x2, lead, rec)
        return y.reshape(x.shape)

    def routed(self, cfg, w: ExpertsWeights, x2: np.ndarray, logits: np.ndarray, lead: tuple,
               rec: Recorder) -> np.ndarray:  # [rows, d_model], [pos, expert] → [rows, d_model]
        """The router's choice from its recorded scores, the chosen experts on x2, their weighted sum."""
        k, rows = cfg.experts_per_token, x2.shape[0]
        chosen, weights = ROUTERS[cfg.router].route(cfg, logits.reshape(rows, -1))  # [rows, k] ×2
        weights = self.weigh(cfg, w, chosen, weights)  # [rows, k]
        chosen = rec("hook_expert_indices", chosen.reshape(*lead, k)).reshape(rows, k)  # the experts, most weight first
        if chosen.size and not (0 <= chosen.min() and chosen.max() < cfg.n_experts):  # a hook's replacement
            raise TracerError(f"hook on mlp.hook_expert_indices: experts must be 0–{cfg.n_experts - 1}, got "
                              f"{int(chosen.min())}–{int(chosen.max())}")
        chosen = chosen.astype(np.int64, copy=False)
        if not np.isfinite(np.take_along_axis(logits.reshape(rows, -1), chosen, axis=-1)).all():
            raise TracerError(f"fewer than {k} experts are left to route to (the others' scores are −∞): an expert "
                              f"removed from the routing must leave at least experts_per_token")
        weights = rec("hook_expert_weights", weights.reshape(*lead, k)).reshape(rows, k)
        order, groups = _groups(chosen, cfg.n_experts)  # the slots [rows·k] grouped by expert, and the groups
        for W in {id(getattr(W, "stored", W)): W for W in (w.gate_up, w.W_gate, w.W_in, w.W_out) if hasattr(W, "prefetch")}.values():
            W.prefetch([e for e, _, _ in groups])  # a streamed stack: the chosen experts read ahead from the file
        xs = x2[order // k]  # [rows·k, d_model]: each slot's token, grouped by expert (one gather)
        gate, up = np.empty((2, rows * k, cfg.d_mlp), dtype=x2.dtype)  # [rows·k, d_mlp] each: each chosen (token, expert)
        gate[order], up[order] = _gate_and_up(xs, groups, w)  # back to the slots' order
        gate = rec("hook_expert_pre", gate.reshape(*lead, k, -1)).reshape(rows * k, -1)
        up = rec("hook_expert_pre_linear", up.reshape(*lead, k, -1)).reshape(rows * k, -1)
        post = rec("hook_expert_post", MIDDLES[cfg.expert_mlp](cfg)[0](gate, up).reshape(*lead, k, -1)).reshape(rows * k, -1)
        outs = np.empty((rows * k, x2.shape[-1]), dtype=x2.dtype)  # [rows·k, d_model]
        outs[order] = _products(post[order], groups, w.W_out, w.b_out)  # each expert's slots in one product
        outs = rec("hook_expert_out", outs.reshape(*lead, k, -1)).reshape(rows, k, -1)  # [rows, k, d_model]
        return mix(weights.astype(x2.dtype, copy=False), outs)  # [rows, d_model]: Σ_j weight_j · E_j(x)

    def weigh(self, cfg, w: ExpertsWeights, chosen: np.ndarray, weights: np.ndarray) -> np.ndarray:  # [rows, k] → [rows, k]
        """The router's weights as the experts' outputs are multiplied by (a kind may scale them per expert)."""
        return weights

    def d_weigh(self, cfg, w: ExpertsWeights, dweights: np.ndarray, chosen: np.ndarray, logits: np.ndarray,
                dW: dict) -> np.ndarray:  # [rows, k] → [rows, k]
        """Back through `weigh`: the final weights' gradient → the router's (its own parameters' into dW)."""
        return dweights

    def shared(self, cfg, w: ExpertsWeights, x2: np.ndarray, lead: tuple, rec: Recorder) -> np.ndarray:  # [rows, d_model] → same
        """The shared expert (a SwiGLU MLP every token goes through), times sigmoid(x·W_shared_gate)."""
        W_gate, W_in, W_out, W_g = w.shared
        sh = rec.scope("shared")
        post = sh("hook_post", swiglu(sh("hook_pre", (x2 @ W_gate).reshape(*lead, -1)),
                                      sh("hook_pre_linear", (x2 @ W_in).reshape(*lead, -1))))  # [pos, d_shared]
        g = rec("hook_shared_gate", sigmoid((x2 @ W_g).reshape(*lead, 1)))  # [pos, 1]
        out = rec("hook_shared_out", g * (post @ W_out))  # [pos, d_model]
        return out.reshape(x2.shape)

    def backward(self, cfg, w: ExpertsWeights, dy: np.ndarray, acts, p: str, grads: dict, x: np.ndarray,
                 span: Span) -> np.ndarray:  # [..., pos, d_model] → [..., pos, d_model]
        x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])  # [rows, d_model]
        dW = {n: np.zeros(s, dtype=x.dtype) for n, s in self.shapes(cfg).items() if n.startswith(("W_", "b_"))
              and not n.startswith(("W_shared", "W_router", "b_router"))}
        dx, dlogits = self.d_routed(cfg, w, dy2, acts, p, x2, dW)  # [rows, d_model], [rows, expert]
        ddx, dW["W_router"], db = d_affine(dlogits, x2, w.router.W)
        dx += ddx
        if cfg.router_bias:
            dW["b_router"] = db
        if w.shared is not None:
            dx += self.d_shared(cfg, w, dy2, acts, p, x2, dW)
        for n, g in dW.items():
            grads[p + n] = g
        return dx.reshape(x.shape)

    def d_routed(self, cfg, w: ExpertsWeights, dy2: np.ndarray, acts, p: str, x2: np.ndarray,
                 dW: dict):  # [rows, d_model] → [rows, d_model], [rows, expert]
        """Back through `routed`, the choice held fixed: x2's gradient and the router scores'; the experts'
        (and `weigh`'s) parameters' gradients into dW."""
        k, E = cfg.experts_per_token, cfg.n_experts
        rows = x2.shape[0]
        chosen = np.asarray(acts[p + "hook_expert_indices"]).reshape(rows, k).astype(np.int64)
        weights = acts[p + "hook_expert_weights"].reshape(rows, k)
        gate, up, post = (acts[p + n].reshape(rows * k, -1) for n in ("hook_expert_pre", "hook_expert_pre_linear",
                                                                       "hook_expert_post"))
        outs = acts[p + "hook_expert_out"].reshape(rows, k, -1)
        dweights = np.einsum("rkd,rd->rk", outs, dy2)  # [rows, k]
        dout = (weights[:, :, None] * dy2[:, None, :]).reshape(rows * k, -1)  # [rows·k, d_model]
        dpost = np.empty_like(post)
        order, spans = _groups(chosen, E)
        groups = [(e, order[lo:hi]) for e, lo, hi in spans]
        for e, slots in groups:
            dpost[slots] = dout[slots] @ np.asarray(w.W_out[e]).T
            dW["W_out"][e] = post[slots].T @ dout[slots]
            if "b_out" in dW:
                dW["b_out"][e] = dout[slots].sum(axis=0)
        dgate, dup = MIDDLES[cfg.expert_mlp](cfg)[1](dpost, gate, up)
        dx = np.zeros_like(x2)
        for e, slots in groups:
            t = slots // k
            np.add.at(dx, t, dgate[slots] @ np.asarray(w.W_gate[e]).T + dup[slots] @ np.asarray(w.W_in[e]).T)
            dW["W_gate"][e], dW["W_in"][e] = x2[t].T @ dgate[slots], x2[t].T @ dup[slots]
            if "b_gate" in dW:
                dW["b_gate"][e], dW["b_in"][e] = dgate[slots].sum(axis=0), dup[slots].sum(axis=0)
        logits = acts[p + "hook_router_logits"].reshape(rows, E)
        dweights = self.d_weigh(cfg, w, dweights, chosen, logits, dW)
        return dx, ROUTERS[cfg.router].d_route(cfg, dweights, logits, chosen, weights)  # the choice held

    def d_shared(self, cfg, w: ExpertsWeights, dy2: np.ndarray, acts, p: str, x2: np.ndarray, dW: dict) -> np.ndarray:
        W_gate, W_in, W_out, W_g = w.shared
        rows = x2.shape[0]
        pre, lin, post = (acts[p + "shared." + n].reshape(rows, -1) for n in ("hook_pre", "hook_pre_linear", "hook_post"))
        g = acts[p + "hook_shared_gate"].reshape(rows, 1)
        mlp_out = post @ W_out  # [rows, d_model]
        dg = (dy2 * mlp_out).sum(axis=-1, keepdims=True) * g * (1 - g)  # [rows, 1]: through the sigmoid
        dmlp = g * dy2
        dpost, dW["shared.W_out"], _ = d_affine(dmlp, post, W_out)
        dpre, dlin = d_swiglu(dpost, pre, lin)
        dx_g, dW["shared.W_gate"], _ = d_affine(dpre, x2, W_gate)
        dx_i, dW["shared.W_in"], _ = d_affine(dlin, x2, W_in)
        dx_s, dW["W_shared_gate"], _ = d_affine(dg, x2, W_g)
        return dx_g + dx_i + dx_s

    def records(self, cfg, name: str) -> bool:
        shared = name.startswith("shared.") or name in ("hook_shared_gate", "hook_shared_out")
        return name in self.hooks and (bool(cfg.shared_d_mlp) or not shared)

    def block_words(self, cfg) -> str:
        shared = ", and a shared expert every token goes through" if cfg.shared_d_mlp else ""
        return (f"a mixture of {cfg.n_experts} experts, {cfg.experts_per_token} per token{shared} "
                f"({short_count(cfg.active_params())} of {short_count(cfg.n_params())} parameters active per token)")

    def expert_words(self, cfg) -> str:
        """What expert {e} computes, in words: "x·W_gate[{e}], x·W_in[{e}], SwiGLU, × W_out[{e}]"."""
        b = " + b" if cfg.expert_bias else ""
        middle = (f"clamped SwiGLU: (up + 1) · gate · sigmoid({cfg.swiglu_alpha:g} · gate), gate ≤ {cfg.swiglu_limit:g}, "
                  f"|up| ≤ {cfg.swiglu_limit:g}" if cfg.expert_mlp == "clamped_swiglu" else "SwiGLU: SiLU(gate) ⊙ up")  # (Gemma 4's GeGLU experts: their own words)
        return f"gate = x·W_gate[{{e}}]{b}, up = x·W_in[{{e}}]{b}, {middle}, × W_out[{{e}}]{b}"

    def route_words(self, cfg) -> str:
        """How the router chooses, in words: "softmax over the 8 experts' scores, the 2 most probable kept"."""
        words = ROUTERS[cfg.router].words.format(E=cfg.n_experts, k=cfg.experts_per_token)
        return words + (" (renormalized to sum to 1)" if cfg.norm_topk and cfg.router == "softmax_topk" else "")

    def reads(self, x: str) -> tuple[str, str]:
        """What the router and the experts are given, as the walkthrough writes them, when the MLP is given `x`."""
        return x, x

    def needed(self, cfg) -> tuple[str, ...]:
        return ("hook_router_logits", "hook_expert_*", "shared.hook_*", "hook_shared_gate")

    # -- what a pass costs and keeps

    def active_params(self, cfg, l: int = 0) -> int:
        E, k, d, f = cfg.n_experts, cfg.experts_per_token, cfg.d_model, cfg.d_mlp
        per_expert = 3 * d * f + ((2 * f + d) if cfg.expert_bias else 0)
        return self.n_params(cfg, l) - (E - k) * per_expert

    def macs(self, cfg, n_new: int, n_seen: int) -> int:
        d, f, s = cfg.d_model, cfg.d_mlp, cfg.shared_d_mlp or 0
        return n_new * (d * cfg.n_experts + 3 * cfg.experts_per_token * d * f + (3 * d * s + d if s else 0))

    def record_bytes(self, cfg, n_new: int, n_seen: int) -> int:
        k, s = cfg.experts_per_token, cfg.shared_d_mlp or 0
        return n_new * (cfg.n_experts + 2 * k + 3 * k * cfg.d_mlp + k * cfg.d_model + (3 * s + 1 + cfg.d_model if s else 0))


def short_count(n: int) -> str:
    """'3.6 B', '410 M', '12.3 k', '950': a parameter count as people say it."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.{1 if n < 100 * size else 0}f} {unit}"
    return str(n)


EXPERTS = RoutedExperts()
