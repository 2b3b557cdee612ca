// tracer page, part 3 of 7: the steps of the article, one slide each, drawn from the recorded numbers
// for the followed token (S.token), the layer (S.layer), the head (S.head) and the pass (S.pass). The
// sentences the terminal says too are tracer/render/words.py's (say(key, slots)): laid out here, never re-worded.

function noLayers() { return [p(say("layers.none"))]; }
function L_() { return label(S.token); }

function followBtn(t, kids) { return el("button", { class: "link", type: "button", "data-follow": t }, kids); }

SLIDES.tokens = function slideTokens() {
  const n = D.n_prompt;
  const out = [p(say("tokens.intro", { tokens: count(n, "token"), first: n > 1 ? `${label(0)}–${label(n - 1)}` : "A",
    vocab: CFG.vocab, n_vocab: integer(CFG.n_vocab) }), say("tokens.click"))];
  if (D.warning) out.push(el("div", { class: "warn", role: "note" }, b("⚠ "), D.warning));
  const rows = D.tokens.map((tk, t) => el("tr", { class: t === S.token ? "on" : null, "data-follow": t < N && CI.has(t) ? t : null },
    el("td", null, b(tk.label)), el("td", null, el("span", { class: "tt" }, tk.text)), el("td", { class: "r" }, tk.id),
    el("td", { class: "r" }, t),
    el("td", null, t < n ? say("tokens.in_prompt") : tk.pass !== null ? say("tokens.read", { k: tk.pass })
      : say(CFG.end_ids.includes(tk.id) ? "tokens.end" : "tokens.after"))));
  out.push(el("table", { class: "grid" }, el("thead", null, el("tr", null, ["token", "text", "id", "position", ""].map(h => el("th", null, h)))),
    el("tbody", null, rows)));
  out.push(...D.about.map(a => el("p", { class: "about" }, a)));
  out.push(el("p", { class: "note" }, modelWords()));
  if (D.file_sampling) out.push(el("p", { class: "note", id: "file-sampling" }, D.file_sampling));  // general.sampling.*
  if (D.training) out.push(p(D.training));
  if (D.left_out.length) out.push(el("p", { class: "note" }, say("page.left_out", { what: D.left_out.join("; ") })));
  return out;
};

function modelWords() {                   // the terminal's header: the model and how the run was sampled
  return say("header.run", { line: CFG.line, settings: D.run });
}

SLIDES.embed = function slideEmbed() {
  const t = S.token, L = L_(), I = D.inputs;
  const out = [p(say("embed.intro", { d_model: CFG.d_model, plus: has("positions_added") ? say("embed.plus") : "" }))];
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
    out.push(el("h3", null, say("embed.table")), matrix(D.layers[0].x, D.carried));
  }
  return out;
};

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
  return l === 0 ? eq(say("layer.input0", { L, source: SW.positions.source }), `x_${L}`, x) : eq(say("layer.input", { L, prev: l - 1 }), `x_${L}`, x);
}

SLIDES.qkv = function slideQKV() {
  if (!CFG.n_layers) return noLayers();
  if (D.layers[S.layer].state) return stateSlide(S.layer, "qkv");
  const l = S.layer, h = S.head, t = S.token, L = L_(), Y = D.layers[l], H = CFG.n_heads;
  const out = [p(say("qkv.intro", { layer: l, h, H, L }))];
  out.push(inputEq(l, t));
  if (CFG.layer_norm && has("norms_before")) out.push(eq(fill(SW.norm.ln1, { x: `x_${L}` }), `${SW.norm.short}(x_${L})`, vecOf(Y.ln1, t)));
  const KV = CFG.n_kv_heads || H, per = H / KV, g = Math.floor(h / per);
  const w = H > 1 ? say("head.slices", { all: shape(H, CFG.d_model, CFG.d_head), slice: shape(CFG.d_model, CFG.d_head) }) : shape(CFG.d_model, CFG.d_head);
  out.push(KV < H ? p(b(`head ${h}`), say("head.gqa", { H, shape: w, g, KV, kv_shape: shape(KV, CFG.d_model, CFG.d_head), first: g * per, last: (g + 1) * per - 1 }))
    : H > 1 ? p(b(`head ${h}`), say("head.of", { H, shape: w })) : p(say("head.one", { shape: w })));
  if (l === 0) for (const words of D.storage_example || []) out.push(p(words));  // how the file stores W_Q, one number worked
  const src = CFG.layer_norm && has("norms_before") ? `ln1(x_${L})` : `x_${L}`, sl = H > 1 ? `[${h}]` : "", kl = H > 1 ? `[${g}]` : "";
  if (has("rotary")) out.push(p(b(say("rope.title")), fill(D.layer_words[l].rope, { L, t }), say("rope.then"), say("rope.before")));
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
    el("th", null, has("rotary") ? say("qkv.key_before") : "K (key)"), el("th", null, "V (value)"))), el("tbody", null, body)));
  if (more) out.push(el("p", { class: "note" }, say("qkv.strongest", { n: keys.length, L, more })));
  if (absent > 0) out.push(el("p", { class: "note" }, say("qkv.absent", { positions: count(absent, "earlier position") })));
  return out;
};

