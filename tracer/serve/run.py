"""Running `tracer serve`: the models loaded once, the socket bound, uvicorn serving the app until
Ctrl-C or SIGTERM.

The socket is bound here, before uvicorn starts, so that a port in use is one line of error and
`--port 0` takes a free port (the address printed is the one bound). Uvicorn's own signal handling
stops the server gracefully (no new connections; requests in flight get `GRACE` seconds to finish);
traces still running after `CUT` seconds are cut at their next layer and answered 503, chat templates
being rendered are stopped; uvicorn does not raise the signal again afterwards, so a stop is a clean
exit (status 0) with no traceback. A worker still busy `LINGER` seconds after that (in a long numpy
product, say) does not keep the process: it ends anyway (`os._exit`), after its one line.
Connections are uvicorn's h11 protocol with deadlines (`guard.Guarded`); the per-client limit counts
the socket's own address, and X-Forwarded-For only from the proxy `trusted_proxy` names.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import sys
import threading
import time

import uvicorn

from ..errors import TracerError
from ..tokenizers.bounds import stop_all
from .app import make_app
from .engine import Engine
from .guard import RESERVE_FILES, Guarded, raise_file_limit
from .limits import Limits

GRACE = 3  # seconds requests in flight may take to finish once the server is told to stop
LINGER = 1.5  # seconds a busy worker may take after that before the process ends without it
CUT = 1.5  # seconds after which the traces still running are cut (answered 503) so that they end within GRACE
LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]  # the Host headers a server on 127.0.0.1 answers
SHIPPED = ("abc", "tiny")  # always served, after the models named at start


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def load_models(names, load) -> dict:
    """Served name → Model: the names given (default 'abc'), then the shipped ones not named."""
    out = {}
    for name in list(dict.fromkeys(names or ["abc"])) + [s for s in SHIPPED if s not in (names or ["abc"])]:
        if name not in out:
            out[name] = load(name)
    return out


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def lan_address() -> str | None:
    """This machine's address on its network (the one a route out would use); no packet is sent."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1))
        return s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()


def bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        raise TracerError(f"--host {host[:80]!r}: not an address of this machine (try 127.0.0.1 or 0.0.0.0)") from None
    family, kind, proto, _, where = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(where)
    except OSError as e:
        sock.close()
        if e.errno in (98, 48):  # EADDRINUSE (Linux, macOS)
            raise TracerError(f"port {port} on {host} is in use; try another --port (or --port 0 for a free one)") from None
        raise TracerError(f"cannot listen on {host}:{port} ({e.strerror or e})") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


class _Server(uvicorn.Server):
    """uvicorn's server, stopping on SIGINT/SIGTERM without raising the signal again afterwards."""

    stopped_by = None
    on_stop = None  # called CUT seconds after the signal: traces still running are cut at their next pass
    on_signal = None  # called at the signal: a led lesson's event streams end, so that nothing holds the stop

    def handle_exit(self, sig, frame) -> None:
        if self.on_signal is not None:
            self.on_signal()
        if self.stopped_by is None and self.on_stop is not None:
            timer = threading.Timer(CUT, self.on_stop)
            timer.daemon = True
            timer.start()
        self.stopped_by = sig
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: stop waiting for requests in flight
        else:
            self.should_exit = True


def check_proxy(trusted_proxy: str | None) -> str | None:
    """--trusted-proxy: addresses or networks (comma-separated) whose X-Forwarded-For is believed."""
    if trusted_proxy is None:
        return None
    parts = [p.strip() for p in trusted_proxy.split(",") if p.strip()]
    for p in parts:
        try:
            ipaddress.ip_network(p, strict=False)
        except ValueError:
            raise TracerError(f"--trusted-proxy {p[:80]!r}: not an address or a network (e.g. 10.0.0.5 or "
                              f"10.0.0.0/24)") from None
    if not parts:
        raise TracerError("--trusted-proxy: give the proxy's address (e.g. 10.0.0.5)")
    return ",".join(parts)


