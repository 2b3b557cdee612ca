"""Per-layer inputs (Gemma 4's PLE: "per-layer embeddings") as a block entry: a third sublayer, after the
MLP, that adds to the residual stream something from the token itself — a small vector of its own for
every layer, made once per pass from a second embedding table and from the embedding:

    token  = E_ple[token] · √d_ple                     [layer, pos, d_ple]   `ple.hook_token`
    proj   = (x·W_proj) / √d_model                     [layer, pos, d_ple]   `ple.hook_proj` (x: layer 0's input)
    inputs = (RMS(proj) · ple.norm.w + token) / √2     [layer, pos, d_ple]   `ple.norm.*`, `hook_per_layer_inputs`

and in layer l, the residual stream x (after the MLP) opens a gate on the layer's own input, which is
projected back to d_model and normalized before it is added:

    gate  = x·W_gate                                   [pos, d_ple]          `blocks.{l}.ple.hook_gate`
    gated = GELU(gate) ⊙ inputs[l]                     [pos, d_ple]          `blocks.{l}.ple.hook_gated`
    out   = RMS(gated·W_out) · ple.norm.w              [pos, d_model]        `blocks.{l}.ple.norm.*`, then `hook_ple_out`

`inputs` (around the layers: `top_*`, `inputs`, `d_inputs`) and `run` / `backward` (in each layer) are
the two halves; the decoder hands each layer its row of `inputs` (`Span.layer_input`) and the backward
pass collects their gradients (`Span.d_layer_input`). Transformers' reference: `Gemma4TextModel.
get_per_layer_inputs` / `project_per_layer_inputs` and the end of `Gemma4TextDecoderLayer.forward`.
Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .affine import Affine
from .derivatives import d_affine, d_gelu_new
from .equations import gelu_new
from .hooks import h
from .record import Recorder
from .sublayer import Span, Sublayer, d_norm, norm


@dataclass
class PleTop:
    """The per-layer inputs' weights around the layers."""

    kind: "PerLayerInput"
    W_E: np.ndarray  # [d_vocab, layer·d_ple]: each token's row holds every layer's vector, side by side
    W_proj: np.ndarray  # [d_model, layer·d_ple]
    norm: tuple  # the norm's (gain [d_ple], bias or None)


@dataclass
class PleWeights:
    """One layer's gate, projection back and norm."""

    kind: "PerLayerInput"
    gate: Affine  # W_gate [d_model, d_ple]
    out: Affine  # W_out [d_ple, d_model]
    norm: tuple  # the norm's (gain [d_model], bias or None)


def _layers_first(a: np.ndarray, n_layers: int) -> np.ndarray:  # [..., pos, layer·d_ple] → [..., layer, pos, d_ple]
    return np.moveaxis(a.reshape(*a.shape[:-1], n_layers, -1), -2, -3)


def _layers_last(a: np.ndarray) -> np.ndarray:  # [..., layer, pos, d_ple] → [..., pos, layer·d_ple]
    moved = np.moveaxis(a, -3, -2)
    return moved.reshape(*moved.shape[:-2], -1)