function scoreTable(l, h, t) {
  const row = attRow(l, h, t), L = label(t);
  if (!row || (!row.w && !row.s && !row.d)) return el("p", { class: "missing" }, say("scores.none"));
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
    row.w ? el("td", null, say("mask.hidden")) : null));
  const more = t + 1 - shownKeys.length;
  if (more > 0) body.push(el("tr", { class: "masked", title: row.rest ? say("scores.some_absent") : null }, el("th", null, "others"),
    el("td", { colspan: (row.d ? 1 : 0) + (scaled ? 1 : 0) || 1, class: "r" }, `${integer(more)} more`), el("td", { class: "r n" }, prob(rest)), el("td", null, "")));
  const sink = sinkShare(l, h, t), blank = () => [row.d ? el("td", null, "") : null, scaled ? el("td", null, "") : null];
  const foot = row.w ? el("tfoot", null, el("tr", null, el("th", null, "sum"), blank(),
    el("td", { class: "r n" }, num(row.w.reduce((a, c) => a + c, 0) + (row.rest || 0))), el("td", null, "")),
    sink ? el("tr", { class: "sink" }, el("th", null, say("sink.row")), blank(), el("td", { class: "r n", title: exact(sink.share) }, prob(sink.share)),
      el("td", null, el("span", { class: "barbox" }, el("span", { class: "bar", style: `width: ${(100 * sink.share).toFixed(1)}%` })))) : null) : null;
  return el("table", { class: "grid scores" }, el("thead", null, head), el("tbody", null, body), foot);
}

function heatmap(l, h, size, mini) {      // rows: tokens that attend; columns: the keys they read
  const pos = D.carried.slice(-64);
  const room = mini ? (CFG.n_heads <= 4 ? 150 : CFG.n_heads <= 16 ? 104 : 80) : 310;
  const cell = Math.max(mini ? 2 : 8, Math.min(mini ? 22 : 34, Math.floor(room / pos.length)));
  const table = el("table", { class: `heat${mini ? " mini" : ""}${cell < 18 ? " small" : ""}`, "aria-label": say("heatmap.label", { layer: l, h }) });
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
  if (td.classList.contains("masked")) return say("heatmap.masked", { q: label(t), k: label(j) });
  const score = td.dataset.s === "" ? "" : say("heatmap.score", { s: exact(Number(td.dataset.s)) });
  return say("heatmap.cell", { layer: l, h, q: label(t), q_text: tokText(t), k: label(j), k_text: tokText(j), w: exact(Number(td.dataset.w)), score });
}

