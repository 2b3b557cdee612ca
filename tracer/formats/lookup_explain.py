"""One number of a lookup type explained, from its block's bytes to its float: the i-quants, IQ4_NL/IQ4_XS,
TQ1_0/TQ2_0, MXFP4 and NVFP4 (`lookup_quants` de-quantizes them; `quant_explain.explain` calls these).

Each function gives, beside the scale "d", the integer "q", the "value", the "formula" and "where"
(which bytes and bits), the "steps" of the number's way as data: a list of [step, {slots}], each step
one of

    scale      a float16 scale read as it is          {name, value}
    sub_scale  a sub-block's scale from its bits      {sub_block, bits, name, s, formula, value}
    e8m0       MXFP4's power-of-two scale byte        {e, power, scale, half}
    ue4m3      NVFP4's 8-bit float scale byte         {sub_block, e, scale, half}
    lookup     an index into a table of numbers       {bits, q, table, size, kind, entry}
    e2m1       a 4-bit float read through its table   {q, e2m1, table, entry}
    grid       an index into a table of rows          {bits, row, grid, size, width, values, column, entry}
    ksigns     7 stored sign bits and their parity    {index, byte, column, bit, signed}
    signs      a byte of 8 sign bits                  {byte, column, bit, signed}
    delta      IQ1's ±0.125 shift of a row            {bit, at, delta}
    trit       a base-3 digit of a byte (TQ1_0)       {byte, stored, place, digit}
    bits2      a 2-bit digit of a byte (TQ2_0)        {byte, stored, low, high, digit}
    result     the product                            {formula, factors, value}

which `tracer.render.storage` words for the terminal, the demo and the page. "value" is computed by
the float32 operations `lookup_quants` runs, in the same order: the very number tracer uses.
Core module: numpy and the standard library only.
"""

from __future__ import annotations

import numpy as np

from .lookup_quants import E8M0_HALF, UE4M3_HALF
from .quant_tables import (IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
                           KVALUES_FP4, KVALUES_IQ4NL)

GRIDS = {"iq2xxs_grid": IQ2XXS_GRID, "iq2xs_grid": IQ2XS_GRID, "iq2s_grid": IQ2S_GRID, "iq3xxs_grid": IQ3XXS_GRID,
         "iq3s_grid": IQ3S_GRID, "iq1s_grid": IQ1S_GRID}


def _half(b: np.ndarray, at: int) -> np.float32:
    return b[at:at + 2].view(np.float16)[0].astype(np.float32)


def _u(b: np.ndarray, at: int, size: int) -> int:
    return int.from_bytes(b[at:at + size].tobytes(), "little")


def _nibble(b: np.ndarray, at: int, high: bool) -> tuple[int, str]:
    """The four bits of byte `at` (its high half or its low one) and where they are, in words."""
    byte = int(b[at])
    return (byte >> 4 if high else byte & 15), f"byte {at}, {'high' if high else 'low'} four bits"


def _done(out: dict, d, formula: str, factors: tuple, steps: list) -> dict:
    """The explanation: `out` with the scale d first, the formula, the value (the float32 product of
    the two `factors`, as the de-quantization makes it) and the steps, the product last."""
    value = np.float32(factors[0]) * np.float32(factors[1])
    result = ["result", {"formula": formula, "factors": [_plain(f) for f in factors], "value": float(value)}]
    return {**({} if d is None else {"d": d}), **out, "formula": formula, "value": value, "steps": steps + [result]}


def _plain(v):
    return float(v) if isinstance(v, (float, np.floating)) else int(v)


def _lookup(bits: int, q: int, table: str, kind: str, entry: int) -> list:
    return ["lookup", {"bits": bits, "q": q, "table": table, "size": 16, "kind": kind, "entry": entry}]


# --------------------------------------------------------------------------- 4-bit tables


