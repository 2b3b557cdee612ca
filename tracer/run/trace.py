"""The recorded forward pass (`Trace`), a generation run (`Generation`), and their `.npz` file.

A `Trace` is one pass of the decoder: an ordered mapping of hook name → array (TransformerLens
names, no batch axis), the token ids it saw, and where the pass started (positions before
`start` came from the KV cache). A `Generation` is the prompt pass followed by one pass per
generated token; each pass carries its sampling draw under `sample.*` names.

File layout (`numpy.load(path, allow_pickle=False)` reads it in any numpy program):
  - `tokens`: int64 [n], the whole sequence (prompt, then generated tokens);
  - `meta`: a JSON string: format, version, tracer version, config, tokenizer, model, prompt,
    seed, settings, prompt_ids, generated_ids, token strings, and `steps` (start and length of
    every pass);
  - step 0 (the prompt pass): one array per recorded name, under the name itself;
  - step n ≥ 1 (the pass that reads generated token n-1): under `steps.{n}.{name}`.
So a plain trace (no generation) is exactly the hook names plus `tokens` and `meta`.

The file holds one plain array per name, as recorded (float32 in float32 models, float64 in
float64 ones): the [head, query_pos, key_pos] arrays keep their masked upper half (0 in
`hook_pattern`, -inf in `hook_attn_scores`; `hook_dots` has real values there), and a name that
aliases another in memory (`blocks.{l+1}.hook_resid_pre` is the same array as
`blocks.{l}.hook_resid_post`) is written under each name, so any numpy program reads it without
unpacking. In memory a recorded pass is smaller (`tracer.core.store.Store`): long causal arrays are
held as their lower half, and values the store can recompute (the scores from `hook_dots`, each
head's result from `hook_z` and W_O, and in long passes Q·K and the GELU) as recipes, rebuilt on
access; saving writes every array whole, one at a time.
Loading checks the file before it allocates anything from it: the metadata (a format version ≥ 1
this tracer reads, a config within `Config`'s limits, passes that fit the tokens), then every
entry's `.npy` header against the shape and kind of number its pass and config give (logits
[n, d_vocab], patterns [head, n, n], token ids whole numbers, …), then it reads the arrays one at a
time. Values that went NaN or infinite are what the model computed, not damage
(`tracer.run.overflow.non_finite` names the first). Loading refuses pickled objects without unpickling them. Core module: imports
numpy only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..core.config import Config
from ..errors import TracerError, near
from ..core import hooks
from ..formats.files import save_npz
from ..formats.reading import MAX_TEXT_BYTES, Npz, parse_json, read_npz
from .settings import GenerationSettings
from ..showing import shown_by
from ..tokenizers.table import saved_spec
from ..core.store import Store

FORMAT = "tracer-trace"
FORMAT_VERSION = 1
STEP_PREFIX = "steps."


@dataclass
class Trace(Mapping):
    """One forward pass: name → array in recording order, plus what it ran on."""

    arrays: dict
    tokens: np.ndarray  # [pos] ids of every position this pass could see
    config: Config
    token_strs: list = field(default_factory=list)  # text of each token in `tokens`
    meta: dict = field(default_factory=dict)  # model, tokenizer spec, prompt, seed, version
    start: int = 0  # first position computed by this pass; earlier ones came from the KV cache
    settings: GenerationSettings | None = None  # how the generation this pass belongs to ran (None: `Model.run`)
    tokenizer: object = field(default=None, repr=False, compare=False)  # the run's tokenizer (not in a file: its token table is)

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.arrays[name]
        except KeyError:
            raise KeyError(f"{name!r} was not recorded{near(name, self.arrays)}") from None

    def __iter__(self):
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)

    @property
    def n_new(self) -> int:
        """Positions this pass computed."""
        return len(self.tokens) - self.start

    def save(self, path) -> None:
        self.as_generation().save(path)

    def as_generation(self) -> "Generation":
        """This one pass as a generation of one pass (what a file or a walkthrough holds)."""
        return Generation(steps=[self], meta=dict(self.meta), settings=self.settings, tokenizer=self.tokenizer)

    def show(self, **options) -> None:
        """Print this pass's walkthrough (a notebook or a terminal): `show(token="B", section="attention")`."""
        self.as_generation().show(**options)

    def _repr_html_(self) -> str:  # Jupyter: a summary instead of a mapping's repr
        return self.as_generation()._repr_html_()

    @staticmethod
    def load(path) -> "Trace":
        return Generation.load(path).steps[0]


