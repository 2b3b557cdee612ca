"""What the page carries of each position: its vectors in every layer and its attention rows.

Every position's row comes from the pass that computed it (the prompt pass for the prompt, the
pass that read a generated token for that token), as the terminal walkthrough reads them
(`render.context.Ctx.at`); the keys and values a later pass took from the KV cache are those rows.

Numbers are carried to 6 significant digits, or whole where those would show other digits at the
page's `--precision` decimals than the terminal shows (`r6`); the page shows those decimals and the
6 digits on hover. A vector of at most `whole` numbers is carried whole;
a longer one as its first and last `ENDS` numbers, with its dimension count and its norm (as the
terminal's `--dims`). When everything would not fit `budget` numbers, long vectors are cut
sooner and then only some positions are carried (the followed token and the last ones); the page
says what it left out. Reads recorded arrays only.
"""

from __future__ import annotations

import functools
import math
from contextvars import ContextVar

import numpy as np

from ..text import BRIEF_CORNER
from ..experts import ROUTER_SHOWN
from ..lens import final_norm_words
from ...core.equations import largest_first

ENDS = 8  # numbers kept at each end of a long vector
WHOLE = (64, 16)  # vectors up to this many dims are carried whole; the second when the first does not fit
BUDGET = 300_000  # numbers carried per page for the positions' detail (about 3 MB of JSON)
STRONGEST = 8  # keys beyond the carried positions kept per attention row: the ones with the largest weights

# (page name, hook name within blocks.{l}., per head): the order the page lists a layer's vectors in
VECTORS = (("x", "hook_resid_pre", False), ("ln1", "ln1.hook_normalized", False), ("q", "attn.hook_q", True),
           ("k", "attn.hook_k", True), ("v", "attn.hook_v", True), ("z", "attn.hook_z", True),
           ("attn_out", "hook_attn_out", False), ("mid", "hook_resid_mid", False),
           ("ln2", "ln2.hook_normalized", False), ("pre", "mlp.hook_pre", False), ("up", "mlp.hook_pre_linear", False),
           ("post", "mlp.hook_post", False),
           ("mlp_out", "hook_mlp_out", False), ("out", "hook_resid_post", False))
ATTENTION = (("d", "attn.hook_dots"), ("s", "attn.hook_attn_scores"), ("w", "attn.hook_pattern"))


SHOWN: ContextVar[int] = ContextVar("shown", default=3)  # the decimals the page being made shows (--precision)


def showing(make):
    """`make(…, precision=p)` (a page's data) carrying its numbers for p decimals shown (what r6 keeps)."""
    @functools.wraps(make)
    def made(*args, precision: int = 3, **options):
        mark = SHOWN.set(int(precision))
        try:
            return make(*args, precision=precision, **options)
        finally:
            SHOWN.reset(mark)
    return made


def r6(x) -> float | None:
    """A number to 6 significant digits, or whole where those would change what the page shows with the
    --precision decimals or 2 (rounding twice: -10.90355 sent as -10.9035 shows -10.903 where the terminal
    shows -10.904; 1592.9436 sent as 1592.94 shows 1592.940): the page rounds the number once, as the
    terminal does. None for ±∞ and NaN, which JSON cannot hold."""
    x = float(x)
    if not math.isfinite(x):
        return None
    y = float(f"{x:.6g}")
    return y if all(f"{y:.{d}f}" == f"{x:.{d}f}" for d in (SHOWN.get(), 2)) else x


def r6s(a) -> list:
    return [r6(x) for x in np.asarray(a, dtype=float).reshape(-1).tolist()]


def cut(a, whole: int) -> list:
    """A vector whole, or its first and last ENDS numbers."""
    a = np.asarray(a, dtype=float).reshape(-1)  # [dims]
    return r6s(a) if a.size <= whole else r6s(a[:ENDS]) + r6s(a[-ENDS:])


def carried_size(d: int, whole: int) -> int:
    return (d if d <= whole else 2 * ENDS) + 1  # the numbers and the norm


