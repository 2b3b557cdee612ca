#!/usr/bin/env python
"""Benchmark: tracer.formats.quants.dequantize against gguf-py's gguf.quants.dequantize.

    .venv/bin/python bench/bench_gguf.py                 # every type, 10,485,760 numbers each
    .venv/bin/python bench/bench_gguf.py MXFP4 IQ4_XS --numbers 4194304 --rounds 3

Each type's tensor is 10 Mi numbers in rows of 4,096 (as a real weight matrix; gguf-py works over
groups of 16 rows, so its rows are what a real file gives it): quantized by gguf-py where it can
(Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, TQ1_0, TQ2_0, MXFP4, F16, BF16), random bytes with sane scales where
it cannot (the K-quants, the i-quants, IQ4_NL/IQ4_XS, NVFP4: tests/quant_blocks.py). Both results are
compared bit for bit before any timing. Rounds are interleaved (tracer, gguf, tracer, …) so the
machine's drift hits both alike; the report gives the best and the median of each and the ratio of
the medians. The last line is `JSON: {...}`. F32 is left out unless named: gguf-py returns a view of
its bytes, and so does GGUFFile.dequantize (this function copies).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import gguf  # noqa: E402
import numpy as np  # noqa: E402

from tests.quant_blocks import GGUF_QUANTIZES, random_blocks  # noqa: E402
from tracer.formats import quants  # noqa: E402


def tensor(name: str, numbers: int, rng) -> np.ndarray:
    """(rows, bytes per row) uint8: `numbers` numbers of type `name` in rows of 4,096."""
    kind = quants.TYPES[name]
    if name not in GGUF_QUANTIZES | {"F32", "F16", "BF16"}:
        return random_blocks(name, numbers // kind.block, rng).reshape(numbers // 4096, -1)
    floats = rng.normal(0, 0.02, (numbers // 4096, 4096)).astype(np.float32)
    stored = floats if name == "F32" else gguf.quants.quantize(floats, gguf.GGMLQuantizationType[name])
    return stored.view(np.uint8)  # F16 comes back as float16


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("types", nargs="*", default=[t for t in quants.TYPES if t != "F32"])  # F32: both give a view
    ap.add_argument("--numbers", type=int, default=10 * 2**20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    results = {}
    for name in args.types:
        data, qtype, n = tensor(name, args.numbers, rng), gguf.GGMLQuantizationType[name], args.numbers
        flat = data.reshape(-1)
        with np.errstate(all="ignore"):
            assert np.array_equal(quants.dequantize(flat, name, n).reshape(-1),
                                  gguf.quants.dequantize(data, qtype).reshape(-1)), name
        ours, theirs = [], []
        for _ in range(args.rounds):
            t = time.perf_counter()
            quants.dequantize(flat, name, n)
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            gguf.quants.dequantize(data, qtype)
            theirs.append(time.perf_counter() - t)
        a, b = statistics.median(ours), statistics.median(theirs)
        results[name] = {"tracer_M_per_s": round(n / a / 1e6), "gguf_M_per_s": round(n / b / 1e6), "ratio": round(b / a, 2)}
        print(f"{name:7} tracer best {min(ours) * 1e3:6.1f} ms median {a * 1e3:6.1f} ms ({n / a / 1e6:5.0f} M/s)   "
              f"gguf best {min(theirs) * 1e3:6.1f} ms median {b * 1e3:6.1f} ms ({n / b / 1e6:5.0f} M/s)   x{b / a:.2f}")
    print("JSON: " + json.dumps({"numbers": args.numbers, "rounds": args.rounds, "results": results}))


if __name__ == "__main__":
    main()
