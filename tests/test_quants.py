"""The lookup types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS, TQ1_0,
TQ2_0, MXFP4, NVFP4) against the gguf package (llama.cpp's gguf-py): the tables equal its own copies, and
every block de-quantizes to its float32 bits exactly — random blocks, blocks made to reach every grid
row, sign pattern, scale field and table entry, the E8M0 and UE4M3 scale bytes from end to end, float16
scales at their extremes, and the blocks its own `quantize` writes. One number explained agrees with
the de-quantization, and a scale that is no number is refused, naming the file and the tensor.
"""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="gguf (llama.cpp's gguf-py) is the reference; pip install 'gguf>=0.19'")

from tracer.errors import TracerError  # noqa: E402
from tracer.formats import lookup_quants, quant_explain, quant_tables, quants  # noqa: E402
from tracer.formats.gguf_file import open_gguf  # noqa: E402
from tracer.formats.stored import Quantized  # noqa: E402

from .quant_blocks import GGUF_QUANTIZES, SCALES_AT, random_blocks  # noqa: E402

Q = gguf.GGMLQuantizationType
NEW = ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0",
       "MXFP4", "NVFP4"]


def ours(blocks: np.ndarray, type_name: str) -> np.ndarray:
    """(n, numbers per block) float32 by tracer, from (n, bytes per block) uint8."""
    kind = quants.TYPES[type_name]
    return quants.dequantize(blocks.reshape(-1), type_name, len(blocks) * kind.block).reshape(len(blocks), -1)


def theirs(blocks: np.ndarray, type_name: str) -> np.ndarray:
    return gguf.quants.dequantize(blocks, Q[type_name]).reshape(len(blocks), -1)


def assert_same_bits(blocks: np.ndarray, type_name: str) -> np.ndarray:
    """tracer's float32 equal gguf's bit for bit (signed zeros told apart; NaN where NaN), and returned."""
    with np.errstate(all="ignore"):
        got, want = ours(blocks, type_name), theirs(blocks, type_name)
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), type_name
    assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan]), type_name
    return got


def test_every_type_gguf_dequantizes_is_read_and_no_other():
    readable = {t.name for t in Q if t.name in {"F32", "F16"} or t in gguf.quants._type_traits}
    assert set(quants.TYPES) == readable, readable ^ set(quants.TYPES)
    assert set(NEW) <= set(quants.TYPES) and "Q1_0" not in quants.TYPES


@pytest.mark.parametrize("cls, mine", [("IQ2_XXS", "IQ2XXS_GRID"), ("IQ2_XS", "IQ2XS_GRID"), ("IQ2_S", "IQ2S_GRID"),
                                       ("IQ3_XXS", "IQ3XXS_GRID"), ("IQ3_S", "IQ3S_GRID"), ("IQ1_S", "IQ1S_GRID")])
def test_the_grids_are_ggmls_as_gguf_copies_them(cls, mine):
    ref = getattr(gguf.quants, cls)
    ref.init_grid()
    table = getattr(quant_tables, mine)
    assert table.shape == ref.grid_shape and table.dtype == (np.int8 if cls == "IQ1_S" else np.uint8)
    np.testing.assert_array_equal(table.astype(np.float32), ref.grid.reshape(ref.grid_shape))


def test_the_small_tables_are_ggmls():
    np.testing.assert_array_equal(quant_tables.KSIGNS_IQ2XS, np.frombuffer(gguf.quants.IQ2_XXS.ksigns, np.uint8))
    assert quant_tables.KVALUES_IQ4NL.tolist() == list(gguf.quants.IQ4_NL.kvalues)
    assert quant_tables.KVALUES_FP4.tolist() == list(gguf.quants.MXFP4.kvalues) == list(gguf.quants.NVFP4.kvalues)
    e = np.arange(255, dtype=np.uint8)
    np.testing.assert_array_equal(lookup_quants.E8M0_HALF[:255], gguf.quants.MXFP4.e8m0_to_fp32_half(e))
    np.testing.assert_array_equal(lookup_quants.UE4M3_HALF, gguf.quants.NVFP4.ue4m3_to_fp32(np.arange(256, dtype=np.uint8)))


@pytest.mark.parametrize("type_name", NEW)
@pytest.mark.parametrize("seed", [0, 1])
def test_random_blocks_are_gguf_bit_for_bit(type_name, seed):
    assert_same_bits(random_blocks(type_name, 3000, seed), type_name)


