"""Process-level behaviour: `import tracer.cli` stays free of numpy (fast `--help`), and glibc keeps
freed memory for reuse once `tracer.core.memory.retain_freed_memory` asked it to."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # every test here starts a Python process


def test_importing_the_cli_does_not_import_numpy():
    code = "import sys, tracer.cli; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.strip() == "False"
    code = "import tracer; print(tracer.load.__module__, tracer.Trace.__name__, tracer.__version__ is not None)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.split() == ["tracer.loaders", "Trace", "True"]


_RSS_AFTER_FREE = """
import sys, numpy as np
if sys.argv[1] == "retain":
    from tracer.core.memory import retain_freed_memory
    assert retain_freed_memory()
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
a = np.ones(200_000_000 // 8)  # 200 MB, touched
held = rss()
del a
print(round((held - rss()) / 1e6))  # MB given back to the kernel by the free
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or __import__("platform").libc_ver()[0] != "glibc",
                    reason="mallopt is glibc's")
def test_retained_memory_stays_with_the_process_for_reuse():
    def returned(mode):
        out = subprocess.run([sys.executable, "-c", _RSS_AFTER_FREE, mode], capture_output=True, text=True, check=True,
                             timeout=60)
        return int(out.stdout)

    assert returned("default") > 150  # glibc unmaps a freed 200 MB block at once
    assert returned("retain") < 10  # kept for the next arrays: no page faults to get it back
