// tracer page, a linear-attention layer (Gated DeltaNet, Qwen3.5's linear layers): it scores no earlier token,
// so its Q·K·V, scores, sum and heads steps show the state instead (what `tracer trace --layer L` shows in
// full): per head how much the state keeps of itself (exp g) and how much the followed token writes (β), the
// heads' gated read-outs through W_O, and what the layer keeps against a softmax layer's KV cache (D.layers[l].state,
// tracer/render/page/states.py). The sentences are tracer/render/words.py's (say(key, slots)).

function stateSlide(l, heads) {
  const t = S.token, L = L_(), Y = D.layers[l], st = Y.state, i = CI.get(t);
  const out = [p(b(say("linear.title")), t === 0 ? say("linear.first", { L })
    : say("linear.intro", { L, seen: span(0, t), d_k: st.d_k, d_v: st.d_v }))];
  if (i !== undefined) {
    const rows = [];
    for (let h = 0; h < st.heads; h++) {
      rows.push(el("tr", { class: h === S.head ? "on" : null }, el("th", null, `head ${h}`),
        el("td", { class: "r n", title: exact(st.keep[i][h]) }, num(st.keep[i][h])),
        el("td", { class: "r n", title: exact(st.beta[i][h]) }, num(st.beta[i][h])),
        el("td", null, vecEl(vecOf(st.o, t, h)))));
    }
    out.push(el("table", { class: "grid" }, el("thead", null, el("tr", null, el("th", null, ""), el("th", { class: "r" }, "exp(g)"),
      el("th", { class: "r" }, "β"), el("th", null, `o_${L} gated`))), el("tbody", null, rows)));
    out.push(el("p", { class: "note" }, say("linear.overview", { L })));
  }
  if (heads) out.push(eq(say("heads.wo_no_bias", { shape: shape(st.heads * st.d_v, CFG.d_model), d_model: CFG.d_model }),
    `attn_out_${L}`, vecOf(Y.attn_out, t)));
  out.push(p(st.keeps));
  if (heads) out.push(ablationSection());
  return out;
}

function stateCells(st, t, H) {           // the layers step's cells of a linear layer: exp(g) and β per head
  const i = CI.get(t);
  const cell = h => (i === undefined || h >= st.heads ? "—" : say("linear.cell", { keep: num(st.keep[i][h], 2), beta: num(st.beta[i][h], 2) }));
  return H <= 4 ? Array.from({ length: H }, (_, h) => el("td", null, cell(h))) : [el("td", null, cell(0) + " …")];
}
