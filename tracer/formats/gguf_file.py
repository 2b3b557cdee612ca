"""Reading a GGUF file (llama.cpp's weights format, versions 2 and 3): its metadata, its tensor
table and each tensor's bytes, memory-mapped, never read whole.

The format, as llama.cpp's docs/gguf.md gives it (all little-endian): "GGUF", a uint32 version, a
uint64 tensor count and a uint64 key/value count; the key/value pairs (a string key, a uint32
value type, the value; a string is a uint64 length and UTF-8 bytes; an array is a uint32 element
type, a uint64 count and the elements, which may be arrays again); the tensor infos (a string
name, a uint32 number of dimensions, that many uint64 dimensions with ne[0] the fastest-varying,
a uint32 ggml type and a uint64 offset into the data section); padding to `general.alignment`
(32 unless the metadata says otherwise), then the data section. The checks follow those of
llama.cpp's ggml/src/gguf.cpp and more; gguf-py's GGUFReader is what the tests compare against.

A file someone gave us must never cost minutes or gigabytes, so every count and size the header
declares is weighed against the bytes the file still holds before anything is made from it (an
array that claims 10⁹ entries in a 1 KB file is refused, not allocated). Arrays of numbers become
read-only numpy views of the map (booleans a read-only copy, one byte each); only strings and
nested arrays become Python objects, at most one per 8 bytes of file.
Keys and tensor names must be UTF-8 (refused otherwise); a string value that is not UTF-8 is
decoded with U+FFFD in place of the bad bytes and its key listed in `GGUFFile.replaced`.
Every problem is one TracerError line naming the file and the key or tensor.
Core module: numpy and the standard library only.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TracerError, near
from ..core.memory import memory_room
from .reading import open_regular, reason
from . import quant_explain, quants

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 (2023) had 32-bit counts and lengths; llama.cpp reads it no longer either
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_DEPTH = 8  # arrays of arrays: llama.cpp writes none; far deeper than any real file
HEADER_BYTES = 24  # magic, version, tensor count, key/value count
LEAST_KV = 8 + 4 + 1  # bytes of the smallest key/value pair: an empty key, a type, a one-byte value
LEAST_TENSOR = 8 + 4 + 8 + 4 + 8  # an empty name, one dimension, a type, an offset
STRING, ARRAY = 8, 9
SCALARS = {  # value type → (name, struct code, numpy dtype)
    0: ("UINT8", "B", "<u1"), 1: ("INT8", "b", "<i1"), 2: ("UINT16", "H", "<u2"), 3: ("INT16", "h", "<i2"),
    4: ("UINT32", "I", "<u4"), 5: ("INT32", "i", "<i4"), 6: ("FLOAT32", "f", "<f4"), 7: ("BOOL", "B", "<u1"),
    10: ("UINT64", "Q", "<u8"), 11: ("INT64", "q", "<i8"), 12: ("FLOAT64", "d", "<f8"),
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as the header declares it. `dims` in GGUF order (ne[0], the fastest axis, first);
    `shape` the numpy shape (dims reversed); `offset` into the data section as the file gives it,
    `start` the absolute byte in the file; `nbytes` its stored size; `count` its numbers."""

    name: str
    dims: tuple[int, ...]
    shape: tuple[int, ...]
    type_name: str
    type_id: int
    offset: int
    start: int
    nbytes: int
    count: int


class _Cursor:
    """Reads the header of the mapped file from the front, every read checked against its size."""

    def __init__(self, path: Path, buf: mmap.mmap, size: int):
        self.path, self.buf, self.size, self.pos = path, buf, size, 0

    def fail(self, why: str) -> TracerError:
        return TracerError(f"{self.path}: {why}")

    def take(self, n: int, what: str) -> int:
        """The position of the next `n` bytes, which must be in the file; moves past them."""
        if n > self.size - self.pos:
            raise self.fail(f"truncated: {what} needs {n:,} bytes at byte {self.pos:,}, the file has {self.size:,}")
        at, self.pos = self.pos, self.pos + n
        return at

    def scalar(self, code: str, what: str):
        size = struct.calcsize("<" + code)
        return struct.unpack_from("<" + code, self.buf, self.take(size, what))[0]

    def string(self, what: str, strict: bool) -> tuple[str, bool]:
        """A string and whether bad UTF-8 was replaced (`strict`: refused instead)."""
        n = self.scalar("Q", f"the length of {what}")
        if n > self.size - self.pos:
            raise self.fail(f"{what} claims {n:,} bytes; only {self.size - self.pos:,} remain in the file")
        raw = self.buf[self.take(n, what):self.pos]
        try:
            return raw.decode("utf-8"), False
        except UnicodeDecodeError as e:
            if strict:
                raise self.fail(f"{what} is not UTF-8 (byte {e.start} of it)") from None
            return raw.decode("utf-8", errors="replace"), True

    def need(self, count: int, least: int, what: str) -> None:
        """Refuse `count` items of at least `least` bytes each when the rest of the file cannot hold them."""
        if count * least > self.size - self.pos:
            raise self.fail(f"{what} claims {count:,} entries; the {self.size - self.pos:,} bytes left "
                            f"in the file hold at most {(self.size - self.pos) // least:,}")