def _x_iq4(b: np.ndarray, i: int, name: str) -> dict:
    d = _half(b, 0)
    if name == "IQ4_NL":
        q, where = _nibble(b, 2 + i % 16, i >= 16)
        k = int(KVALUES_IQ4NL[q])
        return _done({"q": q, "entry": k, "where": {"d": "bytes 0-1 (float16)", "q": where}}, d, "d·kvalues_iq4nl[q]",
                     (d, k), [["scale", {"name": "d", "value": float(d)}],
                                         _lookup(4, q, "kvalues_iq4nl", "non-uniform", k)])
    sub, j = i // 32, i % 32
    low, high = (int(b[4 + sub // 2]) >> 4 * (sub % 2)) & 15, (_u(b, 2, 2) >> 2 * sub) & 3
    ls = low | high << 4
    scale = d * np.float32(ls - 32)
    q, where = _nibble(b, 8 + 16 * sub + j % 16, j >= 16)
    k = int(KVALUES_IQ4NL[q])
    out = {"sub_block": sub, "ls": ls, "sc": ls - 32, "scale": scale, "q": q, "entry": k,
           "where": {"d": "bytes 0-1 (float16)", "ls": f"byte {4 + sub // 2}, {'high' if sub % 2 else 'low'} four "
                                                        f"bits; two high bits: bytes 2-3, bits {2 * sub}-{2 * sub + 1}",
                     "q": where}}
    return _done(out, d, "(d·(ls − 32))·kvalues_iq4nl[q]", (scale, k), [
        ["scale", {"name": "d", "value": float(d)}],
        ["sub_scale", {"sub_block": sub, "bits": 6, "name": "ls", "s": ls, "formula": "d·(ls − 32)", "value": float(scale)}],
        _lookup(4, q, "kvalues_iq4nl", "non-uniform", k)])


def _x_fp4(b: np.ndarray, i: int, name: str) -> dict:
    if name == "MXFP4":
        e, sub = int(b[0]), None
        q, where = _nibble(b, 1 + i % 16, i >= 16)
        scale = E8M0_HALF[e]
        first = ["e8m0", {"e": e, "power": e - 127, "scale": float(2.0 ** (e - 127)), "half": float(scale)}]
        at = "byte 0 (E8M0: 2^(e − 127))"
    else:
        sub, j = i // 16, i % 16
        e = int(b[sub])
        q, where = _nibble(b, 4 + 8 * sub + j % 8, j >= 8)
        scale = UE4M3_HALF[e]
        first = ["ue4m3", {"sub_block": sub, "e": e, "scale": float(scale) * 2, "half": float(scale)}]
        at = f"byte {sub} (UE4M3: 4-bit exponent, 3-bit mantissa)"
    k = int(KVALUES_FP4[q])
    out = {"e": e, "scale": scale, "q": q, "e2m1": k / 2, "entry": k, "where": {"e": at, "q": where}}
    if sub is not None:
        out["sub_block"] = sub
    formula = "2^(e − 128)·kvalues_fp4[q]" if name == "MXFP4" else "(UE4M3·0.5)·kvalues_fp4[q]"
    return _done(out, None, formula, (scale, k), [first, ["e2m1", {"q": q, "e2m1": k / 2, "table": "kvalues_fp4",
                                                                   "entry": k}]])


# --------------------------------------------------------------------------- ternary


def _x_tq(b: np.ndarray, i: int, name: str) -> dict:
    if name == "TQ1_0":
        d = _half(b, 52)
        if i < 160:
            place, at = divmod(i, 32)
        elif i < 240:
            place, at = divmod(i - 160, 16)
            at += 32
        else:
            place, at = divmod(i - 240, 4)
            at += 48
        digit = (int(b[at]) * 3**place % 256 * 3) >> 8
        where = f"byte {at}, base-3 digit {place} (((byte·3^{place}) mod 256)·3 >> 8)"
        trit = ["trit", {"byte": at, "stored": int(b[at]), "place": place, "digit": digit}]
        d_at = "bytes 52-53 (float16)"
    else:
        d = _half(b, 64)
        h, k, m = i // 128, i % 128 // 32, i % 32
        at = 32 * h + m
        digit = (int(b[at]) >> 2 * k) & 3
        where = f"byte {at}, bits {2 * k}-{2 * k + 1}"
        trit = ["bits2", {"byte": at, "stored": int(b[at]), "low": 2 * k, "high": 2 * k + 1, "digit": digit}]
        d_at = "bytes 64-65 (float16)"
    return _done({"digit": digit, "q": digit - 1, "where": {"d": d_at, "digit": where}}, d, "d·(digit − 1)",
                 (d, digit - 1), [["scale", {"name": "d", "value": float(d)}], trit])


# --------------------------------------------------------------------------- grids


def _grid_step(bits: int, row: int, grid: str, column: int) -> tuple[int, list]:
    table = GRIDS[grid]
    entry = int(table[row, column])
    return entry, ["grid", {"bits": bits, "row": row, "grid": grid, "size": len(table), "width": table.shape[1],
                            "values": [int(v) for v in table[row]], "column": column, "entry": entry}]


def _sign_steps(sign_index: int | None, byte: int, column: int, entry: int) -> tuple[int, list]:
    """The sign of grid number `column`: bit `column` of `byte` (ksigns_iq2xs[sign_index] when the block
    stores 7-bit sign indices)."""
    bit = (byte >> column) & 1
    signed = -entry if bit else entry
    if sign_index is None:
        return signed, ["signs", {"byte": byte, "column": column, "bit": bit, "signed": signed}]
    return signed, ["ksigns", {"index": sign_index, "byte": byte, "column": column, "bit": bit, "signed": signed}]


def _grid_row(b: np.ndarray, i: int, name: str) -> tuple[str, int, int, str]:
    """(grid, bits of its index, row, where) of the grid row number `i` of an IQ2/IQ3 block is read from."""
    sub, g = i // 32, i // 8
    if name == "IQ2_XXS":
        at = 2 + 8 * sub + i % 32 // 8
        return "iq2xxs_grid", 8, int(b[at]), f"byte {at}"
    if name == "IQ2_XS":
        at = 2 + 2 * g
        return "iq2xs_grid", 9, _u(b, at, 2) & 511, f"bytes {at}-{at + 1}, bits 0-8"
    if name == "IQ2_S":
        high = 2 * (g % 4)
        return ("iq2s_grid", 10, int(b[2 + g]) | ((int(b[66 + sub]) >> high) & 3) << 8,
                f"byte {2 + g}; two high bits: byte {66 + sub}, bits {high}-{high + 1}")
    if name == "IQ3_XXS":
        return "iq3xxs_grid", 8, int(b[2 + i // 4]), f"byte {2 + i // 4}"
    p = i % 32 // 4  # IQ3_S
    return ("iq3s_grid", 9, int(b[2 + i // 4]) | ((int(b[66 + sub]) >> p) & 1) << 8,
            f"byte {2 + i // 4}; ninth bit: byte {66 + sub}, bit {p}")


def _aux_at(i: int, name: str) -> int:
    """Where IQ2_XXS's and IQ3_XXS's uint32 of sign indices and scale for number `i` is."""
    return 2 + 8 * (i // 32) + 4 if name == "IQ2_XXS" else 66 + 4 * (i // 32)


def _grid_signs(b: np.ndarray, i: int, name: str) -> tuple[int | None, int, str]:
    """(the 7-bit sign index, or None where the block stores the 8 bits; the byte of 8 sign bits; where)."""
    if name in ("IQ2_XXS", "IQ3_XXS"):
        at, shift = _aux_at(i, name), 7 * (i % 32 // 8)
        index = (_u(b, at, 4) >> shift) & 127
        return index, int(KSIGNS_IQ2XS[index]), f"bytes {at}-{at + 3}, bits {shift}-{shift + 6} (into ksigns_iq2xs)"
    if name == "IQ2_XS":
        at = 2 + 2 * (i // 8)
        index = _u(b, at, 2) >> 9
        return index, int(KSIGNS_IQ2XS[index]), f"bytes {at}-{at + 1}, bits 9-15 (into ksigns_iq2xs)"
    at = (34 if name == "IQ2_S" else 74) + i // 8
    return None, int(b[at]), f"byte {at}, bit {i % 8}"


def _grid_scale(b: np.ndarray, i: int, name: str) -> tuple[int, int, str]:
    """(the sub-block, its 4-bit scale s, where): per 32 numbers, or per 16 in IQ2_XS and IQ2_S."""
    if name in ("IQ2_XXS", "IQ3_XXS"):
        at = _aux_at(i, name)
        return i // 32, _u(b, at, 4) >> 28, f"bytes {at}-{at + 3}, bits 28-31"
    sub, at = (i // 32, 106 + i // 64) if name == "IQ3_S" else (i // 16, (66 if name == "IQ2_XS" else 74) + i // 32)
    return sub, (int(b[at]) >> 4 * (sub % 2)) & 15, f"byte {at}, {'high' if sub % 2 else 'low'} four bits"


def _x_iq2_3(b: np.ndarray, i: int, name: str) -> dict:
    """IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S: a scaled, signed number of a grid row."""
    d = _half(b, 0)
    grid, bits, row, row_where = _grid_row(b, i, name)
    sign_index, sign_byte, sign_where = _grid_signs(b, i, name)
    group, s, s_where = _grid_scale(b, i, name)
    column = i % GRIDS[grid].shape[1]
    entry, grid_step = _grid_step(bits, row, grid, column)
    signed, sign_step = _sign_steps(sign_index, sign_byte, i % 8, entry)
    if name == "IQ3_S":
        scale, scale_formula = d * np.float32(1 + 2 * s), "d·(1 + 2s)"
    else:
        half = np.float32(0.5) if name == "IQ3_XXS" else np.float32(0.25)
        scale, scale_formula = d * (np.float32(0.5) + np.float32(s)) * half, f"d·(0.5 + s)·{float(half)}"
    out = {"sub_block": group, "s": s, "scale": scale, "q": row, "row": row, "column": column, "entry": entry,
           "sign": -1 if signed < 0 else 1,
           "where": {"d": "bytes 0-1 (float16)", "s": s_where, "row": row_where, "sign": sign_where}}
    return _done(out, d, f"({scale_formula})·(±{grid}[row][column])", (scale, signed), [
        ["scale", {"name": "d", "value": float(d)}],
        ["sub_scale", {"sub_block": group, "bits": 4, "name": "s", "s": s, "formula": scale_formula,
                       "value": float(scale)}], grid_step, sign_step])


def _x_iq1(b: np.ndarray, i: int, name: str) -> dict:
    """IQ1_S and IQ1_M: a grid row of −1, 0 and 1, shifted by ±0.125, scaled."""
    g, column = i // 8, i % 8
    if name == "IQ1_S":
        d, qh_at = _half(b, 0), 34 + 2 * (i // 32)
        qh = _u(b, qh_at, 2)
        row = int(b[2 + g]) | ((qh >> 3 * (g % 4)) & 7) << 8
        negative, s, group = qh >> 15, (qh >> 12) & 7, i // 32
        where = {"d": "bytes 0-1 (float16)", "row": f"byte {2 + g}; three high bits: bytes {qh_at}-{qh_at + 1}, bits "
                                                    f"{3 * (g % 4)}-{3 * (g % 4) + 2}",
                 "s": f"bytes {qh_at}-{qh_at + 1}, bits 12-14", "delta": f"bytes {qh_at}-{qh_at + 1}, bit 15"}
        delta_bit, delta_at = 15, f"bytes {qh_at}-{qh_at + 1}"
    else:
        sc = [_u(b, 48 + 2 * k, 2) for k in range(4)]
        d_bits = (sc[0] >> 12) | (sc[1] >> 8) & 0x00F0 | (sc[2] >> 4) & 0x0F00 | sc[3] & 0xF000
        d = np.array([d_bits], np.uint16).view(np.float16)[0].astype(np.float32)
        nib = (int(b[32 + g // 2]) >> 4 * (g % 2)) & 15
        row, negative, group = int(b[g]) | (nib & 7) << 8, nib >> 3, i // 16
        s = (sc[group // 4] >> 3 * (group % 4)) & 7
        where = {"d": "bytes 48-55: the top four bits of each of the four uint16 (float16)",
                 "row": f"byte {g}; three high bits: byte {32 + g // 2}, bits {4 * (g % 2)}-{4 * (g % 2) + 2}",
                 "s": f"bytes {48 + 2 * (group // 4)}-{49 + 2 * (group // 4)}, bits {3 * (group % 4)}-{3 * (group % 4) + 2}",
                 "delta": f"byte {32 + g // 2}, bit {4 * (g % 2) + 3}"}
        delta_bit, delta_at = 4 * (g % 2) + 3, f"byte {32 + g // 2}"
    delta = np.float32(-0.125) if negative else np.float32(0.125)
    scale = d * np.float32(2 * s + 1)
    entry, grid_step = _grid_step(11, row, "iq1s_grid", column)
    out = {"sub_block": group, "s": s, "scale": scale, "q": row, "row": row, "column": column, "entry": entry,
           "delta": delta, "where": where}
    return _done(out, d, "(d·(2s + 1))·(iq1s_grid[row][column] + delta)", (scale, np.float32(entry) + delta), [
        ["scale", {"name": "d", "value": float(d)}],
        ["sub_scale", {"sub_block": group, "bits": 3, "name": "s", "s": s, "formula": "d·(2s + 1)", "value": float(scale)}],
        grid_step, ["delta", {"bit": delta_bit, "at": delta_at, "delta": float(delta)}]])


LOOKUP_EXPLAIN = {"IQ4_NL": _x_iq4, "IQ4_XS": _x_iq4, "MXFP4": _x_fp4, "NVFP4": _x_fp4, "TQ1_0": _x_tq, "TQ2_0": _x_tq,
                  "IQ2_XXS": _x_iq2_3, "IQ2_XS": _x_iq2_3, "IQ2_S": _x_iq2_3, "IQ3_XXS": _x_iq2_3, "IQ3_S": _x_iq2_3,
                  "IQ1_S": _x_iq1, "IQ1_M": _x_iq1}
