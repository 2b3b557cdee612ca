"""The recorded forward pass (`Trace`), a generation of one or many sequences (`Generation`), and
their `.npz` file.

A `Trace` is one pass of the decoder: an ordered mapping of hook name → array (TransformerLens
names, no batch axis), the token ids it saw, where it started (positions before `start` came from
the KV cache), the `row` (sequence) it extends, the `model` that ran it (`TARGET`, or `DRAFT`:
speculative decoding's proposer), and `parent`, the row whose sequence it continued when that is
another row's (a beam taking over another's prefix). A `Generation` keeps rows from the start, as
nanochat's `Engine` does: every pass in the order run (`passes`) and every sequence made (`rows`:
its tokens, why it stopped, a beam's score). The plain loop, greedy or sampled, is one row of
target passes: the prompt pass, then one pass per generated token. `steps` are the target passes
that made row 0's sequence (`lineage(0)`: all of them for the plain loop); `generated_ids`, `text`
and `stopped` are row 0's. Each pass carries its sampling draw under `sample.*` names.

File layout (`numpy.load(path, allow_pickle=False)` reads it in any numpy program):
  - `tokens`: int64 [n], row 0's whole sequence (prompt, then generated tokens);
  - `meta`: a JSON string: format, version, tracer version, config, tokenizer, model, prompt, seed,
    settings (with row 0's `stopped`), prompt_ids, generated_ids and text (row 0's), token_strs (of
    row 0's last pass), `steps` (a table per pass, in the order run), `step_meta` (what each pass's
    metadata adds to the file's);
  - pass 0 (row 0's prompt pass): one array per recorded name, under the name; pass n ≥ 1: `steps.{n}.{name}`.
So a plain trace (no generation) is exactly the hook names plus `tokens` and `meta`.
Version 1 holds one row of target passes, each reading more of `tokens` than the one before: each
`steps` table is {start, n_tokens}, the pass having read the first n_tokens of `tokens`. Version 2
holds several rows or a draft model's passes. It adds to each `steps` table `row` (0-based), `model`
("target" or "draft"), `parent` (a row, or null), and, when the pass did not read the first n_tokens
of `tokens` (another row's sequence, or a draft's tokens later rejected), its own `ids` and
`token_strs`; `rows`, a table per sequence, row 0 first: {generated_ids, text, stopped, score}; and
`draft`: {config}, the draft model's, when a pass is the draft's (its entries' shapes follow it).
A generation is written at the lowest version that holds it, so a plain run's file is the version 1
file earlier tracers wrote and read; this tracer reads both.

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
this tracer reads, configs within `Config`'s limits, passes that fit the tokens and the rows), then
every entry's `.npy` header against the shape and kind of number its pass and config give (logits
[n, d_vocab], patterns [head, n, n], token ids whole numbers, …), then it reads the arrays one at a
time. NaN and ∞ in the values are what the model computed, not damage (`tracer.run.overflow`
names the first); what else can be wrong with a loaded trace is `tracer.run.damage`'s. Loading
refuses pickled objects without unpickling them. Core module: imports numpy only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

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
FORMAT_VERSION = 2  # the newest version written and read (a plain run is still written as version 1)
STEP_PREFIX = "steps."
TARGET, DRAFT = "target", "draft"  # the model that ran a pass: the one generating, or speculative decoding's proposer
PRUNED, KEPT, FINISHED = 0, 1, 2  # a beam's continuation (`beam.fate`): pruned, a beam goes on with it, it ended a sequence
MAX_ROWS = 1024  # sequences a file may hold
MAX_PASSES = 100_000  # passes a version 2 file may list (version 1: at most one per token)


@dataclass
class Trace(Mapping):
    """One forward pass: name → array in recording order, plus what it ran on and where it belongs."""

    arrays: dict
    tokens: np.ndarray  # [pos] ids of every position this pass could see
    config: Config
    token_strs: list = field(default_factory=list)  # text of each token in `tokens`
    meta: dict = field(default_factory=dict)  # model, tokenizer spec, prompt, seed, version
    start: int = 0  # first position computed by this pass; earlier ones came from the KV cache
    settings: GenerationSettings = field(default_factory=lambda: GenerationSettings(max_new_tokens=0))  # how the
    # generation this pass belongs to ran; a single pass (`Model.run`): greedy, no new token
    row: int = 0  # the sequence of its generation this pass extends
    model: str = TARGET  # which model ran it: TARGET, or DRAFT
    parent: int | None = None  # the row whose sequence (and KV cache) it continued, when not its own row's
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
        return Generation([self], meta=dict(self.meta), settings=self.settings, tokenizer=self.tokenizer)

    def show(self, **options) -> None:
        """Print this pass's walkthrough (a notebook or a terminal): `show(token="B", section="attention")`."""
        self.as_generation().show(**options)

    def _repr_html_(self) -> str:  # Jupyter: a summary instead of a mapping's repr
        return self.as_generation()._repr_html_()

    @staticmethod
    def load(path) -> "Trace":
        return Generation.load(path).steps[0]


