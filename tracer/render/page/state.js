// tracer page, part 2 of 7: the trace's model, its steps and the state the page shows (the compare page
// has none of these: it does not load this file).
const CFG = D.model;
const SW = CFG.switches;                  // the table of block switches' words and flags (tracer/core/blocks.py)
const has = flag => SW.flags.includes(flag);
const N = D.n_rows;                       // positions that had a pass of their own
const CI = new Map(D.carried.map((t, i) => [t, i]));  // position → its index in the carried rows

// the path of steps, [id, its label on the path, its numbered title]: tracer/sections.py's, sent with the data;
// each step's slide enters itself in SLIDES under its id where it is written (steps.js, predict.js)
const STEPS = D.steps.map(([id, short, title], i) => [id, short, `${i + 1} · ${title}`]);
const SLIDES = {};

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