def uvicorn_config(app, proxy: str | None = None) -> uvicorn.Config:
    """How uvicorn runs the app: connections with deadlines (`guard.Guarded`) and no limit of uvicorn's own
    (the app's `guard.InFlight` counts requests, not sockets), no WebSocket (the app has none); X-Forwarded-For
    read only from `proxy`; uvicorn says only errors (a client's garbage is no line on the teacher's terminal)."""
    return uvicorn.Config(app, http=Guarded, ws="none", log_level="error", access_log=False, lifespan="off",
                          timeout_graceful_shutdown=GRACE, limit_concurrency=None, timeout_keep_alive=5,
                          server_header=False, proxy_headers=proxy is not None, forwarded_allow_ips=proxy or "")


def stop_workers(engine: Engine) -> None:
    """Cut the traces still running at their next layer and stop the chat templates being rendered."""
    engine.stopping.set()
    stop_all()


def serve(names, host: str = "127.0.0.1", port: int = 8000, workers: int | None = None, queue: int = 16,
          limits: Limits = Limits(), load=None, say=print, lesson=None, followers: int = 100,
          trusted_proxy: str | None = None) -> None:
    """Load `names`, bind `host:port` and serve until stopped. `say`: where the addresses are printed.
    `lesson`: a led lesson (`tracer.scenario.lesson.Lesson`): its model alone is served, `followers` pages follow.
    `trusted_proxy`: the proxy (addresses or networks) whose X-Forwarded-For names the client; None:
    every client is its socket's own address."""
    if load is None:
        from ..loaders import load
    proxy = check_proxy(trusted_proxy)
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    here = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    lan = (lan_address() if host in ("0.0.0.0", "::", "") else host) if not is_loopback(host) else None
    typed = url(lan, bound) if lan else f"http://<this machine>:{bound}/"
    lead = None
    try:
        if lesson is not None:
            from .lead import Lead

            models = {lesson.model: load(lesson.model)}
            lead = Lead(lesson, models[lesson.model], limits, followers, 0 if not limits.per_client else 8)
            lead.url = typed if lan else url(here, bound)
        else:
            models = load_models(names, load)
        engine = Engine(models, workers or default_workers(), queue, limits)
        in_flight = max(256, 4 * (engine.workers + engine.queue)) + (lead.streams() if lead else 0)  # a lesson's streams too
        app = make_app(engine, LOOPBACK_NAMES if is_loopback(host) else None, lead, in_flight)
    except BaseException:
        sock.close()
        raise
    say(f"tracer serve: open {url(here, bound)}  (models: {', '.join(models)}; {engine.workers} workers, queue "
        f"{engine.queue}; Ctrl-C stops)")
    if engine.example_seconds > limits.seconds:
        say(f"warning: --seconds {limits.seconds:g} is shorter than the example run, which took "
            f"{engine.example_seconds:.2f} s on {engine.default}: most traces will be cut and answered 422 "
            f"(try --seconds {max(1, int(engine.example_seconds * 2 + 0.999))})")
    if not is_loopback(host):
        say(f"students type: {typed}")
        say("warning: anyone on this network can use this server while it runs")
    if lead is not None:
        lead.announce(say, lead.url, url(here, bound), is_loopback(host))
    Guarded.most_open = max(64, raise_file_limit() - RESERVE_FILES)
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a client that leaves mid-answer: a closed socket, not the CLI's pipe rule
    server = _Server(uvicorn_config(app, proxy))
    server.on_stop = lambda: stop_workers(engine)
    server.on_signal = lead.room.stop if lead is not None else None
    try:
        server.run(sockets=[sock])
    finally:
        engine.close()
        stop_all()
        sock.close()
    busy = [t for t in engine.threads() if t.is_alive()]
    until = time.monotonic() + LINGER
    for t in busy:
        t.join(max(0.0, until - time.monotonic()))
    if server.stopped_by is not None:
        name = signal.Signals(server.stopped_by).name
        n = engine.answered - 1  # the example the page opens on was traced at start
        print(f"tracer serve: stopped ({name}); {n:,} trace{'' if n == 1 else 's'} answered, {engine.refused:,} refused "
              f"as busy", file=sys.stderr, flush=True)
    if any(t.is_alive() for t in busy):  # a worker deep in one product: the process does not wait for it
        sys.stdout.flush()
        os._exit(0)
