// tracer page, part 4 of 7: predicting the next token (with the temperature control, which recomputes
// softmax(logits ÷ T) over the recorded logits, as tracer.core.equations.tempered_softmax does), the loop and
// the KV cache, every position's prediction, the logit lens and the checks. The sentences the terminal
// says too are tracer/render/words.py's (say) or sent finished (D.kv_notes, D.generated, a pass's lens.notes).

const LOGITS = new Map();
function logitsOf(k) {                    // the recorded last-position logits of pass k, exactly (or null)
  const pass = D.passes[k];
  if (!pass.logits) return null;
  if (!LOGITS.has(k)) {
    const bin = atob(pass.logits.b64), bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const view = new DataView(bytes.buffer), f64 = pass.logits.dtype === "float64", size = f64 ? 8 : 4;
    const values = new Float64Array(bytes.length / size);
    for (let i = 0; i < values.length; i++) values[i] = f64 ? view.getFloat64(i * size, true) : view.getFloat32(i * size, true);
    LOGITS.set(k, { values, f32: !f64 });
  }
  return LOGITS.get(k);
}

function softmaxAt(k, T) {                // softmax(logits ÷ T), the maximum subtracted first (in float32 for a float32 model)
  const L = logitsOf(k);
  if (!L) return null;
  const x = L.values;
  let m = -Infinity, top = 0;
  for (let i = 0; i < x.length; i++) if (x[i] > m) { m = x[i]; top = i; }  // the first maximum: ties to the lower id
  if (T === 0) return { p: i => (i === top ? 1 : 0), scaled: () => null, n: x.length, argmax: true };  // greedy: no softmax
  const e = new Float64Array(x.length);
  let z = 0;
  for (let i = 0; i < x.length; i++) { e[i] = Math.exp((L.f32 ? Math.fround(x[i] - m) : x[i] - m) / T); z += e[i]; }
  return { p: i => e[i] / z, scaled: i => x[i] / T, n: x.length };
}

const TEMP = (() => {                     // the temperature control, made once so that redraws keep its focus
  const recorded = D.settings.temperature;
  const gaps = D.passes.map(q => (q.top && q.top.logit && q.top.logit.length > 1 ? q.top.logit[0] - q.top.logit[1] : 0));
  const most = Math.min(50, Math.max(3, Math.ceil(recorded), Math.ceil(2 * Math.max(...gaps))));  // far enough to flatten a peaked choice
  const input = el("input", { id: "temperature", type: "range", min: "0", max: String(most), step: "0.05",
    value: String(S.T), "aria-describedby": "temperature-note" });
  const value = el("output", { id: "temperature-value", for: "temperature" });
  const set = T => { S.T = T; input.value = String(T); updateProbs(); };
  const reset = el("button", { type: "button", id: "temperature-reset" },
    recorded > 0 ? say("temperature.reset", { T: num(recorded, 2) }) : say("temperature.one"));
  const argmax = el("button", { type: "button", id: "temperature-zero" }, say(recorded > 0 ? "temperature.zero" : "temperature.zero_run"));
  const note = el("p", { class: "note", id: "temperature-note" });
  const scale = el("p", { class: "note" });
  const probs = el("div", { id: "probs", "aria-live": "polite" });
  const topk = el("table", { id: "topk", class: "grid" });
  input.addEventListener("input", () => { S.T = Number(input.value); updateProbs(); });
  reset.addEventListener("click", () => set(initialTemperature()));
  argmax.addEventListener("click", () => set(0));
  const branchNote = el("p", { class: "note", id: "branch-note" }, say("branch.click"));
  const box = el("div", { class: "temp" }, el("div", { class: "temp-row" }, el("label", { for: "temperature" }, "temperature T "), input, value, reset, argmax),
    note, probs, scale, topk, branchNote);
  box.addEventListener("click", e => {     // a candidate clicked: force it at this pass and continue (a branch)
    const hit = e.target.closest("#probs [data-id], #topk tr[data-id], .stage-bars [data-id]");
    if (hit) branch(S.pass, Number(hit.dataset.id));
  });
  return { box, input, value, note, probs, topk, recorded, scale, branchNote };
})();

function shellWord(s) { return /^[\w.\/:=-]+$/.test(s) ? s : `'${s.replace(/'/g, "'\\''")}'`; }

