"""A led lesson on `tracer serve --lesson FILE.toml`: the class's page and the teacher's, their routes, the
pinned model and settings, and what the terminal prints at start (the join address, its QR code, the
teacher's address with its secret).

Routes (docs/lesson.md):
- `GET /`: the class's page, the served page with the lesson's bar (`#lesson-bar`: `#follow`, `#lesson-step`,
  `#lesson-status`) and the question (`#question`) above the prompt box, opening on the starter prompt;
- `GET /api/lesson/events`: the state as server-sent events for a following page (`room.Room.events`);
  `?page=ID` (or Last-Event-ID) joins again as the same page;
- `POST /api/lesson/answer`: `{page, lesson_step, choice}`;
- `GET /api/lesson/state`: the state, how many pages follow and how many may;
- `GET /teach/{secret}`: the teacher's page (the lesson's notes, ◀ ▶ through its steps, the tally, the
  answer's reveal, the join address and its QR code); any other secret is 403;
- `GET /teach/{secret}/events`, `POST /teach/{secret}/move`: the teacher's stream (the state, the tally, how
  many follow) and moves.

Every refusal is JSON as the rest of the server's. A student's request to `/api/trace` runs with the pinned
settings: one it leaves out takes the lesson's value, another value is 422 naming the setting; the model is the
lesson's, the only one served. Nothing a
student sends reaches another page: their prompts go to `/api/trace` and back to them alone, their answers
only into counts.
"""

from __future__ import annotations

import dataclasses
import hmac
import html
import json
import time

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from ..errors import TracerError
from ..render.page.html import json_for_script
from ..render.words import LESSON_PAGE_WORDS, say
from ..run import settings as declared
from ..scenario.lesson import check_with_model, page_steps
from ..tokenizers.tokens import show_invisible
from .app import SECURITY, drain, json_response, read_body, refusal
from .limits import RequestError, TraceRequest
from .page import asset, served_page
from .room import BODY_BYTES, EVENTS_PER_SECOND, TEACHER_STREAMS, Refused, Room


