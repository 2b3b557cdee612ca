"""Recording intermediates by name, inline, as TransformerLens's hooks do.

`x = rec("hook_resid_mid", resid_pre + attn_out)` stores the value (when the name is wanted)
and passes it through. `rec.scope("blocks.0")` gives a recorder that prefixes names, so a
full name is never typed twice. What is wanted is a list of globs (`blocks.*.attn.hook_pattern`)
or None for everything. Core module: imports numpy only.

`retain_freed_memory()` (memory, not names): a recorded pass allocates hundreds of megabytes
of new arrays, and glibc's malloc hands every large freed block straight back to the kernel
(blocks over 32 MB always, smaller ones when the heap's free top exceeds a threshold), so the
next pass faults the same memory in again page by page. On the 2-core benchmark VM that cost
more than the arithmetic: a 1,024-token pass took 5.4 s instead of 2.1 s, and a 128-token pass
with everything recorded paid about 30,000 page faults (see BENCHMARKS.md). The `tracer`
command asks malloc to keep freed memory for reuse; a program using the API may do the same.

`Store` (what a Recorder fills, and a Trace's `arrays`) keeps two kinds of value in a smaller
form, with no value lost, and rebuilds them on access (the last few rebuilt are kept):
  - `CausalHalf`: a [head, query, key] array whose entries above the causal diagonal all hold
    one value (0 in `hook_pattern`, -inf in `hook_attn_scores`), kept as its lower part: about
    half the memory for long prompts;
  - `Derived`: a recipe, for a value the store can recompute from others it holds (and weights):
    `hook_attn_scores` from `hook_dots` (the same scaling and mask: exact by construction), and in
    passes of PACK_MIN_QUERIES positions or more `hook_dots` from Q and K and `mlp.hook_post` from
    `mlp.hook_pre`, each recomputed once when recorded and kept as a recipe only when that gave
    the same bits. `hook_result` (each head's share of the attention output, which the decoder
    never needs apart) is only ever a recipe over `hook_z` and W_O, computed when first read.
Reading `store[name]` always gives the whole array, bit for bit what the decoder computed
(`hook_result`: what `head_results` gives from `hook_z` and the model's W_O when first read).
"""

from __future__ import annotations

import fnmatch
import re
from collections import OrderedDict
from collections.abc import MutableMapping

import numpy as np

PACK_MIN_QUERIES = 256  # causal arrays of passes with fewer query positions are kept whole
REBUILT_KEPT = 4  # rebuilt arrays a store keeps, so that a renderer reading one again pays once


class CausalHalf:
    """A [head, query, key] array with one value (`fill`) above the causal diagonal, kept as the
    rows' visible parts one after another: query i (absolute position key - query + i) sees keys
    0..n_key - n_query + i."""

    def __init__(self, a: np.ndarray, fill: float):
        H, n_q, n_k = a.shape
        self.shape, self.dtype, self.fill = a.shape, a.dtype, fill
        self.ends = np.arange(n_k - n_q + 1, n_k + 1)  # [query] visible keys per row
        self.offsets = np.concatenate([[0], np.cumsum(self.ends)])  # [query + 1]
        self.data = np.empty((H, int(self.offsets[-1])), dtype=a.dtype)  # [head, visible entries]
        for i, (o, e) in enumerate(zip(self.offsets, self.ends)):
            self.data[:, o : o + e] = a[:, i, :e]

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def rebuild(self, store=None) -> np.ndarray:
        out = np.full(self.shape, self.fill, dtype=self.dtype)  # [head, query, key]
        for i, (o, e) in enumerate(zip(self.offsets, self.ends)):
            out[:, i, :e] = self.data[:, o : o + e]
        return out

    @staticmethod
    def packable(a: np.ndarray, fill: float, exact: bool = False) -> bool:
        """Whether packing `a` loses nothing, checked cheaply for the arrays the decoder makes:
        long enough to be worth it, and (for softmax weights) no row that went NaN, since a NaN
        row is NaN above the diagonal too. `exact` checks every masked entry (arrays read from a
        file, which could hold anything there)."""
        if a.ndim != 3 or a.shape[1] < PACK_MIN_QUERIES or a.shape[1] > a.shape[2]:
            return False
        if exact:
            first = a.shape[2] - a.shape[1]
            if not all((a[:, i, first + i + 1 :] == fill).all() for i in range(a.shape[1])):
                return False
        if fill == 0.0:
            first = a.shape[2] - a.shape[1]
            diag = a[:, np.arange(a.shape[1]), first + np.arange(a.shape[1])]  # [head, query]
            return not np.isnan(diag).any()
        return True


class Derived:
    """A value recomputed on access: `fn(*sources)`, where a source is the name of another entry
    of the same store or an array (a weight)."""

    def __init__(self, fn, sources: tuple, shape: tuple, dtype):
        self.fn, self.sources, self.shape, self.dtype = fn, sources, tuple(shape), np.dtype(dtype)

    nbytes = 0

    def rebuild(self, store) -> np.ndarray:
        return self.fn(*[store[s] if isinstance(s, str) else s for s in self.sources])


