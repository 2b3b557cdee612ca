"""The backward pass: the gradient of the next-token loss with respect to every parameter.

One backward function per forward function, in reverse order, each reading the intermediates the
forward pass recorded (the trace is the activation cache): `d_unembed` undoes the unembedding,
`d_norm` the norm (`tracer.core.sublayer`), `d_sublayer` a sublayer with its norms and its residual,
`d_block` a layer, `d_embed` the lookup. Each sublayer is undone by its kind's own backward
(`Sublayer.backward`: softmax attention's in `tracer.core.attention`, with `d_attend`,
`d_causal_softmax`, `d_attention_scores`, …; a dense MLP's in `tracer.core.mlps`), and the switchable
parts (the norm and its gain, the rotation, the added position vectors) by their entry's `backward`
in the table of block switches (`tracer.core.blocks`, whose derivatives are
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
from .derivatives import d_affine
from .equations import rope_turn
from .fast import Layer, Weights, layout
from .record import Recorder
from .sublayer import Span, d_norm, normed

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


def d_unembed(dlogits: np.ndarray, x: np.ndarray, W_U: np.ndarray, tied: bool):  # → dx, dW_U (or W_E's share), db_U
    """logits = x·W_U + b_U. With W_U tied to W_E.T, the weight's gradient is given as W_E's share,
    dlogitsᵀ·x [d_vocab, d_model], in W_E's own layout (no transposed copy of a vocabulary-sized array)."""
    if not tied:
        return d_affine(dlogits, x, W_U)
    dy2 = dlogits.reshape(-1, dlogits.shape[-1])  # [rows, d_vocab]
    x2 = x.reshape(-1, x.shape[-1])  # [rows, d_model]
    dx = (dy2 @ W_U.T).reshape(x.shape)  # [..., d_model]
    return dx, dy2.T @ x2, dy2.sum(axis=0)  # [..., d_model], [d_vocab, d_model], [d_vocab]


def d_embed(dx: np.ndarray, tokens: np.ndarray, d_vocab: int) -> np.ndarray:  # [..., pos, d_model] → [d_vocab, d_model]
    dW = np.zeros((d_vocab, dx.shape[-1]), dtype=dx.dtype)
    np.add.at(dW, tokens.reshape(-1), dx.reshape(-1, dx.shape[-1]))
    return dW


# --------------------------------------------------------------------------- the decoder, backwards


def d_block(cfg: Config, w: Layer, dy: np.ndarray, acts, l: int, grads: dict, span: Span) -> np.ndarray:
    """Back through `decoder.block`: the residual stream's gradient after layer l → before it."""
    p = f"blocks.{l}."
    if w.scalar is not None:  # Gemma 4: back through x · scalar
        grads[p + "layer_scalar"] = (dy * acts[p + "hook_resid_unscaled"]).reshape(1, -1).sum(axis=1)
        dy = dy * w.scalar
    if w.ple is not None:  # Gemma 4: back through x + per_layer_input(x) (its input's gradient: `span.d_layer_input`)
        dy = d_sublayer(cfg, w.ple, "ln3", None, None, dy, acts, p, p + "hook_resid_ple", grads, span)
    if w.mlp is not None:
        dy = d_sublayer(cfg, w.mlp, "ln2", w.ln2, w.ln2_post, dy, acts, p, p + "hook_resid_mid", grads, span)
    return d_sublayer(cfg, w.attn, "ln1", w.ln1, w.ln1_post, dy, acts, p, p + "hook_resid_pre", grads, span)


def d_sublayer(cfg: Config, w, ln_name: str, ln: tuple | None, ln_post: tuple | None, dy: np.ndarray, acts, p: str,
               x_name: str, grads: dict, span: Span) -> np.ndarray:
    """Back through `decoder.sublayer` and its residual: the gradient after `x + sublayer(x)` → before
    it (`x_name`: the recorded input x). The kind's own backward (`w.kind.backward`) does its part."""
    kind = w.kind
    d_out = d_norm(cfg, dy, ln_post, acts, p + ln_name + "_post.", grads, p + ln_name + "_post")  # OLMo 2: its output's norm
    span.stream, span.d_stream = acts[x_name], None  # the stream before the norm (and its gradient, if a kind reads it)
    x_in = normed(cfg, span.stream, ln, acts, p + ln_name + ".")  # what the sublayer was given
    dx = kind.backward(cfg, w, d_out, acts, p + kind.scope + ".", grads, x_in, span)
    d_x = d_norm(cfg, dx, ln, acts, p + ln_name + ".", grads, p + ln_name)
    if span.d_stream is not None:  # a kind that read the stream itself (Gemma 4's router)
        d_x = d_x + span.d_stream
    return dy + d_x if cfg.residual else d_x


