"""The weights in the layouts matrix products want: the decoder's speed paths, kept out of its equations.

`layout(cfg, params)` turns the parameters (TransformerLens names, `tracer.core.params`) into `Weights`:
per layer, the norms' gains and each sublayer's weights as its kind lays them out
(`Sublayer.layout`: softmax attention's W_Q, W_K and W_V side by side as one [d_model, 3·head·d_head]
matrix, GPT-2's c_attn, one product instead of three, and W_O as one [head·d_head, d_model] matrix;
a dense MLP's input products and W_out), and the unembedding computed as (W_U.T @ x.T).T (with
GPT-2's tied W_U the left operand is W_E's own rows). The products are `tracer.core.affine.Affine`'s:
x·W + b in whichever orientation runs fastest. For long generations, `add_out_rows` also keeps each
MLP's W_out transposed, which one-position steps read faster (BENCHMARKS.md has the figures and the
trade). Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .affine import FEW_ROWS, UNEMBED_BLOCK_BYTES, Affine, row_blocks, rows_times, times_columns, transposed  # noqa: F401
from .config import Config
from .equations import rope_attention_factor, rope_frequencies
from .layer_sizes import rope_width
from .params import Params, unembedding

ROWS_MAX_BYTES = 512 * 2**20  # the most memory the transposed copies of W_out may take


@dataclass
class Layer:
    """One block's weights: the norms' (gain, bias) (None without a norm; the bias None for an RMS
    norm; `ln1_post` / `ln2_post`: OLMo 2's and Gemma's norms of the sublayers' outputs), and each
    sublayer's weights as its kind lays them out (`attn.kind`, `mlp.kind`: the entries of the block
    table; `mlp` None without an MLP)."""

    ln1: tuple | None
    attn: object  # the attention kind's weights (`tracer.core.attention.AttentionWeights`, …)
    ln2: tuple | None
    mlp: object | None  # the MLP kind's weights (`tracer.core.mlps.MlpWeights`, …), None without an MLP
    ln1_post: tuple | None = None
    ln2_post: tuple | None = None
    local: bool = False  # the layer turns by the local RoPE base's angles (`cfg.is_local`: Gemma 3)
    rotates: bool = True  # the layer turns Q and K at all (not SmolLM3's NoPE layers: `cfg.rotates`)
    ple: object | None = None  # a third sublayer's weights (`cfg.ple_kind`: Gemma 4's per-layer input), None without
    scalar: np.ndarray | None = None  # [1] the number the layer's output is multiplied by (Gemma 4), None without
    cfg: object = None  # the layer's view of the config (`cfg.layer(l)`: its own sizes), kept for each pass


@dataclass
class Weights:
    W_E: np.ndarray  # [d_vocab, d_model]
    W_pos: np.ndarray | None  # [n_ctx, d_model]
    layers: list = field(default_factory=list)  # [Layer]
    ln_final: tuple | None = None
    unembed: Affine | None = None  # W_U [d_model, d_vocab], b_U
    rope: np.ndarray | None = None  # [d_head / 2] RoPE's angle per position of each pair (rotary positions only)
    rope_local: np.ndarray | None = None  # [d_head / 2] the local layers' (Gemma 3: `cfg.rope_local_theta`)
    rope_factor: float = 1.0  # what cos and sin are multiplied by (YaRN's attention factor; 1 otherwise)
    per_layer: object | None = None  # the per-layer inputs' weights around the layers (Gemma 4), None without


def norm_weights(cfg: Config, params: Params, name: str) -> tuple | None:
    """A norm's (gain, bias), the bias None for an RMS norm; None when the model has no norm."""
    if not cfg.layer_norm:
        return None
    return params[name + ".w"], params.get(name + ".b") if cfg.norm_kind.bias else None


def layout(cfg: Config, params: Params, W_qkv: list | None = None) -> Weights:
    """`W_qkv` may be given when a loader already holds the fused matrices (GPT-2's c_attn), to avoid a copy."""
    layers = [layout_layer(cfg, params, l, W_qkv[l] if W_qkv is not None else None) for l in range(cfg.n_layers)]
    return layout_top(cfg, params, layers, unembedding(cfg, params))


def layout_layer(cfg: Config, params: Params, l: int, W: np.ndarray | None = None) -> Layer:
    """Layer `l`'s weights (`params` need hold only that layer's); `W`: its attention's fused
    [W_Q | W_K | W_V], if a loader holds it (GPT-2's c_attn)."""
    p = f"blocks.{l}."
    place = cfg.norm_place_kind  # which of ln1/ln2 and ln1_post/ln2_post the block has
    mlp, view = cfg.mlp_of(l), cfg.layer(l)
    return Layer(
        ln1=norm_weights(cfg, params, p + "ln1") if place.before else None,
        attn=cfg.attention_of(l).layout(view, params, l, W),
        ln2=norm_weights(cfg, params, p + "ln2") if mlp is not None and place.before else None,
        mlp=mlp.layout(view, params, l) if mlp is not None else None,
        ln1_post=norm_weights(cfg, params, p + "ln1_post") if place.after else None,
        ln2_post=norm_weights(cfg, params, p + "ln2_post") if mlp is not None and place.after else None,
        local=cfg.is_local(l),
        rotates=cfg.rotates(l),
        ple=cfg.ple_kind.layout(view, params, l) if cfg.ple_kind is not None else None,
        scalar=params[p + "layer_scalar"] if cfg.layer_scalar else None,
        cfg=view,
    )


def layout_top(cfg: Config, params: Params, layers, W_U, unembed=None) -> Weights:
    """The weights around the layers (`layers`: a list of `Layer`, or any sequence giving them by
    index, as `tracer.core.streamed.Layers` does); `W_U` [d_model, d_vocab], or `unembed`: a ready
    Affine-like map (the streamed unembedding)."""
    return Weights(
        W_E=params["W_E"],
        W_pos=params.get("W_pos") if cfg.has_positions else None,
        layers=layers,
        ln_final=norm_weights(cfg, params, "ln_final"),
        unembed=unembed if unembed is not None else Affine(W_U, params["b_U"], by_rows=True),
        rope=rope_frequencies(rope_width(cfg, False), cfg.rope_theta, cfg.rope_scaling) if cfg.position_kind.rotary else None,
        rope_factor=rope_attention_factor(cfg.rope_scaling),
        rope_local=rope_frequencies(rope_width(cfg, True), cfg.rope_local_theta)
        if cfg.position_kind.rotary and cfg.rope_local_theta is not None else None,
        per_layer=cfg.ple_kind.top_layout(cfg, params) if cfg.ple_kind is not None else None,
    )


def add_out_rows(cfg: Config, weights: Weights) -> bool:
    """Keep every layer's W_out transposed for one-position steps, unless the copies would take
    more than ROWS_MAX_BYTES. A trade: built once, in time and memory, for faster decode steps, so
    `tracer.run.generate` asks for it only for long generations. Each MLP kind keeps its own
    (`keep_rows`); a kind without one keeps none."""
    if not cfg.mlp or cfg.n_layers * cfg.d_mlp * cfg.d_model * np.dtype(cfg.dtype).itemsize > ROWS_MAX_BYTES:
        return False
    if not isinstance(weights.layers, list):  # streamed layers (`tracer.core.streamed`): each gets them when expanded
        weights.layers.out_rows = True
        return True
    for layer in weights.layers:
        keep = getattr(layer.mlp, "keep_rows", None)
        if keep is not None:
            keep()
    return True
