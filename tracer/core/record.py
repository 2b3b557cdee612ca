"""Recording intermediates by name, inline, as TransformerLens's hook points do.

`x = rec("hook_resid_mid", resid_pre + attn_out)` records the value (when the name is wanted) and
passes it through. `rec.scope("blocks.0")` gives a recorder that prefixes names, so a full name is
never typed twice. What is wanted is a list of globs (`blocks.*.attn.hook_pattern`), or None for
everything. How a recorded value is held is the store's business (`tracer.core.store`), not the
equations'.

Hooks (`Hooks`, TransformerLens's `run_with_hooks`): at a hook point a hook names, its function
gets the value and returns the one to use instead; since `rec(name, value)` is what passes the value
on, everything downstream is computed from the replacement, and the replacement is what is recorded.
Core module: imports numpy only.
"""

from __future__ import annotations

import fnmatch
import re

import numpy as np

from ..errors import TracerError, near
from .store import Store

# Recorded beside the computation, not part of it: replacing them would change nothing downstream.
NOT_FLOWING = ("hook_scale", "attn.hook_result")


class Hooks:
    """Hook point names (globs: `blocks.*.attn.hook_z`) → `fn(value)` or `fn(value, name)`, each
    returning the value to use instead: an array of the value's shape, finite numbers. `known`: every
    name the model records (`tracer.core.decoder.hook_names`); a name that matches none is refused with
    the close ones. `changed` collects the names whose value was replaced."""

    def __init__(self, hooks: dict, known: list[str]):
        if not isinstance(hooks, dict):
            raise TracerError(f"hooks: expected a dict of hook name → function, got {type(hooks).__name__}")
        self._fns = []
        for pattern, fn in hooks.items():
            if not isinstance(pattern, str) or not callable(fn):
                raise TracerError(f"hooks: {pattern!r} must name hook points and map to a function")
            hit = [n for n in known if fnmatch.fnmatchcase(n, pattern)]
            if not hit:
                raise TracerError(f"hooks: no hook point is called {pattern!r}{near(pattern, known)}")
            still = [n for n in hit if n.endswith(NOT_FLOWING)]
            if still and len(still) == len(hit):
                raise TracerError(f"hooks: {pattern!r} is recorded beside the computation, not part of it (replacing it "
                                  f"changes nothing downstream); hook the value it is computed from instead")
            self._fns.append((re.compile(fnmatch.translate(pattern)), fn, takes_name(fn)))
        self.changed: list[str] = []
        self._cache: dict = {}

    def applies(self, name: str):
        hit = self._cache.get(name)
        if hit is None:
            hit = self._cache[name] = tuple(f for f in self._fns if f[0].match(name) and not name.endswith(NOT_FLOWING))
        return hit

    def __call__(self, name: str, value):
        for _, fn, two in self.applies(name):
            try:
                out = fn(value, name) if two else fn(value)
            except TracerError:
                raise
            except Exception as e:  # the hook's own error, named: not a traceback from deep inside
                raise TracerError(f"hook on {name}: {type(e).__name__}: {str(e)[:200]}") from None
            value = _checked(out, value, name)
            if name not in self.changed:
                self.changed.append(name)
        return value


def takes_name(fn) -> bool:
    """Whether `fn` takes the hook point's name as well as the value."""
    import inspect

    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        return False
    return len(params) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def _checked(out, value, name: str) -> np.ndarray:
    """A hook's result as an array of the value's shape and dtype, finite; else one line naming the hook."""
    if not isinstance(out, (np.ndarray, list, tuple, int, float, np.number)) or isinstance(out, bool):
        raise TracerError(f"hook on {name}: returned {type(out).__name__}, not an array")
    arr = np.asarray(out)
    if arr.dtype.kind not in "iuf":
        raise TracerError(f"hook on {name}: returned an array of {arr.dtype}, not of numbers")
    if arr.shape != value.shape:
        raise TracerError(f"hook on {name}: returned shape {list(arr.shape)}; the value has shape {list(value.shape)}")
    arr = arr.astype(value.dtype, copy=True)
    if not np.isfinite(arr).all():
        raise TracerError(f"hook on {name}: returned NaN or infinite numbers")
    return arr


class Recorder:
    """`rec(name, value)` records and passes on. `_wanted`: True (everything), False (nothing) or a
    function of the full name; the first two are answered without a call, and a recorder that records
    and hooks nothing builds no names at all (its scopes are itself): a decode step makes a few hundred
    of these calls, so each is kept to what it must do."""

    __slots__ = ("prefix", "store", "_wanted", "hooks", "_idle")

    def __init__(self, names=None, config=None, *, prefix: str = "", store: Store | None = None, _wanted=None,
                 hooks: Hooks | None = None):
        self.prefix = prefix
        self.store: Store = Store(config) if store is None else store
        self._wanted = _wanted if _wanted is not None else _compile(names)
        self.hooks = hooks
        self._idle = self._wanted is False and hooks is None  # records nothing, replaces nothing

    def __call__(self, name: str, value):
        """Record `value` under this scope's `name` (when wanted) and return it (a hook's replacement, if one applies)."""
        if self._idle:
            return value
        full = self.prefix + name
        if self.hooks is not None:
            value = self.hooks(full, value)
        wanted = self._wanted
        if wanted is True or (wanted is not False and wanted(full)):
            self.store.put(full, value)
        return value

    def later(self, name: str, fn, *sources, shape: tuple) -> None:
        """Record `fn(*sources)` (of `shape`, in the first source's dtype) without computing it: the
        store computes it when it is first read. For a value the forward pass never needs on its
        own (each head's share of W_O)."""
        wanted, full = self._wanted, self.prefix + name
        if wanted is True or (wanted is not False and wanted(full)):
            self.store.later(full, fn, sources, shape, sources[0].dtype)

    def wants(self, name: str) -> bool:
        """Whether `name` (in this scope) is recorded: for values that cost work only to record."""
        wanted = self._wanted
        return wanted is True or (wanted is not False and wanted(self.prefix + name))

    def scope(self, prefix: str) -> "Recorder":
        if self._idle:  # no name is ever built
            return self
        return Recorder(prefix=self.prefix + prefix + ".", store=self.store, _wanted=self._wanted, hooks=self.hooks)


def _compile(names):
    """True for everything (names None), False for nothing, else a function of a full name (cached per name)."""
    if names is None:
        return True
    if isinstance(names, str):
        names = [names]
    names = list(names)
    if not names:
        return False
    pattern = re.compile("|".join(fnmatch.translate(n) for n in names))
    cache: dict[str, bool] = {}

    def wanted(name: str) -> bool:
        hit = cache.get(name)
        if hit is None:
            hit = cache[name] = pattern.match(name) is not None
        return hit

    return wanted


NOTHING = Recorder(names=[])  # records nothing: what `forward` uses when it is given no recorder
