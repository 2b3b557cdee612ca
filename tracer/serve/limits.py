"""What one request may ask of `tracer serve`, stated once (`GET /api/limits` shows it), and the
request body checked against it before any model runs.

`parse_trace_request` turns the bytes of a `POST /api/trace` into a `TraceRequest` or raises
`RequestError`, whose `status` (400 malformed, 413 too large, 422 a field out of range or of the
wrong type) and one-line message say which field and which limit. Every check is on types and
sizes only: nothing here reads a file, and a model is one of the names the server was started
with, matched exactly (a path, `../x` or a Hugging Face name is just an unknown name, and the
answer never repeats it).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

FIELDS = ("prompt", "model", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "chat")


@dataclass(frozen=True)
class Limits:
    body_bytes: int = 16_384  # a request's JSON; a bigger body is refused before it is read whole
    prompt_chars: int = 2_000  # characters of the prompt, before tokenizing
    prompt_tokens: int = 256  # tokens of the prompt (chat template included)
    max_new_tokens: int = 16  # new tokens one request may ask for
    context: int = 272  # prompt + new tokens (and never more than the model's own context)
    seconds: float = 10.0  # time one trace may run once a worker has it; the run is cut after that
    seed: int = 2**32 - 1  # seeds up to this
    per_client: int = 2  # requests one address may have running or waiting (0: no such limit)

    def to_dict(self) -> dict:
        return asdict(self)


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
    max_new_tokens: int = 2  # as `tracer trace`: G, then one pass through the KV cache
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    chat: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def _whole(name: str, v, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and (not math.isfinite(v)
                                                                                           or v != int(v))):
        raise RequestError(422, f"{name}: must be a whole number, got {_kind(v)}", name)
    v = int(v)
    if not lo <= v <= hi:
        raise RequestError(422, f"{name}: {v:,} is out of range; this server takes {lo:,} to {hi:,}", name, hi)
    return v


def _number(name: str, v, lo: float, hi: float, low_open: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise RequestError(422, f"{name}: must be a number, got {_kind(v)}", name)
    v = float(v)
    if not (lo < v if low_open else lo <= v) or v > hi:
        raise RequestError(422, f"{name}: {v:g} is out of range; this server takes {'above ' if low_open else ''}"
                                f"{lo:g} to {hi:g}", name, hi)
    return v


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
    unknown = [str(k) for k in data if k not in FIELDS]
    if unknown:
        shown = ", ".join(k[:40] for k in unknown[:5])
        raise RequestError(422, f"request: unknown field {shown}; the fields are {', '.join(FIELDS)}", unknown[0][:40])
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
    n = _whole("max_new_tokens", data.get("max_new_tokens", TraceRequest.max_new_tokens), 0, limits.max_new_tokens)
    temperature = _number("temperature", data.get("temperature", 0.0), 0.0, 100.0)
    top_k = data.get("top_k")
    top_k = None if top_k is None else _whole("top_k", top_k, 1, 1_000_000)
    top_p = data.get("top_p")
    top_p = None if top_p is None else _number("top_p", top_p, 0.0, 1.0, low_open=True)
    seed = _whole("seed", data.get("seed", 0), 0, limits.seed)
    chat = data.get("chat", False)
    if not isinstance(chat, bool):
        raise RequestError(422, f"chat: must be true or false, got {_kind(chat)}", "chat")
    return TraceRequest(prompt, model, n, temperature, top_k, top_p, seed, chat)


def check_context(n_prompt: int, max_new_tokens: int, n_ctx: int, limits: Limits) -> None:
    """The tokenized prompt against the limits and the model's context."""
    if n_prompt > limits.prompt_tokens:
        raise RequestError(413, f"prompt: {n_prompt:,} tokens; this server takes at most {limits.prompt_tokens:,}",
                           "prompt", limits.prompt_tokens)
    most = min(limits.context, n_ctx)
    if n_prompt + max_new_tokens > most:
        whose = "the model's context" if n_ctx <= limits.context else "this server's context limit"
        raise RequestError(422, f"max_new_tokens: the prompt's {n_prompt:,} tokens and {max_new_tokens:,} new ones pass "
                                f"{whose} of {most:,} tokens (at most {max(most - n_prompt, 0):,} new tokens here)",
                           "context", most)