@dataclass
class Generation:
    """The prompt pass and one pass per generated token."""

    steps: list  # [Trace], step 0 is the prompt
    prompt_ids: list = field(default_factory=list)
    generated_ids: list = field(default_factory=list)
    text: str = ""  # the generated text
    meta: dict = field(default_factory=dict)  # where it came from: model, tokenizer, prompt, … (JSON)
    settings: GenerationSettings | None = None  # None for a single pass saved by `Trace.save`
    stopped: str | None = None  # why generation stopped: max_new_tokens, end_token or stop_string
    tokenizer: object = field(default=None, repr=False, compare=False)  # the run's tokenizer (not in a file: its token table is)

    def __post_init__(self):
        if not self.prompt_ids and self.steps:
            self.prompt_ids = [int(t) for t in self.steps[0].tokens]

    @property
    def trace(self) -> Trace:
        return self.steps[0]

    @property
    def tokens(self) -> list[int]:
        return list(self.prompt_ids) + list(self.generated_ids)

    def save(self, path) -> None:
        save_npz(path, to_arrays(self))

    def show(self, **options) -> None:
        """Print the walkthrough with the CLI's view options: `gen.show(token="B", layer="all",
        section="predict")` (see `tracer.render.notebook.show`)."""
        shown_by("show")(self, **options)

    def _repr_html_(self) -> str:  # Jupyter: the tokens, the prediction and the loop, not a repr
        return shown_by("html")(self)

    def __repr__(self) -> str:
        return (f"Generation({len(self.prompt_ids)} prompt tokens, {len(self.generated_ids)} generated "
                f"{self.text!r}, {len(self.steps)} passes)")

    @staticmethod
    def load(path) -> "Generation":
        """Read a trace file, every entry's header checked first (see the module docstring), then
        one array at a time, each held as a fresh recording would hold it when that loses nothing
        (`tracer.core.store`)."""
        with read_npz(path) as z:
            return read_trace(z, str(path))


def to_arrays(gen: Generation):
    """The file's entries as (name, array) pairs, made one at a time (see `save_npz`)."""
    first = gen.steps[0]
    tokens = np.asarray(gen.tokens, dtype=np.int64)
    token_strs = list(gen.steps[-1].token_strs)
    meta = {
        **_with_settings(gen),
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "config": first.config.to_dict(),
        "prompt_ids": [int(i) for i in gen.prompt_ids],
        "generated_ids": [int(i) for i in gen.generated_ids],
        "text": gen.text,
        "token_strs": token_strs,
        "steps": [{"start": int(s.start), "n_tokens": int(len(s.tokens))} for s in gen.steps],
        "step_meta": [{k: v for k, v in s.meta.items() if k not in gen.meta} for s in gen.steps],
    }
    if "tokenizer" in meta:  # a tokenizer read from a file is saved as its tokens' texts, never as the file's path
        meta["tokenizer"] = saved_spec(meta["tokenizer"], gen.tokenizer)
    yield "tokens", tokens
    yield "meta", np.array(json.dumps(meta))
    for n, step in enumerate(gen.steps):
        prefix = "" if n == 0 else f"{STEP_PREFIX}{n}."
        for name in step.arrays:
            yield prefix + name, np.asarray(step.arrays[name])


MODEL_META = ("model", "tokenizer", "seed", "trained", "tracer_version")  # what `Model.meta` writes


def _with_settings(gen: Generation) -> dict:
    """The generation's meta with its `settings` (and `stopped`) in their place in the file: after
    what describes the model, before the prompt and the rest."""
    if gen.settings is None:
        return dict(gen.meta)
    settings = {**gen.settings.to_dict(), "stopped": gen.stopped or "max_new_tokens"}
    first = {k: v for k, v in gen.meta.items() if k in MODEL_META}
    return {**first, "settings": settings, **{k: v for k, v in gen.meta.items() if k not in MODEL_META}}


