#!/usr/bin/env python
"""`tracer serve` under a class: 24 clients × 4 requests at once against a server on this machine.

    python bench/bench_serve.py                          # abc, 3 new tokens, the server's defaults
    python bench/bench_serve.py --clients 24 --requests 4 --workers 2 --queue 16 --model abc

Starts `python -m tracer serve --port 0` (127.0.0.1), waits for it, then:

1. one request at a time on the idle server, `--single` times, against the same trace through the
   Python API in this process (`Model.generate`, and generate + the page's data + the --json fields
   + the JSON text, which is the server's whole work): the HTTP request's median over each;
2. `--clients` threads released together, each sending `--requests` requests one after the other
   (each a different prompt), no retry: answered (200), refused (503 with Retry-After), anything
   else, p50/p95/max latency of the answered, the wall time;
3. the same clients again, each waiting Retry-After on a 503 and trying again: all answered, when;
4. the server's peak memory (VmHWM of its process) after all of it.

The last line is `JSON: {...}`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
WORDS = ["A B C", "Monday Tuesday", "one two three", "January February", "the cat sat", "1 2 3 4", "red green blue",
         "K L M N", "Sunday", "the dog", "five six", "x y z"]


def start(args) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "tracer", "serve", "--port", "0", "--model", args.model, "--queue", str(args.queue),
           "--per-client", "0"]  # every client of this benchmark comes from 127.0.0.1
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    line = proc.stdout.readline()
    found = re.search(r"open (http://[^ ]+?)/ ", line)
    if not found:
        proc.kill()
        raise SystemExit(f"the server did not start: {line!r} {proc.stderr.read()!r}")
    return proc, found.group(1)


def peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def body(i: int, args) -> dict:
    return {"prompt": WORDS[i % len(WORDS)], "model": args.model, "max_new_tokens": args.new_tokens, "seed": i}


def single(url: str, args) -> dict:
    import httpx

    from tracer.loaders import load
    from tracer.render.jsonout import json_safe, trace_json
    from tracer.render.page import page_data
    from tracer.render.page.html import json_for_script

    m = load(args.model)
    req = body(0, args)
    api_generate, api_whole, http = [], [], []
    with httpx.Client(base_url=url, timeout=120) as c:
        c.post("/api/trace", json=req).raise_for_status()  # warm
        for _ in range(args.single):
            t = time.perf_counter()
            gen = m.generate(req["prompt"], max_new_tokens=req["max_new_tokens"], seed=req["seed"])
            api_generate.append(time.perf_counter() - t)
            json_for_script(json_safe({**trace_json(gen, m.tokenizer), "page": page_data(gen, m.tokenizer)}))
            api_whole.append(time.perf_counter() - t)
            t = time.perf_counter()
            r = c.post("/api/trace", json=req)
            r.raise_for_status()
            http.append(time.perf_counter() - t)
    size = len(r.content)
    med = statistics.median
    return {"api_generate_s": med(api_generate), "api_whole_s": med(api_whole), "http_s": med(http),
            "http_over_whole": med(http) / med(api_whole), "answer_bytes": size}


def load_test(url: str, args, retry: bool) -> dict:
    import httpx

    results, lock = [], threading.Lock()
    gate = threading.Barrier(args.clients)

    def client(k: int) -> None:
        with httpx.Client(base_url=url, timeout=300, limits=httpx.Limits(max_connections=1)) as c:
            gate.wait()
            for j in range(args.requests):
                t = time.perf_counter()
                while True:
                    r = c.post("/api/trace", json=body(k * args.requests + j, args))
                    if r.status_code == 503 and retry:
                        time.sleep(float(r.headers.get("retry-after", "1")))
                        continue
                    break
                with lock:
                    results.append((r.status_code, time.perf_counter() - t, r.headers.get("retry-after")))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ok = sorted(s for code, s, _ in results if code == 200)
    q = statistics.quantiles(ok, n=20) if len(ok) > 1 else ok * 19
    return {"sent": len(results), "answered": len(ok), "refused_503": sum(code == 503 for code, _, _ in results),
            "other": sorted({code for code, _, _ in results} - {200, 503}),
            "refused_with_retry_after": all(ra for code, _, ra in results if code == 503),
            "p50_s": statistics.median(ok) if ok else None, "p95_s": q[18] if ok else None,
            "max_s": ok[-1] if ok else None, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=24)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--model", default="abc")
    ap.add_argument("--new-tokens", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0, help="default: the server's own")
    ap.add_argument("--queue", type=int, default=16)
    ap.add_argument("--single", type=int, default=10)
    args = ap.parse_args()
    proc, url = start(args)
    try:
        limits = json.loads(__import__("urllib.request").request.urlopen(url + "/api/limits").read())
        one = single(url, args)
        burst = load_test(url, args, retry=False)
        patient = load_test(url, args, retry=True)
        peak = peak_kib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    out = {"model": args.model, "new_tokens": args.new_tokens, "clients": args.clients, "requests": args.requests,
           "workers": limits["workers"], "queue": limits["queue"], "cpus": os.cpu_count(), "single": one,
           "burst": burst, "with_retry": patient, "server_peak_mib": round(peak / 1024, 1),
           "server_exit": proc.returncode}
    print(f"one request: HTTP {one['http_s'] * 1000:.0f} ms; the API's generate {one['api_generate_s'] * 1000:.0f} ms, "
          f"the server's whole work in-process {one['api_whole_s'] * 1000:.0f} ms (HTTP ÷ that: "
          f"{one['http_over_whole']:.2f}×); answer {one['answer_bytes'] / 1e6:.2f} MB")
    for name, r in (("at once, no retry", burst), ("at once, retrying after Retry-After", patient)):
        print(f"{args.clients} clients × {args.requests} requests {name}: {r['answered']} answered, "
              f"{r['refused_503']} refused (503), other {r['other']}; p50 {r['p50_s']:.2f} s, p95 {r['p95_s']:.2f} s, "
              f"max {r['max_s']:.2f} s; all done in {r['wall_s']:.1f} s")
    print(f"server peak memory {out['server_peak_mib']} MiB; {limits['workers']} workers, queue {limits['queue']}; "
          f"exit {proc.returncode}")
    print("JSON: " + json.dumps(out))


if __name__ == "__main__":
    main()
