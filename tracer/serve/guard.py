"""The connections of `tracer serve`: what a socket may hold, and for how long.

uvicorn's h11 protocol starts no timer before a request arrives, and its `limit_concurrency` counts every
open socket: 255 sockets that sent nothing made it answer everyone else its plain-text 503 for as long as
they were held. So here (`Guarded`, uvicorn's `H11Protocol` with deadlines):
  - a connection must send a request's complete headers within HEADER_SECONDS of connecting (or of
    starting its next request), and its body within BODY_SECONDS of its headers; else it is closed;
  - a response the client does not read (its send buffer full) for WRITE_SECONDS closes the connection;
  - beyond `most_open` open connections (kept below the process's file limit), a new one closes the
    connection that has waited longest without sending complete headers;
and uvicorn's own limit is not used: `InFlight` counts only requests whose headers have arrived, and
beyond its limit answers the JSON 503 with Retry-After that the page knows how to wait on. Sockets that
send nothing or half a request line therefore reach no limit; they cost a file descriptor for a few
seconds each.
"""

from __future__ import annotations

import json
import time

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_SECONDS = 5.0  # from connecting (or from the previous answer's end) to a request's complete headers
BODY_SECONDS = 10.0  # from the headers to the end of the body (16 KB, or the few MB read to answer 413)
WRITE_SECONDS = 30.0  # a client that reads nothing of its answer for this long is let go
RESERVE_FILES = 64  # file descriptors kept for everything else (the models' files, logs, the listening socket)


def raise_file_limit(want: int = 4_096) -> int:
    """Raise this process's open-file limit towards `want` (within the hard limit); returns the limit."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        return int(soft) if soft != resource.RLIM_INFINITY else want
    except (ImportError, ValueError, OSError):
        return 1_024


class Guarded(H11Protocol):
    """uvicorn's h11 protocol with a deadline for a request's headers and body, one for a client that
    reads nothing, and the oldest idle connection closed when too many are open."""

    most_open = 1_024 - RESERVE_FILES  # set by `tracer serve` from the file limit (`raise_file_limit`)
    header_seconds, body_seconds, write_seconds = HEADER_SECONDS, BODY_SECONDS, WRITE_SECONDS
    closed_idle = 0  # connections closed for sending no complete request in time (all instances)

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._timer = self._writing = None
        self._phase = None
        self._since = time.monotonic()
        self._wait("headers")
        if len(self.connections) > self.most_open:
            self._close_longest_idle()

    # ---- the deadlines

    def _wait(self, phase: str | None) -> None:
        """Start the deadline of `phase` ("headers", "body"), or none (None), replacing the one running."""
        if phase == self._phase:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._phase = phase
        if phase is not None and not self.transport.is_closing():
            self._since = time.monotonic()
            seconds = self.header_seconds if phase == "headers" else self.body_seconds
            self._timer = self.loop.call_later(seconds, self._too_slow, phase)

    def _too_slow(self, phase: str) -> None:
        self._timer = None
        if self._phase == phase and not self.transport.is_closing():
            if phase == "headers":
                Guarded.closed_idle += 1
            self.transport.close()

    def _follow(self) -> None:
        """Which deadline applies, from where the request is: waiting for headers, reading the body, or neither."""
        if self.transport.is_closing():
            self._wait(None)
            return
        state = self.conn.their_state
        if state is h11.IDLE and (self.cycle is None or self.cycle.response_complete):
            if self._phase != "headers" and self._data_pending():  # a next request begun: its headers' deadline
                self._wait("headers")
        elif state is h11.SEND_BODY:
            self._wait("body")
        else:
            self._wait(None)

    def _data_pending(self) -> bool:
        """Part of a next request has arrived (uvicorn then stops its keep-alive timer)."""
        return bool(self.conn.trailing_data[0])

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc) -> None:
        self._wait(None)
        if self._writing is not None:
            self._writing.cancel()
            self._writing = None
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """A malformed request: uvicorn's plain 400, unless an answer to the connection's previous request
        is being written (a body that breaks HTTP after a GET's headers): then the connection is only
        closed, since h11 cannot start a second answer and the app's would end in a traceback."""
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            self.transport.close()
            return
        super().send_400_response(msg)

    # ---- a client that reads nothing

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._writing is None:
            self._writing = self.loop.call_later(self.write_seconds, self._not_reading)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._writing is not None:
            self._writing.cancel()
            self._writing = None

    def _not_reading(self) -> None:
        self._writing = None
        if not self.transport.is_closing():
            self.transport.abort()

    # ---- too many open

    def _close_longest_idle(self) -> None:
        """Close the connection that has waited longest for a request's headers (never one being answered)."""
        waiting = [c for c in self.connections if isinstance(c, Guarded) and c is not self and c._phase == "headers"
                   and not c.transport.is_closing()]
        if waiting:
            oldest = min(waiting, key=lambda c: c._since)
            Guarded.closed_idle += 1
            oldest.transport.close()


class InFlight:
    """ASGI middleware: at most `most` requests (complete headers received) handled at once; beyond that
    the JSON 503 with Retry-After every other refusal of this server has."""

    def __init__(self, app, most: int = 256, retry_after: int = 1):
        self.app, self.most, self.retry_after = app, int(most), int(retry_after)
        self.now = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.now >= self.most:
            body = json.dumps({"error": f"busy: {self.most:,} requests are being answered; try again in "
                                        f"{self.retry_after} s", "retry_after": self.retry_after}).encode()
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"application/json"), (b"retry-after", str(self.retry_after).encode()),
                (b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff"),
                (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body})
            return
        self.now += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.now -= 1