def read_trace(z: Npz, where: str) -> Generation:
    """The generation an open trace file holds (see the module docstring for what is checked)."""
    meta = _read_meta(z, where)
    try:
        config = Config.from_dict(meta.pop("config"))
    except (KeyError, TypeError, AttributeError) as e:
        raise TracerError(f"{where}: damaged trace metadata (config: {type(e).__name__}: {e})") from None
    except TracerError as e:
        raise TracerError(f"{where}: {e}") from None
    h = z.header("tokens")
    if h.dtype.kind not in "iu" or len(h.shape) != 1 or not 1 <= h.shape[0] <= config.n_ctx:
        raise TracerError(f"{where}: 'tokens' must be 1 to n_ctx ({config.n_ctx:,}) whole numbers, "
                          f"got {list(h.shape)} of {h.dtype}")
    tokens = z.read("tokens")
    try:
        steps_info = _passes(meta.pop("steps"), len(tokens))
        step_meta = meta.pop("step_meta", [{} for _ in steps_info])
        token_strs = meta.pop("token_strs")
        prompt_ids = meta.pop("prompt_ids")
        generated_ids = meta.pop("generated_ids")
        text = meta.pop("text", "")
        settings, stopped = None, None
        if "settings" in meta:
            try:
                settings, stopped = GenerationSettings.from_dict(meta.pop("settings"))
            except TracerError as e:
                raise TracerError(f"{where}: damaged trace metadata ({e})") from None
        if not isinstance(step_meta, list) or len(step_meta) != len(steps_info) or \
                not all(isinstance(m, dict) for m in step_meta):
            raise ValueError("'step_meta' is not one table per pass")
        names = [n for n in z.names if n not in ("meta", "tokens")]
        placed = [(name, *_entry(name, z, config, steps_info, where)) for name in names]  # every header, before any read
        by_step = [Store(config) for _ in steps_info]
        for name, n, leaf in placed:
            by_step[n].put(leaf, z.read(name), trusted=False)  # held as a recording would hold it, when nothing is lost
        steps = []
        for n, ((start, k), smeta) in enumerate(zip(steps_info, step_meta)):
            steps.append(Trace(by_step[n], tokens[:k], config, list(token_strs[:k]), {**meta, **smeta}, start, settings))
        return Generation(steps, list(prompt_ids), list(generated_ids), text, meta, settings, stopped)
    except TracerError:
        raise
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
        raise TracerError(f"{where}: damaged trace metadata ({type(e).__name__}: {e})") from None


def _read_meta(z: Npz, where: str) -> dict:
    """The 'meta' entry: a JSON object naming this format and a version this tracer reads."""
    if "meta" not in z.names:
        raise TracerError(f"{where}: not a tracer trace (no 'meta' entry)")
    h = z.header("meta")
    if h.shape != () or h.dtype.kind not in "US" or h.nbytes > 4 * MAX_TEXT_BYTES:
        raise TracerError(f"{where}: its 'meta' entry is not JSON (a {list(h.shape)} array of {h.dtype})")
    meta = parse_json(str(z.read("meta")), f"{where}: its 'meta' entry is not JSON")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise TracerError(f"{where}: not a tracer trace ('meta' does not say format {FORMAT!r})")
    version = meta.get("version")
    if type(version) is not int or version < 1:
        raise TracerError(f"{where}: trace format version {json.dumps(version)} is not a version (a whole number ≥ 1); "
                          f"the file is damaged")
    if version > FORMAT_VERSION:
        raise TracerError(
            f"{where}: trace format version {version!r} is newer than this tracer reads ({FORMAT_VERSION}); upgrade tracer"
        )
    if "tokens" not in z.names:
        raise TracerError(f"{where}: not a tracer trace (no 'tokens' entry)")
    return meta


def _passes(info, n_tokens: int) -> list[tuple[int, int]]:
    """(start, tokens seen) of every pass: at least one, each seeing more of the n_tokens tokens than
    the pass before (so there are at most n_tokens), from a start inside them."""
    if not isinstance(info, list) or not info or len(info) > n_tokens:
        raise ValueError(f"'steps' is not a list of at most {n_tokens} passes")
    out = []
    for i, step in enumerate(info):
        start, k = step["start"], step["n_tokens"]
        seen_before = out[-1][1] if out else 0
        if type(start) is not int or type(k) is not int or not (0 <= start < k <= n_tokens and k > seen_before):
            raise ValueError(f"pass {i} starts at {start!r} and sees {k!r} of the {n_tokens} tokens")
        out.append((start, k))
    return out


STEP_KEY = re.compile(r"steps\.([1-9][0-9]{0,8})\.(.+)")
LAYER_KEY = re.compile(r"blocks\.([0-9]{1,9})\.")


