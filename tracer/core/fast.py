"""The weights in the layouts matrix products want: the decoder's speed paths, kept out of its equations.

`layout(cfg, params)` turns the parameters (TransformerLens names, `tracer.core.params`) into `Weights`:
per layer, W_Q, W_K and W_V side by side as one [d_model, 3·head·d_head] matrix (GPT-2's c_attn:
one product instead of three), W_O as one [head·d_head, d_model] matrix (one product sums the
heads), and the unembedding computed as (W_U.T @ x.T).T (with GPT-2's tied W_U the left operand
is W_E's own rows). `Affine` is x·W + b in whichever orientation runs fastest; each gives the sum
written in `tracer.core.equations`. A W held as rows (a torch Linear's [d_out, d_in], as Llama, Qwen2
and Mistral files store their matrices: W is a transposed view) is multiplied as rows·xᵀ in passes
of a few positions (fewer than FEW_ROWS): OpenBLAS runs that 10–30% faster than x·W there (a
16-token prompt pass of a SmolLM2-135M-shaped model: 86 → 74 ms, the same bits; BENCHMARKS.md).
For long generations, `add_out_rows` also keeps each W_out transposed, which one-position steps
read faster (BENCHMARKS.md has the figures and the trade). Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import qkv
from .config import Config
from .equations import rope_frequencies
from .params import Params, unembedding

ROWS_MAX_BYTES = 512 * 2**20  # the most memory the transposed copies of W_out may take
FEW_ROWS = 64  # below this many positions, a W held as rows is multiplied as rows·xᵀ (from 64 on: no faster)
UNEMBED_BLOCK_BYTES = 256 * 2**20  # float32 bytes of the unembedding's rows multiplied at a time (one block up
# to a 65,536-token vocabulary at d_model 1,024: one product, as ever); the same blocks whether W_U is whole
# or streamed, so both give the same numbers; each product call costs a BLAS dispatch, hence big blocks


def row_blocks(n: int, d_in: int) -> list[tuple[int, int]]:
    """[(lo, hi)]: n rows of d_in numbers cut in blocks of UNEMBED_BLOCK_BYTES (as float32)."""
    step = max(1, UNEMBED_BLOCK_BYTES // (4 * max(d_in, 1)))
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


def rows_times(rows_of, n: int, x: np.ndarray, dtype) -> np.ndarray:  # [pos, d_in] → [pos, n]
    """(W_T @ x.T).T for W_T [n, d_in] given block by block (`rows_of(lo, hi)` → [hi - lo, d_in]):
    the unembedding of one sequence; Fortran-ordered, as one product's transpose is."""
    blocks = row_blocks(n, x.shape[1])
    if len(blocks) == 1:
        return np.matmul(rows_of(0, n), x.T).T  # [pos, n]: the one product
    out = np.empty((n, x.shape[0]), dtype=np.result_type(dtype, x.dtype))  # [n, pos]
    for lo, hi in blocks:
        out[lo:hi] = np.matmul(rows_of(lo, hi), x.T)  # [hi - lo, pos]
    return out.T


def times_columns(x: np.ndarray, columns_of, n: int, dtype) -> np.ndarray:  # [pos, d_in] → [pos, n]
    """x @ W for W [d_in, n] given block by block (`columns_of(lo, hi)` → [d_in, hi - lo]), C order:
    the logit lens's products, in the unembedding's blocks."""
    blocks = row_blocks(n, x.shape[1])
    if len(blocks) == 1:
        return x @ columns_of(0, n)  # [pos, n]: the one product
    out = np.empty((x.shape[0], n), dtype=np.result_type(dtype, x.dtype))  # [pos, n]
    for lo, hi in blocks:
        out[:, lo:hi] = x @ columns_of(lo, hi)
    return out


