// tracer page, part 3 of 6: the steps of the article, one slide each, drawn from the recorded numbers
// for the followed token (S.token), the layer (S.layer), the head (S.head) and the pass (S.pass). The
// sentences the terminal says too are tracer/render/words.py's (say(key, slots)): laid out here, never re-worded.

function noLayers() { return [p(say("layers.none"))]; }
function L_() { return label(S.token); }

function followBtn(t, kids) { return el("button", { class: "link", type: "button", "data-follow": t }, kids); }

function slideTokens() {
  const n = D.n_prompt;
  const out = [p(say("tokens.intro", { tokens: count(n, "token"), first: n > 1 ? `${label(0)}–${label(n - 1)}` : "A",
    vocab: CFG.vocab, n_vocab: integer(CFG.n_vocab) }), " Click a token to follow it through every step.")];
  if (D.warning) out.push(el("div", { class: "warn", role: "note" }, b("⚠ "), D.warning));
  const rows = D.tokens.map((tk, t) => el("tr", { class: t === S.token ? "on" : null, "data-follow": t < N && CI.has(t) ? t : null },
    el("td", null, b(tk.label)), el("td", null, el("span", { class: "tt" }, tk.text)), el("td", { class: "r" }, tk.id),
    el("td", { class: "r" }, t),
    el("td", null, t < n ? "the prompt" : tk.pass !== null ? `generated; pass ${tk.pass} read it`
      : CFG.end_ids.includes(tk.id) ? "generated: the end token, so generation stops" : "generated, appended after the last pass")));
  out.push(el("table", { class: "grid" }, el("thead", null, el("tr", null, ["token", "text", "id", "position", ""].map(h => el("th", null, h)))),
    el("tbody", null, rows)));
  out.push(...D.about.map(a => el("p", { class: "about" }, a)));
  out.push(el("p", { class: "note" }, modelWords()));
  if (D.training) out.push(p(D.training));
  if (D.left_out.length) out.push(el("p", { class: "note" }, "Left out of this page (its size): ", D.left_out.join("; "), "."));
  return out;
}

function modelWords() {                   // the terminal's header: the model and how the run was sampled
  const s = D.settings;
  let words = `${CFG.line}.`;
  if (s) {
    const bits = [s.temperature === 0 ? "temperature 0 (greedy)" : `temperature ${s.temperature}`];
    if (s.top_k !== null) bits.push(`top-k ${s.top_k}`);
    if (s.top_p !== null) bits.push(`top-p ${s.top_p}`);
    bits.push(`seed ${s.seed}`, s.cache ? "KV cache on" : "KV cache off", count(D.tokens.length - D.n_prompt, "new token"));
    words += ` The run: ${bits.join(", ")}.`;
  }
  return words;
}

function slideEmbed() {
  const t = S.token, L = L_(), I = D.inputs;
  const out = [p(`Each token becomes a vector of ${CFG.d_model} numbers: its row of the embedding matrix`,
    has("positions_added") ? ", plus the vector of its position." : ".")];
  out.push(eq(say("embed.row", { L, shape: shape(CFG.d_vocab, CFG.d_model), id: D.tokens[t].id }), `E_${L}`, vecOf(I.E, t)));
  if (has("positions_added")) {
    out.push(eq(say("embed.position", { t, kind: SW.positions.short }), `P_${L}`, vecOf(I.P, t)));
    if (CFG.n_layers) out.push(eq(say("embed.sum", { L }), `x_${L}`, vecOf(D.layers[0].x, t)));
  } else if (CFG.n_layers) {
    if (CFG.embed_scale) out.push(p(say("embed.scale", { d_model: CFG.d_model, factor: num(Math.sqrt(CFG.d_model)) })));
    out.push(eq(fill(SW.positions.instead, { L }) + (CFG.embed_scale ? say("embed.times", { d_model: CFG.d_model }) : ""),
      `x_${L}`, vecOf(D.layers[0].x, t)));
  }
  if (CFG.n_layers && D.layers[0].x && D.layers[0].x.whole && CFG.d_model <= 16 && D.carried.length <= 40) {
    out.push(el("h3", null, "Every token's input to layer 0 (a row each)"), matrix(D.layers[0].x, D.carried));
  }
  return out;
}