@dataclass
class Row:
    """One sequence of a generation: the tokens it generated after the prompt, their text, why it
    stopped, and its score (a beam's; None otherwise)."""

    generated_ids: list = field(default_factory=list)
    text: str = ""
    stopped: str | None = None  # max_new_tokens, end_token, stop_string (None: unsaid)
    score: float | None = None

    to_dict = lambda self: {"generated_ids": [int(i) for i in self.generated_ids], "text": self.text,  # noqa: E731
                            "stopped": self.stopped, "score": None if self.score is None else float(self.score)}


class Generation:
    """Every pass of a generation run, in the order run, and the sequences (rows) they made.
    `Generation(passes, prompt_ids, generated_ids, text, meta, settings, stopped)` is the plain loop's one row;
    `rows=[Row, …]` (row 0 first) gives several, and then `generated_ids`, `text` and `stopped` are row 0's."""

    def __init__(self, passes=(), prompt_ids=(), generated_ids=(), text: str = "", meta: dict | None = None,
                 settings: GenerationSettings | None = None, stopped: str | None = None, *, rows=None, tokenizer=None):
        self.passes: list[Trace] = list(passes)  # every pass, of every row and model, in the order run
        self.prompt_ids = list(prompt_ids) or ([int(t) for t in self.passes[0].tokens] if self.passes else [])
        self.meta = {} if meta is None else meta  # where it came from: model, tokenizer, prompt, … (JSON)
        # never None: by default its first pass's (greedy, no new token, as a single pass's)
        self.settings = settings if settings is not None else (
            self.passes[0].settings if self.passes else GenerationSettings(max_new_tokens=0))
        self.rows: list[Row] = list(rows) if rows is not None else [Row(list(generated_ids), text, stopped)]
        self.steps: list[Trace] = list(self.passes) if self.plain else self.lineage(0)  # row 0's target passes
        self.tokenizer = tokenizer  # the run's tokenizer (not in a file: its token table is)

    generated_ids = property(lambda self: self.rows[0].generated_ids, doc="Row 0's generated tokens.")
    text = property(lambda self: self.rows[0].text, doc="Row 0's generated text.")
    stopped = property(lambda self: self.rows[0].stopped, doc="Why row 0 stopped: max_new_tokens, end_token or stop_string.")

    @property
    def plain(self) -> bool:
        """One row of the target model's passes: the greedy or sampled loop (what version 1 of the file holds)."""
        return len(self.rows) == 1 and self.rows[0].score is None and all(
            p.row == 0 and p.model == TARGET and p.parent is None for p in self.passes)

    trace = property(lambda self: self.steps[0], doc="Row 0's first pass (the prompt's).")
    tokens = property(lambda self: list(self.prompt_ids) + list(self.generated_ids), doc="Row 0's whole sequence.")

    def row_tokens(self, row: int) -> list[int]:
        """Row `row`'s whole sequence: the prompt, then the tokens it generated."""
        return list(self.prompt_ids) + list(self.rows[row].generated_ids)

    beams = property(lambda self: bool(self.passes) and "beam.tokens" in self.passes[0], doc="A beam search's (run.beams).")

    def lineage(self, row: int = 0, model: str = TARGET) -> list[Trace]:
        """The passes of `model` that made row `row`'s sequence, first to last: its last pass, then
        the pass that one continued (the latest earlier pass, seeing fewer tokens, of the same row or
        of its `parent`), and so on back to the prompt pass. A beam search's: the passes whose tokens begin its sequence."""
        if self.beams:
            seq = self.row_tokens(row)
            return [p for p in self.passes if p.model == model and list(p.tokens) == seq[:len(p.tokens)] != seq]
        if len(self.rows) == 1:  # one sequence (a draft's trial tokens may shorten the next pass): each pass of the model
            return [p for p in self.passes if p.model == model]
        chain, want, seen = [], row, None
        for p in reversed(self.passes):
            if p.model == model and p.row == want and (seen is None or len(p.tokens) < seen):
                chain.append(p)
                want, seen = (p.row if p.parent is None else p.parent), len(p.tokens)
        return chain[::-1]

    def kept(self, p: Trace) -> bool:
        """Whether a row's final sequence goes on from pass `p`'s tokens with the token it drew: appended,
        not a pruned beam's or a rejected draft's."""
        if self.beams:  # a beam's pass: some finished sequence goes on from its tokens
            return any(q is p for r in range(len(self.rows)) for q in self.lineage(r, p.model))
        if "sample.token" not in p:
            return False
        n, token = len(p.tokens), int(p["sample.token"])  # a verifying pass draws after the drafts it accepted:
        n -= len(p["verify.drafted"]) - int(p["verify.accepted"]) if "verify.accepted" in p else 0
        return any(n < len(seq) and int(seq[n]) == token and np.array_equal(seq[:n], p.tokens[:n])
                   for seq in map(self.row_tokens, range(len(self.rows))))

    def save(self, path) -> None:
        save_npz(path, to_arrays(self))

    def show(self, **options) -> None:
        """Print the walkthrough with the CLI's view options: `gen.show(token="B", layer="all",
        section="predict")` (see `tracer.render.notebook.show`)."""
        shown_by("show")(self, **options)

    def _repr_html_(self) -> str:  # Jupyter: the tokens, the prediction and the loop, not a repr
        return shown_by("html")(self)

    def __repr__(self) -> str:
        n = len(self.rows)
        more = "" if self.plain else f" ({sum(p.model == DRAFT for p in self.passes)} the draft's), {n} row{'s' * (n != 1)}"
        return (f"Generation({len(self.prompt_ids)} prompt tokens, {len(self.generated_ids)} generated "
                f"{self.text!r}, {len(self.passes)} passes{more})")

    @staticmethod
    def load(path) -> "Generation":
        """Read a trace file, every entry's header checked first (see the module docstring), then
        one array at a time, each held as a fresh recording would hold it when that loses nothing
        (`tracer.core.store`)."""
        with read_npz(path) as z:
            return read_trace(z, str(path))


