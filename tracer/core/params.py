"""Parameters: their names and shapes, checks, and seeded initialisation.

Names and shapes follow TransformerLens (`W_E [d_vocab, d_model]`, `blocks.{l}.attn.W_Q
[head, d_model, d_head]`, …). Loaders of other layouts (HF GPT-2's `c_attn`, `wte`) translate
to these names at their boundary, once. Any parameter not given is drawn from a generator
seeded by (seed, name), with GPT-2's initialisation: normal(0, 0.02) for matrices, zeros for
biases, ones for layer-norm weights; so the same seed gives the same weights on every machine
and giving one matrix does not change the others. Core module: imports numpy only.
"""

from __future__ import annotations

import zlib

import numpy as np

from .config import Config
from ..errors import TracerError, near

Params = dict  # name -> np.ndarray, TransformerLens names


def param_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """Every parameter the config uses, in a fixed order, with its shape: the embedding (and W_pos),
    then per layer the norms and each sublayer kind's own (`Sublayer.shapes`), then the final norm and
    the unembedding."""
    dm = cfg.d_model
    norm = cfg.norm_kind.shapes(dm)  # the gain and bias, or (RMS norm) the gain only
    shapes: dict[str, tuple[int, ...]] = {"W_E": (cfg.d_vocab, dm), **cfg.position_kind.shapes(cfg.n_ctx, dm)}
    if cfg.ple_kind is not None:  # the per-layer inputs' embedding and projection (Gemma 4)
        shapes.update(cfg.ple_kind.top_shapes(cfg))
    for l in range(cfg.n_layers):
        b = f"blocks.{l}."
        for ln, kind in (("ln1", cfg.attention_of(l)), ("ln2", cfg.mlp_of(l)), ("ln3", cfg.ple_kind)):
            if kind is None:
                continue
            if cfg.layer_norm and kind.normed:  # ln1 (and OLMo 2's ln1_post instead, after attention)
                shapes.update({b + f"{n}.{x}": s for n in cfg.norm_place_kind.names(ln) for x, s in norm.items()})
            shapes.update({b + f"{kind.scope}.{x}": s for x, s in kind.shapes(cfg.layer(l), l).items()})
        if cfg.layer_scalar:
            shapes[b + "layer_scalar"] = (1,)
    if cfg.layer_norm:
        shapes.update({f"ln_final.{x}": s for x, s in norm.items()})
    if not cfg.tied_unembed:
        shapes["W_U"] = (dm, cfg.d_vocab)
    shapes["b_U"] = (cfg.d_vocab,)
    return shapes


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(name.encode())])


def init_param(name: str, shape: tuple[int, ...], seed: int, dtype: str) -> np.ndarray:
    """GPT-2's initialisation for one parameter, seeded by (seed, name)."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf in ("w", "layer_scalar"):  # layer-norm gain, a layer's scalar
        return np.ones(shape, dtype=dtype)
    if leaf.startswith("b"):  # biases (b_Q, b_in, ln.b, b_U, …)
        return np.zeros(shape, dtype=dtype)
    return (_rng(seed, name).standard_normal(shape) * 0.02).astype(dtype)


FINITE_CHUNK = 2**22  # elements checked for NaN/inf at a time: bounded extra memory


def first_non_finite(arr: np.ndarray, advance=None, chunk: int = FINITE_CHUNK) -> list[int] | None:
    """The index of the first NaN or infinity, or None when every number is finite.

    One read of the array, in chunks and in memory order (a transposed array is not copied), with
    no array of booleans as large as it: a NaN or an infinity anywhere makes a chunk's sum NaN or
    infinite (nothing cancels them), so a finite sum proves the chunk finite; only a chunk whose
    sum is not finite is looked at element-wise (an overflowing sum of finite numbers is then found
    finite). `advance(n_elements)` is called after
    each chunk (a progress bar).
    """
    if arr.dtype.kind != "f":
        if advance is not None:
            advance(arr.size)
        return None
    c_order = arr.flags.c_contiguous
    flat = arr.reshape(-1) if c_order else arr.ravel(order="K")  # [n] in memory order: a view when contiguous
    for start in range(0, flat.size, chunk):
        part = flat[start : start + chunk]  # [chunk]
        with np.errstate(all="ignore"):
            suspect = not np.isfinite(part.sum())
        if suspect:
            ok = np.isfinite(part)  # [chunk]
            if not ok.all():
                if c_order:
                    first = start + int(np.argmin(ok))
                else:  # read in memory order (a transposed array): find the first in index order
                    first = int(np.argmin(np.isfinite(arr).reshape(-1)))
                return [int(i) for i in np.unravel_index(first, arr.shape)] if arr.ndim else []
        if advance is not None:
            advance(part.size)
    return None


def all_finite(arr: np.ndarray) -> bool:
    """Whether every number is finite (see `first_non_finite`)."""
    return first_non_finite(arr) is None


def check_param(name: str, value, shape: tuple[int, ...], dtype: str, where: str = "weights") -> np.ndarray:
    """A given parameter as an array of the right shape and dtype, or a TracerError naming it."""
    try:
        arr = np.asarray(value)
    except Exception as e:  # ragged nested lists
        raise TracerError(f"{where}: {name!r} is not a rectangular array of numbers ({e})") from None
    if arr.dtype.kind not in "biuf":
        raise TracerError(f"{where}: {name!r} must hold numbers, got {arr.dtype}")
    if tuple(arr.shape) != tuple(shape):
        raise TracerError(f"{where}: {name!r}: expected {list(shape)}, got {list(arr.shape)}")
    arr = arr.astype(dtype, copy=False)
    bad = first_non_finite(arr)
    if bad is not None:
        raise TracerError(f"{where}: {name!r} holds NaN or infinite values (first at index {bad})")
    return arr


def init_weights(cfg: Config, seed: int = 0, given: Params | None = None, where: str = "weights") -> Params:
    """All parameters of `cfg`: the given ones checked, the rest seeded."""
    given = dict(given or {})
    shapes = param_shapes(cfg)
    unknown = [k for k in given if k not in shapes]
    if unknown:
        hint = near(unknown[0], shapes)
        if unknown[0] == "W_U" and cfg.tied_unembed:
            hint = " (tied_unembed is true, so W_U is W_E transposed; set tied_unembed = false to give W_U)"
        elif unknown[0] == "W_pos" and not cfg.has_positions:
            hint = f" (positional is {cfg.positional!r}: no position vector is added)"
        raise TracerError(f"{where}: unknown parameter {unknown[0]!r}{hint}")
    computed = cfg.position_kind.computed  # W_pos made from its shape (sin/cos positions)
    if computed is not None and "W_pos" in given:
        raise TracerError(f"{where}: 'W_pos' is computed when positional = {cfg.positional!r}; use 'explicit' to give it")
    params: Params = {}
    for name, shape in shapes.items():
        if name in given:
            params[name] = check_param(name, given[name], shape, cfg.dtype, where)
        elif name == "W_pos" and computed is not None:
            params[name] = computed(*shape).astype(cfg.dtype)
        else:
            params[name] = init_param(name, shape, seed, cfg.dtype)
    return params


def unembedding(cfg: Config, params: Params) -> np.ndarray:
    """W_U [d_model, d_vocab]: its own matrix, or W_E transposed when tied (a view, no copy)."""
    return params["W_E"].T if cfg.tied_unembed else params["W_U"]
