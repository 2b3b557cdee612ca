"""The demo's screen of a linear-attention layer (Gated DeltaNet, Qwen3.5's layer 0): the followed token
reads a state instead of scoring the earlier tokens, in numbers of one head — its key, value and query,
how much the state keeps of itself (exp g) and how much the token writes (β), what the state recalls for
the key, the error written back, the state after and the read-out — and what the layer keeps against a
softmax layer's KV cache. Shown before the Q/K/V screens, which then follow the model's first softmax
layer (`Demo.layer`); a model without such a layer has no state screen. Reads recorded arrays only."""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ...sections import screen
from ...tokenizers.tokens import label
from ..linear import cell_words, keeps_words, update, worked_cell
from ..text import BRIEF_CORNER
from ..words import say
from .base import Demo, Step, pairs, sentence


@screen("state", layers=True)
def step_state(d: Demo) -> Step | None:
    if d.state_layer is None:
        return None
    l, f, h = d.state_layer, d.focus, 0
    q, k, v = d.block("attn.hook_q", l)[f], d.block("attn.hook_k", l)[f], d.block("attn.hook_v", l)[f]
    (kh, dk), (vh, dv) = k.shape, v.shape
    g_head = h // (vh // kh)
    beta, g = float(d.block("attn.hook_beta", l)[f, h]), float(d.block("attn.hook_decay", l)[f, h])
    states = d.block("attn.hook_state", l)  # [pos, v_head, d_k, d_v]
    before = states[f - 1, h] if f else None  # [d_k, d_v]: the state the previous position recorded
    _, recalled, error, _ = update(before, k[g_head], v[h], beta, g)
    rows = [(f"{label(f)}_k", d.vector(k[g_head])), (f"{label(f)}_v", d.vector(v[h])), (f"{label(f)}_q", d.vector(q[g_head])),
            ("β", d.num(beta)), ("exp(g)", d.num(np.exp(g))), ("Sᵀk", d.vector(recalled)), ("v − Sᵀk", d.vector(error)),
            ("o = Sᵀq ÷ √d_k", d.vector(d.block("attn.hook_z", l)[f, h], "bold"))]
    after = states[f, h]
    corner = min(BRIEF_CORNER, dk), min(BRIEF_CORNER, dv)
    t = Table(box=None, padding=(0, 1), show_edge=False, pad_edge=False)
    t.add_column("")
    for j in range(corner[1]):
        t.add_column(f"v{j}", justify="right")
    for i in range(corner[0]):
        t.add_row(f"k{i}", *(d.num(after[i, j]) for j in range(corner[1])))
    cell = cell_words(worked_cell(before, k[g_head], beta, g, error, after), d.precision)  # the delta rule on one number
    heading = sentence((say("demo.state.heading", layer=str(l), L=label(f), H=str(vh), d_k=str(dk), d_v=str(dv)), "bold"))
    return Step("A state instead of scores", say("demo.state", layer=str(l), L=label(f), d_k=str(dk), d_v=str(dv),
                                                  softmax=str(d.layer)),
                Group(heading, Text(), pairs(rows), Text(), Text(say("demo.state.after", L=label(f)), style="bold"), t, Text(cell), Text(),
                      Text(keeps_words(d.cfg, l, d.n), style="italic")))
