"""`--export`: the classroom page (FILE.html), or exactly what was shown: Rich's console recording
as SVG, text, or HTML (FILE.terminal.html).

`FILE.html` is the interactive page of `render.page`: one self-contained file, its data, script and
styles inline. The terminal's record stays available: `FILE.svg`, `FILE.txt`, and Rich's HTML
under `FILE.terminal.html`.

The files are self-contained and fetch nothing from the network: Rich's SVG template loads
the Fira Code font from a CDN, so its `@font-face` rules are dropped (the SVG falls back to
the reader's monospace font) and its generator comment with a URL is removed.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..formats.files import atomic_write, check_output_path

FORMATS = (".html", ".svg", ".txt")
TERMINAL_HTML = ".terminal.html"  # Rich's HTML record of the terminal text, as --export FILE.html wrote before the page


def check_export_path(path: str) -> None:
    check_output_path(path, "--export", FORMATS)


def is_page(path: str | None) -> bool:
    """Whether `--export path` writes the interactive page (FILE.html, not FILE.terminal.html)."""
    low = str(path or "").lower()
    return low.endswith(".html") and not low.endswith(TERMINAL_HTML)


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


def export_page(gen, tokenizer, view, path: str, scenario=None, heads=None) -> None:
    """Write the interactive page of `gen` to `path`, opening on the view's token, layer and head
    (a `View`, or one resolved against the model), with its checks (a replay's stated values) and
    the scenario's title, description and notes; `heads`: the prompt's single-head ablations
    (`tracer.run.interventions.head_ablations`), which the page lets one click through."""
    import dataclasses

    from .page import page
    from .view import View

    check_export_path(path)
    if isinstance(view, View):  # the page has no line limit: --max-lines is the terminal's
        view = dataclasses.replace(view, max_lines=0).resolve(gen.steps[0].config, len(gen.steps[0].tokens),
                                                              len(gen.steps[-1].tokens))
    opts = view.view
    about = []
    if scenario is not None:
        about = [" ".join(scenario.description.split())] if scenario.description else []
        about += [f"Note ({n['label']}): {n['text']}" if n.get("label") else f"Note: {n['text']}" for n in scenario.notes]
    text = page(gen, tokenizer, checks=opts.checks, title=scenario.title if scenario else None, about=about,
                token=view.token,
                layer=view.layers[0] if view.layers else 0, head=view.heads[0] if view.head_chosen else 0,
                precision=opts.precision, top_k=opts.top_k, heads=heads)
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
