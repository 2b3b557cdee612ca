"""Writing exactly what was shown: Rich's console recording as HTML, SVG or text."""

from __future__ import annotations

from pathlib import Path

from ..errors import TracerError
from ..weights import _atomic_write

FORMATS = (".html", ".svg", ".txt")


def check_export_path(path: str) -> None:
    p = Path(path)
    if p.suffix not in FORMATS:
        raise TracerError(f"--export {path}: the file must end in {', '.join(FORMATS)}")
    if not p.parent.exists():
        raise TracerError(f"--export {path}: folder {str(p.parent)!r} does not exist")


def export_console(console, path: str) -> None:
    check_export_path(path)
    suffix = Path(path).suffix
    if suffix == ".html":
        text = console.export_html(inline_styles=True)
    elif suffix == ".svg":
        text = console.export_svg(title="tracer")
    else:
        text = console.export_text()
    _atomic_write(path, lambda f: f.write(text.encode("utf-8")))