function matrix(block, positions) {       // rows of vectors, each number tinted by sign and size
  const scale = Math.max(...block.rows.flat().map(x => Math.abs(x || 0)), 1e-12);
  const body = positions.map((t, i) => el("tr", { class: t === S.token ? "on" : null, "data-follow": t },
    el("th", null, label(t)), block.rows[i].map((x, d) => el("td", { class: "n", style: tint(x, scale), title: `${label(t)}, dim ${d}: ${exact(x)}` }, num(x)))));
  return el("table", { class: "grid matrix" }, el("tbody", null, body));
}

function visibility(t, l) {               // what token t sees in layer l: the cache, the sliding window, the causal mask
  const k = passOf(t), st = D.passes[k], L = label(t), lw = D.layer_words[l];
  const seen = []; for (let j = 0; j <= t; j++) seen.push(label(j));
  let s = t === 0 ? say("sees.self", { L }) : say("sees.keys", { L, seen: letters(seen), t });
  if (st.start > 0) s += say("sees.cache", { cached: span(0, st.start) });
  if (lw.global) s += say("sees.global", { layer: l });
  if (lw.window !== null && t >= lw.window) s += say("sees.window", { window: lw.window, hidden: span(0, t - lw.window + 1), last: t - lw.window });
  const box = p(s + "; ");
  if (t + 1 < st.n) box.append(b(say("mask.hides") + span(t + 1, st.n)), say("mask.later", { where: t + 2 === st.n ? `position ${t + 1}` : `positions ${t + 1}–${st.n - 1}` }));
  else box.append(say("mask.nothing"), b(say("mask.last", { L })));
  return box;
}

function inputEq(l, t) {
  const L = label(t), x = vecOf(D.layers[l].x, t);
  const first = SW.positions.source;
  return l === 0 ? eq(`${L}'s input to layer 0 (${first})`, `x_${L}`, x) : eq(say("layer.input", { L, prev: l - 1 }), `x_${L}`, x);
}

function slideQKV() {
  if (!CFG.n_layers) return noLayers();
  const l = S.layer, h = S.head, t = S.token, L = L_(), Y = D.layers[l], H = CFG.n_heads;
  const out = [p(`Layer ${l}, head ${h} of ${H}. The article's analogy: the query is what ${L} searches for, `,
    "each key is what a token can be found by, each value is the content it hands over.")];
  out.push(inputEq(l, t));
  if (CFG.layer_norm && has("norms_before")) out.push(eq(fill(SW.norm.ln1, { x: `x_${L}` }), `${SW.norm.short}(x_${L})`, vecOf(Y.ln1, t)));
  const KV = CFG.n_kv_heads || H, per = H / KV, g = Math.floor(h / per);
  const w = H > 1 ? say("head.slices", { all: shape(H, CFG.d_model, CFG.d_head), slice: shape(CFG.d_model, CFG.d_head) }) : shape(CFG.d_model, CFG.d_head);
  out.push(KV < H ? p(b(`head ${h}`), say("head.gqa", { H, shape: w, g, KV, kv_shape: shape(KV, CFG.d_model, CFG.d_head), first: g * per, last: (g + 1) * per - 1 }))
    : H > 1 ? p(b(`head ${h}`), say("head.of", { H, shape: w })) : p(say("head.one", { shape: w })));
  if (l === 0) for (const words of D.storage_example || []) out.push(p(words));  // how the file stores W_Q, one number worked
  const src = CFG.layer_norm && has("norms_before") ? `ln1(x_${L})` : `x_${L}`, sl = H > 1 ? `[${h}]` : "", kl = H > 1 ? `[${g}]` : "";
  if (has("rotary")) out.push(p(b(say("rope.title")), fill(D.layer_words[l].rope, { L, t }), say("rope.then"),
    " Q and K below are before the rotation (tracer trace shows them after)."));
  for (const m of ["Q", "K", "V"]) out.push(eq("", say("head.vector", { L, m, src, slice: m === "Q" ? sl : kl }), vecOf(Y[m.toLowerCase()], t, h)));
  out.push(visibility(t, l));
  const row = attRow(l, h, t), start = stepStart(t);
  let keys = row ? row.keys.filter(j => CI.has(j)) : []; let more = 0;
  const absent = t + 1 - D.carried.filter(j => j <= t).length;
  if (keys.length > 12 && row.w) {
    const strong = keys.map((j, i) => [j, row.w[i]]).sort((a, c) => c[1] - a[1]).slice(0, 8).map(x => x[0]).sort((a, c) => a - c);
    more = keys.length - strong.length; keys = strong;
  }
  const body = keys.map(j => el("tr", { class: j === t ? "on" : null, "data-follow": CI.has(j) ? j : null }, el("th", null, label(j)),
    start > 0 ? el("td", null, j < start ? `cache ${passOf(j)}` : "new") : null,
    el("td", null, vecEl(vecOf(Y.k, j, h))), el("td", null, vecEl(vecOf(Y.v, j, h)))));
  out.push(el("table", { class: "grid kv" }, el("thead", null, el("tr", null, el("th", null, "key"), start > 0 ? el("th", null, "from") : null,
    el("th", null, has("rotary") ? "K (key, before the rotation)" : "K (key)"), el("th", null, "V (value)"))), el("tbody", null, body)));
  if (more) out.push(el("p", { class: "note" }, `the ${keys.length} keys ${L} weighs most; ${more} more visible keys are not listed`));
  if (absent > 0) out.push(el("p", { class: "note" }, `the keys and values of ${count(absent, "earlier position")} are not in this page (see “left out”)`));
  return out;
}

