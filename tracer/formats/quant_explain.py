"""One number of a GGUF tensor explained: its way from its block's bytes to the float32 `quants.dequantize`
gives, step by step (`explain`), for every type tracer reads.

Gives which bytes and bits each part came from, the scales and integers read there, the formula
in words and the float, computed by the same float32 operations in the same order as the
de-quantization, so that "value" is the very number tracer uses. The types whose integers index
a table (the i-quants, IQ4_NL/IQ4_XS, TQ1_0/TQ2_0, MXFP4, NVFP4) are explained in `lookup_explain`;
the plain floats, the 32-number blocks and the K-quants here. The walkthrough, the demo and the page
word these dicts (`tracer.render.storage`). Core module: numpy and the standard library only.
"""

from __future__ import annotations

import numpy as np

from ..errors import TracerError
from .lookup_explain import LOOKUP_EXPLAIN
from .quants import TYPES


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
            "Q4_K": _x_q4_5, "Q5_K": _x_q4_5, "Q6_K": _x_q6, **LOOKUP_EXPLAIN}


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
