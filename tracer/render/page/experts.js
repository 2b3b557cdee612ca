// tracer page, with steps.js's part 3: a mixture of experts (the MLP step's routing of the followed token and
// the tokens × experts map of a layer, D.layers[l].moe) and attention sinks (the sink's row of the scores
// step, D.layers[l].sink). The sentences are tracer/render/words_experts.py's, as the terminal says them
// (tracer/render/experts.py, tracer/render/sinks.py's sink_share): laid out here, never re-worded.

function chosenWords(pairs) { return pairs.map(([e, w]) => `E${e} ${prob(w)}`).join(", "); }

function routeTable(M, i, t) {           // the router's highest scores: the chosen experts (weight, bar), the next ones not used
  const chosen = M.chosen[i], w = M.weights[i], top = M.top[i];
  const body = top.map(([e, s]) => {
    const j = chosen.indexOf(e), gone = M.removed.includes(e);
    return el("tr", { class: j >= 0 ? "on" : "masked" }, el("th", null, `E${e}`),
      el("td", { class: "r n", title: s === null ? null : exact(s) }, s === null ? "−∞" : num(s)),
      j >= 0 ? el("td", { class: "r n", title: exact(w[j]) }, prob(w[j])) : el("td", { class: "r" }, say(gone ? "experts.removed" : "experts.not_used")),
      el("td", null, j >= 0 ? el("span", { class: "barbox" }, el("span", { class: "bar", style: `width: ${(100 * w[j]).toFixed(1)}%` })) : ""));
  });
  const listed = new Set(top.map(([e]) => e));
  for (const e of M.removed) if (!listed.has(e)) body.push(el("tr", { class: "masked" }, el("th", null, `E${e}`), el("td", { class: "r" }, "−∞"),
    el("td", { class: "r" }, say("experts.removed")), el("td", null, "")));
  const rest = M.E - top.length - M.removed.filter(e => !listed.has(e)).length;
  if (rest > 0) body.push(el("tr", { class: "masked" }, el("th", null, "…"), el("td", { colspan: 3 }, say("experts.rest", { n: rest }))));
  const foot = el("tfoot", null, el("tr", null, el("th", null, "sum"), el("td", null, ""),
    el("td", { class: "r n" }, num(w.reduce((a, c) => a + c, 0))), el("td", null, "")));
  return el("table", { class: "grid route" }, el("caption", null, say("experts.table", { L: label(t) })),
    el("thead", null, el("tr", null, el("th", null, "expert"), el("th", { class: "r" }, "router score"), el("th", { class: "r" }, "weight"), el("th", null, ""))),
    el("tbody", null, body), foot);
}

function expertMap(l) {                   // rows: the carried tokens; columns: the experts some token chose; cells: the weights
  const M = D.layers[l].moe, pos = D.carried.slice(-64);
  const used = [...new Set(pos.flatMap(t => M.chosen[CI.get(t)]))].sort((a, c) => a - c);
  const cell = Math.max(8, Math.min(30, Math.floor(300 / Math.max(used.length, 1))));
  const show = cell >= 16, narrow = cell < 18 ? " narrow" : "";
  const table = el("table", { class: `heat experts${cell < 18 ? " small" : ""}`, "aria-label": say("experts.grid", { layer: l }) });
  table.append(el("tr", null, el("th", null, ""), used.map(e => el("th", { class: `k${narrow}` }, `E${e}`))));
  for (const t of pos) {
    const i = CI.get(t), tr = el("tr", { class: t === S.token ? "on" : null, "data-follow": t }, el("th", { class: "q", title: `${label(t)}: ${tokText(t)}` }, label(t)));
    for (const e of used) {
      const j = M.chosen[i].indexOf(e), style = `width:${cell}px;height:${cell}px`;
      if (j < 0) { tr.append(el("td", { class: "masked", style, "data-q": t, "data-e": e }, show ? "·" : "")); continue; }
      const w = M.weights[i][j], c = viridis(w);
      tr.append(el("td", { style: `${style};background:rgb(${c});color:${ink(c)}`, "data-q": t, "data-e": e, "data-w": w }, show ? glyph(w) : ""));
    }
    table.append(tr);
  }
  const readout = el("p", { class: "readout", "aria-live": "polite" }, say("experts.map_click"));
  table.addEventListener("mouseover", ev => { const td = ev.target.closest("td[data-e]"); if (td) readout.textContent = expertCell(l, td); });
  return el("div", { class: "mapbox" }, el("h3", null, say("experts.grid", { layer: l })), table,
    el("p", { class: "note" }, say("experts.grid_legend")), readout);
}

