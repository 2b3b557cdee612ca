"""The backward pass: the gradient of the next-token loss with respect to every parameter.

One backward function per forward function, in reverse order, each reading the intermediates the
forward pass recorded (the trace is the activation cache): `d_unembed` undoes `Affine` on the
final vectors, `d_norm` the norm, `d_mlp` the MLP, `d_attention` the attention
(`d_merge_heads`, `d_attend`, `d_causal_softmax`, `d_scale_and_mask`, `d_attention_scores`,
`d_split_heads`), `d_block` a layer with its residuals, `d_embed` the lookup (`d_unembed` the
unembedding); grouped-query attention in `d_attend` / `d_attention_scores`. The switchable parts
(the norm and its gain, the MLP's middle, the rotation, the added position vectors) are undone by
their entry's `backward` in the table of block switches (`tracer.core.blocks`, whose derivatives are
`tracer.core.derivatives`': `d_normalize`, `d_rms_normalize`, `d_gelu_new`, `d_swiglu`, `d_rotate`, …). The loss is the mean
next-token cross-entropy over the positions (position i predicts token i + 1), as transformers'
`GPT2LMHeadModel(ids, labels=ids).loss`.

Gradients are returned under the parameters' TransformerLens names, each of its parameter's shape
(`W_Q` [head, d_model, d_head], …); with tied embeddings `W_E`'s gradient holds both its uses.
Arrays may carry a leading batch axis ([batch, pos, …]); the loss is then the mean over every
predicted position of every sequence. Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np

from .config import Config
from .decoder import forward
from .fast import Layer, Weights, layout
from .qkv import fuse_qkv, split_qkv, split_qkv_weights
from .record import Recorder
from .store import meeting_qk

# --------------------------------------------------------------------------- the loss


def cross_entropy(logits: np.ndarray, targets: np.ndarray):  # [..., pos, d_vocab], [..., pos] → loss, [..., pos, d_vocab]
    """Mean of −log softmax(logits)[target] over the positions whose target is ≥ 0, and its
    gradient with respect to the logits: (softmax − one-hot) / count, built in one array.

    Worked out block by block of rows (each block's maximum, exponentials and sum while it is in
    cache), the blocks shared among threads: numpy's element-wise functions use one core each."""
    # [rows, d_vocab] in C order: each row's sum is then numpy's pairwise sum along contiguous memory
    # (a Fortran-ordered row, as one sequence's logits come, would be summed one by one: 1e-4 off in float32)
    rows = np.ascontiguousarray(logits.reshape(-1, logits.shape[-1]))
    t = targets.reshape(-1)  # [rows]
    use = t >= 0
    n = max(int(use.sum()), 1)
    p = np.empty_like(rows)  # [rows, d_vocab] the gradient
    logp = np.zeros(len(t))  # [rows] log p(target), float64

    def block(a: int, b: int) -> None:
        top = rows[a:b].max(axis=-1, keepdims=True)  # [block, 1]
        e = np.subtract(rows[a:b], top, out=p[a:b])  # [block, d_vocab] ≤ 0
        np.exp(e, out=e)
        total = e.sum(axis=-1, keepdims=True)  # [block, 1]
        i = np.arange(a, b)[use[a:b]]  # [targets] the rows that predict a token
        logp[i] = (rows[i, t[i]] - top[i - a, 0]).astype(np.float64) - np.log(total[i - a, 0].astype(np.float64))
        e *= (use[a:b] / n).astype(e.dtype)[:, None] / total  # softmax / count; no target: no gradient
        p[i, t[i]] -= p.dtype.type(1.0 / n)

    in_blocks(block, len(t))
    return float(-logp.sum() / n), p.reshape(logits.shape)


ROWS_PER_BLOCK = 32  # rows of logits worked out together: 6 MB of GPT-2's float32 logits


def in_blocks(fn, n_rows: int) -> None:
    """fn(a, b) for consecutive blocks of rows, spread over a few threads (numpy releases the GIL)."""
    blocks = [(a, min(a + ROWS_PER_BLOCK, n_rows)) for a in range(0, n_rows, ROWS_PER_BLOCK)]
    if len(blocks) < 4:
        for a, b in blocks:
            fn(a, b)
        return
    list(_pool().map(lambda ab: fn(*ab), blocks))