function branch(k, id) {                  // force token `id` after pass k's text and continue: tracer serve runs it
  const B = D.branch, raw = B.raw[String(id)] !== undefined ? B.raw[String(id)] : text(id), forced = B.prefix[k] + raw;
  const left = Math.max(B.n_new - B.before[k].length - 1, 0);
  const command = ["tracer trace", shellWord(forced), B.model ? `--model ${shellWord(B.model)}` : "", `-n ${left}`, B.flags].filter(x => x).join(" ");
  const served = typeof window.tracerBranch === "function";
  const token = el("span", { class: "tt" }, text(id)), before = el("span", { class: "tt" }, B.prefix[k]);
  const code = el("code", { id: "branch-command" }, command);
  TEMP.branchNote.replaceChildren(el("span", null, served ? say("branch.served", { token, k, text: before, command: code })
    : say("branch.static", { token, k, text: before, command: code })));
  if (served) window.tracerBranch({ force: B.before[k].concat([id]), max_new_tokens: left, token: text(id), pass: k });
}

function updateProbs() {
  const k = S.pass, pass = D.passes[k], T = S.T;
  TEMP.value.textContent = num(T, 2);
  if (!pass.top) { TEMP.probs.replaceChildren(p(say("predict.none"))); TEMP.topk.replaceChildren(); return; }
  const at = softmaxAt(k, T), ids = pass.top.ids;
  const ps = ids.map((id, i) => (at ? at.p(id) : pass.top.probs[i]));
  const rec = TEMP.recorded;
  TEMP.note.textContent = at && at.argmax ? say("temperature.argmax", { n: integer(at.n), k })
    : at ? say("temperature.softmax", { T: num(T, 2), n: integer(at.n), k }) : say("temperature.absent", { k });
  TEMP.input.disabled = !at;
  TEMP.probs.replaceChildren(...ids.map((id, i) => el("div", { class: `pcol${id === pass.chosen ? " chosen" : ""}`, "data-id": id, "data-p": String(ps[i]),
    title: `${text(id)} (id ${id}): ${exact(ps[i])}` },
    el("span", { class: "n" }, prob(ps[i])), el("span", { class: "fill", style: `height:${(80 * Math.min(Math.max(ps[i], 0), 1)).toFixed(1)}%` }),
    el("span", { class: "ptok" }, id === pass.chosen ? "▶" : "", el("span", { class: "tt" }, short(text(id), 8))))));
  TEMP.scale.textContent = say("temperature.scale", { n: ids.length, T: num(at ? T : rec, 2) });
  const cuts = pass.top.final && rec > 0;
  TEMP.topk.replaceChildren(el("thead", null, el("tr", null, ["rank", "token (id)", "logit", T === 0 ? "÷ T (T = 0: argmax)" : `÷ ${num(T, 2)}`, "p", `recorded (T ${num(rec > 0 ? rec : 1, 2)})`,
    cuts ? "after cuts" : null, ""].filter(x => x !== null).map(h => el("th", null, h)))),
  el("tbody", null, ids.map((id, i) => el("tr", { class: id === pass.chosen ? "on" : null, "data-id": id },
    el("td", { class: "r" }, pass.top.rank[i]), el("td", { title: `id ${id}` }, el("span", { class: "tt" }, short(text(id), 10)), ` ${id}`),
    el("td", { class: "r n" }, pass.top.logit ? num(pass.top.logit[i]) : "—"),
    el("td", { class: "r n" }, at ? num(at.scaled(id)) : "—"), el("td", { class: "r n", title: exact(ps[i]) }, prob(ps[i])),
    el("td", { class: "r n" }, prob(pass.top.probs[i])), cuts ? el("td", { class: "r n" }, prob(pass.top.final[i])) : null,
    el("td", null, id === pass.chosen ? `◀ ${pass.appended ? `at ${label(pass.n)}` : "chosen"}` : "")))));
}

