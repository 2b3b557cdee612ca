"""The decoder: one small function per equation, vectorized over positions and heads.

Reads like the seed article (and like picoGPT / nanoGPT): `embed` looks a token up in the
embedding matrix, `position_vectors` gives the position vectors to add, `normalize` and
`scale_and_shift` are the layer norm, `project_qkv` makes each head's Query, Key and Value,
`attention_scores` takes Q·K, `mask_scores` and `causal_softmax` hide later tokens and turn
scores into weights, `attend` takes the weighted sum of values, `project_out` concatenates the
heads and applies W_O (`head_results` gives each head's share of it), then the residual, the
MLP (`affine`, `gelu_new`, `affine`), and `unembed` maps every final vector to one score per
vocabulary token.

Every intermediate is recorded under TransformerLens's hook names, without the batch axis, by
passing it through `rec(name, value)`. Two extras that teaching needs and TransformerLens lacks:
`blocks.{l}.attn.hook_dots` (the raw Q·K, before scaling and before the mask) and
`blocks.{l}.attn.hook_result` (each head's output after W_O, before the heads are summed).

`forward` takes an optional `KVCache`: then only the new positions are computed and the keys and
values of earlier positions are reused, as generation does. Core module: imports numpy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from .config import Config
from .record import PACK_MIN_QUERIES, Recorder
from .weights import Params, unembedding

# --------------------------------------------------------------------------- one equation each


def embed(W_E: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    return W_E[tokens]  # [pos, d_model]


def position_vectors(W_pos: np.ndarray, start: int, n: int) -> np.ndarray:
    return W_pos[start : start + n]  # [pos, d_model]


def normalize(x: np.ndarray, eps: float) -> np.ndarray:
    """Layer norm before its weight and bias: zero mean, unit variance per position."""
    d = x.shape[-1]  # add.reduce / d is what ndarray.mean computes, without its Python wrapper
    centred = x - np.add.reduce(x, axis=-1, keepdims=True) / d  # [pos, d_model]
    var = np.add.reduce(centred * centred, axis=-1, keepdims=True) / d  # [pos, 1]
    return centred / np.sqrt(var + eps)  # [pos, d_model]


def scale_and_shift(normalized: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = normalized * w  # [pos, d_model]
    out += b
    return out


def affine(x: np.ndarray, W: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x @ W + b, the bias added in place (no second output-sized array)."""
    out = x @ W  # [pos, d_out]
    out += b
    return out