_POOL = []


def _pool():
    """One thread pool, as many threads as BLAS uses (OPENBLAS_NUM_THREADS, else the CPUs)."""
    if not _POOL:
        import os
        from concurrent.futures import ThreadPoolExecutor

        n = int(os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
        _POOL.append(ThreadPoolExecutor(max_workers=max(1, min(n, os.cpu_count() or 1))))
    return _POOL[0]


def next_token_targets(tokens: np.ndarray) -> np.ndarray:  # [..., pos] → [..., pos]
    """The token each position predicts; the last position has none (−1)."""
    t = np.full(tokens.shape, -1, dtype=np.int64)
    t[..., :-1] = tokens[..., 1:]
    return t


# --------------------------------------------------------------------------- one per forward function


def d_affine(dy: np.ndarray, x: np.ndarray, W: np.ndarray):  # y = x·W + b: [..., d_out] → dx, dW, db
    dy2 = dy.reshape(-1, dy.shape[-1])  # [rows, d_out]
    x2 = x.reshape(-1, x.shape[-1])  # [rows, d_in]
    dx = (dy2 @ W.T).reshape(*dy.shape[:-1], W.shape[0])  # [..., d_in]
    return dx, x2.T @ dy2, dy2.sum(axis=0)  # [..., d_in], [d_in, d_out], [d_out]


def d_unembed(dlogits: np.ndarray, x: np.ndarray, W_U: np.ndarray, tied: bool):  # → dx, dW_U (or W_E's share), db_U
    """logits = x·W_U + b_U. With W_U tied to W_E.T, the weight's gradient is given as W_E's share,
    dlogitsᵀ·x [d_vocab, d_model], in W_E's own layout (no transposed copy of a vocabulary-sized array)."""
    if not tied:
        return d_affine(dlogits, x, W_U)
    dy2 = dlogits.reshape(-1, dlogits.shape[-1])  # [rows, d_vocab]
    x2 = x.reshape(-1, x.shape[-1])  # [rows, d_model]
    dx = (dy2 @ W_U.T).reshape(x.shape)  # [..., d_model]
    return dx, dy2.T @ x2, dy2.sum(axis=0)  # [..., d_model], [d_vocab, d_model], [d_vocab]








def d_merge_heads(dm: np.ndarray, n_heads: int) -> np.ndarray:  # [..., pos, head·d_head] → [..., pos, head, d_head]
    return dm.reshape(*dm.shape[:-1], n_heads, -1)


def shared(x: np.ndarray, n_kv_heads: int) -> np.ndarray:  # [..., pos, head, d] → [..., pos, kv_head, d]
    """Grouped-query attention: the query heads' shares summed onto the key/value head they read."""
    H = x.shape[-2]
    if H == n_kv_heads:
        return x
    return x.reshape(*x.shape[:-2], n_kv_heads, H // n_kv_heads, x.shape[-1]).sum(axis=-2)


def each_head(x: np.ndarray, n_heads: int) -> np.ndarray:  # [..., pos, kv_head, d] → [..., pos, head, d]
    """Each key/value head repeated for the query heads that share it."""
    return x if x.shape[-2] == n_heads else np.repeat(x, n_heads // x.shape[-2], axis=-2)


def d_attend(dz: np.ndarray, pattern: np.ndarray, v: np.ndarray):  # z = pattern·V → dpattern, dv
    dz_h = dz.swapaxes(-3, -2)  # [..., head, query_pos, d_head]
    v_h = each_head(v, dz.shape[-2])  # [..., key_pos, head, d_head]
    dpattern = dz_h @ v_h.swapaxes(-3, -2).swapaxes(-1, -2)  # [..., head, query_pos, key_pos]
    dv = (pattern.swapaxes(-1, -2) @ dz_h).swapaxes(-3, -2)  # [..., key_pos, head, d_head]
    return dpattern, shared(dv, v.shape[-2])


def d_causal_softmax(dpattern: np.ndarray, pattern: np.ndarray) -> np.ndarray:  # → [..., head, query_pos, key_pos]
    """p = softmax(s): ds = p·(dp − Σ dp·p). Hidden keys have p = 0, so they get no gradient."""
    return pattern * (dpattern - (dpattern * pattern).sum(axis=-1, keepdims=True))


def d_scale_and_mask(dscores: np.ndarray, scale: float | None) -> np.ndarray:  # → dots' gradient
    return dscores * scale if scale is not None else dscores


def d_attention_scores(ddots: np.ndarray, q: np.ndarray, k: np.ndarray):  # dots = Q·K → dq, dk
    k_h = each_head(k, q.shape[-2])  # [..., key_pos, head, d_head]
    dq = (ddots @ k_h.swapaxes(-3, -2)).swapaxes(-3, -2)  # [..., query_pos, head, d_head]
    dk = (ddots.swapaxes(-1, -2) @ q.swapaxes(-3, -2)).swapaxes(-3, -2)  # [..., key_pos, head, d_head]
    return dq, shared(dk, k.shape[-2])


def d_split_heads(dq: np.ndarray, dk: np.ndarray, dv: np.ndarray) -> np.ndarray:  # → [..., pos, (head + 2·kv_head)·d_head]
    return fuse_qkv(dq, dk, dv)


def d_embed(dx: np.ndarray, tokens: np.ndarray, d_vocab: int) -> np.ndarray:  # [..., pos, d_model] → [d_vocab, d_model]
    dW = np.zeros((d_vocab, dx.shape[-1]), dtype=dx.dtype)
    np.add.at(dW, tokens.reshape(-1), dx.reshape(-1, dx.shape[-1]))
    return dW


# --------------------------------------------------------------------------- the decoder, backwards


def d_norm(cfg: Config, dy: np.ndarray, ln: tuple | None, acts, prefix: str, grads: dict, name: str) -> np.ndarray:
    """Back through `decoder.norm` (nothing to do without layer norm)."""
    if ln is None:
        return dy
    kind = cfg.norm_kind
    normalized = acts[prefix + "hook_normalized"]
    dn, grads[name + ".w"], db = kind.d_gain(dy, normalized, ln[0])
    if kind.bias:
        grads[name + ".b"] = db
    return kind.backward(dn, normalized, acts[prefix + "hook_scale"])


def d_qk_norm(cfg: Config, dy: np.ndarray, ln: tuple, acts, prefix: str, grads: dict, name: str) -> np.ndarray:
    """Back through `decoder.qk_norm`: [..., pos, heads, d_head] → the same, the norm's gain's gradient in `grads`."""
    return d_norm(cfg, cfg.qk_norm_kind.flat(dy), ln, acts, prefix, grads, name).reshape(dy.shape)


def d_mlp(cfg: Config, w: Layer, dy: np.ndarray, acts, p: str, grads: dict, ln_out: np.ndarray) -> np.ndarray:
    """Back through `decoder.mlp`: [..., pos, d_model] → the gradient of its input."""
    kind = cfg.mlp_kind
    dpost, grads[p + "mlp.W_out"], grads[p + "mlp.b_out"] = d_affine(dy, acts[p + "mlp.hook_post"], w.mlp_out.W)
    dinputs = kind.backward(dpost, *(acts[p + "mlp." + i.hook] for i in kind.inputs))  # each input's gradient
    dx = None
    for i, d in zip(kind.inputs, dinputs):  # back through each x·W (+ b)
        dx_i, grads[p + "mlp." + i.weight], db = d_affine(d, ln_out, getattr(w, i.affine).W)
        if i.bias:
            grads[p + "mlp." + i.bias] = db
        dx = dx_i if dx is None else dx + dx_i
    return dx


def d_attention(cfg: Config, w: Layer, dy: np.ndarray, acts, p: str, grads: dict, ln_out: np.ndarray,
                turn=None) -> np.ndarray:
    """Back through `decoder.attention`: [..., pos, d_model] → the gradient of its input."""
    H, KV, dh, dm = cfg.n_heads, cfg.kv_heads, cfg.d_head, cfg.d_model
    a = p + "attn."
    z, pattern = acts[a + "hook_z"], acts[a + "hook_pattern"]
    q_name, k_name = meeting_qk(cfg)  # under RoPE, the rotated Q and K
    q, k, v = acts[p + q_name], acts[p + k_name], acts[a + "hook_v"]
    dmerged, dW_O, grads[a + "b_O"] = d_affine(dy, z.reshape(*z.shape[:-2], -1), w.out.W)
    grads[a + "W_O"] = dW_O.reshape(H, dh, dm)
    dpattern, dv = d_attend(d_merge_heads(dmerged, H), pattern, v)
    dscores = d_causal_softmax(dpattern, pattern)
    if cfg.attn_softcap is not None:  # Gemma 2: back through cap · tanh(s / cap), from the capped scores
        dscores = cfg.softcap_kind.backward(dscores, acts[a + "hook_attn_scores"], cfg.attn_softcap)
    ddots = d_scale_and_mask(dscores, cfg.scores_scale)
    dq, dk = d_attention_scores(ddots, q, k)
    if turn is not None:  # back through the rotation to the projections' Q and K
        d_rotate = cfg.position_kind.backward
        dq, dk = d_rotate(dq, *turn), d_rotate(dk, *turn)
    if w.q_norm is not None:  # back through the Q/K norms (Qwen3, OLMo 2) to the projections' Q and K
        dq = d_qk_norm(cfg, dq, w.q_norm, acts, a + "q_norm.", grads, a + "q_norm")
        dk = d_qk_norm(cfg, dk, w.k_norm, acts, a + "k_norm.", grads, a + "k_norm")
    dx, dW_qkv, db_qkv = d_affine(d_split_heads(dq, dk, dv), ln_out, w.qkv.W)
    for m, dW, db in zip("QKV", split_qkv_weights(dW_qkv, H, KV), split_qkv(db_qkv, H, KV)):  # each head's [d_model, d_head]
        grads[a + f"W_{m}"], grads[a + f"b_{m}"] = dW, db
    return dx


def _normed(cfg: Config, x: np.ndarray, ln: tuple | None, acts, prefix: str) -> np.ndarray:
    """What `decoder.norm` gave: the recorded normalized input times the gain (plus the bias), or x without a norm."""
    return x if ln is None else cfg.norm_kind.gain(acts[prefix + "hook_normalized"], *ln)


def d_block(cfg: Config, w: Layer, dy: np.ndarray, acts, l: int, grads: dict, turn=None) -> np.ndarray:
    """Back through `decoder.block`: the residual stream's gradient after layer l → before it."""
    p = f"blocks.{l}."
    if cfg.mlp:
        mid = acts[p + "hook_resid_mid"]
        d_out = d_norm(cfg, dy, w.ln2_post, acts, p + "ln2_post.", grads, p + "ln2_post")  # OLMo 2: its output's norm
        dx_mlp = d_mlp(cfg, w, d_out, acts, p, grads, _normed(cfg, mid, w.ln2, acts, p + "ln2."))
        d_mid = d_norm(cfg, dx_mlp, w.ln2, acts, p + "ln2.", grads, p + "ln2")
        dy = dy + d_mid if cfg.residual else d_mid
    pre = acts[p + "hook_resid_pre"]
    d_out = d_norm(cfg, dy, w.ln1_post, acts, p + "ln1_post.", grads, p + "ln1_post")
    dx_attn = d_attention(cfg, w, d_out, acts, p, grads, _normed(cfg, pre, w.ln1, acts, p + "ln1."), turn)
    d_pre = d_norm(cfg, dx_attn, w.ln1, acts, p + "ln1.", grads, p + "ln1")
    return dy + d_pre if cfg.residual else d_pre


def to_input(cfg: Config, w: Weights, acts, dlogits: np.ndarray, grads: dict):  # → [..., pos, d_model], dW_U
    """Back from the logits to the residual stream entering layer 0 (the embedding plus the position
    vector): its gradient, and W_U's (or W_E's share, when tied); the other parameters' go into `grads`."""
    x = acts["unembed.hook_in"]  # [..., pos, d_model]
    if cfg.final_softcap is not None:  # Gemma 2: back through the logits' soft-cap
        dlogits = cfg.softcap_kind.backward(dlogits, acts["logits"], cfg.final_softcap)
    dx, dW_U, grads["b_U"] = d_unembed(dlogits, x, w.unembed.W, cfg.tied_unembed)
    dx = d_norm(cfg, dx, w.ln_final, acts, "ln_final.", grads, "ln_final")
    turn = None
    if w.rope is not None:  # the forward pass's cos and sin, from the angles it recorded
        angle = acts["rope.hook_angle"]  # [pos, d_head / 2]
        turn = np.cos(angle), np.sin(angle)
    turn_local = turn
    if w.rope_local is not None:  # Gemma 3's local layers
        angle = acts["rope.hook_angle_local"]
        turn_local = np.cos(angle), np.sin(angle)
    for l in reversed(range(cfg.n_layers)):
        dx = d_block(cfg, w.layers[l], dx, acts, l, grads, turn_local if cfg.is_local(l) else turn)
    return dx, dW_U


def backward(cfg: Config, w: Weights, tokens: np.ndarray, acts, dlogits: np.ndarray) -> dict:
    """Every parameter's gradient from the logits' gradient and a recorded forward pass (`acts`)."""
    grads: dict = {}
    dx, dW_U = to_input(cfg, w, acts, dlogits, grads)  # [..., pos, d_model]
    if cfg.embed_scale:  # Gemma: x = E·√d_model
        dx = dx * np.dtype(cfg.dtype).type(np.sqrt(cfg.d_model))
    dW_E = d_embed(dx, tokens, cfg.d_vocab)
    if cfg.tied_unembed:
        dW_E += dW_U  # W_U is W_E transposed: both uses add up (d_unembed gave it as [d_vocab, d_model])
    else:
        grads["W_U"] = dW_U
    grads["W_E"] = dW_E
    if cfg.position_kind.adds:
        grads["W_pos"] = cfg.position_kind.backward(dx, w.W_pos)  # [n_ctx, d_model]
    return grads


# Everything the backward pass reads, recorded by the forward pass (nothing else is kept).
NEEDED = ["blocks.*.hook_resid_pre", "blocks.*.hook_resid_mid", "blocks.*.ln?.hook_*", "blocks.*.attn.hook_[qkvz]",
          "blocks.*.attn.hook_rot_[qk]", "blocks.*.attn.?_norm.hook_*", "blocks.*.ln?_post.hook_*", "blocks.*.attn.hook_pattern", "blocks.*.mlp.hook_pre",
          "blocks.*.mlp.hook_pre_linear", "blocks.*.mlp.hook_post", "ln_final.hook_*",
          "unembed.hook_in", "logits", "rope.hook_angle", "rope.hook_angle_local"]


def needed(cfg: Config) -> list[str]:
    """NEEDED, and the capped scores under Gemma 2's soft-cap (its derivative is read from them)."""
    return NEEDED + (["blocks.*.attn.hook_attn_scores"] if cfg.attn_softcap is not None else [])


def loss_and_grads(cfg: Config, weights, tokens) -> tuple[float, dict]:
    """The mean next-token loss of `tokens` ([pos] or [batch, pos]) and every parameter's gradient.
    `weights`: a `tracer.core.fast.Weights` or the parameters by name."""
    w = weights if isinstance(weights, Weights) else layout(cfg, weights)
    tokens = np.asarray(tokens, dtype=np.int64)
    rec = Recorder(needed(cfg))
    logits = forward(cfg, w, tokens, rec)  # [..., pos, d_vocab]
    loss, dlogits = cross_entropy(logits, next_token_targets(tokens))
    return loss, backward(cfg, w, tokens, rec.store, dlogits)


def attribution(cfg: Config, weights, tokens, target: int):  # [pos] → [pos], [pos, d_model], [pos, d_model]
    """Gradient × input for the last position's logit of `target`: at each position p,
    Σ_d x[p, d] · ∂logit/∂x[p, d], x being the input to layer 0 (`blocks.0.hook_resid_pre`: the
    embedding plus the position vector). Gives (per position, the gradient, x)."""
    w = weights if isinstance(weights, Weights) else layout(cfg, weights)
    tokens = np.asarray(tokens, dtype=np.int64)
    rec = Recorder(needed(cfg))
    logits = forward(cfg, w, tokens, rec)  # [pos, d_vocab]
    dlogits = np.zeros_like(logits)
    dlogits[-1, int(target)] = 1.0
    dx, _ = to_input(cfg, w, rec.store, dlogits, {})  # [pos, d_model]
    x = rec.store["blocks.0.hook_resid_pre"] if cfg.n_layers else rec.store["unembed.hook_in"]  # [pos, d_model]
    return (x.astype(np.float64) * dx).sum(axis=-1), dx, x
