// tracer serve: the prompt box. Enter (or Run) posts the prompt and the settings to /api/trace; the
// answer's page data replaces the page's in place (tracerPage() draws it again); the address keeps
// the prompt and the settings (?prompt=…&model=…&temperature=…), so a link opens the same run. The settings'
// names, kinds and defaults are their declarations' (tracer.run.settings, sent as SERVE.settings): none is named here.
// A candidate clicked in the logits step runs a branch (window.tracerBranch), shown beside the run (#branches).
(() => {
  const $ = id => window.document.getElementById(id);
  const SERVE = JSON.parse($("serve-data").textContent);
  const say = (key, slots = {}) => SERVE.words[key].replace(/\{(\w+)\}/g, (_, k) => String(slots[k]));  // render/words.py's
  const form = $("run-form"), status = $("status"), model = $("model"), chat = $("chat"), prompt = $("prompt");
  const SETTINGS = SERVE.settings;      // [{name, kind, default, optional, …}]: the served settings, each with its box
  const box = s => $(`gen-${s.name.replace(/_/g, "-")}`);
  const NAMES = ["prompt", "model", ...SETTINGS.map(s => s.name), "chat"];
  let runs = 0, inflight = null, again = null;
  const PATIENCE = 180;                 // seconds a busy server (503, 429) is asked again, after each Retry-After: a class
                                        // sharing one worker waits its turn rather than seeing an error after a few tries

  function valueOf(s, text) {           // a box's text as the setting's value: "" → off (null) or the default;
    const t = text.trim();              // a number as typed otherwise (the server says what is wrong)
    if (s.kind === "texts") return t === "" ? [] : [t];
    if (t === "") return s.optional ? null : s.default;
    if (s.kind === "switch") return t === "true";
    if (s.kind === "text") return t;
    const v = Number(t);
    return Number.isFinite(v) ? v : t;
  }

  function read() {
    const req = { prompt: prompt.value, model: model.value };
    for (const s of SETTINGS) req[s.name] = s.kind === "switch" ? box(s).checked : valueOf(s, box(s).value);
    req.chat = chat.checked && !chat.disabled;
    return req;
  }

  function write(req) {
    prompt.value = req.prompt;
    if ([...model.options].some(o => o.value === req.model)) model.value = req.model;
    for (const s of SETTINGS) {
      const v = req[s.name];
      if (s.kind === "switch") box(s).checked = !!v;
      else box(s).value = v === null || v === undefined ? "" : Array.isArray(v) ? v.join(" ") : String(v);
    }
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
    const dflt = Object.fromEntries(SETTINGS.map(s => [s.name, s.default]).concat([["chat", false]]));
    for (const [k, v] of Object.entries(dflt)) if (String(req[k]) !== String(v) && req[k] !== null) q.set(k, String(req[k]));
    return q.toString();
  }

  function fromAddress() {              // the request a shared link holds, or null
    const q = new URLSearchParams(location.search);
    if (!q.has("prompt")) return null;
    const req = Object.assign({}, SERVE.request, { chat: false }, Object.fromEntries(SETTINGS.filter(s => s.optional).map(s => [s.name, null])));
    for (const k of NAMES) {
      if (!q.has(k)) continue;
      const s = q.get(k), setting = SETTINGS.find(d => d.name === k);
      req[k] = setting ? valueOf(setting, s) : k === "chat" ? s === "true" : s;
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
    if (!req.prompt.trim()) { tell(say("serve.empty"), "error"); prompt.focus(); return; }
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

  // branches: a candidate clicked in the page's logits step (predict.js calls window.tracerBranch) forces that token
  // after the tokens before it and runs on; each branch stays beside the run it came from, its tokens and probabilities
  let branches = [], current = SERVE.request;  // the run shown, whose candidates a click forces
  let trunk = { title: say("serve.trunk"), body: { page: JSON.parse($("trace-data").textContent) }, req: SERVE.request, forced: [] };

  function chosenProbs(page) {          // [text, probability, forced?] of each token the run put after its prompt
    const out = [];
    page.passes.forEach(q => {
      if (q.chosen === null || !q.appended || !q.top) return;
      const i = q.top.ids.indexOf(q.chosen);
      out.push([page.texts[String(q.chosen)] || `#${q.chosen}`, i >= 0 ? q.top.probs[i] : null]);
    });
    return out;
  }

  function drawBranches() {
    let panel = $("branches");
    if (!panel) {
      panel = window.document.createElement("section");
      panel.id = "branches";
      form.after(panel);
    }
    panel.replaceChildren();
    if (!branches.length) return;
    const head = window.document.createElement("h3");
    head.textContent = say("serve.branches");
    const row = window.document.createElement("div");
    row.className = "branch-row";
    [trunk, ...branches].forEach((b, j) => {
      const col = window.document.createElement("div");
      col.className = "branch";
      col.dataset.branch = String(j);
      const title = window.document.createElement("button");
      title.type = "button";
      title.textContent = b.title;
      title.addEventListener("click", () => show(b.body, b.req, true));
      col.append(title);
      for (const [words, kind] of b.forced.map(t => [t, "forced"]).concat(chosenProbs(b.body.page).map(([t, pr]) => [`${t} ${pr === null ? "" : pr.toFixed(3)}`, "drawn"]))) {
        const chip = window.document.createElement("span");
        chip.className = `chip ${kind}`;
        chip.textContent = words;
        col.append(chip);
      }
      row.append(col);
    });
    panel.append(head, row);
  }

  window.tracerBranch = async b => {    // {force: ids, max_new_tokens, token, pass}: one more branch from the run shown
    const req = Object.assign({}, current, { force: (current.force || []).concat(b.force), max_new_tokens: b.max_new_tokens });
    tell(say("serve.running", { model: req.model }), "running");
    try {
      const r = await fetch("/api/trace", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(req) });
      const body = await r.json().catch(() => null);
      if (!r.ok || !body || !body.page) { tell((body && body.error) || say("serve.answered", { status: r.status }), "error"); return; }
      const P = body.page, forced = P.tokens.slice(P.n_prompt - req.force.length, P.n_prompt).map(t => t.text);  // as its page shows them
      branches.push({ title: say("serve.forced", { token: b.token, k: b.pass }), body, req, forced });
      drawBranches();
      const n = body.generated_ids.length;
      tell(say("serve.done", { prompt: body.prompt_ids.length, new: `${n} new token${n === 1 ? "" : "s"}`, seconds: body.seconds.toFixed(2) }), "done");
      window.document.body.dataset.branches = String(branches.length);
    } catch (e) {
      tell(say("serve.unreachable"), "error");
    }
  };

  function show(body, req, keep = false) {
    if (!keep) { trunk = { title: say("serve.trunk"), body, req, forced: [] }; branches = []; drawBranches(); }
    current = req;
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
