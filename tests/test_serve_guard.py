"""`tracer serve` against what a hostile network does (issue 39, findings 1 to 6): idle and half-open
sockets, bodies sent too slowly or too large, a forged X-Forwarded-For, a worker that will not stop, a
trace that outruns `--seconds` inside one pass, and `--seconds` shorter than the page's own example.

In this process: uvicorn serving the app on a thread (`served`), with the connection deadlines made
short, so that what a socket may hold is measured in a second; then (slow) a real `python -m tracer
serve` holding 300 idle and 100 half-open sockets while a class's requests are answered, and Ctrl-C
and SIGTERM while a worker is busy. Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="tracer serve needs starlette (pip install -e .)")
httpx = pytest.importorskip("httpx", reason="the tests' client (pip install -e '.[test]')")

import uvicorn  # noqa: E402

from tracer.loaders import load  # noqa: E402
from tracer.serve.app import make_app  # noqa: E402
from tracer.serve.engine import Engine  # noqa: E402
from tracer.serve.guard import Guarded  # noqa: E402
from tracer.serve.limits import Limits  # noqa: E402
from tracer.serve.run import uvicorn_config  # noqa: E402

from .conftest import ServeProcess  # noqa: E402
from .test_serve import a_class  # noqa: E402

start_server, stop_server = ServeProcess.start, ServeProcess.stop  # a real `tracer serve` process

ROOT = Path(__file__).resolve().parent.parent
LOOP = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


@pytest.fixture(scope="module")
def models():
    return {"abc": load("abc"), "tiny": load("tiny")}


@contextmanager
def served(engine: Engine, proxy: str | None = None, header=0.6, body=1.0, write=1.0, in_flight: int = 256):
    """uvicorn serving `make_app(engine)` on a free port of 127.0.0.1 in a thread, its connection deadlines
    `header`, `body` and `write` seconds; yields (host, port)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    saved = Guarded.header_seconds, Guarded.body_seconds, Guarded.write_seconds
    Guarded.header_seconds, Guarded.body_seconds, Guarded.write_seconds = header, body, write
    server = uvicorn.Server(uvicorn_config(make_app(engine, ["127.0.0.1"], in_flight=in_flight), proxy))
    t = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    until = time.monotonic() + 30
    while not server.started and time.monotonic() < until:
        time.sleep(0.02)
    try:
        yield sock.getsockname()
    finally:
        server.should_exit = True
        t.join(timeout=10)
        sock.close()
        Guarded.header_seconds, Guarded.body_seconds, Guarded.write_seconds = saved


