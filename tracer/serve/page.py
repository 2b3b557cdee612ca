"""The page `GET /` serves: the classroom page of `--export FILE.html` (`render.page.html.page_html`)
with a prompt box and the generation settings above it (`serve.js`, `serve.css`).

Running a prompt posts it to `/api/trace` and hands the answer's page data to the same page script
again, in place: the page's script runs inside `tracerPage()`, which is called once per run; the
listeners a run added to the document are dropped (an AbortController) before the next one starts,
so nothing of the previous run is left. The page's own `#model` (the model's line in the header)
becomes `#model-info`, because `select#model` is the model choice here.

Nothing reaches the markup as markup: the model names go through `html.escape`, the data blocks
through `json_for_script`; the scripts are inline, and the Content-Security-Policy sent with the page
allows exactly them (their SHA-256), no other script, and connections to this server only.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from pathlib import Path

from ..render.page.html import json_for_script, page_html, page_script
from ..render.words import SERVE_WORDS, say
from ..run.settings import setting

HERE = Path(__file__).resolve().parent

WRAP = """let tracerRun = null;  // the running page's document listeners, dropped when a new run replaces it
function tracerPage() {
  if (tracerRun) tracerRun.abort();
  const run = tracerRun = new AbortController();
  const real = window.document;
  const document = new Proxy(real, {
    get(t, k) {
      if (k === "addEventListener") {
        return (type, fn, opts) => t.addEventListener(type, fn, Object.assign(typeof opts === "object" ? Object.assign({}, opts) : { capture: !!opts }, { signal: run.signal }));
      }
      if (k === "getElementById") return id => t.getElementById(id === "model" ? "model-info" : id);
      const v = t[k];
      return typeof v === "function" ? v.bind(t) : v;
    },
    set(t, k, v) { t[k] = v; return true; },
  });
%s
}
tracerPage();
"""


def asset(name: str) -> str:
    return (HERE / name).read_text(encoding="utf-8")


def box(s, most) -> str:
    """Setting `s`'s box in the form (`most`: this server's most, or None), its tooltip the setting's help."""
    name, dashed = s.name, s.flag[2:]
    notes = ([say("serve.off", off=s.off)] if s.optional and s.off else []) + \
        ([say("serve.most", n=f"{most:,}" if s.kind == "integer" else f"{most:g}")] if most is not None and most != s.high else [])
    title = html.escape(" ".join([s.help, *notes]), quote=True)
    label, default = html.escape(s.label or dashed), s.run_default
    if s.kind == "switch":
        return (f'<label title="{title}"><input id="gen-{dashed}" name="{name}" type="checkbox"'
                f'{" checked" if default else ""}> {label}</label>')
    if s.kind in ("integer", "number"):
        shown = (lambda v: str(int(v))) if s.kind == "integer" else (lambda v: f"{v:g}")
        least = None if s.low is None else s.low + s.step if s.low_open else s.low
        attrs = "".join(f' {k}="{shown(v)}"' for k, v in (("min", least), ("max", most)) if v is not None)
        value = f'placeholder="{html.escape(s.off)}"' if default is None else f'value="{shown(default)}"'
        return (f'<label title="{title}">{label} <input id="gen-{dashed}" name="{name}" type="number"{attrs} '
                f'step="{s.step:g}" {value}></label>')
    if s.choices:
        options = "".join(f'<option value="{html.escape(c)}"{" selected" if c == default else ""}>{html.escape(c)}</option>'
                          for c in s.choices)
        return f'<label title="{title}">{label} <select id="gen-{dashed}" name="{name}">{options}</select></label>'
    value = "" if default is None else html.escape(" ".join(default) if s.kind == "texts" else str(default), quote=True)
    return (f'<label title="{title}">{label} <input id="gen-{dashed}" name="{name}" type="text" '
            f'placeholder="{html.escape(s.off)}" value="{value}"></label>')


def form(models: list[dict], limits: dict, request: dict, settings: list[dict]) -> str:
    """The prompt box and a box per served setting (`settings`: `serve.limits.served_settings`), above the page's
    header; the served models, limits and the settings' declarations as JSON (`serve.js` reads them)."""
    options = "".join(f'<option value="{html.escape(m["name"])}" data-chat="{str(m["chat"]).lower()}">'
                      f'{html.escape(m["name"])}</option>' for m in models)
    serve = json_for_script({"models": models, "limits": limits, "settings": settings, "request": request,
                             "words": SERVE_WORDS})
    boxes = "\n  ".join(box(setting(d["name"]), d["most"]) for d in settings)
    w = {key.split(".", 1)[1]: html.escape(say(key), quote=True) for key in ("serve.prompt", "serve.chat")}
    return f"""<form id="run-form" autocomplete="off" novalidate aria-label="run a prompt">
  <label class="ctl-name" for="prompt">prompt</label>
  <input id="prompt" name="prompt" type="text" maxlength="{limits['prompt_chars']}" spellcheck="false"
         placeholder="{w['prompt']}" aria-describedby="status">
  <label>model <select id="model" name="model">{options}</select></label>
  {boxes}
  <label id="chat-label" title="{w['chat']}"><input id="chat" name="chat" type="checkbox"> chat</label>
  <button id="run" type="submit">Run ▶</button>
  <span id="status" role="status" aria-live="polite"></span>
  <script type="application/json" id="serve-data">{serve}</script>
</form>
"""


def script_hashes(page: str) -> list[str]:
    """The CSP source of every inline script that runs (not the JSON data blocks)."""
    bodies = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    return ["'sha256-" + base64.b64encode(hashlib.sha256(b.encode("utf-8")).digest()).decode("ascii") + "'"
            for b in bodies]


def served_page(data: dict, models: list[dict], limits: dict, request: dict, settings: list[dict],
                more: tuple[str, str, str] = ("", "", "")) -> tuple[str, str]:
    """The page for `data` (the example run's page data) and its Content-Security-Policy. `more`: markup put
    above the prompt box, styles and a script run after `serve.js` (a led lesson's bar: `serve.lead`)."""
    top, style, after = more
    script = WRAP % page_script() + "\n" + asset("serve.js") + ("\n" + after if after else "")
    text = page_html(data, top=top + form(models, limits, request, settings), style=asset("serve.css") + style,
                     script=script)
    if text.count('<span id="model"></span>') != 1:
        raise ValueError("the page's header no longer has one <span id=\"model\">: update tracer.serve.page")
    text = text.replace('<span id="model"></span>', '<span id="model-info"></span>')
    csp = ("default-src 'none'; script-src " + " ".join(script_hashes(text)) + "; style-src 'unsafe-inline'; "
           "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return text, csp
