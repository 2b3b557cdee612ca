"""De-quantization of ggml's block formats to float32: the numbers of a GGUF tensor.

Owns which ggml types exist (`GGML_TYPES`: id → name, numbers per block, bytes per block, as
ggml.h's `ggml_type` and ggml.c's type traits give them), which ones tracer reads (`TYPES`: every
type the gguf package de-quantizes), one function per type that turns blocks of bytes into floats,
and `dequantize` that runs them over a tensor's bytes (`quant_explain` explains one number). The
types whose integers index a table (the i-quants, IQ4_NL/IQ4_XS, TQ1_0/TQ2_0, MXFP4, NVFP4) are
`lookup_quants`'; the plain floats, the 32-number blocks and the K-quants are here.

The layouts follow llama.cpp's ggml-common.h (block_q4_0 … block_q6_K) and the formulas its
ggml-quants.c (dequantize_row_*). gguf-py's gguf/quants.py is the independent reference the tests
compare against; the float32 operations here are the same ones in the same order (a float16 scale
widened to float32, times the integer, plus or minus the minimum), so the results agree bit for bit.

Each block function takes a (n, bytes per block) uint8 array and writes a (n, numbers per block)
float32 one: vectorized over blocks, never a Python loop per block. `dequantize` hands them
CHUNK_NUMBERS numbers at a time, so the uint8 temporaries stay a few hundred kilobytes (in cache)
whatever the tensor's size (F32, F16 and BF16, which need none, go in one step); each integer is
widened into the output where it lies and scaled there, so there are no float temporaries, and
nothing is ever float64. bench/bench_gguf.py measures it against gguf-py. Core module: numpy and the standard library only.
"""

from __future__ import annotations

import os
from typing import Callable, NamedTuple

import numpy as np

from ..errors import TracerError
from . import lookup_quants as lq

# Every type a GGUF file may name: id → (name, numbers per block, bytes per block). Ids 4, 5 and
# 31-33, 36-38 were types llama.cpp has since removed; a file naming them is refused as unknown.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
}
CHUNK_NUMBERS = 1 << 16  # numbers de-quantized per step: 256 KB of float32 and its uint8 temporaries
PARALLEL_NUMBERS = 1 << 20  # a tensor of this many numbers or more is de-quantized by several threads
MAX_WORKERS = 4


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    """(n, 1) float32: the float16 at byte `at` of every block, widened exactly."""
    return blocks[:, at:at + 2].view(np.float16).astype(np.float32)


def _view(out: np.ndarray, *shape: int) -> np.ndarray:
    """`out` seen with another shape, never a copy (setting .shape refuses when it would copy)."""
    v = out.view()
    v.shape = shape
    return v


# --------------------------------------------------------------------------- plain floats


def f32(blocks: np.ndarray, out: np.ndarray) -> None:
    """F32: each number is 4 bytes, an IEEE float32, little-endian; w is that float."""
    out[...] = blocks.view(np.float32)  # (n, 1)


def f16(blocks: np.ndarray, out: np.ndarray) -> None:
    """F16: each number is 2 bytes, an IEEE float16; w is that float, widened exactly to float32."""
    out[...] = blocks.view(np.float16)


def bf16(blocks: np.ndarray, out: np.ndarray) -> None:
    """BF16: each number is 2 bytes, the top half of a float32; w is those 16 bits followed by 16 zeros."""
    bits = out.view(np.uint32)
    bits[...] = blocks.view(np.uint16)
    bits <<= 16


# --------------------------------------------------------------------------- 32-number blocks


