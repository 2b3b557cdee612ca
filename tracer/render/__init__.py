"""Renderers: they take a recorded trace and return Rich renderables; they never recompute the model.

`show_generation` is what the CLI calls for `trace`, `show` and `replay`.
"""

from __future__ import annotations


def show_generation(gen, tokenizer, view, export: str | None = None, console=None) -> None:
    """Print the walkthrough of `gen` (and write it to `export`: .html, .svg or .txt)."""
    from rich.console import Console

    from .summary import summary

    console = console or Console(record=bool(export))
    console.print(summary(gen, tokenizer))
    if export:
        from .export import export_console

        export_console(console, export)