function scoreTable(l, h, t) {
  const row = attRow(l, h, t), L = label(t);
  if (!row || (!row.w && !row.s && !row.d)) return el("p", { class: "missing" }, "no attention recorded for this token here");
  const scaled = CFG.scale_scores && row.s;
  const head = el("tr", null, el("th", null, "key"), row.d ? el("th", { class: "r" }, `${L}_Q·K`) : null,
    scaled ? el("th", { class: "r" }, `÷ √${CFG.d_head}`) : null, row.w ? el("th", { class: "r" }, "weight") : null, row.w ? el("th", null, "") : null);
  let shownKeys = row.keys.map((j, i) => i), rest = row.rest || 0;
  if (row.w && row.keys.length > 12) {  // the 8 strongest keys and the token itself, as the terminal's brief tables
    const strong = shownKeys.slice().sort((a, c) => row.w[c] - row.w[a]).slice(0, 8);
    const me = row.keys.indexOf(t);
    if (me >= 0 && !strong.includes(me)) strong.push(me);
    shownKeys = strong.sort((a, c) => a - c);
    rest += row.w.reduce((a, w, i) => a + (strong.includes(i) ? 0 : w), 0);
  }
  const body = shownKeys.map(i => [row.keys[i], i]).map(([j, i]) => el("tr", { class: j === t ? "on" : null }, el("th", null, label(j)),
    row.d ? el("td", { class: "r n", title: exact(row.d[i]) }, num(row.d[i])) : null,
    scaled ? el("td", { class: "r n", title: exact(row.s[i]) }, num(row.s[i])) : null,
    row.w ? el("td", { class: "r n", title: exact(row.w[i]) }, prob(row.w[i])) : null,
    row.w ? el("td", null, el("span", { class: "barbox" }, el("span", { class: "bar", style: `width: ${(100 * row.w[i]).toFixed(1)}%` }))) : null));
  const st = D.passes[passOf(t)];
  if (t + 1 < st.n) body.push(el("tr", { class: "masked" }, el("th", null, span(t + 1, st.n)),
    el("td", { colspan: (row.d ? 1 : 0) + (scaled ? 1 : 0) || 1, class: "r nowrap" }, "−∞ (masked)"), row.w ? el("td", { class: "r" }, "0") : null,
    row.w ? el("td", null, "hidden by the causal mask") : null));
  const more = t + 1 - shownKeys.length;
  if (more > 0) body.push(el("tr", { class: "masked", title: row.rest ? "some of them are not in this page" : null }, el("th", null, "others"),
    el("td", { colspan: (row.d ? 1 : 0) + (scaled ? 1 : 0) || 1, class: "r" }, `${integer(more)} more`), el("td", { class: "r n" }, prob(rest)), el("td", null, "")));
  const foot = row.w ? el("tfoot", null, el("tr", null, el("th", null, "sum"), row.d ? el("td", null, "") : null, scaled ? el("td", null, "") : null,
    el("td", { class: "r n" }, num(row.w.reduce((a, c) => a + c, 0) + (row.rest || 0))), el("td", null, ""))) : null;
  return el("table", { class: "grid scores" }, el("thead", null, head), el("tbody", null, body), foot);
}

