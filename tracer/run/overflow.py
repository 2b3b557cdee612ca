"""Where a run's arithmetic first left the finite numbers: `non_finite(gen)` names the first recorded
value that is NaN or ±∞ (a pass, a hook name, an index).

A model whose numbers overflow (float64 tops out near 1.8e308, float32 near 3.4e38) computes ∞,
and then ∞ − ∞ or 0 × ∞, which are NaN; the decoder records them where they arise, the renderers
show them (nan, ∞, −∞) and name the first one. That is arithmetic to learn from, not a damaged
file. Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.equations import causal_mask
from ..core.params import first_non_finite
from ..core.store import CausalHalf, Derived, Store


@dataclass(frozen=True)
class NonFinite:
    """The first recorded number that is NaN or ±∞: in pass `step`, `name`[`index`] = `value`."""

    step: int
    name: str
    index: list
    value: float

    def to_dict(self) -> dict:
        return {"step": self.step, "name": self.name, "index": self.index, "value": self.value}


REACHED_NAMES = ["hook_embed", "hook_pos_embed", "*hook_resid_*", "*hook_scale"]  # an overflow anywhere in a
# pass reaches the residual stream or a norm's scale (layer norm divides an infinite vector to 0, but its scale is
# ∞): recording these is enough to place it in its layer and sublayer (what `trace --json` records)


def non_finite(gen) -> NonFinite | None:
    """The first value, in recording order (pass by pass, hook by hook), that the arithmetic made NaN
    or ±∞, or None when every recorded number is finite. The causal mask's −∞ in
    `hook_attn_scores` is not counted: it is the mask, not an overflow; nor a router's −∞, an expert
    taken out of the routing; nor a verifying pass's NaN (`verify.*`: not judged, not drawn). Values held as their causal
    half are read as held (the masked half is the mask's); recipes are not recomputed (what they
    are computed from is read). Every pass of every row and model, in the order run (`step` counts them)."""
    for n, step in enumerate(gen.passes):
        arrays = step.arrays
        for name in arrays:
            bad = _first_bad(arrays, name)
            if bad is not None:
                index, value = bad
                return NonFinite(n, name, index, value)
    return None


def _first_bad(arrays, name: str):
    """(index, value) of the first non-finite number of entry `name`, or None."""
    held = arrays.raw(name) if isinstance(arrays, Store) else arrays[name]
    if isinstance(held, Derived):
        return None
    if isinstance(held, CausalHalf):
        bad = first_non_finite(held.data) if held.dtype.kind == "f" else None  # [head, visible entries]
        if bad is None:
            return None
        h, e = bad
        q = int(np.searchsorted(held.offsets, e, side="right")) - 1  # the query row holding entry e
        return [h, q, e - int(held.offsets[q])], float(held.data[h, e])
    arr = np.asarray(held)
    if arr.dtype.kind != "f":
        return None
    if name.startswith("verify.") and not np.isinf(arr).any():
        return None  # NaN: a drafted token not judged, or no draw made (greedy), as the verifying pass records it
    if name.endswith("mlp.hook_router_logits") and not np.isnan(arr).any() and not np.isposinf(arr).any():
        return None  # −∞: an expert taken out of the routing (`--ablate L:expert:E`), not an overflow
    if name.endswith("attn.hook_attn_scores") and arr.ndim == 3:
        ok = np.isfinite(arr) | causal_mask(arr.shape[1], arr.shape[2])  # [head, query_pos, key_pos]
        if ok.all():
            return None
        index = [int(i) for i in np.unravel_index(int(np.argmin(ok)), arr.shape)]
    else:
        index = first_non_finite(arr)
        if index is None:
            return None
    return index, float(arr[tuple(index)])
