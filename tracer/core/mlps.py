"""Dense MLPs as block entries: the products of the input (x·W_in, and x·W_gate for the gated ones),
a middle function, then W_out — GPT-2's GELU MLP, Llama's SwiGLU, Gemma's GeGLU. Each entry owns its
forward and backward pass, its layout, what it records (`mlp.hook_pre`, `hook_pre_linear`,
`hook_post`, as TransformerLens names them), the store's recipe for its middle, and its words.
`tracer.core.blocks` registers them as the MLP kinds "gelu", "swiglu" and "geglu". Routed experts
(`tracer.core.experts`) call the same products per expert. Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .affine import Affine
from .derivatives import d_affine, d_geglu, d_gelu_new, d_swiglu
from .equations import geglu, gelu_new, swiglu
from .hooks import h
from .record import Recorder
from .store import Recipe, several
from .sublayer import Span, Sublayer


@dataclass(frozen=True)
class MlpInput:
    """One product of the MLP's input: x·W (+ b), recorded as `mlp.{hook}`."""

    hook: str
    weight: str  # the parameter `blocks.{l}.mlp.{weight}` [d_model, d_mlp]
    bias: str | None  # its bias [d_mlp], or None


@dataclass
class MlpWeights:
    """One layer's dense MLP in the layout its products want."""

    kind: "DenseMlp"
    inputs: tuple  # ((hook, Affine), …): the input products [d_model, d_mlp], in the entry's order
    out: Affine  # W_out [d_mlp, d_model], b_out

    def keep_rows(self) -> None:
        """Keep W_out transposed too, for one-position steps (`tracer.core.fast.add_out_rows`)."""
        from .affine import transposed

        if self.out.rows is None:
            self.out.rows = transposed(self.out.W)  # [d_model, d_mlp]


def _post(cfg, l: int, *inputs: np.ndarray) -> np.ndarray:
    """The store's recipe for `mlp.hook_post`: the middle from the recorded inputs."""
    return cfg.mlp_of(l).middle(*inputs)  # [pos, d_mlp]


class DenseMlp(Sublayer):
    """A dense MLP: `inputs`' products of x, `middle(*inputs)` → `mlp.hook_post`, then W_out.
    `d_middle(dpost, *inputs)` → each input's gradient, in order."""

    scope = "mlp"

    def __init__(self, key: str, middle: Callable, d_middle: Callable, inputs: tuple, title: str, name: str,
                 plain: str, steps: tuple = ()):
        self.key, self.middle, self.d_middle, self.inputs = key, middle, d_middle, inputs
        self.title, self.name, self.plain, self.steps = title, name, plain, steps
        self.hooks = {**{i.hook: h("pos d_mlp", "mlp") for i in inputs}, "hook_post": h("pos d_mlp", "mlp")}
        self.hold = {"mlp.hook_post": (Recipe(_post, tuple("mlp." + i.hook for i in inputs), when=several,
                                                exact=True),)}

    @property
    def gated(self) -> bool:
        """Whether a W_gate product exists."""
        return any(i.weight == "W_gate" for i in self.inputs)

    @property
    def matrices(self) -> int:
        """[d_model, d_mlp]-sized products per position: the inputs and W_out."""
        return len(self.inputs) + 1

    def width(self, cfg) -> int:
        """The hidden width: d_mlp (`dense_d_mlp` for a dense layer among experts, `DenseAmongExperts`)."""
        return cfg.d_mlp

    def axes(self, cfg):
        return {"d_mlp": (self.width(cfg),)}

    def shapes(self, cfg, l: int = 0) -> dict[str, tuple[int, ...]]:
        out: dict[str, tuple[int, ...]] = {}
        f = self.width(cfg)
        for i in self.inputs:
            out[i.weight] = (cfg.d_model, f)
            if i.bias:
                out[i.bias] = (f,)
        return {**out, "W_out": (f, cfg.d_model), "b_out": (cfg.d_model,)}

    def layout(self, cfg, params: dict, l: int, fused=None) -> MlpWeights:
        p = f"blocks.{l}.mlp."
        inputs = tuple((i.hook, Affine(params[p + i.weight], params[p + i.bias] if i.bias else None)) for i in self.inputs)
        return MlpWeights(self, inputs, Affine(params[p + "W_out"], params[p + "b_out"]))

    def run(self, cfg, w: MlpWeights, x: np.ndarray, rec: Recorder, span: Span) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
        inputs = [rec(hook, product(x)) for hook, product in w.inputs]  # [pos, d_mlp] each: x·W_in (gated: x·W_gate first)
        post = rec("hook_post", self.middle(*inputs))  # [pos, d_mlp]
        return w.out(post)  # [pos, d_model]

    def backward(self, cfg, w: MlpWeights, dy: np.ndarray, acts, p: str, grads: dict, x: np.ndarray,
                 span: Span) -> np.ndarray:  # [..., pos, d_model] → [..., pos, d_model]
        dpost, grads[p + "W_out"], grads[p + "b_out"] = d_affine(dy, acts[p + "hook_post"], w.out.W)
        dinputs = self.d_middle(dpost, *(acts[p + i.hook] for i in self.inputs))  # each input's gradient
        dx = None
        for i, (_, product), d in zip(self.inputs, w.inputs, dinputs):  # back through each x·W (+ b)
            dx_i, grads[p + i.weight], db = d_affine(d, x, product.W)
            if i.bias:
                grads[p + i.bias] = db
            dx = dx_i if dx is None else dx + dx_i
        return dx

    def needed(self, cfg) -> tuple[str, ...]:
        return tuple(i.hook for i in self.inputs) + ("hook_post",)

    def macs(self, cfg, n_new: int, n_seen: int) -> int:
        return self.matrices * n_new * cfg.d_model * self.width(cfg)

    def record_bytes(self, cfg, n_new: int, n_seen: int) -> int:
        return n_new * 2 * self.width(cfg)