function heatmap(l, h, size, mini) {      // rows: tokens that attend; columns: the keys they read
  const pos = D.carried.slice(-64);
  const room = mini ? (CFG.n_heads <= 4 ? 150 : CFG.n_heads <= 16 ? 104 : 80) : 310;
  const cell = Math.max(mini ? 2 : 8, Math.min(mini ? 22 : 34, Math.floor(room / pos.length)));
  const table = el("table", { class: `heat${mini ? " mini" : ""}${cell < 18 ? " small" : ""}`, "aria-label": `attention weights, layer ${l}, head ${h}` });
  const show = cell >= 16 && !mini;
  const narrow = cell < 18 ? " narrow" : "";  // column labels turned on their side when the cells are narrow
  if (!mini) table.append(el("tr", null, el("th", null, ""), pos.map(j => el("th", { class: `k${narrow}`, title: `${label(j)}: ${tokText(j)}` }, label(j)))));
  for (const t of pos) {
    const row = attRow(l, h, t);
    const tr = el("tr", { class: t === S.token ? "on" : null, "data-follow": t }, mini ? null : el("th", { class: "q" }, label(t)));
    for (const j of pos) {
      const i = row && row.w ? row.keys.indexOf(j) : -1;
      const style = `width:${cell}px;height:${cell}px`;
      if (j > t) { tr.append(el("td", { class: "masked", style, "data-q": t, "data-k": j }, show ? "·" : "")); continue; }
      if (i < 0) { tr.append(el("td", { class: "none", style }, "")); continue; }
      const w = row.w[i], c = viridis(w);
      tr.append(el("td", { style: `${style};background:rgb(${c});color:${ink(c)}`, "data-q": t, "data-k": j, "data-w": w,
        "data-s": row.s ? row.s[i] : "", title: mini ? null : `${label(t)} → ${label(j)}: ${exact(w)}` }, show ? glyph(w) : ""));
    }
    table.append(tr);
  }
  return table;
}

function hoverText(td, l, h) {
  const t = Number(td.dataset.q), j = Number(td.dataset.k);
  if (td.classList.contains("masked")) return `${label(t)} → ${label(j)}: hidden by the causal mask (score −∞, weight 0)`;
  const s = td.dataset.s === "" ? "" : `, score ${exact(Number(td.dataset.s))}`;
  return `layer ${l}, head ${h}: ${label(t)} (${tokText(t)}) → ${label(j)} (${tokText(j)}): weight ${exact(Number(td.dataset.w))}${s}`;
}

function slideScores() {
  if (!CFG.n_layers) return noLayers();
  const l = S.layer, h = S.head, t = S.token, L = L_();
  const scaled = !CFG.scale_scores ? "This model does not scale the scores, as in the article"
    : "Each score is divided by " + (CFG.attn_scalar ? say("scores.by_scalar", { scalar: CFG.attn_scalar }) : say("scores.by_d_head", { d_head: CFG.d_head }))
      + (CFG.attn_softcap ? `, then soft-capped, ${CFG.attn_softcap} · tanh(s / ${CFG.attn_softcap}) (Gemma 2), before the mask` : "");
  const out = [p(say("scores.compare", { L }), " ", say("scores.masked"), ` ${scaled}; softmax turns them into weights that sum to 1.`)];
  const row = attRow(l, h, t);
  if (CFG.attn_softcap && CFG.scale_scores && row && row.d && row.s && row.d.length) {  // the largest raw score, capped
    let i = -1;  // among the keys the mask leaves visible
    row.d.forEach((x, k) => { if (Number.isFinite(row.s[k]) && (i < 0 || Math.abs(x) > Math.abs(row.d[i]))) i = k; });
    if (i >= 0) {
      const cap = CFG.attn_softcap, before = row.d[i] / Math.sqrt(CFG.attn_scalar || CFG.d_head);
      out.push(p(fill(SW.softcap.scores, { before: before.toFixed(3), after: row.s[i].toFixed(3) }), say("scores.capped_key", { key: label(row.keys[i]) })));
    }
  }
  const readout = el("p", { class: "readout", id: "hover", "aria-live": "polite" }, "Hover a cell for its numbers; click a row to follow that token.");
  const map = heatmap(l, h);
  map.addEventListener("mouseover", e => { const td = e.target.closest("td[data-q]"); if (td) readout.textContent = hoverText(td, l, h); });
  const side = el("div", { class: "side" }, scoreTable(l, h, t));
  if (row && row.w && row.keys.length <= 8 && (row.s || row.d)) {
    const sc = row.s || row.d;
    side.append(p(say("softmax", { scores: sc.map(x => num(x)).join(", "), weights: row.w.map(x => num(x)).join(", ") })));
  }
  out.push(el("div", { class: "two" }, side, el("div", { class: "mapbox" }, el("h3", null, `Layer ${l}, head ${h}: all the weights`), map,
    el("p", { class: "note" }, "Row: the token that attends; column: the key it reads; ", say("heatmap.legend"), "."),
    readout, ablationWords(l, h) ? el("p", { class: "note ablation-here" }, ablationWords(l, h), " (",
      el("button", { class: "link", type: "button", "data-goto": "heads", "aria-label": `step 6: every head knocked out` }, "every head"), ")") : null)));
  if (D.carried.length > 64) out.push(el("p", { class: "note" }, `the map shows the last 64 of the ${D.carried.length} positions in this page`));
  return out;
}