class PerLayerInput(Sublayer):
    key = "per_layer_input"
    scope = "ple"
    normed = False  # no ln before it: the gate reads the residual stream itself; its own norm sits after W_out
    title = "per-layer inputs"
    name = "per-layer input"
    hooks = {"hook_gate": h("pos d_ple", "mlp"), "hook_gated": h("pos d_ple", "mlp"),
             "norm.hook_scale": h("pos one", "mlp"), "norm.hook_normalized": h("pos d_model", "mlp")}
    steps = (("ple.hook_gate", "gate", "per-layer input: gate = x·W_gate ({shape})"),
             ("ple.hook_gated", "gated", "GELU(gate) ⊙ this layer's input from the token ({width} numbers): the stream "
                                         "decides how much of each passes"))
    input_words = ("layer {layer}'s own input from {L} ({width} numbers): (RMS(x_0·W_proj ÷ √{d_model}) × ple.norm.w "
                   "+ E_ple[{L}]·√{width}) ÷ √2, made once from the token and its embedding")
    out_words = "× W_out ({shape}), ÷ its root mean square, × ple.norm.w: what the per-layer input adds"
    added_words = "residual: + ple_out"
    example = {"d_ple": 3}

    # -- around the layers

    def top_shapes(self, cfg) -> dict[str, tuple[int, ...]]:
        wide = cfg.n_layers * cfg.d_ple
        return {"ple.W_E": (cfg.d_vocab, wide), "ple.W_proj": (cfg.d_model, wide),
                **{f"ple.norm.{p}": (cfg.d_ple,) for p in cfg.norm_kind.params}}

    def top_params(self, cfg) -> int:
        return sum(int(np.prod(s)) for s in self.top_shapes(cfg).values())

    def top_layout(self, cfg, params: dict) -> PleTop:
        return PleTop(self, params["ple.W_E"], params["ple.W_proj"], (params["ple.norm.w"], params.get("ple.norm.b")))

    def inputs(self, cfg, w: PleTop, tokens: np.ndarray, x: np.ndarray, rec: Recorder) -> np.ndarray:
        """Every layer's input for these tokens ([pos]; x: layer 0's input [pos, d_model]) → [layer, pos, d_ple]."""
        one = np.dtype(cfg.dtype).type
        token = rec("ple.hook_token", _layers_first(w.W_E[tokens] * one(np.sqrt(cfg.d_ple)), cfg.n_layers))
        proj = rec("ple.hook_proj", _layers_first((x @ w.W_proj) * one(cfg.d_model ** -0.5), cfg.n_layers))
        both = norm(cfg, proj, w.norm, rec.scope("ple.norm")) + token  # [layer, pos, d_ple]
        return rec("hook_per_layer_inputs", both * one(2.0 ** -0.5))

    def d_inputs(self, cfg, w: PleTop, d_in: np.ndarray, acts, tokens: np.ndarray, grads: dict) -> np.ndarray:
        """Back through `inputs`: the inputs' gradient [..., layer, pos, d_ple] → layer 0's input's
        [..., pos, d_model]; the embedding's, the projection's and the norm's into `grads`."""
        one = np.dtype(cfg.dtype).type
        d_in = d_in * one(2.0 ** -0.5)
        d_token = _layers_last(d_in) * one(np.sqrt(cfg.d_ple))  # [..., pos, layer·d_ple]
        dW_E = np.zeros(w.W_E.shape, dtype=d_token.dtype)
        np.add.at(dW_E, np.asarray(tokens).reshape(-1), d_token.reshape(-1, d_token.shape[-1]))
        grads["ple.W_E"] = dW_E
        dproj = d_norm(cfg, d_in, w.norm, acts, "ple.norm.", grads, "ple.norm")  # [..., layer, pos, d_ple]
        dx, grads["ple.W_proj"], _ = d_affine(_layers_last(dproj) * one(cfg.d_model ** -0.5),
                                              acts["blocks.0.hook_resid_pre"], w.W_proj)
        return dx

    # -- in each layer

    def shapes(self, cfg, l: int = 0) -> dict[str, tuple[int, ...]]:
        return {"W_gate": (cfg.d_model, cfg.d_ple), "W_out": (cfg.d_ple, cfg.d_model),
                **{f"norm.{p}": (cfg.d_model,) for p in cfg.norm_kind.params}}

    def layout(self, cfg, params: dict, l: int, fused=None) -> PleWeights:
        p = f"blocks.{l}.ple."
        return PleWeights(self, Affine(params[p + "W_gate"], None), Affine(params[p + "W_out"], None),
                          (params[p + "norm.w"], params.get(p + "norm.b")))

    def run(self, cfg, w: PleWeights, x: np.ndarray, rec: Recorder, span: Span) -> np.ndarray:  # [pos, d_model] → same
        gate = rec("hook_gate", w.gate(x))  # [pos, d_ple]
        gated = rec("hook_gated", gelu_new(gate) * span.layer_input)  # [pos, d_ple]
        return norm(cfg, w.out(gated), w.norm, rec.scope("norm"))  # [pos, d_model]

    def backward(self, cfg, w: PleWeights, dy, acts, p: str, grads: dict, x, span: Span):
        d_out = d_norm(cfg, dy, w.norm, acts, p + "norm.", grads, p + "norm")  # [..., pos, d_model]
        d_gated, grads[p + "W_out"], _ = d_affine(d_out, acts[p + "hook_gated"], w.out.W)  # [..., pos, d_ple]
        gate = acts[p + "hook_gate"]
        span.d_layer_input = d_gated * gelu_new(gate)
        dx, grads[p + "W_gate"], _ = d_affine(d_gelu_new(d_gated * span.layer_input, gate), x, w.gate.W)
        return dx

    def needed(self, cfg) -> tuple[str, ...]:
        return ("hook_gate", "hook_gated", "norm.hook_*")

    # -- what a pass costs, what it says

    def axes(self, cfg):
        return {"d_ple": (cfg.d_ple or 0,), "layer": (cfg.n_layers,)}

    def macs(self, cfg, n_new: int, n_seen: int) -> int:
        return n_new * 3 * cfg.d_model * cfg.d_ple  # the gate, W_out, and this layer's share of W_proj

    def record_bytes(self, cfg, n_new: int, n_seen: int) -> int:
        return n_new * (7 * cfg.d_ple + cfg.d_model + 2)

    def block_words(self, cfg) -> str:
        return (f"a per-layer input ({cfg.d_ple} numbers per layer, from a second embedding of the token) added after "
                f"each MLP")


PER_LAYER_INPUT = PerLayerInput()