def _entry(name: str, z: Npz, cfg: Config, steps: list, where: str) -> tuple[int, str]:
    """(pass, recorded name) of a file entry, once its header fits them: a pass the metadata lists,
    a layer the config has, the shape `hooks.shape` gives, whole numbers where ids are kept."""
    n, leaf = 0, name
    if name.startswith(STEP_PREFIX):
        m = STEP_KEY.fullmatch(name)
        if m is None or int(m.group(1)) >= len(steps):
            raise TracerError(f"{where}: damaged trace: {name!r} names no pass of this trace (passes 1 to "
                              f"{len(steps) - 1} are 'steps.N.NAME'; the first pass's names have no prefix)")
        n, leaf = int(m.group(1)), m.group(2)
    layer = LAYER_KEY.match(leaf)
    if layer and int(layer.group(1)) >= cfg.n_layers:
        raise TracerError(f"{where}: damaged trace: {name!r} is in layer {layer.group(1)}, but its config has "
                          f"{cfg.n_layers} layer{'s' if cfg.n_layers != 1 else ''}")
    h = z.header(name)
    start, k = steps[n]
    lens = STEP_PREFIX + f"{n}.lens.positions" if n else "lens.positions"
    n_lens = z.header(lens).shape[0] if lens in z.names and len(z.header(lens).shape) == 1 else None
    if leaf == "lens.positions":  # which of the pass's positions the lens covers: some of them
        kinds, ok, need = "iu", len(h.shape) == 1 and h.shape[0] <= k, f"[≤ {k}]"
    else:
        want = hooks.shape(leaf, cfg, k - start, k, n_lens)  # None: a name tracer does not record
        known = hooks.find(leaf)
        kinds = "iu" if known and known.whole else "f" if want is not None else "biuf"
        ok, need = want is None or tuple(h.shape) == want, str(list(want or ()))
    if h.dtype.kind not in kinds:
        what = "whole numbers" if kinds == "iu" else "floating-point numbers" if kinds == "f" else "numbers"
        raise TracerError(f"{where}: damaged trace: {name!r} holds {h.dtype}, not {what}")
    if not ok:
        raise TracerError(f"{where}: damaged trace: {name!r} has shape {list(h.shape)}, its config needs {need}")
    return n, leaf


# --------------------------------------------------------------------------- a damaged file


_META_TYPES = {  # what `generate` writes into a trace's metadata, by key (`settings` are checked on loading)
    "model": str, "prompt": str, "text": str, "trained": bool, "seed": (int, type(None)),
    "tokenizer": (dict, str), "truncated": dict, "training": dict, "weights": str, "verify_cache": dict,
}
_NUMBER, _WHOLE, _TEXT, _FLAG = "a number", "a whole number", "text", "true or false"
_VERIFY_CACHE = {  # what `generate.verify_cache` writes, by key: one kind, or a list of one kind
    "compared": _TEXT, "dtype": _TEXT, "steps": _WHOLE, "per_step_max_abs_diff": [_NUMBER], "max_abs_diff": _NUMBER,
    "tolerance": _NUMBER, "scale": _NUMBER, "bound": _NUMBER, "generated_cache": [_WHOLE],
    "generated_no_cache": [_WHOLE], "tokens_equal": _FLAG, "ok": _FLAG,
}


def _is(kind: str, v) -> bool:
    """A value of a trace's metadata is of `kind` (NaN and ∞ are numbers: an overflowing run's)."""
    if kind == _FLAG:
        return isinstance(v, bool)
    if isinstance(v, bool):
        return False
    if kind == _NUMBER:
        return isinstance(v, (int, float))
    if kind == _WHOLE:
        return isinstance(v, int)
    return isinstance(v, str)


def _verify_cache_damage(result: dict) -> str | None:
    for key, kind in _VERIFY_CACHE.items():
        if key not in result:
            continue
        v, each = result[key], kind[0] if isinstance(kind, list) else None
        if each is not None and not (isinstance(v, list) and all(_is(each, x) for x in v)):
            return f"meta: verify_cache.{key} is not a list of {each.removeprefix('a ')}s"
        if each is None and not _is(kind, v):
            return f"meta: verify_cache.{key} is not {kind}"
    return None