def affine_one(x: np.ndarray, W_rows: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x @ W + b for a single position, with W given transposed ([d_out, d_in], rows contiguous).

    The same sum as `affine`; one-position products only read memory, and OpenBLAS streams a
    [d_out, d_in] matrix faster than a [d_in, d_out] one when d_out is the small side (GPT-2's
    W_out: 27 against 22 GB/s on the benchmark machine, BENCHMARKS.md).
    """
    out = W_rows @ x[0]  # [d_out]
    out += b
    return out[None]  # [1, d_out]


def fuse_qkv(W_Q: np.ndarray, W_K: np.ndarray, W_V: np.ndarray) -> np.ndarray:
    """[head, d_model, d_head] ×3 → one [d_model, 3·head·d_head] matrix (GPT-2's c_attn layout)."""
    return np.concatenate(
        [W.transpose(1, 0, 2).reshape(W.shape[1], -1) for W in (W_Q, W_K, W_V)], axis=1
    )  # [d_model, 3 * head * d_head]


def project_qkv(x: np.ndarray, W_qkv: np.ndarray, b_qkv: np.ndarray, n_heads: int):
    """Each position's Query, Key and Value for every head, in one matrix product."""
    qkv = x @ W_qkv  # [pos, 3 * head * d_head]
    qkv += b_qkv  # in place: no second [pos, 3 * head * d_head] array
    qkv = qkv.reshape(x.shape[0], 3, n_heads, -1)  # [pos, 3, head, d_head]
    return qkv[:, 0], qkv[:, 1], qkv[:, 2]  # [pos, head, d_head] each (views: no copy)


def attention_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Q·K for every head, query and key: how much each query position matches each key."""
    return np.matmul(q.transpose(1, 0, 2), k.transpose(1, 2, 0))  # [head, query_pos, key_pos]


def causal_mask(n_query: int, n_key: int) -> np.ndarray:
    """True where a key is later than its query (hidden). Queries are the last n_query keys."""
    query_pos = np.arange(n_key - n_query, n_key)[:, None]  # [query_pos, 1]
    return np.arange(n_key)[None, :] > query_pos  # [query_pos, key_pos]


def mask_scores(scores: np.ndarray) -> np.ndarray:
    """Later keys get -inf, so softmax gives them exactly 0 (in place on a fresh array)."""
    n_query, n_key = scores.shape[-2:]
    if n_query > 1:  # copyto with a broadcast mask: far faster than boolean indexing
        np.copyto(scores, -np.inf, where=causal_mask(n_query, n_key))  # [head, query_pos, key_pos]
    return scores


def scaled_and_masked(dots: np.ndarray, scale: float | None) -> np.ndarray:
    """Q·K ÷ √d_head (when the model scales), later keys -inf: a new array, `dots` untouched."""
    return mask_scores(dots * scale if scale is not None else dots.copy())  # [head, query_pos, key_pos]


def score_scale(cfg: Config) -> float | None:
    """1/√d_head when the model scales its scores (a Python float keeps float32 float32)."""
    return 1.0 / math.sqrt(cfg.d_head) if cfg.scale_scores else None


def recipes(cfg: Config) -> dict[str, tuple]:
    """The values a recording may keep as recipes (`tracer.record.Recorder.recipe`), by name in a
    block: (function, the names it reads). The decoder records with these, and loading a file
    (`tracer.trace.hold`) checks a file against them."""
    return {
        "attn.hook_attn_scores": (partial(scaled_and_masked, scale=score_scale(cfg)), "attn.hook_dots"),
        "attn.hook_dots": (attention_scores, "attn.hook_q", "attn.hook_k"),
        "mlp.hook_post": (gelu_new, "mlp.hook_pre"),
    }


def causal_softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over keys, subtracting each row's maximum first so exp never overflows."""
    e = scores - scores.max(axis=-1, keepdims=True)  # [head, query_pos, key_pos]
    np.exp(e, out=e)  # in place, as are the steps below: one [head, query_pos, key_pos] array
    e /= e.sum(axis=-1, keepdims=True)  # [head, query_pos, key_pos]
    return e


def attend(pattern: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The weighted sum of values: e.g. 0.4×A_V + 0.6×B_V for B in the article."""
    z = np.matmul(pattern, v.transpose(1, 0, 2))  # [head, query_pos, d_head]
    return z.transpose(1, 0, 2)  # [pos, head, d_head]


def head_results(z: np.ndarray, W_O: np.ndarray) -> np.ndarray:
    """Each head's output after its slice of W_O, before the heads are summed."""
    return np.matmul(z.transpose(1, 0, 2), W_O).transpose(1, 0, 2)  # [pos, head, d_model]


def project_out(z: np.ndarray, W_O: np.ndarray, b_O: np.ndarray) -> np.ndarray:
    """The attention's output: the heads concatenated, times W_O, plus the bias, in one product.

    The same sum as adding up the heads' results (`head_results`): [pos, head·d_head] @
    [head·d_head, d_model] splits into one product per head. The decoder computes this one
    product (K = 768 instead of twelve products with K = 64: 15–45 ms of a 128-token GPT-2-small
    prefill), so `hook_attn_out` has the same bits whatever is recorded, and `hook_result` is
    computed from `hook_z` only when it is read (a `tracer.record.Derived` recipe).
    """
    return affine(z.reshape(z.shape[0], -1), W_O.reshape(-1, W_O.shape[-1]), b_O)  # [pos, d_model]


def gelu_new(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (GPT-2's `gelu_new`): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).

    Built in place on one array; x³ is x·x·x because numpy's float32 `x**3` calls powf per
    element (about 300× slower: it was half of a GPT-2-small prefill before this was changed).
    """
    t = x * x  # [pos, d_mlp]
    t *= x  # x³
    t *= 0.044715
    t += x
    t *= math.sqrt(2.0 / math.pi)
    np.tanh(t, out=t)
    t += 1.0
    t *= x
    t *= 0.5  # exact (a power of two), so the order of the products does not matter
    return t  # [pos, d_mlp]


def unembed(x: np.ndarray, W_U: np.ndarray, b_U: np.ndarray) -> np.ndarray:
    """One score (logit) per vocabulary token, at every position.

    Computed as (W_U.T @ x.T).T: the same products, but with GPT-2's tied W_U (W_E, [d_vocab,
    d_model] rows) as the left operand OpenBLAS runs them 5–40% faster (fewer rows, more so).
    The result is the transpose of a [d_vocab, pos] array: Fortran-ordered, same values.
    """
    logits = np.matmul(W_U.T, x.T).T  # [pos, d_vocab]
    logits += b_U  # in place: the [pos, d_vocab] array is the largest of a pass
    return logits


# --------------------------------------------------------------------------- fused weights, cache


ROWS_MAX_BYTES = 512 * 2**20  # the most memory the transposed copies of W_out may take


def transposed(W: np.ndarray, block: int = 128) -> np.ndarray:
    """A C-contiguous copy of W.T, copied in blocks of rows that stay in cache (2× numpy's copy)."""
    out = np.empty(W.shape[::-1], dtype=W.dtype)  # [d_out, d_in]
    for i in range(0, W.shape[0], block):
        out[:, i : i + block] = W[i : i + block].T
    return out


@dataclass
class Fused:
    """Per-layer matrices in the layout matrix products want, built once per set of weights.

    `W_out_rows` holds each layer's W_out transposed, used by one-position passes (`affine_one`)
    once `add_out_rows` has built them. It is a trade: on GPT-2 small the copies take 113 MB and
    35–290 ms to build once (the most when the memory is new to the process) and save about 2 ms per
    generated token, so `tracer.generate` builds them only for long generations
    (`OUT_ROWS_MIN_NEW` tokens or more).
    """

    W_qkv: list  # [d_model, 3 * head * d_head] per layer
    b_qkv: list  # [3 * head * d_head] per layer
    W_U: np.ndarray  # [d_model, d_vocab]
    W_out_rows: dict = field(default_factory=dict)  # layer → [d_model, d_mlp]

    def add_out_rows(self, cfg: Config, params: Params) -> bool:
        """Build every layer's transposed W_out, unless they would take over ROWS_MAX_BYTES."""
        if not cfg.mlp or cfg.n_layers * cfg.d_mlp * cfg.d_model * np.dtype(cfg.dtype).itemsize > ROWS_MAX_BYTES:
            return False
        for l in range(cfg.n_layers):
            if l not in self.W_out_rows:
                self.W_out_rows[l] = transposed(params[f"blocks.{l}.mlp.W_out"])  # [d_model, d_mlp]
        return True


def fuse(cfg: Config, params: Params, W_qkv: list | None = None) -> Fused:
    """`W_qkv` may be passed when a loader already has it (GPT-2's c_attn), to avoid a copy."""
    Wq, bq = [], []
    for l in range(cfg.n_layers):
        a = f"blocks.{l}.attn."
        Wq.append(W_qkv[l] if W_qkv is not None else fuse_qkv(params[a + "W_Q"], params[a + "W_K"], params[a + "W_V"]))
        bq.append(np.concatenate([params[a + f"b_{m}"].reshape(-1) for m in "QKV"]))
    return Fused(Wq, bq, unembedding(cfg, params))


class KVCache:
    """Keys and values of the positions seen so far, per layer, reused by later steps."""

    def __init__(self, cfg: Config, capacity: int):
        shape = (cfg.n_layers, capacity, cfg.n_heads, cfg.d_head)
        self.k = np.empty(shape, dtype=cfg.dtype)  # [layer, pos, head, d_head]
        self.v = np.empty(shape, dtype=cfg.dtype)  # [layer, pos, head, d_head]
        self.length = 0  # positions filled

    @property
    def capacity(self) -> int:
        return self.k.shape[1]


# --------------------------------------------------------------------------- the forward pass


def forward(
    cfg: Config,
    params: Params,
    tokens,
    rec: Recorder | None = None,
    cache: KVCache | None = None,
    fused: Fused | None = None,
) -> np.ndarray:
    """Logits [pos, d_vocab] for `tokens` (the new tokens only, when a cache holds earlier ones)."""
    rec = rec if rec is not None else Recorder(names=[])
    fused = fused if fused is not None else fuse(cfg, params)
    tokens = np.asarray(tokens, dtype=np.int64)  # [pos]
    start = cache.length if cache is not None else 0
    n = tokens.shape[0]
    dt = cfg.dtype

    x = rec("hook_embed", embed(params["W_E"], tokens).astype(dt, copy=False))  # [pos, d_model]
    if cfg.positional != "none":
        x = x + rec("hook_pos_embed", position_vectors(params["W_pos"], start, n))  # [pos, d_model]
    scale = score_scale(cfg)
    long = n >= PACK_MIN_QUERIES  # a long pass keeps what it can recompute as recipes (tracer.record.Store)
    recipe = recipes(cfg)  # name → (function, the names it reads)

    for l in range(cfg.n_layers):
        r = rec.scope(f"blocks.{l}")
        p = f"blocks.{l}."
        resid_pre = r("hook_resid_pre", x)  # [pos, d_model]
        h = resid_pre
        if cfg.layer_norm:
            h = scale_and_shift(r("ln1.hook_normalized", normalize(h, cfg.ln_eps)), params[p + "ln1.w"], params[p + "ln1.b"])
        q, k, v = project_qkv(h, fused.W_qkv[l], fused.b_qkv[l], cfg.n_heads)  # [pos, head, d_head]
        r("attn.hook_q", q)
        r("attn.hook_k", k)
        r("attn.hook_v", v)
        if cache is not None:
            cache.k[l, start : start + n] = k
            cache.v[l, start : start + n] = v
            if start:  # earlier keys and values come from the cache (from position 0: the same as k, v)
                k = cache.k[l, : start + n]  # [key_pos, head, d_head]
                v = cache.v[l, : start + n]  # [key_pos, head, d_head]
        dots = attention_scores(q, k)  # [head, query_pos, key_pos]
        if r.wants("attn.hook_dots"):  # kept: scale and mask a copy; the scores are kept as a recipe
            if long and not start:
                r.recipe("attn.hook_dots", dots, *recipe["attn.hook_dots"])
            else:
                r("attn.hook_dots", dots)
            scores = r.recipe("attn.hook_attn_scores", scaled_and_masked(dots, scale), *recipe["attn.hook_attn_scores"],
                              verify=False)  # [head, query_pos, key_pos] exact: a product by one number, a mask
        else:  # not kept: scale and mask in place (the same products, no second array)
            scores = dots
            if scale is not None:
                scores *= scale
            scores = r.causal("attn.hook_attn_scores", mask_scores(scores), -np.inf)  # [head, query_pos, key_pos]
        pattern = r.causal("attn.hook_pattern", causal_softmax(scores), 0.0)  # [head, query_pos, key_pos]
        z = r("attn.hook_z", attend(pattern, v))  # [pos, head, d_head]
        W_O = params[p + "attn.W_O"]  # [head, d_head, d_model]
        if r.wants("attn.hook_result") and not r.lazy("attn.hook_result", head_results, ("attn.hook_z", W_O),
                                                      (n, cfg.n_heads, cfg.d_model), z.dtype):
            r("attn.hook_result", head_results(z, W_O))  # [pos, head, d_model]
        attn_out = r("hook_attn_out", project_out(z, W_O, params[p + "attn.b_O"]))  # [pos, d_model]
        x = resid_pre + attn_out if cfg.residual else attn_out  # [pos, d_model]
        if cfg.mlp:
            resid_mid = r("hook_resid_mid", x)  # [pos, d_model]
            h = resid_mid
            if cfg.layer_norm:
                h = scale_and_shift(r("ln2.hook_normalized", normalize(h, cfg.ln_eps)), params[p + "ln2.w"], params[p + "ln2.b"])
            pre = r("mlp.hook_pre", affine(h, params[p + "mlp.W_in"], params[p + "mlp.b_in"]))  # [pos, d_mlp]
            post = gelu_new(pre)  # [pos, d_mlp]
            post = r.recipe("mlp.hook_post", post, *recipe["mlp.hook_post"]) if long else r("mlp.hook_post", post)
            W_out, b_out = params[p + "mlp.W_out"], params[p + "mlp.b_out"]
            rows = fused.W_out_rows.get(l) if n == 1 else None  # [d_model, d_mlp]
            mlp_out = r("hook_mlp_out", affine(post, W_out, b_out) if rows is None else affine_one(post, rows, b_out))  # [pos, d_model]
            x = resid_mid + mlp_out if cfg.residual else mlp_out  # [pos, d_model]
        x = r("hook_resid_post", x)  # [pos, d_model]

    if cache is not None:
        cache.length = start + n
    if cfg.layer_norm:
        x = scale_and_shift(rec("ln_final.hook_normalized", normalize(x, cfg.ln_eps)), params["ln_final.w"], params["ln_final.b"])
    x = rec("unembed.hook_in", x)  # [pos, d_model]
    return rec("logits", unembed(x, fused.W_U, params["b_U"]))  # [pos, d_vocab]


def hook_names(cfg: Config) -> list[str]:
    """Every name `forward` records for `cfg`, in order (from a one-token run, so it is exact)."""
    from .weights import init_weights

    shape = dict(d_vocab=2, n_ctx=1, d_model=cfg.n_heads, d_head=1, d_mlp=1)
    small = Config(**{**cfg.to_dict(), **shape})
    rec = Recorder()
    forward(small, init_weights(small, 0), [0], rec)
    return list(rec.store)
