// tracer page, part 7 of 7: the followed token's card (#detail), the controls (tokens, layers, heads,
// passes, the path of steps), the keyboard (← → through the steps) and the address (#step=…&token=…).

function cells(v) {                       // a vector as up to 6 table cells: all, or the first 3, …, the last 2
  if (!v) return [el("td", { colspan: 6, class: "missing" }, `— ${say("page.absent")}`)];
  const scale = Math.max(...v.vals.map(x => Math.abs(x || 0)), 1e-12);
  const td = (x, d) => el("td", { class: "n", style: tint(x, scale), title: `dim ${d}: ${exact(x)}` }, num(x));
  if (v.whole && v.vals.length <= 6) return v.vals.map((x, d) => td(x, d)).concat(v.vals.length < 6 ? [el("td", { colspan: 6 - v.vals.length })] : []);
  const head = v.vals.slice(0, 3), tail = v.vals.slice(-2);  // type a room can read leaves room for 5 numbers
  return head.map((x, d) => td(x, d)).concat([el("td", { class: "gap", title: `${integer(v.dims)} dims, ‖·‖ ${num(v.norm)}` }, "…")],
    tail.map((x, i) => td(x, v.dims - 2 + i)));
}

function detailRows() {                   // [step, name, vector or words] for the followed token
  const t = S.token, L = label(t), l = S.layer, h = S.head, rows = [];
  rows.push(["embed", "E", vecOf(D.inputs.E, t)]);
  if (has("positions_added")) rows.push(["embed", "P", vecOf(D.inputs.P, t)]);
  if (CFG.n_layers) {
    const Y = D.layers[l];
    rows.push(["qkv", `x in ${l}`, vecOf(Y.x, t)]);
    if (CFG.layer_norm && has("norms_before")) rows.push(["qkv", `${SW.norm.short}(x)`, vecOf(Y.ln1, t)]);
    const U = Y.state && Y.state.update, hs = Y.state ? Math.min(h, Y.state.heads - 1) : h;  // a linear layer: its update's
    for (const m of ["q", "k", "v"]) rows.push(["qkv", `${m.toUpperCase()} h${h}`, vecOf(U ? U[m] : Y[m], t, hs)]);
    if (U && CI.has(t)) rows.push(["scores", "β · exp(g)", `${num(Y.state.beta[CI.get(t)][hs])} · ${num(Y.state.keep[CI.get(t)][hs])}`]);
    const row = attRow(l, h, t);
    if (row && row.w) {
      const order = row.keys.map((j, i) => [j, row.w[i]]).sort((a, c) => c[1] - a[1]).slice(0, 6);
      rows.push(["scores", "weights", order.map(([j, w]) => `${label(j)} ${num(w)}`).join(" · ") + (row.keys.length > 6 || row.rest ? " · …" : "")]);
    }
    rows.push(["sum", `${U ? "o" : "z"} h${h}`, vecOf(U ? U.o : Y.z, t, hs)]);
    rows.push(["heads", "attn_out", vecOf(Y.attn_out, t)]);
    const without = ablationWords(l, h);  // the prediction after the prompt with the chosen head knocked out
    if (without) rows.push(["heads", `w/o ${l}:${h}`, without]);
    const i = CI.get(t);
    if (Y.moe && i !== undefined) rows.push(["mlp", "experts", chosenWords(Y.moe.chosen[i].map((e, j) => [e, Y.moe.weights[i][j]]))]);
    if (CFG.mlp) rows.push(["mlp", "mlp_out", vecOf(Y.mlp_out, t)]);
    rows.push(["mlp", `out ${l}`, vecOf(Y.out, t)]);
    const first = vecOf(D.layers[0].x, t), last = vecOf(D.layers[CFG.n_layers - 1].out, t);
    if (first && last) rows.push(["layers", "‖x‖", say("detail.norms", { first: num(first.norm), last: num(last.norm), layer: CFG.n_layers - 1 })]);
  }
  rows.push(["predict", "f", vecOf(D.inputs.final, t)]);
  const q = D.positions[t];
  if (q) rows.push(["positions", "predicts", say("detail.predicts", { top: idEl(q.top), p: prob(q.top_p), next: idEl(q.next), next_p: prob(q.next_p), loss: num(q.loss) })]);
  return rows;
}