def q8_0(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q8_0: blocks of 32 numbers, 34 bytes: a scale d (float16), then 32 signed bytes q; w = d·q."""
    out[...] = blocks[:, 2:34].view(np.int8)  # widened where it lies, then scaled in place
    out *= _f16(blocks, 0)


def _nibbles(qs: np.ndarray, n: int) -> np.ndarray:
    """(n, 32) uint8: the low four bits of the 16 bytes `qs` (numbers 0-15), then their high four bits
    (numbers 16-31). One contiguous row per block, so the float work after it runs in long strides."""
    q = np.empty((n, 2, 16), np.uint8)
    np.bitwise_and(qs, 15, out=q[:, 0])
    np.right_shift(qs, 4, out=q[:, 1])
    return q.reshape(n, 32)


def q4_0(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q4_0: blocks of 32 numbers, 18 bytes: a scale d (float16), then 16 bytes whose low four bits
    are numbers 0-15 and high four bits numbers 16-31, each an integer q in 0..15; w = d·(q − 8)."""
    q = _nibbles(blocks[:, 2:18], len(blocks))
    q -= 8  # in uint8 arithmetic, read back as int8: -8..7
    out[...] = q.view(np.int8)
    out *= _f16(blocks, 0)


def q4_1(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q4_1: blocks of 32 numbers, 20 bytes: a scale d and a minimum m (float16 each), then 16 bytes
    whose low four bits are numbers 0-15 and high four bits numbers 16-31 (q in 0..15); w = d·q + m."""
    out[...] = _nibbles(blocks[:, 4:20], len(blocks))
    out *= _f16(blocks, 0)
    out += _f16(blocks, 2)


def _five_bits(qh: np.ndarray, qs: np.ndarray, n: int) -> np.ndarray:
    """(n, 2, 16) uint8 q in 0..31: four low bits from the 16 bytes `qs` (low halves first) and the
    fifth from the 32 bits of `qh`, bit i for number i (a little-endian uint32)."""
    q = np.unpackbits(qh, axis=1, bitorder="little").reshape(n, 2, 16)  # bit i of number i
    q <<= 4
    q[:, 0] |= qs & 15
    q[:, 1] |= qs >> 4
    return q


def q5_0(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q5_0: blocks of 32 numbers, 22 bytes: a scale d (float16), 4 bytes holding the fifth bit of
    each number, 16 bytes of four-bit halves (numbers 0-15 low, 16-31 high); q in 0..31, w = d·(q − 16)."""
    n = len(blocks)
    q = _five_bits(blocks[:, 2:6], blocks[:, 6:22], n)
    q -= 16
    out[...] = q.view(np.int8).reshape(n, 32)
    out *= _f16(blocks, 0)


def q5_1(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q5_1: blocks of 32 numbers, 24 bytes: a scale d and a minimum m (float16 each), 4 bytes of
    fifth bits, 16 bytes of four-bit halves (numbers 0-15 low, 16-31 high); q in 0..31, w = d·q + m."""
    n = len(blocks)
    q = _five_bits(blocks[:, 4:8], blocks[:, 8:24], n)
    out[...] = q.reshape(n, 32)
    out *= _f16(blocks, 0)
    out += _f16(blocks, 2)


# --------------------------------------------------------------------------- K-quants: 256-number super-blocks

_SHIFT2 = np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)  # the four 2-bit fields of a byte
_BITS8 = np.arange(8, dtype=np.uint8).reshape(1, 8, 1)  # the eight bits of a byte


def q2_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q2_K: super-blocks of 256 numbers, 84 bytes: 16 bytes of sub-block scales (low four bits sc,
    high four bits a minimum m, one byte per 16 numbers), 64 bytes of 2-bit integers q, then d and
    dmin (float16). Number i = 128·h + 32·j + l takes bits 2j..2j+1 of byte 16 + 32·h + l and the scale
    byte i // 16; w = (d·sc)·q − dmin·m."""
    n = len(blocks)
    sc = blocks[:, :16]
    scale = (sc & 15) * _f16(blocks, 80)  # (n, 16) float32: d·sc
    least = (sc >> 4) * _f16(blocks, 82)  # (n, 16) float32: dmin·m
    q = blocks[:, 16:80].reshape(n, 2, 1, 32) >> _SHIFT2  # (n, 2, 4, 32): h, j, l
    q &= 3
    out[...] = q.reshape(n, 256)  # widened where it lies, then scaled in place: no float temporaries
    view = _view(out, n, 16, 16)
    view *= scale[:, :, None]
    view -= least[:, :, None]


def _q3_scales(s: np.ndarray, n: int) -> np.ndarray:
    """(n, 16) int8: Q3_K's 6-bit sub-block scales less 32. Scale k takes four low bits from byte
    k % 8 (its low half for k < 8, high half after) and two high bits from byte 8 + k % 4, bits 2·(k // 4)."""
    low = np.concatenate([s[:, :8] & 15, s[:, :8] >> 4], axis=1)
    high = (s[:, None, 8:12] >> _SHIFT2[0]) & 3  # (n, 4, 4): shift, byte
    scales = low | (high.reshape(n, 16) << 4)
    scales -= 32
    return scales.view(np.int8)


def q3_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q3_K: super-blocks of 256 numbers, 110 bytes: 32 bytes of high bits (hmask), 64 bytes of 2-bit
    low parts, 12 bytes packing 16 six-bit sub-block scales, then d (float16). Number i = 128·h + 32·j + l
    takes bits 2j..2j+1 of byte 32 + 32·h + l and bit 4h + j of hmask byte l; q = low − 4 when that bit
    is 0, else low (−4..3); the scale sc is the 6-bit number less 32; w = (d·sc)·q."""
    n = len(blocks)
    scale = _q3_scales(blocks[:, 96:108], n) * _f16(blocks, 108)  # (n, 16) float32: d·sc
    q = (blocks[:, 32:96].reshape(n, 2, 1, 32) >> _SHIFT2).reshape(n, 8, 32)  # (n, 8, 32): 4h + j, l
    q &= 3
    high = blocks[:, None, :32] >> _BITS8  # (n, 8, 32): bit 4h + j of hmask byte l
    high &= 1
    high <<= 2
    q |= high
    q -= 4  # in uint8 arithmetic, read back as int8: -4..3
    out[...] = q.view(np.int8).reshape(n, 256)
    _view(out, n, 16, 16)[...] *= scale[:, :, None]


def k4_scales(s: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, 8) uint8 each: Q4_K's and Q5_K's 6-bit sub-block scales sc and minimums m from 12 bytes.
    For sub-block j < 4: sc = byte j & 63, m = byte j+4 & 63; for j >= 4: sc = (byte j+4 & 15) | (byte
    j−4 >> 6) << 4, m = (byte j+4 >> 4) | (byte j >> 6) << 4 (llama.cpp's get_scale_min_k4)."""
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return sc, m


def _k_scale_min(blocks: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, 4, 2, 1) float32 each: d·sc and dmin·m of the 8 sub-blocks, as 4 pairs of (low, high) halves."""
    sc, m = k4_scales(blocks[:, 4:16], n)
    return ((sc * _f16(blocks, 0)).reshape(n, 4, 2, 1), (m * _f16(blocks, 2)).reshape(n, 4, 2, 1))


def q4_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q4_K: super-blocks of 256 numbers, 144 bytes: d and dmin (float16), 12 bytes packing 8 six-bit
    sub-block scales sc and minimums m, 128 bytes of four-bit q. Each 64 numbers share 32 bytes: the
    low four bits are the first 32 (sub-block 2c), the high four bits the next 32 (2c + 1);
    w = (d·sc)·q − dmin·m."""
    n = len(blocks)
    scale, least = _k_scale_min(blocks, n)
    qs = blocks[:, 16:144].reshape(n, 4, 32)
    q = np.empty((n, 4, 2, 32), np.uint8)  # c, half, l: in the numbers' order
    np.bitwise_and(qs, 15, out=q[:, :, 0])
    np.right_shift(qs, 4, out=q[:, :, 1])
    view = _view(out, n, 4, 2, 32)
    view[...] = q
    view *= scale
    view -= least


def q5_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q5_K: super-blocks of 256 numbers, 176 bytes: d and dmin (float16), 12 bytes of 6-bit scales and
    minimums (as Q4_K), 32 bytes of fifth bits (bit j of byte l for number 32·j + l), 128 bytes of
    four-bit halves laid out as Q4_K's; q in 0..31, w = (d·sc)·q − dmin·m."""
    n = len(blocks)
    scale, least = _k_scale_min(blocks, n)
    qs = blocks[:, 48:176].reshape(n, 4, 32)
    q = (blocks[:, None, 16:48] >> _BITS8).reshape(n, 4, 2, 32)  # the fifth bit of sub-block 2c + half
    q &= 1
    q <<= 4
    q[:, :, 0] |= qs & 15
    q[:, :, 1] |= qs >> 4
    view = _view(out, n, 4, 2, 32)
    view[...] = q
    view *= scale
    view -= least


def q6_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q6_K: super-blocks of 256 numbers, 210 bytes: 128 bytes of low four bits, 64 bytes of high two
    bits, 16 signed-byte sub-block scales sc (one per 16 numbers), then d (float16). In each half h
    of 128 numbers, number 32·k + l takes its low bits from byte 64h + l + 32·(k % 2) (low half for
    k < 2, high half after) and its high bits from bits 2k..2k+1 of byte 128 + 32h + l;
    q = those six bits − 32, w = (d·sc)·q."""
    n = len(blocks)
    scale = blocks[:, 192:208].view(np.int8) * _f16(blocks, 208)  # (n, 16) float32: d·sc
    low = blocks[:, :128].reshape(n, 2, 2, 32)  # h, k % 2, l
    q = ((blocks[:, 128:192].reshape(n, 2, 1, 32) >> _SHIFT2) & 3) << 4  # (n, 2, 4, 32): h, k, l
    q[:, :, :2] |= low & 15
    q[:, :, 2:] |= low >> 4
    q -= 32
    out[...] = q.view(np.int8).reshape(n, 256)
    _view(out, n, 16, 16)[...] *= scale[:, :, None]


# --------------------------------------------------------------------------- the table


class QuantType(NamedTuple):
    """A type tracer reads: its ggml id, numbers and bytes per block, block function, one line of layout."""

    id: int
    block: int
    nbytes: int
    function: Callable[[np.ndarray, np.ndarray], None]
    description: str


def _entry(name: str, function, description: str) -> tuple[str, QuantType]:
    type_id = next(i for i, (n, _, _) in GGML_TYPES.items() if n == name)
    return name, QuantType(type_id, GGML_TYPES[type_id][1], GGML_TYPES[type_id][2], function, description)


TYPES: dict[str, QuantType] = dict([
    _entry("F32", f32, "32-bit floats"),
    _entry("F16", f16, "16-bit floats"),
    _entry("BF16", bf16, "bfloat16: the top 16 bits of a float32"),
    _entry("Q8_0", q8_0, "blocks of 32: a float16 scale d and 32 signed bytes q; w = d·q"),
    _entry("Q4_0", q4_0, "blocks of 32: a float16 scale d and 32 four-bit q; w = d·(q − 8)"),
    _entry("Q4_1", q4_1, "blocks of 32: float16 scale d and minimum m, 32 four-bit q; w = d·q + m"),
    _entry("Q5_0", q5_0, "blocks of 32: a float16 scale d and 32 five-bit q; w = d·(q − 16)"),
    _entry("Q5_1", q5_1, "blocks of 32: float16 scale d and minimum m, 32 five-bit q; w = d·q + m"),
    _entry("Q2_K", q2_k, "super-blocks of 256: 16 sub-blocks with 4-bit scale and minimum, 2-bit q; w = d·sc·q − dmin·m"),
    _entry("Q3_K", q3_k, "super-blocks of 256: 16 sub-blocks with 6-bit scales, 3-bit q; w = d·(sc − 32)·q"),
    _entry("Q4_K", q4_k, "super-blocks of 256: 8 sub-blocks with 6-bit scale and minimum, 4-bit q; w = d·sc·q − dmin·m"),
    _entry("Q5_K", q5_k, "super-blocks of 256: 8 sub-blocks with 6-bit scale and minimum, 5-bit q; w = d·sc·q − dmin·m"),
    _entry("Q6_K", q6_k, "super-blocks of 256: 16 sub-blocks with 8-bit scales, 6-bit q; w = d·sc·(q − 32)"),
    _entry("IQ4_NL", lq.iq4_nl, "blocks of 32: a float16 scale d and 32 four-bit indices into a 16-level "
                                "non-uniform table; w = d·kvalues_iq4nl[q]"),
    _entry("IQ4_XS", lq.iq4_xs, "super-blocks of 256: 8 sub-blocks with 6-bit scales, four-bit indices into "
                                "IQ4_NL's table; w = d·(ls − 32)·kvalues_iq4nl[q]"),
    _entry("IQ3_S", lq.iq3_s, "super-blocks of 256: 9-bit indices of 4-number grid rows, a sign bit per "
                              "number, 4-bit scales per 32; w = d·(1 + 2s)·(±grid)"),
    _entry("IQ3_XXS", lq.iq3_xxs, "super-blocks of 256: 8-bit indices of 4-number grid rows, 7-bit sign "
                                  "indices, 4-bit scales per 32; w = d·(0.5 + s)·0.5·(±grid)"),
    _entry("IQ2_S", lq.iq2_s, "super-blocks of 256: 10-bit indices of 8-number grid rows, a sign bit per "
                              "number, 4-bit scales per 16; w = d·(0.5 + s)·0.25·(±grid)"),
    _entry("IQ2_XS", lq.iq2_xs, "super-blocks of 256: 9-bit indices of 8-number grid rows, 7-bit sign "
                                "indices, 4-bit scales per 16; w = d·(0.5 + s)·0.25·(±grid)"),
    _entry("IQ2_XXS", lq.iq2_xxs, "super-blocks of 256: 8-bit indices of 8-number grid rows, 7-bit sign "
                                  "indices, 4-bit scales per 32; w = d·(0.5 + s)·0.25·(±grid)"),
    _entry("IQ1_M", lq.iq1_m, "super-blocks of 256: 11-bit indices of 8-number rows of −1, 0, 1, a ±0.125 "
                              "shift per 8, 3-bit scales per 16; w = d·(2s + 1)·(grid + delta)"),
    _entry("IQ1_S", lq.iq1_s, "super-blocks of 256: 11-bit indices of 8-number rows of −1, 0, 1, a ±0.125 "
                              "shift and a 3-bit scale per 32; w = d·(2s + 1)·(grid + delta)"),
    _entry("TQ1_0", lq.tq1_0, "super-blocks of 256: ternary digits, five to a byte in base 3, and one "
                              "float16 scale d; w = d·(digit − 1)"),
    _entry("TQ2_0", lq.tq2_0, "super-blocks of 256: ternary digits, four 2-bit ones to a byte, and one "
                              "float16 scale d; w = d·(digit − 1)"),
    _entry("MXFP4", lq.mxfp4, "blocks of 32: an E8M0 power-of-two scale and 32 four-bit E2M1 floats "
                              "(0, ±0.5 … ±6); w = 2^(e − 127)·E2M1"),
    _entry("NVFP4", lq.nvfp4, "blocks of 64: a UE4M3 8-bit float scale per 16 numbers and four-bit E2M1 "
                              "floats; w = UE4M3·E2M1"),
])


def cannot(type_name: str, tensor: str) -> TracerError:
    """The one-line refusal of a type tracer does not read."""
    return TracerError(f"tensor {tensor!r} is stored as {type_name}, which tracer cannot de-quantize "
                       f"(it reads {', '.join(TYPES)})")


def workers() -> int:
    """Threads a large tensor is de-quantized by: as many as BLAS is given (OPENBLAS_NUM_THREADS or
    OMP_NUM_THREADS, when set), else the CPUs this process may use; at most MAX_WORKERS."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(var, "").strip()
        if v.isdigit() and int(v) > 0:
            return min(int(v), MAX_WORKERS)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, MAX_WORKERS))


_POOL = None


def _pool():
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="tracer-dequantize")
    return _POOL


