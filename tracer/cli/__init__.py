"""The `tracer` command (typer): `tracer.cli.app` and the entry point `main`.

`app` lists the commands, its error handling and shared options; `run`, `teach`, `learn`, `web` and
`lessons` register the commands on it.
"""

from __future__ import annotations

import sys

from .app import app

# Importing them registers their commands on `app`, in the order `tracer --help` lists them.
from . import run  # noqa: E402  trace, show, replay, scenarios, tokens
from . import teach  # noqa: E402  demo
from . import learn  # noqa: E402  train, download, models
from . import web  # noqa: E402  serve
from . import lessons  # noqa: E402  lesson new, lesson check

COMMANDS = (run, teach, learn, web, lessons)

__all__ = ["app", "main"]


def main() -> None:
    for stream in (sys.stdout, sys.stderr):
        # A terminal or pipe that is not UTF-8 (PYTHONIOENCODING=ascii, an old code page) gets '?'
        # for the characters it cannot show (─, ␣, ·) rather than a crash.
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding not in ("utf8", "utf8sig") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="replace")
            except (ValueError, OSError):
                pass
    if len(sys.argv) > 1 and sys.argv[1] not in ("--help", "-h", "tokens", "scenarios"):
        from ..core.memory import retain_freed_memory

        retain_freed_memory()  # reuse freed arrays instead of faulting fresh pages in (BENCHMARKS.md)
    app()
