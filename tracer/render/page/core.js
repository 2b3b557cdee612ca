// tracer page, part 1 of 7: the data, number formatting (tracer/render/fmt.py's rules), small builders and
// colour; shared by the trace's page and the compare page (which reads only what is generic here, and
// calls the trace's helpers below never). Text from a trace is only ever set as text (textContent).

const D = JSON.parse(document.getElementById("trace-data").textContent);
const P = D.precision;

// ------------------------------------------------------------------ numbers, as tracer/render/fmt.py

function num(x, p = P) {                  // 0.450, -1.250, never -0.000; −∞ / ∞
  if (x === null || x === undefined) return "—";
  if (typeof x === "string") return { inf: "∞", "-inf": "−∞", nan: "nan" }[x] ?? x;  // as --json writes them
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x < 0 ? "−∞" : "∞";
  let s = x.toFixed(p);
  if (s.startsWith("-") && Number(s) === 0) s = s.slice(1);
  return s;
}

function sci(x) {                         // Python's f"{x:.1e}": 3.1e-05
  const [m, e] = x.toExponential(1).split("e");
  const sign = e.startsWith("-") ? "-" : "+";
  const digits = e.replace(/^[-+]/, "");
  return `${m}e${sign}${digits.padStart(2, "0")}`;
}

function prob(x, p = P) {                 // a probability: scientific when below the last decimal
  if (x === null || x === undefined) return "—";
  if (x > 0 && x < 0.5 * 10 ** -p) return sci(x);
  return num(x, p);
}

function cprob(x) {                       // at most 4 characters: .45, 1.00, 3e-5
  if (x >= 0.995) return "1.00";
  if (x >= 0.005) return x.toFixed(2).slice(1);
  if (x <= 0) return "0";
  return x.toExponential(0);              // Python's f"{x:.0e}" without the exponent's leading zero
}

// ------------------------------------------------------------------ words (tracer/render/words.py's, never this script's)

function fill(template, slots) {          // a template's {slots} filled; a slot it names and is not given is an error
  const parts = template.split(/\{(\w+)\}/).map((s, i) => {   // odd parts: the slots' names
    if (i % 2 === 0) return s;
    if (!(s in slots)) throw new Error(`fill: {${s}} of “${template}”`);
    const v = slots[s];
    return v instanceof Node || Array.isArray(v) ? v : String(v);
  });
  // a slot holding an element (a token's text, a button) gives the parts for el(), else the sentence as text
  return parts.some(x => typeof x !== "string") ? parts.filter(x => x !== "") : parts.join("");
}

function say(key, slots = {}) {           // a step's sentence, as the terminal says it (D.words: tracer/render/words.py)
  if (!D.words || !(key in D.words)) throw new Error(`say: D.words[“${key}”]`);
  return fill(D.words[key], slots);
}

function integer(n) { return Math.round(n).toLocaleString("en-US"); }
function count(n, noun) { return `${integer(n)} ${noun}${n === 1 ? "" : "s"}`; }
function shape(...dims) { return dims.map(integer).join(" × "); }
function exact(x) { return x === null || x === undefined ? "not finite" : String(Number(x.toPrecision(6))); }

function label(i) {                       // A, B, …, Z, AA, AB, … as the article names its tokens
  let s = "";
  i += 1;
  while (i > 0) { const r = (i - 1) % 26; s = String.fromCharCode(65 + r) + s; i = Math.floor((i - 1) / 26); }
  return s;
}

function letters(labels) {                // 'A', 'A and B', 'A–F'
  if (!labels.length) return "none";
  if (labels.length > 2) return `${labels[0]}–${labels[labels.length - 1]}`;
  return labels.join(" and ");
}

function span(a, b) { const out = []; for (let i = a; i < b; i++) out.push(label(i)); return letters(out); }
function seq(a, b) { if (b - a <= 26) { let s = ""; for (let i = a; i < b; i++) s += label(i); return s; } return `${label(a)}…${label(b - 1)}`; }
function short(s, width) { return [...s].length <= width ? s : [...s].slice(0, width - 1).join("") + "…"; }
function text(id) { const t = D.texts[String(id)]; return t === undefined ? `#${id}` : t; }
function tokText(pos) { return D.tokens[pos].text; }

// ------------------------------------------------------------------ elements (text only, never markup)

function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k === "style") e.style.cssText = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of kids.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function p(...kids) { return el("p", null, ...kids); }
function b(t) { return el("b", null, t); }
function tokEl(pos) { return el("span", { class: "tt", title: `${label(pos)}: position ${pos}, id ${D.tokens[pos].id}` }, tokText(pos)); }
function idEl(id) { return el("span", { class: "tt" }, text(id)); }

// ------------------------------------------------------------------ the carried vectors

function vecOf(block, t, h) {             // {vals, dims, whole, norm} for position t (head h), or null
  if (!block) return null;
  const i = CI.get(t);
  if (i === undefined) return null;
  const h_ = h === undefined ? null : h;
  const vals = h_ === null ? block.rows[i] : block.rows[i][h_];
  const norm = h_ === null ? block.norm[i] : block.norm[i][h_];
  return { vals, dims: block.dims, whole: block.whole, norm };
}

