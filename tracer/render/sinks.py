"""gpt-oss's attention sinks in the walkthrough: the share of a head's weight that went to its sink (a
learned logit that takes part of the softmax, so a row of weights over the keys sums to less than 1),
and the sink's logit worked back from one recorded row. Reads `attn.hook_sink_share` and the scores only."""

from __future__ import annotations

import numpy as np

from .context import Ctx
from .fmt import prob
from .text import line
from .words import say


def sink_at(ctx: Ctx, a: str, t: int, h: int) -> float | None:
    """gpt-oss's attention sinks: the share of head h's weight at position t that went to the sink (None
    for attention without sinks)."""
    st = ctx.gen.steps[ctx.step_of(t)]
    arr = ctx.get(a + "hook_sink_share", st)  # [head, pos]
    return None if arr is None else float(arr[h, t - st.start])


def sink_share(ctx: Ctx, a: str, t: int, h: int):
    """The sentence of what head h's sink took of position t's weight."""
    share = sink_at(ctx, a, t, h)
    if share is not None:
        yield line(say("sink.share", h=str(h), share=prob(share, ctx.p), rest=prob(1.0 - share, ctx.p)))


def sink_logit(scores, share: float) -> float | None:
    """A head's sink (a learned logit the trace does not hold) worked back from one recorded row: its share
    is e^s ÷ (e^s + Σ e^score over the visible keys), so s = log(share ÷ (1 − share)) + log Σ e^score.
    None where the share is 0 or 1 (nothing left to work it back from) or no key is visible."""
    seen = np.asarray(scores, dtype=np.float64)  # [key_pos]
    seen = seen[np.isfinite(seen)]  # the keys the mask leaves visible
    if not 0.0 < share < 1.0 or not seen.size:
        return None
    top = float(seen.max())
    return float(np.log(share) - np.log1p(-share) + top + np.log(np.exp(seen - top).sum()))
