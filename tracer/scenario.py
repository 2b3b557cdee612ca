"""Scenario files: a hand-writable TOML that fixes a model, its weights, a prompt and the
generation settings, and states values that a replay checks (`tracer replay FILE.toml`).

The format is documented key by key in `docs/scenarios.md`. In short:

    title = "…"            description = "…"
    [model]      Config fields (tracer/config.py) plus `seed` for every weight not given
    [tokenizer]  vocab = [words…] (and `end`), or encoding = "gpt2"
    [weights]    TransformerLens names → nested lists; `file = "w.npz"`; `"blocks.*.attn.W_O"`
                 gives one value to every layer not named exactly
    [prompt]     tokens = [...] or text = "…"
    [generate]   max_new_tokens, temperature, top_k, top_p, seed, stop, cache
    [[expect]]   name, index, value, label, tolerance, step, reduce: a stated value, checked
    [[note]]     text: a remark the replay prints with the checks

Every problem with a file is one `TracerError` line naming the file (and the line, where it can
be found), the key path and what was expected; the CLI prints it and exits 2. A check that
fails is not an error: the disagreement is what a replay shows (`replay` exits 0).

A stated value's default tolerance is half a unit of its last written digit (0.6 → 0.05,
0.450 → 0.0005, 1 → 0.5). tomllib hands us floats, which forget trailing zeros, so the raw text
of each `value = …` is read back from the file (`_Source`).

Core module: numpy and the standard library (tomllib) only. `replay_command` and `list_command`,
which print, import rich lazily.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from .checks import Check
from .config import Config
from .errors import TracerError, near
from .model import Model
from .weights import first_non_finite

MAX_WEIGHT_BYTES = 8 * 10**9  # refuse to allocate more than this for the weights
SAMPLE_NAMES = ("sample.scaled", "sample.probs", "sample.final", "sample.uniform", "sample.token")
TOKEN_NAMES = ("tokens", "generated")  # not hooks: the pass's token ids, the generated tokens
REDUCE = ("sum", "mean", "norm", "max", "argmax")  # over the last axis of the indexed value

TOP_KEYS = ("title", "description", "model", "tokenizer", "weights", "prompt", "generate", "expect", "note")
MODEL_KEYS = tuple(f.name for f in fields(Config)) + ("seed",)
TOKENIZER_KEYS = ("vocab", "encoding", "end")
PROMPT_KEYS = ("tokens", "text")
GENERATE_KEYS = ("max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop", "cache")
EXPECT_KEYS = ("name", "index", "value", "label", "tolerance", "step", "reduce")
NOTE_KEYS = ("text", "label", "step")


# --------------------------------------------------------------------------------------------
# The raw text: line numbers and the digits of each written value


_KEY_LINE = re.compile(r"""^\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_.\-*]+)\s*=\s*(.*)$""")
_HEADER = re.compile(r"""^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$""")
_NUMBER = re.compile(r"(?<![\w.])[+-]?(\d[\d_]*)(?:\.(\d[\d_]*))?(?:[eE]([+-]?\d+))?(?![\w.])")


def _strip_strings_and_comments(text: str) -> str:
    """The text with string contents blanked and comments removed (numbers stay where they were)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if (c == '"' and text[j] == "\\") else 1
            out.append(" " * (min(j, n - 1) - i + 1))
            i = j + 1
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


class _Source:
    """Where keys are in the file: (table, occurrence, key) → (line, raw value text).

    A forgiving line scanner: it never raises; when it cannot find something, callers go without
    a line number or fall back to the float's own digits.
    """

    def __init__(self, text: str):
        self.keys: dict[tuple[str, int, str], tuple[int, str]] = {}
        self.headers: dict[tuple[str, int], int] = {}
        lines = text.splitlines()
        table, counts = "", {}
        i = 0
        while i < len(lines):
            line = lines[i]
            h = _HEADER.match(line)
            if h and not _KEY_LINE.match(line):
                table = h.group(2).strip()
                counts[table] = counts.get(table, -1) + 1
                self.headers[(table, counts[table])] = i + 1
                i += 1
                continue
            m = _KEY_LINE.match(line)
            if not m:
                i += 1
                continue
            key = m.group(1).strip("\"'")
            value, start = m.group(2), i
            depth = _depth(value)
            while depth > 0 and i + 1 < len(lines):
                i += 1
                value += "\n" + lines[i]
                depth = _depth(value)
            self.keys.setdefault((table, counts.get(table, 0), key), (start + 1, value))
            if "." in key and not m.group(1).startswith(("'", '"')):  # a dotted key: its first part too
                self.keys.setdefault((table, counts.get(table, 0), key.split(".")[0]), (start + 1, value))
            i += 1

    def line(self, table: str, occurrence: int = 0, key: str | None = None) -> int | None:
        if key is not None and (table, occurrence, key) in self.keys:
            return self.keys[(table, occurrence, key)][0]
        return self.headers.get((table, occurrence))

    def raw(self, table: str, occurrence: int, key: str) -> str | None:
        hit = self.keys.get((table, occurrence, key))
        return hit[1] if hit else None


