"""An independent float64 forward of the bench's mixture-of-experts GGUF files (gpt-oss and qwen3moe as
llama.cpp computes them), written for the bench alone: the file read by the `gguf` package's GGUFReader,
every tensor de-quantized by `gguf.quants.dequantize`, the routed experts only (an expert's slice of a
stacked tensor de-quantized when some token is sent to it), everything else plain NumPy in float64, token
by token where it reads more easily. Shares no code with tracer. `forward(path, ids)` gives the last
position's logits of the prompt and of the prompt plus its greedy next token (no KV cache: the whole
sequence again), and that token."""

from __future__ import annotations

import math

import numpy as np


class File:
    def __init__(self, path):
        import gguf

        self.gguf = gguf
        self.r = gguf.GGUFReader(str(path))
        self.t = {t.name: t for t in self.r.tensors}
        self.meta = {f.name: f for f in self.r.fields.values()}

    def value(self, key, default=None):
        f = self.meta.get(key)
        if f is None:
            return default
        v = f.parts[f.data[0]]
        return v.tobytes().decode() if v.dtype == np.uint8 else v[0].item()

    def tensor(self, name) -> np.ndarray:  # float64, numpy order (GGUF's ne reversed)
        t = self.t[name]
        shape = tuple(int(x) for x in reversed(t.shape))
        return self.gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape(shape)

    def expert(self, name, e: int) -> np.ndarray:  # one expert's [rows, cols] of a stacked [expert, rows, cols] tensor
        t = self.t[name]
        rows_cols = tuple(int(x) for x in reversed(t.shape))[1:]
        return self.gguf.quants.dequantize(t.data[e], t.tensor_type).astype(np.float64).reshape(rows_cols)

    def has(self, name) -> bool:
        return name in self.t


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def yarn_inv_freq(d_head, base, factor, orig, beta_fast=32.0, beta_slow=1.0):
    """llama.cpp's YaRN (ggml_rope_yarn_corr_dims: the correction range floored and ceiled)."""
    inv = base ** (-np.arange(0, d_head, 2) / d_head)
    corr = lambda rot: d_head * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))  # noqa: E731
    lo, hi = max(0, math.floor(corr(beta_fast))), min(d_head - 1, math.ceil(corr(beta_slow)))
    out = []
    for i, f in enumerate(inv):
        y = (i - lo) / max(0.001, hi - lo)
        ramp = 1 - min(1.0, max(0.0, y))  # 1: extrapolate (the original frequency)
        out.append(f / factor * (1 - ramp) + f * ramp)
    return np.array(out), 0.1 * math.log(factor) + 1.0


