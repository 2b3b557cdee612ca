"""What one request may ask of `tracer serve`, stated once (`GET /api/limits` shows it), and the
request body checked against it before any model runs.

A request's fields are the prompt, the model, the generation settings a request may give, by the
names their declarations (`tracer.run.settings.SETTINGS`) give them, each checked by its kind and
range and this server's most (`Limits.most`), and `chat`. `parse_trace_request` turns the bytes of a
`POST /api/trace` into a `TraceRequest` or raises
`RequestError`, whose `status` (400 malformed, 413 too large, 422 a field out of range or of the
wrong type) and one-line message say which field and which limit. Every check is on types and
sizes only: nothing here reads a file, and a model is one of the names the server was started
with, matched exactly (a path, `../x` or a Hugging Face name is just an unknown name, and the
answer never repeats it).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, fields

from ..run import settings as declared

OWN = ("prompt", "model")  # a request's own fields; then the served generation settings, then `chat`


def fields_of_request() -> tuple:
    """Every field a request may give: the prompt and the model, the served settings (by the names the
    API keywords have), chat, and force (token ids put after the prompt: a branch from a clicked candidate)."""
    return (*OWN, *(s.name for s in declared.served()), "chat", "force")


@dataclass(frozen=True)
class Limits:
    body_bytes: int = 16_384  # a request's JSON; a bigger body is refused before it is read whole
    prompt_chars: int = 2_000  # characters of the prompt, before tokenizing
    prompt_tokens: int = 256  # tokens of the prompt (chat template included)
    max_new_tokens: int = 16  # new tokens one request may ask for (`tracer serve --max-new-tokens`)
    context: int = 272  # prompt + new tokens (and never more than the model's own context)
    seconds: float = 10.0  # time one trace may run once a worker has it; the run is cut after that
    per_client: int = 2  # requests one address may have running or waiting (0: no such limit)

    def most(self, s: declared.Setting):
        """The most one request may ask of setting `s`: this server's field of its name, else its declared most,
        else its range's high (None: no bound)."""
        own = {f.name for f in fields(self)}
        return getattr(self, s.name) if s.name in own else s.most if s.most is not None else s.high

    def to_dict(self) -> dict:
        """What `GET /api/limits` states: these fields, and the most of each served setting, by its name."""
        return {**asdict(self), **{s.name: self.most(s) for s in declared.served()}}


def served_settings(limits: Limits) -> list[dict]:
    """The served settings' declarations as this server takes them (JSON for `/api/limits` and the page's form
    script), in the order the header says them: name, kind, default, range, whether empty is off."""
    return [{"name": s.name, "kind": s.kind, "default": s.run_default, "low": s.low, "low_open": s.low_open,
             "most": limits.most(s), "optional": s.optional, "choices": list(s.choices) or None}
            for s in declared.reading_order(declared.served())]


class RequestError(Exception):
    """A request the server refuses: `status` (4xx), a one-line `message`, the `field` and the `limit`."""

    def __init__(self, status: int, message: str, field: str | None = None, limit=None):
        super().__init__(message)
        self.status, self.message, self.field, self.limit = status, message, field, limit

    def to_dict(self) -> dict:
        out = {"error": self.message}
        if self.field is not None:
            out["field"] = self.field
        if self.limit is not None:
            out["limit"] = self.limit
        return out


@dataclass(frozen=True)
class TraceRequest:
    prompt: str
    model: str
    settings: dict = field(default_factory=dict)  # served setting → value; those not given: the commands' defaults
    chat: bool = False
    given: tuple = ()  # the settings the request named (what a file's suggestions do not replace: sampling "file")
    force: tuple = ()  # token ids after the prompt's: the tokens before a clicked candidate, and the candidate

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", {**{s.name: s.run_default for s in declared.served()}, **self.settings})

    def to_dict(self) -> dict:
        return {"prompt": self.prompt, "model": self.model, **self.settings, "chat": self.chat,
                **({"force": list(self.force)} if self.force else {})}


def _whole(name: str, v, lo, hi) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and (not math.isfinite(v)
                                                                                           or v != int(v))):
        raise RequestError(422, f"{name}: must be a whole number, got {_kind(v)}", name)
    v = int(v)
    if not (lo is None or lo <= v) or not (hi is None or v <= hi):
        raise RequestError(422, f"{name}: {v:,} is out of range; this server takes {_span(lo, hi, False, '{:,}')}",
                           name, hi)
    return v


