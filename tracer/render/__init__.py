"""Renderers: they take a recorded trace and return Rich renderables; they never run the model.

`show_generation` is what the CLI calls for `trace`, `show` and `replay`: the walkthrough of
`walkthrough.py`, printed, and written to `--export` from Rich's recording of exactly that.
The sections live in their own modules (`layer`, `predict`, `sampling`, `loop`, `lens`,
`heatmap`), share `context.Ctx`, and format every number through `fmt`; the classroom demo is
`render.demo`.
"""

from __future__ import annotations


def show_generation(gen, tokenizer, view, export: str | None = None, console=None, before=(), pager: bool = False) -> None:
    """Print the walkthrough of `gen` for `view` (a `Resolved` view; a `View` is resolved here, once),
    and write it to `export` (.html, .svg or .txt). `before`: renderables printed first (a scenario's title).
    `pager`: on a terminal, output taller than the screen goes through a pager (less -R).
    The lines are counted as rendered, before any is printed: more than --max-lines is refused.
    A run that overflowed is shown as recorded (∞, nan): the arithmetic the renderers do on it
    (a norm, a bar's length) warns of nothing."""
    import numpy as np

    with np.errstate(all="ignore"):
        _show_generation(gen, tokenizer, view, export, console, before, pager)


def _show_generation(gen, tokenizer, view, export, console, before, pager) -> None:
    from rich.console import Group

    from ..errors import TracerError
    from .text import Rendered, safe_console
    from .walkthrough import walkthrough

    if not gen.steps:
        raise TracerError("trace: it holds no passes")
    console = console or safe_console(record=bool(export))
    resolved = resolved_for(gen, view, console.width)
    body = Rendered(console, Group(*before, *walkthrough(gen, tokenizer, resolved, width=console.width)))
    resolved.check_lines(len(body.lines), about=False)  # counted: the estimate let it through
    if pager and console.is_terminal and len(body.lines) > console.height:
        from .text import LessPager

        with console.pager(LessPager(), styles=True):  # less -R: the colours, not their escape codes
            console.print(body)
    else:
        console.print(body)
    if export:
        from .export import export_console

        export_console(console, export)


def resolved_for(gen, view, width: int | None = None):
    """`view` for this recorded run: a `View` resolved against it (the API's way in), or a `Resolved`
    (the CLI's, resolved before the run) checked against the positions the run reached."""
    from .view import View

    if isinstance(view, View):
        return view.resolve(gen.steps[0].config, len(gen.steps[0].tokens), len(gen.steps[-1].tokens), width or 100,
                            gen.meta)
    return view.for_run(gen, width)