def _depth(value: str) -> int:
    """Open brackets (or 1 inside an unclosed multi-line string) after this much of a value."""
    for quote in ('"""', "'''"):
        if value.count(quote) % 2:
            return 1
    clean = _strip_strings_and_comments(value)
    return clean.count("[") - clean.count("]")


def written_tolerance(raw: str | None, value) -> float:
    """Half a unit of the last written digit: '0.6' → 0.05, '0.450' → 0.0005, '1' → 0.5.

    With several numbers (a list) the finest one decides. Without the raw text, the shortest
    repr of each float stands in for what was written.
    """
    units = []
    if raw is not None:
        for m in _NUMBER.finditer(_strip_strings_and_comments(raw)):
            decimals = len((m.group(2) or "").replace("_", ""))
            exponent = int(m.group(3) or 0)
            units.append(10.0 ** min(exponent - decimals, 308))  # 1e999 would overflow; the value check refuses it
    if not units:
        for x in np.asarray(value, dtype=float).ravel():
            m = _NUMBER.search(repr(float(x))) if math.isfinite(x) else None
            if m:
                decimals = len((m.group(2) or "").rstrip("0"))  # repr writes 1.0 for 1: no decimal
                units.append(10.0 ** (int(m.group(3) or 0) - decimals))
    return 0.5 * min(units) if units else 0.0


# --------------------------------------------------------------------------------------------
# The scenario


@dataclass
class Expect:
    """One `[[expect]]`: a stated value and where in the recording it should be."""

    number: int  # 1-based position among the file's [[expect]] tables
    name: str
    index: tuple  # ints and slices, into the recorded array (no batch axis)
    index_text: list  # as written, for messages and JSON
    value: object
    label: str
    tolerance: float
    step: int | None  # None for `generated` (every step)
    reduce: str | None
    where: str  # "file:line: expect[n]"


@dataclass
class Scenario:
    model: object  # tracer.model.Model
    title: str
    description: str
    prompt: object  # list of token strings or ids, or a text string
    generate: dict  # keyword arguments of Model.generate
    expects: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # [{"text", "label", "step"}]
    path: Path | None = None
    weights: str = "seeded"  # "given" (every weight in the file), "seeded", or "partly given"

    @property
    def name(self) -> str:
        return self.path.stem if self.path else "scenario"

    def run(self, on_step=None):
        """The scenario's generation, every pass recorded (meta says how the weights were made)."""
        gen = self.model.generate(self.prompt, on_step=on_step, **self.generate)
        for meta in [gen.meta] + [s.meta for s in gen.steps]:
            meta["weights"] = self.weights
            meta["scenario"] = self.name
        return gen

    def check(self, gen) -> list[Check]:
        return [check_expect(e, gen, self.model.tokenizer) for e in self.expects]


class _Where:
    """Builds the one-line messages: 'file:line: key.path: what was expected'."""

    def __init__(self, path: Path, source: _Source | None):
        self.path, self.source = path, source

    def at(self, keypath: str, table: str | None = None, occurrence: int = 0, key: str | None = None) -> str:
        line = self.source.line(table, occurrence, key) if (self.source and table is not None) else None
        return f"{self.path}:{line}: {keypath}" if line else f"{self.path}: {keypath}"

    def error(self, keypath: str, message: str, table=None, occurrence=0, key=None) -> TracerError:
        return TracerError(f"{self.at(keypath, table, occurrence, key)}: {message}")


def _quoted(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_\-]+", name) else f'"{name}"'


