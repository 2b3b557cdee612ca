"""Renderers: they take a recorded trace and return Rich renderables; they never recompute the model.

`show_generation` is what the CLI calls for `trace`, `show` and `replay`: the walkthrough of
`walkthrough.py`, printed, and written to `--export` from Rich's recording of exactly that.
"""

from __future__ import annotations


def show_generation(gen, tokenizer, view, export: str | None = None, console=None, before=()) -> None:
    """Print the walkthrough of `gen` (and write it to `export`: .html, .svg or .txt).

    `before`: renderables printed first (a scenario's title), once the view is known to be valid.
    """
    from rich.console import Console, Group

    from .walkthrough import Trimmed, walkthrough

    if export:
        from .export import check_export_path

        check_export_path(export)
    console = console or Console(record=bool(export))
    parts = walkthrough(gen, tokenizer, view, width=console.width)  # validates --token/--layer/--head first
    console.print(Trimmed(Group(*before, *parts)))
    if export:
        from .export import export_console

        export_console(console, export)
