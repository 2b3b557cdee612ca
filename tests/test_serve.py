"""`tracer serve` (tracer/serve/): the API answers what `tracer trace --json` prints and the page
`--export FILE.html` carries, for the same inputs; bad requests are 4xx in well under a second and
reveal no file or path; a full pool answers 503 with Retry-After; the page is self-contained and
its scripts are the only ones its Content-Security-Policy allows.

In this process through Starlette's TestClient; then (slow) a real `python -m tracer serve` on a
free port of 127.0.0.1: a concurrent load, hostile bodies, Ctrl-C and SIGTERM, and headless
Chromium typing a prompt into #prompt (skipped, with the reason, where chromium is missing).
`TRACER_SERVE_SCREENSHOT=FILE.png` keeps the browser's 1280×720 screenshot (docs/serve.png).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

starlette = pytest.importorskip("starlette", reason="tracer serve needs starlette (pip install -e .)")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx (pip install -e '.[test]')")

from starlette.testclient import TestClient  # noqa: E402

from tracer.cli import app as cli_app  # noqa: E402
from tracer.loaders import load  # noqa: E402
from tracer.serve.app import make_app  # noqa: E402
from tracer.serve.engine import Engine  # noqa: E402
from tracer.serve.limits import Limits  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def models():
    chatty = load("tiny")
    chatty.chat_template = TEMPLATE  # a model with a chat template, for the chat switch
    return {"abc": load("abc"), "tiny": load("tiny"), "chatty": chatty}


@pytest.fixture(scope="module")
def engine(models):
    e = Engine(models, workers=2, queue=2, limits=Limits(seconds=30))
    yield e
    e.close()


@pytest.fixture(scope="module")
def client(engine):
    with TestClient(make_app(engine), raise_server_exceptions=False) as c:
        yield c


def post(client, **body):
    return client.post("/api/trace", json=body)


# --------------------------------------------------------------------------- the same numbers as the CLI


@pytest.mark.parametrize("prompt, model, options", [
    ("A B C D E F", "abc", {}),
    ("Monday Tuesday", "abc", {"max_new_tokens": 5, "temperature": 0.9, "seed": 7}),
    ("one two three", "abc", {"max_new_tokens": 4, "temperature": 1.3, "top_k": 5, "seed": 2}),
    ("the cat", "abc", {"max_new_tokens": 4, "temperature": 0.8, "top_p": 0.6, "seed": 11}),
    ("A B C", "tiny", {"max_new_tokens": 2, "temperature": 0.5, "seed": 1}),
    ("A B", "abc", {"max_new_tokens": 0}),
    ("A B C", "abc", {"max_new_tokens": 2, "temperature": 2.0, "top_k": 1_000_000, "top_p": 1.0, "seed": 4_294_967_295}),
])
def test_trace_answers_what_the_cli_prints(client, runner, prompt, model, options):
    r = post(client, prompt=prompt, model=model, **options)
    assert r.status_code == 200, r.text
    got = r.json()
    flags = {"max_new_tokens": "-n", "temperature": "-t", "top_k": "--top-k", "top_p": "--top-p", "seed": "--seed"}
    args = ["trace", prompt, "--json", "--model", model] + [x for k, v in options.items() for x in (flags[k], str(v))]
    cli = runner.invoke(cli_app, args)
    assert cli.exit_code == 0, cli.stderr
    want = json.loads(cli.stdout)
    for key in ("model", "prompt", "prompt_ids", "generated_ids", "text", "generated", "tokens", "settings", "storage"):
        assert got[key] == want[key], key
    assert got["page"]["format"] == "tracer-page" and got["page"]["text"] == got["text"]


def test_the_page_data_is_what_export_writes(client, runner, tmp_path):
    """The page data of an answer is the JSON block `tracer trace … --export FILE.html` writes (the
    token it opens on aside: the page's, not the CLI's --token)."""
    r = post(client, prompt="A B C D", model="abc", max_new_tokens=2, temperature=0.7, seed=5)
    assert r.status_code == 200
    page = r.json()["page"]
    out = tmp_path / "p.html"
    cli = runner.invoke(cli_app, ["trace", "A B C D", "-n", "2", "-t", "0.7", "--seed", "5", "--export", str(out)],
                        env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert cli.exit_code == 0, cli.stderr
    block = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', out.read_text(), re.S)
    exported = json.loads(block.group(1))
    page.pop("start"), exported.pop("start")
    assert not page.pop("head_ablations")["done"] and exported.pop("head_ablations")["done"]  # a served page runs no ablations
    assert page.pop("texts").items() <= exported.pop("texts").items()  # the export's also name the ablations' tokens
    assert page == exported


def test_chat_switch_uses_the_template_as_the_cli_does(client, models):
    r = post(client, prompt="hello", model="chatty", chat=True, max_new_tokens=2)
    assert r.status_code == 200, r.text
    m = models["chatty"]
    gen = m.generate("hello", max_new_tokens=2, chat=True)
    assert r.json()["prompt_ids"] == [int(i) for i in gen.prompt_ids] == m.chat_ids("hello")
    assert r.json()["generated_ids"] == [int(i) for i in gen.generated_ids]
    no = post(client, prompt="hello", model="abc", chat=True)
    assert no.status_code == 422 and no.json()["field"] == "chat"


# --------------------------------------------------------------------------- refusals


HOSTILE_MODELS = ["/etc/passwd", "../x", "../../etc/shadow", str(ROOT / "tracer" / "models" / "abc"), "tracer/models/abc",
                  "gpt2", "openai-community/gpt2", "ollama:llama3", "article", "C:\\Windows\\win.ini", "abc\x00",
                  " abc", "ABC", "", "~/.ssh/id_rsa"]


@pytest.mark.parametrize("name", HOSTILE_MODELS)
def test_only_the_served_models_can_be_used(client, name):
    r = post(client, prompt="A B", model=name)
    assert r.status_code == 422 and r.json()["field"] == "model"
    assert r.json()["error"] == "model: not one this server serves; choose one of abc, tiny, chatty"
    assert "root:" not in r.text and "passwd" not in r.text and str(ROOT) not in r.text


BAD = [  # (body, status, field)
    (b"{bad json", 400, None),
    (b"[1, 2]", 400, None),
    (b'"text"', 400, None),
    (b"\xff\xfe not utf-8", 400, None),
    (b"[" * 100_000 + b"]" * 100_000, 413, "body"),
    (b"[" * 5_000 + b"]" * 5_000, 400, None),
    (json.dumps({"prompt": 5}).encode(), 422, "prompt"),
    (json.dumps({"prompt": ["A"]}).encode(), 422, "prompt"),
    (json.dumps({"prompt": "   "}).encode(), 422, "prompt"),
    (json.dumps({"prompt": "A", "max_new_tokens": 10**9}).encode(), 422, "max_new_tokens"),
    (json.dumps({"prompt": "A", "max_new_tokens": -1}).encode(), 422, "max_new_tokens"),
    (json.dumps({"prompt": "A", "max_new_tokens": 2.5}).encode(), 422, "max_new_tokens"),
    (json.dumps({"prompt": "A", "max_new_tokens": True}).encode(), 422, "max_new_tokens"),
    (json.dumps({"prompt": "A", "max_new_tokens": "3"}).encode(), 422, "max_new_tokens"),
    (b'{"prompt": "A", "temperature": NaN}', 422, "temperature"),
    (b'{"prompt": "A", "temperature": Infinity}', 422, "temperature"),
    (b'{"prompt": "A", "temperature": 1e400}', 422, "temperature"),
    (json.dumps({"prompt": "A", "temperature": -1}).encode(), 422, "temperature"),
    (json.dumps({"prompt": "A", "top_k": 0}).encode(), 422, "top_k"),
    (json.dumps({"prompt": "A", "top_p": 0}).encode(), 422, "top_p"),
    (json.dumps({"prompt": "A", "top_p": 1.5}).encode(), 422, "top_p"),
    (json.dumps({"prompt": "A", "seed": -3}).encode(), 422, "seed"),
    (json.dumps({"prompt": "A", "seed": 10**30}).encode(), 422, "seed"),
    (json.dumps({"prompt": "A", "chat": "yes"}).encode(), 422, "chat"),
    (json.dumps({"prompt": "A", "model": {"path": "/etc/passwd"}}).encode(), 422, "model"),
    (json.dumps({"prompt": "A", "path": "/etc/passwd"}).encode(), 422, "path"),
    (json.dumps({"prompt": "A" * 2_001}).encode(), 413, "prompt"),
    (json.dumps({"prompt": "A" * 1_000_000}).encode(), 413, "body"),
    (json.dumps({"prompt": "A " * 999}).encode(), 413, "prompt"),  # 999 tokens: over the 256 a prompt may have
    (json.dumps({"prompt": " ".join("ABCDEFGHIJ" * 6), "max_new_tokens": 10}).encode(), 422, "context"),
    (json.dumps({"prompt": " ".join("ABCDEFGHIJ" * 7)}).encode(), 422, "prompt"),  # 70 tokens: abc's context is 64
    (json.dumps({"prompt": "A\udc80"}).encode(), 422, "prompt"),
]


@pytest.mark.parametrize("body, status, field", BAD, ids=[f"{i}-{s}-{f}" for i, (_, s, f) in enumerate(BAD)])
def test_bad_requests_are_4xx_saying_which(client, body, status, field):
    started = time.monotonic()
    r = client.post("/api/trace", content=body, headers={"Content-Type": "application/json"})
    assert time.monotonic() - started < 2
    assert r.status_code == status, r.text
    got = r.json()
    assert isinstance(got["error"], str) and "\n" not in got["error"] and len(got["error"]) < 300
    assert got.get("field") == field
    if status == 413 or field == "context" or "out of range" in got["error"]:
        assert isinstance(got["limit"], (int, float))


def test_a_prompt_longer_than_the_context_is_blamed_on_the_prompt(client, runner):
    """A student's first error on abc (64 tokens): the reason is the prompt's length, as the CLI says, never
    'at most 0 new tokens'."""
    for n, new in ((70, 2), (64, 1), (65, 0)):
        got = post(client, prompt=" ".join(("ABCDEFGHIJ" * 7)[:n]), model="abc", max_new_tokens=new).json()
        assert got["field"] == "prompt" and got["error"].startswith(f"prompt: {n} tokens,"), got
        assert "max_new_tokens" not in got["error"] and "0 new tokens" not in got["error"]
        assert f"shorten it to at most {64 - max(new, 1)} tokens" in got["error"]
    cli = runner.invoke(cli_app, ["trace", " ".join("ABCDEFGHIJ" * 7)])
    assert cli.exit_code == 2 and "prompt: 70 tokens, longer than the model's context of 64 tokens" in cli.stderr
    ok = post(client, prompt=" ".join(("ABCDEFGHIJ" * 7)[:64]), model="abc", max_new_tokens=0)  # fits exactly
    assert ok.status_code == 200, ok.text
    short = post(client, prompt=" ".join(("ABCDEFGHIJ" * 7)[:60]), model="abc", max_new_tokens=10).json()
    assert short["field"] == "context" and "at most 4 new tokens here" in short["error"]  # the new tokens' fault


def test_other_refusals_are_json(client):
    assert client.get("/api/trace").status_code == 405
    assert client.get("/nothing/../../etc/passwd").status_code == 404
    r = client.post("/api/trace", content=b"prompt=A", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415 and "JSON" in r.json()["error"]
    r = client.post("/api/trace", content=b'{"prompt": "A"}', headers={"Content-Type": "text/plain"})  # a form elsewhere
    assert r.status_code == 415
    assert client.get("/api/health").json()["status"] == "ok"


def test_output_is_escaped(client):
    hostile = "</script><script>alert(1)</script><img src=x onerror=alert(2)>&amp;\u202e"
    r = post(client, prompt=hostile, model="abc", max_new_tokens=1)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert not set(r.text) & {"<", ">", "&"} and r.text.isascii()  # \u003c …: nothing a browser could read as markup
    assert r.json()["prompt"] == hostile
    r = client.post("/api/trace", json={"prompt": "A", "<script>alert(1)</script>": 1})
    assert r.status_code == 422 and not set(r.text) & {"<", ">", "&"} and "<script>" in r.json()["error"]


def test_a_full_pool_answers_503_with_retry_after(engine, client):
    taken = engine.taken
    engine.taken = engine.workers + engine.queue  # as if every worker and every place in the queue were taken
    try:
        r = post(client, prompt="A B", model="abc")
    finally:
        engine.taken = taken
    assert r.status_code == 503
    assert int(r.headers["retry-after"]) >= 1 and r.json()["retry_after"] >= 1
    assert post(client, prompt="A B", model="abc").status_code == 200


def test_one_address_at_a_time_answers_429_with_retry_after(engine, client):
    engine.clients["testclient"] = engine.limits.per_client  # as if this client had two requests in flight
    try:
        r = post(client, prompt="A B", model="abc")
    finally:
        engine.clients.pop("testclient")
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1 and "at once" in r.json()["error"]
    assert post(client, prompt="A B", model="abc").status_code == 200 and not engine.clients


def test_a_trace_over_the_time_limit_is_cut(models):
    e = Engine({"abc": models["abc"]}, workers=1, queue=0, limits=Limits(seconds=1e-6))
    e.example = lambda: Engine({"abc": models["abc"]}).example()  # the page itself is traced without the limit
    try:
        with TestClient(make_app(e), raise_server_exceptions=False) as c:
            r = post(c, prompt="A B C", model="abc", max_new_tokens=5)
    finally:
        e.close()
    assert r.status_code == 422 and r.json()["field"] == "time"


def test_limits_are_stated(client):
    got = client.get("/api/limits").json()
    assert got["limits"] == Limits(seconds=30).to_dict()
    assert [m["name"] for m in got["models"]] == ["abc", "tiny", "chatty"]
    assert [m["chat"] for m in got["models"]] == [False, False, True]


# --------------------------------------------------------------------------- the page


def test_the_page_has_the_prompt_box_and_fetches_nothing(client):
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    for needle in ('<input id="prompt"', '<select id="model"', '<option value="abc"', '<option value="tiny"',
                   'data-chat="true">chatty', 'id="gen-temperature"', 'id="gen-top-k"', 'id="gen-top-p"', 'id="gen-seed"',
                   'id="gen-max-new-tokens"', 'id="chat"', 'id="trace-data"', '<span id="model-info">'):
        assert needle in page, needle
    assert page.count('id="model"') == 1
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page) and "@import" not in page
    assert "url(" not in page and "<link" not in page
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    import base64
    import hashlib

    for body in re.findall(r"<script>(.*?)</script>", page, re.S):
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp


def test_serve_help_has_an_example(runner):
    r = runner.invoke(cli_app, ["serve", "--help"], env={"COLUMNS": "100"})
    assert r.exit_code == 0 and "Example: tracer serve" in r.stdout and "--workers" in r.stdout


def test_a_network_host_prints_the_address_and_warns(monkeypatch, models):
    from tracer.serve import run

    lines = []
    monkeypatch.setattr(run, "bind", lambda host, port: run.socket.create_server(("127.0.0.1", 0)))
    monkeypatch.setattr(run, "lan_address", lambda: "192.168.1.20")
    monkeypatch.setattr(run._Server, "run", lambda self, sockets=None: None)
    run.serve(["abc"], host="0.0.0.0", port=8000, workers=1, load=lambda name: models[name if name != "chatty" else "abc"],
              say=lines.append)
    assert lines[0].startswith("tracer serve: open http://127.0.0.1:")
    assert re.match(r"students type: http://192\.168\.1\.20:\d+/$", lines[1])
    assert "anyone on this network can use" in lines[2]
    lines.clear()
    run.serve(["abc"], host="127.0.0.1", port=8000, workers=1, load=lambda name: models[name], say=lines.append)
    assert len(lines) == 1


# --------------------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def server(serve_process):
    proc, url = serve_process.start("--model", "abc", "--model", "tiny", "--workers", "2", "--queue", "6", "--per-client", "0")
    yield url
    code, err = serve_process.stop(proc)
    assert code == 0 and "Traceback" not in err, err
    assert "stopped (SIGTERM)" in err


def a_class(server: str, students: int = 24, each: int = 2):
    """`students` clients × `each` requests at once (T 0.9, seed j): [(status, Content-Type, Retry-After)],
    {(prompt, seed): generated ids} of the answered ones, and the seconds it all took (within 120)."""
    import httpx

    results, answers, lock = [], {}, threading.Lock()

    def student(i: int) -> None:
        with httpx.Client(base_url=server, timeout=60) as c:
            for j in range(each):
                ask = {"prompt": f"{'ABCDEFGHIJKLMNOPQRSTUVWX'[i % 24]} B C", "model": "abc", "max_new_tokens": 2,
                       "temperature": 0.9, "seed": j}
                r = c.post("/api/trace", json=ask)
                with lock:
                    results.append((r.status_code, r.headers.get("content-type"), r.headers.get("retry-after")))
                    if r.status_code == 200:
                        answers[(ask["prompt"], j)] = r.json()["generated_ids"]

    started = time.monotonic()
    threads = [threading.Thread(target=student, args=(i,)) for i in range(students)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    took = time.monotonic() - started
    assert len(results) == students * each and took < 120
    return results, answers, took


@pytest.mark.slow
def test_a_class_at_once(server):
    """24 clients × 2 requests at once: each answered (200) or refused (503 with Retry-After), never
    anything else, all within a bounded time; the server serves on afterwards."""
    import httpx

    results, answers, _ = a_class(server)
    codes = [c for c, _, _ in results]
    assert set(codes) <= {200, 503}, codes
    assert codes.count(200) >= 8  # the pool and its queue at least
    assert all(int(ra) >= 1 for c, _, ra in results if c == 503)
    abc = load("abc")  # threads sharing one model give what one run alone gives
    for (prompt, seed), ids in answers.items():
        assert ids == [int(t) for t in abc.generate(prompt, max_new_tokens=2, temperature=0.9, seed=seed).generated_ids]
    health = httpx.get(server + "/api/health").json()
    assert health["status"] == "ok" and health["running_or_waiting"] == 0


@pytest.mark.slow
def test_another_host_name_is_refused(server):
    """A name made to point at 127.0.0.1 (DNS rebinding) does not get the page or the API."""
    import httpx

    assert httpx.get(server + "/", headers={"Host": "evil.example"}).status_code == 400
    assert httpx.post(server + "/api/trace", json={"prompt": "A"}, headers={"Host": "evil.example:80"}).status_code == 400
    assert httpx.get(server.replace("127.0.0.1", "localhost") + "/api/health").status_code == 200


@pytest.mark.slow
def test_hostile_bodies_leave_it_serving(server):
    import httpx

    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:  # a 1 MB body announced and sent
        body = json.dumps({"prompt": "A" * 1_000_000}).encode()
        s.sendall(b"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode())
        t = time.monotonic()
        try:
            s.sendall(body)
        except OSError:
            pass  # the server may close before reading it all
        answer = s.recv(4096)
        assert time.monotonic() - t < 2 and answer.startswith(b"HTTP/1.1 413")
    with socket.create_connection((host, int(port)), timeout=5) as s:  # garbage, not HTTP
        s.sendall(b"\x00\xff GET / HTTP/9\r\n\r\n")
        s.recv(4096)
    with httpx.Client(base_url=server, timeout=10) as c:
        for body in (b"{", b"[" * 20_000, json.dumps({"prompt": "A", "max_new_tokens": 10**9}).encode()):
            t = time.monotonic()
            r = c.post("/api/trace", content=body, headers={"Content-Type": "application/json"})
            assert 400 <= r.status_code < 500 and time.monotonic() - t < 2
        assert c.post("/api/trace", json={"prompt": "A B C", "model": "abc"}).json()["generated_ids"]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_stop_it_cleanly(sig, serve_process):
    import httpx

    proc, url = serve_process.start("--model", "tiny")
    r = httpx.post(url + "/api/trace", json={"prompt": "A B", "model": "tiny"}, timeout=30)
    assert r.status_code == 200
    flight = threading.Thread(target=lambda: httpx.post(url + "/api/trace", json={"prompt": "A B C", "model": "tiny",
                                                                                 "max_new_tokens": 16}, timeout=30))
    flight.start()
    time.sleep(0.3)  # a request in flight when the signal comes
    code, err = serve_process.stop(proc, sig)
    flight.join(timeout=30)
    assert code == 0, err
    assert "Traceback" not in err and f"stopped ({signal.Signals(sig).name})" in err


@pytest.mark.slow
def test_a_port_in_use_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "tracer", "serve", "--port", str(port)], capture_output=True, text=True,
                           timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "in use" in r.stderr, r.stderr


# --------------------------------------------------------------------------- in a browser

SIZE = (1280, 720)


@pytest.fixture(scope="module")
def browser(chromium):
    driver = chromium(SIZE, logs=("browser", "performance"))
    try:
        yield driver
    finally:
        driver.quit()


def page_state(driver) -> dict:
    return driver.execute_script("""const d = JSON.parse(document.getElementById('trace-data').textContent);
        return {ids: d.tokens.map(t => t.id), chips: [...document.querySelectorAll('#tokens button.tok .tt')].map(e => e.textContent),
                texts: d.tokens.map(t => t.text), n_prompt: d.n_prompt, title: document.getElementById('title').textContent,
                info: document.getElementById('model-info').textContent, settings: d.settings, search: location.search,
                runs: document.body.dataset.runs, step: document.body.dataset.step, serve: document.body.dataset.serve,
                sideways: document.documentElement.scrollWidth - document.documentElement.clientWidth}""")


def severe(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def fetched(driver) -> set[str]:
    urls = set()
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.add(msg["params"]["request"]["url"])
    return urls


@pytest.mark.slow
def test_a_student_types_a_prompt(browser, server, tmp_path, served_page):
    import httpx
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(server + "/")
    served_page.wait_for(browser, "return document.body.dataset.runs === '0' && document.body.dataset.step")
    assert page_state(browser)["title"] == "“A B C D E F”"
    assert browser.execute_script("return document.getElementById('chat').disabled")  # abc has no chat template
    browser.get_log("browser"), browser.get_log("performance")

    served_page.run_prompt(browser, "J K L")  # type, press Enter: the page shows that prompt's tokens and its prediction
    api = httpx.post(server + "/api/trace", json={"prompt": "J K L", "model": "abc"}, timeout=30).json()
    got = page_state(browser)
    assert got["serve"] == "done", got
    assert got["ids"] == api["prompt_ids"] + api["generated_ids"] and got["n_prompt"] == 3
    assert got["chips"][:3] == ["J", "␣K", "␣L"] and got["title"] == "“J K L”"
    assert "prompt=J+K+L" in got["search"] and "model=abc" in got["search"]
    browser.find_element(By.CSS_SELECTOR, '#path [data-goto="predict"]').click()
    top = browser.find_element(By.CSS_SELECTOR, "#probs [data-id]")
    assert int(top.get_attribute("data-id")) == api["generated_ids"][0]  # greedy: the top candidate is the choice
    assert got["sideways"] <= 0
    shot = Path(os.environ.get("TRACER_SERVE_SCREENSHOT") or tmp_path / "serve.png")
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000

    Select(browser.find_element(By.CSS_SELECTOR, "select#model")).select_by_value("tiny")  # another model, T 0.8
    t = browser.find_element(By.CSS_SELECTOR, "#gen-temperature")
    t.clear()
    t.send_keys("0.8")
    served_page.run_prompt(browser, "J K L")
    api = httpx.post(server + "/api/trace", json={"prompt": "J K L", "model": "tiny", "temperature": 0.8},
                     timeout=30).json()
    got = page_state(browser)
    assert got["runs"] == "2" and got["info"].startswith("tiny · 24 layers")
    assert got["settings"]["temperature"] == 0.8 and got["ids"] == api["prompt_ids"] + api["generated_ids"]
    assert "model=tiny" in got["search"] and "temperature=0.8" in got["search"]
    assert got["step"] == "predict"  # the step the student was on stays
    browser.find_element(By.CSS_SELECTOR, '#tokens [data-token="0"]').click()  # the page's own controls still work
    assert "Following A" in browser.find_element(By.CSS_SELECTOR, "#detail h2").text

    assert not severe(browser)
    n = browser.find_element(By.CSS_SELECTOR, "#gen-max-new-tokens")  # over a limit: the server's words, the page stays
    n.clear()
    n.send_keys("999")
    served_page.run_prompt(browser, "J K L")
    got = page_state(browser)
    assert got["serve"] == "error" and got["runs"] == "2"
    assert "max_new_tokens" in browser.find_element(By.CSS_SELECTOR, "#status").text
    assert [(e["source"], "422" in e["message"]) for e in severe(browser)] == [("network", True)]  # that answer only
    assert all(u.startswith(server + "/") for u in fetched(browser)), fetched(browser)


@pytest.mark.slow
def test_a_shared_link_opens_the_same_run(browser, server, served_page):
    browser.get(server + "/?prompt=Monday+Tuesday&model=abc&max_new_tokens=2&temperature=0.5&seed=4#step=predict")
    served_page.wait_for(browser, "return document.body.dataset.runs === '1'")
    api = httpx_post(server, {"prompt": "Monday Tuesday", "model": "abc", "max_new_tokens": 2, "temperature": 0.5, "seed": 4})
    got = page_state(browser)
    assert got["ids"] == api["prompt_ids"] + api["generated_ids"] and got["step"] == "predict"
    assert browser.execute_script("const v = id => document.getElementById(id).value; return [v('prompt'), v('model'), v('gen-seed')]") == [
        "Monday Tuesday", "abc", "4"]
    assert not severe(browser)


@pytest.mark.slow
def test_a_hostile_prompt_is_text_in_the_page(browser, server, served_page):
    hostile = "</script><img src=x onerror=\"document.body.dataset.pwned=1\"><b>bold</b>"
    browser.get(server + "/")
    served_page.wait_for(browser, "return document.body.dataset.runs === '0'")
    served_page.run_prompt(browser, hostile)
    got = page_state(browser)
    assert got["serve"] == "done" and got["title"] == f"“{hostile}”"
    assert browser.execute_script("return document.body.dataset.pwned === undefined && !document.querySelector('#slides img, #top b.pwn')")
    assert not severe(browser)


def httpx_post(server: str, body: dict) -> dict:
    import httpx

    return httpx.post(server + "/api/trace", json=body, timeout=30).json()


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory):
    """The qwen2-tiny folder with the chat fixture's tokenizer_config.json (a ChatML template)."""
    import shutil

    d = tmp_path_factory.mktemp("chat-model")
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(ROOT / "tests" / "data" / "qwen2-tiny" / name, d / name)
    shutil.copy(ROOT / "tests" / "data" / "tokenizers" / "chat" / "tokenizer_config.json", d / "tokenizer_config.json")
    return d