def shown(name: str, most: int = 80) -> str:
    """`name` quoted for a message, escapes visible, cut to `most` characters: a key may be a megabyte long."""
    r = repr(name)
    return r if len(r) <= most else r[:most - 2] + "…" + r[-1]


def _value(c: _Cursor, type_id: int, what: str, depth: int, replaced: list) -> tuple[object, str]:
    """One metadata value of type `type_id` and its type's name ("UINT32", "ARRAY[STRING]", …);
    `replaced` gets `what` for each string whose bad UTF-8 was replaced."""
    if type_id in SCALARS:
        name, code, _ = SCALARS[type_id]
        v = c.scalar(code, what)
        return (bool(v) if name == "BOOL" else v), name
    if type_id == STRING:
        s, bad = c.string(what, strict=False)
        if bad:
            replaced.append(what)
        return s, "STRING"
    if type_id != ARRAY:
        raise c.fail(f"{what} has unknown value type {type_id}")
    if depth >= MAX_ARRAY_DEPTH:
        raise c.fail(f"{what}: arrays nested more than {MAX_ARRAY_DEPTH} deep")
    elem = c.scalar("I", f"the element type of {what}")
    count = c.scalar("Q", f"the length of {what}")
    if elem in SCALARS:
        name, _, dtype = SCALARS[elem]
        size = np.dtype(dtype).itemsize
        c.need(count, size, f"{what}, an array of {name}")
        at = c.take(count * size, what)
        arr = np.frombuffer(c.buf, dtype=dtype, count=count, offset=at)  # (count,) read-only view of the map
        if name == "BOOL":
            arr = arr != 0
            arr.flags.writeable = False
        return arr, f"ARRAY[{name}]"
    if elem == STRING:
        c.need(count, 8, f"{what}, an array of STRING")  # each string has at least its 8-byte length
        out, bad = [], False
        for i in range(count):
            s, b = c.string(f"{what}[{i}]", strict=False)
            out.append(s)
            bad |= b
        if bad:
            replaced.append(what)
        return out, "ARRAY[STRING]"
    if elem == ARRAY:
        c.need(count, 12, f"{what}, an array of ARRAY")  # each inner array has its type and length
        items = [_value(c, ARRAY, f"{what}[{i}]", depth + 1, replaced) for i in range(count)]
        return [v for v, _ in items], f"ARRAY[{items[0][1] if items else 'ARRAY'}]"
    raise c.fail(f"{what} is an array of unknown value type {elem}")