class Store(MutableMapping):
    """Recorded name → array, in recording order; `CausalHalf` and `Derived` entries are rebuilt
    on access (read-only arrays; the last REBUILT_KEPT are kept)."""

    def __init__(self, items=()):
        self._d: dict = {}
        self._rebuilt: OrderedDict = OrderedDict()
        self.update(items)

    def __getitem__(self, name: str) -> np.ndarray:
        v = self._d[name]
        if not isinstance(v, (CausalHalf, Derived)):
            return v
        hit = self._rebuilt.get(name)
        if hit is None:
            return self.remember(name, v.rebuild(self))
        self._rebuilt.move_to_end(name)
        return hit

    def remember(self, name: str, value: np.ndarray) -> np.ndarray:
        """Keep `value` (what entry `name` rebuilds to) among the last REBUILT_KEPT rebuilt
        arrays, read-only, so that the next read costs nothing."""
        hit = value.view()
        hit.flags.writeable = False
        self._rebuilt[name] = hit
        while len(self._rebuilt) > REBUILT_KEPT:
            self._rebuilt.popitem(last=False)
        return hit

    def __setitem__(self, name: str, value) -> None:
        self._d[name] = value
        self._rebuilt.pop(name, None)

    def __delitem__(self, name: str) -> None:
        del self._d[name]
        self._rebuilt.pop(name, None)

    def __iter__(self):
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return f"Store({len(self._d)} names)"

    def raw(self, name: str):
        """The entry as held: an array, a CausalHalf or a Derived."""
        return self._d[name]

    def nbytes(self) -> int:
        """Bytes held, each array once however many names share it (rebuilt copies not counted)."""
        seen, total = set(), 0
        for v in self._d.values():
            if id(v) not in seen:
                seen.add(id(v))
                total += int(v.nbytes)
        return total


class Recorder:
    def __init__(self, names=None, prefix: str = "", store: dict | None = None, _wanted=None):
        self.prefix = prefix
        self.store: MutableMapping = Store() if store is None else store
        if _wanted is not None:
            self._wanted = _wanted
        else:
            self._wanted = _compile(names)

    def __call__(self, name: str, value):
        full = self.prefix + name
        if self._wanted(full):
            self.store[full] = value
        return value

    def causal(self, name: str, value: np.ndarray, fill: float, exact: bool = False) -> np.ndarray:
        """Record a [head, query, key] array whose masked entries all equal `fill`; a Store keeps
        only its causal half when that loses nothing (`CausalHalf.packable`)."""
        full = self.prefix + name
        if self._wanted(full):
            packed = isinstance(self.store, Store) and CausalHalf.packable(value, fill, exact)
            self.store[full] = CausalHalf(value, fill) if packed else value
        return value

    def recipe(self, name: str, value: np.ndarray, fn, *sources, verify: bool = True) -> np.ndarray:
        """Record `value`, which `fn(*sources)` computes (a source: a name in this scope, or an
        array). A Store that holds every named source keeps the recipe instead of the array, once
        `verify` has recomputed it and found the same bits (else the array is kept); `verify=False`
        is for recipes exact by construction (element-wise IEEE operations)."""
        full = self.prefix + name
        if not self._wanted(full):
            return value
        srcs = tuple(self.prefix + s if isinstance(s, str) else s for s in sources)
        keep = isinstance(self.store, Store) and all(s in self.store for s in srcs if isinstance(s, str))
        if keep:
            d = Derived(fn, srcs, value.shape, value.dtype)
            if verify:
                again = d.rebuild(self.store)
                keep = again.dtype == value.dtype and again.shape == value.shape and np.array_equal(again, value)
        self.store[full] = d if keep else value
        return value

    def lazy(self, name: str, fn, sources: tuple, shape: tuple, dtype) -> bool:
        """Record `fn(*sources)` as a recipe only, computed when first read, if the store holds
        every named source; returns False (nothing recorded) otherwise, so the caller computes it."""
        full = self.prefix + name
        if not self._wanted(full):
            return True
        srcs = tuple(self.prefix + s if isinstance(s, str) else s for s in sources)
        if not (isinstance(self.store, Store) and all(s in self.store for s in srcs if isinstance(s, str))):
            return False
        self.store[full] = Derived(fn, srcs, shape, dtype)
        return True

    def wants(self, name: str) -> bool:
        """Whether `name` (in this scope) is recorded: for values that cost work only to record."""
        return self._wanted(self.prefix + name)

    def scope(self, prefix: str) -> "Recorder":
        return Recorder(prefix=self.prefix + prefix + ".", store=self.store, _wanted=self._wanted)


def _compile(names):
    if names is None:
        return lambda name: True
    if isinstance(names, str):
        names = [names]
    names = list(names)
    if not names:
        return lambda name: False
    pattern = re.compile("|".join(fnmatch.translate(n) for n in names))
    cache: dict[str, bool] = {}

    def wanted(name: str) -> bool:
        hit = cache.get(name)
        if hit is None:
            hit = cache[name] = pattern.match(name) is not None
        return hit

    return wanted


def retain_freed_memory(trim_threshold: int = 2**31 - 1) -> bool:
    """Ask glibc's malloc to reuse freed memory rather than return it to the kernel: no blocks of
    their own (mmap) for large arrays, and no trimming of the heap until `trim_threshold` bytes are
    free at its top. Process-wide and lasting (the memory a process freed stays reserved until it
    exits), so the `tracer` command calls it and a library import never does. Returns whether
    malloc accepted both settings (False elsewhere than glibc, where nothing changes).
    """
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's <malloc.h>
    return mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, int(trim_threshold)) == 1