@pytest.mark.slow
def test_the_chat_switch(browser, chat_folder, runner, serve_process, served_page):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    proc, url = serve_process.start("--model", str(chat_folder))
    try:
        browser.get(url + "/")
        served_page.wait_for(browser, "return document.body.dataset.runs === '0'")
        chat = browser.find_element(By.CSS_SELECTOR, "#chat")
        assert chat.is_enabled()  # the folder's model has a chat template
        chat.click()
        n = browser.find_element(By.CSS_SELECTOR, "#gen-max-new-tokens")
        n.clear()
        n.send_keys("2")
        served_page.run_prompt(browser, "hi")
        got = page_state(browser)
        cli = runner.invoke(cli_app, ["trace", "hi", "--model", str(chat_folder), "--chat", "-n", "2", "--json"])
        want = json.loads(cli.stdout)
        assert got["serve"] == "done" and got["ids"] == want["prompt_ids"] + want["generated_ids"]
        assert "chat=true" in got["search"]
        Select(browser.find_element(By.CSS_SELECTOR, "select#model")).select_by_value("abc")
        assert not chat.is_enabled() and not chat.is_selected()  # abc has none
        assert not severe(browser)
    finally:
        code, err = serve_process.stop(proc)
    assert code == 0 and "Traceback" not in err