class Rows:
    """Where each position's row lives: the pass that computed it and its row in that pass."""

    def __init__(self, gen):
        self.gen = gen
        self.n_prompt = len(gen.steps[0].tokens)
        final = np.asarray(gen.tokens, dtype=np.int64)  # row 0's sequence
        # a pass's positions whose tokens are the sequence's (a verifying pass's rejected drafts are not)
        ok = [next((t for t in range(len(st.tokens)) if t >= len(final) or st.tokens[t] != final[t]), len(st.tokens))
              for st in gen.steps]
        self.n_rows = max(ok)  # positions that had a pass of their own
        self.pass_of = [0] * self.n_rows
        for k, st in enumerate(gen.steps[1:], start=1):  # the position a later pass read (and those it checked at once);
            for t in range(st.start or self.n_prompt, ok[k]):  # without the cache, the ones no earlier pass read
                self.pass_of[t] = k if st.start or t == len(st.tokens) - 1 or not self.pass_of[t] else self.pass_of[t]

    def row(self, name: str, t: int):
        """Position t's row of per-position array `name`, from its own pass (None when not recorded)."""
        st = self.gen.steps[self.pass_of[t]]
        if name not in st.arrays:
            return None
        return st.arrays[name][t - st.start]

    def att(self, name: str, h: int, t: int):
        """Head h's row [key_pos] of attention array `name` for query t, keys 0..t."""
        st = self.gen.steps[self.pass_of[t]]
        if name not in st.arrays:
            return None
        return st.arrays[name][h, t - st.start, : t + 1]

    def has(self, name: str) -> bool:
        return name in self.gen.steps[0].arrays


def estimate(cfg, positions: int, whole: int, full: bool) -> int:
    """Numbers carried for `positions` positions (see `choose`)."""
    H, dm, dh = cfg.n_heads, cfg.d_model, cfg.d_head
    mlp = len(cfg.mlp_kind.steps) if cfg.mlp else 2  # [d_mlp] vectors: pre and post (SwiGLU: and up)
    per = 9 * carried_size(dm, whole) + mlp * carried_size(cfg.d_mlp, whole) + 4 * H * carried_size(dh, whole)
    keys = (positions + 1) / 2 if full else min(positions, 64) + STRONGEST
    per += int(3 * H * keys) + 3 * carried_size(dm, whole)  # attention rows; the embedding, position, final
    if cfg.n_experts:  # a mixture of experts: each chosen expert's output, their sum, the shared expert's, the routing
        k = cfg.experts_per_token or 1
        per += (k + 2) * carried_size(dm, whole) + 4 * k + 2 * ROUTER_SHOWN + H
    linear = [l for l in range(cfg.n_layers) if cfg.attention_of(l).shown_as == "state"]
    if linear:  # a linear layer's state update per head: six vectors, two corners of the state, one sentence
        per_state = cfg.linear_v_heads * (6 * carried_size(cfg.linear_d_v, whole) + 2 * BRIEF_CORNER ** 2 + 20)
        per += len(linear) * per_state // cfg.n_layers
    return cfg.n_layers * per * positions + positions * 3 * carried_size(dm, whole)


def choose(cfg, n_rows: int, follow: int, budget: int = BUDGET) -> tuple[list[int], int]:
    """The positions to carry and the longest vector carried whole: all positions if they fit the
    budget; else the followed one and as many of the last ones as fit."""
    for whole in WHOLE:
        if estimate(cfg, n_rows, whole, True) <= budget:
            return list(range(n_rows)), whole
    whole = WHOLE[-1]
    fit = 1
    while fit < n_rows and estimate(cfg, fit + 1, whole, False) <= budget:
        fit += 1
    last = list(range(n_rows - fit, n_rows))
    if follow not in last:
        last = [follow] + last[1:]
    return sorted(last), whole


def vector_block(rows: Rows, name: str, carried: list[int], d: int, whole: int, per_head: bool, groups: int = 1):
    """One hook's rows for the carried positions: {"dims", "whole", "rows", "norm"}; None when not recorded.
    `groups`: query heads per key/value head; K and V rows are then given once per query head."""
    if not rows.has(name):
        return None
    out, norms = [], []
    for t in carried:
        r = np.asarray(rows.row(name, t), dtype=float)  # [dims] or [head, d_head]
        if per_head and groups > 1:
            r = np.repeat(r, groups, axis=0)  # [kv_head, d_head] → [head, d_head]: the head each query head reads
        if per_head:
            out.append([cut(x, whole) for x in r])
            norms.append([r6(np.linalg.norm(x)) for x in r])
        else:
            out.append(cut(r, whole))
            norms.append(r6(np.linalg.norm(r)))
    return {"dims": int(d), "whole": bool(d <= whole), "rows": out, "norm": norms}


