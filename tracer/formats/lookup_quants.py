"""De-quantization of ggml's lookup types to float32: the i-quants, IQ4_NL/IQ4_XS, the ternary TQ1_0/TQ2_0
and the 4-bit floats MXFP4/NVFP4, whose stored integers are indices into a table rather than numbers.

The block layouts are llama.cpp's ggml-common.h (block_iq2_xxs … block_iq4_xs, block_tq1_0,
block_tq2_0, block_mxfp4, block_nvfp4) and the formulas its ggml-quants.c (dequantize_row_*), written
here afresh and vectorized over blocks; the tables are `quant_tables` (copied from ggml-common.h).
gguf-py's gguf/quants.py is the reference the tests compare against, bit for bit: each float32 is
made by the same operations in the same order as there (a sub-block scale d·(0.5 + s)·0.25 in that
order, then one product with the signed grid number, or with the table's entry). A sign flip is exact,
so a grid number is negated before its product rather than after.

How each type is done without a Python loop per block:
- the grid types (IQ2_*, IQ3_*) gather each group's grid row as one uint64 (8 bytes, or two 4-byte
  rows side by side) and its 8 signs as a uint64 mask of 0x00/0xff bytes, and negate the masked bytes
  by two's complement in that one integer ((g ^ m) + (m & 0x01…01): no byte carries into the next,
  every grid number being 1 or more), then widen the 8 signed bytes in place and scale them;
- IQ1_S/IQ1_M gather float32 rows of (grid + delta), the 11-bit row index and the delta's sign bit
  making one 12-bit index into a (4096, 8) table;
- IQ4_NL/IQ4_XS/MXFP4/NVFP4 gather each byte's two float32 table entries (its low and its high four
  bits) at once from a (256, 2) table, laid out in the output as ggml orders them;
- TQ1_0 reads its base-3 digits by ggml's multiply-and-shift, as two comparisons of each byte's
  product, TQ2_0 its 2-bit digits by shifts.

Every index is a bit field exactly as wide as its table (8 bits for 256 grid rows, 11 for 2,048, 4
for 16 levels), so no byte value reads outside a table; a TQ2_0 digit 3, which ggml's quantizer never
writes, reads as 2 and a TQ1_0 byte of 243 or more as digits, both as ggml reads them.
An E8M0 scale of 255 is NaN in the OCP MX format and llama.cpp's loader refuses it
(ggml_validate_row_data); `bad_scales` finds it so that the tensor is refused by name.
Core module: numpy and the standard library only.
"""

from __future__ import annotations

import numpy as np

from .quant_tables import (IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
                           KVALUES_FP4, KVALUES_IQ4NL)


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    """(n, 1) float32: the float16 at byte `at` of every block, widened exactly."""
    return blocks[:, at:at + 2].view(np.float16).astype(np.float32)


def _e8m0_half() -> np.ndarray:
    """(256,) float32: ggml_e8m0_to_fp32_half, 2^(e − 128) for each byte e (half the E8M0 scale 2^(e − 127),
    because the E2M1 table holds its values doubled); e = 0 and 1 are float32 subnormals."""
    bits = (np.arange(256, dtype=np.uint32) - np.uint32(1)) << np.uint32(23)  # the exponent field e − 1
    bits[:2] = [0x00200000, 0x00400000]  # 2^−128 and 2^−127: below float32's least normal exponent
    return bits.view(np.float32)


def _ue4m3_half() -> np.ndarray:
    """(256,) float32: ggml_ue4m3_to_fp32, an unsigned E4M3 byte (bit 7 ignored, exponent bias 7, no
    infinities; 0x7f, which would be NaN, reads as 0) times 0.5, as for E8M0."""
    x = np.arange(256)
    exp, man = (x >> 3) & 15, (x & 7).astype(np.float64)
    raw = np.where(exp == 0, man * 2.0**-9, (1 + man / 8) * 2.0 ** (exp - 7))
    return np.where((x == 0) | (x == 0x7F), 0.0, raw * 0.5).astype(np.float32)  # every value exact in float32


