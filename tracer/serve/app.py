"""The routes of `tracer serve` (Starlette):

- `GET /`: the classroom page with the prompt box (`serve.page`), opening on the example run;
- `POST /api/trace`: `{prompt, model, <the served generation settings>, chat}` → what
  `tracer trace --json` prints and the page's data under "page" (`serve.engine`);
- `GET /api/limits`: what one request may ask (`serve.limits.Limits`: the most of each setting by its name;
  "settings": their declarations, as the form's script reads them), the served models, the pool;
- `GET /api/health`: "ok" and the pool's state;
- with `--lesson`, a led lesson's pages and routes (`serve.lead`).

Every refusal is JSON `{"error": "one line", "field": …, "limit": …}`: 400 malformed, 404 no such
route, 405 wrong method, 413 too large, 415 not JSON, 422 a field out of range, 429 too many from one
address at once and 503 busy (both with Retry-After). A bug of ours is a 500 with one line and no traceback. Nothing here reads or writes a
file a request names: a request chooses among the models loaded at start, by exact name.
A body that is refused unread (too large, not JSON, a wrong address) is read and dropped first, up to
DRAIN_BYTES and while it keeps coming (a pause of DRAIN_IDLE s: answered then), so that a client still
sending (one that asked to close the connection after the answer, as Python's urllib does) reads the
refusal rather than a reset connection, and one that declared a body it does not send is answered; a larger one is refused from
its Content-Length, and what it still sends is dropped until its body deadline (`guard.BODY_SECONDS`). At most `in_flight` requests
are handled at once (`guard.InFlight`: JSON 503 with Retry-After beyond it; sockets that have sent no
complete headers never count).
"""

from __future__ import annotations

import asyncio

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from ..render.page.html import json_for_script
from .engine import EXAMPLE, Busy, Engine, TooMany
from .guard import InFlight
from .limits import RequestError, parse_trace_request, served_settings
from .page import served_page

DRAIN_BYTES = 4 * 2**20  # a refused body read and dropped up to this, so that its sender reads the refusal
DRAIN_IDLE = 1.0  # seconds without a byte of a refused body after which it is answered without the rest
SECURITY = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
            "Cache-Control": "no-store"}


def json_response(obj, status: int = 200, headers: dict | None = None) -> Response:
    """JSON written as the page's data block is: ASCII, no '<', '>' or '&' (a request's text may hold them)."""
    return Response(json_for_script(obj), status_code=status, media_type="application/json",
                    headers={**SECURITY, **(headers or {})})


def refusal(status: int, message: str, headers: dict | None = None, **more) -> Response:
    return json_response({"error": message, **more}, status, headers)