@dataclass
class Affine:
    """x·W + b for W [d_in, d_out], the bias added in place (no second output-sized array)."""

    W: np.ndarray  # [d_in, d_out]
    b: np.ndarray | None  # [d_out], or None for a map without bias
    rows: np.ndarray | None = None  # W transposed, C-contiguous [d_out, d_in]: read by one-position steps
    by_rows: bool = False  # compute (W.T @ x.T).T for one sequence: the unembedding, whose W.T is W_E's rows

    def __call__(self, x: np.ndarray) -> np.ndarray:  # [pos, d_in] → [pos, d_out]
        rows = x.reshape(-1, x.shape[-1])  # [pos, d_in] (a batch's positions one after another)
        if self.by_rows and x.ndim == 2:  # (a batch, in training, wants its logits row by row: C order)
            W_T = self.W.T  # [d_out, d_in]
            out = rows_times(lambda lo, hi: W_T[lo:hi], W_T.shape[0], rows, W_T.dtype)  # [pos, d_out], Fortran-ordered
        elif self.rows is not None and rows.shape[0] == 1:
            out = (self.rows @ rows[0])[None]  # [1, d_out]
        elif 1 < rows.shape[0] < FEW_ROWS and self.W.flags.f_contiguous:  # W held as rows [d_out, d_in] (a Linear's layout)
            out = np.ascontiguousarray(np.matmul(self.W.T, rows.T).T)  # [pos, d_out], C order as below
        else:
            out = rows @ self.W  # [pos, d_out]
        if self.b is not None:
            out += self.b
        return out.reshape(*x.shape[:-1], out.shape[-1])


@dataclass
class Layer:
    """One block's weights. `ln1`/`ln2`: (gain, bias) or None without a norm (bias None for an RMS
    norm); `mlp_*`: None without MLP (`mlp_gate` only in the gated SwiGLU MLP)."""

    ln1: tuple | None
    qkv: Affine  # [d_model, (head + 2·kv_head)·d_head]: [W_Q | W_K | W_V], each block of heads side by side
    W_O: np.ndarray  # [head, d_head, d_model]
    out: Affine  # W_O as [head * d_head, d_model], with b_O
    ln2: tuple | None
    mlp_in: Affine | None  # [d_model, d_mlp]
    mlp_out: Affine | None  # [d_mlp, d_model]
    mlp_gate: Affine | None = None  # [d_model, d_mlp] (SwiGLU's W_gate; no bias)
    q_norm: tuple | None = None  # the Q/K norms' (gain, bias) (Qwen3, OLMo 2: `cfg.qk_norm_kind`), else None
    k_norm: tuple | None = None
    ln1_post: tuple | None = None  # OLMo 2's norms of attention's and the MLP's outputs (`cfg.norm_place_kind.after`)
    ln2_post: tuple | None = None
    # What a step would otherwise look up per layer, from the config and its table entries, once:
    mlp_inputs: tuple = ()  # ((hook, Affine), …): the MLP's input products in `cfg.mlp_kind.inputs`' order
    window: int | None = None  # this layer's sliding window (`cfg.window_of`), None: every earlier key
    local: bool = False  # the layer turns by the local RoPE base's angles (`cfg.is_local`: Gemma 3)


@dataclass
class Weights:
    W_E: np.ndarray  # [d_vocab, d_model]
    W_pos: np.ndarray | None  # [n_ctx, d_model]
    layers: list = field(default_factory=list)  # [Layer]
    ln_final: tuple | None = None
    unembed: Affine | None = None  # W_U [d_model, d_vocab], b_U
    rope: np.ndarray | None = None  # [d_head / 2] RoPE's angle per position of each pair (rotary positions only)
    rope_local: np.ndarray | None = None  # [d_head / 2] the local layers' (Gemma 3: `cfg.rope_local_theta`)


def fuse_qkv(W_Q: np.ndarray, W_K: np.ndarray, W_V: np.ndarray) -> np.ndarray:  # [head, …], 2 × [kv_head, d_model, d_head] → [d_model, (head + 2·kv_head)·d_head]
    """GPT-2's c_attn layout: Q, K and V side by side, each block of heads side by side (`tracer.core.qkv`)."""
    return qkv.fuse_qkv_weights(W_Q, W_K, W_V)  # [d_model, (head + 2·kv_head)·d_head]


def norm_weights(cfg: Config, params: Params, name: str) -> tuple | None:
    """A norm's (gain, bias), the bias None for an RMS norm; None when the model has no norm."""
    if not cfg.layer_norm:
        return None
    return params[name + ".w"], params.get(name + ".b") if cfg.norm_kind.bias else None


def qk_norm_weights(cfg: Config, params: Params, name: str) -> tuple | None:
    """A Q/K norm's (gain, bias), or None when the block normalizes neither."""
    if not cfg.qk_norm_kind.on:
        return None
    return params[name + ".w"], params.get(name + ".b") if cfg.norm_kind.bias else None


