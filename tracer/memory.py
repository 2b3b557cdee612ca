"""Process memory: ask glibc's malloc to keep freed memory for reuse (the `tracer` command does),
and how much memory the process may still take (`memory_room`, what a file's declared sizes are
weighed against before anything is allocated).

A recorded pass allocates hundreds of megabytes of new arrays, and glibc's malloc hands every large
freed block straight back to the kernel (blocks over 32 MB always, smaller ones when the heap's free
top exceeds a threshold), so the next pass faults the same memory in again page by page; on a
small machine that can cost more than the arithmetic (BENCHMARKS.md). A program using the API may
call `retain_freed_memory` too; a library import never does. Standard library only.
"""

from __future__ import annotations


def retain_freed_memory(trim_threshold: int = 2**31 - 1) -> bool:
    """No blocks of their own (mmap) for large arrays, and no trimming of the heap until
    `trim_threshold` bytes are free at its top. Process-wide and lasting (the memory a process
    freed stays reserved until it exits). Returns whether malloc accepted both settings (False
    elsewhere than glibc, where nothing changes)."""
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


def memory_room() -> int:
    """Bytes this process can still allocate, as far as its limits tell: its address-space limit
    (`ulimit -v`, `resource.RLIMIT_AS`) less what it has mapped already, and never more than the
    machine's memory and swap. What a file declares is weighed against this before it is allocated."""
    import os

    room = []
    try:
        room.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") + _swap_bytes())
    except (ValueError, OSError, AttributeError):
        pass
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            room.append(max(soft - _mapped_bytes(), 0))
    except (ImportError, ValueError, OSError):
        pass
    return min(room) if room else 2**62


def _mapped_bytes() -> int:
    """The address space this process has mapped (what RLIMIT_AS counts); 0 where unknown."""
    import os

    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _swap_bytes() -> int:
    """The machine's swap space (Linux's /proc/meminfo); 0 where unknown."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"SwapTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