@pytest.mark.parametrize("type_name", NEW)
def test_a_tensor_of_many_chunks_is_the_same_as_block_by_block(type_name, monkeypatch):
    blocks = random_blocks(type_name, 700, 5)
    whole = ours(blocks, type_name)
    monkeypatch.setattr(quants, "CHUNK_NUMBERS", 3 * quants.TYPES[type_name].block + 1)  # chunks of 3 blocks
    np.testing.assert_array_equal(ours(blocks, type_name), whole)
    np.testing.assert_array_equal(ours(blocks[7:8], type_name), whole[7:8])


@pytest.mark.parametrize("type_name", sorted(quants.TYPES))
def test_a_tensor_cut_among_threads_is_gguf_bit_for_bit(type_name, monkeypatch):
    """A tensor past PARALLEL_NUMBERS is cut into parts run by several threads: the parts' edges, some inside
    a chunk, must give the numbers gguf-py gives, and the same with one thread."""
    kind = quants.TYPES[type_name]
    blocks = random_blocks(type_name, 701, 9)
    monkeypatch.setattr(quants, "PARALLEL_NUMBERS", kind.block)  # any tensor is cut
    monkeypatch.setattr(quants, "CHUNK_NUMBERS", 5 * kind.block)  # chunks of 5 blocks: parts of 233–234 blocks
    monkeypatch.setattr(quants, "workers", lambda: 3)
    assert_same_bits(blocks, type_name)
    monkeypatch.setattr(quants, "workers", lambda: 1)
    assert_same_bits(blocks, type_name)


def test_threads_follow_blas_setting(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert quants.workers() == 1
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "64")
    assert quants.workers() == quants.MAX_WORKERS
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert quants.workers() == min(2, quants.MAX_WORKERS)