let STAGE = null;                         // the draw's stage the picture shows (null: the last one)
function stagesEl(pass) {                 // the draw's stages as one picture: the same tokens' probabilities, stage by stage
  const st = pass.stages, n = st.stages.length, box = el("div", { class: "stages", id: "stages" });
  const draw = () => {
    const i = STAGE === null ? n - 1 : Math.min(STAGE, n - 1), stage = st.stages[i], before = i > 0 ? st.stages[i - 1].p : null;
    const prev = el("button", { type: "button", id: "stage-prev", disabled: i === 0 ? "" : null }, say("sample.prev"));
    const next = el("button", { type: "button", id: "stage-next", disabled: i === n - 1 ? "" : null }, say("sample.next"));
    prev.addEventListener("click", () => { STAGE = Math.max(i - 1, 0); draw(); });
    next.addEventListener("click", () => { STAGE = Math.min(i + 1, n - 1); draw(); });
    const bars = el("div", { class: "stage-bars" }, st.ids.map((id, j) => {
      const pr = stage.p[j], was = before ? before[j] : pr, cut = pr === 0 && was > 0;
      return el("div", { class: `pcol${id === st.chosen ? " chosen" : ""}${pr === 0 ? " cut" : ""}`, "data-id": id,
        title: `${text(id)} (id ${id}): ${exact(was)} → ${exact(pr)}` },
        el("span", { class: "n" }, prob(pr)), el("span", { class: "fill", style: `height:${(80 * Math.min(Math.max(pr, 0), 1)).toFixed(1)}%` }),
        el("span", { class: "ptok" }, cut ? "✗" : id === st.chosen ? "▶" : "", el("span", { class: "tt" }, short(text(id), 8))));
    }));
    box.replaceChildren(p(say("sample.picture", { n: st.ids.length })),
      el("div", { class: "temp-row" }, prev, b(say("sample.stage_of", { i: i + 1, n, stage: stage.label })),
        stage.changed ? ` (${say("sample.changed", { n: integer(stage.changed) })})` : "", next), bars);
  };
  draw();
  return box;
}

function sequenceEl(n, chosen, named) {  // named: the chosen token as the terminal names it ("G = ␣G", "↵ at H")
  const box = el("p", { class: "sequence" }, b(seq(0, n)));
  if (chosen === null || chosen === undefined) return box;
  box.append(" → ", b(seq(0, n)), el("mark", null, label(n)));
  if (text(chosen) !== label(n)) box.append(`   (${named})`);
  return box;
}

SLIDES.predict = function slidePredict() {
  const k = S.pass, pass = D.passes[k], r = pass.reads, L = label(r), next = label(r + 1);
  const G = pass.named && !pass.named.startsWith(`${next} = `) ? pass.named : next;  // "↵ at H", never "predicts H" for a newline
  const out = [p(`Pass ${k}. `, say("predict.intro", { layers: count(CFG.n_layers, "layer"), L, G }))];
  const unembed = say("predict.unembed", { shape: shape(CFG.d_model, CFG.d_vocab), tied: CFG.tied_unembed ? say("predict.tied") : "" });
  const lv = pass.logits_vec;
  out.push(el("table", { class: "eqs" }, el("tbody", null,
    el("tr", { title: CFG.layer_norm ? SW.norm.final : null },
      el("td", null, say("predict.final", { L })), el("th", null, "f ="), el("td", { class: "val" }, vecEl(vecOf(D.inputs.final, r)))),
    el("tr", null, el("td", null, SW.softcap.logits ? say("predict.softcapped", { unembed, formula: SW.softcap.logits }) : unembed), el("th", null, "logits ="),
      el("td", { class: "val" }, vecEl(lv ? { vals: lv.rows[0], dims: lv.dims, whole: lv.whole, norm: lv.norm[0] } : null))))));
  out.push(TEMP.box);
  if (D.settings.temperature === 0) out.push(p("The run: ", say("predict.greedy"), b(say("predict.greedy_bold")), say("predict.greedy_rest"), "."));
  if (pass.sampling) {                     // the terminal's stages and sentences of the draw (render/sampling.py)
    out.push(p(b(pass.sampling.stages)), ...pass.sampling.notes.map(words => el("p", { class: "note" }, words)));
  }
  if (pass.stages) out.push(stagesEl(pass));
  if (pass.chosen !== null) {
    const end = CFG.end_ids.includes(pass.chosen);
    out.push(p(b(say("predict.chosen")), end || text(pass.chosen) === next ? idEl(pass.chosen) : el("span", { class: "tt" }, pass.named), ` (id ${pass.chosen})`));
    out.push(end ? p(say("predict.end", { token: text(pass.chosen) }))
      : pass.appended ? sequenceEl(pass.n, pass.chosen, pass.named) : p(`${seq(0, pass.n)} `, say("loop.not_appended", { why: D.stopped })));
  }
  if (D.warning) out.push(el("p", { class: "warn" }, say("predict.untrained")));
  setTimeout(updateProbs, 0);
  return out;
};

