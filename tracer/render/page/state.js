// tracer page, part 2 of 6: the trace's model, its steps and the state the page shows (the compare page
// has none of these: it does not load this file).
const CFG = D.model;
const SW = CFG.switches;                  // the table of block switches' words and flags (tracer/blocks.py)
const has = flag => SW.flags.includes(flag);
const N = D.n_rows;                       // positions that had a pass of their own
const CI = new Map(D.carried.map((t, i) => [t, i]));  // position → its index in the carried rows
const HAS_CHECKS = D.checks.length > 0;

const STEPS = [
  ["tokens", "Tokens", "1 · Tokens"],
  ["embed", "Embedding", "2 · Embedding + position"],
  ["qkv", "Q · K · V", "3 · Q, K, V per head"],
  ["scores", "Scores", "4 · Scores, the causal mask, softmax"],
  ["sum", "Sum", "5 · The weighted sum"],
  ["heads", "Heads", "6 · The heads and W_O"],
  ["mlp", "MLP", "7 · Residual, layer norm, MLP"],
  ["layers", "Layers", "8 · All layers"],
  ["predict", "Logits", "9 · Logits, temperature, top-k, the choice"],
  ["loop", "Loop", "10 · The loop and the KV cache"],
  ["positions", "Positions", "11 · Every position predicts"],
  ["lens", "Lens", "12 · The logit lens"],
].concat(HAS_CHECKS ? [["checks", "Checks", "13 · The stated values, checked"]] : []);

function initialTemperature() {
  const t = D.settings ? D.settings.temperature : 0;
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