E8M0_HALF = _e8m0_half()
UE4M3_HALF = _ue4m3_half()
FP4 = KVALUES_FP4.astype(np.float32)  # the E2M1 values doubled
IQ4NL = KVALUES_IQ4NL.astype(np.float32)
_BYTE = np.arange(256)
FP4_PAIRS = np.stack([FP4[_BYTE & 15], FP4[_BYTE >> 4]], axis=1)  # (256, 2): a byte's low then high four bits' values
IQ4NL_PAIRS = np.stack([IQ4NL[_BYTE & 15], IQ4NL[_BYTE >> 4]], axis=1)
_ONES = np.uint64(0x0101010101010101)
SIGN_MASKS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(
    np.uint8) * np.uint8(255)  # (256, 8): bit j of a byte as 0x00 or 0xff, in byte j
SIGN_MASK64 = SIGN_MASKS.view(np.uint64).reshape(256)  # the same, one uint64 a byte
KSIGN_MASK64 = SIGN_MASK64[KSIGNS_IQ2XS]  # (128,): a 7-bit sign index's 8 signs
GRID64 = {name: g.view(np.uint64).reshape(-1) for name, g in
          (("iq2xxs_grid", IQ2XXS_GRID), ("iq2xs_grid", IQ2XS_GRID), ("iq2s_grid", IQ2S_GRID))}
GRID32 = {name: g.view(np.uint32).reshape(-1) for name, g in (("iq3xxs_grid", IQ3XXS_GRID), ("iq3s_grid", IQ3S_GRID))}
IQ1_ROWS = np.concatenate([IQ1S_GRID + np.float32(0.125), IQ1S_GRID - np.float32(0.125)]).astype(np.float32)  # (4096, 8)
_POW3 = np.array([1, 3, 9, 27, 81], np.uint8)
_SHIFT2 = np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)


def _view(out: np.ndarray, *shape: int) -> np.ndarray:
    """`out` seen with another shape, never a copy."""
    v = out.view()
    v.shape = shape
    return v


def _signed(rows: np.ndarray, masks: np.ndarray, out: np.ndarray, n: int) -> None:
    """Write into `out` the int8 bytes of `rows` (uint64, 8 grid numbers each) negated where `masks`
    has 0xff bytes: (g ^ m) + (m & 1) is −g byte by byte, and no byte carries (every g is at least 1)."""
    signed = rows ^ masks
    signed += masks & _ONES
    out[...] = signed.view(np.int8).reshape(n, -1)


def _scaled(out: np.ndarray, n: int, scale: np.ndarray) -> None:
    """Multiply each group of `out` (n, groups · size) by its float32 `scale` (n, groups), in place."""
    _view(out, n, scale.shape[1], -1)[...] *= scale[:, :, None]


def _nibbles(qs: np.ndarray, shape: tuple) -> np.ndarray:
    """The 4-bit indices of bytes `qs` (n, …, k): their low halves, then their high halves, laid out as `shape`."""
    q = np.empty((*qs.shape[:-1], 2, qs.shape[-1]), np.uint8)
    np.bitwise_and(qs, 15, out=q[..., 0, :])
    np.right_shift(qs, 4, out=q[..., 1, :])
    return q.reshape(shape)


def _table_nibbles(pairs: np.ndarray, qs: np.ndarray, out: np.ndarray) -> None:
    """The table values of bytes `qs` (n, groups, m) written into `out` (n, groups · 2m) as ggml lays them: per
    group the m low halves' values, then the m high halves'; `pairs` (256, 2) holds each byte's two values, so
    one gather reads both (a third faster than splitting the nibbles first)."""
    n, groups, m = qs.shape
    both = np.take(pairs, qs, axis=0)  # (n, groups, m, 2)
    out.reshape(n, groups, 2, m)[...] = both.transpose(0, 1, 3, 2)


def _half_scales(scales: np.ndarray, d: np.ndarray) -> np.ndarray:
    """(n, 16) float32: IQ2_XS's and IQ2_S's scale per 16 numbers, d·(0.5 + s)·0.25, s the low then the
    high four bits of each of the 8 scale bytes."""
    s = np.stack([scales & 15, scales >> 4], axis=2).reshape(len(scales), 16)
    return d * (np.float32(0.5) + s.astype(np.float32)) * np.float32(0.25)


# --------------------------------------------------------------------------- grids: IQ2, IQ3