def dequantize(raw: np.ndarray, type_name: str, count: int, tensor: str = "?") -> np.ndarray:
    """(count,) float32: the numbers of `raw`, a tensor's bytes (1-d uint8) stored as `type_name`.

    Runs the type's block function over CHUNK_NUMBERS numbers at a time into one output array, so
    no temporary grows with the tensor; a tensor of PARALLEL_NUMBERS numbers or more is cut into
    `workers()` parts run by as many threads (the same numbers: each block is computed alone). A type
    outside TYPES is refused, naming `tensor`."""
    kind = TYPES.get(type_name)
    if kind is None:
        raise cannot(type_name, tensor)
    n_blocks = count // kind.block
    if count % kind.block or raw.size != n_blocks * kind.nbytes:
        raise TracerError(f"tensor {tensor!r}: {raw.size} bytes do not hold {count} numbers of {type_name}")
    blocks = raw.reshape(n_blocks, kind.nbytes)
    bad = lq.bad_scales(type_name, blocks)
    if bad is not None:
        raise TracerError(f"tensor {tensor!r}: block {bad:,} of {type_name} has the E8M0 scale 255, which is NaN "
                          f"(no number); llama.cpp refuses it too")
    out = np.empty((n_blocks, kind.block), np.float32)
    step = max(CHUNK_NUMBERS // kind.block, 1) if kind.block > 1 else n_blocks  # plain floats: no temporaries

    def part(lo: int, hi: int) -> None:  # blocks lo..hi, a chunk at a time
        with np.errstate(invalid="ignore", over="ignore"):  # a scale that is inf or NaN gives inf or NaN, as in ggml
            for start in range(lo, hi, step):
                kind.function(blocks[start:min(start + step, hi)], out[start:min(start + step, hi)])

    parts = workers() if count >= PARALLEL_NUMBERS else 1
    if parts == 1:
        part(0, n_blocks)
    else:  # numpy lets go of the GIL in its gathers and products: the parts run side by side
        edges = [n_blocks * i // parts for i in range(parts + 1)]
        for done in [_pool().submit(part, lo, hi) for lo, hi in zip(edges, edges[1:])]:
            done.result()
    return out.reshape(count)
