"""Run `tracer` commands, each in its own process under a memory and a time limit, quickly.

Started by the `limited` fixture of tests/conftest.py as `python tests/limited_runner.py`; not a test
module and never imported. It imports tracer once, then forks a child per case: the child sets
`resource.RLIMIT_AS` (address space) and an alarm, points stdout and stderr at files, and runs the
`tracer` command line (`tracer.cli.main`) exactly as `python -m tracer` would, exiting with its
status; an exception nothing caught prints its traceback and exits 1, as the interpreter does. A
fork costs milliseconds where a fresh interpreter costs half a second, which is what lets the fuzz
tests run hundreds of cases, each isolated.

Protocol: one JSON object per line on stdin, {"args", "out", "err", "memory", "seconds", "cwd"};
one JSON object per line on stdout, {"status", "signal", "seconds", "wall"}: "seconds" is the CPU time the
child used (user + system, from `os.wait4`), which a busy machine does not stretch as it stretches the wall
time ("wall"); a refusal that does its work before allocating costs milliseconds of either.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
import traceback


def _child(case: dict) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (case["memory"], case["memory"]))
    signal.alarm(max(1, int(case["seconds"])))  # SIGALRM's default action ends the process
    for fd, path in ((1, case["out"]), (2, case["err"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    if case.get("cwd"):
        os.chdir(case["cwd"])
    sys.argv = ["tracer", *case["args"]]
    code = 0
    try:
        from tracer.cli import main

        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def main() -> None:
    import tracer.cli  # noqa: F401  everything a command imports at its start, once
    import tracer.loaders  # noqa: F401
    import tracer.render.walkthrough  # noqa: F401
    from tracer.tokenizers.tokens import get_tokenizer

    get_tokenizer("gpt2")  # the BPE tables, built once and shared with every child
    for line in sys.stdin:
        case = json.loads(line)
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(case)
        _, status, usage = os.wait4(pid, 0)
        wall = time.monotonic() - start
        seconds = usage.ru_utime + usage.ru_stime
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        print(json.dumps({"status": code, "signal": sig, "seconds": seconds, "wall": wall}), flush=True)


if __name__ == "__main__":
    main()