def closed_within(s: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed `s` (recv gives b'' or a reset), or None if it stayed open."""
    s.settimeout(seconds)
    started = time.monotonic()
    try:
        while s.recv(65536):
            pass
    except socket.timeout:
        return None
    except OSError:
        pass
    return time.monotonic() - started


# --------------------------------------------------------------------------- 1: sockets that send nothing, or half


@pytest.mark.parametrize("sends", [b"", b"GET / HT", b"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le"],
                         ids=["nothing", "half a request line", "half the headers"])
def test_a_socket_without_complete_headers_is_closed_after_the_header_deadline(models, sends):
    e = Engine({"abc": models["abc"]}, workers=1, queue=1)
    try:
        with served(e) as (host, port):
            with socket.create_connection((host, port)) as s:
                s.sendall(sends)
                took = closed_within(s, 5)
    finally:
        e.close()
    assert took is not None and took < 0.6 + 1.0, took


def test_a_body_sent_too_slowly_is_let_go_and_a_next_request_gets_its_own_deadline(models):
    e = Engine({"abc": models["abc"]}, workers=1, queue=1)
    try:
        with served(e) as (host, port):
            with socket.create_connection((host, port)) as s:  # headers on time, then a body that never comes
                s.sendall(b"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 100\r\n\r\n{\"prompt\"")
                took = closed_within(s, 5)
            assert took is not None and took < 1.0 + 1.0, took
            with socket.create_connection((host, port)) as s:  # a whole request, answered; then half of a next one
                s.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                s.settimeout(5)
                assert s.recv(65536).startswith(b"HTTP/1.1 200")
                s.sendall(b"GET /api/he")
                took = closed_within(s, 5)
            assert took is not None and took < 0.6 + 1.0, took
    finally:
        e.close()


def test_a_client_that_reads_nothing_of_its_answer_is_let_go(models):
    e = Engine({"abc": models["abc"]}, workers=1, queue=1)
    try:
        with served(e) as (host, port):
            s = socket.create_connection((host, port))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 64)  # the page, 64 times, never read
            time.sleep(3)  # the server's buffer is full by now, and its write deadline (1 s) has passed
            with httpx.Client(base_url=f"http://{host}:{port}", timeout=5) as c:
                assert c.get("/api/health").status_code == 200
            s.settimeout(5)
            got, ended = 0, False
            try:
                while chunk := s.recv(1 << 20):
                    got += len(chunk)
                ended = True
            except ConnectionResetError:
                ended = True
            except socket.timeout:
                pass
            s.close()
            page = len(httpx.get(f"http://{host}:{port}/", timeout=5).content)
    finally:
        e.close()
    assert ended and got < 64 * page, (ended, got, page)  # let go before all 64 answers were written


def test_beyond_the_requests_in_flight_the_answer_is_json_503_with_retry_after(models):
    """uvicorn's own limit counted sockets and answered plain text; the app's counts requests."""
    release = threading.Event()
    e = Engine({"abc": models["abc"]}, workers=1, queue=8, limits=Limits(per_client=0))
    run = e.run
    e.run = lambda req: (release.wait(20), run(req))[1]
    try:
        with served(e, in_flight=2) as (host, port):
            base = f"http://{host}:{port}"
            held = [threading.Thread(target=httpx.post, args=(base + "/api/trace",), kwargs={
                "json": {"prompt": "A B"}, "timeout": 30}) for _ in range(2)]
            for t in held:
                t.start()
            until = time.monotonic() + 10
            while e.taken < 2 and time.monotonic() < until:
                time.sleep(0.02)
            idle = [socket.create_connection((host, port)) for _ in range(20)]  # these count for nothing
            r = httpx.get(base + "/api/health", timeout=5)
            release.set()
            for t in held:
                t.join(timeout=30)
            for s in idle:
                s.close()
            assert r.status_code == 503 and r.headers["content-type"] == "application/json"
            assert int(r.headers["retry-after"]) >= 1 and "busy" in r.json()["error"]
            assert httpx.get(base + "/api/health", timeout=5).status_code == 200
    finally:
        e.close()


def test_idle_sockets_reach_no_limit_and_the_oldest_goes_when_files_run_short(models, monkeypatch):
    monkeypatch.setattr(Guarded, "most_open", 50)
    e = Engine({"abc": models["abc"]}, workers=1, queue=1)
    try:
        with served(e, header=30) as (host, port):
            idle = [socket.create_connection((host, port)) for _ in range(80)]
            time.sleep(0.3)
            with httpx.Client(base_url=f"http://{host}:{port}", timeout=5) as c:
                for _ in range(5):
                    assert c.get("/api/health").status_code == 200
            closed = sum(closed_within(s, 0.05) is not None for s in idle)
            assert closed >= 25 and closed_within(idle[-1], 0.05) is None  # the oldest went, the newest stayed
            for s in idle:
                s.close()
    finally:
        e.close()


# --------------------------------------------------------------------------- 5: X-Forwarded-For is believed only from a named proxy


@pytest.mark.parametrize("proxy, forged_gets", [(None, 429), ("127.0.0.1", 200), ("10.0.0.0/8", 429)])
def test_the_per_client_limit_counts_the_sockets_address(models, proxy, forged_gets):
    """uvicorn believed X-Forwarded-For from 127.0.0.1 by default: a client could name itself anyone."""
    release = threading.Event()
    e = Engine({"abc": models["abc"]}, workers=2, queue=4, limits=Limits(per_client=1))
    run = e.run
    e.run = lambda req: (release.wait(20) if req.prompt == "hold" else None, run(req))[1]
    try:
        with served(e, proxy=proxy) as (host, port):
            base = f"http://{host}:{port}"
            held = threading.Thread(target=httpx.post, args=(base + "/api/trace",),
                                    kwargs={"json": {"prompt": "hold"}, "timeout": 30})
            held.start()
            until = time.monotonic() + 10
            while e.taken < 1 and time.monotonic() < until:
                time.sleep(0.02)
            r = httpx.post(base + "/api/trace", json={"prompt": "A B"}, headers={"X-Forwarded-For": "203.0.113.9"},
                           timeout=30)
            clients = dict(e.clients)
            release.set()
            held.join(timeout=30)
    finally:
        e.close()
    assert r.status_code == forged_gets, r.text
    assert "127.0.0.1" in clients


def test_a_trusted_proxy_that_is_no_address_is_one_line(runner):
    from tracer.cli import app

    r = runner.invoke(app, ["serve", "--trusted-proxy", "not-an-address", "--port", "0"])
    assert r.exit_code == 2 and "--trusted-proxy 'not-an-address': not an address" in r.stderr


# --------------------------------------------------------------------------- 6: a body over the limit is read, then refused


@pytest.mark.parametrize("size, chunked, kind, status", [
    (1_000_000, False, "application/json", 413), (3_500_000, False, "application/json", 413),
    (1_000_000, True, "application/json", 413), (1_000_000, False, "text/plain", 415), (20_000, False, "application/json", 413),
])
def test_a_too_large_body_gets_the_json_refusal_naming_the_limit(models, size, chunked, kind, status):
    e = Engine({"abc": models["abc"]}, workers=1, queue=1)
    body = json.dumps({"prompt": "A" * size}).encode()
    try:
        with served(e, body=10) as (host, port):
            with httpx.Client(base_url=f"http://{host}:{port}", timeout=20) as c:
                content = iter([body[i: i + 65536] for i in range(0, len(body), 65536)]) if chunked else body
                r = c.post("/api/trace", content=content, headers={"Content-Type": kind})
                assert r.status_code == status, r.text
                if status == 413:
                    assert r.json()["field"] == "body" and r.json()["limit"] == 16_384 and "16,384" in r.json()["error"]
                assert c.get("/api/health").status_code == 200
    finally:
        e.close()


def read_answer(s: socket.socket) -> tuple[int, dict]:
    """The status and the JSON body of one HTTP answer read from `s`."""
    s.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        chunk = s.recv(65536)
        assert chunk
        body += chunk
    return int(head.split()[1]), json.loads(body)


@pytest.mark.parametrize("size", [1_000_000, 2_500_000, 40_000])
def test_a_client_still_sending_a_too_large_body_reads_the_413(models, size):
    """The 1 MB body was refused from its Content-Length and the connection closed while the client was
    still sending (a client that says `Connection: close`, as Python's urllib does): it saw a reset
    connection, not the refusal. A small send buffer makes localhost behave as a network does."""
    e = Engine({"abc": models["abc"]}, workers=1, queue=1)
    body = json.dumps({"prompt": "A" * size}).encode()
    try:
        with served(e, body=10) as (host, port):
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16_384)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16_384)
                s.connect((host, port))
                s.sendall(b"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          + f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode())
                for i in range(0, len(body), 32_768):  # as a browser sends it: a piece at a time
                    s.sendall(body[i: i + 32_768])
                    time.sleep(0.002)
                status, answer = read_answer(s)
    finally:
        e.close()
    assert status == 413 and answer["field"] == "body" and answer["limit"] == 16_384 and "16,384" in answer["error"]


def test_a_body_to_a_wrong_address_is_read_before_the_404(models):
    e = Engine({"abc": models["abc"]}, workers=1, queue=1)
    try:
        with served(e, body=10) as (host, port):
            r = httpx.post(f"http://{host}:{port}/nothing", content=b"x" * 2_000_000, timeout=20)
            assert r.status_code in (404, 405) and "error" in r.json()
    finally:
        e.close()


# --------------------------------------------------------------------------- 3: --seconds holds inside a pass


@pytest.mark.parametrize("seconds", [0.3, 0.7])
def test_the_time_limit_holds_inside_the_prompts_pass(models, seconds):
    """A 250-token prompt with --seconds 0.5 was answered 422 after 6 to 10 s on tiny: the prompt's pass and
    its logit lens ran to their end. Now the limit is checked between layers and between the lens's chunks."""
    from starlette.testclient import TestClient

    e = Engine({"tiny": models["tiny"]}, workers=1, queue=0, limits=Limits(seconds=seconds))
    e.example = lambda: Engine({"abc": models["abc"]}).example()
    try:
        with TestClient(make_app(e), raise_server_exceptions=False) as c:
            started = time.monotonic()
            r = c.post("/api/trace", json={"prompt": " ".join(["A B C D E F G H"] * 31), "model": "tiny"})
            took = time.monotonic() - started
    finally:
        e.close()
    assert r.status_code == 422 and r.json()["field"] == "time", r.text
    assert took < seconds + 1.5, f"{took:.2f} s"  # tokenizing, and a layer, a chunk of predictions or of the lens past it


def test_on_layer_is_called_before_every_layer_of_every_pass_and_the_lens(models):
    m = models["tiny"]
    calls = []
    gen = m.generate("A B C", max_new_tokens=2, on_layer=lambda: calls.append(1))
    plain = m.generate("A B C", max_new_tokens=2)
    assert gen.generated_ids == plain.generated_ids
    passes = len(gen.steps)
    assert len(calls) >= passes * (m.config.n_layers + 2)  # every layer of every pass, its predictions and lens


@pytest.mark.parametrize("given", [{"beams": 2}, {"draft": "layer:1", "draft_tokens": 2}])
def test_on_layer_is_called_before_every_layer_of_each_beams_and_each_drafts_pass(models, given):
    """Beam search and speculative decoding run their passes through `run_pass` too: each layer of each beam's,
    the draft's and the verifying pass calls `on_layer` (`tracer serve`'s deadline), and a raise there ends the run."""
    m = models["tiny"]
    calls = []
    gen = m.generate("A B C", max_new_tokens=4, on_layer=lambda: calls.append(1), **given)
    assert gen.generated_ids == m.generate("A B C", max_new_tokens=4, **given).generated_ids
    assert len(gen.passes) > 2
    assert len(calls) >= sum(p.config.n_layers + 1 for p in gen.passes)  # each layer of each pass, its predictions

    class Cut(Exception):
        pass

    def cut():
        calls.append(1)
        if len(calls) > m.config.n_layers + 3:  # past the prompt's pass: a later beam's or draft's pass
            raise Cut()

    calls.clear()
    with pytest.raises(Cut):
        m.generate("A B C", max_new_tokens=4, on_layer=cut, **given)


def test_a_looping_chat_template_stops_at_the_time_limit(models):
    from starlette.testclient import TestClient

    looping = load("tiny")
    looping.chat_template = LOOP
    e = Engine({"tiny": looping}, workers=1, queue=0, limits=Limits(seconds=0.8))
    e.example = lambda: Engine({"abc": models["abc"]}).example()
    try:
        with TestClient(make_app(e), raise_server_exceptions=False) as c:
            started = time.monotonic()
            r = c.post("/api/trace", json={"prompt": "hi", "model": "tiny", "chat": True})
            took = time.monotonic() - started
    finally:
        e.close()
    assert r.status_code == 422 and "chat template" in r.json()["error"] and took < 2.0, (r.text, took)


# --------------------------------------------------------------------------- 4: --seconds shorter than the example


def test_seconds_shorter_than_the_example_starts_with_a_warning(monkeypatch, models):
    from tracer.serve import run

    lines = []
    monkeypatch.setattr(run._Server, "run", lambda self, sockets=None: None)
    run.serve(["tiny"], port=0, workers=1, limits=Limits(seconds=0.001), load=lambda name: models[name], say=lines.append)
    warning = [line for line in lines if line.startswith("warning: --seconds 0.001 is shorter than the example run")]
    assert warning and " s on tiny" in warning[0] and "--seconds" in warning[0], lines


# --------------------------------------------------------------------------- a real server (slow)


@pytest.mark.slow
def test_a_class_is_answered_while_300_idle_and_100_half_open_sockets_are_held():
    """The load test of the issue: every request answered 200 or refused as JSON with Retry-After, in a
    bounded time, while 400 sockets send nothing or half a request line; the server closes them itself."""
    proc, url = start_server("--model", "abc", "--workers", "2", "--queue", "6", "--per-client", "0")
    host, port = url.removeprefix("http://").split(":")
    held = []
    try:
        for i in range(400):
            s = socket.create_connection((host, int(port)))
            if i % 4 == 0:
                s.sendall(b"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
            held.append(s)
        results, _, _ = a_class(url)
        assert {c for c, _, _ in results} <= {200, 503} and sum(c == 200 for c, _, _ in results) >= 8, results
        assert all(kind == "application/json" for _, kind, _ in results)
        assert all(int(ra) >= 1 for c, _, ra in results if c == 503)
        closed = sum(closed_within(s, 8) is not None for s in held[:50])  # the server let them go itself
        assert closed == 50
        assert httpx.get(url + "/api/health", timeout=5).json()["status"] == "ok"
    finally:
        for s in held:
            s.close()
        code, err = stop_server(proc)
    assert code == 0 and "Traceback" not in err, err


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_worker_in_a_looping_chat_template_does_not_keep_the_server(tmp_path, sig):
    import shutil

    folder = tmp_path / "looping"
    shutil.copytree(ROOT / "tests" / "data" / "qwen2-tiny", folder, ignore=shutil.ignore_patterns("reference.npz"))
    (folder / "chat_template.jinja").write_text(LOOP)
    proc, url = start_server("--model", str(folder), "--seconds", "3600")
    flight = threading.Thread(target=lambda: httpx.post(url + "/api/trace", json={"prompt": "hi", "chat": True}, timeout=30))
    flight.start()
    time.sleep(0.5)
    started = time.monotonic()
    code, err = stop_server(proc, sig)
    assert time.monotonic() - started < 6, err
    flight.join(timeout=30)
    assert code == 0 and "Traceback" not in err and f"stopped ({signal.Signals(sig).name})" in err, err


STUCK = """
import sys, time
import tracer
from tracer.serve.run import serve

model = tracer.load("tiny")
generate = model.generate

def stuck(*args, **kwargs):  # a worker deep in one long product that no check reaches
    if kwargs["settings"].max_new_tokens == 3:
        time.sleep(120)
    return generate(*args, **kwargs)

model.generate = stuck
serve(["tiny"], port=0, workers=1, queue=0, load=lambda name: model, say=lambda line: print(line, flush=True))
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_worker_that_checks_nothing_does_not_keep_the_server(tmp_path, sig):
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    url = line.split("open ")[1].split()[0].rstrip("/")
    flight = threading.Thread(target=lambda: httpx.post(url + "/api/trace", json={"prompt": "A B", "max_new_tokens": 3},
                                                        timeout=30), daemon=True)
    flight.start()
    time.sleep(1.0)
    started = time.monotonic()
    proc.send_signal(sig)
    try:
        proc.wait(timeout=15)
    finally:
        proc.kill()
    took = time.monotonic() - started
    err = proc.stderr.read()
    assert took < 3 + 1.5 + 2.5, f"{took:.1f} s"  # GRACE, LINGER and a margin
    assert proc.returncode == 0 and f"stopped ({signal.Signals(sig).name})" in err and "Traceback" not in err, err


@pytest.mark.slow
def test_serve_with_seconds_shorter_than_the_example_starts_and_says_so():
    proc, url = start_server("--model", "tiny", "--seconds", "0.1")
    try:
        r = httpx.post(url + "/api/trace", json={"prompt": "A B " * 60, "model": "tiny"}, timeout=30)
        assert r.status_code == 422 and r.json()["field"] == "time"
        assert httpx.get(url + "/", timeout=30).status_code == 200
    finally:
        code, err = stop_server(proc)
    assert code == 0, err


@pytest.mark.slow
def test_clients_that_leave_or_break_http_print_nothing_on_the_teachers_terminal():
    """A client that closed before its answer was written raised BrokenPipeError through the app (the CLI's
    SIGPIPE rule) and a GET whose chunked body broke HTTP while it was answered ended in h11's
    LocalProtocolError: both printed a traceback; garbage printed uvicorn's warning line each time."""
    proc, url = start_server("--model", "abc", "--per-client", "0")
    host, port = url.removeprefix("http://").split(":")
    try:
        for data in (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 20,
                     b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                     b"\x00\xff garbage\r\n\r\n"):
            for _ in range(3):
                with socket.create_connection((host, int(port))) as s:
                    s.sendall(data)
            time.sleep(0.3)
        assert httpx.get(url + "/api/health", timeout=5).json()["status"] == "ok"
    finally:
        code, err = stop_server(proc)
    assert code == 0 and err.strip().splitlines() == ["tracer serve: stopped (SIGTERM); 0 traces answered, 0 refused as busy"], err
