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

from dataclasses import dataclass


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


UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
         "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
DEFAULT_SHARE = 0.5  # of the memory available: what the default budget of expanded weights may take


@dataclass(frozen=True)
class Size:
    """A number of bytes as a user wrote it ('6GB'), parsed once (`parse_size`): the CLI's --memory."""

    bytes: int
    text: str  # as written

    def __str__(self) -> str:
        return self.text


def parse_size(text) -> Size:
    """'6GB', '500MB', '1.5 GiB', '2e9', '1_000MB' → a Size (decimal units: 1 GB = 10⁹ bytes; GiB = 2³⁰):
    ASCII digits only, as every number typed on the command line (`١٠GB` is no size). One
    `ValueRefused` line naming the text for anything else (the CLI adds its flag)."""
    import re

    from ..errors import ValueRefused

    shown = repr(str(text)[:40])
    s = str(text).strip().replace("_", "")
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?(?:[eE][0-9]+)?|\.[0-9]+)\s*([A-Za-z]*)", s, flags=re.ASCII)
    unit = m.group(2).upper() if m else ""
    if not m or unit not in UNITS:
        raise ValueRefused(f"{shown} is not a size such as 6GB, 500MB or 1.5GiB (ASCII digits, then a unit)", "memory")
    value = float(m.group(1)) * UNITS[unit]
    if not value >= 1:
        raise ValueRefused(f"a size of {shown} is less than 1 byte", "memory")
    if not value < 2**62:
        raise ValueRefused(f"a size of {shown} is more bytes than any machine has", "memory")
    return Size(int(value), str(text))


def available_bytes() -> int:
    """What the machine could give without swapping (Linux's MemAvailable), within this process's
    limits (`memory_room`); `memory_room` alone where /proc/meminfo is not there."""
    room = memory_room()
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return min(room, int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    return room


def default_budget() -> int:
    """The default memory budget for weights expanded to float32: half of what is available now,
    so that the machine (and its page cache, which holds the mapped file) stays usable."""
    return int(available_bytes() * DEFAULT_SHARE)


def gb(n: int) -> str:
    """Bytes in words: '0.81 GB', '6 GB', '512 MB'."""
    if n >= 10**9:
        return f"{n / 1e9:.2f}".rstrip("0").rstrip(".") + " GB"
    if n >= 10**6:
        return f"{n / 1e6:.1f}".rstrip("0").rstrip(".") + " MB"
    if n >= 10**3:
        return f"{n / 1e3:.1f}".rstrip("0").rstrip(".") + " KB"
    return f"{n} bytes"
