"""tracer: every number of a transformer decoder's autoregressive generation, in the terminal.

The Python API (see README): `tracer.load(name_or_path)` → `Model`; `model.run(prompt)` →
`Trace` (hook name → array); `model.generate(prompt, max_new_tokens=…)` → `Generation`.

The names below numpy (`Model`, `load`, `Trace`, `Generation`) are imported on first use
(PEP 562), so that `tracer --help` and other commands that never touch an array do not pay
for importing numpy.
"""

from .core.config import Config
from .errors import TracerError
from .showing import register as _register
from .version import __version__

__all__ = ["Config", "Generation", "GenerationSettings", "Model", "Trace", "TracerError", "load", "__version__"]

_LAZY = {"Model": ".model", "load": ".loaders", "Generation": ".run.trace", "Trace": ".run.trace",
         "GenerationSettings": ".run.settings"}


def _show(gen, **options) -> None:
    """`Generation.show`: the walkthrough, printed (`tracer.render.notebook.show`)."""
    from .render.notebook import show

    show(gen, **options)


def _html(gen) -> str:
    """`Generation._repr_html_`: a notebook cell's summary (`tracer.render.notebook.html`)."""
    from .render.notebook import html

    return html(gen)


_register("show", _show)  # the trace module hands a Generation to the renderers through tracer.showing,
_register("html", _html)  # never importing them: the renderers sit above it


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tracer' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
