"""The demo's copying screen, shown when the last token has appeared before: which heads look from it to
the token that followed its earlier occurrence (induction heads, `tracer.run.heads`), how much weight each
puts there, what training measured of them, and the `--ablate` that removes the strongest. Weights are
read from the recorded patterns; nothing is recomputed."""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.text import Text

from ...run.heads import induction_targets
from ..header import ROLE_AT_LEAST
from ...sections import screen
from ..words import say
from .base import Demo, Step, sentence, table

ROWS = 4  # heads listed, the largest weight first
STRONG = 0.5  # a head putting at least this much of the last token's weight on the copied token is named to remove


def copy_target(d: Demo) -> int | None:
    """The position after the last token's earlier occurrence, or None when the last token is new."""
    tokens = d.trace.tokens
    t = int(induction_targets(tokens)[d.last]) if len(tokens) else -1
    return t if t >= 0 else None


def trained_induction(d: Demo) -> np.ndarray | None:  # → [layer, head] or None
    """training.json's induction scores (carried in the trace's meta), when they fit this model."""
    heads = (d.gen.meta.get("training") or {}).get("heads") or {}
    try:
        scores = np.asarray(heads["induction"], dtype=float)
    except (KeyError, TypeError, ValueError):
        return None
    return scores if scores.shape == (d.cfg.n_layers, d.cfg.n_heads) else None


def removed_heads(d: Demo) -> set[tuple[int, int]]:
    """The heads this run was made without (--ablate's record: [layer, head] pairs)."""
    return {(int(l), int(h)) for l, h in (d.gen.meta.get("ablation") or {}).get("heads") or []}


@screen("copying", layers=True)
def step_copying(d: Demo) -> Step | None:
    target = copy_target(d)
    if target is None or d.cfg.n_layers < 1:
        return None
    last, cfg = d.last, d.cfg
    earlier = target - 1
    weight = np.stack([d.trace[f"blocks.{l}.attn.hook_pattern"][:, last, target]
                       for l in range(cfg.n_layers)])  # [layer, head]
    order = sorted(np.ndindex(weight.shape), key=lambda c: (-weight[c], c))[:ROWS]
    trained = trained_induction(d)
    gone = removed_heads(d)
    cols = ["head", f"weight on {d.who(target)}", "looks most at"] + (["training's induction score"] if trained is not None else [])
    t = table(*cols, right=(cols[1],))
    for l, h in order:
        p = d.trace[f"blocks.{l}.attn.hook_pattern"][h, last]  # [key_pos]
        top = int(np.argmax(p))
        row = [f"{l}:{h}" + (" (removed)" if (l, h) in gone else ""), d.num(weight[l, h]), f"{d.who(top)} {d.num(p[top])}"]
        if trained is not None:
            row.append(f"{trained[l, h]:.2f}" + (" induction" if trained[l, h] >= ROLE_AT_LEAST else ""))
        t.add_row(*row)
    strong = [c for c in order if weight[c] >= STRONG] or order[:1]  # the heads that copy, to knock out together
    if gone:
        what = " and ".join((d.gen.meta.get("ablation") or {}).get("ablated") or [])
        tail = say("demo.copy.without", what=what)
    else:
        flags = " ".join(f"--ablate {l}:{h}" for l, h in strong)
        tail = say("demo.copy.remove", them="it" if len(strong) == 1 else "them", flags=flags)
    narration = say("demo.copy", last=d.who(last), earlier=d.who(earlier), target=d.who(target))
    body = Group(sentence((say("demo.copy.heading", last=d.who(last), target=d.who(target)), "bold")),
                 Text(), t, Text(), Text(tail))
    return Step("Copying: the induction head", narration, body)
