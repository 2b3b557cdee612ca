"""A scenario's stated values (`[[expect]]`): read and checked against a recorded generation.

Each stated value names a recorded array (a hook, a `sample.*` name, `tokens` or `generated`),
an index into it, the value as the source states it and a tolerance; `check_expect` compares it
with what the generation recorded and gives a `tracer.run.checks.Check` (✓ or ✗ and the difference).
A check that fails is not an error: the disagreement is what a replay shows. Core module: numpy
and the standard library only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..core import hooks
from ..run.checks import Check
from ..core.config import Config
from ..core.decoder import hook_names
from ..errors import TracerError, is_whole, near
from .source import Source, Where, check_keys, non_number, tables, type_name, written_tolerance

TOKEN_NAMES = tuple(hooks.NOT_RECORDED)  # not hooks: the pass's token ids, the generated tokens
REDUCE = ("sum", "mean", "norm", "max", "argmax")  # over the last axis of the indexed value
EXPECT_KEYS = ("name", "index", "value", "label", "tolerance", "step", "reduce")


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


def read_expects(raw_list, cfg: Config, w: Where, source: Source) -> list[Expect]:
    known = list(hook_names(cfg)) + list(hooks.CHECKABLE) + list(TOKEN_NAMES)
    out = []
    for i, t in enumerate(tables(raw_list, "expect", w)):
        num = i + 1
        kp = f"expect[{num}]"

        def err(key, msg):
            return w.error(f"{kp}.{key}" if key else kp, msg, "expect", i, key)

        check_keys(t, EXPECT_KEYS, kp, w, "expect", i)
        if "name" not in t:
            raise err(None, "missing name (a recorded hook such as \"blocks.0.attn.hook_pattern\", "
                      "a sample.* name, \"tokens\" or \"generated\")")
        name = t["name"]
        if not isinstance(name, str):
            raise err("name", f"expected a string, got {type_name(name)}")
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
            raise err("label", f"expected a string, got {type_name(label)}")
        step = t.get("step", None if name == "generated" else 0)
        if step is not None and not is_whole(step, 0):
            raise err("step", f"expected a whole number ≥ 0 (0 is the prompt pass), got {type_name(step)}")
        if name == "generated" and "step" in t:
            raise err("step", "\"generated\" covers every step; give no step")
        reduce = t.get("reduce")
        if reduce is not None and reduce not in REDUCE:
            raise err("reduce", f"expected one of {', '.join(REDUCE)} (over the last axis), got {type_name(reduce)}"
                      f"{near(reduce, REDUCE) if isinstance(reduce, str) else ''}")
        if tokens and reduce is not None:
            raise err("reduce", f"{name!r} holds tokens; reduce applies to recorded arrays")
        if "tolerance" in t:
            tol = t["tolerance"]
            if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0:
                raise err("tolerance", f"expected a number ≥ 0 (absolute), got {type_name(tol)}")
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
        raise err("value", f"expected a number or a nested list of numbers, got {type_name(value)}")
    bad = non_number(value)
    if bad is not None:
        raise err("value", f"expected numbers, found {type_name(bad)}")
    try:
        stated = np.array(value, dtype=float)
    except ValueError:
        raise err("value", "not a rectangular list: its rows have different lengths") from None
    if stated.size == 0:
        raise err("value", "an empty list states nothing; give the number or numbers expected")


_SLICE = re.compile(r"^\s*(-?\d+)?\s*:\s*(-?\d+)?\s*$")


def _index(index_text, err) -> tuple:
    if isinstance(index_text, int) and not isinstance(index_text, bool):
        index_text = [index_text]
    if not isinstance(index_text, list):
        raise err("index", f"expected a list such as [0, 1] or [0, 1, \"0:2\"], got {type_name(index_text)}")
    out = []
    for x in index_text:
        if isinstance(x, int) and not isinstance(x, bool):
            out.append(x)
        elif isinstance(x, str) and _SLICE.match(x):
            m = _SLICE.match(x)
            out.append(slice(int(m.group(1)) if m.group(1) else None, int(m.group(2)) if m.group(2) else None))
        else:
            raise err("index", f"entries are whole numbers or slices written as strings (\"0:2\", \":\"), "
                      f"got {type_name(x)}")
    return tuple(out)


class TokenCheck(Check):
    """A check on tokens (strings or ids): equal or not; `diff` counts the positions that differ."""

    def __post_init__(self):
        e = list(self.expected) if isinstance(self.expected, list) else [self.expected]
        c = list(self.computed) if isinstance(self.computed, list) else [self.computed]
        self.diff = float(sum(a != b for a, b in zip(e, c)) + abs(len(e) - len(c)))
        self.ok = self.diff == 0


def _index_str(index_text) -> str:
    return "[" + ", ".join(str(x) for x in index_text) + "]" if index_text else ""


def check_all(expects: list[Expect], gen, tokenizer) -> list[Check]:
    """Every stated value against the recording of `gen` (a `Generation`)."""
    return [check_expect(e, gen, tokenizer) for e in expects]


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
