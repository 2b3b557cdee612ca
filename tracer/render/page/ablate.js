// tracer page, part 6 of 7: one head knocked out. D.head_ablations carries, for every (layer, head), the
// prediction after the prompt's last token with that head's z set to zeros (tracer.run.interventions.head_ablations),
// and the terminal's sentence for it; a button per head shows it (the sentence is Python's, never re-worded here).

const HA = D.head_ablations || { done: false, words: say("ablate.none"), heads: null };

function ablated(l, h) { return HA.done && HA.heads[l] ? HA.heads[l][h] || null : null; }

function ablationWords(l, h) { const a = ablated(l, h); return a ? a.words : null; }

function probBars(title, ids, ps, mark) {  // a small table of top tokens with their bars
  const body = ids.map((id, i) => el("tr", { class: id === mark ? "on" : null }, el("td", null, idEl(id)),
    el("td", { class: "r n", title: exact(ps[i]) }, prob(ps[i])),
    el("td", null, el("span", { class: "barbox" }, el("span", { class: "bar", style: `width: ${(100 * Math.min(Math.max(ps[i] || 0, 0), 1)).toFixed(1)}%` })))));
  return el("table", { class: "grid bars" }, el("caption", null, title), el("tbody", null, body));
}

function ablationResult(l, h) {           // the sentence and the bars of the chosen head's ablation
  const a = ablated(l, h);
  const box = el("div", { id: "ablation", class: "ablation", "aria-live": "polite" });
  if (!a) { box.append(el("p", { class: "note" }, HA.words || say("ablate.missing", { layer: l, h }))); return box; }
  const top = HA.clean.ids[0];
  box.append(el("p", { class: "ablation-words" }, b(a.words)),
    el("div", { class: "two" }, probBars(say("ablate.recorded"), HA.clean.ids, HA.clean.p, top),
      probBars(say("ablate.without", { layer: l, h }), a.ids, a.p, top)));
  if (!a.ids.includes(top)) box.append(el("p", { class: "note" }, say("ablate.below_top", { token: idEl(top), p: prob(a.p_clean_top), n: a.ids.length })));
  return box;
}

function ablationGrid() {                 // a button per head: its layer:head and p(clean top) without it
  const clean = HA.clean.p[0], top = HA.clean.ids[0];
  const scale = Math.max(...HA.heads.flat().map(a => Math.abs((a.p_clean_top ?? 0) - clean)), 1e-12);
  const heads = HA.heads.length ? HA.heads[0].length : 0, compact = heads > 6;  // many heads: the head's number heads its column
  const head = el("tr", null, el("th", null, compact ? "layer \\ head" : "layer"),
    Array.from({ length: heads }, (_, h) => el("th", null, compact ? String(h) : `head ${h}`)));
  const body = HA.heads.map((row, l) => el("tr", null, el("th", { class: "r" }, l), row.map((a, h) => {
    const on = l === S.layer && h === S.head;
    return el("td", null, el("button", { type: "button", class: `abl${a.changed ? " changed" : ""}`, "data-ablate": `${l}:${h}`,
      "aria-pressed": on ? "true" : "false", "aria-label": say("ablate.button", { layer: l, h }),
      style: tint((a.p_clean_top ?? 0) - clean, scale), title: a.words }, compact ? null : `${l}:${h} `,
      el("small", null, `${compact ? cprob(a.p_clean_top ?? 0) : prob(a.p_clean_top)}${a.changed ? " ✗" : ""}`)));
  })));
  return el("table", { class: "grid ablate", "aria-label": say("ablate.grid") }, el("thead", null, head), el("tbody", null, body),
    el("caption", null, say("ablate.caption", { token: idEl(top), p: prob(clean), compact: compact ? say("ablate.compact") : "" })));
}

function ablationSection() {              // the heads step's part: knock a head out, see the prediction
  if (!CFG.n_layers) return null;
  const at = label(HA.position);
  const out = [el("h3", null, say("ablate.title", { L: at }))];
  if (!HA.done) return out.concat(el("p", { class: "note ablation-missing" }, HA.words));
  out.push(p(say("ablate.how", { command: el("code", null, "tracer trace --ablate L:H") })));
  out.push(el("div", { class: "two" }, el("div", { class: "ablate-box" }, ablationGrid()), ablationResult(S.layer, S.head)));
  return out;
}