class Lead:
    """The lesson `lesson` (`tracer.scenario.lesson.Lesson`) led on `model` (checked against it here):
    `followers` pages follow at once, `per_address` from one address."""

    def __init__(self, lesson, model, limits, followers: int = 100, per_address: int = 8):
        check_with_model(lesson, model)
        new = lesson.settings.get("max_new_tokens", declared.setting("max_new_tokens").run_default)
        if new > limits.max_new_tokens:
            raise TracerError(f"{lesson.path}: generate.max_new_tokens: {new} is more than this server's "
                              f"--max-new-tokens {limits.max_new_tokens}")
        cfg = model.config
        self.lesson, self.url = lesson, ""
        self.room = Room(lesson, cfg.n_layers, cfg.n_heads, max(new, 1), page_steps(lesson.settings), followers,
                         per_address)
        self.teacher_page = self.class_page = b""
        self.csp = {}

    # ------------------------------------------------------------------ what the server asks of it

    def example(self, engine) -> dict:
        """The starter run every page opens on: the lesson's prompt with its pinned settings, traced without
        the time limit (`engine.example_seconds` says how long it took, as `Engine.example` does)."""
        started = time.monotonic()
        try:
            return engine.answer(TraceRequest(self.lesson.prompt, self.lesson.model, dict(self.lesson.settings)),
                                 limited=False)
        finally:
            engine.example_seconds = time.monotonic() - started

    def pin(self, req: TraceRequest, body: bytes) -> TraceRequest:
        """A student's request (`body`: its JSON, already checked) with the pinned settings: those it leaves out
        take the lesson's value, one it gives otherwise is refused (422 naming it)."""
        given = json.loads(body.decode("utf-8"), parse_constant=lambda c: float("nan"))
        for name, pinned in self.lesson.settings.items():
            if name in given and req.settings.get(name) != pinned:
                raise RequestError(422, f"{name}: this lesson pins it to {shown(pinned)}", name, pinned)
        return dataclasses.replace(req, settings={**req.settings, **self.lesson.settings})

    def pages(self, data: dict, models: list[dict], limits: dict, request: dict, settings: list[dict]) -> tuple[str, str]:
        """Build the teacher's page and the class's (kept) and return the class's with its CSP, as `served_page`."""
        for role in ("teacher", "student"):
            text, csp = served_page(data, models, limits, request, settings, self.parts(role))
            self.csp[role] = csp
            if role == "teacher":
                self.teacher_page = text.encode("utf-8")
            else:
                self.class_page = text.encode("utf-8")
        return self.class_page.decode("utf-8"), self.csp["student"]

    def parts(self, role: str) -> tuple[str, str, str]:
        """The bar's markup, styles and script for `role`: the teacher's page carries the notes, the class's does
        not; neither carries an answer before the teacher reveals it (the projector shows the teacher's page)."""
        lesson = self.lesson
        steps = [{"show": s.show, "title": s.title, "choices": s.choices(),
                  "question": None if s.question is None else s.question.public(),
                  **({"notes": s.notes} if role == "teacher" else {})}  # no answer: the projector shows the teacher's page
                 for s in lesson.steps]
        data = {"role": role, "title": lesson.title, "steps": steps, "pinned": lesson.settings, "join": self.url,
                "qr": qr_svg(self.url) if role == "teacher" and self.url else None, "words": LESSON_PAGE_WORDS,
                "rate": EVENTS_PER_SECOND}
        w = {key.removeprefix("lesson."): html.escape(say(key), quote=True) for key in
             ("lesson.follow", "lesson.prev", "lesson.next", "lesson.reveal", "lesson.qr", "lesson.notes", "lesson.following")}
        if role == "teacher":
            bar = (f'<button id="lesson-prev" type="button" aria-label="{w["prev"]}">◀</button>'
                   f'<span id="lesson-step" aria-live="polite"></span>'
                   f'<button id="lesson-next" type="button" aria-label="{w["next"]}">▶</button>'
                   f'<span id="followers"></span><span id="join-url"></span>')
            extra = (f'<details id="lesson-notes" open><summary>{w["notes"]}</summary><p id="notes-text"></p></details>'
                     f'<img id="join-qr" alt="{w["qr"]}" hidden>')
            ask = f'<div id="tally"></div><button id="reveal" type="button">{w["reveal"]}</button>'
        else:
            bar = (f'<label id="follow-label" title="{w["following"]}"><input id="follow" type="checkbox" checked> '
                   f'{w["follow"]}</label><span id="lesson-step" aria-live="polite"></span>')
            extra, ask = "", ""
        top = (f'<div id="lesson-bar" data-role="{role}">{bar}<span id="lesson-status" role="status"></span></div>{extra}'
               f'<section id="question" hidden aria-live="polite"><p id="question-ask"></p>'
               f'<div id="question-choices" role="group"></div><p id="question-note"></p>{ask}</section>'
               f'<script type="application/json" id="lesson-data">{json_for_script(data)}</script>\n')
        return top, asset("lesson.css"), asset("lesson.js")

    # ------------------------------------------------------------------ the routes

    def routes(self) -> list[Route]:
        room = self.room

        def teacher(request: Request) -> bool:
            return hmac.compare_digest(request.path_params.get("key", "").encode("utf-8"), room.secret.encode("ascii"))

        def refused(e: Refused) -> Response:
            headers = {"Retry-After": str(e.retry_after)} if e.retry_after else None
            return refusal(e.status, e.message, headers, **({"field": e.field} if e.field else {}))

        def not_teacher() -> Response:
            return refusal(403, "not the teacher's address: the teacher's page needs the secret tracer serve printed")

        async def body_of(request: Request) -> dict:
            kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                await drain(request)  # read and dropped first: a client still sending reads the 415
                raise Refused(415, "request: send JSON (Content-Type: application/json)")
            try:
                raw = await read_body(request, BODY_BYTES)
            except RequestError as e:
                raise Refused(e.status, e.message, e.field) from None
            try:
                data = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                raise Refused(400, "request: not a JSON object in UTF-8") from None
            if not isinstance(data, dict):
                raise Refused(400, "request: expected a JSON object")
            return data

        async def teacher_page(request: Request) -> Response:
            if not teacher(request):
                return not_teacher()
            return HTMLResponse(self.teacher_page, headers={**SECURITY, "Content-Security-Policy": self.csp["teacher"]})

        async def teacher_events(request: Request) -> Response:
            if not teacher(request):
                return not_teacher()
            try:
                room.teacher_joins()
            except Refused as e:
                return refused(e)
            return room.stream(None, SECURITY)

        async def move(request: Request) -> Response:
            if not teacher(request):
                return not_teacher()
            try:
                room.move(await body_of(request))
            except Refused as e:
                return refused(e)
            return json_response(room.teacher_view())

        async def events(request: Request) -> Response:
            asked = request.query_params.get("page") or request.headers.get("last-event-id")
            address = request.client.host if request.client else None
            try:
                page = room.join(address, asked)
            except Refused as e:
                return refused(e)
            return room.stream(page, SECURITY, address)

        async def answer(request: Request) -> Response:
            try:
                room.answer(await body_of(request))
            except Refused as e:
                return refused(e)
            return json_response({"taken": True})

        async def state(request: Request) -> Response:
            return json_response(room.public())

        return [Route("/teach/{key}", teacher_page, methods=["GET", "HEAD"]),
                Route("/teach/{key}/events", teacher_events, methods=["GET"]),
                Route("/teach/{key}/move", move, methods=["POST"]),
                Route("/api/lesson/events", events, methods=["GET"]),
                Route("/api/lesson/answer", answer, methods=["POST"]),
                Route("/api/lesson/state", state, methods=["GET"])]

    # ------------------------------------------------------------------ the start

    def streams(self) -> int:
        """The connections the lesson may hold open at once (for uvicorn's limit)."""
        return self.room.most + TEACHER_STREAMS

    def announce(self, say_line, join: str, teacher_base: str, local: bool) -> None:
        """Print the lesson, the join address and its QR code, and the teacher's address (once)."""
        lesson = self.lesson
        pinned = ", ".join(f"{k} {shown(v)}" for k, v in lesson.settings.items()) or "nothing"
        say_line(say("lesson.terminal.lesson", title=show_invisible(lesson.title), steps=str(len(lesson.steps)),
                     questions=str(len(lesson.questions)), model=lesson.model, pinned=pinned,
                     followers=f"{self.room.most:,}", rate=str(EVENTS_PER_SECOND)))
        say_line(say("lesson.terminal.join", url=join))
        say_line(qr_text(join))
        if local:
            say_line(say("lesson.terminal.local"))
        say_line(say("lesson.terminal.teacher", url=f"{teacher_base}teach/{self.room.secret}"))


def shown(v) -> str:
    """A pinned value as the terminal writes it: 0 for 0.0, 0.8, 5."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def qr_code(url: str):
    import segno

    return segno.make(url, error="m", micro=False)


def qr_text(url: str) -> str:
    """The QR code of `url` in Unicode half blocks (two rows of modules a line), light modules drawn: read on a
    dark terminal as printed, and by most phones' cameras on a light one too (they read inverted codes)."""
    import io

    out = io.StringIO()
    qr_code(url).terminal(out=out, compact=True, border=2)
    return out.getvalue().rstrip("\n")


def qr_svg(url: str) -> str:
    """The QR code of `url` as an SVG data URI (the teacher's page shows it for the projector)."""
    return qr_code(url).svg_data_uri(scale=6, border=4)
