"""A scenario file's text: where each key is (for messages with line numbers), the digits each value
was written with (for default tolerances), and how a message names a key.

tomllib hands us floats, which forget trailing zeros, so the raw text of each `value = …` is read
back from the file (`Source`): a stated value's default tolerance is half a unit of its last
written digit (0.6 → 0.05, 0.450 → 0.0005, 1 → 0.5). A problem with a file is one `TracerError`
line naming the file (and the line, where it can be found), the key path and what was expected
(`Where`). Core module: numpy and the standard library only.
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

import numpy as np

from ..errors import TracerError, near
from ..formats.reading import MAX_DEPTH, check_depth, read_small

_KEY_LINE = re.compile(r"""^\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_.\-*]+)\s*=\s*(.*)$""")
_HEADER = re.compile(r"""^\s*(\[\[?)([^\]]*)\]\]?\s*(#.*)?$""")  # one way to match a line: linear time
_NUMBER = re.compile(r"(?<![\w.])[+-]?(\d[\d_]*)(?:\.(\d[\d_]*))?(?:[eE]([+-]?\d+))?(?![\w.])")


def _strip_strings_and_comments(text: str) -> str:
    """The text with string contents blanked and comments removed (numbers stay where they were)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if (c == '"' and text[j] == "\\") else 1
            out.append(" " * (min(j, n - 1) - i + 1))
            i = j + 1
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Source:
    """Where keys are in the file: (table, occurrence, key) → (line, raw value text).

    A forgiving line scanner: it never raises; when it cannot find something, callers go without
    a line number or fall back to the float's own digits.
    """

    def __init__(self, text: str):
        self.keys: dict[tuple[str, int, str], tuple[int, str]] = {}
        self.headers: dict[tuple[str, int], int] = {}
        lines = text.splitlines()
        table, counts = "", {}
        i = 0
        while i < len(lines):
            line = lines[i]
            h = _HEADER.match(line)
            if h and h.group(2).strip() and not _KEY_LINE.match(line):
                table = h.group(2).strip()
                counts[table] = counts.get(table, -1) + 1
                self.headers[(table, counts[table])] = i + 1
                i += 1
                continue
            m = _KEY_LINE.match(line)
            if not m:
                i += 1
                continue
            key = m.group(1).strip("\"'")
            start, parts = i, [m.group(2)]
            depth, quote = _scan(m.group(2), 0, None)
            while (depth > 0 or quote) and i + 1 < len(lines):  # each line is scanned once: no quadratic rescans
                i += 1
                parts.append(lines[i])
                depth, quote = _scan(lines[i], depth, quote)
            value = "\n".join(parts)
            self.keys.setdefault((table, counts.get(table, 0), key), (start + 1, value))
            if "." in key and not m.group(1).startswith(("'", '"')):  # a dotted key: its first part too
                self.keys.setdefault((table, counts.get(table, 0), key.split(".")[0]), (start + 1, value))
            i += 1

    def line(self, table: str, occurrence: int = 0, key: str | None = None) -> int | None:
        if key is not None and (table, occurrence, key) in self.keys:
            return self.keys[(table, occurrence, key)][0]
        return self.headers.get((table, occurrence))

    def raw(self, table: str, occurrence: int, key: str) -> str | None:
        hit = self.keys.get((table, occurrence, key))
        return hit[1] if hit else None


def _scan(line: str, depth: int, quote: str | None) -> tuple[int, str | None]:
    """The open brackets and the open multi-line string (its quote, or None) after one more line of a
    value, from those before it: strings are skipped and a comment ends the line."""
    i, n = 0, len(line)
    while i < n:
        if quote:
            j = line.find(quote, i)
            if j < 0:
                return depth, quote
            i, quote = j + 3, None
            continue
        c = line[i]
        if line.startswith(('"""', "'''"), i):
            quote, i = line[i : i + 3], i + 3
        elif c in "\"'":
            j = i + 1
            while j < n and line[j] != c:
                j += 2 if (c == '"' and line[j] == "\\") else 1
            i = j + 1
        elif c == "#":
            break
        else:
            depth += (c == "[") - (c == "]")
            i += 1
    return depth, quote


def written_tolerance(raw: str | None, value) -> float:
    """Half a unit of the last written digit: '0.6' → 0.05, '0.450' → 0.0005, '1' → 0.5.

    With several numbers (a list) the finest one decides. Without the raw text, the shortest
    repr of each float stands in for what was written.
    """
    units = []
    if raw is not None:
        for m in _NUMBER.finditer(_strip_strings_and_comments(raw)):
            decimals = len((m.group(2) or "").replace("_", ""))
            exponent = int(m.group(3) or 0)
            units.append(10.0 ** min(exponent - decimals, 308))  # 1e999 would overflow; the value check refuses it
    if not units:
        for x in np.asarray(value, dtype=float).ravel():
            m = _NUMBER.search(repr(float(x))) if math.isfinite(x) else None
            if m:
                decimals = len((m.group(2) or "").rstrip("0"))  # repr writes 1.0 for 1: no decimal
                units.append(10.0 ** (int(m.group(3) or 0) - decimals))
    return 0.5 * min(units) if units else 0.0


class Where:
    """Builds the one-line messages: 'file:line: key.path: what was expected'."""

    def __init__(self, path: Path, source: Source | None):
        self.path, self.source = path, source

    def at(self, keypath: str, table: str | None = None, occurrence: int = 0, key: str | None = None) -> str:
        line = self.source.line(table, occurrence, key) if (self.source and table is not None) else None
        return f"{self.path}:{line}: {keypath}" if line else f"{self.path}: {keypath}"

    def error(self, keypath: str, message: str, table=None, occurrence=0, key=None) -> TracerError:
        return TracerError(f"{self.at(keypath, table, occurrence, key)}: {message}")


def quoted(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_\-]+", name) else f'"{name}"'


def type_name(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f"the string {v!r}"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a table"
    return f"{v!r}"


def check_keys(table: dict, allowed, keypath: str, w: Where, src_table: str, occurrence: int = 0) -> None:
    for key in table:
        if key not in allowed:
            where = f"{keypath}.{quoted(key)}" if keypath else quoted(key)
            hint = near(key, allowed) or f" (known keys: {', '.join(allowed)})"
            raise w.error(where, f"unknown key{hint}", src_table, occurrence, key)


def want_table(doc: dict, key: str, w: Where) -> dict:
    v = doc.get(key, {})
    if not isinstance(v, dict):
        raise w.error(key, f"expected a table [{key}], got {type_name(v)}", "", 0, key)
    return v


def tables(v, key: str, w: Where) -> list:
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise w.error(key, f"expected [[{key}]] tables, got {type_name(v)}", "", 0, key)
    return v


def non_number(v):
    if isinstance(v, list):
        for x in v:
            bad = non_number(x)
            if bad is not None:
                return bad
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    return None


def read_toml(path: Path, what: str = "scenario") -> tuple[dict, Source]:
    """The parsed TOML of a scenario (or a lesson: `what`; a regular file of at most 16 MB, nested at most
    MAX_DEPTH deep) and its `Source`."""
    raw = read_small(path, f"{what} file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TracerError(f"{path}: not a text file (byte {e.start} is not UTF-8); a {what} is TOML text") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = re.search(r"\(at line (\d+), column (\d+)\)$", msg)
        if m:
            msg = msg[: m.start()].strip()
            raise TracerError(f"{path}:{m.group(1)}:{m.group(2)}: TOML syntax error: {msg} "
                              f"(line {m.group(1)}, column {m.group(2)})") from None
        raise TracerError(f"{path}: TOML syntax error: {msg}") from None
    except RecursionError:
        raise TracerError(f"{path}: TOML too deep (nested more than {MAX_DEPTH} deep)") from None
    check_depth(doc, f"{path}: TOML too deep")
    return doc, Source(text)