# --------------------------------------------------------------------------- writing


def file_version(gen: Generation) -> int:
    """1 when version 1 holds `gen` (one row of target passes, each reading more of `tokens`), else 2."""
    if not gen.plain:
        return 2
    tokens, seen = np.asarray(gen.tokens, dtype=np.int64), 0
    for p in gen.passes:
        if not seen < len(p.tokens) <= len(tokens) or not np.array_equal(p.tokens, tokens[:len(p.tokens)]):
            return 2
        seen = len(p.tokens)
    return 1


def to_arrays(gen: Generation):
    """The file's entries as (name, array) pairs, made one at a time (see `save_npz`)."""
    first = gen.passes[0]
    if (first.row, first.model, first.start) != (0, TARGET, 0):
        raise TracerError("trace: a generation's first pass must be row 0's prompt pass (the target model's, from position 0)")
    version = file_version(gen)
    tokens = np.asarray(gen.tokens, dtype=np.int64)
    token_strs = list(gen.steps[-1].token_strs)
    meta = {
        **_with_settings(gen), "format": FORMAT, "version": version, "config": first.config.to_dict(),
        "prompt_ids": [int(i) for i in gen.prompt_ids], "generated_ids": [int(i) for i in gen.generated_ids],
        "text": gen.text, "token_strs": token_strs,
        "steps": [_pass_table(s, tokens, token_strs, version) for s in gen.passes],
        "step_meta": [{k: v for k, v in s.meta.items() if k not in gen.meta or (version > 1 and gen.meta[k] != v)}
                      for s in gen.passes],
    }
    if version > 1:
        meta["rows"] = [r.to_dict() for r in gen.rows]
        drafts = {json.dumps(p.config.to_dict()) for p in gen.passes if p.model == DRAFT}
        if len(drafts) > 1:
            raise TracerError("trace: the draft passes of one generation are of one draft model")
        if drafts:
            meta["draft"] = {"config": json.loads(drafts.pop())}
    for m in [meta, *meta["step_meta"]]:  # a tokenizer read from a file: its tokens' texts (a draft's: its name), no path
        if "tokenizer" in m:
            m["tokenizer"] = saved_spec(m["tokenizer"], gen.tokenizer if m is meta else None)
    yield "tokens", tokens
    yield "meta", np.array(json.dumps(meta))
    for n, step in enumerate(gen.passes):
        prefix = "" if n == 0 else f"{STEP_PREFIX}{n}."
        for name in step.arrays:
            yield prefix + name, np.asarray(step.arrays[name])