SLIDES.loop = function slideLoop() {
  const k = S.pass, pass = D.passes[k], n = pass.n, start = pass.start;
  const out = [p(say("loop.intro"))];
  const head = p(b(`pass ${k}: `), k === 0 ? say("loop.reads_prompt", { span: span(0, n) }) : say("loop.reads", { named: pass.reads_named }));
  if (start > 0) head.append(say("loop.computes", { new: span(start, n), old: span(0, start) }));
  else if (k > 0) head.append(say("loop.recomputes", { n }));
  out.push(head);
  const chips = el("div", { class: "cache" });
  for (let j = 0; j < n; j++) {
    const cached = j < start;
    chips.append(el("span", { class: `slot ${cached ? "cached" : "new"}`, title: `${label(j)}: ${cached ? say("loop.cached", { k: passOf(j) }) : say("loop.computed")}` },
      b(label(j)), el("small", null, cached ? `cache ${passOf(j)}` : "computed")));
  }
  if (pass.chosen !== null && pass.appended) chips.append(el("span", { class: "slot next" }, b(label(n)), el("small", null, "predicted")));
  out.push(chips);
  const saved = pass.full ? Math.round(100 * (pass.full - pass.macs) / pass.full) : 0;
  out.push(p(say("loop.macs", { macs: integer(pass.macs), full: integer(pass.full), saved })));
  if (pass.top && pass.chosen !== null) {
    const alts = pass.top.ids.slice(0, 3).map((id, i) => `${text(id)} ${cprob(pass.top.probs[i])}`).join(", ");
    const i = pass.top.ids.indexOf(pass.chosen);
    out.push(p(say("loop.predicts"), b(CFG.end_ids.includes(pass.chosen) ? text(pass.chosen) : pass.named),
      say("loop.top3", { p: prob(pass.top.probs[i]), alts })));
    if (pass.appended) out.push(sequenceEl(n, pass.chosen, pass.named));
  }
  // several rows (beams) or a draft model's passes: every pass in the order run, each saying whose it is (sent
  // finished, as the terminal says it); a pass of row 0's sequence is one of D.passes (`step`), the others are not chosen
  const all = D.rows ? D.rows.passes : D.passes, step = (q, i) => (D.rows ? q.step : i);
  const rows = all.map((q, i) => el("tr", { class: step(q, i) === k ? "on" : null, "data-pick-pass": step(q, i) },
    el("td", { class: "r" }, step(q, i) === k ? `▶ ${i}` : i), D.rows ? el("td", null, q.who) : null,
    el("td", null, q.start ? `${seq(0, q.start)} | ${seq(q.start, q.n)}` : `| ${seq(0, q.n)}`), el("td", { class: "r" }, `${q.start} + ${q.n - q.start}`),
    el("td", { class: "r n" }, integer(q.macs)), el("td", { class: "r n" }, integer(q.full)),
    el("td", { class: "r" }, `${q.full ? Math.round(100 * (q.full - q.macs) / q.full) : 0}%`)));
  const heads = ["pass", ...(D.rows ? ["row"] : []), "reused | computed", "rows", "multiply-adds", "recompute all", "saved"];
  out.push(el("table", { class: "grid" }, el("caption", null, say("loop.table", { state: !D.settings.cache ? say("loop.cache_off") : "on" })),
    el("thead", null, el("tr", null, heads.map(h => el("th", null, h)))),
    el("tbody", null, rows)));
  out.push(...D.kv_notes.map(words => el("p", { class: "note" }, words)));  // the terminal's notes (render/loop.py)
  if (D.cache_kinds) out.push(cacheKinds(D.cache_kinds));  // a hybrid: what each kind of layer keeps, in bytes
  if (D.verify_cache) out.push(p(say(D.verify_cache.ok ? "verify.ok" : "verify.bad"), " (--verify-cache)"));
  out.push(p(D.generated));
  return out;
};

