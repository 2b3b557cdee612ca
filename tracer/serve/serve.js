// tracer serve: the prompt box. Enter (or Run) posts the prompt and the settings to /api/trace; the
// answer's page data replaces the page's in place (tracerPage() draws it again); the address keeps
// the prompt and the settings (?prompt=…&model=…&temperature=…), so a link opens the same run.
(() => {
  const $ = id => window.document.getElementById(id);
  const SERVE = JSON.parse($("serve-data").textContent);
  const say = (key, slots = {}) => SERVE.words[key].replace(/\{(\w+)\}/g, (_, k) => String(slots[k]));  // render/words.py's
  const form = $("run-form"), status = $("status"), model = $("model"), chat = $("chat");
  const F = { prompt: $("prompt"), temperature: $("gen-temperature"), top_k: $("gen-top-k"), top_p: $("gen-top-p"),
    seed: $("gen-seed"), max_new_tokens: $("gen-max-new-tokens") };
  const NAMES = ["prompt", "model", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "chat"];
  let runs = 0, inflight = null, again = null;
  const PATIENCE = 180;                 // seconds a busy server (503, 429) is asked again, after each Retry-After: a class
                                        // sharing one worker waits its turn rather than seeing an error after a few tries

  function numberOf(input) {     // "" → null; anything else as typed (the server says what is wrong)
    const s = input.value.trim();
    if (s === "") return null;
    const v = Number(s);
    return Number.isFinite(v) ? v : s;
  }

  function read() {
    return { prompt: F.prompt.value, model: model.value, max_new_tokens: numberOf(F.max_new_tokens) ?? 0,
      temperature: numberOf(F.temperature) ?? 0, top_k: numberOf(F.top_k), top_p: numberOf(F.top_p),
      seed: numberOf(F.seed) ?? 0, chat: chat.checked && !chat.disabled };
  }

  function write(req) {
    F.prompt.value = req.prompt;
    if ([...model.options].some(o => o.value === req.model)) model.value = req.model;
    for (const k of ["temperature", "top_k", "top_p", "seed", "max_new_tokens"]) F[k].value = req[k] === null || req[k] === undefined ? "" : String(req[k]);
    chatSwitch();
    chat.checked = !!req.chat && !chat.disabled;
  }

  function chatSwitch() {               // the chat switch only for models with a chat template
    const opt = model.selectedOptions[0];
    const has = !!opt && opt.dataset.chat === "true";
    chat.disabled = !has;
    if (!has) chat.checked = false;
    $("chat-label").title = has ? say("serve.chat") : say("serve.no_chat", { model: model.value });
  }

  function query(req) {                 // the settings that differ from the defaults, as ?a=b&…
    const q = new URLSearchParams();
    q.set("prompt", req.prompt);
    q.set("model", req.model);
    const dflt = { max_new_tokens: 2, temperature: 0, top_k: null, top_p: null, seed: 0, chat: false };
    for (const [k, v] of Object.entries(dflt)) if (req[k] !== v && req[k] !== null) q.set(k, String(req[k]));
    return q.toString();
  }

  function fromAddress() {              // the request a shared link holds, or null
    const q = new URLSearchParams(location.search);
    if (!q.has("prompt")) return null;
    const req = Object.assign({}, SERVE.request, { top_k: null, top_p: null, chat: false });
    for (const k of NAMES) {
      if (!q.has(k)) continue;
      const s = q.get(k);
      req[k] = k === "prompt" || k === "model" ? s : k === "chat" ? s === "true" : (Number.isFinite(Number(s)) && s.trim() !== "" ? Number(s) : s);
    }
    return req;
  }

  function tell(words, kind) {          // the status line
    status.textContent = words;
    status.className = kind || "";
    window.document.body.dataset.serve = kind || "done";
  }

  async function run(req = read(), attempt = 0, since = Date.now()) {
    clearTimeout(again);
    if (!req.prompt.trim()) { tell(say("serve.empty"), "error"); F.prompt.focus(); return; }
    if (inflight) inflight.abort();
    const ctl = inflight = new AbortController();
    tell(attempt ? say("serve.running_again", { model: req.model, n: attempt + 1 }) : say("serve.running", { model: req.model }), "running");
    form.setAttribute("aria-busy", "true");
    try {
      const r = await fetch("/api/trace", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify(req), signal: ctl.signal });
      const body = await r.json().catch(() => null);
      if (ctl !== inflight) return;
      const wait = Number(r.headers.get("Retry-After"));
      if ((r.status === 503 || r.status === 429) && wait > 0 && Date.now() + wait * 1000 - since < PATIENCE * 1000) {
        tell(say("serve.busy", { wait: wait }), "waiting");
        again = setTimeout(() => run(req, attempt + 1, since), wait * 1000);
        return;
      }
      if (!r.ok || !body || !body.page) {
        tell(((body && body.error) || say("serve.answered", { status: r.status })) + (wait ? say("serve.retry_in", { wait: wait }) : ""), "error");
        return;
      }
      show(body, req);
    } catch (e) {
      if (e.name !== "AbortError") tell(say("serve.unreachable"), "error");
    } finally {
      if (ctl === inflight) { inflight = null; form.removeAttribute("aria-busy"); }
    }
  }

  function show(body, req) {
    $("trace-data").textContent = JSON.stringify(body.page);   // text, never markup
    const step = new URLSearchParams(location.hash.slice(1)).get("step");
    try { history.replaceState(null, "", `?${query(req)}${step ? `#step=${encodeURIComponent(step)}` : ""}`); } catch (e) { /* the page still works */ }
    tracerPage();
    window.document.title = `tracer · ${body.page.title || req.model}`;
    runs += 1;
    window.document.body.dataset.runs = String(runs);
    const n = body.generated_ids.length;
    tell(say("serve.done", { prompt: body.prompt_ids.length, new: `${n} new token${n === 1 ? "" : "s"}`, seconds: body.seconds.toFixed(2) }), "done");
  }

  form.addEventListener("submit", e => { e.preventDefault(); run(read()); });
  model.addEventListener("change", chatSwitch);
  const asked = fromAddress();
  write(asked || SERVE.request);
  window.document.body.dataset.runs = "0";
  if (asked && query(asked) !== query(SERVE.request)) run(read());
  else tell(say("serve.prompt"), "done");
})();