def _pass_table(p: Trace, tokens: np.ndarray, token_strs: list, version: int) -> dict:
    """A pass's table in `steps`: where it starts and how many tokens it saw; in version 2 also its
    row, model and parent, and its own tokens when they are not the first of the file's."""
    k = len(p.tokens)
    out = {"start": int(p.start), "n_tokens": int(k)}
    if version == 1:
        return out
    out.update(row=int(p.row), model=p.model, parent=None if p.parent is None else int(p.parent))
    if not (k <= len(token_strs) and np.array_equal(p.tokens, tokens[:k]) and list(p.token_strs) == token_strs[:k]):
        out.update(ids=[int(i) for i in p.tokens], token_strs=list(p.token_strs))
    return out


MODEL_META = ("model", "tokenizer", "seed", "trained", "tracer_version")  # what `Model.meta` writes


def _with_settings(gen: Generation) -> dict:
    """The generation's meta with its `settings` (and `stopped`) in their place in the file: after
    what describes the model, before the prompt and the rest."""
    settings = {**gen.settings.to_dict(quiet=True), "stopped": gen.stopped or "max_new_tokens"}
    first = {k: v for k, v in gen.meta.items() if k in MODEL_META}
    return {**first, "settings": settings, **{k: v for k, v in gen.meta.items() if k not in MODEL_META}}


# --------------------------------------------------------------------------- reading


class Pass(NamedTuple):
    """A pass as the file's `steps` lists it, checked; `ids`, `strs` None: the first k of `tokens`."""

    start: int
    k: int  # tokens seen
    config: Config
    row: int = 0
    model: str = TARGET
    parent: int | None = None
    ids: np.ndarray | None = None
    strs: list | None = None


def read_trace(z: Npz, where: str) -> Generation:
    """The generation an open trace file holds (see the module docstring for what is checked)."""
    meta = _read_meta(z, where)
    version = meta["version"]
    config = _config(meta, where, "config")
    h = z.header("tokens")
    if h.dtype.kind not in "iu" or len(h.shape) != 1 or not 1 <= h.shape[0] <= config.n_ctx:
        raise TracerError(f"{where}: 'tokens' must be 1 to n_ctx ({config.n_ctx:,}) whole numbers, "
                          f"got {list(h.shape)} of {h.dtype}")
    tokens = z.read("tokens")
    try:
        rows = _rows(meta.pop("rows")) if version > 1 else None
        draft = meta.pop("draft", None) if version > 1 else None
        draft = _config(draft, where, "draft config") if draft is not None else None
        info = (_passes(meta.pop("steps"), len(tokens), config) if rows is None else
                _passes_v2(meta.pop("steps"), len(tokens), config, draft, len(rows)))
        step_meta = meta.pop("step_meta", [{} for _ in info])
        token_strs = meta.pop("token_strs")
        prompt_ids = meta.pop("prompt_ids")
        generated_ids = meta.pop("generated_ids")
        text = meta.pop("text", "")
        settings, stopped = GenerationSettings(max_new_tokens=len(generated_ids)), None  # a file written without
        if "settings" in meta:  # settings (a single pass, before every pass recorded them): greedy, what it generated
            try:
                settings, stopped = GenerationSettings.from_dict(meta.pop("settings"))
            except TracerError as e:
                raise TracerError(f"{where}: damaged trace metadata ({e})") from None
        if not isinstance(step_meta, list) or len(step_meta) != len(info) or \
                not all(isinstance(m, dict) for m in step_meta):
            raise ValueError("'step_meta' is not one table per pass")
        if rows is not None and (rows[0].generated_ids != generated_ids or rows[0].text != text):
            raise ValueError("row 0 is not the generated_ids and text the file names")
        names = [n for n in z.names if n not in ("meta", "tokens")]
        placed = [(name, *_entry(name, z, info, where)) for name in names]  # every header, before any read
        by_step = [Store(p.config) for p in info]
        for name, n, leaf in placed:
            by_step[n].put(leaf, z.read(name), trusted=False)  # held as a recording would hold it, when nothing is lost
        passes = [Trace(by_step[n], tokens[:p.k] if p.ids is None else p.ids, p.config,
                        list(token_strs[:p.k]) if p.strs is None else p.strs, {**meta, **smeta}, p.start, settings,
                        p.row, p.model, p.parent) for n, (p, smeta) in enumerate(zip(info, step_meta))]
        if rows is None:
            return Generation(passes, list(prompt_ids), list(generated_ids), text, meta, settings, stopped)
        return Generation(passes, list(prompt_ids), meta=meta, settings=settings, rows=rows)
    except TracerError:
        raise
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
        raise TracerError(f"{where}: damaged trace metadata ({type(e).__name__}: {e})") from None


