// tracer page, part 5 of 7: how the model is decoded beyond the plain loop: beam search's tree (D.beams,
// render/beams.py's nodes). Every sentence is tracer/render/words.py's (say) or sent finished.

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
