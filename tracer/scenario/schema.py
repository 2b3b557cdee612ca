"""A scenario file read and checked: its model's config and weights, tokenizer, prompt, generation
settings, stated values and notes (`load_scenario` → `Scenario`).

The format is documented key by key in `docs/scenarios.md`. In short:

    title = "…"            description = "…"
    [model]      Config fields (tracer/core/config.py) plus `seed` for every weight not given
    [tokenizer]  vocab = [words…] (and `end`), or encoding = "gpt2"
    [weights]    TransformerLens names → nested lists; `file = "w.npz"`; `"blocks.*.attn.W_O"`
                 gives one value to every layer not named exactly
    [prompt]     tokens = [...] or text = "…"
    [generate]   the generation settings, named as tracer.run.settings.SETTINGS names them (max_new_tokens, …)
    [[expect]]   name, index, value, label, tolerance, step, reduce: a stated value, checked
    [[note]]     text: a remark the replay prints with the checks

Everything that needs no weights is checked before the weights are allocated. This module gives a
config and arrays; `tracer.loaders.scenario_model` makes the Model. Core module: numpy and the
standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from ..core.config import Config
from ..errors import TracerError, is_whole, near
from ..formats.files import load_weights_file, weights_header
from ..core.memory import memory_room
from ..formats.reading import reason
from ..core.params import first_non_finite, init_weights, param_shapes
from ..run import settings as declared
from ..run.settings import GenerationSettings, SettingError
from ..tokenizers.tokens import ENCODINGS, ContextOverflow, Prompt, Tokenizer, WordTokenizer, encode_prompt, get_tokenizer
from .expect import read_expects
from .source import Where, check_keys, non_number, quoted, read_toml, tables, type_name, want_table

MAX_WEIGHT_BYTES = 8 * 10**9  # refuse to allocate more than this for the weights
MAX_MACS = 10**12  # multiply-adds of a whole run, about 150 times gpt2_medium_shape (7e9): minutes
TOP_KEYS = ("title", "description", "model", "tokenizer", "weights", "prompt", "generate", "expect", "note")
MODEL_KEYS = tuple(f.name for f in fields(Config)) + ("seed",)
MIXED_KEYS = {  # [model] keys whose type is not their default's: what the file may give
    "mlp": ('"gelu", "swiglu", true or false', (bool, str)),
    "rope_scaling": ('a table such as {rope_type = "llama3", factor = 8.0, …}', dict),
}
TOKENIZER_KEYS = ("vocab", "encoding", "end")
PROMPT_KEYS = ("tokens", "text")
NOTE_KEYS = ("text", "label", "step", "section")


@dataclass
class Scenario:
    config: Config
    params: dict  # name → array: every parameter, the given ones checked, the rest seeded
    tokenizer: Tokenizer
    seed: int  # the seed of the weights not given
    title: str
    description: str
    prompt: Prompt  # token ids, checked against the context with room for the new tokens
    settings: GenerationSettings
    expects: list = field(default_factory=list)  # [tracer.scenario.expect.Expect]
    notes: list = field(default_factory=list)  # [{"text", "label", "step", "section"}]
    path: Path | None = None
    weights: str = "seeded"  # "given" (every weight in the file), "seeded", or "partly given"

    @property
    def name(self) -> str:
        return self.path.stem if self.path else "scenario"


def load_scenario(path) -> Scenario:
    """Read and check a scenario: its config and weights (allocated), prompt, settings, expects."""
    path = Path(path).expanduser()
    doc, source = read_toml(path)
    w = Where(path, source)
    check_keys(doc, TOP_KEYS, "", w, "")
    title = _string(doc, "title", w, required=False, default=path.stem)
    description = _string(doc, "description", w, required=False, default="")

    tok = _tokenizer(want_table(doc, "tokenizer", w), w)
    weights_table = want_table(doc, "weights", w)
    _check_keys_weights(weights_table, w)
    file, file_head = _weights_file(weights_table, path, w)
    given = {k: v for k, v in weights_table.items() if k != "file"}
    cfg, seed = _config(want_table(doc, "model", w), tok, given, file_head, w)
    # Everything that needs no weights is checked before the weights are allocated (which takes
    # a while for a large model), so a typo further down is reported at once.
    written = _prompt(want_table(doc, "prompt", w), tok, w, doc)
    settings = _generate(want_table(doc, "generate", w), seed, w)
    prompt = _encode(tok, cfg, written, settings, w)
    expects = read_expects(doc.get("expect", []), cfg, w, source)
    notes = _notes(doc.get("note", []), w)
    _check_cost(cfg, prompt, settings, w)
    params, made = _params(cfg, seed, given, (file, file_head), w)
    return Scenario(cfg, params, tok, seed, title, description, prompt, settings, expects, notes, path, made)


def _string(doc: dict, key: str, w: Where, required: bool, default: str = "") -> str:
    if key not in doc:
        if required:
            raise w.error(key, "missing; expected a string")
        return default
    v = doc[key]
    if not isinstance(v, str):
        raise w.error(key, f"expected a string, got {type_name(v)}", "", 0, key)
    return v


# ------------------------------------------------------------------------------- [tokenizer]


def _tokenizer(t: dict, w: Where):
    check_keys(t, TOKENIZER_KEYS, "tokenizer", w, "tokenizer")
    if "vocab" in t and "encoding" in t:
        raise w.error("tokenizer", "give either vocab (a word list) or encoding (e.g. \"gpt2\"), not both", "tokenizer")
    if "vocab" in t:
        vocab = t["vocab"]
        if not isinstance(vocab, list) or not vocab or not all(isinstance(x, str) for x in vocab):
            raise w.error("tokenizer.vocab", f"expected a non-empty list of strings, got {type_name(vocab)}",
                          "tokenizer", 0, "vocab")
        end = t.get("end")
        if end is not None and not isinstance(end, str):
            raise w.error("tokenizer.end", f"expected a string (a word of the vocabulary), got {type_name(end)}",
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
        raise w.error("tokenizer.encoding", f"expected a string such as \"gpt2\", got {type_name(enc)}",
                      "tokenizer", 0, "encoding")
    if enc not in ENCODINGS:
        raise w.error("tokenizer.encoding", f"unknown encoding {enc!r}{near(enc, ENCODINGS)}; "
                      f"available: {', '.join(ENCODINGS)}", "tokenizer", 0, "encoding")
    return get_tokenizer(enc)


# ------------------------------------------------------------------------------- [weights]


def _check_keys_weights(t: dict, w: Where) -> None:
    if "file" in t and not isinstance(t["file"], str):
        raise w.error("weights.file", f"expected a file name (a string), got {type_name(t['file'])}",
                      "weights", 0, "file")


def _weights_file(t: dict, path: Path, w: Where):
    """(path, `WeightsHeader`) of the `file =` weights, read without their arrays; (None, None) without one."""
    if "file" not in t:
        return None, None
    try:
        fpath = (path.parent / t["file"]).resolve() if not Path(t["file"]).is_absolute() else Path(t["file"])
        exists = fpath.exists()
    except (OSError, ValueError, RuntimeError) as e:
        raise w.error("weights.file", f"cannot read {t['file']!r} ({reason(e) if isinstance(e, OSError) else e})",
                      "weights", 0, "file") from None
    if not exists:
        raise w.error("weights.file", f"no such file {str(fpath)!r} (a relative name is relative to the scenario)",
                      "weights", 0, "file")
    try:
        return fpath, weights_header(fpath)
    except TracerError as e:
        raise w.error("weights.file", str(e), "weights", 0, "file") from None


def _array(name: str, value, w: Where, keypath: str) -> np.ndarray:
    """A given weight as a float array: rectangular, numbers only, finite."""
    if isinstance(value, np.ndarray):
        arr = value
    else:
        if isinstance(value, bool) or isinstance(value, (str, dict)):
            raise w.error(keypath, f"expected a number or a nested list of numbers, got {type_name(value)}",
                          "weights", 0, name)
        bad = non_number(value)
        if bad is not None:
            raise w.error(keypath, f"expected numbers, found {type_name(bad)}", "weights", 0, name)
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


def _ragged(v) -> str:
    lengths = [len(x) if isinstance(x, list) else "a number" for x in v]
    return "lengths " + ", ".join(str(n) for n in lengths[:6]) + ("…" if len(lengths) > 6 else "")


def _config(t: dict, tok, given: dict, file_head, w: Where) -> tuple[Config, int]:
    check_keys(t, MODEL_KEYS, "model", w, "model")
    # A weights file's own config is the base; [model] overrides it. d_vocab follows from the
    # tokenizer and n_ctx from W_pos's rows when neither says otherwise.
    d = dict(file_head.config.to_dict()) if file_head is not None and file_head.config is not None else {}
    d.setdefault("d_vocab", tok.n_vocab)
    w_pos = given.get("W_pos", file_head.shapes.get("W_pos") if file_head is not None else None)
    if "n_ctx" not in t and w_pos is not None:
        rows = len(w_pos) if isinstance(w_pos, list) else (w_pos[0] if isinstance(w_pos, tuple) and w_pos else None)
        if rows:
            d["n_ctx"] = int(rows)
    defaults = Config()
    for key, v in t.items():
        if key == "seed":
            continue
        kp = f"model.{key}"
        kind = type(getattr(defaults, key)) if getattr(defaults, key) is not None else int
        if key in MIXED_KEYS:
            said, kinds = MIXED_KEYS[key]
            if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds):
                raise w.error(kp, f"expected {said}, got {type_name(v)}", "model", 0, key)
        elif kind is bool:
            if not isinstance(v, bool):
                raise w.error(kp, f"expected true or false, got {type_name(v)}", "model", 0, key)
        elif kind is int:
            if not is_whole(v):
                raise w.error(kp, f"expected a whole number, got {type_name(v)}", "model", 0, key)
        elif kind is float:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise w.error(kp, f"expected a number, got {type_name(v)}", "model", 0, key)
        elif kind is str and not isinstance(v, str):
            raise w.error(kp, f"expected a string, got {type_name(v)}", "model", 0, key)
        d[key] = v
    seed = t.get("seed", 0)
    if not is_whole(seed, 0):
        raise w.error("model.seed", f"expected a whole number ≥ 0, got {type_name(seed)}", "model", 0, "seed")
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


def _check_cost(cfg: Config, prompt: Prompt, settings: GenerationSettings, w: Where) -> None:
    """Refuse a run the process cannot hold or that would take too long, from the config, the prompt
    and the settings alone: the weights (and sin/cos positions' working arrays), every recorded
    pass, and the multiply-adds of every pass."""
    item = np.dtype(cfg.dtype).itemsize
    weights = cfg.n_params() * item + (4 * 8 * cfg.n_ctx * cfg.d_model if cfg.positional == "sinusoidal" else 0)
    n, passes = len(prompt.ids), max(settings.max_new_tokens, 1)
    seen = n + np.arange(passes, dtype=np.float64)  # [pass] tokens each pass sees (floats: sums past 2^63)
    computed = np.where(np.arange(passes) == 0, n, 1.0 if settings.cache else seen)  # [pass] positions it computes
    recording = float(np.sum(cfg.pass_bytes(computed, seen)))
    room = memory_room()
    if weights + recording > room:
        raise w.error("model", f"too large for this process: the weights take {weights / 1e9:.2f} GB and recording "
                      f"{passes:,} passes {recording / 1e9:.2f} GB, and it can take {room / 1e9:.2f} GB more",
                      "model")
    macs = float(np.sum(cfg.pass_macs(computed, seen)))
    if macs > MAX_MACS:
        raise w.error("model", f"too slow to run: {macs:.1e} multiply-adds over {passes:,} passes; tracer "
                      f"runs a scenario of at most {MAX_MACS:.0e}", "model")


def _params(cfg: Config, seed: int, given: dict, file, w: Where) -> dict:
    shapes = param_shapes(cfg)
    exact: dict[str, tuple[object, str, str]] = {}  # name -> (value, key path, key as written)
    fpath, head = file
    for name in head.shapes if head is not None else ():  # checked from the file's headers, before reading it
        if name not in shapes:
            raise w.error("weights.file", f"holds {name!r}, which is not a parameter of this model"
                          f"{near(name, shapes)}; is it a tracer weights file?", "weights", 0, "file")
        if tuple(head.shapes[name]) != tuple(shapes[name]):
            raise w.error(f"weights.file ({name})", f"expected {list(shapes[name])}, got {list(head.shapes[name])}",
                          "weights", 0, "file")
    if head is not None:
        try:
            file_arrays, _ = load_weights_file(fpath, {k: shapes[k] for k in head.shapes})
        except TracerError as e:
            raise w.error("weights.file", str(e), "weights", 0, "file") from None
        for name, arr in file_arrays.items():
            exact[name] = (arr, f"weights.file ({name})", "file")
    wild: dict[str, tuple[object, str, str]] = {}
    for name, value in given.items():
        if isinstance(value, dict):  # `blocks.0.attn.W_Q = …` unquoted is a nested TOML table
            inner = name + "." + ".".join(_first_path(value))
            raise w.error(f"weights.{quoted(name)}", f"a table, not an array: write names with dots in quotes, "
                          f'"{inner}" = [...]', "weights", 0, name)
        kp = f"weights.{quoted(name)}"
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
            elif name == "W_pos" and not cfg.has_positions:
                hint = f" (model.positional is \"{cfg.positional}\": no position vector is added)"
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


# ------------------------------------------------------------------------------- [prompt], [generate], [[note]]


def _prompt(t: dict, tok: Tokenizer, w: Where, doc: dict) -> tuple[str, object]:
    check_keys(t, PROMPT_KEYS, "prompt", w, "prompt")
    if "prompt" not in doc:
        raise w.error("prompt", "missing; add a [prompt] table with tokens = [...] or text = \"…\"")
    if ("tokens" in t) == ("text" in t):
        raise w.error("prompt", "give exactly one of tokens = [...] or text = \"…\"", "prompt")
    key = "tokens" if "tokens" in t else "text"
    value = t[key]
    if key == "text" and not isinstance(value, str):
        raise w.error("prompt.text", f"expected a string, got {type_name(value)}", "prompt", 0, "text")
    if key == "tokens":
        ok = isinstance(value, list) and value and (
            all(isinstance(x, str) for x in value) or all(isinstance(x, int) and not isinstance(x, bool) for x in value))
        if not ok:
            raise w.error("prompt.tokens", "expected a non-empty list of token strings (a word-list vocabulary) "
                          f"or of token ids, got {type_name(value) if not isinstance(value, list) else 'a mixed list'}",
                          "prompt", 0, "tokens")
        if isinstance(value[0], str) and not hasattr(tok, "ids"):
            raise w.error("prompt.tokens", f"token strings need a word-list vocabulary; with encoding "
                          f"{tok.name!r} give text = \"…\" or token ids", "prompt", 0, "tokens")
    return key, value  # tokenized with room for the new tokens by `_encode`, once the settings are known


def _generate(t: dict, seed: int, w: Where) -> GenerationSettings:
    names = [s.name for s in declared.SETTINGS]  # the keys of [generate]
    check_keys(t, names, "generate", w, "generate")
    given = {key: t[key] for key in names if key in t}  # `stop = "x"` is one string: GenerationSettings takes it
    try:  # [model] seed is the draw's seed too, unless [generate] says otherwise
        settings = GenerationSettings(**{"seed": seed, **given})
    except SettingError as e:
        raise w.error(f"generate.{e.field}", e.problem, "generate", 0, e.field) from None
    return settings


def _encode(tok: Tokenizer, cfg: Config, prompt: tuple, settings: GenerationSettings, w: Where) -> Prompt:
    """The prompt as token ids that leave room in the context for the new tokens."""
    key, value = prompt
    try:
        return encode_prompt(tok, value, cfg.n_ctx, cfg.d_vocab, room=settings.max_new_tokens)
    except ContextOverflow as e:
        raise w.error("generate.max_new_tokens", f"{e.room} overflows the context: the prompt has {e.prompt_tokens} "
                      f"tokens and n_ctx is {e.n_ctx}, so at most {max(e.n_ctx - e.prompt_tokens, 0)} new tokens",
                      "generate", 0, "max_new_tokens") from None
    except TracerError as e:
        raise w.error(f"prompt.{key}", str(e).removeprefix("prompt: "), "prompt", 0, key) from None


def _notes(raw_list, w: Where) -> list[dict]:
    out = []
    for i, t in enumerate(tables(raw_list, "note", w)):
        kp = f"note[{i + 1}]"
        check_keys(t, NOTE_KEYS, kp, w, "note", i)
        text = t.get("text")
        if not isinstance(text, str) or not text.strip():
            raise w.error(f"{kp}.text", "expected a non-empty string", "note", i, "text")
        label = t.get("label", "")
        if not isinstance(label, str):
            raise w.error(f"{kp}.label", f"expected a string, got {type_name(label)}", "note", i, "label")
        step = t.get("step", 0)
        if not is_whole(step, 0):
            raise w.error(f"{kp}.step", f"expected a whole number ≥ 0, got {type_name(step)}", "note", i, "step")
        section = t.get("section", "")  # the walkthrough's section it explains ("layers"): the demo shows it there
        if not isinstance(section, str):
            raise w.error(f"{kp}.section", f"expected a string, got {type_name(section)}", "note", i, "section")
        out.append({"text": " ".join(text.split()), "label": label, "step": step, "section": section})
    return out
