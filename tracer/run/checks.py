"""A stated value checked against the recorded one (a scenario's `[[expect]]`).

Scenarios make them (`tracer.scenario`); the walkthrough renderer shows each beside the step
that computed it, with ✓ or ✗ and the difference. Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Check:
    name: str  # hook name, e.g. "blocks.0.attn.hook_attn_scores"
    index: tuple  # into the recorded array (no batch axis)
    expected: object  # number or nested list, as stated
    computed: object  # number or nested list, as recorded
    tolerance: float  # absolute
    label: str = ""  # where the value comes from, e.g. "article: Q·A_K for B"
    step: int = 0  # which pass of a generation (0: the prompt pass)
    ok: bool = field(init=False)
    diff: float = field(init=False)  # largest absolute difference

    def __post_init__(self):
        e = np.asarray(self.expected, dtype=float)
        c = np.asarray(self.computed, dtype=float)
        if e.shape != c.shape:
            self.diff = float("inf")
        elif e.size == 0:
            self.diff = 0.0  # nothing stated, nothing to disagree with
        else:
            with np.errstate(invalid="ignore"):  # ∞ stated and ∞ computed agree; NaN agrees with nothing
                gaps = np.where(e == c, 0.0, np.abs(e - c))
            self.diff = float(np.max(gaps)) if not np.isnan(gaps).any() else float("nan")
        self.ok = bool(self.diff <= self.tolerance)

    def to_dict(self) -> dict:
        return {"name": self.name, "index": list(self.index), "label": self.label, "expected": self.expected,
                "computed": self.computed, "ok": self.ok,
                "diff": self.diff if np.isfinite(self.diff) else None,  # JSON has no Infinity or NaN
                "tolerance": self.tolerance,
                "step": self.step}
