"""The page's file: a fixed HTML skeleton, the styles and the script inlined from this package
(`page.css`, then `SCRIPTS`: `core.js` … `app.js`), and the data as JSON in
`<script type="application/json" id="trace-data">`.

Nothing from a trace reaches the markup as markup: the JSON is escaped so that no `<`, `>` or `&`
appears in it (a token's text may hold `</script>`), and every non-ASCII character is written as
`\\uXXXX` (bidi overrides, U+2028); the script sets text with `textContent` only. The one string
written into the HTML itself, the title, goes through `html.escape`.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ("core.js", "state.js", "steps.js", "linear.js", "experts.js", "predict.js", "decoding.js", "ablate.js", "app.js")


def asset(name: str) -> str:
    return (HERE / name).read_text(encoding="utf-8")


def json_for_script(data) -> str:
    """JSON that can sit inside a <script> element: no '<', '>' or '&', ASCII only; ±∞ and NaN (a
    config value, a --verify-cache bound) written as `--json` writes them, "inf", "-inf", "nan"."""
    from ..jsonout import json_safe

    text = json.dumps(json_safe(data), ensure_ascii=True, separators=(",", ":"), allow_nan=False, default=_plain)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _plain(x):  # numpy scalars and arrays in a trace's metadata (a --verify-cache result)
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON")


HEAD = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="tracer">
<title>{title}</title>
<style>
{css}{style}
</style>
</head>
"""  # both pages' <head>: the title, and the page's styles inlined
END = """<script type="application/json" id="trace-data">{data}</script>
<script>
"use strict";
{script}
</script>
</body>
</html>
"""  # both pages' end: the recorded numbers as JSON, then the script that draws them

SKELETON = HEAD + """<body>
<a class="skip" href="#slides">skip to the step</a>
<header id="top">
{top}  <div class="topline">
    <h1 id="title">{title}</h1>
    <span id="model"></span>
    <span id="badge"></span>
    <nav id="pager" aria-label="steps">
      <button id="prev" type="button" aria-label="previous step (←)">◀</button>
      <span id="where" aria-live="polite"></span>
      <button id="next" type="button" aria-label="next step (→)">▶</button>
    </nav>
  </div>
  <ol id="path" aria-label="the article's steps"></ol>
  <div id="tokens" aria-label="tokens: click one to follow it"></div>
  <div id="controls">
    <span class="ctl-name per-layer">layer</span><span id="layers" role="group" aria-label="layer"></span>
    <span class="ctl-name per-layer">head</span><span id="heads" role="group" aria-label="head"></span>
    <span class="ctl-name">pass</span><span id="passes" role="group" aria-label="generation pass"></span>
  </div>
</header>
<main id="main">
  <div id="slides"></div>
  <aside id="detail" aria-live="polite" aria-label="the followed token"></aside>
</main>
<noscript><p class="noscript">This page draws its steps with JavaScript; the recorded numbers are in the
JSON block at the end of the file.</p></noscript>
""" + END


def page_script() -> str:
    """The page's script: `SCRIPTS`, in that order."""
    return "\n".join(asset(name) for name in SCRIPTS)


def page_html(data: dict, *, top: str = "", style: str = "", script: str | None = None) -> str:
    """The page around `data` (`tracer.render.page.page_data`). `top` (markup put first in the header),
    `style` (more CSS) and `script` (in place of `page_script()`) let `tracer serve` put its prompt box
    around the same page."""
    title = f"tracer · {data.get('title') or data['model']['name']}"
    script = page_script() if script is None else script
    if "</script" in script.lower() or "<!--" in script:  # the inlined script must not end its own element
        raise ValueError("page script holds '</script' or '<!--'")
    return SKELETON.format(title=html.escape(title), css=asset("page.css"), style=style, top=top,
                           data=json_for_script(data), script=script)


COMPARE_SCRIPTS = ("core.js", "compare.js")  # the trace page's shared part, then the compare page's own

COMPARE_SKELETON = HEAD + """<body class="compare">
<header id="top">
  <div class="topline">
    <h1 id="title">{title}</h1>
    <span id="model"></span>
  </div>
</header>
<main id="compare">
  <div id="prompts-words"></div>
  <div class="two">
    <section id="prompts" aria-label="the two prompts"></section>
    <section id="predictions" aria-label="both predictions"></section>
  </div>
  <section id="patching" aria-label="activation patching"></section>
</main>
<noscript><p class="noscript">This page draws with JavaScript; the numbers are in the JSON block at the end of the file.</p></noscript>
""" + END


def compare_html(data: dict) -> str:
    """The compare page around `data` (`tracer.render.page.compare.compare_data`): the page's styles, and
    `COMPARE_SCRIPTS`."""
    title = f"tracer · {data['title']}"
    script = "\n".join(asset(name) for name in COMPARE_SCRIPTS)
    return COMPARE_SKELETON.format(title=html.escape(title), css=asset("page.css"), style="", data=json_for_script(data),
                                   script=script)
