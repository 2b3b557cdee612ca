"""A lesson file: what `tracer serve --lesson FILE.toml` leads a class through, read and checked as a
scenario file is (`source`: one `TracerError` line naming the file, the line, the key and what was expected).

    title = "…"   about = "…"   model = "abc"   prompt = "A B C D E F"
    [generate]          the settings pinned for the class (the served ones: max_new_tokens, temperature, …)
    [[step]]            in order: show (a page step of tracer/sections.py), title, notes (the teacher's only),
                        layer, head, token, pass (what the class looks at)
    [step.question]     ask, kind ("choice" or "next_token"), choices, answer (one of the choices)

`load_lesson` checks everything that needs no model; `check_with_model` the rest against the loaded model:
the prompt fits its context with room for the new tokens, the layers and heads exist, and a next-token
question's answer is the model's own top prediction after the prompt. `lesson_text` writes a file (and
`starter_steps` the article's walkthrough as one, for `tracer lesson new`). docs/lesson.md documents the
format key by key. Core module: numpy and the standard library only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import sections
from ..errors import TracerError, is_whole, near
from ..run import settings as declared
from ..run.settings import GenerationSettings, SettingError
from ..tokenizers.tokens import ContextOverflow, show_token
from .source import Where, check_keys, read_toml, tables, type_name, want_table

TOP_KEYS = ("title", "about", "model", "prompt", "generate", "step")
STEP_KEYS = ("show", "title", "notes", "layer", "head", "token", "pass", "question")
QUESTION_KEYS = ("ask", "kind", "choices", "answer")
KINDS = ("choice", "next_token")  # a multiple choice; which token comes next after the prompt (the model's top-1)
MOST_STEPS = 64  # a lesson's steps
MOST_CHOICES = 6  # a question's choices (at least 2)
LONGEST = {"title": 120, "about": 2_000, "model": 500, "prompt": 2_000, "notes": 4_000, "ask": 300, "choices": 80}


@dataclass(frozen=True)
class Question:
    ask: str
    kind: str  # one of KINDS
    choices: tuple[str, ...]
    answer: int  # the index of the right choice

    def public(self) -> dict:
        """What a page is sent: the question without its answer (the reveal sends it); `labels`: the choices as
        the page shows them (a token's text with ␣ for a space, ↵ for a line break)."""
        return {"ask": self.ask, "kind": self.kind, "choices": list(self.choices),
                "labels": [show_token(c) if self.kind == "next_token" else c for c in self.choices]}


@dataclass(frozen=True)
class Step:
    show: str  # a page step's id (tracer.sections.page_steps)
    title: str  # what the class's bar says ("" : the page step's own title)
    notes: str = ""  # the teacher's notes: only the teacher's page shows them
    layer: int | None = None  # the layer, head and pass chosen (None: as the page is)
    head: int | None = None
    token: int | None = None  # a prompt position: ≥ 0 from the start, < 0 from the end (-1: the last prompt token)
    pass_: int | None = None
    question: Question | None = None

    def choices(self) -> dict:
        """The page's choices this step makes, as the teacher's page applies them."""
        return {k: v for k, v in (("layer", self.layer), ("head", self.head), ("token", self.token), ("pass", self.pass_))
                if v is not None}


@dataclass(frozen=True)
class Lesson:
    title: str
    about: str
    model: str  # any --model of `tracer trace`
    prompt: str  # the starter prompt every page opens on
    settings: dict  # the pinned settings: name → value, as GenerationSettings checked them
    steps: tuple[Step, ...]
    path: Path | None = None
    where: Where | None = field(default=None, compare=False, repr=False)

    @property
    def questions(self) -> list[int]:
        """The indices of the steps that ask a question."""
        return [i for i, s in enumerate(self.steps) if s.question is not None]

    def request(self) -> dict:
        """The starter run as a request to `/api/trace` asks it: the prompt, the model, the pinned settings."""
        return {"prompt": self.prompt, "model": self.model, **self.settings}


RUN_KINDS = {"beams": "beams", "speculative": "draft"}  # page steps only a run of that kind has: the setting that makes it


def page_steps(settings: dict | None = None) -> list[str]:
    """The page's steps a lesson's run has: beam search's and speculative decoding's only when its settings
    (`settings`, the pinned ones) ask for them."""
    settings = settings or {}
    return [step for step, _ in sections.page_steps() if step not in RUN_KINDS or settings.get(RUN_KINDS[step])]


def load_lesson(path) -> Lesson:
    """Read and check a lesson file (everything that needs no model)."""
    path = Path(path).expanduser()
    doc, source = read_toml(path, "lesson")
    w = Where(path, source)
    check_keys(doc, TOP_KEYS, "", w, "")
    title = _text(doc, "title", w, "", 0, required=False, default=path.stem)
    about = _text(doc, "about", w, "", 0, required=False)
    model = _text(doc, "model", w, "", 0, required=True)
    prompt = _text(doc, "prompt", w, "", 0, required=True)
    if not prompt.strip():
        raise w.error("prompt", "empty; the starter prompt every page opens on", "", 0, "prompt")
    pinned = _generate(want_table(doc, "generate", w), w)
    if "step" not in doc:
        raise w.error("step", "missing; a lesson has [[step]] tables, one per step, in order")
    raw = tables(doc["step"], "step", w)
    if not raw or len(raw) > MOST_STEPS:
        raise w.error("step", f"{len(raw)} steps; a lesson has 1 to {MOST_STEPS}", "step", 0)
    asked = 0
    steps = []
    for i, t in enumerate(raw):
        steps.append(_step(t, i, asked, w))
        asked += steps[-1].question is not None
    return Lesson(title, about, model, prompt, pinned, tuple(steps), path, w)


def _text(t: dict, key: str, w: Where, table: str, occ: int, required: bool, default: str = "", kp: str = "") -> str:
    kp = kp or key
    if key not in t:
        if required:
            raise w.error(kp, "missing; expected a string", table if table else None, occ)
        return default
    v = t[key]
    if not isinstance(v, str):
        raise w.error(kp, f"expected a string, got {type_name(v)}", table, occ, key)
    most = LONGEST.get(key.split(".")[-1], 200)
    if len(v) > most:
        raise w.error(kp, f"{len(v):,} characters; at most {most:,}", table, occ, key)
    return v


def _generate(t: dict, w: Where) -> dict:
    names = [s.name for s in declared.served()]  # a lesson pins what a student's request could change
    check_keys(t, names, "generate", w, "generate")
    try:
        checked = GenerationSettings(**t)
    except SettingError as e:
        raise w.error(f"generate.{e.field}", e.problem, "generate", 0, e.field) from None
    return {name: getattr(checked, name) for name in names if name in t}


def _whole(t: dict, key: str, kp: str, w: Where, table: str, occ: int, least: int | None) -> int | None:
    v = t.get(key)
    if v is None:
        return None
    if not is_whole(v, least) or abs(v) > 100_000:
        what = "a whole number" + (f" ≥ {least}" if least is not None else "")
        raise w.error(f"{kp}.{key}", f"expected {what}, got {type_name(v)}", table, occ, key)
    return v


def _step(t: dict, i: int, asked: int, w: Where) -> Step:
    kp = f"step[{i + 1}]"
    check_keys(t, STEP_KEYS, kp, w, "step", i)
    shown = page_steps()
    show = t.get("show")
    if not isinstance(show, str) or show not in shown:
        hint = near(show, shown) if isinstance(show, str) else ""
        got = "missing" if show is None else f"got {type_name(show)}"
        raise w.error(f"{kp}.show", f"{got}{hint}; one of the page's steps: {', '.join(shown)}", "step", i,
                      "show" if "show" in t else None)
    title = _text(t, "title", w, "step", i, required=False, kp=f"{kp}.title")
    notes = _text(t, "notes", w, "step", i, required=False, kp=f"{kp}.notes")
    layer, head = (_whole(t, k, kp, w, "step", i, 0) for k in ("layer", "head"))
    token, pass_ = _whole(t, "token", kp, w, "step", i, None), _whole(t, "pass", kp, w, "step", i, 0)
    question = None
    if "question" in t:
        q = t["question"]
        if not isinstance(q, dict):
            raise w.error(f"{kp}.question", f"expected a table [step.question], got {type_name(q)}", "step", i, "question")
        question = _question(q, f"{kp}.question", asked, w)
    return Step(show, title, notes, layer, head, token, pass_, question)


def _question(q: dict, kp: str, occ: int, w: Where) -> Question:
    table = "step.question"
    check_keys(q, QUESTION_KEYS, kp, w, table, occ)
    ask = _text(q, "ask", w, table, occ, required=True, kp=f"{kp}.ask")
    if not ask.strip():
        raise w.error(f"{kp}.ask", "empty; the question the class answers", table, occ, "ask")
    kind = q.get("kind", "choice")
    if kind not in KINDS:
        hint = near(kind, KINDS) if isinstance(kind, str) else ""
        raise w.error(f"{kp}.kind", f"got {type_name(kind)}{hint}; one of {', '.join(KINDS)}", table, occ, "kind")
    choices = q.get("choices")
    if not isinstance(choices, list) or not all(isinstance(c, str) and c and len(c) <= LONGEST["choices"] for c in choices):
        raise w.error(f"{kp}.choices", f"expected a list of non-empty strings of at most {LONGEST['choices']} characters, "
                                       f"got {type_name(choices)}", table, occ, "choices")
    if not 2 <= len(choices) <= MOST_CHOICES or len(set(choices)) < len(choices):
        raise w.error(f"{kp}.choices", f"{len(choices)} choices{', some the same' if len(set(choices)) < len(choices) else ''}"
                                       f"; a question has 2 to {MOST_CHOICES} different ones", table, occ, "choices")
    answer = q.get("answer")
    if answer not in choices:
        raise w.error(f"{kp}.answer", f"got {type_name(answer)}; the answer is one of the choices, written as it is "
                                      f"there", table, occ, "answer" if "answer" in q else None)
    return Question(ask, kind, tuple(choices), choices.index(answer))


def _asked_before(lesson: Lesson, i: int) -> int:
    return sum(s.question is not None for s in lesson.steps[:i])


def check_with_model(lesson: Lesson, model) -> None:
    """What needs the model (`tracer.model.Model`): the starter prompt fits its context with room for the pinned
    new tokens, each step's layer, head, token and pass exist, and each next-token question's answer is the
    model's top prediction after the prompt."""
    w = lesson.where or Where(lesson.path or Path("lesson"), None)
    cfg = model.config
    room = lesson.settings.get("max_new_tokens", declared.setting("max_new_tokens").run_default)
    try:
        ids = model.prompt(lesson.prompt, None, room).ids
    except ContextOverflow as e:
        raise w.error("prompt", f"{e.prompt_tokens} tokens and {room} new ones pass {lesson.model}'s context of "
                                f"{e.n_ctx}", "", 0, "prompt") from None
    except TracerError as e:
        raise w.error("prompt", str(e).removeprefix("prompt: "), "", 0, "prompt") from None
    passes = max(room, 1)
    for i, s in enumerate(lesson.steps):
        kp = f"step[{i + 1}]"
        for key, v, most, what in (("layer", s.layer, cfg.n_layers, "layers"), ("head", s.head, cfg.n_heads, "heads"),
                                   ("pass", s.pass_, passes, "passes")):
            if v is not None and v >= most:
                raise w.error(f"{kp}.{key}", f"{v} is past the last: {lesson.model} has {most} {what} here, 0 to {most - 1}",
                              "step", i, key)
        if s.token is not None and not -len(ids) <= s.token < len(ids):
            raise w.error(f"{kp}.token", f"{s.token}: the prompt has {len(ids)} tokens (0 to {len(ids) - 1}, or -1 to "
                                         f"-{len(ids)} from its end)", "step", i, "token")
        q = s.question
        if q is not None and q.kind == "next_token":
            top = predicted(model, ids)[0][1]
            if q.choices[q.answer] != top:
                raise w.error(f"{kp}.question.answer", f"{lesson.model} predicts {json.dumps(top)} after the prompt, "
                                                       f"not {json.dumps(q.choices[q.answer])}", "step.question",
                              _asked_before(lesson, i), "answer")


def predicted(model, ids, n: int = 1) -> list[tuple[int, str]]:
    """(id, text) of the model's `n` highest-scoring next tokens after `ids` (the last position's logits) whose
    texts are different, not empty and short enough to be a choice (n = 1: the top one, whatever its text)."""
    logits = np.asarray(model.run(list(ids), names=["logits"])["logits"])[-1]  # [d_vocab]
    out: dict[str, int] = {}
    for t in np.argsort(-logits, kind="stable")[:max(4 * n, 16)]:
        text = model.tokenizer.decode([int(t)])
        if n == 1 or (text and len(text) <= LONGEST["choices"] and text not in out):
            out[text] = int(t)
        if len(out) == n:
            break
    return [(t, text) for text, t in out.items()]


# ------------------------------------------------------------------------------------------------ writing


def toml_value(v) -> str:
    """A TOML value: strings as basic strings (JSON's escapes are TOML's; DEL escaped too), numbers, lists."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf" if v < 0 else "nan")
    if isinstance(v, int):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {type(v).__name__}")


def lesson_text(title: str, model: str, prompt: str, settings: dict, steps: list[dict], about: str = "",
                header: str = "") -> str:
    """A lesson file's text: `steps` as [[step]] tables (keys of STEP_KEYS; "question" a dict of QUESTION_KEYS
    whose answer is the choice's text). `header`: comment lines put first."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()] + [""] if header else []
    lines += [f"title = {toml_value(title)}"] + ([f"about = {toml_value(about)}"] if about else [])
    lines += [f"model = {toml_value(model)}", f"prompt = {toml_value(prompt)}", "", "[generate]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in settings.items() if v is not None]
    for s in steps:
        keys = ("show", "title", "layer", "head", "token", "pass", "notes")  # STEP_KEYS, the notes after the choices
        lines += ["", "[[step]]"] + [f"{k} = {toml_value(s[k])}" for k in keys if s.get(k) not in (None, "")]
        if s.get("question"):
            lines += ["[step.question]"] + [f"{k} = {toml_value(s['question'][k])}" for k in QUESTION_KEYS if k in s["question"]]
    return "\n".join(lines) + "\n"


def starter_steps(model, prompt: str, notes: dict, questions: dict, room: int) -> list[dict]:
    """The article's walkthrough as a lesson's steps: one per page step (`tracer.sections`), each with the
    teacher's `notes` (step id → text) and `questions` (step id → a question; a "next_token" one gets the
    model's 4 highest-scoring next tokens after `prompt` as its choices, in the vocabulary's order, and its
    top one as the answer). The attention steps look at the last prompt token, layer 0 then the last layer."""
    cfg = model.config
    last = max(cfg.n_layers - 1, 0)
    looks = {"qkv": {"layer": 0, "head": 0, "token": -1}, "scores": {"layer": last, "head": 0, "token": -1},
             "heads": {"layer": last}, "predict": {"token": -1}, "loop": {"pass": min(1, max(room, 1) - 1)}}
    ids = model.prompt(prompt, None, room).ids
    out = []
    for step in page_steps():
        s = {"show": step, **(looks.get(step, {}) if cfg.n_layers or step in ("predict", "loop") else {}),
             "notes": notes.get(step, "")}
        if step in questions:
            q = dict(questions[step])
            if q.get("kind") == "next_token":
                top = predicted(model, ids, 4)  # [(id, text)], the highest first
                q.update(choices=[text for _, text in sorted(top)], answer=top[0][1])
            s["question"] = q
        out.append(s)
    return out