def covering(type_name: str, seed: int = 3) -> np.ndarray:
    """Blocks whose grid rows, sign fields, scale fields and table indices take every value: random
    blocks with the index fields set, block after block, to every row of the grid (high bits included)."""
    n = {"IQ1_S": 1024, "IQ1_M": 1024, "IQ2_S": 256, "IQ2_XS": 2048}.get(type_name, 64)
    raw = random_blocks(type_name, n, seed)
    k = np.arange(n * 32).reshape(n, 32)  # one value per group of 8 numbers (per 4 for IQ3's two rows each)
    if type_name == "IQ2_XXS":  # per 32 numbers: 4 row bytes, then a uint32 of signs and scale
        raw[:, 2:66].reshape(n, 8, 8)[:, :, :4] = (k % 256).reshape(n, 8, 4)
    elif type_name == "IQ2_XS":  # a uint16 per 8 numbers: 9 bits of row, 7 of sign index: every one of 65,536
        raw[:, 2:66] = (k % 65536).astype("<u2").view(np.uint8)
    elif type_name == "IQ2_S":  # 8 low bits per 8 numbers, 2 high bits in byte 66 + k // 4; signs: every byte
        raw[:, 2:34] = k % 256
        raw[:, 34:66] = (k + 11) % 256
        high = (k // 256) % 4
        raw[:, 66:74] = (high.reshape(n, 8, 4) << np.array([0, 2, 4, 6])).sum(axis=2)
    elif type_name in ("IQ3_XXS", "IQ3_S"):  # 64 row bytes (one per 4 numbers)
        rows = np.arange(n * 64).reshape(n, 64)
        raw[:, 2:66] = rows % 256
        if type_name == "IQ3_S":  # the ninth bits: rows 0-255, then 256-511; every sign byte
            raw[:, 66:74] = np.where((rows // 256) % 2 == 1, 255, 0).reshape(n, 8, 8)[:, :, 0]
            raw[:, 74:106] = (k + 5) % 256
    elif type_name in ("IQ1_S", "IQ1_M"):  # 11-bit rows and the delta's sign: 4,096 combinations
        row, negative = k % 2048, (k // 2048) % 2
        raw[:, (2 if type_name == "IQ1_S" else 0):][:, :32] = row % 256
        if type_name == "IQ1_S":
            qh = raw[:, 34:50].copy().view("<u2")  # per 32 numbers: 3 high bits per row, scale, delta sign
            high = (row // 256).reshape(n, 8, 4)
            qh[:] = (qh & 0x7000) | (high << np.array([0, 3, 6, 9])).sum(axis=2) | (negative.reshape(n, 8, 4)[:, :, 0] << 15)
            raw[:, 34:50] = qh.view(np.uint8)
        else:
            nib = (row // 256) | negative << 3
            raw[:, 32:48] = nib[:, 0::2] | nib[:, 1::2] << 4
    elif type_name == "TQ1_0":
        raw[:, :52] = np.arange(n * 52).reshape(n, 52) % 256
    elif type_name == "TQ2_0":
        raw[:, :64] = np.arange(n * 64).reshape(n, 64) % 256
    return raw


@pytest.mark.parametrize("type_name", NEW)
def test_every_grid_row_sign_and_field(type_name):
    assert_same_bits(covering(type_name), type_name)


def test_every_e8m0_scale_and_e2m1_code():
    """MXFP4 blocks with e = 0 … 254 (2^-128, a float32 subnormal, to 2^126) and every 4-bit code in
    both halves of a byte; 12·2^126 overflows to ∞ in float32, in gguf too."""
    raw = np.zeros((255, 17), np.uint8)
    raw[:, 0] = np.arange(255)
    raw[:, 1:17] = np.arange(16) | (15 - np.arange(16)) << 4
    got = assert_same_bits(raw, "MXFP4")
    assert got[0, 1] == 2.0**-128 and got[127, 7] == 12 * 2.0**-1 and got[127, 16] == -12 * 2.0**-1
    assert np.isinf(got[254]).any() and not np.isnan(got).any()


def test_every_ue4m3_scale_byte():
    """NVFP4 scale bytes 0 … 255: 0x7f (NaN in E4M3) and 0 read as 0; bit 7 is ignored, as in ggml."""
    raw = np.zeros((64, 36), np.uint8)
    raw[:, :4] = np.arange(256).reshape(64, 4)
    raw[:, 4:] = np.arange(32) % 16 | (np.arange(32) % 16) << 4
    got = assert_same_bits(raw, "NVFP4")
    assert (got[31, 48:64] == 0).all()  # byte 0x7f: sub-block 3 of block 31


@pytest.mark.parametrize("type_name", ["IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ3_S", "IQ1_S", "TQ1_0", "TQ2_0"])
@pytest.mark.parametrize("d", [0.0, -0.0, 2.0**-24, 65504.0, -65504.0, np.inf, -np.inf, np.nan])
def test_float16_scales_at_their_extremes(type_name, d):
    """The least subnormal, the largest float16, signed zeros, ∞ and NaN: the same floats as gguf's
    (∞·0 is NaN in both); tracer refuses such a tensor when it is read as a model (Stored.check)."""
    raw = random_blocks(type_name, 16, 9)
    for at in SCALES_AT[type_name]:
        raw[:, at:at + 2] = np.float16(d).reshape(1, 1).view(np.uint8)
    assert_same_bits(raw, type_name)


@pytest.mark.parametrize("type_name", NEW)
@pytest.mark.parametrize("byte", [0x00, 0xFF, 0x7F, 0x80])
def test_no_byte_reads_outside_a_table(type_name, byte):
    """Every index is a bit field exactly as wide as its table (8 bits for 256 rows, 11 for 2,048, 4 for
    16 levels), so any bytes read as gguf reads them: blocks of one repeated byte, scales included (NaN
    and ∞ where the scale is; a TQ2_0 digit 3, which ggml's quantizer never writes, reads as 2, and a
    TQ1_0 byte of 243 or more as ggml reads it). MXFP4's all-0xff block has the E8M0 scale 255: refused."""
    raw = np.full((8, quants.TYPES[type_name].nbytes), byte, np.uint8)
    if type_name == "MXFP4" and byte == 0xFF:
        with pytest.raises(TracerError, match=r"tensor '\?': block 0 of MXFP4 has the E8M0 scale 255"):
            ours(raw, type_name)
        raw[:, 0] = 254
    assert_same_bits(raw, type_name)


@pytest.mark.parametrize("type_name", sorted(GGUF_QUANTIZES & set(NEW)))
def test_the_blocks_ggufs_quantize_writes(type_name):
    rng = np.random.default_rng(4)
    floats = np.concatenate([rng.normal(0, 0.02, (6, 512)), rng.standard_cauchy((2, 512)) * 1e-3,
                             np.zeros((1, 512))]).astype(np.float32)
    stored = gguf.quants.quantize(floats, Q[type_name])
    got = assert_same_bits(stored.reshape(-1, quants.TYPES[type_name].nbytes), type_name)
    assert np.abs(got.reshape(floats.shape)[:6] - floats[:6]).max() < 0.1  # and it is the matrix, roughly


# --------------------------------------------------------------------------- one number explained


@pytest.mark.parametrize("type_name", NEW)
def test_explain_gives_the_number_dequantize_gives_and_its_steps(type_name):
    blocks = covering(type_name)
    full = ours(blocks, type_name)
    rng = np.random.default_rng(2)
    kind = quants.TYPES[type_name]
    for b in rng.choice(len(blocks), 6, replace=False):
        for i in [0, kind.block - 1, *rng.choice(kind.block, 10, replace=False)]:
            e = quant_explain.explain(type_name, blocks[b].tobytes(), int(i))
            assert e["value"] == float(full[b, i]) or (np.isnan(e["value"]) and np.isnan(full[b, i])), (b, i, e)
            steps = dict((k, v) for k, v in e["steps"])
            result = e["steps"][-1][1]
            assert e["steps"][-1][0] == "result" and result["formula"] == e["formula"]
            assert result["value"] == e["value"] or np.isnan(e["value"])
            assert np.float32(result["factors"][0]) * np.float32(result["factors"][1]) == np.float32(e["value"]) or \
                np.isnan(e["value"])
            assert e["where"] and isinstance(e["formula"], str)
            if "grid" in steps:
                g = steps["grid"]
                table = getattr(quant_tables, g["grid"].replace("_grid", "").upper() + "_GRID")
                assert g["values"] == table[g["row"]].tolist() and g["entry"] == g["values"][g["column"]]
            if "ksigns" in steps:
                assert steps["ksigns"]["byte"] == int(quant_tables.KSIGNS_IQ2XS[steps["ksigns"]["index"]])


def test_explain_iq4_nl_as_the_issue_words_it():
    """"IQ4_NL: blocks of 32; d = 0.0213 in float16; the 4-bit index 11 selects kvalues_iq4nl[11] = 38
    from the 16-entry non-uniform table; w = d·38 = 0.8094" — the numbers, from hand-made bytes."""
    block = np.zeros(18, np.uint8)
    block[:2] = np.float16(0.0213).reshape(1).view(np.uint8)
    block[2 + 5] = 0x0B  # number 5: the low four bits of byte 7
    e = quant_explain.explain("IQ4_NL", block.tobytes(), 5)
    d = float(np.float16(0.0213))
    assert (e["d"], e["q"], e["entry"]) == (d, 11, 38) and e["value"] == float(np.float32(d) * np.float32(38))
    assert e["steps"][1] == ["lookup", {"bits": 4, "q": 11, "table": "kvalues_iq4nl", "size": 16, "kind": "non-uniform",
                                        "entry": 38}]
    assert e["where"]["q"] == "byte 7, low four bits"


def test_explain_mxfp4_reads_the_e8m0_scale_and_the_e2m1_value():
    block = np.zeros(17, np.uint8)
    block[0] = 120  # 2^(120 − 127) = 1/128
    block[1 + 3] = 0xD0  # number 19: the high four bits of byte 4, 0b1101: E2M1 −3
    e = quant_explain.explain("MXFP4", block.tobytes(), 19)
    assert (e["e"], e["q"], e["e2m1"], e["entry"]) == (120, 13, -3.0, -6) and e["value"] == -3 / 128
    assert e["steps"][0] == ["e8m0", {"e": 120, "power": -7, "scale": 1 / 128, "half": 1 / 256}]


def test_explain_a_grid_number_and_its_sign():
    block = np.zeros(66, np.uint8)
    block[:2] = np.float16(0.5).reshape(1).view(np.uint8)
    block[2 + 8 + 1] = 200  # sub-block 1, group 1 (numbers 40-47): row 200 of iq2xxs_grid
    aux = (3 << 7) | (9 << 28)  # group 1's sign index 3 (ksigns 0b10000011: numbers 0, 1 and 7 negative), s = 9
    block[2 + 8 + 4:2 + 8 + 8] = np.array([aux], "<u4").view(np.uint8)
    e = quant_explain.explain("IQ2_XXS", block.tobytes(), 41)
    g = int(quant_tables.IQ2XXS_GRID[200, 1])
    assert (e["row"], e["column"], e["entry"], e["sign"], e["s"]) == (200, 1, g, -1, 9)
    assert e["value"] == -g * 0.5 * 9.5 * 0.25 == ours(block.reshape(1, -1), "IQ2_XXS")[0, 41]


# --------------------------------------------------------------------------- in files, and refused


def write(path, tensors: dict):
    w = gguf.GGUFWriter(str(path), "llama")
    for name, (type_name, raw) in tensors.items():
        w.add_tensor(name, raw, raw_dtype=Q[type_name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("type_name", NEW)
def test_a_file_of_each_type_is_mapped_and_read_row_by_row(tmp_path, type_name):
    kind = quants.TYPES[type_name]
    raw = random_blocks(type_name, 6 * 512 // kind.block, 8).reshape(6, -1)
    f = open_gguf(write(tmp_path / "t.gguf", {"m": (type_name, raw)}))
    assert f.tensors["m"].type_name == type_name and f.tensors["m"].shape == (6, 512)
    whole = f.dequantize("m")
    np.testing.assert_array_equal(whole, gguf.quants.dequantize(gguf.GGUFReader(f.path).tensors[0].data, Q[type_name]))
    s = Quantized(f, "m")
    np.testing.assert_array_equal(s.expand(), whole)
    for lo, hi in ((0, 1), (2, 5), (5, 6)):
        np.testing.assert_array_equal(s.rows(lo, hi), whole[lo:hi])


def test_an_e8m0_scale_of_255_is_refused_naming_the_file_and_tensor(tmp_path):
    raw = random_blocks("MXFP4", 4 * 2, 1).reshape(4, -1)
    raw[2, 17] = 255  # row 2's second block: block 5
    path = write(tmp_path / "nan.gguf", {"blk.0.ffn_down_exps.weight": ("MXFP4", raw)})
    f = open_gguf(path)
    for read in (lambda: f.dequantize("blk.0.ffn_down_exps.weight"), lambda: Quantized(f, "blk.0.ffn_down_exps.weight").rows(2, 3)):
        with pytest.raises(TracerError) as e:
            read()
        assert str(e.value).startswith(f"{path}: tensor 'blk.0.ffn_down_exps.weight': block ")
        assert "E8M0 scale 255, which is NaN" in str(e.value) and "\n" not in str(e.value)
    np.testing.assert_array_equal(Quantized(f, "blk.0.ffn_down_exps.weight").rows(0, 2), ours(raw[:2].reshape(-1, 17), "MXFP4").reshape(2, 64))


@pytest.mark.parametrize("type_name", ["IQ4_NL", "IQ2_S", "TQ2_0"])
def test_a_scale_that_is_inf_or_nan_is_refused_when_read_naming_the_tensor(tmp_path, type_name):
    kind = quants.TYPES[type_name]
    raw = random_blocks(type_name, 2 * 256 // kind.block, 1).reshape(2, -1)
    raw[1, :2] = np.float16(np.inf).reshape(1).view(np.uint8) if type_name != "TQ2_0" else raw[1, :2]
    if type_name == "TQ2_0":
        raw[1, 64:66] = np.float16(np.nan).reshape(1).view(np.uint8)
    f = open_gguf(write(tmp_path / "inf.gguf", {"blk.3.attn_v.weight": (type_name, raw)}))
    with pytest.raises(TracerError, match=r"tensor 'blk.3.attn_v.weight' holds NaN or infinite values \(first at index \[1, "):
        Quantized(f, "blk.3.attn_v.weight").expand()


def test_rows_that_are_not_whole_blocks_are_refused_when_opened(tmp_path):
    from .test_gguf_file import pack, refused, tinfo

    refused(tmp_path, pack(tensors=[tinfo("blk.0.ffn_up_exps.weight", [48, 2], 39, 0)], data=bytes(64)),
            "tensor 'blk.0.ffn_up_exps.weight': rows of 48 numbers are not whole MXFP4 blocks of 32")
    refused(tmp_path, pack(tensors=[tinfo("w", [128], 16, 0)], data=bytes(96)), "rows of 128 numbers are not whole IQ2_XXS blocks of 256")
    refused(tmp_path, pack(tensors=[tinfo("w", [32], 40, 0)], data=bytes(64)), "rows of 32 numbers are not whole NVFP4 blocks of 64")
    refused(tmp_path, pack(tensors=[tinfo("blk.0.attn_k.weight", [32], 99, 0)], data=bytes(64)),
            "tensor 'blk.0.attn_k.weight' has unknown ggml type 99")
