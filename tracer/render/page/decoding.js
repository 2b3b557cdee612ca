// tracer page, part 5 of 7: how the model is decoded beyond the plain loop: beam search's tree (D.beams,
// render/beams.py's nodes) and speculative decoding's rounds (D.speculative, render/speculative.py).
// Every sentence is tracer/render/words.py's (say) or sent finished.

SLIDES.beams = function slideBeams() {
  const T = D.beams, out = [p(b(say("beams.title", { n: T.beams, alpha: String(T.alpha) }))), p(say("beams.rule", { n: T.beams, k: T.nodes[0].next.length }))];
  const branch = i => el("ul", { class: "tree" }, T.nodes[i].next.map(c => {
    const words = c.fate === "kept" ? say("beams.kept", { token: c.text, total: num(c.total), beam: c.node === null ? "?" : T.nodes[c.node].beam })
      : c.fate === "finished" ? say("beams.finished", { token: c.text, total: num(c.total) }) : say("beams.pruned", { token: c.text, total: num(c.total) });
    return el("li", { class: `beam-${c.fate}`, "data-fate": c.fate }, words, c.fate === "kept" && c.node !== null ? branch(c.node) : null);
  }));
  out.push(el("div", { class: "beam-tree", id: "beam-tree" }, el("p", null, b(say("beams.root"))), branch(0)));
  out.push(p(b(say("beams.result", { n: T.finished.length }))));
  out.push(el("ol", { id: "beam-results" }, T.finished.map(f => el("li", { "data-score": String(f.score) }, el("span", { class: "tt" }, f.text), `  ${f.words}`))));
  return out;
};

SLIDES.speculative = function slideSpeculative() {  // each round: the draft's tokens, the model's one pass, the verdicts
  const R = D.speculative, sampled = D.settings.temperature > 0;
  const out = [p(b(say("spec.title", { draft: R.draft, k: D.settings.draft_tokens }))), p(sampled ? say("spec.rule_sampled") : say("spec.rule_greedy"))];
  const marks = { accepted: "✓", rejected: "✗", unjudged: "·" };
  R.rounds.forEach((r, i) => {
    if (!r.drafted.length) { out.push(p(say("spec.last", { i: i + 1, next: r.next_text }))); return; }
    out.push(p(b(say("spec.round", { i: i + 1, proposed: r.drafted.map(d => d.text).join(" "), k: r.drafted.length, n: r.positions }))));
    const heads = ["#", "drafted", "q", "model's choice", "p", "", ...(sampled ? ["u", "min(1, p/q)"] : [])];
    const rows = r.drafted.map((d, j) => el("tr", { class: `spec-${d.verdict}`, "data-verdict": d.verdict },
      el("td", { class: "r" }, j), el("td", null, el("span", { class: "tt" }, d.text)), el("td", { class: "r n" }, prob(d.q)),
      el("td", null, el("span", { class: "tt" }, d.predicted_text)), el("td", { class: "r n" }, d.p === null ? "" : prob(d.p)),
      el("td", null, marks[d.verdict]), sampled ? el("td", { class: "r n" }, d.u === null ? "" : prob(d.u)) : null,
      sampled ? el("td", { class: "r n" }, d.ratio === null ? "" : prob(d.ratio)) : null));
    if (r.bonus) rows.push(el("tr", { class: "spec-free" }, el("td", { class: "r" }, r.drafted.length), el("td"), el("td"),
      el("td", null, el("span", { class: "tt" }, r.next_text)), el("td"), el("td", null, say("spec.free"))));
    out.push(el("table", { class: "grid spec" }, el("thead", null, el("tr", null, heads.map(h => el("th", null, h)))), el("tbody", null, rows)));
    const how = r.bonus ? say("spec.bonus") : r.resampled ? say("spec.resampled") : say("spec.own");
    out.push(p(say("spec.outcome", { a: r.accepted, k: r.drafted.length, next: r.next_text, how, gained: r.accepted + 1 })));
  });
  out.push(p(b(R.words)), el("p", { class: "about", id: "spec-answer" }, R.answer));
  return out;
};