function slideSum() {
  if (!CFG.n_layers) return noLayers();
  const l = S.layer, h = S.head, t = S.token, L = L_(), Y = D.layers[l], row = attRow(l, h, t);
  const out = [p(`${say("sum.new", { L })} is the values of the tokens it sees, each weighed by its attention weight, added up.`)];
  if (!row || !row.w) return out.concat(p("no attention weights recorded here"));
  let keys = row.keys.map((j, i) => [j, row.w[i]]);
  let rest = row.rest || 0;
  if (keys.length > 8) {
    const strong = [...keys].sort((a, c) => c[1] - a[1]).slice(0, 8);
    rest += keys.filter(k => !strong.includes(k)).reduce((a, k) => a + k[1], 0);
    keys = strong.sort((a, c) => a[0] - c[0]);
  }
  const terms = keys.map(([j, w]) => `${num(w)}×${label(j)}_V`).join(" + ") + (keys.length < row.keys.length || row.rest ? say("sum.more", { n: t + 1 - keys.length, rest: prob(rest) }) : "");
  const body = keys.map(([j, w]) => el("tr", null, el("td", { class: "r n", title: exact(w) }, num(w)), el("td", null, "×"), el("th", null, `${label(j)}_V`),
    el("td", null, vecEl(vecOf(Y.v, j, h)))));
  body.push(el("tr", { class: "total" }, el("td", null, ""), el("td", null, "="), el("th", null, `${L}'s z`), el("td", null, vecEl(vecOf(Y.z, t, h)))));
  out.push(el("table", { class: "grid sum" }, el("tbody", null, body)));
  out.push(eq(`${terms} = ${say("sum.new", { L })}${CFG.n_heads > 1 ? say("sum.from_head", { h }) : ""}`, `z_${L}`, vecOf(Y.z, t, h)));
  return out;
}

function slideHeads() {
  if (!CFG.n_layers) return noLayers();
  const l = S.layer, t = S.token, L = L_(), Y = D.layers[l], H = CFG.n_heads, dh = CFG.d_head, dm = CFG.d_model;
  const out = [p(H === 1 ? say("heads.one") : say("heads.many", { H }),
    " Click a map to choose its head; below, knock a head out and see the prediction without it.")];
  const grid = el("div", { class: "minis" });
  for (let h = 0; h < H; h++) {
    grid.append(el("figure", { class: h === S.head ? "on" : null, "data-pick-head": h }, heatmap(l, h, 0, true),
      el("figcaption", null, el("button", { type: "button", class: "link", "data-pick-head": h, "aria-pressed": h === S.head ? "true" : "false",
        "aria-label": `head ${l}:${h}: choose it${HA.done ? " and see the prediction without it" : ""}` }, `head ${h}`))));
  }
  out.push(grid);
  if (H > 1) {
    const parts = []; let whole = true;
    for (let h = 0; h < H; h++) { const z = vecOf(Y.z, t, h); if (!z || !z.whole) whole = false; else parts.push(...z.vals); }
    const v = whole ? { vals: parts, dims: H * dh, whole: true, norm: null } : null;
    const words = say("heads.concat", { H, d_head: dh, n: H * dh });
    out.push(whole ? eq(words, `z_${L}`, v) : p(words));
  }
  const wo = say("heads.wo", { shape: shape(H * dh, dm), d_model: dm });
  if (CFG.layer_norm && has("norms_after")) out.push(p(`${wo}, then ${SW.norm_place.attn}:`));
  out.push(eq(has("norms_after") ? "" : wo, `attn_out_${L}`, vecOf(Y.attn_out, t)));
  out.push(ablationSection());
  return out;
}

