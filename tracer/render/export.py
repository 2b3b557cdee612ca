"""Writing exactly what was shown: Rich's console recording as HTML, SVG or text.

The files are self-contained and fetch nothing from the network: Rich's SVG template loads
the Fira Code font from a CDN, so its `@font-face` rules are dropped (the SVG falls back to
the reader's monospace font) and its generator comment with a URL is removed.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..files import atomic_write, check_output_path

FORMATS = (".html", ".svg", ".txt")


def check_export_path(path: str) -> None:
    check_output_path(path, "--export", FORMATS)


def offline_svg(svg: str) -> str:
    """Rich's SVG without its web-font rules and its comment with a URL: nothing left to fetch."""
    svg = re.sub(r"@font-face \{.*?\}\s*", "", svg, flags=re.S)
    svg = re.sub(r"<!--.*?-->\s*", "", svg, flags=re.S)
    return svg.replace("font-family: Fira Code, monospace;", "font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace;")


def export_console(console, path: str) -> None:
    """Write what `console` (made with record=True) has printed to `path`."""
    check_export_path(path)
    suffix = Path(path).suffix.lower()
    if suffix == ".html":
        text = console.export_html(inline_styles=True, clear=False)
    elif suffix == ".svg":
        text = offline_svg(console.export_svg(title="tracer", clear=False))
    else:
        text = console.export_text(clear=False)
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
