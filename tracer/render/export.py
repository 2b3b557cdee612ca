"""Writing exactly what was shown: Rich's console recording as HTML, SVG or text.

The files are self-contained and fetch nothing from the network: Rich's SVG template loads
the Fira Code font from a CDN, so its `@font-face` rules are dropped (the SVG falls back to
the reader's monospace font) and its generator comment with a URL is removed.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..weights import _atomic_write, check_output_path

FORMATS = (".html", ".svg", ".txt")


def check_export_path(path: str) -> None:
    check_output_path(path, "--export", FORMATS)


def offline_svg_format() -> str:
    """Rich's SVG template without its web-font rules and URL comment."""
    from rich._export_format import CONSOLE_SVG_FORMAT

    fmt = re.sub(r"@font-face \{\{.*?\}\}\s*", "", CONSOLE_SVG_FORMAT, flags=re.S)
    fmt = re.sub(r"<!--.*?-->\s*", "", fmt, flags=re.S)
    return fmt.replace("font-family: Fira Code, monospace;",
                       "font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace;")


def export_console(console, path: str) -> None:
    """Write what `console` (made with record=True) has printed to `path`."""
    check_export_path(path)
    suffix = Path(path).suffix.lower()
    if suffix == ".html":
        text = console.export_html(inline_styles=True, clear=False)
    elif suffix == ".svg":
        text = console.export_svg(title="tracer", code_format=offline_svg_format(), clear=False)
    else:
        text = console.export_text(clear=False)
    _atomic_write(path, lambda f: f.write(text.encode("utf-8")))