function slideMLP() {
  if (!CFG.n_layers) return noLayers();
  const l = S.layer, t = S.token, L = L_(), Y = D.layers[l], dm = CFG.d_model, out = [];
  if (CFG.mlp) {
    if (CFG.residual) out.push(eq(say("mlp.residual"), `x_${L} + attn_out_${L}`, vecOf(Y.mid, t)));
    else out.push(p(say("mlp.no_residual", { L })));
    if (CFG.layer_norm && has("norms_before")) out.push(eq(SW.norm.ln2, `${SW.norm.short}(x)`, vecOf(Y.ln2, t)));
    for (const [key, name, words] of SW.mlp.steps) out.push(eq(fill(words, { shape: shape(dm, CFG.d_mlp) }), name, vecOf(Y[key], t)));
    const wout = say("mlp.wout", { shape: shape(CFG.d_mlp, dm) });
    if (CFG.layer_norm && has("norms_after")) out.push(p(`${wout}, then ${SW.norm_place.mlp}:`));
    out.push(eq(has("norms_after") ? "" : wout, `mlp_out_${L}`, vecOf(Y.mlp_out, t)));
  } else {
    out.push(p("This model has no MLP (mlp = false), as in the article's simplified block."));
  }
  const how = CFG.mlp ? say(CFG.residual ? "out.mlp" : "out.mlp_alone") : say(CFG.residual ? "out.attn" : "out.attn_alone", { L });
  const nxt = l + 1 < CFG.n_layers ? say("out.next", { next: l + 1 }) : say("out.final");
  out.push(eq(say("out.of", { how, L, layer: l, next: nxt }), `out_${L}`, vecOf(Y.out, t)));
  return out;
}

function mostAttended(l, h, t) {
  const row = attRow(l, h, t);
  if (!row || !row.w) return null;
  let best = 0; row.w.forEach((w, i) => { if (w > row.w[best]) best = i; });
  return [row.keys[best], row.w[best]];
}

function slideLayers() {
  if (!CFG.n_layers) return noLayers();
  const t = S.token, L = L_(), H = CFG.n_heads;
  const out = [p(say("layers.intro", { L, t }), " Click a row to choose that layer.")];
  if (D.pass_through) out.push(p(D.pass_through));  // words from tracer/render/predict.py, before a long table
  const heads = H <= 4 ? Array.from({ length: H }, (_, h) => el("th", null, `head ${h} → most`)) : [el("th", null, `most-attended token, heads 0–${H - 1}`)];
  const body = D.layers.map((Y, l) => {
    const xi = vecOf(Y.x, t), xo = vecOf(Y.out, t);
    const most = Array.from({ length: H }, (_, h) => mostAttended(l, h, t));
    const cells = H <= 4 ? most.map(m => el("td", null, m ? `${label(m[0])} ${num(m[1], 2)}` : "—"))
      : [el("td", null, most.map(m => (m ? label(m[0]) : "—")).join(" "))];
    return el("tr", { class: l === S.layer ? "on" : null, "data-pick-layer": l }, el("th", { class: "r" }, l === S.layer ? `▶ ${l}` : l),
      el("td", { class: "r n" }, xi ? num(xi.norm) : "—"), el("td", { class: "r n" }, xo ? num(xo.norm) : "—"), cells);
  });
  out.push(el("table", { class: "grid layers" }, el("thead", null, el("tr", null, el("th", null, "layer"), el("th", { class: "r" }, "‖x‖ in"),
    el("th", { class: "r" }, "‖x‖ out"), heads)), el("tbody", null, body)));
  return out;
}
