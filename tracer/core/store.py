"""How recorded values are held: the ways each sublayer kind declares (`Sublayer.hold`), read by recording and loading alike.

A recorded pass keeps every intermediate, and a long one keeps hundreds of megabytes. Some values
need not be held whole, because nothing is lost:
  - a [head, query_pos, key_pos] array whose entries above the causal diagonal all hold one value
    (0 in `hook_pattern`, −∞ in `hook_attn_scores`) is held as its lower part (`CausalHalf`);
  - a value the store can recompute from others it holds is held as a recipe (`Derived`): the
    scores from Q·K (the same scaling and mask), a dense MLP's middle from `mlp.hook_pre` (and
    `hook_pre_linear`) in any pass of several positions (element-wise, so the same bits, and its
    memory goes back to the pass at once), and in long passes Q·K from Q and K (rotated, with RoPE).
    Each sublayer kind says which of its values may be held which way (`Sublayer.hold`; the config
    finds a name's kind, `Config.hold`). A recipe that is not
    exact by construction is kept only when recomputing it gave the same bits; a value recorded
    with `later` (each head's share of the attention output) is only ever a recipe, computed when
    first read.
Reading `store[name]` always gives the whole array, bit for bit the one recorded or read from a
file (rebuilt on access; the last REBUILT_KEPT rebuilt arrays are kept). Every array a store gives
is read-only: a trace records what was computed (copy an array to change it).

`Store.put(name, value, trusted)` applies the table: `trusted=True` for values the decoder just
made (a recipe exact by construction is not recomputed, a causal array's masked half is not
scanned), False for values read from a file, which could hold anything (every masked entry is
checked and every recipe recomputed). Core module: imports numpy only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import MutableMapping
from dataclasses import dataclass
from functools import partial

import numpy as np


PACK_MIN_QUERIES = 256  # passes with fewer query positions keep their arrays whole
REBUILT_KEPT = 4  # rebuilt arrays a store keeps, so that a renderer reading one again pays once


class CausalHalf:
    """A [head, query, key] array with one value (`fill`) above the causal diagonal, held as the
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


class Derived:
    """A value recomputed on access: `fn(*sources)`, a source being the name of another entry of
    the same store or an array (a weight, or a value the store does not hold under a name)."""

    nbytes = 0

    def __init__(self, fn, sources: tuple, shape: tuple, dtype):
        self.fn, self.sources, self.shape, self.dtype = fn, sources, tuple(shape), np.dtype(dtype)

    def rebuild(self, store) -> np.ndarray:
        with np.errstate(all="ignore"):  # as the pass that recorded its sources: ∞ and NaN where they arise, no warning
            return self.fn(*[store[s] if isinstance(s, str) else s for s in self.sources])


# --------------------------------------------------------------------------- the table


def long(a: np.ndarray) -> bool:
    """A pass of PACK_MIN_QUERIES positions or more ([pos, …] or [head, query_pos, key_pos])."""
    return a.ndim >= 2 and a.shape[-2 if a.ndim == 3 else 0] >= PACK_MIN_QUERIES


def several(a: np.ndarray) -> bool:
    """A [pos, …] value of a pass of more than one position (a decode step's stay whole: nothing to save)."""
    return a.ndim >= 2 and a.shape[-2] > 1


def long_prefill(a: np.ndarray) -> bool:
    """A long [head, query_pos, key_pos] array of a pass that computed every position (no KV cache)."""
    return a.ndim == 3 and long(a) and a.shape[1] == a.shape[2]


