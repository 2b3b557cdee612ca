// tracer compare page (after core.js): two prompts of one length, both predictions, and activation patching
// as a heatmap of layers × positions (tracer.run.interventions.activation_patching's numbers). The sentences are
// tracer/render/words.py's, filled with say(), and the terminal's finished ones (D.said, tracer/render/compare.py).
// Every cell holds its number; hover or focus shows it whole.

function fraction(x) { return typeof x === "string" ? NaN : x; }   // "nan" (as --json writes it) → NaN
function twoPlaces(x) { return Number.isNaN(x) ? "nan" : num(x, 2); }

function promptsTable() {                 // A's and B's tokens, column by column, ≠ where they differ
  const [A, B] = D.tokens, diff = D.differs;
  const mark = i => (diff[i] ? "differs" : null);
  const head = el("tr", null, el("th", null, ""), A.map((t, i) => el("th", { class: mark(i), scope: "col" }, t.label)));
  const row = (name, toks) => el("tr", null, el("th", { scope: "row" }, name),
    toks.map((t, i) => el("td", { class: mark(i), title: `${name} ${t.label}: id ${t.id}` }, el("span", { class: "tt" }, t.text))));
  const marks = el("tr", { class: "marks" }, el("th", null, ""), diff.map((d, i) => el("td", { class: mark(i) }, d ? "≠" : "")));
  const n = diff.filter(d => d).length;
  document.getElementById("prompts-words").replaceChildren(el("h2", null, say("compare.prompts")),
    p(say("compare.line", { A: b("A"), a: D.prompts[0], B: b("B"), b: D.prompts[1], tokens: count(A.length, "token"),
      positions: `${count(n, "position")} ${n === 1 ? "differs" : "differ"}` })));
  return [el("table", { class: "grid prompts", id: "prompt-tokens" }, el("thead", null, head), el("tbody", null, row("A", A), row("B", B), marks))];
}

function predictionBars(name, pred, answer) {  // the run's top tokens, its answer marked
  const body = pred.ids.map((id, i) => el("tr", { class: id === answer ? "on" : null }, el("td", null, idEl(id)),
    el("td", { class: "r n", title: exact(pred.p[i]) }, prob(pred.p[i])),
    el("td", null, el("span", { class: "barbox" }, el("span", { class: "bar", style: `width: ${(100 * Math.min(Math.max(pred.p[i] || 0, 0), 1)).toFixed(1)}%` })))));
  return el("table", { class: "grid bars", id: `prediction-${name}` }, el("caption", null, say("compare.run_predicts", { name })), el("tbody", null, body));
}

function predictions() {
  const [a, b_] = D.answers;
  return [el("div", { class: "two" }, predictionBars("A", D.predictions[0], a),
    predictionBars("B", D.predictions[1], b_)), p(D.said.answers)];
}

function scaleLegend() {                       // the colour scale: viridis from 0 (B's answer) to 1 (A's)
  const stops = VIRIDIS.map((c, i) => `rgb(${c}) ${(100 * i / (VIRIDIS.length - 1)).toFixed(0)}%`).join(", ");
  return el("div", { class: "legend", id: "legend", role: "img", "aria-label": say("compare.scale") },
    el("span", null, "0 · B's answer"), el("span", { class: "scale", style: `background: linear-gradient(to right, ${stops})` }),
    el("span", null, "1 · A's answer"),
    el("span", { class: "note" }, say("compare.scale_note")));
}

function cellWords(l, t, v) {
  const [A, B] = D.tokens;
  return say("compare.cell", { layer: l, pos: A[t].label, a: A[t].text, b: B[t].text,
    what: Number.isNaN(v) ? say("compare.nan") : say("compare.recovers", { v: exact(v) }) });
}

function patchingMap() {                  // rows: the layer whose input is patched; columns: the position
  const [A, B] = D.tokens;
  const readout = el("p", { class: "readout", id: "patch-readout", "aria-live": "polite" }, say("compare.hover"));
  const head = el("tr", null, el("th", null, "into layer"), A.map((t, i) => el("th", { class: D.differs[i] ? "differs" : null, scope: "col",
    title: `${t.label}: A ${t.text}, B ${B[i].text}` }, t.label, el("br"), el("span", { class: "tt" }, t.text), D.differs[i] ? el("br") : null,
    D.differs[i] ? el("span", { class: "tt" }, B[i].text) : null)));
  const body = D.recovered.map((row, l) => el("tr", null, el("th", { scope: "row", class: "r" }, l), row.map((x, t) => {
    const v = fraction(x), c = Number.isNaN(v) ? null : viridis(v), words = cellWords(l, t, v);
    const style = Number.isNaN(v) ? "background: #ececec; color: #333" : `background: rgb(${c}); color: ${ink(c)}`;  // nan: no colour of the scale
    return el("td", { class: "cell", tabindex: 0, "data-layer": l, "data-pos": t, "data-recovered": String(x), title: words, "aria-label": words,
      style }, twoPlaces(v));
  })));
  const map = el("table", { class: "grid patching", id: "patching-map" }, el("thead", null, head), el("tbody", null, body));
  const show = e => { const td = e.target.closest("td.cell"); if (td) readout.textContent = td.getAttribute("aria-label"); };
  map.addEventListener("mouseover", show);
  map.addEventListener("focusin", show);
  return [el("h2", null, say("compare.title")), p(say("compare.patching")), scaleLegend(), el("div", { class: "mapwrap" }, map), readout, p(D.said.distance)];
}

function drawCompare() {
  document.getElementById("model").textContent = `model ${D.model.name}`;
  document.getElementById("prompts").replaceChildren(...promptsTable().flat());
  document.getElementById("predictions").replaceChildren(...predictions());
  document.getElementById("patching").replaceChildren(...patchingMap());
  document.body.dataset.drawn = "compare";
}

drawCompare();