def iq2_xxs(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ2_XXS: super-blocks of 256, 66 bytes: d (float16), then per 32 numbers two uint32: the first's
    four bytes index rows of iq2xxs_grid (8 numbers each), the second holds four 7-bit sign indices
    (bits 7l..7l+6, into ksigns_iq2xs) and a 4-bit scale s (bits 28-31); w = d·(0.5 + s)·0.25·(±grid)."""
    n = len(blocks)
    aux = blocks[:, 2:66].view(np.uint32).reshape(n, 8, 2)
    rows = GRID64["iq2xxs_grid"][blocks[:, 2:66].reshape(n, 8, 8)[:, :, :4]]  # (n, 8, 4)
    masks = KSIGN_MASK64[(aux[:, :, 1:2] >> np.array([0, 7, 14, 21], np.uint32)) & 127]
    _signed(rows, masks, out, n)
    _scaled(out, n, _f16(blocks, 0) * (np.float32(0.5) + (aux[:, :, 1] >> 28).astype(np.float32)) * np.float32(0.25))


def iq2_xs(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ2_XS: super-blocks of 256, 74 bytes: d (float16), 32 uint16 (per 8 numbers: a 9-bit row of
    iq2xs_grid, then a 7-bit sign index into ksigns_iq2xs), 8 scale bytes (a 4-bit s per 16 numbers,
    low half first); w = d·(0.5 + s)·0.25·(±grid)."""
    n = len(blocks)
    qs = blocks[:, 2:66].view(np.uint16)
    _signed(GRID64["iq2xs_grid"][qs & 511], KSIGN_MASK64[qs >> 9], out, n)
    _scaled(out, n, _half_scales(blocks[:, 66:74], _f16(blocks, 0)))


def iq2_s(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ2_S: super-blocks of 256, 82 bytes: d (float16), 32 bytes of row indices' low 8 bits, 32 sign
    bytes (bit j: number j of the 8 negative), 8 bytes of the indices' high 2 bits (bits 2l, 2l + 1 of
    byte k for group 4k + l), 8 scale bytes as IQ2_XS's; w = d·(0.5 + s)·0.25·(±iq2s_grid[row][j])."""
    n = len(blocks)
    high = (blocks[:, 66:74].reshape(n, 8, 1) >> np.array([0, 2, 4, 6], np.uint8)) & 3  # (n, 8, 4)
    index = blocks[:, 2:34].astype(np.uint16) | high.reshape(n, 32).astype(np.uint16) << 8
    _signed(GRID64["iq2s_grid"][index], SIGN_MASK64[blocks[:, 34:66]], out, n)
    _scaled(out, n, _half_scales(blocks[:, 74:82], _f16(blocks, 0)))


def iq3_xxs(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ3_XXS: super-blocks of 256, 98 bytes: d (float16), 64 bytes each indexing a row of iq3xxs_grid
    (4 numbers), then per 32 numbers a uint32 of four 7-bit sign indices (into ksigns_iq2xs, 8 numbers
    each) and a 4-bit scale s (bits 28-31); w = d·(0.5 + s)·0.5·(±grid)."""
    n = len(blocks)
    aux = blocks[:, 66:98].view(np.uint32)  # (n, 8)
    rows = GRID32["iq3xxs_grid"][blocks[:, 2:66]].view(np.uint64)  # (n, 32): two 4-number rows side by side
    masks = KSIGN_MASK64[(aux[:, :, None] >> np.array([0, 7, 14, 21], np.uint32)) & 127].reshape(n, 32)
    _signed(rows, masks, out, n)
    _scaled(out, n, _f16(blocks, 0) * (np.float32(0.5) + (aux >> 28).astype(np.float32)) * np.float32(0.5))


def iq3_s(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ3_S: super-blocks of 256, 110 bytes: d (float16), 64 bytes of row indices' low 8 bits, 8 bytes
    of their ninth bits (bit p of byte k for index 8k + p), 32 sign bytes (bit j: number j of 8
    negative), 4 scale bytes (a 4-bit s per 32 numbers, low half first); w = d·(1 + 2s)·(±iq3s_grid[row][j])."""
    n = len(blocks)
    ninth = np.unpackbits(blocks[:, 66:74], axis=1, bitorder="little").astype(np.uint16) << 8  # (n, 64)
    rows = GRID32["iq3s_grid"][blocks[:, 2:66] | ninth].view(np.uint64)  # (n, 32)
    _signed(rows, SIGN_MASK64[blocks[:, 74:106]], out, n)
    sc = blocks[:, 106:110]
    s = np.stack([sc & 15, sc >> 4], axis=2).reshape(n, 8)
    _scaled(out, n, _f16(blocks, 0) * (1 + 2 * s))


# --------------------------------------------------------------------------- grids: IQ1


def iq1_s(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ1_S: super-blocks of 256, 50 bytes: d (float16), 32 bytes of row indices' low 8 bits, then per
    32 numbers a uint16: 3 high bits for each of its 4 indices (bits 3l..3l+2), a 3-bit scale s (bits
    12-14) and the delta's sign (bit 15: −0.125, else +0.125); rows of iq1s_grid are 8 numbers of −1, 0
    or 1; w = d·(2s + 1)·(grid + delta)."""
    n = len(blocks)
    qh = blocks[:, 34:50].view(np.uint16)  # (n, 8)
    high = (qh[:, :, None] >> np.array([0, 3, 6, 9], np.uint16)) & 7 | (qh[:, :, None] >> 15) << 3  # (n, 8, 4)
    index = blocks[:, 2:34].astype(np.uint16) | high.reshape(n, 32) << 8  # bit 11: the negative delta's rows
    np.take(IQ1_ROWS, index, axis=0, out=_view(out, n, 32, 8), mode="clip")
    _scaled(out, n, _f16(blocks, 0) * (2 * ((qh >> 12) & 7) + 1))


def iq1_m(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ1_M: super-blocks of 256, 56 bytes: 32 bytes of row indices' low 8 bits, 16 bytes holding a
    4-bit field per 8 numbers (its low 3 bits the index's high bits, bit 3 the delta's sign), 8 bytes
    as four uint16 holding a 3-bit scale s per 16 numbers (bits 3k..3k+2) and, in their top four bits,
    the four parts of d (float16); w = d·(2s + 1)·(iq1s_grid[row][j] + delta)."""
    n = len(blocks)
    sc = blocks[:, 48:56].view(np.uint16)  # (n, 4)
    d_bits = (sc[:, 0] >> 12) | (sc[:, 1] >> 8) & 0x00F0 | (sc[:, 2] >> 4) & 0x0F00 | sc[:, 3] & 0xF000
    d = d_bits.view(np.float16).astype(np.float32)[:, None]
    fields = _nibbles(blocks[:, 32:48], (n, 2, 16)).transpose(0, 2, 1).reshape(n, 32)  # low, high of each byte
    np.take(IQ1_ROWS, blocks[:, :32].astype(np.uint16) | fields.astype(np.uint16) << 8, axis=0,
            out=_view(out, n, 32, 8), mode="clip")
    s = (sc[:, :, None] >> np.array([0, 3, 6, 9], np.uint16)) & 7  # (n, 4, 4): per 16 numbers
    _scaled(out, n, d * (2 * s.reshape(n, 16) + 1))


# --------------------------------------------------------------------------- 4-bit tables


def iq4_nl(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ4_NL: blocks of 32, 18 bytes: d (float16), 16 bytes whose low four bits index numbers 0-15
    and high four bits numbers 16-31 into kvalues_iq4nl (16 non-uniform levels, −127..113); w = d·kvalues[q]."""
    _table_nibbles(IQ4NL_PAIRS, blocks[:, None, 2:18], out)
    out *= _f16(blocks, 0)


def iq4_xs(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ4_XS: super-blocks of 256, 136 bytes: d (float16), a uint16 of 2-bit scale highs (bits 2k,
    2k + 1 for sub-block k), 4 bytes of 4-bit scale lows (low half first), 128 bytes: per 32 numbers 16
    bytes indexing kvalues_iq4nl, low halves first; ls the 6-bit scale, w = (d·(ls − 32))·kvalues[q]."""
    n = len(blocks)
    low = blocks[:, 4:8]
    high = (blocks[:, 2:4].view(np.uint16) >> np.arange(0, 16, 2, dtype=np.uint16)) & 3  # (n, 8)
    ls = np.stack([low & 15, low >> 4], axis=2).reshape(n, 8) | (high << 4).astype(np.uint8)
    _table_nibbles(IQ4NL_PAIRS, blocks[:, 8:136].reshape(n, 8, 16), out)
    _scaled(out, n, _f16(blocks, 0) * (ls.astype(np.float32) - np.float32(32)))


def mxfp4(blocks: np.ndarray, out: np.ndarray) -> None:
    """MXFP4: blocks of 32, 17 bytes: an E8M0 scale byte e (a power of two, 2^(e − 127)), 16 bytes whose
    low four bits are numbers 0-15 and high four bits numbers 16-31, each an E2M1 float (sign, 2-bit
    exponent, 1-bit mantissa: 0, ±0.5 … ±6) read from kvalues_fp4, which holds them doubled;
    w = 2^(e − 128)·kvalues_fp4[q] (= 2^(e − 127)·E2M1)."""
    _table_nibbles(FP4_PAIRS, blocks[:, None, 1:17], out)
    out *= E8M0_HALF[blocks[:, 0:1]]


def nvfp4(blocks: np.ndarray, out: np.ndarray) -> None:
    """NVFP4: blocks of 64, 36 bytes: 4 UE4M3 scale bytes (unsigned 8-bit floats, one per 16 numbers),
    32 bytes: per 16 numbers 8 bytes whose low four bits are numbers 0-7 and high four bits 8-15, each
    an E2M1 float read doubled from kvalues_fp4; w = (UE4M3 · 0.5)·kvalues_fp4[q]."""
    n = len(blocks)
    _table_nibbles(FP4_PAIRS, blocks[:, 4:36].reshape(n, 4, 8), out)
    _scaled(out, n, UE4M3_HALF[blocks[:, :4]])


# --------------------------------------------------------------------------- ternary


def tq1_0(blocks: np.ndarray, out: np.ndarray) -> None:
    """TQ1_0: super-blocks of 256, 54 bytes: 48 bytes of five base-3 digits each, 4 bytes of four, then
    d (float16). Digit k of byte b is ((b·3^k mod 256)·3) >> 8 (0, 1 or 2; the bytes hold the digits as
    a fraction of 243), that is 1 from 86 on and 2 from 171 on; numbers 32k + m come from bytes m < 32,
    160 + 16k + m from bytes 32 + m, and 240 + 4k + m from byte 48 + m; w = d·(digit − 1)."""
    n = len(blocks)
    q = np.empty((n, 256), np.uint8)  # b·3^k mod 256, in the numbers' order (uint8 products wrap)
    np.multiply(blocks[:, None, :32], _POW3[:, None], out=_view(q[:, :160], n, 5, 32))
    np.multiply(blocks[:, None, 32:48], _POW3[:, None], out=_view(q[:, 160:240], n, 5, 16))
    np.multiply(blocks[:, None, 48:52], _POW3[:4, None], out=_view(q[:, 240:], n, 4, 4))
    digit = (q >= 86).view(np.int8) + (q >= 171).view(np.int8)
    digit -= 1
    out[...] = digit
    out *= _f16(blocks, 52)


def tq2_0(blocks: np.ndarray, out: np.ndarray) -> None:
    """TQ2_0: super-blocks of 256, 66 bytes: 64 bytes of four 2-bit digits, then d (float16). Number
    128·h + 32·k + m is bits 2k..2k+1 of byte 32·h + m; w = d·(digit − 1) (a digit 3, which ggml's
    quantizer never writes, reads as 2)."""
    n = len(blocks)
    q = blocks[:, :64].reshape(n, 2, 1, 32) >> _SHIFT2
    q &= 3
    q -= 1  # in uint8 arithmetic, read back as int8: −1..2
    out[...] = q.view(np.int8).reshape(n, 256)
    out *= _f16(blocks, 64)


def bad_scales(type_name: str, blocks: np.ndarray) -> int | None:
    """The first block of `blocks` whose scale cannot be read (an MXFP4 E8M0 byte of 255: NaN), or None."""
    if type_name != "MXFP4":
        return None
    bad = np.flatnonzero(blocks[:, 0] == 255)
    return int(bad[0]) if bad.size else None
