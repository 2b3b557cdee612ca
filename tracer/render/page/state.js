// tracer page, part 2 of 6: the trace's model, its steps and the state the page shows (the compare page
// has none of these: it does not load this file).
const CFG = D.model;
const SW = CFG.switches;                  // the table of block switches' words and flags (tracer/core/blocks.py)
const has = flag => SW.flags.includes(flag);
const N = D.n_rows;                       // positions that had a pass of their own
const CI = new Map(D.carried.map((t, i) => [t, i]));  // position → its index in the carried rows
const HAS_CHECKS = D.checks.length > 0;

const STEPS = [
  ["tokens", "Tokens", say("title.tokens")],
  ["embed", "Embedding", say("title.embed")],
  ["qkv", "Q · K · V", say("title.qkv")],
  ["scores", "Scores", say("title.scores")],
  ["sum", "Sum", say("title.sum")],
  ["heads", "Heads", say("title.heads")],
  ["mlp", "MLP", say("title.mlp")],
  ["layers", "Layers", say("title.layers")],
  ["predict", "Logits", say("title.predict")],
  ["loop", "Loop", say("title.loop")],
  ["positions", "Positions", say("title.positions")],
  ["lens", "Lens", say("title.lens")],
].concat(HAS_CHECKS ? [["checks", "Checks", say("title.checks")]] : []);
STEPS.forEach((s, i) => { s[2] = `${i + 1} · ${s[2]}`; });  // [id, the path's label, the numbered title]

function initialTemperature() {
  const t = D.settings.temperature;
  return t > 0 ? t : 1;
}

const S = {                               // what the page shows; every control changes it and redraws
  step: 0,
  token: D.start.token,
  layer: Math.min(D.start.layer, Math.max(CFG.n_layers - 1, 0)),
  head: Math.min(D.start.head, CFG.n_heads - 1),
  pass: 0,
  T: initialTemperature(),
};

