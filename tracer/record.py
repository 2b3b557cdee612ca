"""Recording intermediates by name, inline, as TransformerLens's hook points do.

`x = rec("hook_resid_mid", resid_pre + attn_out)` records the value (when the name is wanted) and
passes it through. `rec.scope("blocks.0")` gives a recorder that prefixes names, so a full name is
never typed twice. What is wanted is a list of globs (`blocks.*.attn.hook_pattern`), or None for
everything. How a recorded value is held is the store's business (`tracer.store`), not the
equations'. Core module: imports numpy only.
"""

from __future__ import annotations

import fnmatch
import re

from .store import Store


class Recorder:
    def __init__(self, names=None, config=None, *, prefix: str = "", store: Store | None = None, _wanted=None):
        self.prefix = prefix
        self.store: Store = Store(config) if store is None else store
        self._wanted = _wanted if _wanted is not None else _compile(names)

    def __call__(self, name: str, value):
        """Record `value` under this scope's `name` (when wanted) and return it."""
        full = self.prefix + name
        if self._wanted(full):
            self.store.put(full, value)
        return value

    def later(self, name: str, fn, *sources, shape: tuple) -> None:
        """Record `fn(*sources)` (of `shape`, in the first source's dtype) without computing it: the
        store computes it when it is first read. For a value the forward pass never needs on its
        own (each head's share of W_O)."""
        full = self.prefix + name
        if self._wanted(full):
            self.store.later(full, fn, sources, shape, sources[0].dtype)

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


NOTHING = Recorder(names=[])  # records nothing: what `forward` uses when it is given no recorder
