"""How a generation runs: each setting declared once (`SETTINGS`, one `Setting` record each), and the
frozen `GenerationSettings` of one run, every value checked against its record in the constructor.

A record says everything that carries the setting, so that nothing else restates it: its name (the
keyword of `Model.generate`, the attribute of `GenerationSettings`, the key of a scenario's `[generate]`
table, of a trace file's and `--json`'s `settings`, of the page's `settings`, the field of a request to
`tracer serve` and of `/api/limits`), its kind, range and default, the CLI flag and help (the options
of `trace` and `demo` are built from it: `tracer.cli.settings`), the most one request to `tracer serve`
may ask and its box in the served form, and the words that describe it in the run's header line.
A new setting is a row here, its sampler and its words (transformers' `GenerationConfig` is one such
record of every decoding option). Everything downstream (the loop, the renderers) reads the checked
values and never checks or defaults them again. Core module: standard library only.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Callable

from ..errors import TracerError, near

STOPPED = ("max_new_tokens", "end_token", "stop_string")  # why a generation stopped
DRAFT_LAYER = "layer:"  # `draft="layer:L"`: the model's own first L + 1 layers and its logit lens propose the tokens
KINDS = ("integer", "number", "switch", "text", "texts")  # a whole number, a number, true/false, a string, strings
SAME = "same"  # Setting.run: the commands' default is the API's


class SettingError(TracerError):
    """A generation setting that cannot be used: `field` names it, `problem` says what is wrong."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field.replace('_', '-')} {problem}")
        self.field, self.problem = field, problem


def _number(x) -> float | None:
    if isinstance(x, bool):
        return None
    try:
        return float(x)
    except (TypeError, ValueError, OverflowError):
        return None


def whole(x) -> int | None:
    """x as an int when it is a whole number (5, 5.0, numpy integers), else None. An int is taken as
    it is, never through a float (which rounds above 2⁵³: 9007199254740993 would become …992)."""
    if isinstance(x, bool):
        return None
    try:
        return operator.index(x)  # int, numpy integers: exact
    except TypeError:
        pass
    if isinstance(x, str) and len(x) <= 100:
        try:
            return int(x)
        except ValueError:
            pass
    v = _number(x)
    if v is None or not math.isfinite(v) or int(v) != v:
        return None
    return int(v)


@dataclass(frozen=True)
class Setting:
    """One generation setting, declared once; `check` is the one test of its values."""

    name: str  # the keyword everywhere: Model.generate, [generate], the trace file, --json, the request
    kind: str  # one of KINDS
    default: object  # Model.generate's and a scenario's (None: off, with `optional`)
    help: str  # the CLI option's help, and the served form's tooltip
    low: float | None = None  # the least value (None: no bound)
    high: float | None = None  # the greatest value (None: no bound)
    low_open: bool = False  # `low` itself refused: (0, 1]
    optional: bool = False  # None is a value: this stage is off
    hint: str = ""  # said after the range when a value is refused: "0 is greedy"
    choices: tuple = ()  # a text setting's values (empty: any text)
    short: str | None = None  # the CLI's short flag ("-n")
    run: object = SAME  # the default of the commands (`trace`, `demo`) and of a request to `tracer serve`
    served: bool = True  # a request to `tracer serve` may set it (else it runs at its default)
    most: float | None = None  # the most one request may ask (None: `high`; a `Limits` field of this name wins)
    label: str = ""  # its box's label in the served form (default: the flag's words)
    step: float = 1  # its box's step
    off: str = ""  # what an empty box means, for an optional setting ("all")
    words: Callable | None = None  # value → its words in the run's header line ("top-k 5"; None: unsaid)
    on_page: bool = True  # carried in the page's data (`settings`)
    needs: str = ""  # the setting it works with: unsaid without it, and a value other than its default refused
    quiet: bool = False  # left out of a trace file's `settings` at its default (added after files were first written)
    served_as: tuple = ()  # a served text setting: (the regular expression a request's value must match, its words)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def run_default(self):
        return self.default if self.run == SAME else self.run

    def range_words(self) -> str:
        """"≥ 0", "in (0, 1]", "" (no bound)."""
        shown = (lambda v: f"{int(v):,}") if self.kind == "integer" else (lambda v: f"{v:g}")
        lo, hi = self.low, self.high
        if lo is not None and hi is not None:
            return f"in {'(' if self.low_open else '['}{shown(lo)}, {shown(hi)}]"
        if lo is not None:
            return f"{'>' if self.low_open else '≥'} {shown(lo)}"
        return f"≤ {shown(hi)}" if hi is not None else ""

    def inside(self, v: float) -> bool:
        lo, hi = self.low, self.high
        return (lo is None or (v > lo if self.low_open else v >= lo)) and (hi is None or v <= hi)

    def refuse(self, what: str, value) -> SettingError:
        hint = f" ({self.hint})" if self.hint else ""
        return SettingError(self.name, f"must be {what}{hint}, got {value!r}")

    def check(self, value):
        """`value` as this setting holds it (an int, a float, a bool, a string or a tuple of strings), or a
        one-line SettingError naming the setting and the value."""
        if value is None and self.optional:
            return None
        rng = self.range_words()
        if self.kind == "integer":
            n = whole(value)
            if n is None or not self.inside(n):
                raise self.refuse(f"a whole number {rng}".rstrip(), value)
            return n
        if self.kind == "number":
            x = _number(value)
            if x is None or not math.isfinite(x) or not self.inside(x):
                raise self.refuse(rng if rng.startswith("in ") else f"a number {rng}".rstrip(), value)
            return x
        if self.kind == "switch":
            if not isinstance(value, bool):
                raise self.refuse("true or false", value)
            return value
        if self.kind == "text":
            if not isinstance(value, str) or (self.choices and value not in self.choices):
                raise self.refuse(f"one of {', '.join(self.choices)}" if self.choices else "text", value)
            return value
        items = [value] if isinstance(value, str) else value if isinstance(value, (list, tuple)) else \
            [] if value is None else None  # texts
        if items is None or not all(isinstance(s, str) for s in items):
            raise self.refuse("a string or a list of strings", value)
        return tuple(items)


