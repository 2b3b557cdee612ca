"""The renderers' building blocks: sentences, section rules, indents, equations that wrap with a
hanging indent, tables that fit the width they are given, and the console tracer prints through.

`safe_console` makes the one console every command prints through: text from a prompt or a file
reaches the terminal only through it, so an escape sequence in it is shown (␛[31m), never obeyed,
and a string is never read as Rich markup or emoji codes.
`Trimmed` drops the spaces Rich pads lines with, so nothing trails a line in a pipe or an export.
"""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.segment import Segment
from rich.text import Text

from ..tokenizers.tokens import show_invisible
from .words import say

BRIEF_ROWS = 16  # rows of a long table in brief mode (the first and last ones)
BRIEF_CORNER = 4  # brief mode shows a linear-attention state's first rows and columns (`render.linear`)
FULL_CORNER = 8  # --full shows a state up to this many rows and columns whole


class SafeConsole(Console):
    """A console that never writes control characters from the data: they are shown (␛), not obeyed.
    Rich's own styling is added after this check. A closed pipe raises BrokenPipeError (the CLI
    exits 141) instead of Rich's own exit with status 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError

    def render(self, renderable, options=None):
        for seg in super().render(renderable, options):
            if seg.control is None and not seg.text.isprintable() and seg.text != "\n":
                seg = Segment(show_invisible(seg.text), seg.style, seg.control)
            yield seg


MIN_WIDTH = 40  # narrower than this, tables and equations cannot be laid out: COLUMNS=0 means "unknown"


def safe_console(record: bool = False, **options) -> SafeConsole:
    """The console tracer prints through. Strings are text, never Rich markup or emoji codes (a token,
    a title or a file name '[/x]', ':cat:' or 'ollama:m:ab' is shown as written; tracer styles with `Text`). A width the environment gives that is
    too narrow to lay anything out (COLUMNS=0, COLUMNS=3) is taken as unknown: 80 columns, as
    Rich's default."""
    options.setdefault("markup", False)
    options.setdefault("emoji", False)
    console = SafeConsole(record=record, **options)
    if "width" not in options and console.width < MIN_WIDTH:
        console = SafeConsole(record=record, width=80, **options)
    return console


def section(title: str) -> Rule:
    return Rule(Text(title, style="bold"), align="left", style="blue")


def line(*parts) -> Text:
    """A sentence of (text, style) pieces or plain strings."""
    return Text.assemble(*parts)


def indent(*items, by: int = 2) -> Padding:
    return Padding(Group(*items), (0, 0, 0, by), expand=False)


def hang(words: str, width: int, indent_: int) -> str:
    """`words` wrapped at spaces to `width`, continuation lines indented by `indent_` (a hanging indent)."""
    lines, cur = [], ""
    parts: list[str] = []
    for w in words.split(" "):  # a parenthesised note, "(1,024 dims, ‖·‖ 3.210)", stays on one line
        if parts and parts[-1].startswith("(") and not parts[-1].endswith(")"):
            parts[-1] += " " + w
        else:
            parts.append(w)
    for w in parts:
        limit = width - (indent_ if lines else 0)
        if cur and len(cur) + 1 + len(w) > limit:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    lines.append(cur)
    return ("\n" + " " * indent_).join(lines)


def eq(width: int, desc: str, name: str, vector: str, room: int = 2) -> RenderableType:
    """'desc: name = [vector]' on one line when it fits `width`, else desc, then the equation hanging below it."""
    rhs = f" = {vector}" if name else f"= {vector}"
    sep = ": " if desc and name else " "
    width = width - room
    if len(desc) + len(sep) + len(name) + len(rhs) <= width:
        return Text.assemble(desc + sep if desc else "", (name, "bold"), rhs)
    pad = "  " if desc else ""
    lead = pad + name + (" = " if name else "= ")
    body = hang(vector, width - len(lead), 0).replace("\n", "\n" + " " * len(lead))
    t = Text(desc + (":" if name else "") + "\n") if desc else Text()
    t.append(pad)
    t.append(name, style="bold")
    t.append((" = " if name else "= ") + body)
    return t


def missing(step, names) -> Text | None:
    """A dim note listing the names a trace (recorded with a names filter) does not hold, or None."""
    gone = [n for n in names if n not in step]
    if not gone:
        return None
    return Text(f"(not recorded in this trace: {', '.join(gone)})", style="dim")


def folded(n: int, rows: int, at_least: int = 1) -> list[int | None]:
    """Indices 0 … n−1 when they fit in `rows`; else the first half (at least `at_least` of them), None
    for the ⋮ row, and the last ones, `rows` entries in all: every long table's fold, written once."""
    if n <= rows:
        return list(range(n))
    first = max(rows // 2, at_least)
    return list(range(first)) + [None] + list(range(n - (rows - first - 1), n))


def compact_rows(n: int, brief: bool, limit: int = BRIEF_ROWS) -> list[int | None]:
    """Row indices to show in brief mode, `limit` of them and None for the ⋮ between."""
    return folded(n, limit + 1) if brief else list(range(n))


class Fit:
    """A renderable that builds its table with as many data columns as the width allows: `build(n)`
    makes the table with at most n columns, and the widest that fits whole (measured, not truncated)
    is shown; `most` is the most it may ask for."""

    def __init__(self, build, most: int):
        self.build, self.most = build, most

    def __rich_console__(self, console, options):
        from rich.measure import Measurement

        for n in range(max(self.most, 1), 0, -1):
            table = self.build(n)
            natural = Measurement.get(console, options.update(max_width=10_000), table).maximum
            if n == 1 or natural <= options.max_width:
                yield table
                return


class Rendered:
    """A renderable rendered to lines once, at `console`'s width, so that they can be counted before
    they are printed (`.lines`); it prints without the spaces Rich pads lines with: nothing trails a
    line in a pipe or an export."""

    def __init__(self, console, renderable):
        self.lines = console.render_lines(renderable, console.options, pad=False)

    def __rich_console__(self, console, options):
        yield from trimmed(self.lines)


def trimmed(lines):
    """Rendered lines without the spaces that pad them, each ended by a newline."""
    from rich.segment import Segment

    for line_ in lines:
        segs = list(line_)
        while segs and not segs[-1].control and (segs[-1].style is None or segs[-1].style.bgcolor is None):
            text = segs[-1].text.rstrip(" ")
            if text:
                segs[-1] = Segment(text, segs[-1].style)
                break
            segs.pop()
        yield from segs
        yield Segment.line()

class LessPager:
    """A Rich pager: `less` that leaves what was read on the screen after q (-X: no alternate screen, which
    left an empty screen) and says in its prompt how to move and leave; the user's own PAGER when set."""

    def show(self, content: str) -> None:
        import os
        import pydoc
        import shutil
        import subprocess
        import sys

        if os.environ.get("PAGER") or os.environ.get("MANPAGER") or shutil.which("less") is None:
            pydoc.pager(content)
            return
        prompt = "".join("\\" + c if c in "\\?:.%" else c for c in say("pager.prompt"))  # less's prompt syntax
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        env = dict(os.environ)
        if "utf" in encoding.lower():
            env.setdefault("LESSCHARSET", "utf-8")
        proc = subprocess.Popen(["less", "-R", "-X", "-K", "-P" + prompt], stdin=subprocess.PIPE, env=env)
        try:
            proc.communicate(content.encode(encoding, "replace"))
        except (KeyboardInterrupt, BrokenPipeError):  # Ctrl-C or q before the end: less has the terminal
            proc.wait()
