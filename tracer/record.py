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
