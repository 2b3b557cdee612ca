"""The demo as one self-contained HTML page (`tracer demo --export deck.html`): a section per screen,
Rich's recording with inline styles, system fonts, nothing fetched from the network."""

from __future__ import annotations

import html
import io

import numpy as np

from ...formats.files import atomic_write, check_output_path
from ..text import safe_console
from ..words import say
from .base import DECK_FOCUS, MAX_WIDTH, Demo, focus_style
from .screens import build_steps, pages_of, screen, step_title



def check_deck_path(path: str) -> None:
    check_output_path(path, "--export", (".html", ".htm"))  # the deck is one HTML page


DECK_CSS = """
body { margin: 0; background: #f4f4f0; color: #111; font-family: system-ui, sans-serif; }
header { padding: 1.2em 2em 0.4em; }
h1 { font-size: 1.6em; margin: 0 0 0.3em; }
nav ol { columns: 2; font-size: 1.05em; margin: 0.4em 0 0; }
nav a { color: #0645ad; }
section { background: #fff; margin: 1.2em 2em; padding: 0.6em 1.4em; border: 1px solid #ccc;
          border-radius: 6px; page-break-after: always; }
section h2 { font-size: 1.25em; margin: 0.5em 0 0.2em; }
pre { font-family: 'DejaVu Sans Mono', Menlo, Consolas, 'Courier New', monospace; font-size: 15px;
      line-height: 1.2; white-space: pre; overflow-x: auto; margin: 0.4em 0 0.8em; }
footer { margin: 1em 2em 2em; color: #555; font-size: 0.9em; }
"""


def deck_html(d: Demo, quiz: bool = False) -> str:
    """One self-contained page: a section per screen, Rich's recording with inline styles."""
    with np.errstate(all="ignore"):  # a run that overflowed: shown as recorded, without warnings
        return _deck_html(d, quiz)


def _deck_html(d: Demo, quiz: bool) -> str:
    with focus_style(DECK_FOCUS):
        steps = build_steps(d)
    pages = pages_of(steps, quiz)
    sections = []
    for page in pages:
        rec = safe_console(record=True, width=MAX_WIDTH, file=io.StringIO(), color_system="truecolor",
                      force_terminal=True, legacy_windows=False)
        rec.print(screen(d, steps, page))
        code = rec.export_html(inline_styles=True, code_format="{code}")
        s = steps[page.step]
        anchor = f"step-{page.step + 1}" + ("-quiz" if page.quiz else "")
        title = step_title(page.step, len(steps), s.name, page.quiz)
        sections.append(f'<section id="{anchor}" aria-label="{html.escape(title)}">\n'
                        f'<pre><code>{code}</code></pre>\n</section>')
    toc = "\n".join(f'<li><a href="#step-{i + 1}">{html.escape(s.name)}</a></li>' for i, s in enumerate(steps))
    title = html.escape(say("demo.deck.title", title=d.title))
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{title}</title>\n'
            f"<style>{DECK_CSS}</style>\n</head>\n<body>\n<header>\n<h1>{title}</h1>\n"
            f"<p>{html.escape(say('demo.deck.about'))}</p>\n"
            f"<nav><ol>\n{toc}\n</ol></nav>\n</header>\n" + "\n".join(sections) +
            f"\n<footer>{say('demo.deck.made', command='<code>tracer demo --export</code>')}</footer>\n"
            "</body>\n</html>\n")


def write_deck(d: Demo, path: str, quiz: bool = False) -> None:
    check_deck_path(path)
    text = deck_html(d, quiz)
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