def _intervention_damage(meta: dict, n_vocab: int) -> str | None:
    """What is wrong with --ablate's and --attribute's records in a trace's meta (None: sound or absent)."""
    def token(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n_vocab

    def prob(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    ab = meta.get("ablation")
    if ab is not None:
        clean, changed = (ab.get("clean"), ab.get("changed")) if isinstance(ab, dict) else (None, None)
        if not (isinstance(clean, dict) and isinstance(changed, dict) and token(clean.get("top_id"))
                and token(changed.get("top_id")) and all(prob(d.get(k)) for d, k in
                ((clean, "p_top"), (changed, "p_top"), (changed, "p_clean_top")))
                and isinstance(ab.get("ablated", []), list)
                and isinstance(ab.get("heads", []), list) and all(
                    isinstance(c, list) and len(c) == 2 and all(token(x) for x in c) for c in ab.get("heads", []))):
            return "meta: 'ablation' is not what --ablate records ({ablated, heads, clean, changed})"
    hooked = meta.get("hooked")
    if hooked is not None and not (isinstance(hooked, list) and all(isinstance(n, str) for n in hooked)):
        return "meta: 'hooked' is not a list of the hook names a run changed"
    att = meta.get("attribution")
    if att is not None:
        per = att.get("per_position") if isinstance(att, dict) else None
        if not (isinstance(att, dict) and token(att.get("target_id")) and isinstance(per, list) and all(map(prob, per))):
            return "meta: 'attribution' is not what --attribute records ({target_id, per_position})"
    return None


def damage(gen: "Generation", n_vocab: int) -> str | None:
    """What is wrong with a loaded trace (metadata of the wrong type, a token id out of range), or
    None when it looks sound; shapes and kinds of number were checked when it was loaded, and NaN
    or ∞ in its values is arithmetic, not damage. `tracer show` asks only after rendering failed,
    so that a bug of ours on a sound file is still reported as one."""
    if not gen.steps:
        return "it holds no passes ('steps' is empty)"
    for key, kinds in _META_TYPES.items():
        for where, meta in [("meta", gen.meta)] + [(f"step {n} meta", s.meta) for n, s in enumerate(gen.steps)]:
            if key in meta and meta[key] is not None and not isinstance(meta[key], kinds):
                return f"{where}: {key!r} is {type(meta[key]).__name__}"
    if isinstance(gen.meta.get("verify_cache"), dict) and (wrong := _verify_cache_damage(gen.meta["verify_cache"])):
        return wrong
    if (wrong := _intervention_damage(gen.meta, n_vocab)) is not None:
        return wrong
    ids = [gen.prompt_ids, gen.generated_ids]
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for part in ids for i in part):
        return "prompt_ids / generated_ids hold something other than token ids"
    if not gen.prompt_ids or list(gen.prompt_ids) != [int(t) for t in gen.steps[0].tokens]:
        return "prompt_ids do not match the tokens of the first pass"
    cfg = gen.steps[0].config
    n_vocab = min(cfg.d_vocab, n_vocab)
    for n, step in enumerate(gen.steps):
        where_step = "the first pass" if n == 0 else f"pass {n}"
        bad = [int(t) for t in np.asarray(step.tokens).ravel() if not 0 <= int(t) < n_vocab]
        if bad:
            return f"token id {bad[0]} is outside the vocabulary 0..{n_vocab - 1}"
        if not 0 <= step.start < max(len(step.tokens), 1) or not step.tokens.size:
            return f"{where_step} starts at {step.start} but sees {len(step.tokens)} tokens"
        if len(step.token_strs) != len(step.tokens) or not all(isinstance(t, str) for t in step.token_strs):
            return f"{where_step}: token_strs do not match its {len(step.tokens)} tokens"
        lens = np.asarray(step.arrays.get("lens.positions", np.zeros(0, dtype=np.int64)))
        if lens.ndim != 1 or lens.dtype.kind not in "iu" or not ((lens >= 0) & (lens < len(step.tokens))).all():
            return f"{where_step}: 'lens.positions' is not a list of its positions"
        for name in _TOKEN_IDS:  # the loader checked shapes and kinds; ids must also name tokens
            arr = np.asarray(step.arrays[name]) if name in step.arrays else None
            if arr is not None and arr.size and not ((arr >= 0) & (arr < n_vocab)).all():
                where = name if n == 0 else f"steps.{n}.{name}"
                return f"{where!r} holds a token id outside the vocabulary 0..{n_vocab - 1}"
    return None


_TOKEN_IDS = tuple(name for name, hook in hooks.TOP.items() if hook.ids)  # whole numbers that name tokens