SETTINGS: tuple[Setting, ...] = (  # in the order of a trace file's `settings`; the header words them in this order
    Setting("max_new_tokens", "integer", 1, low=0, short="-n", run=2, label="new",
            help="Tokens to generate after the prompt (0: only predict the next one). Stops early at the end token or a "
                 "--stop string."),  # `tracer serve`'s most: Limits.max_new_tokens (serve --max-new-tokens)
    Setting("temperature", "number", 0.0, low=0.0, hint="0 is greedy", short="-t", most=100.0, label="T", step=0.1,
            help="0 is greedy (the most likely token); higher flattens the distribution.",
            words=lambda t: "temperature 0 (greedy)" if t == 0 else f"temperature {t:g}"),
    Setting("top_k", "integer", None, low=1, optional=True, most=1_000_000, off="all",
            help="Keep only the k most likely tokens before the draw.",
            words=lambda k: f"top-k {k}"),
    Setting("top_p", "number", None, low=0.0, high=1.0, low_open=True, optional=True, step=0.05, off="1",
            help="Keep the most likely tokens whose probabilities add up to p, in (0, 1].",
            words=lambda p: f"top-p {p:g}"),
    Setting("min_p", "number", None, low=0.0, high=1.0, low_open=True, optional=True, step=0.01, off="off",
            quiet=True, help="Keep only the tokens whose probability is at least p times the most likely one's, in (0, 1] "
                             "(after top-k and top-p).",
            words=lambda p: f"min-p {p:g}"),
    Setting("repetition_penalty", "number", 1.0, low=0.0, low_open=True, most=100.0, step=0.05, label="repeat",
            quiet=True, help="Every token already in the context: a positive logit divided by R, a negative one "
                             "multiplied by R (transformers' repetition_penalty; 1 is off).",
            words=lambda r: "" if r == 1 else f"repetition penalty {r:g}"),
    Setting("presence_penalty", "number", 0.0, low=0.0, most=100.0, step=0.1, label="presence", quiet=True,
            help="Subtract A from the logit of every token already in the context (llama.cpp's and the OpenAI API's; "
                 "0 is off).",
            words=lambda a: "" if a == 0 else f"presence penalty {a:g}"),
    Setting("frequency_penalty", "number", 0.0, low=0.0, most=100.0, step=0.1, label="frequency", quiet=True,
            help="Subtract B times its count from the logit of every token already in the context (llama.cpp's and "
                 "the OpenAI API's; 0 is off).",
            words=lambda b: "" if b == 0 else f"frequency penalty {b:g}"),
    Setting("penalty_last_n", "integer", None, low=0, optional=True, most=1_048_576, off="all", label="last n",
            quiet=True, help="The penalties count only the last N tokens of the context (default: all of it, prompt "
                             "and generated tokens; 0 counts none).",
            words=lambda n: f"penalties over the last {n} tokens"),
    Setting("seed", "integer", 0, low=0, most=2**32 - 1,  # numpy's generators take no negative seed
            help="Seed of the sampling draw (with --temperature above 0); the weights do not change with it.",
            words=lambda s: f"seed {s}"),
    Setting("cache", "switch", True, served=False,
            help="Reuse earlier tokens' keys and values (KV cache) or recompute the whole context each step.",
            words=lambda on: "KV cache on" if on else "KV cache off"),
    Setting("stop", "texts", (), served=False, on_page=False,  # the page says the stop reason in words
            help="Stop when the generated text contains this string (repeatable)."),
    Setting("beams", "integer", None, low=2, high=64, optional=True, off="off", quiet=True,
            help="Beam search with N beams (no sampling: temperature 0): the N best sequences by summed "
                 "log-probability, best first.",
            words=lambda n: f"beam search, {n} beams"),
    Setting("length_penalty", "number", 1.0, low=-10.0, high=10.0, step=0.1, needs="beams", label="α", quiet=True,
            help="Beam search's length penalty α: a finished sequence scores its summed log-probability ÷ length^α "
                 "(transformers' length_penalty).",
            words=lambda a: f"length penalty {a:g}"),
    Setting("draft", "text", None, optional=True, off="off", quiet=True,
            help="Speculative decoding: a draft model sharing the vocabulary proposes tokens (a model name or path), "
                 "or layer:L, the model's own logit lens after layer L.",
            served_as=(r"layer:[0-9]{1,4}", "layer:L (this server drafts with the model's own layers)"),
            words=lambda d: f"speculative decoding, draft {d}"),
    Setting("draft_tokens", "integer", 4, low=1, high=32, needs="draft", label="drafted", quiet=True,
            help="Tokens the draft proposes per round of speculative decoding.",
            words=lambda k: f"{k} drafted per round"),
    Setting("sampling", "text", None, choices=("file",), optional=True, off="given", quiet=True,
            help="file: use the sampling settings the model's file suggests (a GGUF's general.sampling.*); options "
                 "given explicitly still win.",
            words=lambda s: "the file's suggested sampling"),
)
PENALTIES = ("repetition_penalty", "presence_penalty", "frequency_penalty")  # off at their defaults


