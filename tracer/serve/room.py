"""The class that follows the teacher (`tracer serve --lesson`): where the teacher is, who follows, and the
answers to the questions, each bounded.

The state is one small object (the lesson's step, the page's step, layer, head, token and pass, the
question's status), changed only by the teacher (`move`); a page that follows gets it through server-sent
events. Nothing queues for a page: each stream keeps the version it last sent and, when woken, sends the
state as it is then (`EVENTS_PER_SECOND` at most: the states between two sends are skipped, never
stored), so a slow page costs what a fast one does and a page that left costs nothing once its stream
ends (the response listens for the disconnect and ends at once, `EventStream`). The event's bytes are
made once per version and shared by every stream.

Bounds: `most` streams of pages that follow at once (503 beyond, with Retry-After), `per_address` from one address (429),
`TEACHER_STREAMS` teacher pages; the teacher's moves `MOVES_PER_SECOND` (429), a page's answers
`ANSWERS_PER_SECOND` (429), one answer per page per question (a new one replaces it), and the answers of a
question at most twice `most` (pages that answered and left still count; 503 past that). A page is known by
an id the server signs (HMAC with the teacher's secret), given with its first event and sent back with its
answers and when it joins again, so a page that reconnects is the same page (even before its old stream is
seen to end) and a forged id is refused.
Counts only: the tally says how many pages chose each answer, never which.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections import deque

import anyio
from starlette.responses import StreamingResponse

from ..render.page.html import json_for_script

EVENTS_PER_SECOND = 5  # the most events one page is sent each second (the latest state; the ones between are skipped)
HEARTBEAT = 15.0  # seconds between two comment lines on a quiet stream (proxies close silent connections)
PER_ADDRESS = 8  # pages one address may have following at once (0: no such limit)
TEACHER_STREAMS = 4  # the teacher's pages open at once (a laptop and a projector)
MOVES_PER_SECOND = 20  # the teacher's moves the server takes each second
ANSWERS_PER_SECOND = 2  # one page's answers the server takes each second
BODY_BYTES = 1_024  # a move's or an answer's JSON
MOVE_KEYS = ("lesson_step", "show", "layer", "head", "token", "n_prompt", "pass", "reveal")
MOST_POSITION = 100_000  # a token's position and a prompt's length, as a move may give them


class Refused(Exception):
    """A request the room refuses: `status`, a one-line message, the field, and when to try again."""

    def __init__(self, status: int, message: str, field: str | None = None, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.message, self.field, self.retry_after = status, message, field, retry_after


class Room:
    """The state of a led lesson: `lesson` (`tracer.scenario.lesson.Lesson`) on a model of `n_layers` and
    `n_heads` with `passes` passes; `most` pages following at once, `per_address` from one address."""

    def __init__(self, lesson, n_layers: int, n_heads: int, passes: int, page_steps, most: int = 100,
                 per_address: int = PER_ADDRESS, secret: str | None = None):
        self.lesson, self.most, self.per_address = lesson, int(most), int(per_address)
        self.bounds = {"layer": max(n_layers, 1), "head": max(n_heads, 1), "pass": max(passes, 1),
                       "token": MOST_POSITION, "n_prompt": MOST_POSITION + 1}
        self.page_steps = list(page_steps)
        self.secret = secret or secrets.token_urlsafe(18)  # the teacher's: printed once, in the teacher's address
        self._key = hashlib.sha256(b"tracer lesson pages " + self.secret.encode()).digest()
        self.followers: dict[str, dict] = {}  # page id → {"answers": deque of times, "streams": how many are open}
        self.addresses: dict[str, int] = {}  # address → the streams open from it
        self.open = 0  # the followers' streams open
        self.teachers = 0
        self.status: dict[int, str] = {}  # lesson step → "open" or "shown"
        self.answers: dict[int, dict[str, int]] = {}  # lesson step → page id → the chosen index
        self.moves: deque = deque()
        self.version = self.tally_version = 0
        self.stopped = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self.state: dict = {}
        self._event = b""
        self._set(self._at(0, {}))

    # ------------------------------------------------------------------ the teacher's moves

    def _at(self, i: int, given: dict) -> dict:
        """The state on lesson step `i`, the page's choices as given (else the step's, else the state's)."""
        step = self.lesson.steps[i]
        out = {k: self.state.get(k) for k in ("layer", "head", "token", "n_prompt", "pass")}
        out.update({"lesson_step": i, "show": step.show})
        out.update({k: v for k, v in given.items() if k in out})
        question = None
        if step.question is not None:
            status = self.status.setdefault(i, "open")
            question = {"status": status, **({"answer": step.question.answer} if status == "shown" else {})}
        return {**out, "question": question}

    def _set(self, state: dict) -> bool:
        if state == self.state:
            return False
        self.state, self.version = state, self.version + 1
        self._event = b"data: " + json_for_script({**state, "version": self.version}).encode("ascii") + b"\n\n"
        self._wake()
        return True

    def move(self, body: dict) -> dict:
        """The teacher's move: `body` names the lesson's step and the page's choices (any of MOVE_KEYS); the
        new state. `reveal: true` shows the answer of the current step's question."""
        now = time.monotonic()
        while self.moves and now - self.moves[0] > 1:
            self.moves.popleft()
        if len(self.moves) >= MOVES_PER_SECOND:
            raise Refused(429, f"move: more than {MOVES_PER_SECOND} moves a second; the class sees the last one", None, 1)
        self.moves.append(now)
        unknown = [str(k)[:40] for k in body if k not in MOVE_KEYS]
        if unknown:
            raise Refused(422, f"move: unknown field {unknown[0]}; the fields are {', '.join(MOVE_KEYS)}", unknown[0])
        given = {}
        i = body.get("lesson_step", self.state["lesson_step"])
        if not _whole(i) or not 0 <= i < len(self.lesson.steps):
            raise Refused(422, f"lesson_step: a whole number from 0 to {len(self.lesson.steps) - 1}", "lesson_step")
        if "show" in body:
            if body["show"] not in self.page_steps:
                raise Refused(422, f"show: one of the page's steps ({', '.join(self.page_steps)})", "show")
            given["show"] = body["show"]
        for key, most in self.bounds.items():
            if key in body:
                v = body[key]
                if v is not None and (not _whole(v) or not 0 <= v < most):
                    raise Refused(422, f"{key}: a whole number from 0 to {most - 1}, or null", key)
                given[key] = v
        reveal = body.get("reveal", False)
        if not isinstance(reveal, bool):
            raise Refused(422, "reveal: true or false", "reveal")
        if reveal:
            if self.lesson.steps[i].question is None:
                raise Refused(422, f"reveal: lesson step {i} asks no question", "reveal")
            self.status[i] = "shown"
        state = self._at(i, given)
        if "show" in given:
            state["show"] = given["show"]
        self._set(state)
        return self.state

    # ------------------------------------------------------------------ the pages and their answers

    def _sign(self, nonce: str) -> str:
        return hmac.new(self._key, nonce.encode("ascii"), hashlib.sha256).hexdigest()[:20]

    def page_id(self, asked) -> str:
        """`asked` when it is an id this server signed (a page joining again, or joining again before its last
        stream was seen to end), else a new one."""
        if isinstance(asked, str) and 0 < len(asked) <= 64 and asked.count(".") == 1:
            nonce, sig = asked.split(".")
            if nonce.isascii() and hmac.compare_digest(sig, self._sign(nonce)):
                return asked
        nonce = secrets.token_urlsafe(12)
        return f"{nonce}.{self._sign(nonce)}"

    def join(self, address: str | None, asked=None) -> str:
        """A stream of a page of `address` opens: the page's id, or Refused when the class is full. A page that
        joins again with its id is the same page (its answer kept), also while its old stream is still open (a
        phone whose network dropped: the server sees that stream end only at its next write)."""
        if self.stopped:
            raise Refused(503, "stopping: the lesson has ended", None, 5)
        if self.open >= self.most:
            raise Refused(503, f"the class is full: {self.most:,} pages follow (tracer serve --followers)", None, 5)
        address = address or "?"
        if self.per_address and self.addresses.get(address, 0) >= self.per_address:
            raise Refused(429, f"too many pages from this address ({self.per_address} follow at once)", None, 5)
        page = self.page_id(asked)
        self.followers.setdefault(page, {"answers": deque(), "streams": 0})["streams"] += 1
        self.addresses[address] = self.addresses.get(address, 0) + 1
        self.open += 1
        self._crowd()
        return page

    def leave(self, page: str, address: str | None) -> None:
        """A stream of `page` (opened from `address`) ended; the page leaves when its last one has."""
        entry = self.followers.get(page)
        if entry is None:
            return
        entry["streams"] -= 1
        if entry["streams"] <= 0:
            del self.followers[page]
        address = address or "?"
        left = self.addresses.get(address, 1) - 1
        if left > 0:
            self.addresses[address] = left
        else:
            self.addresses.pop(address, None)
        self.open -= 1
        self._crowd()

    def teacher_joins(self) -> None:
        if self.stopped:
            raise Refused(503, "stopping: the lesson has ended", None, 5)
        if self.teachers >= TEACHER_STREAMS:
            raise Refused(429, f"the teacher's page is open {TEACHER_STREAMS} times already", None, 5)
        self.teachers += 1

    def teacher_leaves(self) -> None:
        self.teachers -= 1

    def answer(self, body: dict) -> None:
        """A page's answer: {"page": its id, "lesson_step": the step asking, "choice": the chosen index}."""
        unknown = [str(k)[:40] for k in body if k not in ("page", "lesson_step", "choice")]
        if unknown:
            raise Refused(422, f"answer: unknown field {unknown[0]}; the fields are page, lesson_step, choice", unknown[0])
        page = body.get("page")
        if not isinstance(page, str) or page not in self.followers:
            raise Refused(403, "page: not a page following this class now (join first)", "page")
        i = body.get("lesson_step")
        if not _whole(i) or not 0 <= i < len(self.lesson.steps) or self.lesson.steps[i].question is None:
            raise Refused(422, "lesson_step: not a step of this lesson that asks a question", "lesson_step")
        question = self.lesson.steps[i].question
        choice = body.get("choice")
        if not _whole(choice) or not 0 <= choice < len(question.choices):
            raise Refused(422, f"choice: a whole number from 0 to {len(question.choices) - 1}", "choice")
        if self.status.get(i) != "open":
            raise Refused(409, "closed: the answer is shown" if self.status.get(i) else "not asked yet: the teacher "
                                                                                        "has not come to this question", "lesson_step")
        times, now = self.followers[page]["answers"], time.monotonic()
        while times and now - times[0] > 1:
            times.popleft()
        if len(times) >= ANSWERS_PER_SECOND:
            raise Refused(429, f"answer: at most {ANSWERS_PER_SECOND} answers a second", "choice", 1)
        times.append(now)
        answers = self.answers.setdefault(i, {})
        if page not in answers and len(answers) >= 2 * self.most:
            raise Refused(503, "answer: this question has all the answers it takes", "choice", 5)
        answers[page] = choice
        self.tally_version += 1
        self._wake()

    def tally(self, i: int | None = None) -> dict | None:
        """The counts of lesson step `i`'s question (default: the current step's): pages per choice, no more."""
        i = self.state["lesson_step"] if i is None else i
        question = self.lesson.steps[i].question
        if question is None:
            return None
        counts = [0] * len(question.choices)
        for choice in self.answers.get(i, {}).values():
            counts[choice] += 1
        return {"lesson_step": i, "counts": counts, "answered": sum(counts)}

    def teacher_view(self) -> dict:
        return {**self.state, "version": self.version, "tally": self.tally(), "followers": len(self.followers)}

    def public(self) -> dict:
        """`GET /api/lesson/state`: the state, how many follow and how many may."""
        return {**self.state, "version": self.version, "followers": len(self.followers), "most": self.most}

    # ------------------------------------------------------------------ the streams

    def _crowd(self) -> None:
        self.tally_version += 1  # the teacher's page shows how many follow
        self._wake()

    def _wake(self) -> None:
        if self._changed is not None:
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    def stop(self) -> None:
        """End every stream (the server is stopping); safe from a signal handler or another thread."""
        self.stopped = True
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._wake)

    async def events(self, page: str | None):
        """The event stream of a following page (`page`: its id) or of the teacher's (None)."""
        if self.loop is None:
            self.loop, self._changed = asyncio.get_running_loop(), asyncio.Event()
        head = b"retry: 3000\n" + (b"id: " + page.encode("ascii") + b"\n" if page else b"")
        sent = None
        while not self.stopped:
            mark = self.version if page else (self.version, self.tally_version)
            if mark != sent:
                sent = mark
                yield head + (self._event if page else
                              b"data: " + json_for_script(self.teacher_view()).encode("ascii") + b"\n\n")
                await asyncio.sleep(1 / EVENTS_PER_SECOND)
                continue
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), HEARTBEAT)
            except TimeoutError:
                yield b": still here\n\n"

    def stream(self, page: str | None, headers: dict, address: str | None = None) -> "EventStream":
        """The response that streams `events(page)` (opened from `address`); when it ends (the page left, or the
        server stops), the stream leaves the class."""
        done = (lambda: self.leave(page, address)) if page else self.teacher_leaves
        return EventStream(self.events(page), on_close=done, media_type="text/event-stream",
                           headers={**headers, "X-Accel-Buffering": "no"})


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class EventStream(StreamingResponse):
    """A streaming response that ends as soon as the client leaves (it listens for the disconnect whatever the
    server's ASGI version), then calls `on_close` once: nothing is kept for a page that is gone."""

    def __init__(self, content, on_close, **kw):
        super().__init__(content, **kw)
        self.on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            async with anyio.create_task_group() as group:
                async def stream() -> None:
                    try:
                        await self.stream_response(send)
                    except OSError:  # the client left while we wrote
                        pass
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                await self.listen_for_disconnect(receive)
                group.cancel_scope.cancel()
        finally:
            await self.body_iterator.aclose()
            self.on_close()