def _type_name(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f"the string {v!r}"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a table"
    return f"{v!r}"


def _check_keys(table: dict, allowed, keypath: str, w: _Where, src_table: str, occurrence: int = 0) -> None:
    for key in table:
        if key not in allowed:
            where = f"{keypath}.{_quoted(key)}" if keypath else _quoted(key)
            hint = near(key, allowed) or f" (known keys: {', '.join(allowed)})"
            raise w.error(where, f"unknown key{hint}", src_table, occurrence, key)


def _want_table(doc: dict, key: str, w: _Where) -> dict:
    v = doc.get(key, {})
    if not isinstance(v, dict):
        raise w.error(key, f"expected a table [{key}], got {_type_name(v)}", "", 0, key)
    return v


def read_toml(path: Path) -> tuple[dict, _Source]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TracerError(f"{path}: no such scenario file") from None
    except IsADirectoryError:
        raise TracerError(f"{path}: is a folder, not a scenario file") from None
    except OSError as e:
        raise TracerError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TracerError(f"{path}: not a text file (byte {e.start} is not UTF-8); a scenario is TOML text") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = re.search(r"\(at line (\d+), column (\d+)\)$", msg)
        if m:
            msg = msg[: m.start()].strip()
            raise TracerError(f"{path}:{m.group(1)}:{m.group(2)}: TOML syntax error: {msg} "
                              f"(line {m.group(1)}, column {m.group(2)})") from None
        raise TracerError(f"{path}: TOML syntax error: {msg}") from None
    return doc, _Source(text)


def load_scenario(path) -> Scenario:
    """Read, check and build a scenario: its model (weights allocated), prompt, settings, expects."""
    path = Path(path).expanduser()
    doc, source = read_toml(path)
    w = _Where(path, source)
    _check_keys(doc, TOP_KEYS, "", w, "")
    title = _string(doc, "title", w, required=False, default=path.stem)
    description = _string(doc, "description", w, required=False, default="")

    tok = _tokenizer(_want_table(doc, "tokenizer", w), w)
    weights_table = _want_table(doc, "weights", w)
    _check_keys_weights(weights_table, w)
    file_arrays, file_cfg = _weights_file(weights_table, path, w)
    given = {k: v for k, v in weights_table.items() if k != "file"}
    cfg, seed = _config(_want_table(doc, "model", w), tok, given, file_arrays, file_cfg, w)
    # Everything that needs no weights is checked before the weights are allocated (which takes
    # a while for a large model), so a typo further down is reported at once.
    unweighted = _Unweighted(cfg, tok, seed)
    prompt = _prompt(_want_table(doc, "prompt", w), unweighted, w, doc)
    settings = _generate(_want_table(doc, "generate", w), unweighted, prompt, w)
    expects = _expects(doc.get("expect", []), cfg, w, source)
    notes = _notes(doc.get("note", []), w)
    params, made = _params(cfg, seed, given, file_arrays, w)
    model = Model(cfg, params, tok, name=path.stem, seed=seed, source=str(path))
    return Scenario(model, title, description, prompt, settings, expects, notes, path, made)


class _Unweighted(Model):
    """A Model without weights: enough to tokenize and check settings before allocating any."""

    def __init__(self, config: Config, tokenizer, seed: int):  # no super().__init__: no weights
        self.config, self.tokenizer, self.seed = config, tokenizer, seed


def _string(doc: dict, key: str, w: _Where, required: bool, default: str = "") -> str:
    if key not in doc:
        if required:
            raise w.error(key, "missing; expected a string")
        return default
    v = doc[key]
    if not isinstance(v, str):
        raise w.error(key, f"expected a string, got {_type_name(v)}", "", 0, key)
    return v


# ------------------------------------------------------------------------------- [tokenizer]


def _tokenizer(t: dict, w: _Where):
    from .tokens import ENCODINGS, WordTokenizer, get_tokenizer

    _check_keys(t, TOKENIZER_KEYS, "tokenizer", w, "tokenizer")
    if "vocab" in t and "encoding" in t:
        raise w.error("tokenizer", "give either vocab (a word list) or encoding (e.g. \"gpt2\"), not both", "tokenizer")
    if "vocab" in t:
        vocab = t["vocab"]
        if not isinstance(vocab, list) or not vocab or not all(isinstance(x, str) for x in vocab):
            raise w.error("tokenizer.vocab", f"expected a non-empty list of strings, got {_type_name(vocab)}",
                          "tokenizer", 0, "vocab")
        end = t.get("end")
        if end is not None and not isinstance(end, str):
            raise w.error("tokenizer.end", f"expected a string (a word of the vocabulary), got {_type_name(end)}",
                          "tokenizer", 0, "end")
        try:
            return WordTokenizer(vocab, end)
        except TracerError as e:
            key = "end" if "end token" in str(e) else "vocab"
            raise w.error(f"tokenizer.{key}", str(e).removeprefix("tokenizer: "), "tokenizer", 0, key) from None
    if "end" in t:
        raise w.error("tokenizer.end", "only a word list (vocab) takes an end token; an encoding has its own",
                      "tokenizer", 0, "end")
    enc = t.get("encoding", "gpt2")
    if not isinstance(enc, str):
        raise w.error("tokenizer.encoding", f"expected a string such as \"gpt2\", got {_type_name(enc)}",
                      "tokenizer", 0, "encoding")
    if enc not in ENCODINGS:
        raise w.error("tokenizer.encoding", f"unknown encoding {enc!r}{near(enc, ENCODINGS)}; "
                      f"available: {', '.join(ENCODINGS)}", "tokenizer", 0, "encoding")
    return get_tokenizer(enc)


# ------------------------------------------------------------------------------- [weights]


def _check_keys_weights(t: dict, w: _Where) -> None:
    if "file" in t and not isinstance(t["file"], str):
        raise w.error("weights.file", f"expected a file name (a string), got {_type_name(t['file'])}",
                      "weights", 0, "file")


def _weights_file(t: dict, path: Path, w: _Where):
    if "file" not in t:
        return {}, None
    from .weights import load_weights_file

    fpath = (path.parent / t["file"]).resolve() if not Path(t["file"]).is_absolute() else Path(t["file"])
    if not fpath.exists():
        raise w.error("weights.file", f"no such file {str(fpath)!r} (a relative name is relative to the scenario)",
                      "weights", 0, "file")
    try:
        arrays, cfg = load_weights_file(fpath)
    except TracerError as e:
        raise w.error("weights.file", str(e), "weights", 0, "file") from None
    return arrays, cfg


def _array(name: str, value, w: _Where, keypath: str) -> np.ndarray:
    """A given weight as a float array: rectangular, numbers only, finite."""
    if isinstance(value, np.ndarray):
        arr = value
    else:
        if isinstance(value, bool) or isinstance(value, (str, dict)):
            raise w.error(keypath, f"expected a number or a nested list of numbers, got {_type_name(value)}",
                          "weights", 0, name)
        bad = _non_number(value)
        if bad is not None:
            raise w.error(keypath, f"expected numbers, found {_type_name(bad)}", "weights", 0, name)
        try:
            arr = np.array(value, dtype=float)
        except ValueError:
            raise w.error(keypath, f"not a rectangular array: its rows have different lengths ({_ragged(value)})",
                          "weights", 0, name) from None
    if arr.dtype.kind not in "biuf":
        raise w.error(keypath, f"expected numbers, got an array of {arr.dtype}", "weights", 0, name)
    first = first_non_finite(arr)
    if first is not None:
        raise w.error(keypath, f"holds NaN or infinite values (first at index {first}); weights must be finite numbers",
                      "weights", 0, name)
    return arr


def _non_number(v):
    if isinstance(v, list):
        for x in v:
            bad = _non_number(x)
            if bad is not None:
                return bad
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    return None


def _ragged(v) -> str:
    lengths = [len(x) if isinstance(x, list) else "a number" for x in v]
    return "lengths " + ", ".join(str(n) for n in lengths[:6]) + ("…" if len(lengths) > 6 else "")


def _config(t: dict, tok, given: dict, file_arrays: dict, file_cfg, w: _Where) -> tuple[Config, int]:
    _check_keys(t, MODEL_KEYS, "model", w, "model")
    # A weights file's own config is the base; [model] overrides it. d_vocab follows from the
    # tokenizer and n_ctx from W_pos's rows when neither says otherwise.
    d = dict(file_cfg.to_dict()) if file_cfg is not None else {}
    d.setdefault("d_vocab", tok.n_vocab)
    w_pos = given.get("W_pos", file_arrays.get("W_pos"))
    if "n_ctx" not in t and w_pos is not None:
        rows = len(w_pos) if isinstance(w_pos, list) else (np.shape(w_pos)[0] if np.ndim(w_pos) >= 1 else None)
        if rows:
            d["n_ctx"] = int(rows)
    defaults = Config()
    for key, v in t.items():
        if key == "seed":
            continue
        kp = f"model.{key}"
        kind = type(getattr(defaults, key)) if getattr(defaults, key) is not None else int
        if kind is bool:
            if not isinstance(v, bool):
                raise w.error(kp, f"expected true or false, got {_type_name(v)}", "model", 0, key)
        elif kind is int:
            if isinstance(v, bool) or not isinstance(v, int):
                raise w.error(kp, f"expected a whole number, got {_type_name(v)}", "model", 0, key)
        elif kind is float:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise w.error(kp, f"expected a number, got {_type_name(v)}", "model", 0, key)
        elif kind is str and not isinstance(v, str):
            raise w.error(kp, f"expected a string, got {_type_name(v)}", "model", 0, key)
        d[key] = v
    seed = t.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise w.error("model.seed", f"expected a whole number ≥ 0, got {_type_name(seed)}", "model", 0, "seed")
    try:
        cfg = Config(**d)
    except TracerError as e:
        msg = str(e).removeprefix("config: ")
        key = msg.split(" ", 1)[0]
        raise w.error(f"model.{key}", msg.split(" ", 1)[1] if " " in msg else msg, "model", 0, key) from None
    if cfg.d_vocab < tok.n_vocab:
        raise w.error("model.d_vocab", f"{cfg.d_vocab} is smaller than the tokenizer's {tok.n_vocab} tokens",
                      "model", 0, "d_vocab")
    n = cfg.n_params()
    nbytes = n * np.dtype(cfg.dtype).itemsize
    if nbytes > MAX_WEIGHT_BYTES:
        raise w.error("model", f"too large to allocate: {n:,} parameters × {np.dtype(cfg.dtype).itemsize} bytes "
                      f"= {nbytes / 1e9:.1f} GB of weights; tracer refuses more than {MAX_WEIGHT_BYTES / 1e9:.0f} GB",
                      "model")
    return cfg, seed


def _params(cfg: Config, seed: int, given: dict, file_arrays: dict, w: _Where) -> dict:
    from .weights import init_weights, param_shapes

    shapes = param_shapes(cfg)
    exact: dict[str, tuple[object, str, str]] = {}  # name -> (value, key path, key as written)
    for name, arr in file_arrays.items():
        if name not in shapes:
            raise w.error("weights.file", f"holds {name!r}, which is not a parameter of this model"
                          f"{near(name, shapes)}; is it a tracer weights file?", "weights", 0, "file")
        exact[name] = (arr, f"weights.file ({name})", "file")
    wild: dict[str, tuple[object, str, str]] = {}
    for name, value in given.items():
        if isinstance(value, dict):  # `blocks.0.attn.W_Q = …` unquoted is a nested TOML table
            inner = name + "." + ".".join(_first_path(value))
            raise w.error(f"weights.{_quoted(name)}", f"a table, not an array: write names with dots in quotes, "
                          f'"{inner}" = [...]', "weights", 0, name)
        kp = f"weights.{_quoted(name)}"
        if name.startswith("blocks.*."):
            wild[name[len("blocks.*."):]] = (value, kp, name)
        else:
            exact[name] = (value, kp, name)
    for tail, (value, kp, raw) in wild.items():
        targets = [f"blocks.{l}.{tail}" for l in range(cfg.n_layers)]
        if cfg.n_layers and targets[0] not in shapes:
            layer0 = [k.removeprefix("blocks.0.") for k in shapes if k.startswith("blocks.0.")]
            raise w.error(kp, f"unknown parameter{near(tail, layer0)}; a layer has: {', '.join(layer0)}",
                          "weights", 0, raw)
        for t in targets:
            exact.setdefault(t, (value, kp, raw))
    checked = {}
    for name, entry in exact.items():
        value, kp, raw = entry
        if name not in shapes:
            hint = near(name, shapes)
            if name == "W_U" and cfg.tied_unembed:
                hint = " (tied_unembed is true, so W_U is W_E transposed; set model.tied_unembed = false to give W_U)"
            elif name == "W_pos" and cfg.positional == "none":
                hint = " (model.positional is \"none\")"
            elif name == "W_pos" and cfg.positional == "sinusoidal":
                hint = " (model.positional is \"sinusoidal\", so W_pos is computed; use \"explicit\" to give it)"
            elif not hint:
                hint = f" (this model's parameters: {', '.join(list(shapes)[:6])}, …)"
            raise w.error(kp, f"unknown parameter{hint}", "weights", 0, raw)
        if name == "W_pos" and cfg.positional == "sinusoidal":
            raise w.error(kp, "model.positional is \"sinusoidal\", so W_pos is computed; use \"explicit\" to give it",
                          "weights", 0, raw)
        arr = _array(raw, value, w, kp)
        if tuple(arr.shape) != tuple(shapes[name]):
            what = f"{kp} (for {name})" if raw not in (name, "file") else kp
            hint = ""
            if shapes[name][:1] == (1,) and tuple(arr.shape) == tuple(shapes[name][1:]):
                hint = " (one head still has a head axis: wrap the matrix in one more [ ])"
            raise w.error(what, f"expected {list(shapes[name])}, got {list(arr.shape)}{hint}", "weights", 0, raw)
        checked[name] = arr
    # Biases (zeros) and layer-norm gains (ones) are fixed defaults, not drawn: a file that gives
    # every matrix has "given" weights; one that gives none has "seeded" ones.
    fixed = {"W_pos"} if cfg.positional == "sinusoidal" else set()
    drawn = [k for k in shapes if k not in checked and k not in fixed and not _is_zero_default(k)]
    made = "given" if not drawn else ("seeded" if not checked else "partly given")
    return init_weights(cfg, seed, checked, where=f"{w.path}: weights"), made


def _first_path(d: dict) -> list[str]:
    key = next(iter(d), "")
    return [key] + (_first_path(d[key]) if isinstance(d.get(key), dict) else [])


def _is_zero_default(name: str) -> bool:
    """Parameters whose default is fixed, not drawn: biases (zeros) and layer-norm gains (ones)."""
    leaf = name.rsplit(".", 1)[-1]
    return leaf == "w" or leaf.startswith("b")


# ------------------------------------------------------------------------------- [prompt], [generate]


def _prompt(t: dict, model, w: _Where, doc: dict):
    _check_keys(t, PROMPT_KEYS, "prompt", w, "prompt")
    if "prompt" not in doc:
        raise w.error("prompt", "missing; add a [prompt] table with tokens = [...] or text = \"…\"")
    if ("tokens" in t) == ("text" in t):
        raise w.error("prompt", "give exactly one of tokens = [...] or text = \"…\"", "prompt")
    key = "tokens" if "tokens" in t else "text"
    value = t[key]
    if key == "text" and not isinstance(value, str):
        raise w.error("prompt.text", f"expected a string, got {_type_name(value)}", "prompt", 0, "text")
    if key == "tokens":
        ok = isinstance(value, list) and value and (
            all(isinstance(x, str) for x in value) or all(isinstance(x, int) and not isinstance(x, bool) for x in value))
        if not ok:
            raise w.error("prompt.tokens", "expected a non-empty list of token strings (a word-list vocabulary) "
                          f"or of token ids, got {_type_name(value) if not isinstance(value, list) else 'a mixed list'}",
                          "prompt", 0, "tokens")
        if isinstance(value[0], str) and not hasattr(model.tokenizer, "ids"):
            raise w.error("prompt.tokens", f"token strings need a word-list vocabulary; with encoding "
                          f"{model.tokenizer.name!r} give text = \"…\" or token ids", "prompt", 0, "tokens")
    try:
        model.tokenize(value)
    except TracerError as e:
        raise w.error(f"prompt.{key}", str(e).removeprefix("prompt: "), "prompt", 0, key) from None
    return value


def _generate(t: dict, model, prompt, w: _Where) -> dict:
    _check_keys(t, GENERATE_KEYS, "generate", w, "generate")

    def err(key, msg):
        return w.error(f"generate.{key}", msg, "generate", 0, key)

    def whole(key, v, low):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise err(key, f"expected a whole number ≥ {low}, got {_type_name(v)}")
        return v

    out = {"max_new_tokens": 1, "temperature": 0.0, "top_k": None, "top_p": None, "seed": model.seed or 0,
           "cache": True, "stop": None}
    if "max_new_tokens" in t:
        out["max_new_tokens"] = whole("max_new_tokens", t["max_new_tokens"], 0)
    if "temperature" in t:
        v = t["temperature"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise err("temperature", f"expected a number ≥ 0 (0 is greedy), got {_type_name(v)}")
        out["temperature"] = float(v)
    if "top_k" in t:
        out["top_k"] = whole("top_k", t["top_k"], 1)
    if "top_p" in t:
        v = t["top_p"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise err("top_p", f"expected a number in (0, 1], got {_type_name(v)}")
        out["top_p"] = float(v)
    if "seed" in t:
        out["seed"] = whole("seed", t["seed"], 0)
    if "cache" in t:
        if not isinstance(t["cache"], bool):
            raise err("cache", f"expected true or false, got {_type_name(t['cache'])}")
        out["cache"] = t["cache"]
    if "stop" in t:
        v = t["stop"]
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(s, str) and s for s in v):
            raise err("stop", f"expected a string or a list of strings, got {_type_name(t['stop'])}")
        out["stop"] = v
    n = len(model.tokenize(prompt))
    room = model.config.n_ctx - n
    if out["max_new_tokens"] > room:
        raise err("max_new_tokens", f"{out['max_new_tokens']} overflows the context: the prompt has {n} tokens and "
                  f"n_ctx is {model.config.n_ctx}, so at most {room} new tokens")
    return out


# ------------------------------------------------------------------------------- [[expect]], [[note]]


def _tables(v, key: str, w: _Where) -> list:
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise w.error(key, f"expected [[{key}]] tables, got {_type_name(v)}", "", 0, key)
    return v


def _expects(raw_list, cfg: Config, w: _Where, source: _Source) -> list[Expect]:
    from .decoder import hook_names

    known = list(hook_names(cfg)) + list(SAMPLE_NAMES) + list(TOKEN_NAMES)
    out = []
    for i, t in enumerate(_tables(raw_list, "expect", w)):
        num = i + 1
        kp = f"expect[{num}]"

        def err(key, msg):
            return w.error(f"{kp}.{key}" if key else kp, msg, "expect", i, key)

        _check_keys(t, EXPECT_KEYS, kp, w, "expect", i)
        if "name" not in t:
            raise err(None, "missing name (a recorded hook such as \"blocks.0.attn.hook_pattern\", "
                      "a sample.* name, \"tokens\" or \"generated\")")
        name = t["name"]
        if not isinstance(name, str):
            raise err("name", f"expected a string, got {_type_name(name)}")
        if name not in known:
            layer = re.match(r"blocks\.(\d+)\.(.*)$", name)
            if layer and int(layer.group(1)) >= cfg.n_layers:
                has = f"layers 0..{cfg.n_layers - 1}" if cfg.n_layers > 1 else ("only layer 0" if cfg.n_layers else "no layers")
                raise err("name", f"{name!r}: the model has {has} (n_layers = {cfg.n_layers})")
            raise err("name", f"no recorded value is called {name!r}{near(name, known, n=1)}")
        if "value" not in t:
            raise err(None, "missing value (the stated number, list, or token strings)")
        value = t["value"]
        tokens = name in TOKEN_NAMES
        _check_value(value, tokens, err)
        index_text = t.get("index", [])
        index = _index(index_text, err)
        label = t.get("label", "")
        if not isinstance(label, str):
            raise err("label", f"expected a string, got {_type_name(label)}")
        step = t.get("step", None if name == "generated" else 0)
        if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
            raise err("step", f"expected a whole number ≥ 0 (0 is the prompt pass), got {_type_name(step)}")
        if name == "generated" and "step" in t:
            raise err("step", "\"generated\" covers every step; give no step")
        reduce = t.get("reduce")
        if reduce is not None and reduce not in REDUCE:
            raise err("reduce", f"expected one of {', '.join(REDUCE)} (over the last axis), got {_type_name(reduce)}"
                      f"{near(reduce, REDUCE) if isinstance(reduce, str) else ''}")
        if tokens and reduce is not None:
            raise err("reduce", f"{name!r} holds tokens; reduce applies to recorded arrays")
        if "tolerance" in t:
            tol = t["tolerance"]
            if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0:
                raise err("tolerance", f"expected a number ≥ 0 (absolute), got {_type_name(tol)}")
            tol = float(tol)
        elif tokens:
            tol = 0.0
        else:
            tol = written_tolerance(source.raw("expect", i, "value") if source else None, value)
        line = source.line("expect", i) if source else None
        where = f"{w.path}:{line}: {kp}" if line else f"{w.path}: {kp}"
        out.append(Expect(num, name, index, list(index_text), value, label, tol, step, reduce, where))
    return out


def _check_value(value, tokens: bool, err) -> None:
    if tokens:
        items = value if isinstance(value, list) else [value]
        if not items or not (all(isinstance(x, str) for x in items)
                             or all(isinstance(x, int) and not isinstance(x, bool) for x in items)):
            raise err("value", "expected token strings or token ids (a list of one kind)")
        return
    if isinstance(value, (str, dict)) or isinstance(value, bool):
        raise err("value", f"expected a number or a nested list of numbers, got {_type_name(value)}")
    bad = _non_number(value)
    if bad is not None:
        raise err("value", f"expected numbers, found {_type_name(bad)}")
    try:
        np.array(value, dtype=float)
    except ValueError:
        raise err("value", "not a rectangular list: its rows have different lengths") from None


_SLICE = re.compile(r"^\s*(-?\d+)?\s*:\s*(-?\d+)?\s*$")


def _index(index_text, err) -> tuple:
    if isinstance(index_text, int) and not isinstance(index_text, bool):
        index_text = [index_text]
    if not isinstance(index_text, list):
        raise err("index", f"expected a list such as [0, 1] or [0, 1, \"0:2\"], got {_type_name(index_text)}")
    out = []
    for x in index_text:
        if isinstance(x, int) and not isinstance(x, bool):
            out.append(x)
        elif isinstance(x, str) and _SLICE.match(x):
            m = _SLICE.match(x)
            out.append(slice(int(m.group(1)) if m.group(1) else None, int(m.group(2)) if m.group(2) else None))
        else:
            raise err("index", f"entries are whole numbers or slices written as strings (\"0:2\", \":\"), "
                      f"got {_type_name(x)}")
    return tuple(out)


def _notes(raw_list, w: _Where) -> list[dict]:
    out = []
    for i, t in enumerate(_tables(raw_list, "note", w)):
        kp = f"note[{i + 1}]"
        _check_keys(t, NOTE_KEYS, kp, w, "note", i)
        text = t.get("text")
        if not isinstance(text, str) or not text.strip():
            raise w.error(f"{kp}.text", "expected a non-empty string", "note", i, "text")
        label = t.get("label", "")
        if not isinstance(label, str):
            raise w.error(f"{kp}.label", f"expected a string, got {_type_name(label)}", "note", i, "label")
        step = t.get("step", 0)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise w.error(f"{kp}.step", f"expected a whole number ≥ 0, got {_type_name(step)}", "note", i, "step")
        out.append({"text": " ".join(text.split()), "label": label, "step": step})
    return out


# --------------------------------------------------------------------------------------------
# Checking a generation against the expectations


class TokenCheck(Check):
    """A check on tokens (strings or ids): equal or not; `diff` counts the positions that differ."""

    def __post_init__(self):
        e = list(self.expected) if isinstance(self.expected, list) else [self.expected]
        c = list(self.computed) if isinstance(self.computed, list) else [self.computed]
        self.diff = float(sum(a != b for a, b in zip(e, c)) + abs(len(e) - len(c)))
        self.ok = self.diff == 0


def _index_str(index_text) -> str:
    return "[" + ", ".join(str(x) for x in index_text) + "]" if index_text else ""


def check_expect(e: Expect, gen, tokenizer) -> Check:
    """Compare one stated value with the recording of `gen` (a `Generation`)."""
    what = f"{e.name}{_index_str(e.index_text)}"
    if e.name == "generated":
        ids = [int(i) for i in gen.generated_ids]
        computed = ids if _ints(e.value) else [tokenizer.token_str(i) for i in ids]
        computed = _pick(computed, e, what, "generated")
        return TokenCheck(e.name, tuple(e.index_text), e.value, computed, 0.0, e.label, len(gen.steps) - 1)
    if e.step >= len(gen.steps):
        # The generation stopped before this pass: a stated value with nothing to compare to.
        return Check(e.name, tuple(e.index_text), e.value, None, e.tolerance,
                     f"{e.label} (no step {e.step}: the generation made {len(gen.steps)} passes)".strip(), e.step)
    trace = gen.steps[e.step]
    if e.name == "tokens":
        ids = [int(i) for i in trace.tokens]
        computed = ids if _ints(e.value) else [tokenizer.token_str(i) for i in ids]
        return TokenCheck(e.name, tuple(e.index_text), e.value, _pick(computed, e, what, "tokens"), 0.0, e.label, e.step)
    if e.name not in trace.arrays:
        why = " (sample.uniform is drawn only when temperature > 0)" if e.name == "sample.uniform" else ""
        raise TracerError(f"{e.where}.name: {e.name!r} is not recorded at step {e.step}{why}")
    arr = np.asarray(trace.arrays[e.name])
    try:
        got = arr[e.index] if e.index else arr
    except IndexError:
        raise TracerError(f"{e.where}.index: {_index_str(e.index_text)} is out of range for {e.name} at step "
                          f"{e.step}, whose shape is {list(arr.shape)}") from None
    got = np.asarray(got)
    if e.reduce is not None:
        if got.ndim == 0:
            raise TracerError(f"{e.where}.reduce: {what} is a single number; nothing to {e.reduce}")
        got = {"sum": lambda a: a.sum(-1), "mean": lambda a: a.mean(-1), "norm": lambda a: np.sqrt((a * a).sum(-1)),
               "max": lambda a: a.max(-1), "argmax": lambda a: a.argmax(-1)}[e.reduce](got.astype(float))
    stated = np.asarray(e.value, dtype=float)
    if stated.shape != got.shape:
        shown = f"{what} ({e.reduce} over the last axis)" if e.reduce else what
        raise TracerError(f"{e.where}.value: expected shape {list(got.shape)} to match {shown} at step {e.step}, "
                          f"got {list(stated.shape)}")
    return Check(e.name, tuple(e.index_text), e.value, np.asarray(got).tolist(), e.tolerance, e.label, e.step)


def _ints(value) -> bool:
    items = value if isinstance(value, list) else [value]
    return all(isinstance(x, int) and not isinstance(x, bool) for x in items)


def _pick(items: list, e: Expect, what: str, name: str):
    if not e.index:
        return items
    if len(e.index) != 1:
        raise TracerError(f"{e.where}.index: {name} is a list of tokens; give one index or slice, e.g. [0] or [\"0:3\"]")
    try:
        return items[e.index[0]]
    except IndexError:
        raise TracerError(f"{e.where}.index: {_index_str(e.index_text)} is out of range for {name} "
                          f"({len(items)} tokens)") from None


def replay(scn: Scenario):
    """Run a scenario and check it: (generation, checks)."""
    gen = scn.run()
    return gen, scn.check(gen)


# --------------------------------------------------------------------------------------------
# Shipped scenarios and the CLI-facing functions


def shipped() -> dict[str, Path]:
    """Name → path of every scenario shipped in `tracer.scenarios`."""
    from importlib.resources import files

    root = files("tracer.scenarios")
    out = {}
    for item in sorted(root.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".toml"):
            out[item.name[: -len(".toml")]] = Path(str(item))
    return out


def find_scenario(name: str) -> Path | None:
    """A shipped scenario by name ("article" or "article.toml"), or None."""
    name = str(name)
    stem = name[: -len(".toml")] if name.endswith(".toml") else name
    return shipped().get(stem)


def resolve(scenario: str) -> Path:
    """A file path as given, else a shipped scenario by name, else a TracerError with suggestions."""
    path = Path(scenario).expanduser()
    if path.is_file():
        return path
    found = find_scenario(scenario) if "/" not in scenario else None
    if found is not None:
        return found
    names = list(shipped())
    if path.suffix == ".toml" or "/" in scenario:
        raise TracerError(f"{scenario}: no such scenario file")
    raise TracerError(f"scenario {scenario!r}: no such file and no shipped scenario of that name"
                      f"{near(scenario, names)}; shipped: {', '.join(names)}")


def _json_safe(x):
    if isinstance(x, float):
        return x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def replay_json(scn: Scenario, gen, checks: list[Check]) -> dict:
    tok = scn.model.tokenizer
    out = {
        "title": scn.title,
        "scenario": str(scn.path) if scn.path else None,
        "checks": [c.to_dict() for c in checks],
        "prompt_ids": [int(i) for i in gen.prompt_ids],
        "generated": [tok.token_str(t) for t in gen.generated_ids],
        "generated_ids": [int(i) for i in gen.generated_ids],
        "text": gen.text,
        "passed": sum(c.ok for c in checks),
        "failed": sum(not c.ok for c in checks),
        "notes": scn.notes,
    }
    for c in out["checks"]:
        if c["diff"] is not None and not math.isfinite(c["diff"]):  # Check.to_dict may already give None
            c["diff"] = None
    return _json_safe(out)


def replay_command(scenario: str, json_out: bool = False, view=None, export: str | None = None, console=None) -> None:
    """`tracer replay`: run a scenario, show the walkthrough with every check, or print JSON.

    Exits 0 whether the checks hold or not: a ✗ is a stated value that disagrees with the
    computation, which is what a replay is for. A malformed file is a TracerError (exit 2).
    """
    import dataclasses
    import json

    if export:
        from .render.export import check_export_path

        check_export_path(export)
    scn = load_scenario(resolve(scenario))
    gen, checks = replay(scn)
    if json_out:
        print(json.dumps(replay_json(scn, gen, checks), ensure_ascii=False))
        return
    from rich.console import Console

    from .render import show_generation
    from .render.view import View

    view = view if view is not None else View()
    console = console or Console(record=bool(export))  # the CLI passes one that shows control characters
    show_generation(gen, scn.model.tokenizer, dataclasses.replace(view, checks=tuple(checks)), console=console,
                    before=_header(scn))  # printed only once the view options are known to be valid
    if export:
        from .render.export import export_console

        export_console(console, export)


def _header(scn: Scenario) -> list:
    from rich.text import Text

    out = [Text(scn.title, style="bold")]
    if scn.description:
        out.append(Text(" ".join(scn.description.split())))
    for note in scn.notes:
        out.append(Text("Note" + (f" ({note['label']})" if note["label"] else "") + ": ", style="bold")
                   + Text(note["text"]))
    out.append(Text())
    return out


def list_command() -> None:
    """`tracer scenarios`: the shipped scenarios, their titles and model shapes (nothing allocated)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Shipped scenarios (tracer replay NAME)", title_justify="left")
    table.add_column("name", no_wrap=True)
    table.add_column("title")
    table.add_column("model")
    for name, path in shipped().items():
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            table.add_row(name, f"(unreadable: {e})", "")
            continue
        table.add_row(name, str(doc.get("title", "")), _shape_summary(doc))
    Console().print(table)


def _shape_summary(doc: dict) -> str:
    m, t = doc.get("model", {}), doc.get("tokenizer", {})
    c = Config()
    layers, width, heads = m.get("n_layers", c.n_layers), m.get("d_model", c.d_model), m.get("n_heads", c.n_heads)
    tok = f"{len(t['vocab'])} words" if "vocab" in t else t.get("encoding", "gpt2")
    return (f"{layers} layer{'s' if layers != 1 else ''} × {width} wide, {heads} head{'s' if heads != 1 else ''}, "
            f"{tok}")
