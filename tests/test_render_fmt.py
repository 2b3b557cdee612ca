"""Number and label formatting (`tracer.render.fmt`), which every renderer writes its numbers through."""

from __future__ import annotations

import numpy as np

from tracer.render.fmt import letters, num, prob, shape, vec


def test_fmt_helpers():
    assert num(-0.0001, 3) == "0.000"
    assert num(-np.inf) == "−∞"
    assert prob(3.1e-5, 3) == "3.1e-05"
    assert shape(8, 50257) == "8 × 50,257"
    assert vec([1, 2], 1, 8) == "[1.0, 2.0]"
    long = vec(np.arange(10.0), 1, 4)
    assert long.startswith("[0.0, 1.0, …, 8.0, 9.0] (10 dims, ‖·‖ ")
    assert long.endswith(f"{np.linalg.norm(np.arange(10.0)):.1f})")
    assert letters(["A", "B"]) == "A and B" and letters(list("ABCDEF")) == "A–F"