def _config(table, where: str, what: str) -> Config:
    """The config under `table`'s "config" key (the file's meta, or its `draft`)."""
    try:
        return Config.from_dict(table.pop("config"))
    except (KeyError, TypeError, AttributeError) as e:
        raise TracerError(f"{where}: damaged trace metadata ({what}: {type(e).__name__}: {e})") from None
    except TracerError as e:
        raise TracerError(f"{where}: {e}") from None


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


def _passes(info, n_tokens: int, config: Config) -> list[Pass]:
    """Version 1: (start, tokens seen) of every pass: at least one, each seeing more of the n_tokens
    tokens than the pass before (so there are at most n_tokens), from a start inside them."""
    if not isinstance(info, list) or not info or len(info) > n_tokens:
        raise ValueError(f"'steps' is not a list of at most {n_tokens} passes")
    out = []
    for i, step in enumerate(info):
        start, k = step["start"], step["n_tokens"]
        seen_before = out[-1].k if out else 0
        if type(start) is not int or type(k) is not int or not (0 <= start < k <= n_tokens and k > seen_before):
            raise ValueError(f"pass {i} starts at {start!r} and sees {k!r} of the {n_tokens} tokens")
        out.append(Pass(start, k, config))
    return out


def _passes_v2(info, n_tokens: int, config: Config, draft: Config | None, n_rows: int) -> list[Pass]:
    """Version 2: every pass's start, tokens seen, row, model and parent; its own tokens when listed.
    The first is row 0's prompt pass; each sees 1 to n_ctx tokens of its model, from a start inside them."""
    if not isinstance(info, list) or not 1 <= len(info) <= MAX_PASSES:
        raise ValueError(f"'steps' is not a list of 1 to {MAX_PASSES:,} passes")
    out = []
    for i, step in enumerate(info):
        start, k, row, model, parent = (step[key] for key in ("start", "n_tokens", "row", "model", "parent"))
        cfg = {TARGET: config, DRAFT: draft}.get(model) if isinstance(model, str) else None
        if cfg is None:
            raise ValueError(f"pass {i}: model {model!r} is not 'target'{' or draft' if draft else ''}")
        if not (type(row) is int and 0 <= row < n_rows and (parent is None or type(parent) is int and 0 <= parent < n_rows)):
            raise ValueError(f"pass {i}: row {row!r} or parent {parent!r} is not one of the {n_rows} rows")
        ids, strs = step.get("ids"), step.get("token_strs")
        if type(start) is not int or type(k) is not int or not 0 <= start < k <= (n_tokens if ids is None else cfg.n_ctx):
            raise ValueError(f"pass {i} starts at {start!r} and sees {k!r} tokens")
        if ids is not None:
            if not (isinstance(ids, list) and len(ids) == k and all(type(t) is int and 0 <= t < cfg.d_vocab for t in ids)):
                raise ValueError(f"pass {i}: 'ids' is not {k} token ids of its model's {cfg.d_vocab:,}")
            if not (isinstance(strs, list) and len(strs) == k and all(isinstance(s, str) for s in strs)):
                raise ValueError(f"pass {i}: 'token_strs' is not the text of its {k} tokens")
            ids = np.asarray(ids, dtype=np.int64)
        if i == 0 and (row, model, start) != (0, TARGET, 0):
            raise ValueError("pass 0 is not row 0's prompt pass (the target model's, from position 0)")
        out.append(Pass(start, k, cfg, row, model, parent, ids, strs if ids is not None else None))
    return out


