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


def form(models: list[dict], limits: dict, request: dict) -> str:
    """The prompt box and the settings, above the page's header; the served models and limits as JSON."""
    options = "".join(f'<option value="{html.escape(m["name"])}" data-chat="{str(m["chat"]).lower()}">'
                      f'{html.escape(m["name"])}</option>' for m in models)
    serve = json_for_script({"models": models, "limits": limits, "request": request, "words": SERVE_WORDS})
    n = limits["max_new_tokens"]
    w = {key.split(".", 1)[1]: html.escape(say(key, n=str(n)) if key == "serve.new" else say(key), quote=True)
         for key in ("serve.prompt", "serve.temperature", "serve.top_k", "serve.top_p", "serve.seed", "serve.new",
                     "serve.chat")}
    return f"""<form id="run-form" autocomplete="off" novalidate aria-label="run a prompt">
  <label class="ctl-name" for="prompt">prompt</label>
  <input id="prompt" name="prompt" type="text" maxlength="{limits['prompt_chars']}" spellcheck="false"
         placeholder="{w['prompt']}" aria-describedby="status">
  <label>model <select id="model" name="model">{options}</select></label>
  <label title="{w['temperature']}">T <input id="gen-temperature" name="temperature" type="number" min="0" max="100" step="0.1" value="0"></label>
  <label title="{w['top_k']}">top-k <input id="gen-top-k" name="top_k" type="number" min="1" step="1" placeholder="all"></label>
  <label title="{w['top_p']}">top-p <input id="gen-top-p" name="top_p" type="number" min="0.01" max="1" step="0.05" placeholder="1"></label>
  <label title="{w['seed']}">seed <input id="gen-seed" name="seed" type="number" min="0" step="1" value="0"></label>
  <label title="{w['new']}">new <input id="gen-max-new-tokens" name="max_new_tokens" type="number" min="0" max="{n}" step="1" value="2"></label>
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


def served_page(data: dict, models: list[dict], limits: dict, request: dict) -> tuple[str, str]:
    """The page for `data` (the example run's page data) and its Content-Security-Policy."""
    script = WRAP % page_script() + "\n" + asset("serve.js")
    text = page_html(data, top=form(models, limits, request), style=asset("serve.css"), script=script)
    if text.count('<span id="model"></span>') != 1:
        raise ValueError("the page's header no longer has one <span id=\"model\">: update tracer.serve.page")
    text = text.replace('<span id="model"></span>', '<span id="model-info"></span>')
    csp = ("default-src 'none'; script-src " + " ".join(script_hashes(text)) + "; style-src 'unsafe-inline'; "
           "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return text, csp
