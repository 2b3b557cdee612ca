"""The equations of a decoder, one small function each, in the seed article's order.

Hold the article next to this file: a token's id picks a row of the embedding matrix (`embed`),
its position vector is added (`position_vectors`), the layer norm rescales it (`normalize`,
`scale_and_shift`), Q, K and V come out of one matrix product (`split_heads`), every query meets
every key (`attention_scores`), later keys are hidden (`scale_and_mask`) and the scores become
weights (`causal_softmax`), the weights blend the values (`attend`: the article's 0.4×A_V +
0.6×B_V), the heads are merged through W_O (`merge_heads`; `head_results` gives each head's share),
the MLP applies GELU (`gelu_new`) between two affine maps, the unembedding gives one score per
vocabulary token, and `tempered_softmax` turns the last one's scores into probabilities. picoGPT's `gpt2.py` reads the same way.

Llama, Qwen2 and Mistral change four of these steps, and the functions for them sit beside the
ones they replace: no position vector is added, Q and K are rotated by their position instead
(`rope_frequencies`, `rope_angles`, `rotate`); the norm divides by the root mean square without
subtracting the mean (`rms_normalize`); the MLP is gated (`silu`, `swiglu`); and several query
heads may share one key/value head (grouped-query attention: `split_heads`, `attention_scores`
and `attend` take K and V with fewer heads than Q).

Axis names in the shape comments: pos, head, d_head, query_pos, key_pos, d_model, d_mlp, d_vocab;
any of them may follow a leading batch axis ([batch, pos, …], as training uses). Pure functions of
arrays; `tracer.core.decoder` composes them into blocks and records what they make.
Core module: imports numpy only.
"""

from __future__ import annotations

import math

import numpy as np

from .qkv import split_qkv


def embed(W_E: np.ndarray, tokens: np.ndarray) -> np.ndarray:  # [d_vocab, d_model], [pos] → [pos, d_model]
    return W_E[tokens]  # [pos, d_model]


def position_vectors(W_pos: np.ndarray, start: int, n: int) -> np.ndarray:  # [n_ctx, d_model] → [pos, d_model]
    return W_pos[start : start + n]  # [pos, d_model]


def normalize(x: np.ndarray, eps: float):  # [pos, d_model] → [pos, d_model], [pos, 1]
    """Layer norm before its weight and bias: zero mean, unit variance per position. Also gives the
    scale it divided by, √(variance + eps) (TransformerLens's `hook_scale`)."""
    d = x.shape[-1]  # add.reduce / d is ndarray.mean without its Python wrapper (the same bits)
    centred = x - np.add.reduce(x, axis=-1, keepdims=True) / d  # [pos, d_model]
    var = np.add.reduce(centred * centred, axis=-1, keepdims=True) / d  # [pos, 1]
    scale = np.sqrt(var + eps)  # [pos, 1]
    return centred / scale, scale  # [pos, d_model], [pos, 1]


def rms_normalize(x: np.ndarray, eps: float):  # [pos, d_model] → [pos, d_model], [pos, 1]
    """RMS norm before its weight (Llama, Qwen2, Mistral): no mean is subtracted; each position is
    divided by its root mean square √(mean(x²) + eps), which is also returned (`hook_scale`)."""
    d = x.shape[-1]
    scale = np.sqrt(np.add.reduce(x * x, axis=-1, keepdims=True) / d + eps)  # [pos, 1]
    return x / scale, scale  # [pos, d_model], [pos, 1]