def _number(name: str, v, lo, hi, low_open: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise RequestError(422, f"{name}: must be a number, got {_kind(v)}", name)
    v = float(v)
    if not (lo is None or (lo < v if low_open else lo <= v)) or not (hi is None or v <= hi):
        raise RequestError(422, f"{name}: {v:g} is out of range; this server takes {_span(lo, hi, low_open, '{:g}')}",
                           name, hi)
    return v


def _span(lo, hi, low_open: bool, shown: str) -> str:
    """"0 to 16", "above 0 to 1", "1 or more"."""
    if lo is None:
        return f"at most {shown.format(hi)}"
    least = ("above " if low_open else "") + shown.format(lo)
    return f"{least} to {shown.format(hi)}" if hi is not None else f"{least} or more"


def _setting(s: declared.Setting, v, limits: Limits):
    """The value of served setting `s` in a request (its default when not given), checked against this server."""
    if v is None and s.optional:
        return None
    if s.kind == "integer":
        return _whole(s.name, v, s.low, limits.most(s))
    if s.kind == "number":
        return _number(s.name, v, s.low, limits.most(s), s.low_open)
    if s.kind == "switch":
        if not isinstance(v, bool):
            raise RequestError(422, f"{s.name}: must be true or false, got {_kind(v)}", s.name)
        return v
    if s.kind == "text" and isinstance(v, str) and len(v) <= 200 and (not s.choices or v in s.choices) and \
            (not s.served_as or re.fullmatch(s.served_as[0], v)):
        return v
    if s.kind == "texts" and isinstance(v, list) and len(v) <= 16 and all(isinstance(x, str) and len(x) <= 200 for x in v):
        return v
    want = f"one of {', '.join(s.choices)}" if s.choices else s.served_as[1] if s.served_as else \
        "text of at most 200 characters" if s.kind == "text" \
        else "a list of at most 16 strings of at most 200 characters"
    raise RequestError(422, f"{s.name}: must be {want}, got {_kind(v)}", s.name)


def _kind(v) -> str:
    """What a value is, without repeating it (it may be large, or a path)."""
    if v is None:
        return "null"
    if isinstance(v, float) and not math.isfinite(v):
        return "a non-finite number"
    return {bool: "true/false", str: "text", list: "a list", dict: "an object", int: "a whole number",
            float: "a number"}.get(type(v), type(v).__name__)


def parse_trace_request(body: bytes, models, limits: Limits, default_model: str) -> TraceRequest:
    """The request in `body`, every field checked; `models`: the names this server serves."""
    if len(body) > limits.body_bytes:
        raise RequestError(413, f"request: {len(body):,} bytes; this server takes at most {limits.body_bytes:,} "
                                f"(a prompt of at most {limits.prompt_chars:,} characters)", "body", limits.body_bytes)
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=lambda c: float("nan"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise RequestError(400, "request: not a JSON object in UTF-8 (send {\"prompt\": \"…\", \"model\": \"…\"})") from None
    if not isinstance(data, dict):
        raise RequestError(400, f"request: expected a JSON object, got {_kind(data)}")
    known = fields_of_request()
    unknown = [str(k) for k in data if k not in known]
    if unknown:
        shown = ", ".join(k[:40] for k in unknown[:5])
        raise RequestError(422, f"request: unknown field {shown}; the fields are {', '.join(known)}", unknown[0][:40])
    prompt = data.get("prompt")
    if not isinstance(prompt, str):
        raise RequestError(422, f"prompt: must be text, got {_kind(prompt)}", "prompt")
    if len(prompt) > limits.prompt_chars:
        raise RequestError(413, f"prompt: {len(prompt):,} characters; this server takes at most "
                                f"{limits.prompt_chars:,}", "prompt", limits.prompt_chars)
    if not prompt.strip():
        raise RequestError(422, "prompt: empty; type some text", "prompt")
    model = data.get("model", default_model)
    if not isinstance(model, str) or model not in models:
        raise RequestError(422, f"model: not one this server serves; choose one of {', '.join(models)}", "model")
    settings = {s.name: _setting(s, data.get(s.name, s.run_default), limits) for s in declared.served()}
    chat = data.get("chat", False)
    if not isinstance(chat, bool):
        raise RequestError(422, f"chat: must be true or false, got {_kind(chat)}", "chat")
    force = data.get("force", [])
    if not isinstance(force, list) or len(force) > limits.context or \
            not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in force):
        raise RequestError(422, f"force: must be a list of at most {limits.context:,} token ids (whole numbers ≥ 0), "
                                f"got {_kind(force)}", "force")
    return TraceRequest(prompt, model, settings, chat, tuple(s.name for s in declared.served() if s.name in data),
                        tuple(force))


def check_context(n_prompt: int, max_new_tokens: int, n_ctx: int, limits: Limits) -> None:
    """The tokenized prompt against the limits and the model's context."""
    if n_prompt > limits.prompt_tokens:
        raise RequestError(413, f"prompt: {n_prompt:,} tokens; this server takes at most {limits.prompt_tokens:,}",
                           "prompt", limits.prompt_tokens)
    most = min(limits.context, n_ctx)
    whose = "the model's context" if n_ctx <= limits.context else "this server's context limit"
    if n_prompt > most or (n_prompt == most and max_new_tokens > 0):  # the prompt's own fault, as `tracer trace` says
        raise RequestError(422, f"prompt: {n_prompt:,} tokens, {'longer than' if n_prompt > most else 'as long as'} "
                                f"{whose} of {most:,} tokens, which must also hold the new ones; shorten it to at most "
                                f"{most - max(max_new_tokens, 1):,} tokens", "prompt", most)
    if n_prompt + max_new_tokens > most:
        raise RequestError(422, f"max_new_tokens: the prompt's {n_prompt:,} tokens and {max_new_tokens:,} new ones pass "
                                f"{whose} of {most:,} tokens (at most {max(most - n_prompt, 0):,} new tokens here)",
                           "context", most)