SLIDES.scores = function slideScores() {
  if (!CFG.n_layers) return noLayers();
  if (D.layers[S.layer].state) return stateSlide(S.layer, "scores");
  const l = S.layer, h = S.head, t = S.token, L = L_();
  const scaled = !CFG.scale_scores ? say("scores.unscaled")
    : say("scores.divided", { by: CFG.attn_scalar ? say("scores.by_scalar", { scalar: CFG.attn_scalar }) : say("scores.by_d_head", { d_head: CFG.d_head }) })
      + (CFG.attn_softcap ? say("scores.softcapped", { cap: CFG.attn_softcap }) : "");
  const sunk = D.layers[l].sink ? say("scores.then_sink", { scaled }) : say("scores.then", { scaled });  // gpt-oss: weights that sum to less than 1
  const out = [p(say("scores.compare", { L }), " ", say("scores.masked"), sunk)];
  const row = attRow(l, h, t);
  if (CFG.attn_softcap && CFG.scale_scores && row && row.d && row.s && row.d.length) {  // the largest raw score, capped
    let i = -1;  // among the keys the mask leaves visible
    row.d.forEach((x, k) => { if (Number.isFinite(row.s[k]) && (i < 0 || Math.abs(x) > Math.abs(row.d[i]))) i = k; });
    if (i >= 0) {
      const cap = CFG.attn_softcap, before = row.d[i] / Math.sqrt(CFG.attn_scalar || CFG.d_head);
      out.push(p(fill(SW.softcap.scores, { before: before.toFixed(3), after: row.s[i].toFixed(3) }), say("scores.capped_key", { key: label(row.keys[i]) })));
    }
  }
  const readout = el("p", { class: "readout", id: "hover", "aria-live": "polite" }, say("heatmap.hover"));
  const map = heatmap(l, h);
  map.addEventListener("mouseover", e => { const td = e.target.closest("td[data-q]"); if (td) readout.textContent = hoverText(td, l, h); });
  const side = el("div", { class: "side" }, scoreTable(l, h, t), sinkWords(l, h, t));
  if (row && row.w && row.keys.length <= 8 && (row.s || row.d)) {
    const sc = row.s || row.d, k = sinkShare(l, h, t), scores = sc.map(x => (x === null ? "−∞" : num(x))).join(", "), weights = row.w.map(x => num(x)).join(", ");
    side.append(p(k && k.logit !== null ? say("softmax.sink", { scores, sink: num(k.logit), weights, share: prob(k.share) }) : say("softmax", { scores, weights })));
  }
  out.push(el("div", { class: "two" }, side, el("div", { class: "mapbox" }, el("h3", null, say("heatmap.title", { layer: l, h })), map,
    el("p", { class: "note" }, say("heatmap.rows", { legend: say("heatmap.legend") })),
    readout, ablationWords(l, h) ? el("p", { class: "note ablation-here" }, ablationWords(l, h), " (",
      el("button", { class: "link", type: "button", "data-goto": "heads", "aria-label": say("ablate.every_head") }, "every head"), ")") : null)));
  if (D.carried.length > 64) out.push(el("p", { class: "note" }, say("heatmap.last", { n: 64, total: D.carried.length })));
  return out;
};

SLIDES.sum = function slideSum() {
  if (!CFG.n_layers) return noLayers();
  if (D.layers[S.layer].state) return stateSlide(S.layer, "sum");
  const l = S.layer, h = S.head, t = S.token, L = L_(), Y = D.layers[l], row = attRow(l, h, t);
  const out = [p(say("sum.intro", { new: say("sum.new", { L }) }))];
  if (!row || !row.w) return out.concat(p(say("sum.none")));
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
  out.push(sinkWords(l, h, t));  // gpt-oss: the weights summed to less than 1
  return out;
};

SLIDES.heads = function slideHeads() {
  if (!CFG.n_layers) return noLayers();
  if (D.layers[S.layer].state) return stateSlide(S.layer, "heads");
  const l = S.layer, t = S.token, L = L_(), Y = D.layers[l], H = CFG.n_heads, dh = CFG.d_head, dm = CFG.d_model;
  const out = [p(H === 1 ? say("heads.one") : say("heads.many", { H }), say("heads.click"))];
  const grid = el("div", { class: "minis" });
  for (let h = 0; h < H; h++) {
    grid.append(el("figure", { class: h === S.head ? "on" : null, "data-pick-head": h }, heatmap(l, h, 0, true),
      el("figcaption", null, el("button", { type: "button", class: "link", "data-pick-head": h, "aria-pressed": h === S.head ? "true" : "false",
        "aria-label": say("heads.choose", { layer: l, h, more: HA.done ? say("heads.see_without") : "" }) }, `head ${h}`))));
  }
  out.push(grid);
  if (H > 1) {
    const parts = []; let whole = true;
    const Z = Y.z_out || Y.z;  // what W_O merges: z, or (an output gate) z × sigmoid(gate)
    for (let h = 0; h < H; h++) { const z = vecOf(Z, t, h); if (!z || !z.whole) whole = false; else parts.push(...z.vals); }
    const v = whole ? { vals: parts, dims: H * dh, whole: true, norm: null } : null;
    const words = say("heads.concat", { H, d_head: dh, n: H * dh });
    out.push(whole ? eq(words, `z_${L}${Y.z_out ? " gated" : ""}`, v) : p(words));
  }
  const wo = say("heads.wo", { shape: shape(H * dh, dm), d_model: dm });
  if (CFG.layer_norm && has("norms_after")) out.push(p(say("norm.after", { product: wo, norm: SW.norm_place.attn })));
  out.push(eq(has("norms_after") ? "" : wo, `attn_out_${L}`, vecOf(Y.attn_out, t)));
  out.push(ablationSection());
  return out;
};