def make_app(engine: Engine, hosts: list[str] | None = None, lesson=None, in_flight: int = 256) -> Starlette:
    """The ASGI app serving `engine`'s models; the example page is traced once, at start. `hosts`: the
    Host headers answered (None: any); a server on 127.0.0.1 answers only its own names, so that a web
    page whose name is made to point at 127.0.0.1 (DNS rebinding) gets 400, not the page. `lesson`: a led
    lesson (`serve.lead.Lead`): its starter run, its pages and routes, its pinned settings checked."""
    example = engine.example() if lesson is None else lesson.example(engine)
    limits, settings = engine.limits.to_dict(), served_settings(engine.limits)  # the settings as their declarations say
    make_page = served_page if lesson is None else lesson.pages
    page, csp = make_page(example["page"], engine.describe(), limits, example["request"], settings)
    page_bytes = page.encode("utf-8")

    async def index(request: Request) -> Response:
        return HTMLResponse(page_bytes, headers={**SECURITY, "Content-Security-Policy": csp})

    async def api_limits(request: Request) -> Response:
        return json_response({"limits": limits, "settings": settings, "models": engine.describe(), "default_model": engine.default,
                              "example": EXAMPLE, "workers": engine.workers, "queue": engine.queue})

    async def health(request: Request) -> Response:
        return json_response({"status": "ok", "running_or_waiting": engine.taken, "answered": engine.answered,
                              "refused": engine.refused})

    async def api_trace(request: Request) -> Response:
        try:
            # application/json only: a page elsewhere cannot post it here without the CORS check this server never passes
            kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                await drain(request)
                raise RequestError(415, "request: send JSON (Content-Type: application/json)")
            body = await read_body(request, engine.limits.body_bytes)
            req = parse_trace_request(body, list(engine.models), engine.limits, engine.default)
            if lesson is not None:
                req = lesson.pin(req, body)
            answer = await engine.trace(req, request.client.host if request.client else None)
        except asyncio.CancelledError:  # the server stopped waiting (its graceful shutdown ran out): a short answer
            return refusal(503, "stopping: the server is shutting down", {"Retry-After": "5"}, retry_after=5)
        except ClientDisconnect:  # the client left (or was let go for sending its body too slowly): no one to answer
            return Response(status_code=400, headers={"Connection": "close"})
        except RequestError as e:
            return json_response(e.to_dict(), e.status)
        except Busy as e:
            return refusal(503, str(e), {"Retry-After": str(e.retry_after)}, retry_after=e.retry_after)
        except TooMany as e:
            return refusal(429, str(e), {"Retry-After": str(e.retry_after)}, retry_after=e.retry_after)
        except MemoryError:
            return refusal(503, "busy: not enough memory for this trace now; try again", {"Retry-After": "5"},
                           retry_after=5)
        return Response(answer, media_type="application/json", headers=SECURITY)

    async def favicon(request: Request) -> Response:  # browsers ask for one; there is none, and that is no error
        return Response(status_code=204, headers=SECURITY)

    async def not_found(request: Request, exc: HTTPException) -> Response:
        words = {404: "no such page here: try / or /api/limits", 405: "method not allowed here"}
        await drain(request)
        return refusal(exc.status_code, words.get(exc.status_code, exc.detail or "refused"))

    async def bug(request: Request, exc: Exception) -> Response:
        return refusal(500, f"internal error: {type(exc).__name__} (a bug in tracer; please report it)")

    routes = [Route("/", index, methods=["GET", "HEAD"]), Route("/api/trace", api_trace, methods=["POST"]),
              Route("/api/limits", api_limits, methods=["GET"]), Route("/api/health", health, methods=["GET"]),
              Route("/favicon.ico", favicon, methods=["GET"])] + (lesson.routes() if lesson is not None else [])
    middleware = [Middleware(InFlight, most=in_flight)]  # a lesson's streams count: `in_flight` makes room for them
    middleware += [Middleware(TrustedHostMiddleware, allowed_hosts=hosts)] if hosts else []
    return Starlette(routes=routes, middleware=middleware, exception_handlers={HTTPException: not_found, Exception: bug})


async def read_body(request: Request, most: int) -> bytes:
    """The body, read only while it is at most `most` bytes; a longer one is refused (413) once it has
    been read and dropped (up to DRAIN_BYTES: a client still sending then reads the refusal), or at once
    from its Content-Length when it declares more than that."""
    length = request.headers.get("content-length")
    if length is not None:
        if not (length.isascii() and length.isdigit()):
            raise RequestError(400, "request: a Content-Length that is not a number")
        if int(length) > most:
            if int(length) <= DRAIN_BYTES:
                await drain(request)
            raise RequestError(413, f"request: {int(length):,} bytes; this server takes at most {most:,}", "body", most)
    chunks, size = [], 0
    stream = request.stream().__aiter__()
    async for chunk in stream:
        size += len(chunk)
        if size > most:
            await drain(request, DRAIN_BYTES - size, stream)
            raise RequestError(413, f"request: more than {most:,} bytes; this server takes at most {most:,}", "body", most)
        chunks.append(chunk)
    return b"".join(chunks)


async def drain(request: Request, most: int = DRAIN_BYTES, stream=None) -> None:
    """Read and drop what is left of the body (of `stream`, the body's iterator already begun), up to `most`
    bytes and while it keeps coming: a client that sends nothing for DRAIN_IDLE seconds (headers that
    declare a body it does not send) is answered then. A longer one is left: the connection closes."""
    stream = request.stream().__aiter__() if stream is None else stream
    size = 0
    try:
        while size <= most:
            size += len(await asyncio.wait_for(stream.__anext__(), DRAIN_IDLE))
    except (StopAsyncIteration, asyncio.TimeoutError, ClientDisconnect, RuntimeError):  # its end, a pause, gone, read
        return