def rope(x, pos, inv, mscale):  # x [head, d_head] at position pos, NEOX pairs (i, i + d_head/2)
    h = x.shape[-1] // 2
    c, s = np.cos(pos * inv) * mscale, np.sin(pos * inv) * mscale
    a, b = x[:, :h], x[:, h:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def forward_once(f: File, ids: list[int]) -> np.ndarray:
    arch = f.value("general.architecture")
    a = arch
    L, H, KV = f.value(f"{a}.block_count"), f.value(f"{a}.attention.head_count"), f.value(f"{a}.attention.head_count_kv")
    dh, eps, k = f.value(f"{a}.attention.key_length"), f.value(f"{a}.attention.layer_norm_rms_epsilon"), f.value(f"{a}.expert_used_count")
    base = f.value(f"{a}.rope.freq_base", 10000.0)
    oss = arch == "gpt-oss"
    if f.value(f"{a}.rope.scaling.type") == "yarn":
        inv, mscale = yarn_inv_freq(dh, base, f.value(f"{a}.rope.scaling.factor"), f.value(f"{a}.rope.scaling.original_context_length"))
    else:
        inv, mscale = base ** (-np.arange(0, dh, 2) / dh), 1.0
    window = f.value(f"{a}.attention.sliding_window")
    emb = f.t["token_embd.weight"]
    rows = [f.gguf.quants.dequantize(emb.data[i], emb.tensor_type).astype(np.float64) for i in ids]
    x = np.array(rows)  # [pos, d]
    n = len(ids)
    for l in range(L):
        b = f"blk.{l}."
        g = lambda name: f.tensor(b + name)  # noqa: E731
        h = rms(x, g("attn_norm.weight"), eps)
        q = h @ g("attn_q.weight").T + (g("attn_q.bias") if f.has(b + "attn_q.bias") else 0)
        kk = h @ g("attn_k.weight").T + (g("attn_k.bias") if f.has(b + "attn_k.bias") else 0)
        v = h @ g("attn_v.weight").T + (g("attn_v.bias") if f.has(b + "attn_v.bias") else 0)
        q, kk, v = q.reshape(n, H, dh), kk.reshape(n, KV, dh), v.reshape(n, KV, dh)
        if f.has(b + "attn_q_norm.weight"):
            q, kk = rms(q, g("attn_q_norm.weight"), eps), rms(kk, g("attn_k_norm.weight"), eps)
        q = np.array([rope(q[p], p, inv, mscale) for p in range(n)])
        kk = np.array([rope(kk[p], p, inv, mscale) for p in range(n)])
        sinks = g("attn_sinks.weight") if f.has(b + "attn_sinks.weight") else None
        local = oss and window and l % 2 == 0
        out = np.zeros((n, H, dh))
        for p in range(n):
            for hd in range(H):
                kv = hd // (H // KV)
                keys = [j for j in range(p + 1) if not (local and j <= p - window)]
                s = np.array([q[p, hd] @ kk[j, kv] for j in keys]) / math.sqrt(dh)
                m = max(s.max(), sinks[hd]) if sinks is not None else s.max()
                e = np.exp(s - m)
                total = e.sum() + (math.exp(sinks[hd] - m) if sinks is not None else 0.0)
                out[p, hd] = sum(w * v[j, kv] for w, j in zip(e / total, keys))
        o = out.reshape(n, H * dh) @ g("attn_output.weight").T + (g("attn_output.bias") if f.has(b + "attn_output.bias") else 0)
        x = x + o
        h = rms(x, g("post_attention_norm.weight" if oss else "ffn_norm.weight"), eps)
        logits = h @ g("ffn_gate_inp.weight").T + (g("ffn_gate_inp.bias") if f.has(b + "ffn_gate_inp.bias") else 0)
        y = np.zeros_like(x)
        experts: dict = {}
        for p in range(n):
            if oss:  # the k largest scores, then a softmax over them
                chosen = list(np.argsort(-logits[p], kind="stable")[:k])
                e = np.exp(logits[p][chosen] - logits[p][chosen].max())
                weights = e / e.sum()
            else:  # softmax over all, the k most probable, renormalized (llama.cpp's qwen3moe: norm_w)
                pr = np.exp(logits[p] - logits[p].max())
                pr /= pr.sum()
                chosen = list(np.argsort(-pr, kind="stable")[:k])
                weights = pr[chosen] / pr[chosen].sum()
            for e_, w in zip(chosen, weights):
                if e_ not in experts:
                    experts[e_] = [f.expert(b + f"ffn_{m}_exps.weight", int(e_)) for m in ("gate", "up", "down")]
                Wg, Wu, Wd = experts[e_]
                gate, up = Wg @ h[p], Wu @ h[p]
                if oss:
                    gate = gate + g("ffn_gate_exps.bias")[e_]
                    up = up + g("ffn_up_exps.bias")[e_]
                    gate, up = np.minimum(gate, 7.0), np.clip(up, -7.0, 7.0)
                    mid = (up + 1) * gate / (1 + np.exp(-1.702 * gate))
                    out_e = Wd @ mid + g("ffn_down_exps.bias")[e_]
                else:
                    out_e = Wd @ (gate / (1 + np.exp(-gate)) * up)
                y[p] += w * out_e
        x = x + y
    h = rms(x[-1:], f.tensor("output_norm.weight"), eps)
    return (h @ f.tensor("output.weight").T)[0]


def forward(path, ids: list[int]) -> dict:
    f = File(path)
    first = forward_once(f, list(ids))
    nxt = int(np.argmax(first))
    return {"prompt": first, "step": forward_once(f, list(ids) + [nxt]), "next": nxt}