class DenseAmongExperts(DenseMlp):
    """The dense SwiGLU MLP of a layer among routed experts (Qwen-MoE's `mlp_only_layers`): its own
    width, `dense_d_mlp`, where d_mlp is each expert's. Not a value `mlp` may name: `Config.mlp_of` gives it."""

    def width(self, cfg) -> int:
        return cfg.dense_d_mlp


_IN = MlpInput("hook_pre", "W_in", "b_in")
_GATED = (MlpInput("hook_pre", "W_gate", None), MlpInput("hook_pre_linear", "W_in", "b_in"))

GELU = DenseMlp("gelu", gelu_new, lambda dpost, pre: (d_gelu_new(dpost, pre),), (_IN,), "GELU MLP", "MLP",
                "a small two-layer network (the MLP) works on each token alone",
                (("mlp.hook_pre", "pre", "MLP: × W_in ({shape}) + b_in"), ("mlp.hook_post", "post", "GELU")))
SWIGLU = DenseMlp(
    "swiglu", swiglu, d_swiglu, _GATED, "SwiGLU MLP", "SwiGLU MLP",
    "a small gated network (the SwiGLU MLP: SiLU(x·W_gate) ⊙ x·W_in, then W_out) works on each token alone",
    (("mlp.hook_pre", "gate", "SwiGLU MLP: gate = ln2(x)·W_gate ({shape})"),
     ("mlp.hook_pre_linear", "up", "up = ln2(x)·W_in ({shape})"),
     ("mlp.hook_post", "post", "SiLU(gate) ⊙ up, SiLU(g) = g·sigmoid(g): the gate decides how much of each up passes")))
GEGLU = DenseMlp(
    "geglu", geglu, d_geglu, _GATED, "GeGLU MLP", "GeGLU MLP",
    "a small gated network (the GeGLU MLP: GELU(x·W_gate) ⊙ x·W_in, then W_out) works on each token alone",
    (("mlp.hook_pre", "gate", "GeGLU MLP: gate = ln2(x)·W_gate ({shape})"),
     ("mlp.hook_pre_linear", "up", "up = ln2(x)·W_in ({shape})"),
     ("mlp.hook_post", "post", "GELU(gate) ⊙ up, GELU with the tanh approximation (Gemma's gate, where Llama "
                               "uses SiLU): the gate decides how much of each up passes")))
DENSE_AMONG_EXPERTS = DenseAmongExperts(
    "swiglu_among_experts", swiglu, d_swiglu, _GATED, "SwiGLU MLP", "SwiGLU MLP", SWIGLU.plain, SWIGLU.steps)