def _rows(info) -> list[Row]:
    """Version 2's `rows`: 1 to MAX_ROWS tables of {generated_ids, text, stopped, score}."""
    if not isinstance(info, list) or not 1 <= len(info) <= MAX_ROWS:
        raise ValueError(f"'rows' is not a list of 1 to {MAX_ROWS:,} rows")
    rows = [Row(r["generated_ids"], r["text"], r["stopped"], r["score"]) for r in info]
    for i, r in enumerate(rows):
        if not (isinstance(r.generated_ids, list) and all(type(t) is int for t in r.generated_ids)
                and isinstance(r.text, str) and (r.stopped is None or isinstance(r.stopped, str))
                and (r.score is None or type(r.score) in (int, float))):
            raise ValueError(f"row {i} is not {{generated_ids, text, stopped, score}}")
    return rows


RUN_LENGTHS = ("lens.positions", "beam.tokens", "verify.drafted")  # entries whose length other entries' shapes hold
STEP_KEY = re.compile(r"steps\.([1-9][0-9]{0,8})\.(.+)")
LAYER_KEY = re.compile(r"blocks\.([0-9]{1,9})\.")


def _entry(name: str, z: Npz, passes: list[Pass], where: str) -> tuple[int, str]:
    """(pass, recorded name) of a file entry, once its header fits them: a pass the metadata lists,
    a layer its model's config has, the shape `hooks.shape` gives, whole numbers where ids are kept."""
    n, leaf = 0, name
    if name.startswith(STEP_PREFIX):
        m = STEP_KEY.fullmatch(name)
        if m is None or int(m.group(1)) >= len(passes):
            raise TracerError(f"{where}: damaged trace: {name!r} names no pass of this trace (passes 1 to "
                              f"{len(passes) - 1} are 'steps.N.NAME'; the first pass's names have no prefix)")
        n, leaf = int(m.group(1)), m.group(2)
    start, k, cfg = passes[n][:3]
    layer = LAYER_KEY.match(leaf)
    if layer and int(layer.group(1)) >= cfg.n_layers:
        raise TracerError(f"{where}: damaged trace: {name!r} is in layer {layer.group(1)}, but its config has "
                          f"{cfg.n_layers} layer{'s' if cfg.n_layers != 1 else ''}")
    h = z.header(name)
    runs = [z.header(e).shape[0] if e in z.names and len(z.header(e).shape) == 1 else None
            for e in ((f"{STEP_PREFIX}{n}." if n else "") + x for x in RUN_LENGTHS)]
    if leaf in RUN_LENGTHS:  # which positions the lens covers, a beam's continuations, the drafted tokens: some of
        most = {"lens.positions": k, "beam.tokens": cfg.d_vocab, "verify.drafted": cfg.n_ctx}[leaf]  # these
        kinds, ok, need = "iu", len(h.shape) == 1 and h.shape[0] <= most, f"[≤ {most}]"
    else:
        want = hooks.shape(leaf, cfg, k - start, k, *runs)  # None: a name tracer does not record
        known = hooks.find(leaf)
        kinds = "iu" if known and known.whole else "f" if want is not None else "biuf"
        ok, need = want is None or tuple(h.shape) == want, str(list(want or ()))
    if h.dtype.kind not in kinds:
        what = "whole numbers" if kinds == "iu" else "floating-point numbers" if kinds == "f" else "numbers"
        raise TracerError(f"{where}: damaged trace: {name!r} holds {h.dtype}, not {what}")
    if not ok:
        raise TracerError(f"{where}: damaged trace: {name!r} has shape {list(h.shape)}, its config needs {need}")
    return n, leaf