def to_input(cfg: Config, w: Weights, acts, dlogits: np.ndarray, grads: dict, tokens=None):  # → [..., pos, d_model], dW_U
    """Back from the logits to the residual stream entering layer 0 (the embedding plus the position
    vector): its gradient, and W_U's (or W_E's share, when tied); the other parameters' go into `grads`.
    `tokens`: the pass's (Gemma 4's per-layer inputs are looked up by token)."""
    x = acts["unembed.hook_in"]  # [..., pos, d_model]
    if cfg.final_softcap is not None:  # Gemma 2: back through the logits' soft-cap
        dlogits = cfg.softcap_kind.backward(dlogits, acts["logits"], cfg.final_softcap)
    dx, dW_U, grads["b_U"] = d_unembed(dlogits, x, w.unembed.W, cfg.tied_unembed)
    dx = d_norm(cfg, dx, w.ln_final, acts, "ln_final.", grads, "ln_final")
    turn = None
    if w.rope is not None:  # the forward pass's cos and sin, from the angles it recorded
        angle = acts["rope.hook_angle"]  # [pos, d_head / 2]
        turn = rope_turn(angle, w.rope_factor)
    turn_local = turn
    if w.rope_local is not None:  # Gemma 3's local layers
        angle = acts["rope.hook_angle_local"]
        turn_local = rope_turn(angle)
    n = dx.shape[-2]
    inputs = acts["hook_per_layer_inputs"] if w.per_layer is not None and cfg.n_layers else None  # [..., layer, pos, d_ple]
    d_inputs = np.zeros_like(inputs) if inputs is not None else None
    board: dict = {}  # the gradients a layer leaves for earlier ones (Gemma 4's shared keys and values)
    for l in reversed(range(cfg.n_layers)):
        here = (turn_local if cfg.is_local(l) else turn) if cfg.rotates(l) else None
        span = Span(0, n, here, None, board, inputs[..., l, :, :] if inputs is not None else None)
        dx = d_block(cfg.layer(l), w.layers[l], dx, acts, l, grads, span)
        if d_inputs is not None:
            d_inputs[..., l, :, :] = span.d_layer_input
    if d_inputs is not None:  # back through the per-layer inputs to layer 0's input (and their own weights)
        dx = dx + w.per_layer.kind.d_inputs(cfg, w.per_layer, d_inputs, acts, tokens, grads)
    return dx, dW_U


def backward(cfg: Config, w: Weights, tokens: np.ndarray, acts, dlogits: np.ndarray) -> dict:
    """Every parameter's gradient from the logits' gradient and a recorded forward pass (`acts`)."""
    grads: dict = {}
    dx, dW_U = to_input(cfg, w, acts, dlogits, grads, tokens)  # [..., pos, d_model]
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


# Everything the backward pass reads outside the sublayers, recorded by the forward pass (nothing else is
# kept); each sublayer kind adds what its own backward reads (`Sublayer.needed`).
NEEDED = ["blocks.*.hook_resid_pre", "blocks.*.hook_resid_mid", "blocks.*.ln?.hook_*", "blocks.*.ln?_post.hook_*",
          "ln_final.hook_*", "unembed.hook_in", "logits", "rope.hook_angle", "rope.hook_angle_local",
          "blocks.*.hook_resid_ple", "blocks.*.hook_resid_unscaled", "hook_per_layer_inputs", "ple.norm.hook_*"]


def needed(cfg: Config) -> list[str]:
    """NEEDED, and what each sublayer kind's backward reads (under `blocks.*.{scope}.`)."""
    return NEEDED + [f"blocks.*.{kind.scope}.{name}" for kind in cfg.sublayer_kinds for name in kind.needed(cfg)]


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
    dx, _ = to_input(cfg, w, rec.store, dlogits, {}, tokens)  # [pos, d_model]
    x = rec.store["blocks.0.hook_resid_pre"] if cfg.n_layers else rec.store["unembed.hook_in"]  # [pos, d_model]
    return (x.astype(np.float64) * dx).sum(axis=-1), dx, x
