"""A model bigger than memory: its layers expanded to float32 when a pass reaches them, kept while they
fit a byte budget (least recently used evicted first, whole layers), and the unembedding applied in
row blocks when it does not fit beside them.

The decoder asks for layer l's weights in the fast layout (`tracer.core.fast.Layer`) as it always did,
`weights.layers[l]` (or iterating `weights.layers`): `Layers` is that sequence, and how a layer
is expanded (a file's storage types, a family's names) is the `build(l)` function it is given
(`tracer.readers.source`). Nothing here knows a format. What the layer-by-layer run computes is
the expanded run's arithmetic, operation for operation: the same float32 arrays in the same
layouts, and the unembedding's row blocks are the blocks an expanded unembedding is multiplied
in too (`tracer.core.fast.row_blocks`: the same products on the same numbers).

The trade of least-recently-used eviction: a pass visits layers 0, 1, …, L−1 in turn, so when the
budget holds k < L layers, the next pass finds none of the ones it needs first (each pass expands
every layer again); the budget then bounds the memory, and what it buys is the unembedding
expanded once beside a layer. A budget that holds every layer expands each layer once. A recorded
pass keeps no layer alive: the recipe of each head's result keeps W_O as a `Refetched`, which expands
that one tensor again when the result is read after its layer was let go.
Core module: imports numpy only.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import fields, is_dataclass

import numpy as np

from .fast import rows_times, times_columns


def owned_bytes(arrays) -> int:
    """Bytes the arrays hold of their own (a view counts its base once; a mapped file's pages count 0)."""
    seen: dict[int, int] = {}
    for a in arrays:
        if not isinstance(a, np.ndarray):
            continue
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        if root.flags.owndata:
            seen[id(root)] = root.nbytes
    return sum(seen.values())


def layer_arrays(layer) -> list:
    """Every array a `tracer.core.fast.Layer` holds, its sublayers' weights included (arrays, tuples of
    them, and the dataclasses each kind's layout is made of: `Affine`s and the kinds' weights)."""
    out: list = []
    todo, seen = [layer], set()
    while todo:
        v = todo.pop()
        if id(v) in seen or v is None or isinstance(v, (str, int, float, bool)):
            continue
        seen.add(id(v))
        if isinstance(v, np.ndarray):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            todo.extend(v)
        elif is_dataclass(v) and not isinstance(v, type):
            todo.extend(getattr(v, f.name) for f in fields(v) if f.name not in ("kind", "cfg"))
    return out


class Layers:
    """The layers of a streamed model, by index: `build(l)` → (Layer, layer l's parameters by
    TransformerLens name), called when layer l is not held; what is held stays within `budget`
    bytes. `on_expand(l, expanding)` (if set) is called each time layer l is asked for, `expanding`
    saying whether it must be expanded (a progress bar; a Ctrl-C kept until the next layer);
    `prefetch(l + 1)` (if given) each time layer l is expanded, so that reading the file overlaps the work."""

    def __init__(self, n_layers: int, build, budget: int, layer_bytes: int, param=None, prefetch=None):
        import threading

        self.n, self.build, self.budget, self.layer_bytes = n_layers, build, budget, layer_bytes
        self.param = param  # (l, name) → layer l's parameter `name` expanded again alone (None: the whole layer)
        self.prefetch = prefetch  # l → layer l's stored bytes asked to be read ahead (l = n_layers: the unembedding)
        self.lock = threading.Lock()  # `tracer serve`'s workers share a model: one expansion at a time
        self.held: OrderedDict = OrderedDict()  # l → (Layer, params, bytes), least recently used first
        self.expansions = 0  # layers expanded so far (a layer expanded again after its eviction counts again)
        self.on_expand = None
        self.out_rows = False  # keep each layer's W_out transposed too (`tracer.core.fast.add_out_rows`)

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for l in range(self.n):
            yield self[l]

    def __getitem__(self, l: int):
        return self.get(l)[0]

    @property
    def held_bytes(self) -> int:
        return sum(b for _, _, b in self.held.values())

    def params(self, l: int) -> dict:
        """Layer l's parameters by TransformerLens name (expanding it when it is not held)."""
        return self.get(l)[1]

    def get(self, l: int) -> tuple:
        if not 0 <= l < self.n:
            raise IndexError(l)
        if self.on_expand is not None:
            self.on_expand(l, l not in self.held)
        with self.lock:
            return self._get(l)

    def _get(self, l: int) -> tuple:
        if l in self.held:
            self.held.move_to_end(l)
            layer, params, _ = self.held[l]
            return layer, params
        while self.held and self.held_bytes + self.layer_bytes > self.budget:
            self.held.popitem(last=False)  # the least recently used layer
        if self.prefetch is not None and l + 1 not in self.held:  # the file's next layer read while this one is expanded
            self.prefetch(l + 1)
        layer, params = self.build(l)
        self.expansions += 1
        for sub in (layer.attn, layer.mlp):  # the weights a recorded recipe keeps (softmax attention's W_O for each head's result)
            for name in getattr(sub, "refetched", ()):
                if isinstance(getattr(sub, name), np.ndarray):
                    setattr(sub, name, Refetched(self, l, f"blocks.{l}.{sub.kind.scope}.{name}", getattr(sub, name)))
        if self.out_rows and hasattr(layer.mlp, "keep_rows"):
            layer.mlp.keep_rows()  # W_out transposed, for one-position steps (`tracer.core.fast.add_out_rows`)
        self.held[l] = (layer, params, owned_bytes(layer_arrays(layer) + list(params.values())))
        return layer, params


class Refetched:
    """A streamed layer's weight as a recorded recipe keeps it (each head's share of W_O,
    `hook_result`, is computed only when read): the held layer's array while layer l is held, else
    that parameter expanded again, so that a trace does not keep every layer's W_O alive."""

    def __init__(self, layers: Layers, l: int, name: str, arr: np.ndarray):
        self.layers, self.l, self.name = layers, l, name
        self.shape, self.dtype, self.ndim = arr.shape, arr.dtype, arr.ndim

    def __array__(self, dtype=None, copy=None):
        held = self.layers.held.get(self.l)
        if held is not None:
            arr = held[1][self.name]
        elif self.layers.param is not None:
            arr = self.layers.param(self.l, self.name)
        else:
            arr = self.layers.build(self.l)[1][self.name]  # not counted: nothing is kept
        return arr if dtype is None else arr.astype(dtype, copy=False)


class RowLookup:
    """A [rows, cols] matrix read a few rows at a time (`stored.rows(lo, hi)`): the embedding,
    whose lookup `W_E[tokens]` expands only the rows of the tokens asked for."""

    def __init__(self, stored):
        self.stored = stored
        self.shape = stored.shape
        self.dtype = np.dtype(np.float32)
        self.ndim = len(self.shape)

    def __getitem__(self, ids) -> np.ndarray:  # [pos] ids → [pos, cols]
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim == 0:
            return self.stored.rows(int(ids), int(ids) + 1)[0]
        if ids.size and (ids.min() < 0 or ids.max() >= self.shape[0]):
            raise IndexError(f"row {int(ids.max())} of {self.shape[0]}")
        wanted = np.unique(ids)  # [k] sorted
        rows = np.stack([self.stored.rows(int(i), int(i) + 1)[0] for i in wanted]) if wanted.size else \
            np.empty((0, *self.shape[1:]), np.float32)
        return rows[np.searchsorted(wanted, ids)]  # [pos, cols]

    def __array__(self, dtype=None, copy=None):
        arr = self.stored.expand()
        return arr if dtype is None else arr.astype(dtype)


class StreamedW:
    """W_U [d_model, d_vocab] as the transposed rows of a stored [d_vocab, d_model] matrix, multiplied
    in the unembedding's blocks (`tracer.core.fast.row_blocks`): `x @ W` gives what x @ W_U gives whole."""

    __array_ufunc__ = None  # `x @ W` with x a numpy array: numpy hands it to __rmatmul__

    def __init__(self, stored):
        self.stored = stored
        self.shape = stored.shape[::-1]  # [d_model, d_vocab]
        self.dtype = np.dtype(np.float32)
        self.ndim = 2

    def rows(self, lo: int, hi: int) -> np.ndarray:  # → [hi - lo, d_model] (W_U's columns lo..hi, as rows)
        return self.stored.rows(lo, hi)

    def __rmatmul__(self, x: np.ndarray) -> np.ndarray:  # [pos, d_model] → [pos, d_vocab]
        return times_columns(x, lambda lo, hi: self.rows(lo, hi).T, self.shape[1], self.dtype)


class StreamedUnembed:
    """`tracer.core.fast.Affine(W_U, b_U, by_rows=True)` with W_U streamed: the same blocks, each expanded
    when it is multiplied."""

    by_rows = True
    rows = None

    def __init__(self, W: StreamedW, b: np.ndarray | None):
        self.W, self.b = W, b

    def __call__(self, x: np.ndarray) -> np.ndarray:  # [pos, d_model] → [pos, d_vocab]
        flat = x.reshape(-1, x.shape[-1])  # [pos, d_model]
        out = rows_times(self.W.rows, self.W.shape[1], flat, self.W.dtype)  # [pos, d_vocab], Fortran-ordered
        if self.b is not None:
            out += self.b
        return out.reshape(*x.shape[:-1], out.shape[-1])


class Params:
    """A streamed model's parameters by TransformerLens name, as a read-only mapping: the small
    ones around the layers held, a layer's expanded when asked for (`layers.params(l)`), and the
    embedding expanded whole only when someone asks for W_E itself."""

    def __init__(self, top: dict, layers: Layers, names: list, embed=None):
        self.top, self.layers, self.names, self.embed = top, layers, list(names), embed

    def __getitem__(self, name: str):
        if name in self.top:
            return self.top[name]
        if name.startswith("blocks."):
            l = int(name.split(".")[1])
            params = self.layers.params(l)
            if name in params:
                return params[name]
        if name in ("W_E", "W_U") and self.embed is not None and name in self.names:
            arr = self.embed[name]()
            return arr
        raise KeyError(name)

    def get(self, name: str, default=None):
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name) -> bool:
        return name in self.names

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def keys(self):
        return list(self.names)

    def items(self):
        return ((k, self[k]) for k in self.names)

    def values(self):
        return (self[k] for k in self.names)