def attention_block(rows: Rows, layer: int, carried: list[int], H: int) -> dict | None:
    """Per head and carried query: its keys (null when they are 0..t), Q·K, the scores and the weights,
    and the weight on the keys left out (`rest`)."""
    names = {key: f"blocks.{layer}.{hook}" for key, hook in ATTENTION}
    if not any(rows.has(n) for n in names.values()):
        return None
    full = carried == list(range(len(carried)))
    block: dict = {key: ([] if rows.has(n) else None) for key, n in names.items()}
    block["keys"] = None if full else []
    block["rest"] = None if full else []
    for h in range(H):
        per = {key: [] for key in names}
        keys_h, rest_h = [], []
        for t in carried:
            pattern = rows.att(names["w"], h, t)
            if full:
                keys = None
            else:
                keys = [j for j in carried if j <= t]
                if pattern is not None:
                    strong = largest_first(pattern)[:STRONGEST]
                    keys = sorted(set(keys) | {int(j) for j in strong})
                keys_h.append(keys)
                rest_h.append(r6(float(np.sum(pattern)) - float(np.sum(pattern[keys]))) if pattern is not None else None)
            for key, n in names.items():
                if block[key] is not None:
                    row = rows.att(n, h, t)  # [key_pos]
                    per[key].append(r6s(row if keys is None else row[keys]))
        for key in names:
            if block[key] is not None:
                block[key].append(per[key])
        if not full:
            block["keys"].append(keys_h)
            block["rest"].append(rest_h)
    return block


def layers_data(rows: Rows, cfg, carried: list[int], whole: int) -> list[dict]:
    """Per layer: every vector hook's block and the attention block."""
    out = []
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."
        width = mlp_width(cfg, layer)
        dims = {"x": cfg.d_model, "ln1": cfg.d_model, "attn_out": cfg.d_model, "mid": cfg.d_model, "ln2": cfg.d_model,
                "pre": width, "up": width, "post": width, "mlp_out": cfg.d_model, "out": cfg.d_model}
        entry = {}
        for key, hook, per_head in VECTORS:
            if key in ("q", "k") and cfg.rotates(layer):
                hook = hook.replace("hook_", "hook_rot_")  # rotary positions: the Q and K that meet in Q·K
            groups = cfg.n_heads // cfg.kv_heads if key in ("k", "v") else 1
            entry[key] = vector_block(rows, b + hook, carried, cfg.d_head if per_head else dims[key], whole, per_head,
                                      groups)
        entry["att"] = attention_block(rows, layer, carried, cfg.n_heads)
        out.append(entry)
    return out


def mlp_width(cfg, layer: int) -> int:
    """Layer `layer`'s MLP width: d_mlp, or a dense layer's own among experts (Qwen2-MoE's `mlp_only_layers`)."""
    kind = cfg.mlp_of(layer)
    return kind.width(cfg) if kind is not None and kind.steps else cfg.d_mlp


def input_data(rows: Rows, cfg, carried: list[int], whole: int) -> dict:
    """The embedding rows, the position vectors and the final layer norm / final vector of the carried positions."""
    return {"E": vector_block(rows, "hook_embed", carried, cfg.d_model, whole, False),
            "P": vector_block(rows, "hook_pos_embed", carried, cfg.d_model, whole, False),
            "ln_final": vector_block(rows, "ln_final.hook_normalized", carried, cfg.d_model, whole, False),
            "final": vector_block(rows, "unembed.hook_in", carried, cfg.d_model, whole, False)}


def switches_data(cfg) -> dict:
    """The table of block switches' words and flags for this model (`tracer.core.blocks`), so that the
    script lays out what it is given and compares no switch's value."""
    norm, mlp, pos = cfg.norm_kind, cfg.mlp_kind, cfg.position_kind
    place = cfg.norm_place_kind
    flags = [name for name, on in (("positions_added", pos.adds), ("rotary", pos.rotary),
                                   ("norms_before", place.before), ("norms_after", place.after)) if on]
    page_key = {hook: key for key, hook, _ in VECTORS}
    return {"flags": flags,
            "mlp": {"steps": [[page_key[hook], name, words]
                              for hook, name, words in mlp.steps]} if mlp else None,
            "norm": {"short": norm.short, "title": norm.title, "ln1": norm.before_attention("{x}"),
                     "ln2": norm.before_mlp(), "final": norm.after_final(), "lens": final_norm_words(cfg)},
            "positions": {"short": pos.short, "source": pos.source, "instead": pos.instead},
            "norm_place": {"title": place.title,
                           "attn": place.words.format(what="attention", out="attn_out", scale="its value: tracer trace", gain=norm.gain_words("ln1_post")),
                           "mlp": place.words.format(what="MLP", out="mlp_out", scale="its value: tracer trace", gain=norm.gain_words("ln2_post"))},
            "softcap": {"scores": cfg.softcap_kind.template("scores", cfg.attn_softcap) if cfg.attn_softcap is not None else None,
                        "logits": cfg.softcap_kind.formula.format(cap=f"{cfg.final_softcap:g}") if cfg.final_softcap is not None else None},
            "qk_norm": {"title": cfg.qk_norm_kind.title, "words": cfg.qk_norm_kind.words} if cfg.qk_norm_kind.on else None}
