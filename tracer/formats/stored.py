"""Tensors kept as their file stores them, expanded to float32 only when asked: the storage side of
running a model bigger than memory (`tracer.core.streamed` keeps the expanded layers under a budget).

A `Stored` tensor is either a mapped array of a safetensors file (float32: the mapped view itself;
float16; bfloat16 kept as its uint16 bits) or a GGUF tensor's memory-mapped blocks
(`tracer.formats.gguf_file`, de-quantized by `tracer.formats.quants`). Each gives:

    expand()        the whole tensor as float32, by the very operations reading used to run
                    (so a streamed model computes exactly the numbers of an expanded one)
    rows(lo, hi)    rows lo..hi of its first axis as float32 (GGUF rows are whole blocks:
                    the embedding's lookup and the unembedding's row blocks read only those)
    expand_into(out) the expansion written into `out` (a fused Q|K|V matrix's rows) a block of
                    rows at a time, so that no whole copy is made beside it
    expanded_bytes  4 bytes a number, 0 when `expand` is a view of the mapped file (float32)

Every expansion is checked for NaN and ∞, naming the tensor (one line, as reading did), and a
`transform` (llama.cpp's Q/K rows put back in transformers' order) runs on the float32 result (on
rows alone when it acts on blocks of `transform.period` rows: a head's). Once a tensor's numbers are
copied out of the file, its pages of the map are handed back to the kernel (`give_back`): a model
bigger than memory is read through once per pass, and the pages would otherwise count in the
process's resident memory until the end.
Core module: numpy and the standard library.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import TracerError
from ..core.params import first_non_finite

CHECK_CHUNK = 2**22  # elements checked for NaN/inf at a time
FILL_BLOCK_BYTES = 2**21  # float32 bytes of rows `expand_into` expands at a time
GIVEN_BACK = 0  # bytes of mapped pages `give_back` has handed back to the kernel, in this process


class Stored:
    """One tensor as stored. `name`: its name in the file; `where`: the file (for messages);
    `dtype`: the storage type's name ("F32", "BF16", "Q4_0", …); `transform`: float32 → float32."""

    def __init__(self, name: str, where, shape: tuple, dtype: str, transform=None):
        self.name, self.where, self.shape, self.dtype, self.transform = name, where, tuple(shape), dtype, transform
        self.checked = False  # the whole tensor found finite once

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def expanded_bytes(self) -> int:
        """The bytes `expand` allocates (0: a view of the mapped file)."""
        return 0 if self.dtype in ("F32", "float32") and self.transform is None else 4 * self.count

    def expand(self) -> np.ndarray:  # → `shape` float32
        arr = self._expand()
        self.check(arr)
        if self.expanded_bytes:  # a copy was made: the file's pages it was read from are not needed now
            give_back(self._stored(0, self.shape[0]))
        return self.transform(arr) if self.transform is not None else arr

    def rows(self, lo: int, hi: int) -> np.ndarray:  # → [hi - lo, *shape[1:]] float32
        if self.transform is not None and not self._rowwise(lo, hi):
            return self.expand()[lo:hi]
        arr = self._rows(lo, hi)
        self.check(arr, lo)
        if self.expanded_bytes:  # a copy was made (not a view of a float32 file)
            give_back(self._stored(lo, hi))
        return self.transform(arr) if self.transform is not None else arr

    def _rowwise(self, lo: int, hi: int) -> bool:
        """Whether the transform may run on rows lo..hi alone: it acts on blocks of `period` rows
        (llama.cpp's Q/K rows are put back head by head) and lo..hi is whole blocks."""
        period = getattr(self.transform, "period", None)
        return period is not None and lo % period == 0 and (hi % period == 0 or hi == self.shape[0])

    def expand_into(self, out: np.ndarray) -> None:
        """The expansion written into `out` (a `shape` view, such as a fused matrix's columns seen
        transposed), a block of rows at a time: the same numbers as `expand`, with no whole copy of
        its own beside `out`."""
        step = max(1, FILL_BLOCK_BYTES // max(1, 4 * (self.count // self.shape[0])))  # rows per block
        period = getattr(self.transform, "period", None)
        if self.transform is not None and period is None:
            out[...] = self.expand()
            return
        if period is not None:
            step = max(period, step // period * period)
        for lo in range(0, self.shape[0], step):
            out[lo:lo + step] = self.rows(lo, min(lo + step, self.shape[0]))
        self.checked = True  # every row was checked

    def check(self, arr: np.ndarray, row: int = 0) -> None:
        """A TracerError naming the tensor if `arr` (its rows from `row` on) holds NaN or ∞; a whole
        tensor is checked once (a float32 view is not read again on every pass)."""
        if self.checked:
            return
        bad = first_non_finite(arr, None, CHECK_CHUNK)
        if bad is not None:
            if row and isinstance(bad, list) and bad:
                bad = [bad[0] + row, *bad[1:]]
            raise TracerError(f"{self.where}: tensor {self.name!r} holds NaN or infinite values (first at index {bad})")
        self.checked = row == 0 and arr.shape == self.shape

    def _expand(self) -> np.ndarray:
        raise NotImplementedError

    def _rows(self, lo: int, hi: int) -> np.ndarray:
        return self._expand()[lo:hi]

    def _stored(self, lo: int, hi: int) -> np.ndarray | None:
        """The stored bytes of rows lo..hi (a view of the mapped file), or None."""
        return None

    def prefetch(self, lo: int = 0, hi: int | None = None) -> int:
        """Rows lo..hi (all: the whole tensor) asked to be read from the file ahead of use (`will_need`)."""
        return will_need(self._stored(lo, self.shape[0] if hi is None else hi))


class Mapped(Stored):
    """A safetensors tensor: `arr` is its mapped view (uint16 bits for BF16)."""

    def __init__(self, name: str, where, arr: np.ndarray, dtype: str, transform=None):
        super().__init__(name, where, arr.shape, dtype, transform)
        self.arr = arr

    def _expand(self) -> np.ndarray:
        return self._float32(self.arr)

    def _rows(self, lo: int, hi: int) -> np.ndarray:
        return self._float32(self.arr[lo:hi])

    def _stored(self, lo: int, hi: int) -> np.ndarray:
        return self.arr[lo:hi]

    def _float32(self, arr: np.ndarray) -> np.ndarray:
        from .files import bf16_to_float32

        if self.dtype == "BF16":
            arr = bf16_to_float32(arr)
        if arr.dtype.kind != "f":
            raise TracerError(f"{self.where}: tensor {self.name!r} has dtype {arr.dtype}, expected floating point weights")
        arr = arr.view(np.ndarray)  # a plain array over the same bytes, not an np.memmap
        return arr if arr.dtype == np.float32 else arr.astype(np.float32)


class Quantized(Stored):
    """A GGUF tensor: its blocks, memory-mapped in `f` (a `tracer.formats.gguf_file.GGUFFile`)."""

    def __init__(self, f, name: str, transform=None):
        info = f.info(name)
        super().__init__(name, f.path, info.shape, info.type_name, transform)
        self.f = f

    def _expand(self) -> np.ndarray:
        return self.f.dequantize(self.name)

    def _rows(self, lo: int, hi: int) -> np.ndarray:
        from . import quants

        info = self.f.info(self.name)
        if info.type_name not in quants.TYPES:
            raise TracerError(f"{self.f.path}: {quants.cannot(info.type_name, self.name)}")
        per_row = info.count // info.shape[0]
        try:
            out = quants.dequantize(self._stored(lo, hi), info.type_name, (hi - lo) * per_row, self.name)
        except TracerError as e:  # a scale that is no number
            raise TracerError(f"{self.f.path}: {e}") from None
        return out.reshape(hi - lo, *info.shape[1:])

    def _stored(self, lo: int, hi: int) -> np.ndarray:
        from . import quants

        info = self.f.info(self.name)
        _, block, per_block = quants.GGML_TYPES[info.type_id]
        row_bytes = info.count // info.shape[0] // block * per_block  # a row of ne0 numbers is whole blocks (checked when opened)
        return self.f.raw(self.name)[lo * row_bytes:hi * row_bytes]


def _mapped_pages(arr):
    """(the read-only map under `arr`, first byte, end byte) of the whole pages `arr` (a contiguous view of a
    read-only mapped file) lies on, or None (not such a view)."""
    import mmap

    if arr is None or not isinstance(arr, np.ndarray) or arr.size == 0:
        return None
    root = arr
    while isinstance(root.base, np.ndarray):
        root = root.base
    m = root.base.obj if isinstance(root.base, memoryview) else root.base  # np.frombuffer(map), or np.memmap
    if not isinstance(m, mmap.mmap):
        return None
    with memoryview(m) as view:
        if not view.readonly:  # a copy-on-write map's own changes would be lost: only read-only maps
            return None
    start = arr.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    end = start + arr.nbytes  # a contiguous view: the rows of a tensor
    lo = start // mmap.PAGESIZE * mmap.PAGESIZE
    hi = min(-(-end // mmap.PAGESIZE) * mmap.PAGESIZE, len(m))
    return (m, lo, hi) if 0 <= lo < hi else None


def _advise(arr, advice: str) -> int:
    """madvise(`advice`) on the pages under `arr` (see `_mapped_pages`): the bytes advised, 0 if none."""
    import mmap

    pages = _mapped_pages(arr)
    if pages is None or not hasattr(mmap, advice):
        return 0
    m, lo, hi = pages
    try:
        m.madvise(getattr(mmap, advice), lo, hi - lo)
    except (OSError, ValueError):
        return 0
    return hi - lo


def give_back(arr) -> int:
    """The pages of a mapped file under `arr` (a view of a read-only map) handed back to the kernel
    (madvise MADV_DONTNEED): they stop counting in this process's resident memory, stay in the page
    cache, and are read again from it if touched again. Bytes given back (0: not a mapped view, or
    no madvise here)."""
    global GIVEN_BACK
    n = _advise(arr, "MADV_DONTNEED")
    GIVEN_BACK += n
    return n


def will_need(arr) -> int:
    """The pages of a mapped file under `arr` asked to be read ahead (madvise MADV_WILLNEED): the kernel
    starts reading them in large requests and returns, so that a file not yet in the page cache is read
    while the pass computes, not a page fault at a time when the numbers are expanded. Bytes asked for."""
    return _advise(arr, "MADV_WILLNEED")


class ExpertStack:
    """A stored [expert, rows, cols] tensor of a mixture of experts, expanded one expert at a time as a
    pass routes tokens to it (`stack[e]` → float32): what a streamed model keeps of its experts, so
    that a pass expands only the experts it uses. A family's translate sees it as it sees an array:
    `swapaxes(1, 2)`, a slice of every expert's rows (`stack[:, lo:hi]`: a fused gate_up's gate) or
    columns (`stack[..., ::2]`: gpt-oss's interleaved gate), each kept as a step applied to every
    expert when it is expanded; `np.asarray(stack)` expands every expert (a hook, the backward pass)."""

    def __init__(self, stored: Stored, steps: tuple = ()):
        if len(stored.shape) != 3:
            raise ValueError(f"{stored.name}: an expert stack is [expert, rows, cols], got {list(stored.shape)}")
        self.stored, self.steps = stored, steps
        self.dtype = np.dtype(np.float32)
        self.nbytes = 0  # holds nothing until an expert is asked for
        self.shape = (stored.shape[0], *self._apply(np.broadcast_to(np.float32(0), stored.shape[1:])).shape)

    def _apply(self, m: np.ndarray) -> np.ndarray:  # one expert [rows, cols] → as the steps see it
        for step in self.steps:
            m = m.T if step == "T" else m[step]
        return m

    @property
    def ndim(self) -> int:
        return 3

    def __len__(self) -> int:
        return self.stored.shape[0]

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            return self._apply(self.stored.rows(int(key), int(key) + 1)[0])
        if isinstance(key, tuple) and len(key) == 2 and key[0] == slice(None) and isinstance(key[1], slice):
            return ExpertStack(self.stored, (*self.steps, (key[1], slice(None))))  # every expert's rows lo:hi
        if isinstance(key, tuple) and len(key) == 2 and key[0] is Ellipsis and isinstance(key[1], slice):
            return ExpertStack(self.stored, (*self.steps, (slice(None), key[1])))  # every expert's columns
        raise TypeError(f"{self.stored.name}: an expert stack is read one expert at a time (stack[e])")

    def prefetch(self, experts) -> int:
        """The stored bytes of `experts` asked to be read ahead (`Stored.prefetch`), before any is expanded."""
        return sum(self.stored.prefetch(int(e), int(e) + 1) for e in experts)

    def swapaxes(self, a: int, b: int) -> "ExpertStack":
        if {a, b} != {1, 2}:
            raise ValueError("an expert stack swaps its last two axes only")
        return ExpertStack(self.stored, (*self.steps, "T"))

    def __array__(self, dtype=None, copy=None):
        out = np.stack([self[e] for e in range(len(self))])
        return out if dtype is None else out.astype(dtype, copy=False)

    @property
    def expert_bytes(self) -> int:
        """float32 bytes of one expert expanded."""
        return 4 * self.shape[1] * self.shape[2]
