"""Recording intermediates by name, inline, as TransformerLens's hook points do.

`x = rec("hook_resid_mid", resid_pre + attn_out)` records the value (when the name is wanted) and
passes it through. `rec.scope("blocks.0")` gives a recorder that prefixes names, so a full name is
never typed twice. What is wanted is a list of globs (`blocks.*.attn.hook_pattern`), or None for
everything. How a recorded value is held is the store's business (`tracer.core.store`), not the
equations'.

Hooks (`Hooks`, TransformerLens's `run_with_hooks`): at a hook point a hook names, its function
gets the value and returns the one to use instead; since `rec(name, value)` is what passes the value
on, everything downstream is computed from the replacement, and the replacement is what is recorded.
A hook may change its argument in place: where the value is a view of the weights or of a value
already recorded (read-only), the hook is given a copy, so nothing it does reaches either.
Core module: imports numpy only.
"""

from __future__ import annotations

import fnmatch
import re

import numpy as np

from ..errors import TracerError, near
from .hooks import find
from .store import Store

# Recorded beside the computation, not part of it: replacing them would change nothing downstream.
NOT_FLOWING = ("hook_scale", "attn.hook_result")


class Hooks:
    """Hook point names (globs: `blocks.*.attn.hook_z`) → `fn(value)`, each returning the value to use
    instead: an array of the value's shape, finite numbers (−∞ too where the value holds it and the
    hook table says the name carries it: the causal mask's). `fn` is given the hook point's name as
    well when it asks for it (`name_passing`). `known`: every name the model records
    (`tracer.core.decoder.hook_names`); a name that matches none is refused with the close ones.
    `changed` collects the names whose value was replaced."""

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
            self._fns.append((re.compile(fnmatch.translate(pattern)), caller(fn)))
        self.changed: list[str] = []
        self._cache: dict = {}

    def applies(self, name: str):
        hit = self._cache.get(name)
        if hit is None:
            hit = self._cache[name] = tuple(f for f in self._fns if f[0].match(name) and not name.endswith(NOT_FLOWING))
        return hit

    def __call__(self, name: str, value):
        """`value` as the hooks on `name` leave it: the same array when none applies, else a new one."""
        fns = self.applies(name)
        if not fns:
            return value
        hook = find(name)
        masked = np.isneginf(value) if hook is not None and hook.masked else None  # where −∞ may stay
        if hook is not None and hook.excludes:  # −∞ may go anywhere: it removes that entry (a router's expert)
            masked = np.ones(value.shape, dtype=bool)
        for _, call in fns:
            given = value if value.flags.writeable and value.base is None else value.copy()  # weights' rows, a recorded array
            try:
                out = call(given, name)
            except TracerError:
                raise
            except Exception as e:  # the hook's own error, named: not a traceback from deep inside
                raise TracerError(f"hook on {name}: {type(e).__name__}: {str(e)[:200]}") from None
            value = _checked(out, value, name, masked)
            if name not in self.changed:
                self.changed.append(name)
        return value


def name_passing(fn) -> str | int | None:
    """How `fn` asks for the hook point's name besides the value: a parameter (after the first) called
    `hook` or `name`, given by keyword ("hook" / "name"); a second positional parameter without a
    default, given by position (2); else not at all (None). So `lambda x, i=i: …` and `def f(x,
    scale=2.0)`, Python's way of binding a loop variable or an option, get the value alone."""
    import inspect

    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or ufunc without a signature: the value alone
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    rest = params[1:] if positional and params[0] is positional[0] else params
    for p in rest:
        if p.name in ("hook", "name") and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            return p.name
    if len(positional) >= 2 and positional[1].default is inspect.Parameter.empty:
        return 2
    return None


def caller(fn):
    """`fn` as a function of (value, name), passing the name only as `fn` asks for it (`name_passing`)."""
    how = name_passing(fn)
    if how is None:
        return lambda value, name: fn(value)
    if how == 2:
        return fn
    return lambda value, name: fn(value, **{how: name})


def _checked(out, value, name: str, masked=None) -> np.ndarray:
    """A hook's result as an array of the value's shape and dtype, finite (or −∞ where `masked`);
    else one line naming the hook."""
    if not isinstance(out, (np.ndarray, list, tuple, int, float, np.number)) or isinstance(out, bool):
        raise TracerError(f"hook on {name}: returned {type(out).__name__}, not an array")
    try:
        arr = np.asarray(out)
    except (ValueError, TypeError):  # a ragged list: rows of different lengths
        raise TracerError(f"hook on {name}: returned a ragged {type(out).__name__} (rows of different lengths), not an "
                          f"array of the value's shape {list(value.shape)}") from None
    if arr.dtype.kind not in "iuf":
        raise TracerError(f"hook on {name}: returned an array of {arr.dtype}, not of numbers")
    if arr.shape != value.shape:
        raise TracerError(f"hook on {name}: returned shape {list(arr.shape)}; the value has shape {list(value.shape)}")
    arr = arr.astype(value.dtype, copy=True)
    finite = np.isfinite(arr)
    if not finite.all():
        bad = ~finite if masked is None else ~(finite | (masked & np.isneginf(arr)))
        if bad.any():
            where = "" if masked is None else " (−∞ only where the causal mask has it)"
            raise TracerError(f"hook on {name}: returned NaN or infinite numbers{where}")
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
        trusted = True
        if self.hooks is not None:
            hooked = self.hooks(full, value)
            trusted, value = hooked is value, hooked  # a hook's value is held as a file's is: no recipe taken on trust
        wanted = self._wanted
        if wanted is True or (wanted is not False and wanted(full)):
            self.store.put(full, value, trusted)
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
        inner = _new_recorder(Recorder)  # what __init__ would set, without its keywords (a few per layer and pass)
        inner.prefix, inner.store, inner._wanted, inner.hooks, inner._idle = (self.prefix + prefix + ".", self.store,
                                                                            self._wanted, self.hooks, False)
        return inner


_new_recorder = object.__new__


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