@pytest.mark.slow
def test_a_busy_server_is_asked_again(browser, serve_process, served_page):
    """With its one worker busy and no queue, the page hears 503 + Retry-After, says so, and tries again."""
    import httpx
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    proc, url = serve_process.start("--model", "tiny", "--workers", "1", "--queue", "0")
    try:
        browser.get(url + "/")
        served_page.wait_for(browser, "return document.body.dataset.runs === '0'")
        long = " ".join(["A B C D E F G H"] * 30)  # 240 tokens and 16 new ones, recorded: long enough to be caught busy
        hog = threading.Thread(target=lambda: httpx.post(url + "/api/trace", timeout=60,
                                                         json={"prompt": long, "model": "tiny", "max_new_tokens": 16}))
        hog.start()
        until = time.monotonic() + 10
        while httpx.get(url + "/api/health", timeout=5).json()["running_or_waiting"] < 1:  # the worker has it
            assert time.monotonic() < until, "the server never took the long request"
            time.sleep(0.02)
        box = browser.find_element(By.CSS_SELECTOR, "input#prompt")
        box.clear()
        box.send_keys("X Y", Keys.ENTER)
        served_page.wait_for(browser, "return document.body.dataset.serve === 'waiting'", timeout=10)
        assert "trying again" in browser.find_element(By.CSS_SELECTOR, "#status").text
        served_page.wait_for(browser, "return document.body.dataset.runs === '1'", timeout=90)
        hog.join(timeout=60)
        assert page_state(browser)["title"] == "“X Y”"
    finally:
        code, err = serve_process.stop(proc)
    assert code == 0 and "Traceback" not in err


