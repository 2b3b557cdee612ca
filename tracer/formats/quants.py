"""De-quantization of ggml's block formats to float32: the numbers of a GGUF tensor.

Owns which ggml types exist (`GGML_TYPES`: id → name, numbers per block, bytes per block, as
ggml.h's `ggml_type` and ggml.c's type traits give them), which ones tracer reads (`TYPES`), one
function per type that turns blocks of bytes into floats, `dequantize` that runs them over a
tensor's bytes, and `explain`, one number's way from its block's bytes to its float.

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

from typing import Callable, NamedTuple

import numpy as np

from ..errors import TracerError

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
])


def cannot(type_name: str, tensor: str) -> TracerError:
    """The one-line refusal of a type tracer does not read."""
    return TracerError(f"tensor {tensor!r} is stored as {type_name}, which tracer cannot de-quantize "
                       f"(it reads {', '.join(TYPES)})")


def dequantize(raw: np.ndarray, type_name: str, count: int, tensor: str = "?") -> np.ndarray:
    """(count,) float32: the numbers of `raw`, a tensor's bytes (1-d uint8) stored as `type_name`.

    Runs the type's block function over CHUNK_NUMBERS numbers at a time into one output array, so
    no temporary grows with the tensor. A type outside TYPES is refused, naming `tensor`."""
    kind = TYPES.get(type_name)
    if kind is None:
        raise cannot(type_name, tensor)
    n_blocks = count // kind.block
    if count % kind.block or raw.size != n_blocks * kind.nbytes:
        raise TracerError(f"tensor {tensor!r}: {raw.size} bytes do not hold {count} numbers of {type_name}")
    blocks = raw.reshape(n_blocks, kind.nbytes)
    out = np.empty((n_blocks, kind.block), np.float32)
    step = max(CHUNK_NUMBERS // kind.block, 1) if kind.block > 1 else n_blocks  # plain floats: no temporaries
    with np.errstate(invalid="ignore", over="ignore"):  # a scale that is inf or NaN gives inf or NaN, as in ggml
        for start in range(0, n_blocks, step):
            kind.function(blocks[start:start + step], out[start:start + step])
    return out.reshape(count)


# --------------------------------------------------------------------------- one number, explained


def _half(b: np.ndarray, at: int) -> np.float32:
    return b[at:at + 2].view(np.float16)[0].astype(np.float32)


def _nibble(byte: int, high: bool) -> int:
    return byte >> 4 if high else byte & 15


def _bits(high: bool) -> str:
    return "high four bits" if high else "low four bits"


def _x_plain(b: np.ndarray, i: int, name: str) -> dict:
    if name == "F32":
        return {"bits": f"0x{int(b.view(np.uint32)[0]):08x}", "value": b.view(np.float32)[0],
                "formula": "the float32 itself", "where": {"value": "bytes 0-3, little-endian"}}
    if name == "F16":
        return {"bits": f"0x{int(b.view(np.uint16)[0]):04x}", "value": b.view(np.float16)[0].astype(np.float32),
                "formula": "the float16, widened to float32", "where": {"value": "bytes 0-1, little-endian"}}
    bits = b.view(np.uint16).astype(np.uint32) << 16
    return {"bits": f"0x{int(b.view(np.uint16)[0]):04x}", "value": bits.view(np.float32)[0],
            "formula": "the 16 bits, then 16 zero bits, read as a float32", "where": {"value": "bytes 0-1"}}


def _x_small(b: np.ndarray, i: int, name: str) -> dict:
    """Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: one scale d (and a minimum m) per 32 numbers."""
    d = _half(b, 0)
    if name == "Q8_0":
        q = int(b[2:].view(np.int8)[i])
        return {"d": d, "q": q, "value": np.float32(q) * d, "formula": "d·q",
                "where": {"d": "bytes 0-1 (float16)", "q": f"byte {2 + i} (a signed byte)"}}
    has_min = name in ("Q4_1", "Q5_1")
    at = 4 if has_min else 2  # where the integers (or the fifth bits) start
    out: dict = {"d": d}
    where = {"d": "bytes 0-1 (float16)"}
    if has_min:
        out["m"], where["m"] = _half(b, 2), "bytes 2-3 (float16)"
    if name.startswith("Q5"):
        byte = at + 4 + i % 16
        fifth = (int.from_bytes(b[at:at + 4].tobytes(), "little") >> i) & 1
        q = _nibble(int(b[byte]), i >= 16) | fifth << 4
        out["q_low"], out["q_high_bit"] = q & 15, fifth
        where["q"] = f"byte {byte}, {_bits(i >= 16)}; fifth bit: bit {i} of bytes {at}-{at + 3}"
    else:
        byte = at + i % 16
        q = _nibble(int(b[byte]), i >= 16)
        where["q"] = f"byte {byte}, {_bits(i >= 16)}"
    out["q"] = q
    if has_min:
        out["value"], out["formula"] = np.float32(q) * d + out["m"], "d·q + m"
    else:
        zero = 16 if name == "Q5_0" else 8
        out["value"], out["formula"] = np.float32(q - zero) * d, f"d·(q − {zero})"
    out["where"] = where
    return out


def _x_q2_3(b: np.ndarray, i: int, name: str) -> dict:
    """Q2_K and Q3_K: 16 sub-blocks of 16 numbers; number i = 128·h + 32·j + l."""
    sub, h, j, l = i // 16, i // 128, i % 128 // 32, i % 32
    if name == "Q2_K":
        d, dmin = _half(b, 80), _half(b, 82)
        sc, m = int(b[sub]) & 15, int(b[sub]) >> 4
        byte = 16 + 32 * h + l
        q = (int(b[byte]) >> 2 * j) & 3
        scale, least = np.float32(sc) * d, np.float32(m) * dmin
        return {"d": d, "dmin": dmin, "sub_block": sub, "sc": sc, "m": m, "scale": scale, "min": least, "q": q,
                "value": np.float32(q) * scale - least, "formula": "(d·sc)·q − dmin·m",
                "where": {"d": "bytes 80-81 (float16)", "dmin": "bytes 82-83 (float16)",
                          "sc, m": f"byte {sub}: low four bits sc, high four bits m",
                          "q": f"byte {byte}, bits {2 * j}-{2 * j + 1}"}}
    d = _half(b, 108)
    lo_at, hi_at = 96 + sub % 8, 104 + sub % 4
    six = (int(b[lo_at]) >> 4 * (sub // 8)) & 15 | ((int(b[hi_at]) >> 2 * (sub // 4)) & 3) << 4
    byte = 32 + 32 * h + l
    low, high = (int(b[byte]) >> 2 * j) & 3, (int(b[l]) >> (4 * h + j)) & 1
    q, scale = (low | high << 2) - 4, np.float32(six - 32) * d
    return {"d": d, "sub_block": sub, "sc_bits": six, "sc": six - 32, "scale": scale, "q_low": low,
            "q_high_bit": high, "q": q, "value": np.float32(q) * scale,
            "formula": "(d·sc)·q, sc = the 6-bit scale − 32, q = the two low bits − 4 unless the high bit is 1",
            "where": {"d": "bytes 108-109 (float16)",
                      "sc": f"byte {lo_at}, {_bits(sub >= 8)}; two high bits: byte {hi_at}, bits "
                            f"{2 * (sub // 4)}-{2 * (sub // 4) + 1}",
                      "q": f"byte {byte}, bits {2 * j}-{2 * j + 1}; high bit: byte {l}, bit {4 * h + j}"}}


def _x_q4_5(b: np.ndarray, i: int, name: str) -> dict:
    """Q4_K and Q5_K: 8 sub-blocks of 32 numbers, each 64 sharing 32 bytes (low halves, then high)."""
    sub, c, l = i // 32, i // 64, i % 32
    d, dmin = _half(b, 0), _half(b, 2)
    s = [int(x) for x in b[4:16]]
    if sub < 4:
        sc, m = s[sub] & 63, s[sub + 4] & 63
        where = f"sc: byte {4 + sub}, low six bits; m: byte {8 + sub}, low six bits"
    else:
        sc, m = (s[sub + 4] & 15) | (s[sub - 4] >> 6) << 4, (s[sub + 4] >> 4) | (s[sub] >> 6) << 4
        where = (f"sc: byte {8 + sub} low four bits, byte {sub} top two bits; "
                 f"m: byte {8 + sub} high four bits, byte {4 + sub} top two bits")
    scale, least = np.float32(sc) * d, np.float32(m) * dmin
    out = {"d": d, "dmin": dmin, "sub_block": sub, "sc": sc, "m": m, "scale": scale, "min": least}
    at = 16 if name == "Q4_K" else 48
    byte = at + 32 * c + l
    q = _nibble(int(b[byte]), sub % 2 == 1)
    place = f"byte {byte}, {_bits(sub % 2 == 1)}"
    if name == "Q5_K":
        fifth = (int(b[16 + l]) >> sub) & 1
        out["q_low"], out["q_high_bit"], q = q, fifth, q | fifth << 4
        place += f"; fifth bit: byte {16 + l}, bit {sub}"
    out.update(q=q, value=np.float32(q) * scale - least, formula="(d·sc)·q − dmin·m",
               where={"d": "bytes 0-1 (float16)", "dmin": "bytes 2-3 (float16)", "sc, m": where, "q": place})
    return out


def _x_q6(b: np.ndarray, i: int, name: str) -> dict:
    """Q6_K: 16 sub-blocks of 16 numbers with signed-byte scales; number i = 128·h + 32·k + l."""
    h, k, l, sub = i // 128, i % 128 // 32, i % 32, i // 16
    low_at, high_at = 64 * h + l + 32 * (k % 2), 128 + 32 * h + l
    low, high = _nibble(int(b[low_at]), k >= 2), (int(b[high_at]) >> 2 * k) & 3
    d, sc = _half(b, 208), int(b[192:208].view(np.int8)[sub])
    q, scale = (low | high << 4) - 32, np.float32(sc) * d
    return {"d": d, "sub_block": sub, "sc": sc, "scale": scale, "q_low": low, "q_high": high, "q": q,
            "value": np.float32(q) * scale, "formula": "(d·sc)·q, q = the six bits − 32",
            "where": {"d": "bytes 208-209 (float16)", "sc": f"byte {192 + sub} (a signed byte)",
                      "q": f"byte {low_at}, {_bits(k >= 2)}; two high bits: byte {high_at}, bits {2 * k}-{2 * k + 1}"}}


_EXPLAIN = {"F32": _x_plain, "F16": _x_plain, "BF16": _x_plain, "Q8_0": _x_small, "Q4_0": _x_small,
            "Q4_1": _x_small, "Q5_0": _x_small, "Q5_1": _x_small, "Q2_K": _x_q2_3, "Q3_K": _x_q2_3,
            "Q4_K": _x_q4_5, "Q5_K": _x_q4_5, "Q6_K": _x_q6}


def explain(type_name: str, block, index: int) -> dict:
    """Number `index` of one block (`block`: its bytes, of `type_name`), from the bytes to the float.

    Gives the scale(s) ("d", "m"; for K-quants "dmin", the "sub_block", its packed integers "sc"
    and "m" and the products "scale" = d·sc and "min" = dmin·m), the integer "q" (and its parts:
    "q_low", "q_high_bit"), the resulting float "value", the "formula" in words, and "where": which
    bytes and bits each came from. Floats are Python floats; "value" equals what `dequantize` gives
    for that number, bit for bit (the same float32 operations in the same order)."""
    if type_name not in TYPES:
        raise TracerError(f"{type_name}: tracer cannot de-quantize it (it reads {', '.join(TYPES)})")
    b = np.frombuffer(bytes(block), np.uint8)
    kind = TYPES[type_name]
    if b.size != kind.nbytes:
        raise TracerError(f"a {type_name} block is {kind.nbytes} bytes, got {b.size}")
    if not 0 <= index < kind.block:
        raise TracerError(f"a {type_name} block holds numbers 0..{kind.block - 1}, not {index}")
    out = _EXPLAIN[type_name](b, int(index), type_name)
    as_float = {k: float(v) if isinstance(v, np.floating) else v for k, v in out.items()}
    return {"type": type_name, "index": int(index), **as_float}
