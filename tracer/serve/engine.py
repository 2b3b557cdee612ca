"""The decoder behind `tracer serve`: the models loaded once and shared, a bounded pool of worker
threads, and what one trace answers.

numpy releases the GIL inside its products and the models' weights are only read, so threads share
one copy of every model. At most `workers` traces run at once and `queue` more wait; a request
beyond that is refused at once (`Busy`, answered 503 with Retry-After), so the waiting line never
grows; one client (an address) may have `Limits.per_client` requests running or waiting (`TooMany`,
answered 429 with Retry-After), so that one student pressing Enter again and again cannot fill the queue. A running trace is cut between two
layers (of a pass, or of its logit lens) when it outlives `Limits.seconds` or the server is stopping
(`TimeLimit`, `Stopping`); a chat template's render stops at the same deadline. The example the page opens
on is traced without the limit (`example_seconds` says how long it took).

One trace answers what `tracer trace --json` prints (`render.jsonout.trace_json`: prompt_ids,
generated_ids, text, settings, …) and, under "page", the classroom page's data
(`render.page.page_data`), as one JSON text escaped as the page's own data block is.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..errors import TracerError
from ..render.jsonout import json_safe, trace_json
from ..render.page import page_data
from ..render.page.html import json_for_script
from ..run.settings import GenerationSettings
from ..tokenizers.bounds import within
from ..tokenizers.tokens import check_prompt
from .limits import Limits, RequestError, TraceRequest, check_context

EXAMPLE = "A B C D E F"  # what the page shows before anyone types (the README's first prompt)


class Busy(Exception):
    """Every worker is busy and the queue is full: try again in `retry_after` seconds."""

    def __init__(self, retry_after: int, message: str | None = None):
        super().__init__(message or f"busy: every worker is running a trace and the queue is full; try again in "
                                    f"{retry_after} s")
        self.retry_after = retry_after


class TooMany(Exception):
    """One client already has `most` requests running or waiting: answered 429 with Retry-After."""

    def __init__(self, retry_after: int, most: int):
        super().__init__(f"too many requests from this address at once (at most {most} running or waiting); wait for "
                         f"the answer, or try again in {retry_after} s")
        self.retry_after = retry_after


class TimeLimit(Exception):
    pass


class Stopping(Exception):
    pass


class Engine:
    """`models` (served name → Model, the first the default), run in `workers` threads with `queue`
    more requests waiting at most."""

    def __init__(self, models: dict, workers: int = 2, queue: int = 8, limits: Limits = Limits()):
        if not models:
            raise ValueError("no model to serve")
        self.models, self.workers, self.queue, self.limits = dict(models), int(workers), int(queue), limits
        self.default = next(iter(self.models))
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="tracer-trace")
        self.lock = threading.Lock()
        self.taken = 0  # requests running or waiting
        self.clients: dict = {}  # client address → its requests running or waiting
        self.mean = 0.5  # seconds a trace takes, a moving average (for Retry-After)
        self.stopping = threading.Event()
        self.answered = self.refused = 0
        self.example_seconds = 0.0  # how long the example run took (traced at start, without the time limit)

    def describe(self) -> list[dict]:
        """The served models, for the page's model choice."""
        return [{"name": name, "chat": m.chat_template is not None, "n_ctx": int(m.config.n_ctx),
                 "layers": int(m.config.n_layers), "d_model": int(m.config.d_model)} for name, m in self.models.items()]

    def retry_after(self) -> int:
        return max(1, int(self.mean * (self.queue + self.workers) / self.workers + 0.999))

    def _take(self, client: str | None) -> None:
        """A place for one more request of `client`, or Busy / TooMany."""
        with self.lock:
            most = self.limits.per_client
            if most and client is not None and self.clients.get(client, 0) >= most:
                self.refused += 1
                raise TooMany(max(1, round(self.mean + 0.5)), most)
            if self.taken >= self.workers + self.queue or self.stopping.is_set():
                self.refused += 1
                raise Busy(self.retry_after())
            self.taken += 1
            if client is not None:
                self.clients[client] = self.clients.get(client, 0) + 1

    def _release(self, client: str | None) -> None:
        with self.lock:
            self.taken -= 1
            if client is not None:
                left = self.clients.get(client, 1) - 1
                if left > 0:
                    self.clients[client] = left
                else:
                    self.clients.pop(client, None)

    async def trace(self, req: TraceRequest, client: str | None = None) -> bytes:
        """The answer to `req` as JSON bytes; raises Busy, TooMany, RequestError. `client`: who asks (an
        address), for the per-client limit."""
        self._take(client)
        try:
            future = self.pool.submit(self.run, req)
        except RuntimeError:  # the pool has shut down: the server is stopping
            self._release(client)
            raise Busy(self.retry_after()) from None
        # the place frees when the thread is done, not when the client leaves
        future.add_done_callback(lambda _: self._release(client))
        return await asyncio.wrap_future(future)

    def run(self, req: TraceRequest) -> bytes:
        """The answer to `req` as JSON text, escaped as the page's data block is (no '<', '>', '&', ASCII only)."""
        return json_for_script(json_safe(self.answer(req))).encode("ascii")

    def threads(self) -> list:
        """The worker threads (to wait a moment for, when the server stops)."""
        return list(getattr(self.pool, "_threads", ()))

    def answer(self, req: TraceRequest, limited: bool = True) -> dict:
        """One trace, in a worker thread: check the prompt against the limits, generate, and gather the answer.
        `limited=False`: no time limit (the example the page opens on)."""
        started = time.monotonic()
        m = self.models[req.model]
        lim = self.limits
        deadline = started + lim.seconds if limited else float("inf")

        def check(*_) -> None:  # between two layers, two passes, before the lens: the deadline and the stop
            if self.stopping.is_set():
                raise Stopping()
            if time.monotonic() > deadline:
                raise TimeLimit()

        if req.chat and m.chat_template is None:
            raise RequestError(422, f"chat: the model {req.model} has no chat template", "chat")
        try:  # as `tracer trace PROMPT --chat` reads it
            check_prompt(req.prompt)
            settings = GenerationSettings(**req.settings).given_only(req.given)  # the others (the KV cache, no stop
            # string): their defaults; those the request named win over the file's suggestions (sampling "file")
            with within(deadline, self.stopping.is_set):  # a chat template stops at the deadline too
                ids = m.chat_ids(req.prompt) if req.chat else m.tokenizer.encode(req.prompt)
                check_context(len(ids) + len(req.force), settings.max_new_tokens, m.config.n_ctx, lim)
                prompt = m.prompt(req.prompt, None, settings.max_new_tokens, chat=req.chat)
            if req.force:  # a branch: the tokens before a clicked candidate, and the candidate, after the prompt
                if max(req.force) >= m.config.d_vocab:
                    raise RequestError(422, f"force: token ids of {req.model} are 0 to {m.config.d_vocab - 1:,}", "force")
                prompt = m.prompt(list(prompt.ids) + list(req.force), None, settings.max_new_tokens)
        except TracerError as e:
            field = getattr(e, "field", None) or ("chat" if req.chat else "prompt")
            raise RequestError(422, str(e).splitlines()[0], field) from None

        try:
            check()
            gen = m.generate(prompt, settings=settings, on_step=check, on_layer=check)
        except TimeLimit:
            raise RequestError(422, f"time: the trace ran longer than this server's {lim.seconds:g} s; ask for fewer "
                                    f"new tokens or a shorter prompt", "time", lim.seconds) from None
        except Stopping:
            raise Busy(self.retry_after(), "stopping: the server is shutting down; this trace was cut") from None
        except TracerError as e:  # a setting this model cannot take
            raise RequestError(422, str(e).splitlines()[0], getattr(e, "field", None) or "request") from None
        answer = {**trace_json(gen, m.tokenizer), "page": page_data(gen, m.tokenizer), "request": req.to_dict()}
        took = time.monotonic() - started
        answer["seconds"] = round(took, 4)
        with self.lock:
            self.mean = 0.8 * self.mean + 0.2 * took
            self.answered += 1
        return answer

    def example(self) -> dict:
        """The answer for the example prompt on the default model (what GET / opens on); for a model
        whose context cannot hold it, its first token alone."""
        started = time.monotonic()
        try:
            return self.answer(TraceRequest(EXAMPLE, self.default), limited=False)
        except RequestError:
            return self.answer(TraceRequest(EXAMPLE[0], self.default, {"max_new_tokens": 0}), limited=False)
        finally:
            self.example_seconds = time.monotonic() - started

    def close(self) -> None:
        """Cut running traces at their next pass, refuse new ones, and let the threads go."""
        self.stopping.set()
        self.pool.shutdown(wait=False, cancel_futures=True)
