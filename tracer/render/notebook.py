"""A trace in a Jupyter notebook: `gen.show(token=…, layer=…, section=…)` prints the walkthrough with
the CLI's view options, and a `Generation` or `Trace` left as a cell's value shows a summary (the
tokens, the prediction and the loop) as HTML instead of its repr."""

from __future__ import annotations

import io

from .text import safe_console

SUMMARY = ("tokens", "predict", "loop")  # what a cell shows of a generation


def _tokenizer(gen):
    """The run's own tokenizer, or the one its trace names (a token table; never a file a trace names)."""
    from ..tokenizers.table import trace_tokenizer

    return gen.tokenizer if gen.tokenizer is not None else trace_tokenizer(gen.meta.get("tokenizer"))


def show(gen, tokenizer=None, console=None, **options) -> None:
    """Print the walkthrough of `gen` (a Generation). `options` are `tracer.render.view.View`'s
    (token, layer, head, dims, precision, brief, sections, top_k, max_lines); `section="predict"` or
    `sections=("predict", "lens")` picks sections as `--section` does."""
    from . import show_generation
    from .view import View

    if "section" in options:
        s = options.pop("section")
        options["sections"] = (s,) if isinstance(s, str) else tuple(s)
    show_generation(gen, tokenizer or _tokenizer(gen), View(**options), console=console or safe_console())


def html(gen, width: int = 100) -> str:
    """The summary of `gen` as one HTML fragment (Rich's recording, styles inline)."""
    from . import show_generation
    from .view import View

    console = safe_console(record=True, file=io.StringIO(), width=width, color_system="truecolor", force_terminal=True)
    show_generation(gen, _tokenizer(gen), View(sections=SUMMARY, max_lines=0), console=console)
    return console.export_html(inline_styles=True, code_format="<pre style=\"font-size: 13px\">{code}</pre>")

