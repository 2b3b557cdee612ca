#!/usr/bin/env python
"""Run the same tracer commands on an older commit and on this tree, and compare what they print.

    python tools/same_output.py --rev 187c506   # build that commit in a worktree + venv, compare
    python tools/same_output.py --rev 187c506 --only replay   # the commands whose name holds 'replay'

Each command's stdout, stderr and exit code are written to `OUT/{old,new}/NAME.{out,err,rc}` and
compared byte for byte (a speed in tokens/s and the default memory budget masked); saved `.npz` traces
(their arrays and metadata, but the memory budget) and exported files are compared by sha256. The old commit is checked out with `git worktree` under OUT and installed into
its own venv (once: reused by later runs with the same OUT). Used to show that a change of structure changes no output;
a difference is printed as a unified diff of the first lines that differ.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NL = b"\n"
README_PROMPT = ("You are a business consultant, please analyze the impact of rising oil prices on the "
                 "automotive industry.")
LLAMA = str(ROOT / "tests/data/llama-tiny")
SCENARIOS = ("article", "article_softmax", "two_heads", "gpt2_small_article", "gpt2_medium_shape", "rotary")

# name → (arguments, files the command writes that are compared too)
COMMANDS: dict[str, tuple[list[str], list[str]]] = {
    **{f"replay-{s}": (["replay", s], []) for s in SCENARIOS},
    **{f"replay-{s}-json": (["replay", s, "--json"], []) for s in SCENARIOS if s != "gpt2_medium_shape"},
    "replay-article-full": (["replay", "article", "--full", "--layer", "all"], []),
    "replay-two_heads-token": (["replay", "two_heads", "--token", "B", "--head", "1"], []),
    "trace-default": (["trace", README_PROMPT], []),
    "trace-full": (["trace", README_PROMPT, "--full"], []),
    "trace-layer-all": (["trace", README_PROMPT, "--layer", "all"], []),
    "trace-json": (["trace", README_PROMPT, "--json"], []),
    "trace-save": (["trace", README_PROMPT, "--save", "{dir}/readme.npz"], ["readme.npz"]),
    "show-saved": (["show", "{dir}/readme.npz"], []),
    "show-saved-layer3": (["show", "{dir}/readme.npz", "--layer", "3", "--token", "C"], []),
    "trace-sample": (["trace", "A B C D", "-t", "0.8", "--top-k", "5", "--top-p", "0.9", "--seed", "3", "-n", "4"], []),
    "trace-nocache-verify": (["trace", "one two three", "--no-cache", "--verify-cache", "-n", "3"], []),
    "trace-verify": (["trace", "one two three", "--verify-cache", "-n", "3"], []),
    "trace-generated-token": (["trace", "A B C", "--token", "E", "--head", "0", "--full"], []),
    "trace-hf": (["trace", "Hello world", "--model", str(ROOT / "tests/data/gpt2-tiny/hub"), "-n", "4"], []),
    "trace-hf-json": (["trace", "Hello world", "--model", str(ROOT / "tests/data/gpt2-tiny/hub"), "--json"], []),
    "trace-scenario-model": (["trace", "A B C", "--model", "article", "-n", "2"], []),
    # the Llama / Qwen2 / Mistral block: RMS norm, SwiGLU, rotary positions, grouped-query attention
    "trace-llama-predict": (["trace", "hello", "--model", LLAMA, "--section", "predict"], []),
    "trace-llama-full": (["trace", "hello", "--model", LLAMA, "--full", "--layer", "all", "-n", "2"], []),
    "trace-llama-json": (["trace", "hello", "--model", LLAMA, "--json", "-n", "2"], []),
    "trace-llama-save": (["trace", "hello", "--model", LLAMA, "--save", "{dir}/llama.npz", "-n", "2"], ["llama.npz"]),
    "show-llama-saved": (["show", "{dir}/llama.npz", "--layer", "1"], []),
    "trace-llama-export-html": (["trace", "hello", "--model", LLAMA, "--export", "{dir}/llama.html"], ["llama.html"]),
    "demo-llama": (["demo", "--model", LLAMA], []),
    "trace-qwen2": (["trace", "hello world", "--model", str(ROOT / "tests/data/qwen2-tiny"), "-n", "3"], []),
    "trace-mistral": (["trace", "hello world", "--model", str(ROOT / "tests/data/mistral-tiny"), "-n", "3", "--full"], []),
    "train-tiny": (["train", str(ROOT / "README.md"), "--out", "{dir}/trained", "--steps", "3", "--layers", "1",
                    "--d-model", "16", "--heads", "2", "--context", "16", "--batch", "2", "--force"], ["trained/model.safetensors"]),
    "trace-n0": (["trace", "Hi there", "-n", "0", "--dims", "4", "--precision", "5"], []),
    "trace-export-txt": (["trace", "Hi there", "--export", "{dir}/x.txt"], ["x.txt"]),
    "trace-export-svg": (["trace", "Hi there", "--export", "{dir}/x.svg"], ["x.svg"]),
    "trace-export-html": (["trace", "Hi there", "--export", "{dir}/x.html"], ["x.html"]),
    "demo-article": (["demo"], []),
    "demo-quiz": (["demo", "article", "--quiz"], []),
    "demo-two-heads": (["demo", "two_heads"], []),
    "demo-prompt": (["demo", "--prompt", "The cat sat on the"], []),
    "demo-deck": (["demo", "article", "--export", "{dir}/deck.html"], ["deck.html"]),
    "scenarios": (["scenarios"], []),
    "tokens": (["tokens", "building a house ✓ 🙂"], []),
    "tokens-cl100k": (["tokens", "building a house", "--encoding", "cl100k_base"], []),
    "help": (["--help"], []),
    "trace-help": (["trace", "--help"], []),
    # bad input: the message and exit code
    "bad-layer": (["trace", "hi", "--layer", "30"], []),
    "bad-head": (["trace", "hi", "--head", "7"], []),
    "bad-token": (["trace", "hi", "--token", "Z"], []),
    "bad-empty": (["trace", ""], []),
    "bad-model": (["trace", "hi", "--model", "gpt3"], []),
    "bad-temp": (["trace", "hi", "-t", "-1"], []),
    "bad-topp": (["trace", "hi", "--top-p", "1.5"], []),
    "bad-n": (["trace", "hi", "-n", "-2"], []),
    "bad-save": (["trace", "hi", "--save", "x.txt"], []),
    "bad-export": (["trace", "hi", "--export", "/nonexistent/x.html"], []),
    "bad-dims": (["trace", "hi", "--dims", "0"], []),
    "bad-scenario": (["replay", "articel"], []),
    "bad-show": (["show", "/nonexistent.npz"], []),
    "bad-overflow": (["trace", "hi", "--model", "article", "-n", "100"], []),
}


def run_all(python: str, root: Path, out: Path, only: str | None, columns: int) -> None:
    """Run every command; the tree's own path (in a replay's JSON) is written as {root}."""
    out.mkdir(parents=True, exist_ok=True)
    files = out / "files"
    files.mkdir(exist_ok=True)
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "40", "PYTHONHASHSEED": "0", "TERM": "dumb",
           "OPENBLAS_NUM_THREADS": "1", "NO_COLOR": "1"}
    env.pop("FORCE_COLOR", None)
    for name, (args, _) in COMMANDS.items():
        if only and only not in name:
            continue
        argv = [a.replace("{dir}", str(files)) for a in args]
        r = subprocess.run([python, "-m", "tracer", *argv], capture_output=True, env=env, cwd=out,
                           stdin=subprocess.DEVNULL, timeout=600)
        def clean(b: bytes) -> bytes:
            b = re.sub(rb"[0-9][0-9,.]* tokens/s", b"N tokens/s", b)  # train's speed: not output, it varies run to run
            b = re.sub(rb'"budget": [0-9]+', b'"budget": N', b)  # --memory's default: half the memory free at the time
            return b.replace(str(files).encode(), b"{dir}").replace(str(root).encode(), b"{root}").replace(str(ROOT).encode(), b"{root}")

        (out / f"{name}.out").write_bytes(clean(r.stdout))
        (out / f"{name}.err").write_bytes(clean(r.stderr))
        (out / f"{name}.rc").write_text(f"{r.returncode}\n")
        print(f"  {name}: exit {r.returncode}, {r.stdout.count(NL)} lines", flush=True)


def sha(path: Path) -> str:
    """The file's sha256; of a saved trace, of its arrays and its metadata but the memory budget (half the
    memory free when it ran: `expansion.budget`), which no run repeats."""
    if not path.exists():
        return "(missing)"
    if path.suffix != ".npz":
        return hashlib.sha256(path.read_bytes()).hexdigest()
    import json

    import numpy as np

    h = hashlib.sha256()
    with np.load(path, allow_pickle=False) as z:
        for k in sorted(z.files):
            a = z[k]
            if k == "meta" or k.endswith(".meta"):
                meta = json.loads(str(a))
                meta.get("expansion", {}).pop("budget", None)
                a = np.array(json.dumps(meta, sort_keys=True))
            h.update(k.encode() + str(a.dtype).encode() + str(a.shape).encode() + np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def compare(old: Path, new: Path, only: str | None) -> int:
    bad = 0
    for name, (_, written) in COMMANDS.items():
        if only and only not in name:
            continue
        for ext in ("out", "err", "rc"):
            a, b = (old / f"{name}.{ext}").read_bytes(), (new / f"{name}.{ext}").read_bytes()
            if a != b:
                bad += 1
                print(f"DIFFERS: {name}.{ext}")
                diff = difflib.unified_diff(a.decode(errors="replace").splitlines(),
                                            b.decode(errors="replace").splitlines(), "old", "new", lineterm="", n=1)
                for i, line in enumerate(diff):
                    if i > 40:
                        print("  …")
                        break
                    print("  " + (line if len(line) < 300 else line[:300] + " …"))
        for f in written:
            if sha(old / "files" / f) != sha(new / "files" / f):
                bad += 1
                print(f"DIFFERS: file {f} written by {name}")
    return bad


def build_old(rev: str, work: Path) -> str:
    tree, venv = work / "tree", work / "venv"
    want = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    stamp = work / "rev"
    if stamp.exists() and stamp.read_text() == want and (venv / "bin" / "python").exists():
        return str(venv / "bin" / "python")
    if tree.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
        shutil.rmtree(tree, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), want], cwd=ROOT, check=True, capture_output=True)
    if not venv.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "-e", str(tree)], check=True)
    stamp.write_text(want)
    return str(venv / "bin" / "python")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", required=True, help="the older commit to compare with")
    ap.add_argument("--out", default="/tmp/tracer-same-output", help="where trees, venvs and outputs go")
    ap.add_argument("--only", help="run only the commands whose name contains this")
    ap.add_argument("--columns", type=int, default=100)
    ap.add_argument("--python", default=sys.executable, help="the interpreter that runs this tree")
    a = ap.parse_args()
    a.python = os.path.abspath(a.python) if os.sep in a.python else a.python
    out = Path(a.out)
    old_python = build_old(a.rev, out / "old-build")
    for which, python, root in (("old", old_python, out / "old-build" / "tree"), ("new", a.python, ROOT)):
        print(f"{which}: {python}", flush=True)
        run_all(python, root, out / f"{which}-{a.columns}", a.only, a.columns)
    bad = compare(out / f"old-{a.columns}", out / f"new-{a.columns}", a.only)
    print("same output" if not bad else f"{bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