function shown(v) {                       // the numbers a vector shows: all (up to 10), or the first 4 … last 4
  if (v.whole && v.vals.length <= 10) return { head: v.vals, tail: null };
  if (v.whole) return { head: v.vals.slice(0, 4), tail: v.vals.slice(-4) };
  const k = v.vals.length / 2;
  return { head: v.vals.slice(0, 4), tail: v.vals.slice(2 * k - 4) };
}

function tint(x, scale) {                 // sign and size as a background; the number itself is the text
  if (x === null || !scale) return "";
  const a = Math.min(Math.abs(x) / scale, 1) * 0.38;
  return x >= 0 ? `background: rgba(40, 110, 220, ${a.toFixed(3)})` : `background: rgba(230, 120, 20, ${a.toFixed(3)})`;
}

function vecEl(v) {                       // [0.800, -0.200, …] with the exact value of each on hover
  if (!v) return el("span", { class: "missing" }, say("page.absent"));
  const { head, tail } = shown(v);
  const scale = Math.max(...v.vals.map(x => Math.abs(x || 0)), 1e-12);
  const nums = (xs, from) => xs.map((x, i) => [i ? ", " : "", el("span", { class: "n", style: tint(x, scale), title: `dim ${from + i}: ${exact(x)}` }, num(x))]);
  const out = el("span", { class: "vec" }, "[", nums(head, 0));
  if (tail) out.append(", …, ", ...nums(tail, v.dims - tail.length).flat());
  out.append("]");
  if (tail) out.append(el("span", { class: "dims" }, ` (${integer(v.dims)} dims${v.norm === null ? "" : `, ‖·‖ ${num(v.norm)}`})`));
  return out;
}

function eq(desc, name, v) {              // one step: its words, then name = vector
  return el("div", { class: "eq" }, desc ? el("div", { class: "desc" }, desc) : null,
    el("div", { class: "val" }, name ? el("span", { class: "name" }, `${name} = `) : null, vecEl(v)));
}

function attRow(layer, h, t) {            // head h's row for query t: {keys, d, s, w, rest} or null
  const L = D.layers[layer];
  const a = L && L.att;
  const i = CI.get(t);
  if (!a || i === undefined) return null;
  let keys = a.keys ? a.keys[h][i] : null;
  if (!keys) { keys = []; for (let j = 0; j <= t; j++) keys.push(j); }
  const pick = name => (a[name] ? a[name][h][i] : null);
  return { keys, d: pick("d"), s: pick("s"), w: pick("w"), rest: a.rest ? a.rest[h][i] : null };
}

function passOf(t) { return D.tokens[t] ? D.tokens[t].pass : null; }
function stepStart(t) { const k = passOf(t); return k === null ? 0 : D.passes[k].start; }

// ------------------------------------------------------------------ colour (viridis, as the terminal's heatmap)

const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
function viridis(w) {
  const x = Math.min(Math.max(w, 0), 1) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2);
  const f = x - i;
  return VIRIDIS[i].map((c, k) => Math.round(c * (1 - f) + VIRIDIS[i + 1][k] * f));
}
function ink([r, g, b_]) { return 0.299 * r + 0.587 * g + 0.114 * b_ > 140 ? "#000" : "#fff"; }
function glyph(w) { return w >= 0.95 ? "█" : String(Math.min(9, Math.floor(w * 10 + 0.5))); }

// ------------------------------------------------------------------ the stated values (a scenario's checks)

function checkEl(c) {
  return el("div", { class: `check ${c.ok ? "ok" : "bad"}` },
    el("span", { class: "mark" }, c.ok ? "✓ agrees" : "✗ disagrees"), " ", c.text);
}

function checksHere(section) {            // this step's checks for what is shown; the others as links to them
  const here = D.checks.filter(c => c.section === section);
  const shows = c => (c.pos === null || c.pos === S.token) && (c.layer === null || c.layer === S.layer) && (c.head === null || c.head === S.head);
  const mine = here.filter(shows), others = here.filter(c => !shows(c));
  if (!here.length) return null;
  const box = el("div", { class: "checks" }, el("h3", null, say("checks.here")));
  mine.forEach(c => box.append(checkEl(c)));
  if (others.length) {
    const where = [...new Map(others.map(c => {
      const what = c.layer !== null && c.layer !== S.layer ? ["data-pick-layer", c.layer, `layer ${c.layer}`]
        : c.head !== null && c.head !== S.head ? ["data-pick-head", c.head, `head ${c.head}`] : ["data-follow", c.pos, label(c.pos)];
      return [what.join(" "), what];
    })).values()];
    box.append(el("p", { class: "note" }, say("checks.more", { n: count(others.length, "more stated value"),
      where: where.map(([attr, v, words], i) => [i ? ", " : "", el("button", { class: "link", type: "button", [attr]: v }, words)]) })));
  }
  return box;
}