def layout(cfg: Config, params: Params, W_qkv: list | None = None) -> Weights:
    """`W_qkv` may be given when a loader already holds the fused matrices (GPT-2's c_attn), to avoid a copy."""
    layers = [layout_layer(cfg, params, l, W_qkv[l] if W_qkv is not None else None) for l in range(cfg.n_layers)]
    return layout_top(cfg, params, layers, unembedding(cfg, params))


def layout_layer(cfg: Config, params: Params, l: int, W: np.ndarray | None = None) -> Layer:
    """Layer `l`'s weights (`params` need hold only that layer's); `W`: its fused [W_Q | W_K | W_V], if held."""
    p = f"blocks.{l}."
    a = p + "attn."
    place = cfg.norm_place_kind  # which of ln1/ln2 and ln1_post/ln2_post the block has
    if W is None:
        W = fuse_qkv(params[a + "W_Q"], params[a + "W_K"], params[a + "W_V"])
    b = qkv.fuse_qkv(params[a + "b_Q"], params[a + "b_K"], params[a + "b_V"])  # [(head + 2·kv_head)·d_head]
    W_O = params[a + "W_O"]  # [head, d_head, d_model]
    gate = params.get(p + "mlp.W_gate") if cfg.mlp and cfg.mlp_kind.gated else None
    layer = Layer(
        ln1=norm_weights(cfg, params, p + "ln1") if place.before else None,
        qkv=Affine(W, b),
        W_O=W_O,
        out=Affine(W_O.reshape(-1, W_O.shape[-1]), params[a + "b_O"]),
        ln2=norm_weights(cfg, params, p + "ln2") if cfg.mlp and place.before else None,
        mlp_in=Affine(params[p + "mlp.W_in"], params[p + "mlp.b_in"]) if cfg.mlp else None,
        mlp_out=Affine(params[p + "mlp.W_out"], params[p + "mlp.b_out"]) if cfg.mlp else None,
        mlp_gate=Affine(gate, None) if gate is not None else None,
        q_norm=qk_norm_weights(cfg, params, a + "q_norm"),
        k_norm=qk_norm_weights(cfg, params, a + "k_norm"),
        ln1_post=norm_weights(cfg, params, p + "ln1_post") if place.after else None,
        ln2_post=norm_weights(cfg, params, p + "ln2_post") if cfg.mlp and place.after else None,
        window=cfg.window_of(l),
        local=cfg.is_local(l),
    )
    if cfg.mlp:
        layer.mlp_inputs = tuple((i.hook, getattr(layer, i.affine)) for i in cfg.mlp_kind.inputs)
    return layer


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
        rope=rope_frequencies(cfg.d_head, cfg.rope_theta, cfg.rope_scaling) if cfg.position_kind.rotary else None,
        rope_local=rope_frequencies(cfg.d_head, cfg.rope_local_theta)
        if cfg.position_kind.rotary and cfg.rope_local_theta is not None else None,
    )


def transposed(W: np.ndarray, block: int = 128) -> np.ndarray:  # [d_in, d_out] → [d_out, d_in]
    """A C-contiguous copy of W.T, copied in blocks of rows that stay in cache (2× numpy's copy)."""
    out = np.empty(W.shape[::-1], dtype=W.dtype)  # [d_out, d_in]
    for i in range(0, W.shape[0], block):
        out[:, i : i + block] = W[i : i + block].T
    return out


def add_out_rows(cfg: Config, weights: Weights) -> bool:
    """Keep every layer's W_out transposed for one-position steps, unless the copies would take
    more than ROWS_MAX_BYTES. A trade: built once, in time and memory, for faster decode steps, so
    `tracer.run.generate` asks for it only for long generations."""
    if not cfg.mlp or cfg.n_layers * cfg.d_mlp * cfg.d_model * np.dtype(cfg.dtype).itemsize > ROWS_MAX_BYTES:
        return False
    if not isinstance(weights.layers, list):  # streamed layers (`tracer.core.streamed`): each gets them when expanded
        weights.layers.out_rows = True
        return True
    for layer in weights.layers:
        if layer.mlp_out.rows is None:
            layer.mlp_out.rows = transposed(layer.mlp_out.W)  # [d_model, d_mlp]
    return True