def test_a_forced_prefix_runs_on_from_the_clicked_token(client, models):
    """`force`: token ids after the prompt's (the tokens before a clicked candidate, and the candidate), as the page
    sends them; the answer is the run of the prompt and those ids; bad ids are refused naming the field."""
    plain = post(client, prompt="A B C", model="abc", max_new_tokens=3).json()
    second = plain["page"]["passes"][1]["top"]["ids"][1]  # pass 1's second candidate
    forced = [plain["generated_ids"][0], second]
    r = post(client, prompt="A B C", model="abc", max_new_tokens=1, force=forced)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["prompt_ids"] == plain["prompt_ids"] + forced and got["request"]["force"] == forced
    want = models["abc"].generate(plain["prompt_ids"] + forced, max_new_tokens=1)
    assert got["generated_ids"] == want.generated_ids
    for bad in ([-1], [10**9], "12", [1.5], [True]):
        r = post(client, prompt="A B C", model="abc", force=bad)
        assert r.status_code == 422 and r.json()["field"] == "force", r.text


@pytest.mark.slow
def test_a_clicked_candidate_branches_beside_the_run(browser, server, served_page):
    """In the served page, clicking a candidate of the logits step forces it and runs on: a branch column appears
    beside the run (the forced token marked), its tokens those of the API asked for the same ids; another click
    adds another, side by side."""
    import httpx
    from selenium.webdriver.common.by import By

    browser.get(server + "/?prompt=A+B+C&model=abc&max_new_tokens=4#step=predict")
    served_page.wait_for(browser, "return document.body.dataset.runs === '1'")
    browser.get_log("browser")  # what earlier tests' pages logged (a busy server's 503s)
    api = httpx.post(server + "/api/trace", json={"prompt": "A B C", "model": "abc", "max_new_tokens": 4}, timeout=30).json()
    second = api["page"]["passes"][0]["top"]["ids"][1]
    browser.find_element(By.CSS_SELECTOR, f'#probs [data-id="{second}"]').click()
    served_page.wait_for(browser, "return document.body.dataset.branches === '1'")
    assert "Forcing" in browser.find_element(By.CSS_SELECTOR, "#branch-note").text
    cols = browser.find_elements(By.CSS_SELECTOR, "#branches .branch")
    assert len(cols) == 2  # the run, and the branch
    want = httpx.post(server + "/api/trace", json={"prompt": "A B C", "model": "abc", "max_new_tokens": 3,
                                                   "force": [second]}, timeout=30).json()
    forced = cols[1].find_elements(By.CSS_SELECTOR, ".chip.forced")
    drawn = cols[1].find_elements(By.CSS_SELECTOR, ".chip.drawn")
    assert len(forced) == 1 and len(drawn) == len(want["generated_ids"])
    texts = want["page"]["texts"]
    assert [c.text.rsplit(" ", 1)[0] for c in drawn] == [texts[str(i)] for i in want["generated_ids"]]
    third = api["page"]["passes"][0]["top"]["ids"][2]
    browser.find_element(By.CSS_SELECTOR, f'#probs [data-id="{third}"]').click()
    served_page.wait_for(browser, "return document.body.dataset.branches === '2'")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#branches .branch")) == 3
    cols = browser.find_elements(By.CSS_SELECTOR, "#branches .branch")
    cols[1].find_element(By.CSS_SELECTOR, "button").click()  # a branch's title opens its steps; the branches stay
    served_page.wait_for(browser, f"return JSON.parse(document.getElementById('trace-data').textContent).tokens[3].id === {second}")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#branches .branch")) == 3
    assert not severe(browser)
