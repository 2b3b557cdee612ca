// tracer page, a linear-attention layer (Gated DeltaNet, Qwen3.5's linear layers): it scores no earlier token,
// so its Q·K·V, scores, sum and heads steps show the state instead, as `tracer trace --layer L` works it: the
// followed head's q, k and v, β and the decay (Q·K·V); the state before, what it recalls for k, the error, the
// state after and one number of it by hand (scores: the delta rule in place of the scores); the read-out and
// its gated norm (sum); every head's exp(g), β and gated read-out, W_O, what the layer keeps against a
// softmax layer's KV cache and the head ablations (heads); and the loop step's table of what each kind of layer
// keeps (cacheKinds). Every number is recorded or the terminal's
// arithmetic on recorded numbers, sent finished (D.layers[l].state, tracer/render/page/states.py); the
// sentences are tracer/render/words.py's (say(key, slots)).

function stateMatrix(m, st) {            // a state's first rows and columns: k_i down, v_j across
  const n = m.length, c = m[0].length;
  const head = el("tr", null, el("th", null, ""), Array.from({ length: c }, (_, j) => el("th", { class: "r" }, `v${j}`)));
  const body = m.map((row, i) => el("tr", null, el("th", null, `k${i}`),
    row.map(x => el("td", { class: "r n", title: exact(x) }, num(x)))));
  const out = [el("table", { class: "grid state" }, el("thead", null, head), el("tbody", null, body))];
  if (st.d_k > n || st.d_v > c) out.push(el("p", { class: "note" }, say("linear.corner_page", { rows: n, cols: c, d_k: st.d_k, d_v: st.d_v })));
  return out;
}

function stateUpdate(l, part, t, h) {    // head h's update at token t: the part of it this step shows
  const st = D.layers[l].state, U = st.update, i = CI.get(t), L = label(t);
  if (!U || i === undefined) return [];
  const out = [];
  if (part === "qkv") {
    for (const [m, key] of [["q", "q"], ["k", "k"], ["v", "v"]]) out.push(eq("", `${L}_${m}`, vecOf(U[key], t, h)));
    out.push(p(say("linear.beta", { h, beta: num(st.beta[i][h]), L })));
    out.push(p(say("linear.decay", { h, g: num(U.g[i][h]), keep: num(st.keep[i][h]), L })));
  } else if (part === "scores") {
    if (U.before[i][h] === null) out.push(p(say("linear.zeros", { L })));
    else out.push(p(say("linear.before", { L, prev: label(t - 1), cached: t - 1 < stepStart(t) ? say("linear.from_cache", { k: passOf(t - 1) }) : "" })),
      ...stateMatrix(U.before[i][h], st));
    out.push(eq(say("linear.recall", { L }), "Sᵀk", vecOf(U.recall, t, h)));
    out.push(eq(say("linear.error", { L }), "v − Sᵀk", vecOf(U.error, t, h)));
    out.push(p(say("linear.write", { L })), ...stateMatrix(U.after[i][h], st));
    out.push(p(b(U.cell[i][h])));
  } else if (part === "sum") {
    out.push(eq(say("linear.read", { d_k: st.d_k, L, h }), `o_${L}`, vecOf(U.o, t, h)));
    out.push(eq("", `o_${L} gated`, vecOf(st.o, t, h)));
  }
  return out;
}

function stateSlide(l, part) {
  const t = S.token, L = L_(), Y = D.layers[l], st = Y.state, i = CI.get(t), h = Math.min(S.head, st.heads - 1);
  const out = [p(b(say("linear.title")), t === 0 ? say("linear.first", { L })
    : say("linear.intro", { L, seen: span(0, t), d_k: st.d_k, d_v: st.d_v }))];
  if (part !== "heads") {
    out.push(p(b(`head ${h}`), say("linear.head", { H: st.heads, d_k: st.d_k, d_v: st.d_v })));
    out.push(...stateUpdate(l, part, t, h));
    if (part === "scores") out.push(p(st.keeps));
    return out;
  }
  if (i !== undefined) {
    const rows = [];
    for (let g = 0; g < st.heads; g++) {
      rows.push(el("tr", { class: g === S.head ? "on" : null }, el("th", null, `head ${g}`),
        el("td", { class: "r n", title: exact(st.keep[i][g]) }, num(st.keep[i][g])),
        el("td", { class: "r n", title: exact(st.beta[i][g]) }, num(st.beta[i][g])),
        el("td", null, vecEl(vecOf(st.o, t, g)))));
    }
    out.push(el("table", { class: "grid" }, el("thead", null, el("tr", null, el("th", null, ""), el("th", { class: "r" }, "exp(g)"),
      el("th", { class: "r" }, "β"), el("th", null, `o_${L} gated`))), el("tbody", null, rows)));
    out.push(el("p", { class: "note" }, say("linear.overview", { L })));
  }
  out.push(eq(say("heads.wo_no_bias", { shape: shape(st.heads * st.d_v, CFG.d_model), d_model: CFG.d_model }),
    `attn_out_${L}`, vecOf(Y.attn_out, t)));
  out.push(p(st.keeps));
  out.push(ablationSection());
  return out;
}

function cacheKinds(c) {                 // a hybrid's cache kind by kind (render/loop.py cache_kinds): bytes per layer
  const row = (r, cls) => el("tr", { class: cls }, r.map((x, j) => el("td", { class: j > 1 ? "r n" : null }, x)));
  return el("table", { class: "grid" }, el("caption", null, c.title),
    el("thead", null, el("tr", null, c.head.map((x, j) => el("th", { class: j > 1 ? "r" : null }, x)))),
    el("tbody", null, c.rows.map(r => row(r, null)), row(c.all, "on")));
}

function stateCells(st, t, H) {           // the layers step's cells of a linear layer: exp(g) and β per head
  const i = CI.get(t);
  const cell = h => (i === undefined || h >= st.heads ? "—" : say("linear.cell", { keep: num(st.keep[i][h], 2), beta: num(st.beta[i][h], 2) }));
  return H <= 4 ? Array.from({ length: H }, (_, h) => el("td", null, cell(h))) : [el("td", null, cell(0) + " …")];
}