function drawDetail() {
  const t = S.token, tk = D.tokens[t], L = label(t), id = STEPS[S.step][0];
  const where = t >= D.n_prompt ? say("token.generated", { k: tk.pass }) : "";
  const box = document.getElementById("detail");
  const rows = detailRows().map(([step, name, v]) => el("tr", { class: step === id ? "now" : null, "data-for": step },
    el("th", null, name), Array.isArray(v) || typeof v === "string" ? el("td", { colspan: 6, class: "words" }, v) : cells(v)));
  const heading = el("h2", null, say("detail.following", { L, text: el("span", { class: "tt" }, tk.text) }));
  const sub = el("p", { class: "sub" }, say("detail.where", { t, id: tk.id, generated: where,
    at: CFG.n_layers ? say("detail.at", { layer: S.layer, h: S.head }) : "" }));
  const chosen = D.passes.find(q => q.reads === t);
  const predicts = chosen && chosen.chosen !== null ? el("p", { class: "sub" }, say("detail.last", { L, k: D.passes.indexOf(chosen), token: idEl(chosen.chosen) })) : null;
  const legend = el("p", { class: "note" }, say("detail.legend", { L, norm: SW.norm.short, norm_title: SW.norm.title }));
  box.replaceChildren(...[heading, sub, predicts, el("table", { class: "card" }, el("tbody", null, rows)), legend,
    D.left_out.length ? el("p", { class: "note" }, say("detail.left_out", { what: D.left_out.join("; ") })) : null].filter(x => x));
}

function button(attrs, words, on) { return el("button", Object.assign({ type: "button", "aria-pressed": on ? "true" : "false" }, attrs), words); }

function inRow(row, item) {
  if (item && row.scrollWidth > row.clientWidth) row.scrollLeft = item.offsetLeft - row.offsetLeft - (row.clientWidth - item.offsetWidth) / 2;
}

function drawControls() {
  const path = document.getElementById("path");
  path.replaceChildren(...STEPS.map(([id, short], i) => el("li", null, el("button", { type: "button", "data-goto": id,
    "aria-current": i === S.step ? "step" : null, title: STEPS[i][2] }, `${i + 1} ${short}`))));
  const toks = document.getElementById("tokens");
  const many = D.tokens.length > 80;
  const chips = [];
  D.tokens.forEach((tk, t) => {
    const runnable = t < N && CI.has(t);
    if (many && !runnable && t < N) return;
    const why = t >= N ? say("tokens.never_run") : runnable ? `follow ${tk.label}` : say("page.absent");
    chips.push(button({ class: `tok${t >= D.n_prompt ? " gen" : ""}`, "data-token": runnable ? t : null, disabled: !runnable, title: `${tk.label} · id ${tk.id} · ${why}` },
      [el("b", null, tk.label), " ", el("span", { class: "tt" }, tk.text)], t === S.token));
  });
  if (many) chips.unshift(el("span", { class: "note" }, say("tokens.absent", { tokens: count(N - D.carried.length, "token") })));
  toks.replaceChildren(...chips);
  const on = toks.querySelector('[aria-pressed="true"]');
  if (on && toks.scrollHeight > toks.clientHeight) toks.scrollTop = on.offsetTop - toks.offsetTop - 4;  // the followed chip in view
  inRow(toks, on);  // a phone's rows scroll sideways: the followed token, the step, the layer in view
  inRow(path, path.querySelector("[aria-current]"));
  document.getElementById("controls").classList.toggle("no-layers", !CFG.n_layers);
  document.getElementById("layers").replaceChildren(...D.layers.map((_, l) => button({ "data-layer": l, title: `layer ${l}` }, String(l), l === S.layer)));
  inRow(document.getElementById("layers"), document.querySelector("#layers [aria-pressed=true]"));
  document.getElementById("heads").replaceChildren(...Array.from({ length: CFG.n_layers ? CFG.n_heads : 0 },
    (_, h) => button({ "data-head": h, title: `head ${h}`, "aria-label": `head ${h}` + (ablated(S.layer, h) ? say("heads.card", { layer: S.layer, h }) : "") },
      String(h), h === S.head)));
  document.getElementById("passes").replaceChildren(...D.passes.map((q, k) => button({ "data-pass": k,
    title: k === 0 ? `pass 0 ${say("loop.reads_prompt", { span: span(0, q.n) })}` : `pass ${k} ${say("loop.reads", { named: label(q.n - 1) })}` }, String(k), k === S.pass)));
  document.getElementById("where").textContent = `${S.step + 1} / ${STEPS.length}`;
}