SLIDES.positions = function slidePositions() {
  const out = [p(say("positions.rows"), say("positions.click"))];
  const ends = new Set(D.passes.map(q => q.reads));
  const body = [];
  D.positions.forEach((q, t) => {
    if (!q) return;
    body.push(el("tr", { class: t === S.token ? "on" : null, "data-follow": CI.has(t) ? t : null }, el("th", null, label(t)), el("td", null, tokEl(t)),
      el("td", null, idEl(q.top)), el("td", { class: "r n" }, prob(q.top_p)), el("td", null, idEl(q.next), ends.has(t) ? "*" : ""),
      el("td", { class: "r n" }, prob(q.next_p)), el("td", { class: "r n" }, num(q.loss)), el("td", null, ends.has(t) ? "◀" : "")));
  });
  out.push(el("table", { class: "grid" }, el("thead", null, el("tr", null, ["", "token", "top next", "p", "actual next", "p(actual)", "loss", ""].map(h => el("th", null, h)))),
    el("tbody", null, body)));
  if (D.loss_mean !== null) out.push(p(say("positions.mean", { rows: span(0, D.n_prompt - 1), mean: num(D.loss_mean), n: integer(CFG.d_vocab),
    uniform: num(Math.log(CFG.d_vocab)) })));
  out.push(p(say("positions.last", { L: label(D.passes[0].reads) })));  // which rows a step computes, where every row's prediction is used
  return out;
};

SLIDES.lens = function slideLens() {
  const own = D.passes[S.pass].lens, k = own ? S.pass : 0, lens = D.passes[k].lens;
  const out = [p(say("lens.title", { through: SW.norm.lens }), say("lens.question"))];
  if (!lens) return out.concat(p(say("lens.none")));
  if (!own) out.push(el("p", { class: "note" }, say("lens.borrowed", { k: S.pass })));
  let cols = lens.positions.map((t, c) => c).slice(-7);
  const mine = lens.positions.indexOf(S.token);
  if (mine >= 0 && !cols.includes(mine)) cols = [mine].concat(cols.slice(1));
  const last = lens.positions.length - 1;  // the rank column: the last position's next token, row by row
  const headRow = el("tr", null, el("th", null, lens.head), cols.map(c => el("th", { class: lens.positions[c] === S.token ? "on" : null },
    `${label(lens.positions[c])} `, tokEl(lens.positions[c]))), el("th", { class: "r" }, say("lens.rank", { token: short(text(lens.target[last]), 8) })));
  const body = lens.top.map((row, r) => el("tr", null, el("th", null, lens.rows[r]),
    cols.map(c => {
      const pr = lens.p[r][c], hit = row[c] === lens.target[c], a = Math.min(Math.max(pr, 0), 1);
      return el("td", { class: hit ? "hit" : null, title: `${text(row[c])}: ${exact(pr)}`,
        style: `background: rgba(30, 80, 200, ${(0.08 + 0.6 * a).toFixed(3)}); color: ${a > 0.6 ? "#fff" : "#000"}` },
        el("span", { class: "tt" }, short(text(row[c]), 8)), ` ${cprob(pr)}${hit ? " ✓" : ""}`);
    }), el("td", { class: "r n" }, integer(lens.rank[r][last] + 1))));
  // in a box that scrolls sideways, opened at its right end: the predicting position and the rank in view, the rows' names kept
  out.push(el("div", { class: "lenswrap", "data-scroll-end": "" }, el("table", { class: "grid lens" }, el("thead", null, headRow), el("tbody", null, body))));
  if (cols.length < lens.positions.length) out.push(el("p", { class: "note" }, say("lens.last", { n: cols.length, total: lens.positions.length })));
  out.push(...lens.notes.map(words => p(words)));  // the terminal's sentences (render/lens.py)
  return out;
};

SLIDES.checks = function slideChecks() {
  const ok = D.checks.filter(c => c.ok).length, n = D.checks.length;
  const bad = D.checks.filter(c => !c.ok);  // the errors are the lesson: first, in view
  const out = [el("p", { class: `verdict ${ok === n ? "ok" : "bad"}` }, say("checks.agree", { ok, n }), ok < n ? say("checks.disagree", { bad: n - ok }) : ""),
    bad.length ? [el("h3", null, say("checks.bad")), bad.map(checkEl)] : null,
    D.about.filter(a => a.startsWith("Note")).map(a => el("p", { class: "about" }, a)),
    bad.length ? el("h3", null, say("checks.all")) : null];
  for (const [id, , title] of STEPS) {
    const here = id === "checks" ? [] : D.checks.filter(c => c.section === id);
    if (!here.length) continue;
    out.push(el("h3", null, el("button", { class: "link", type: "button", "data-goto": id }, title)));
    here.forEach(c => out.push(checkEl(c)));
  }
  const rest = D.checks.filter(c => c.section === "checks" || !STEPS.some(s => s[0] === c.section));
  if (rest.length) out.push(el("h3", null, "Elsewhere"), rest.map(checkEl));
  return out;
};