def scale_and_shift(normalized: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
    """The norm's learned gain and bias (an RMS norm has no bias: b is None)."""
    out = normalized * w  # [pos, d_model]
    if b is not None:
        out += b
    return out


def split_heads(qkv: np.ndarray, n_heads: int, n_kv_heads: int | None = None):  # [pos, (head + 2·kv_head)·d_head] → [pos, head, d_head], 2 × [pos, kv_head, d_head]
    """x·[W_Q | W_K | W_V] + [b_Q | b_K | b_V], cut into each head's Query, Key and Value (views).
    With grouped-query attention K and V have `n_kv_heads` heads (fewer than Q's)."""
    return split_qkv(qkv, n_heads, n_kv_heads)  # the column order is tracer.core.qkv's


def rope_frequencies(d_head: int, theta: float, scaling: dict | None = None) -> np.ndarray:  # → [d_head / 2]
    """The angle per position of each pair of a head's dimensions: θ_i = theta^(−2i/d_head) (RoPE),
    with Llama 3's stretch of the slow frequencies when `scaling` says {"rope_type": "llama3", …}, or
    each divided by its own factor when it says {"rope_type": "factors", "factors": [d_head / 2]}
    (how a GGUF file stores Llama 3's scaling: its `rope_freqs` tensor, as llama.cpp applies it), or
    all divided by one factor when it says {"rope_type": "linear", "factor": f} (positions stretched f
    times: Gemma 3's global layers); {"rope_type": "proportional", "partial_rotary_factor": p} (Gemma 4's
    full layers, transformers' "proportional"): the first ⌊p·d_head/2⌋ pairs keep the whole head's θ_i, the
    others θ_i = 0 (they do not turn) — unlike partial rotary's, whose turning pairs span only its width."""
    inv = 1.0 / np.power(float(theta), np.arange(0, d_head, 2, dtype=np.float64) / d_head)  # [d_head / 2]
    if not scaling:
        return inv
    if scaling.get("rope_type") == "factors":
        return inv / np.asarray(scaling["factors"], dtype=np.float64)  # [d_head / 2]
    if scaling.get("rope_type") == "linear":
        return inv / float(scaling["factor"])  # [d_head / 2]
    if scaling.get("rope_type") == "proportional":  # Gemma 4's full layers: the first pairs turn at the whole head's
        inv[int(float(scaling["partial_rotary_factor"]) * d_head // 2):] = 0.0  # frequencies, the rest not at all
        return inv / float(scaling.get("factor", 1.0))  # [d_head / 2]
    if scaling.get("rope_type") == "yarn":
        return yarn_frequencies(inv, d_head, theta, scaling)
    factor, low, high = (float(scaling[k]) for k in ("factor", "low_freq_factor", "high_freq_factor"))
    old_ctx = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv  # [d_head / 2] positions per turn
    slow = np.where(wavelen > old_ctx / low, inv / factor, inv)  # long waves stretched by the factor
    smooth = (old_ctx / wavelen - low) / (high - low)  # between the two: a blend
    medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
    return np.where(medium, (1 - smooth) * slow / factor + smooth * slow, slow)  # [d_head / 2]


def yarn_frequencies(inv: np.ndarray, d_head: int, theta: float, scaling: dict) -> np.ndarray:  # [d_head / 2] → same
    """YaRN (Peng et al. 2023; gpt-oss, OLMo 3): each pair's frequency blended between the original
    (fast pairs, which turn many times within the original context, extrapolated) and the original ÷
    factor (slow pairs, interpolated), by a ramp over the pairs between the correction dimensions of
    `beta_fast` and `beta_slow` turns; with `truncate` (transformers' default, and always in llama.cpp:
    `ggml_rope_yarn_corr_dims`) those dimensions rounded outwards to whole pairs first."""
    factor, ctx = float(scaling["factor"]), float(scaling["original_max_position_embeddings"])
    fast, slow = float(scaling.get("beta_fast") or 32.0), float(scaling.get("beta_slow") or 1.0)

    def correction_dim(turns: float) -> float:  # the pair index at which `turns` turns fit the original context
        return d_head * math.log(ctx / (turns * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(fast), correction_dim(slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d_head - 1)
    if low == high:
        high += 0.001  # no division by zero
    ramp = np.clip((np.arange(d_head // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)  # [d_head / 2]
    extrapolated = 1.0 - ramp  # 1: the original frequency, 0: divided by the factor
    return inv / factor * (1.0 - extrapolated) + inv * extrapolated  # [d_head / 2]


def rope_attention_factor(scaling: dict | None) -> float:
    """What YaRN multiplies cos and sin by (so Q·K by its square): `attention_factor` when given, else
    0.1·ln(factor) + 1 (1 for factor ≤ 1, and for every other scaling)."""
    if not scaling or scaling.get("rope_type") != "yarn":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor = float(scaling["factor"])
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def rope_turn(angle: np.ndarray, factor: float = 1.0):  # [pos, d_head / 2] → ([pos, d_head / 2], [pos, d_head / 2])
    """(cos, sin) of the angles, times YaRN's attention factor when it is not 1."""
    if factor == 1.0:
        return np.cos(angle), np.sin(angle)
    f = angle.dtype.type(factor)
    return np.cos(angle) * f, np.sin(angle) * f


def rope_angles(frequencies: np.ndarray, start: int, n: int) -> np.ndarray:  # [d_head / 2] → [pos, d_head / 2]
    """position·θ_i, the angle each pair of a head's dimensions turns by, for positions start … start + n − 1."""
    return np.arange(start, start + n, dtype=np.float64)[:, None] * frequencies[None, :]  # [pos, d_head / 2]


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:  # [pos, head, d_head], 2 × [pos, d_head / 2] → [pos, head, d_head]
    """RoPE: each pair (x_i, x_{i + h}) turned by its position's angle (transformers' rotate_half
    pairing): (x_i·cos − x_{i+h}·sin, x_{i+h}·cos + x_i·sin), h = the angles given (d_head / 2; partial
    rotary, Qwen3.5's: the first 2h of each head's numbers turn, the rest pass as they are)."""
    h = cos.shape[-1]
    c, s = cos[..., :, None, :], sin[..., :, None, :]  # [pos, 1, h]: the same angle for every head
    first, second = x[..., :h], x[..., h: 2 * h]  # [pos, head, h] each
    turned = [first * c - second * s, second * c + first * s]
    if 2 * h < x.shape[-1]:
        turned.append(x[..., 2 * h:])  # partial rotary: these do not turn
    return np.concatenate(turned, axis=-1)  # [pos, head, d_head]


def _grouped(x: np.ndarray, groups: int) -> np.ndarray:  # [..., head, a, b] → [..., kv_head, group, a, b]
    """Query heads gathered under the key/value head they share (heads g·group … g·group + group − 1)."""
    return x.reshape(*x.shape[:-3], x.shape[-3] // groups, groups, *x.shape[-2:])


def attention_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:  # [query_pos, head, d_head], [key_pos, kv_head, d_head] → [head, query_pos, key_pos]
    """Q·K for every head, query and key: how well each query matches each key. With fewer key heads
    than query heads (grouped-query attention), query head h meets key head h // (head / kv_head)."""
    qh, kh = q.swapaxes(-3, -2), k.swapaxes(-3, -2).swapaxes(-1, -2)  # [head, query_pos, d_head], [kv_head, d_head, key_pos]
    groups = q.shape[-2] // k.shape[-2]
    if groups == 1:
        return np.matmul(qh, kh)  # [head, query_pos, key_pos]
    dots = np.matmul(_grouped(qh, groups), kh[..., :, None, :, :])  # [kv_head, group, query_pos, key_pos]
    return dots.reshape(*qh.shape[:-1], kh.shape[-1])  # [head, query_pos, key_pos]


def causal_mask(n_query: int, n_key: int, window: int | None = None) -> np.ndarray:  # → [query_pos, key_pos] bool
    """True where a key is hidden from its query: it comes after the query, or (with a sliding
    window, Mistral's) `window` or more positions before it. The queries are the last n_query keys."""
    query_pos = np.arange(n_key - n_query, n_key)[:, None]  # [query_pos, 1]
    key_pos = np.arange(n_key)[None, :]  # [1, key_pos]
    hidden = key_pos > query_pos  # [query_pos, key_pos]
    if window is not None:
        hidden |= key_pos <= query_pos - window
    return hidden


def score_scale(d_head: int, scaled: bool) -> float | None:
    """1/√d_head when the model scales its scores (a Python float keeps float32 float32), else None."""
    return 1.0 / math.sqrt(d_head) if scaled else None


def scale_and_mask(dots: np.ndarray, scale: float | None, window: int | None = None,
                   cap: float | None = None) -> np.ndarray:  # [head, query_pos, key_pos] → same
    """Q·K ÷ √d_head (when the model scales), soft-capped (Gemma 2: cap · tanh(s / cap), before the
    mask), hidden keys −∞ so softmax gives them exactly 0."""
    scores = dots * scale if scale is not None else dots.copy()  # [head, query_pos, key_pos] a new array
    if cap is not None:
        scores = softcap(scores, cap)
    n_query, n_key = scores.shape[-2:]
    if n_query > 1 or (window is not None and n_key > window):  # copyto with a broadcast mask: far faster than boolean indexing
        np.copyto(scores, -np.inf, where=causal_mask(n_query, n_key, window))
    return scores


def causal_softmax(scores: np.ndarray) -> np.ndarray:  # [head, query_pos, key_pos] → same
    """Softmax over the keys, each row's maximum subtracted first so that exp never overflows."""
    e = scores - np.maximum.reduce(scores, axis=-1, keepdims=True)  # [head, query_pos, key_pos] (`.max` without its wrapper)
    np.exp(e, out=e)  # in place, as is the division: one [head, query_pos, key_pos] array
    e /= np.add.reduce(e, axis=-1, keepdims=True)
    return e


def sink_softmax(scores: np.ndarray, sinks: np.ndarray):  # [head, query_pos, key_pos], [head] → same, [head, query_pos]
    """gpt-oss's attention sinks: each head's learned logit joins every row's softmax as one more key
    that has no value, so it takes part of the weight: the pattern over the real keys sums to 1 − the
    sink's share. Gives (the pattern over the keys, the sink's share of each row)."""
    s = sinks.astype(scores.dtype, copy=False)[..., :, None, None]  # [head, 1, 1]
    top = np.maximum(scores.max(axis=-1, keepdims=True), s)  # [head, query_pos, 1]
    e = np.exp(scores - top)  # [head, query_pos, key_pos]
    sink = np.exp(s - top)  # [head, query_pos, 1]
    total = e.sum(axis=-1, keepdims=True) + sink
    return e / total, (sink / total)[..., 0]  # [head, query_pos, key_pos], [head, query_pos]


def attend(pattern: np.ndarray, v: np.ndarray) -> np.ndarray:  # [head, query_pos, key_pos], [key_pos, kv_head, d_head] → [pos, head, d_head]
    """The weighted sum of values: the article's 0.4×A_V + 0.6×B_V for B (query head h reads value
    head h // (head / kv_head) under grouped-query attention)."""
    vh = v.swapaxes(-3, -2)  # [kv_head, key_pos, d_head]
    groups = pattern.shape[-3] // vh.shape[-3]
    if groups == 1:
        z = np.matmul(pattern, vh)  # [head, query_pos, d_head]
    else:
        z = np.matmul(_grouped(pattern, groups), vh[..., :, None, :, :])  # [kv_head, group, query_pos, d_head]
        z = z.reshape(*pattern.shape[:-1], vh.shape[-1])  # [head, query_pos, d_head]
    return z.swapaxes(-3, -2)  # [pos, head, d_head]


def head_results(z: np.ndarray, W_O: np.ndarray) -> np.ndarray:  # [pos, head, d_head], [head, d_head, d_model] → [pos, head, d_model]
    """Each head's output after its own slice of W_O, before the heads are summed."""
    return np.matmul(z.swapaxes(-3, -2), W_O).swapaxes(-3, -2)  # [pos, head, d_model]


def merge_heads(z: np.ndarray) -> np.ndarray:  # [pos, head, d_head] → [pos, head·d_head]
    """The heads' outputs laid end to end, ready for W_O (one product sums the heads' shares)."""
    return z.reshape(*z.shape[:-2], -1)  # [pos, head * d_head]


def gelu_new(x: np.ndarray) -> np.ndarray:  # [pos, d_mlp] → [pos, d_mlp]
    """GELU, tanh approximation (GPT-2's `gelu_new`): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).

    Built in place on one array, with x³ as x·x·x: numpy's float32 `x**3` calls powf per element.
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


def silu(x: np.ndarray) -> np.ndarray:  # [pos, d_mlp] → [pos, d_mlp]
    """SiLU (swish): x·sigmoid(x), with sigmoid(x) written as (1 + tanh(x/2))/2 so that no exp overflows."""
    s = np.tanh(x * 0.5)  # [pos, d_mlp]
    s += 1.0
    s *= x
    s *= 0.5
    return s


def swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:  # [pos, d_mlp] ×2 → [pos, d_mlp]
    """The gated MLP's middle (Llama's act_fn(gate_proj(x)) * up_proj(x)): SiLU(x·W_gate) ⊙ x·W_in."""
    out = silu(gate)
    out *= up
    return out


def scale_logits(logits: np.ndarray, temperature: float) -> np.ndarray:  # [d_vocab] → [d_vocab]
    """Logits ÷ temperature (1 for greedy, where the temperature only picks the argmax)."""
    with np.errstate(over="ignore"):  # float64: a temperature like 1e-320 is 0 in float32
        return logits / np.float64(1.0 if temperature == 0 else temperature)  # [d_vocab]


def tempered_softmax(logits: np.ndarray, temperature: float) -> np.ndarray:  # [d_vocab] → [d_vocab]
    """softmax(logits / T), shifting by the maximum before dividing so a tiny T cannot overflow."""
    t = np.float64(1.0 if temperature == 0 else temperature)  # float64: 1e-320 is 0 in float32
    with np.errstate(over="ignore"):
        e = np.exp((logits - logits.max()) / t)  # [d_vocab]
    return e / e.sum()  # [d_vocab]


def largest_first(x) -> np.ndarray:  # [n] → [n] indices
    """The indices of x from the largest value to the smallest, ties in index order (the token with
    the lower id first): the one ranking every table of probabilities, weights or counts uses."""
    return np.argsort(-np.asarray(x), kind="stable")  # [n]


def sinusoidal_positions(n_ctx: int, d_model: int) -> np.ndarray:  # → [n_ctx, d_model]
    """The sin/cos position vectors of "Attention Is All You Need" §3.5."""
    pos = np.arange(n_ctx)[:, None]  # [pos, 1]
    i = np.arange(d_model)[None, :]  # [1, d_model]
    angle = pos / np.power(10000.0, (2 * (i // 2)) / d_model)  # [pos, d_model]
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle))  # [pos, d_model]


def one_plus_gain(normalized: np.ndarray, w: np.ndarray, b=None) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
    """Gemma's RMS norm gain: the normalized vector × (1 + w) (w is stored as the gain minus 1; no bias)."""
    return normalized * (1.0 + w)


def softcap(x: np.ndarray, cap: float) -> np.ndarray:  # any shape → same
    """Gemma 2's soft-cap: cap · tanh(x / cap), near x for small x, never beyond ±cap."""
    c = np.asarray(cap, dtype=x.dtype) if isinstance(x, np.ndarray) else cap
    return c * np.tanh(x / c)


def geglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:  # [pos, d_mlp] ×2 → [pos, d_mlp]
    """Gemma's gated MLP middle: GELU (tanh approximation) of x·W_gate, times x·W_in."""
    return gelu_new(gate) * up


# --------------------------------------------------------------------------- mixtures of experts


def sigmoid(x: np.ndarray) -> np.ndarray:  # any shape → same
    """1 / (1 + e^−x), written as (1 + tanh(x/2))/2 so that no exp overflows."""
    s = np.tanh(x * 0.5)
    s += 1.0
    s *= 0.5
    return s


def softmax(x: np.ndarray) -> np.ndarray:  # [..., n] → [..., n]
    """e^x / Σ e^x along the last axis, shifted by each row's maximum (a row of −∞ but one stays finite)."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))  # [..., n]
    return e / e.sum(axis=-1, keepdims=True)


def top_k(x: np.ndarray, k: int) -> np.ndarray:  # [..., n] → [..., k] indices
    """The indices of each row's k largest values, the largest first, ties in index order (the lower
    expert first, as `largest_first`)."""
    return np.argsort(-x, axis=-1, kind="stable")[..., :k]  # [..., k]


def route_softmax_topk(logits: np.ndarray, k: int, renormalize: bool):  # [pos, expert] → [pos, k] ×2
    """Mixtral's, Qwen-MoE's and OLMoE's router: softmax over every expert's score, keep the k most
    probable; with `renormalize`, their probabilities divided by their sum (so the k weights sum to 1)."""
    probs = softmax(logits)  # [pos, expert]
    chosen = top_k(probs, k)  # [pos, k]
    weights = np.take_along_axis(probs, chosen, axis=-1)  # [pos, k]
    return chosen, weights / weights.sum(axis=-1, keepdims=True) if renormalize else weights


def route_topk_softmax(logits: np.ndarray, k: int):  # [pos, expert] → [pos, k] ×2
    """gpt-oss's router: the k largest scores, then a softmax over those k alone."""
    chosen = top_k(logits, k)  # [pos, k]
    return chosen, softmax(np.take_along_axis(logits, chosen, axis=-1))  # [pos, k]


def clamped_swiglu(gate: np.ndarray, up: np.ndarray, alpha: float, limit: float) -> np.ndarray:  # [.., d_mlp] ×2 → same
    """gpt-oss's expert middle: the gate clamped from above and `up` on both sides at `limit`, then
    (up + 1) · gate · sigmoid(α · gate)."""
    g = np.minimum(gate, limit)
    u = np.clip(up, -limit, limit)
    return (u + 1.0) * (g * sigmoid(g * alpha))


def mix(weights: np.ndarray, outs: np.ndarray) -> np.ndarray:  # [pos, k], [pos, k, d_model] → [pos, d_model]
    """The layer's output: the chosen experts' outputs weighted and summed, as attention sums values
    ("0.41×E3(x) + 0.33×E17(x) + …")."""
    return np.einsum("pk,pkd->pd", weights, outs)  # [pos, d_model]