function expertCell(l, td) {              // a cell's words: the token's weight on the expert and the router's score
  const M = D.layers[l].moe, t = Number(td.dataset.q), e = Number(td.dataset.e), i = CI.get(t);
  const found = M.top[i].find(([x]) => x === e), s = found && found[1] !== null ? exact(found[1]) : null;
  if (td.dataset.w === undefined) return say("experts.cell_not", { layer: l, q: label(t), q_text: tokText(t), e, s: s === null ? "" : say("experts.cell_score", { s }) });
  return say("experts.cell", { layer: l, q: label(t), q_text: tokText(t), e, w: exact(Number(td.dataset.w)), s: s === null ? "—" : s });
}

function routing(l, t) {                  // the followed token through layer l's experts, as the terminal's walkthrough
  const M = D.layers[l].moe, i = CI.get(t), L = label(t), given = CFG.layer_norm && has("norms_before") ? "ln2(x)" : "x";
  const [xr, x] = M.reads || [given, given];  // what the router and the experts are given (Gemma 4: each its own norm of x)
  if (i === undefined) return [el("p", { class: "missing" }, say("page.absent"))];
  const chosen = M.chosen[i], w = M.weights[i], top = M.top[i];  // a removed expert's score, −∞, is carried as null
  const scores = top.map(([e, s]) => `E${e} ${s === null ? "−∞" : num(s)}`).join(", ") + (M.E > top.length ? say("experts.more", { n: M.E - top.length }) : "");
  const out = [p(b(say("experts.title")), say("experts.router", { E: M.E, x: xr, shape: shape(CFG.d_model, M.E), bias: M.bias ? say("experts.bias") : "", scores }))];
  out.push(el("div", { class: "two" }, el("div", { class: "side" }, routeTable(M, i, t),
    p(say("experts.choice", { how: M.route, chosen: chosenWords(chosen.map((e, j) => [e, w[j]])) }))), expertMap(l)));
  if (M.out) {
    chosen.forEach((e, j) => out.push(eq(j === 0 ? say("experts.one", { e, middle: fill(M.expert, { e }) }) : say("experts.same", { e }), `E${e}(${x})`, vecOf(M.out, t, j))));
    out.push(eq(say("experts.sum", { terms: chosen.map((e, j) => `${num(w[j])}×E${e}(${x})`).join(" + ") }), `moe_${L}`, vecOf(M.mixed, t)));
  }
  if (M.shared) out.push(eq(say("experts.shared", { gate: num(M.gate[i]), width: M.shared_width }), `shared_${L}`, vecOf(M.shared, t)));
  const moved = M.rerouted[String(t)];
  if (moved) out.push(p(b(say("experts.rerouted", { removed: M.removed.map(e => `E${e}`).join(", "), before: chosenWords(moved.before), after: chosenWords(moved.after) }))));
  const unused = M.E - new Set(chosen).size;
  out.push(el("p", { class: "note" }, say("experts.skipped", { unused, E: M.E, share: (100 * unused / M.E).toFixed(1) })));
  return out;
}

function sinkShare(l, h, t) {             // what head h's sink took of token t's weight in layer l, and its logit; null without sinks
  const K = D.layers[l].sink, i = CI.get(t);
  return K && i !== undefined && K.share[h][i] !== null ? { share: K.share[h][i], logit: K.logit[h] } : null;
}

function sinkWords(l, h, t) {             // the terminal's sentence of the sink's share (render/layer.py), or null
  const k = sinkShare(l, h, t);
  return k ? p(say("sink.share", { h, share: prob(k.share), rest: prob(1 - k.share) })) : null;
}
