#!/usr/bin/env python
"""The pasted output of README.md and of every docs/*.md page, made from its commands and checked against them.

    python tools/readme_output.py            # say which pasted block no longer is what its command prints
    python tools/readme_output.py --write    # rewrite every pasted line from a fresh run of its command

A pasted block is a fenced block right after a line `<!-- output: COMMAND -->` (COMMAND as a shell
would read it, `COLUMNS=100 tracer trace "A B C D E F" --section predict`), or, after
`<!-- output: each $ line -->`, a block whose `$ COMMAND` lines are each followed by what it prints.
A block may be an excerpt: a line `…` stands for lines left out, and every other line must be a line
of the output, in order. Numbers may differ by two units in their last printed decimal (another CPU's
rounding); words, ids and counts must be the same. `tests/test_readme.py` runs every block (those
needing a file that is not on this machine are skipped, and say so). Commands run in the repository's
folder whichever page holds them.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def pages() -> list[Path]:
    """The pages whose pasted blocks are checked: the README, then docs/*.md by name."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]

MARK = re.compile(r"<!-- output: (.*?) -->\n```\n(.*?)\n```", re.S)
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]\d+)?")
GAP = "…"
SEARCH = [ROOT, Path.home() / ".cache" / "tracer-tests"]  # where a file a command names may be


@dataclass
class Run:
    command: str  # as written: COLUMNS=100 tracer trace …
    expected: list[str]  # the pasted lines, `…` included
    span: tuple[int, int]  # where those lines sit in the page's text


def blocks(text: str) -> list[Run]:
    """Every pasted block of a page's text, one Run per command."""
    out = []
    for m in MARK.finditer(text):
        what, body = m.group(1).strip(), m.group(2)
        start = m.start(2)
        if what == "each $ line":
            lines, pos, cur = body.split("\n"), start, None
            for line in lines:
                if line.startswith("$ "):
                    cur = Run(line[2:], [], (pos + len(line) + 1, pos + len(line) + 1))
                    out.append(cur)
                elif cur is not None:
                    cur.expected.append(line)
                    cur.span = (cur.span[0], pos + len(line))
                pos += len(line) + 1
        else:
            out.append(Run(what, body.split("\n"), (start, m.end(2))))
    return out


def needs(command: str) -> Path | None:
    """A file the command names that this machine lacks (a GGUF model), or None."""
    for word in shlex.split(command):
        if word.endswith(".gguf"):
            if not any((d / word).exists() for d in SEARCH):
                return Path(word)
    return None


def run(command: str) -> str:
    """What the command prints (stdout, then stderr), run in-process at its COLUMNS, without colour."""
    from typer.testing import CliRunner

    from tracer.cli import app

    words = shlex.split(command)
    env = {"NO_COLOR": "1", "COLUMNS": "100"}
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    assert words[0] == "tracer", command
    where = next((d for d in SEARCH if all((d / w).exists() for w in words if w.endswith(".gguf"))), ROOT)
    here = os.getcwd()
    os.chdir(where)
    try:
        r = CliRunner().invoke(app, words[1:], env=env)
    finally:
        os.chdir(here)
    return r.stdout + r.stderr


def _close(a: str, b: str) -> bool:
    """Numbers as printed: within two units of the expected one's last decimal; integers exact."""
    if "e" in a or "e" in b:
        x, y = float(a), float(b)
        return abs(x - y) <= 0.1 * max(abs(x), abs(y))
    if "." not in a:
        return a == b
    places = len(a.split(".")[1])
    return abs(float(a) - float(b)) <= 2 * 10 ** -places + 1e-12


def same(expected: str, actual: str) -> bool:
    e, a = expected.rstrip(), actual.rstrip()
    if NUMBER.split(e) != NUMBER.split(a):
        return False
    return all(_close(x, y) for x, y in zip(NUMBER.findall(e), NUMBER.findall(a)))


def skeleton(line: str) -> list[str]:
    return NUMBER.split(line.rstrip())


def compare(expected: list[str], output: str) -> list[str]:
    """The pasted lines that are not, in order, lines of `output` (empty: the block is right)."""
    lines = output.split("\n")
    i, wrong = 0, []
    for want in expected:
        if want.strip() == GAP:
            continue
        j = next((k for k in range(i, len(lines)) if same(want, lines[k])), None)
        if j is None:
            near = next((lines[k] for k in range(i, len(lines)) if skeleton(lines[k]) == skeleton(want)), None)
            wrong.append(f"  pasted: {want}\n  prints: {near if near is not None else '(no such line)'}")
        else:
            i = j + 1
    return wrong


def fresh(expected: list[str], output: str) -> list[str]:
    """The pasted lines from a fresh run: each line replaced by the output line of its words (its
    numbers may have changed); a line whose words changed is kept and reported by `compare`."""
    lines, i, out = output.split("\n"), 0, []
    for want in expected:
        if want.strip() == GAP:
            out.append(want)
            continue
        j = next((k for k in range(i, len(lines)) if skeleton(lines[k]) == skeleton(want)), None)
        out.append(want if j is None else lines[j].rstrip())
        i = i if j is None else j + 1
    return out


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    bad = 0
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for r in reversed(blocks(text)):  # from the end, so earlier spans stay where they are
            if needs(r.command) is not None:
                print(f"{page.name}: skipped (needs {needs(r.command)}): {r.command}")
                continue
            output = run(r.command)
            if "--write" in argv:
                body = "\n".join(fresh(r.expected, output))
                text = text[: r.span[0]] + body + text[r.span[1]:]
            wrong = compare(fresh(r.expected, output) if "--write" in argv else r.expected, output)
            if wrong:
                bad += 1
                print(f"{page.name}: {r.command}:\n" + "\n".join(wrong))
        if "--write" in argv:
            page.write_text(text, encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