SLIDES.mlp = function slideMLP() {
  if (!CFG.n_layers) return noLayers();
  const l = S.layer, t = S.token, L = L_(), Y = D.layers[l], LW = D.layer_words[l], dm = CFG.d_model, out = [];
  if (CFG.mlp) {
    if (CFG.residual) out.push(eq(say("mlp.residual"), `x_${L} + attn_out_${L}`, vecOf(Y.mid, t)));
    else out.push(p(say("mlp.no_residual", { L })));
    if (CFG.layer_norm && has("norms_before")) out.push(eq(SW.norm.ln2, `${SW.norm.short}(x)`, vecOf(Y.ln2, t)));
    if (Y.moe) out.push(...routing(l, t));  // a mixture of experts (experts.js)
    else if (LW.among_experts) out.push(p(say("experts.dense_layer", { layer: l, width: LW.width })));
    for (const [key, name, words] of LW.mlp) out.push(eq(fill(words, { shape: shape(dm, LW.width) }), name, vecOf(Y[key], t)));
    const wout = Y.moe ? say("experts.out", { shared: Y.moe.shared ? say("experts.out_shared") : "" }) : say("mlp.wout", { shape: shape(LW.width, dm) });
    if (CFG.layer_norm && has("norms_after")) out.push(p(say("norm.after", { product: wout, norm: SW.norm_place.mlp })));
    out.push(eq(has("norms_after") ? "" : wout, `mlp_out_${L}`, vecOf(Y.mlp_out, t)));
  } else {
    out.push(p(say("mlp.none")));
  }
  const how = CFG.mlp ? say(CFG.residual ? "out.mlp" : "out.mlp_alone") : say(CFG.residual ? "out.attn" : "out.attn_alone", { L });
  const nxt = l + 1 < CFG.n_layers ? say("out.next", { next: l + 1 }) : say("out.final");
  out.push(eq(say("out.of", { how, L, layer: l, next: nxt }), `out_${L}`, vecOf(Y.out, t)));
  return out;
};

function mostAttended(l, h, t) {
  const row = attRow(l, h, t);
  if (!row || !row.w) return null;
  let best = 0; row.w.forEach((w, i) => { if (w > row.w[best]) best = i; });
  return [row.keys[best], row.w[best]];
}

SLIDES.layers = function slideLayers() {
  if (!CFG.n_layers) return noLayers();
  const t = S.token, L = L_(), H = CFG.n_heads;
  const out = [p(say("layers.intro", { L, t }), say("layers.click"))];
  if (D.pass_through) out.push(p(D.pass_through));  // words from tracer/render/predict.py, before a long table
  const heads = H <= 4 ? Array.from({ length: H }, (_, h) => el("th", null, `head ${h} → most`)) : [el("th", null, say("layers.most", { last: H - 1 }))];
  const routed = D.layers.some(Y => Y.moe), i = CI.get(t);  // a mixture of experts: the token's experts in each layer
  const body = D.layers.map((Y, l) => {
    const xi = vecOf(Y.x, t), xo = vecOf(Y.out, t);
    const most = Array.from({ length: H }, (_, h) => mostAttended(l, h, t));
    const cells = Y.state ? stateCells(Y.state, t, H) : H <= 4 ? most.map(m => el("td", null, m ? `${label(m[0])} ${num(m[1], 2)}` : "—"))
      : [el("td", null, most.map(m => (m ? label(m[0]) : "—")).join(" "))];
    const experts = !routed ? null : el("td", { class: "nowrap" }, Y.moe && i !== undefined
      ? Y.moe.chosen[i].map((e, j) => `E${e} ${num(Y.moe.weights[i][j], 2)}`).join(" ") : "—");
    return el("tr", { class: l === S.layer ? "on" : null, "data-pick-layer": l }, el("th", { class: "r" }, l === S.layer ? `▶ ${l}` : l),
      el("td", { class: "r n" }, xi ? num(xi.norm) : "—"), el("td", { class: "r n" }, xo ? num(xo.norm) : "—"), cells, experts);
  });
  out.push(el("table", { class: "grid layers" }, el("thead", null, el("tr", null, el("th", null, "layer"), el("th", { class: "r" }, "‖x‖ in"),
    el("th", { class: "r" }, "‖x‖ out"), heads, routed ? el("th", null, "experts") : null)), el("tbody", null, body)));
  return out;
};