def _tensor_info(c: _Cursor, index: int) -> tuple[str, tuple[int, ...], int, int]:
    name, _ = c.string(f"the name of tensor {index}", strict=True)
    what = f"tensor {shown(name)}"
    n_dims = c.scalar("I", f"the number of dimensions of {what}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise c.fail(f"{what} has {n_dims} dimensions; ggml's tensors have 1 to {MAX_DIMS}")
    dims = tuple(c.scalar("Q", f"the dimensions of {what}") for _ in range(n_dims))
    type_id = c.scalar("I", f"the type of {what}")
    offset = c.scalar("Q", f"the offset of {what}")
    return name, dims, type_id, offset


def _check_tensor(c: _Cursor, name: str, dims, type_id: int, offset: int, data_start: int,
                  alignment: int) -> TensorInfo:
    what = f"tensor {shown(name)}"
    if type_id not in quants.GGML_TYPES:
        raise c.fail(f"{what} has unknown ggml type {type_id}")
    type_name, block, per_block = quants.GGML_TYPES[type_id]
    if 0 in dims:
        raise c.fail(f"{what} has a dimension of 0 ({list(dims)})")
    if dims[0] % block:
        raise c.fail(f"{what}: rows of {dims[0]:,} numbers are not whole {type_name} blocks of {block}")
    count = math.prod(dims)  # a Python int: no overflow, however absurd the dimensions
    nbytes = count // block * per_block
    if offset % alignment:
        raise c.fail(f"{what}: offset {offset:,} is not a multiple of the alignment {alignment}")
    start = data_start + offset
    if nbytes > c.size - min(start, c.size):
        raise c.fail(f"{what} ({list(dims)} of {type_name}, {nbytes:,} bytes from byte {start:,}) runs past "
                     f"the end of the {c.size:,}-byte file")
    return TensorInfo(name, dims, tuple(reversed(dims)), type_name, type_id, offset, start, nbytes, count)


def _alignment(c: _Cursor, metadata: dict, types: dict) -> int:
    if "general.alignment" not in metadata:
        return DEFAULT_ALIGNMENT
    a, kind = metadata["general.alignment"], types["general.alignment"]
    if kind != "UINT32" or a == 0 or a & (a - 1):
        got = f"{a}" if kind == "UINT32" else f"a value of type {kind}"
        raise c.fail(f"general.alignment must be a UINT32 power of two, got {got}")
    return a


class GGUFFile:
    """An open GGUF file: `version`, `metadata` (key → value, in file order), `types` (key → its GGUF
    value type's name), `tensors` (name → TensorInfo, in file order), `alignment`, `data_start`,
    and `replaced` (keys whose strings were not UTF-8). Built by `open_gguf`."""

    def __init__(self, path: Path, version: int, metadata: dict, types: dict, tensors: dict,
                 alignment: int, data_start: int, buf: np.ndarray, replaced: list):
        self.path, self.version, self.metadata, self.types = path, version, metadata, types
        self.tensors, self.alignment, self.data_start = tensors, alignment, data_start
        self.buf, self.replaced = buf, replaced

    def __repr__(self) -> str:
        return f"GGUFFile({str(self.path)!r}, v{self.version}, {len(self.metadata)} keys, {len(self.tensors)} tensors)"

    def info(self, name: str) -> TensorInfo:
        if name not in self.tensors:
            raise TracerError(f"{self.path}: holds no tensor {shown(name)}{near(name, self.tensors)}")
        return self.tensors[name]

    def raw(self, name: str) -> np.ndarray:
        """(nbytes,) uint8: the tensor's stored bytes, a read-only view of the map (nothing is read)."""
        t = self.info(name)
        return self.buf[t.start:t.start + t.nbytes]

    def blocks(self, name: str) -> np.ndarray:
        """(blocks, bytes per block) uint8: the tensor's bytes seen block by block (a view)."""
        t = self.info(name)
        _, _, per_block = quants.GGML_TYPES[t.type_id]
        return self.raw(name).reshape(-1, per_block)

    def dequantize(self, name: str) -> np.ndarray:
        """`shape` float32: the tensor's numbers. An F32 tensor is a read-only view of the map (no
        copy); any other type is de-quantized into a new array, after checking the process can take it."""
        t = self.info(name)
        if t.type_name not in quants.TYPES:
            raise TracerError(f"{self.path}: {quants.cannot(t.type_name, name)}")
        if t.type_name == "F32":
            return self.raw(name).view("<f4").reshape(t.shape)
        room = memory_room()
        if t.count * 4 > room:
            raise TracerError(f"{self.path}: tensor {shown(name)} takes {t.count * 4 / 1e9:.2f} GB as float32; "
                              f"this process can take {room / 1e9:.2f} GB more")
        try:
            return quants.dequantize(self.raw(name), t.type_name, t.count, name).reshape(t.shape)
        except TracerError as e:  # a scale that is no number: the file's name before the tensor's
            raise TracerError(f"{self.path}: {e}") from None

    def explain(self, name: str, index) -> dict:
        """How number `index` of tensor `name` (a numpy index tuple into `shape`, or a flat index)
        comes from its block's bytes: `quant_explain.explain`'s dict, plus the tensor, the block and the
        number's place in it."""
        t = self.info(name)
        try:
            flat = int(np.ravel_multi_index(tuple(index), t.shape)) if isinstance(index, (tuple, list)) else int(index)
        except (ValueError, TypeError) as e:
            raise TracerError(f"{self.path}: tensor {shown(name)} of shape {list(t.shape)} has no number {index!r} ({e})") from None
        if not 0 <= flat < t.count:
            raise TracerError(f"{self.path}: tensor {shown(name)} holds {t.count:,} numbers, not number {flat:,}")
        _, block, per_block = quants.GGML_TYPES[t.type_id]
        if t.type_name not in quants.TYPES:
            raise TracerError(f"{self.path}: {quants.cannot(t.type_name, name)}")
        b, within = divmod(flat, block)
        out = quant_explain.explain(t.type_name, self.raw(name)[b * per_block:(b + 1) * per_block].tobytes(), within)
        return {"tensor": name, "flat_index": flat, "block": b, "block_start_byte": t.start + b * per_block, **out}


def open_gguf(path) -> GGUFFile:
    """The GGUF file at `path`, its header read and checked whole, its data mapped, nothing de-quantized."""
    path = Path(path)
    with open_regular(path, "GGUF file") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if size < len(MAGIC):
            raise TracerError(f"{path}: not a GGUF file (only {size} bytes)")
        if head[:4] != MAGIC:
            raise TracerError(f"{path}: not a GGUF file (it begins {head[:4]!r}, not {MAGIC!r})")
        if len(head) < 8:
            raise TracerError(f"{path}: truncated: {size} bytes, not even a GGUF version")
        (version,) = struct.unpack("<I", head[4:8])
        if version not in VERSIONS:
            if struct.unpack(">I", head[4:8])[0] in VERSIONS:
                raise TracerError(f"{path}: a big-endian GGUF file; tracer reads little-endian ones")
            raise TracerError(f"{path}: GGUF version {version}; tracer reads versions 2 and 3"
                              + (" (version 1 is the 2023 draft; convert the file again)" if version == 1 else ""))
        try:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:  # no address space left to map it (ulimit -v)
            raise TracerError(f"{path}: cannot map it into memory ({reason(e) if isinstance(e, OSError) else e})") from None
    size = len(buf)  # what is mapped is what is read, should the file have changed since fstat
    c = _Cursor(path, buf, size)
    c.pos = 8
    n_tensors = c.scalar("Q", "the tensor count")
    n_kv = c.scalar("Q", "the key/value count")
    if n_tensors * LEAST_TENSOR + n_kv * LEAST_KV > size - c.pos:
        raise c.fail(f"claims {n_tensors:,} tensors and {n_kv:,} keys; a {size:,}-byte file cannot hold them")
    metadata: dict = {}
    types: dict = {}
    replaced: list = []
    for i in range(n_kv):
        key, _ = c.string(f"key {i}", strict=True)
        if key in metadata:
            raise c.fail(f"key {shown(key)} appears twice")
        type_id = c.scalar("I", f"the value type of key {shown(key)}")
        bad: list = []
        metadata[key], types[key] = _value(c, type_id, f"key {shown(key)}", 0, bad)
        if bad:
            replaced.append(key)
    declared = []
    for i in range(n_tensors):
        declared.append(_tensor_info(c, i))
    alignment = _alignment(c, metadata, types)
    data_start = -(-c.pos // alignment) * alignment
    tensors: dict[str, TensorInfo] = {}
    for name, dims, type_id, offset in declared:
        if name in tensors:
            raise c.fail(f"tensor {shown(name)} appears twice")
        tensors[name] = _check_tensor(c, name, dims, type_id, offset, data_start, alignment)
    _check_overlaps(c, tensors)
    return GGUFFile(path, version, metadata, types, tensors, alignment, data_start,
                    np.frombuffer(buf, dtype=np.uint8), replaced)


def _check_overlaps(c: _Cursor, tensors: dict) -> None:
    ordered = sorted(tensors.values(), key=lambda t: t.start)
    for a, b in zip(ordered, ordered[1:]):
        if a.start + a.nbytes > b.start:
            raise c.fail(f"tensors {shown(a.name)} and {shown(b.name)} overlap (bytes {a.start:,}..{a.start + a.nbytes:,} "
                         f"and {b.start:,}..)")