def setting(name: str) -> Setting:
    for s in SETTINGS:
        if s.name == name:
            return s
    raise KeyError(f"no generation setting {name!r}{near(name, [s.name for s in SETTINGS])}")


def served() -> list[Setting]:
    """The settings a request to `tracer serve` may give, in the table's order."""
    return [s for s in SETTINGS if s.served]


def reading_order(table=None) -> list[Setting]:
    """The settings in the order the run's header line says them (those it words, then the others): the
    page's `settings` and the served form's boxes."""
    return sorted(SETTINGS if table is None else table, key=lambda s: s.words is None)


def together(values: dict) -> None:
    """The settings that do not go together, refused naming the later one: a setting that `needs` another
    given without it; beam search with sampling, a draft or stop strings."""
    for s in SETTINGS:
        if s.needs and values.get(s.name) != s.default and values.get(s.needs) is None:
            raise SettingError(s.name, f"works with --{s.needs.replace('_', '-')}: give it too (or leave "
                                       f"{s.flag} at {s.default!r})")
    if values.get("beams") is not None:
        for other, why in (("temperature", "beam search keeps the most likely sequences, no draw: temperature 0"),
                           ("draft", "speculative decoding proposes one sequence"),
                           ("stop", "stop strings end the plain loop only")):
            if values.get(other) != setting(other).default:
                raise SettingError("beams", f"cannot go with {setting(other).flag} ({why})")
    draft = values.get("draft")
    if isinstance(draft, str) and draft.startswith(DRAFT_LAYER) and whole(draft[len(DRAFT_LAYER):]) is None:
        raise SettingError("draft", f"must be a model or layer:L with L a whole number, got {draft!r}")
    if isinstance(draft, str) and not draft.strip():
        raise SettingError("draft", "must name a model or layer:L, got ''")