class Shaped:
    """An array's shape without its numbers: what a way's `when` reads (`long`, `long_prefill`) when a
    run's holdings are estimated before it runs (`held_bytes`)."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.ndim = len(self.shape)


def _packs(shape) -> bool:
    """A [head, query, key] array long enough to be held as its causal half (a pass's queries among its keys)."""
    return len(shape) == 3 and PACK_MIN_QUERIES <= shape[1] <= shape[2]


@dataclass(frozen=True)
class Causal:
    """Hold the lower part when every entry above the diagonal is `fill`."""

    fill: float

    def held(self, config, name: str, shape, itemsize: int, recorded) -> int | None:
        """Bytes the lower part of an array of `shape` takes (None: it would be held whole)."""
        if not _packs(shape):
            return None
        n_q, n_k = shape[1], shape[2]
        return shape[0] * (n_q * (n_k - n_q) + n_q * (n_q + 1) // 2) * itemsize

    def hold(self, store: "Store", name: str, a: np.ndarray, trusted: bool):
        if not _packs(a.shape):
            return None
        first = a.shape[2] - a.shape[1]  # key index of the first query
        if not trusted and not all((a[:, i, first + i + 1 :] == self.fill).all() for i in range(a.shape[1])):
            return None
        if self.fill == 0.0:  # softmax weights: a row that went NaN is NaN above the diagonal too
            diag = a[:, np.arange(a.shape[1]), first + np.arange(a.shape[1])]  # [head, query]
            if np.isnan(diag).any():
                return None
        return CausalHalf(a, self.fill)


@dataclass(frozen=True)
class Recipe:
    """Hold `fn(config, layer, *sources)` instead of the array, when `when(array)` and the store holds
    every source (names in the same block). `exact`: the same bits by construction (element-wise
    IEEE operations), so a value just recorded is not recomputed to check it; anything else is
    recomputed once and kept as a recipe only when the bits agree. `remember`: a value read from
    a file stays at hand once checked (the next recipe in the table reads it). `sources`: names, or a
    function of (config, layer) giving them."""

    fn: object
    sources: object  # names in the block, or a function of (config, layer) giving them
    when: object = None
    exact: bool = False
    remember: bool = False

    def held(self, config, name: str, shape, itemsize: int, recorded) -> int | None:
        """0 when a pass recording `recorded` (names) would hold `name` of `shape` as this recipe, else None
        (a recipe that is not exact is taken to give the same bits: an estimate)."""
        if self.when is not None and not self.when(Shaped(shape)):
            return None
        return 0 if all(s in recorded for s in self.parts(config, name)[0]) else None

    def hold(self, store: "Store", name: str, a: np.ndarray, trusted: bool):
        if self.when is not None and not self.when(a):
            return None
        names, fn = self.parts(store.config, name)
        for s in names:
            if s not in store:
                return None
        d = Derived(fn, names, a.shape, a.dtype)
        if trusted and self.exact:
            return d
        again = d.rebuild(store)
        if not (again.dtype == a.dtype and again.shape == a.shape and np.array_equal(again, a)):
            return None
        if self.remember and not trusted:
            store.remember(name, a)
        return d

    def parts(self, config, name: str) -> tuple[tuple, object]:
        """(the full names of the sources, the recipe as a function of them) for `name`, made once per
        config and name (a decode step records the same names every pass)."""
        cache = _remembered(config, "_recipe_parts")
        key = (id(self), name)
        hit = cache.get(key)
        if hit is None:
            layer, leaf = _split(name)
            block = name[: len(name) - len(leaf)]
            sources = self.sources(config, layer) if callable(self.sources) else self.sources
            hit = (tuple(block + s for s in sources), partial(self.fn, config, layer))
            if len(cache) < _WAYS_MAX:
                cache[key] = hit
        return hit


@dataclass(frozen=True)
class Later:
    """A value a run records only as a recipe (`Recorder.later`: each head's share of the attention output,
    a recurrent state per position), computed when first read; read from a file, it is held whole."""

    def held(self, config, name: str, shape, itemsize: int, recorded) -> int | None:
        return 0

    def hold(self, store: "Store", name: str, a: np.ndarray, trusted: bool):
        return None


def held_bytes(config, name: str, shape, itemsize: int, recorded) -> int:
    """Bytes a pass that records the names `recorded` holds of `name`, an array of `shape` and `itemsize`:
    by the first of its ways that would take it (`Config.hold`), else whole. What `tracer.run.footprint`
    estimates a run by, before it runs."""
    for way in config.hold(name) or ():
        got = way.held(config, name, shape, itemsize, recorded)
        if got is not None:
            return got
    return int(np.prod(shape, dtype=np.int64)) * itemsize


def _split(name: str) -> tuple[int, str]:
    """(layer, 'attn.hook_pattern') of 'blocks.3.attn.hook_pattern' (the config said it is a layer's name)."""
    _, layer, leaf = name.split(".", 2)
    return int(layer), leaf


_WAYS_MAX = 200_000  # names remembered per config (a model of 1,024 layers records about 30,000)


def _remembered(config, key: str) -> dict:
    """A dict the config keeps under `key` (made once per config): answers worked out per recorded name."""
    cache = config.__dict__.get(key)
    if cache is None:
        cache = config.__dict__[key] = {}
    return cache


def _ways(config, name: str, cache: dict | None = None):
    """`config.hold(name)`, remembered per config (every pass records the same names; a decode step
    looks nothing up in the config)."""
    if cache is None:
        cache = _remembered(config, "_held_ways")
    ways = cache.get(name, False)
    if ways is False:
        ways = config.hold(name)
        if len(cache) < _WAYS_MAX:
            cache[name] = ways
    return ways


# --------------------------------------------------------------------------- the store


class Store(MutableMapping):
    """Recorded name → array, in recording order, held as the config's sublayer kinds allow (`Config.hold`; None: every
    array whole). Entries held as a CausalHalf or a Derived are rebuilt on access."""

    def __init__(self, config=None, items=()):
        self.config = config
        self._d: dict = {}
        self._rebuilt: OrderedDict = OrderedDict()
        self._held_ways = _remembered(config, "_held_ways") if config is not None else None
        self.update(items)

    def put(self, name: str, value, trusted: bool = True) -> None:
        """Hold `value` under `name` as the table allows (see the module docstring)."""
        known = self._held_ways
        ways = None if known is None else known.get(name, False)
        if ways is False:
            ways = _ways(self.config, name, known)
        held = value
        if ways and isinstance(value, np.ndarray) and value.dtype.kind == "f":
            for way in ways:
                try:
                    got = way.hold(self, name, value, trusted)
                except (ValueError, TypeError, IndexError, FloatingPointError):  # a damaged file: keep it as read
                    got = None
                if got is not None:
                    held = got
                    break
        if isinstance(held, np.ndarray):
            held.setflags(write=False)  # a trace records what was computed: copy an array to change it
        self._d[name] = held
        if held is value and self._rebuilt:
            self._rebuilt.pop(name, None)

    def later(self, name: str, fn, sources: tuple, shape: tuple, dtype) -> None:
        """Hold `fn(*sources)` as a recipe only, computed when first read."""
        self._d[name] = Derived(fn, sources, shape, dtype)
        self._rebuilt.pop(name, None)

    def __getitem__(self, name: str) -> np.ndarray:
        v = self._d[name]
        if not isinstance(v, (CausalHalf, Derived)):
            return v
        hit = self._rebuilt.get(name)
        if hit is None:
            return self.remember(name, v.rebuild(self))
        self._rebuilt.move_to_end(name)
        return hit

    def __contains__(self, name) -> bool:  # without rebuilding anything
        return name in self._d

    def remember(self, name: str, value: np.ndarray) -> np.ndarray:
        """Keep `value` (what entry `name` rebuilds to) among the last REBUILT_KEPT rebuilt arrays,
        read-only, so that the next read costs nothing. The one place that keeps a rebuilt array."""
        hit = value.view()
        hit.setflags(write=False)
        self._rebuilt[name] = hit
        while len(self._rebuilt) > REBUILT_KEPT:
            self._rebuilt.popitem(last=False)
        return hit

    def __setitem__(self, name: str, value) -> None:
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
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
