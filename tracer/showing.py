"""Who shows a trace: a table the renderers are entered in, so that `Generation.show()` and a
notebook's `_repr_html_` hand the trace to them without the trace module (layer 1) importing the
renderers (layer 6). `tracer/__init__.py` enters `render.notebook`'s `show` and `html` here, each
importing the renderers only when called; the package's `__init__` runs before any of its modules,
so the entries are there whenever a trace exists."""

from __future__ import annotations

from collections.abc import Callable

from .errors import TracerError

_SHOWN_BY: dict[str, Callable] = {}  # "show": print a walkthrough; "html": a notebook cell's summary


def register(name: str, fn: Callable) -> None:  # name: "show" or "html"
    """Enter `fn` as the way to `name` a trace (a later entry replaces an earlier one)."""
    _SHOWN_BY[name] = fn


def shown_by(name: str) -> Callable:  # name: "show" or "html"
    """The function entered for `name`; a TracerError when none is (a renderer-less install)."""
    try:
        return _SHOWN_BY[name]
    except KeyError:
        raise TracerError(f"no renderer is registered to {name} a trace (tracer.render is not installed)") from None