function drawSlide() {
  const [id, , title] = STEPS[S.step];
  const slides = document.getElementById("slides");
  const section = el("section", { class: "slide", id: `step-${id}`, "data-step": id, "aria-label": title }, el("h2", null, title));
  section.append(...[SLIDES[id]()].flat(Infinity).filter(x => x !== null && x !== undefined && x !== false));  // a slide may nest arrays
  const checks = id === "checks" ? null : checksHere(id);
  const lead = section.querySelector(":scope > p");
  if (checks && checks.querySelector(".check.bad") && lead) lead.after(checks);  // the article's errors are the lesson: in view
  else if (checks) section.append(checks);
  slides.replaceChildren(section);
  for (const box of section.querySelectorAll("[data-scroll-end]")) box.scrollLeft = box.scrollWidth;  // its last columns in view
}

function render(scrollTop) {
  S.step = Math.min(Math.max(S.step, 0), STEPS.length - 1);
  S.token = Math.min(Math.max(S.token, 0), N - 1);
  if (!CI.has(S.token)) S.token = D.start.token;
  S.pass = Math.min(Math.max(S.pass, 0), D.passes.length - 1);
  const slides = document.getElementById("slides"), keep = slides.scrollTop;
  drawControls();
  drawSlide();
  drawDetail();
  slides.scrollTop = scrollTop ? 0 : keep;
  document.body.dataset.step = STEPS[S.step][0];
  try {
    history.replaceState(null, "", `#step=${STEPS[S.step][0]}&token=${S.token}&layer=${S.layer}&head=${S.head}&pass=${S.pass}`);
  } catch (e) { /* a browser that refuses to change a file:// address: the page still works */ }
}

function go(step) { if (step !== S.step && step >= 0 && step < STEPS.length) { S.step = step; render(true); } }

function readAddress() {
  const q = new URLSearchParams(location.hash.slice(1));
  const i = STEPS.findIndex(s => s[0] === q.get("step"));
  if (i >= 0) S.step = i;
  const int = (name, max) => { const v = Number(q.get(name)); return q.has(name) && Number.isInteger(v) && v >= 0 && v < max ? v : null; };
  const t = int("token", N); if (t !== null && CI.has(t)) S.token = t;
  const l = int("layer", Math.max(CFG.n_layers, 1)); if (l !== null) S.layer = l;
  const h = int("head", CFG.n_heads); if (h !== null) S.head = h;
  const k = int("pass", D.passes.length); if (k !== null) S.pass = k;
}

document.addEventListener("click", e => {
  const at = name => e.target.closest(`[${name}]`);
  let hit;
  if ((hit = at("data-goto"))) { go(STEPS.findIndex(s => s[0] === hit.dataset.goto)); return; }
  if ((hit = at("data-token")) || (hit = at("data-follow"))) { S.token = Number(hit.dataset.token ?? hit.dataset.follow); render(); return; }
  if ((hit = at("data-layer")) || (hit = at("data-pick-layer"))) { S.layer = Number(hit.dataset.layer ?? hit.dataset.pickLayer); render(); return; }
  if ((hit = at("data-head")) || (hit = at("data-pick-head"))) { S.head = Number(hit.dataset.head ?? hit.dataset.pickHead); render(); return; }
  if ((hit = at("data-ablate"))) { [S.layer, S.head] = hit.dataset.ablate.split(":").map(Number); render(); return; }
  if ((hit = at("data-pass")) || (hit = at("data-pick-pass"))) {  // the card follows the token the chosen pass reads
    S.pass = Number(hit.dataset.pass ?? hit.dataset.pickPass);
    const q = D.passes[S.pass];
    if (q && CI.has(q.reads)) S.token = q.reads;
    render(); return;
  }
  if (e.target.closest("#prev")) go(S.step - 1);
  else if (e.target.closest("#next")) go(S.step + 1);
});

document.addEventListener("keydown", e => {
  if (e.altKey || e.ctrlKey || e.metaKey) return;
  const tag = e.target && e.target.tagName;
  if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (e.target && e.target.isContentEditable)) return;
  const moves = { ArrowRight: S.step + 1, PageDown: S.step + 1, ArrowLeft: S.step - 1, PageUp: S.step - 1, Home: 0, End: STEPS.length - 1 };
  if (e.key in moves) { e.preventDefault(); go(moves[e.key]); }
});

function header() {
  const c = CFG;
  document.getElementById("title").textContent = D.title || "tracer";
  const model = document.getElementById("model");
  model.textContent = `${c.name} · ${count(c.n_layers, "layer")} · d_model ${c.d_model} · ${count(c.n_heads, "head")}`;
  model.title = c.line + (D.storage ? `; ${D.storage}` : "");  // the terminal's header line (render/header.py)
  const badge = document.getElementById("badge");
  if (D.badge) { badge.textContent = `⚠ ${D.badge}`; badge.title = D.warning; badge.className = "badge"; }

}

header();
readAddress();
render(true);