def draft_layer(draft: str | None) -> int | None:
    """L of `draft="layer:L"` (self-speculation), None for a draft model or none."""
    if draft is None or not draft.startswith(DRAFT_LAYER):
        return None
    return whole(draft[len(DRAFT_LAYER):])


def check_seed(seed) -> int:
    """Seeds are whole numbers ≥ 0 (numpy's generators take no negative seed): the draw's and the weights'."""
    return setting("seed").check(seed)


class GenerationSettings:
    """How one generation runs: an attribute per setting of `SETTINGS` (`s.temperature`, `s.top_k`, …),
    each checked by its record once, here; frozen and hashable. `GenerationSettings()` is greedy
    decoding of one token; a single forward pass (`Model.run`) holds `GenerationSettings(max_new_tokens=0)`."""

    __slots__ = ("_values", "_given")

    def __init__(self, **given):
        names = [s.name for s in SETTINGS]
        for key in given:
            if key not in names:
                raise TypeError(f"GenerationSettings got an unexpected keyword argument {key!r}{near(key, names)}")
        values = {s.name: s.check(given.get(s.name, s.default)) for s in SETTINGS}
        together(values)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_given", frozenset(given))  # what was asked for (`suggested` leaves it alone)

    def __getattr__(self, name: str):
        try:
            return object.__getattribute__(self, "_values")[name]
        except KeyError:
            raise AttributeError(f"GenerationSettings has no setting {name!r}") from None

    def __setattr__(self, name, value):
        raise AttributeError("GenerationSettings is frozen: use .replace(…)")

    def __eq__(self, other) -> bool:
        return isinstance(other, GenerationSettings) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __repr__(self) -> str:
        return f"GenerationSettings({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"

    def __copy__(self) -> "GenerationSettings":
        return self  # frozen

    def __deepcopy__(self, memo) -> "GenerationSettings":
        return self

    def replace(self, **changes) -> "GenerationSettings":
        out = GenerationSettings(**{**self._values, **changes})
        object.__setattr__(out, "_given", self._given | frozenset(changes))
        return out

    def given_only(self, names) -> "GenerationSettings":
        """These settings, of which only `names` count as asked for (the options a command line gave)."""
        out = GenerationSettings(**self._values)
        object.__setattr__(out, "_given", frozenset(names))
        return out

    def suggested(self, values: dict) -> "GenerationSettings":
        """These settings with `values` (a model file's suggestions, by setting name) in place of every
        setting that was not asked for: options given explicitly win."""
        return self.replace(**{k: v for k, v in values.items() if k not in self._given})

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def penalized(self) -> bool:
        """Whether a penalty changes the logits (repetition, presence or frequency, over a window of ≥ 1 token)."""
        return any(self._values[k] != setting(k).default for k in PENALTIES) and self.penalty_last_n != 0

    def to_dict(self, quiet: bool = False) -> dict:
        """As --json's `settings` (every one); `quiet`: as a trace file's (before `stopped`), leaving out the
        settings added after files were first written when they are at their defaults."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self._values.items()
                if not (quiet and setting(k).quiet and v == setting(k).default)}

    @classmethod
    def from_dict(cls, d: dict) -> tuple["GenerationSettings", str | None]:
        """A trace file's `settings`: the settings, and why the generation stopped (None if unsaid). A
        setting the file does not name (written before it existed) has its default."""
        if not isinstance(d, dict):
            raise TracerError(f"settings must be a table, got {type(d).__name__}")
        unknown = [k for k in d if k != "stopped" and k not in {s.name for s in SETTINGS}]
        if unknown:
            raise TracerError(f"settings: unknown key {unknown[0]!r}")
        stopped = d.get("stopped")
        if stopped is not None and stopped not in STOPPED:
            raise TracerError(f"settings: stopped must be one of {', '.join(STOPPED)}, got {stopped!r}")
        for s in SETTINGS:  # as tracer writes them: a list, never one string; a whole number, never a float
            if s.kind == "texts" and isinstance(d.get(s.name), str):
                raise TracerError(f"settings: {s.name} must be a list of strings")
            if s.kind == "integer" and isinstance(d.get(s.name), float):
                raise TracerError(f"settings: {s.name} must be a whole number, got {d[s.name]!r}")
        return cls(**{k: v for k, v in d.items() if k != "stopped"}), stopped
