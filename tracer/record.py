"""Recording intermediates by name, inline, as TransformerLens's hooks do.

`x = rec("hook_resid_mid", resid_pre + attn_out)` stores the value (when the name is wanted)
and passes it through. `rec.scope("blocks.0")` gives a recorder that prefixes names, so a
full name is never typed twice. What is wanted is a list of globs (`blocks.*.attn.hook_pattern`)
or None for everything. Core module: imports numpy only.
"""

from __future__ import annotations

import fnmatch
import re


class Recorder:
    def __init__(self, names=None, prefix: str = "", store: dict | None = None, _wanted=None):
        self.prefix = prefix
        self.store: dict = {} if store is None else store
        if _wanted is not None:
            self._wanted = _wanted
        else:
            self._wanted = _compile(names)

    def __call__(self, name: str, value):
        full = self.prefix + name
        if self._wanted(full):
            self.store[full] = value
        return value

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
