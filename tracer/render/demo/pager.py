"""Paging through the demo at a terminal: single key presses read raw (termios cbreak), the page the
class is on (`Pager`, pure logic, tested without a terminal), and the loop that shows it.
The terminal is restored on exit, on errors and on Ctrl-C."""

from __future__ import annotations

import os

from rich.console import Console

from .base import Demo, Page, Step
from ..words import say
from .screens import screen



def interactive(stdin, console: Console) -> bool:
    try:
        return stdin.isatty() and console.is_terminal and os.name == "posix"
    except (AttributeError, ValueError):
        return False


class RawKeys:
    """Single key presses from a terminal (cbreak: no echo, no line buffering, Ctrl-C still works)."""

    def __init__(self, stream):
        import termios
        import tty

        self.fd = stream.fileno()
        self.saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)

    def restore(self) -> None:
        import termios

        termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def _byte(self, timeout: float | None) -> str | None:
        import select

        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return None
        b = os.read(self.fd, 1)
        if not b:
            raise EOFError
        return b.decode("latin-1")

    def read(self, timeout: float | None = None) -> str | None:
        """A key name: next, back, quit, enter, backspace, a digit; None on timeout; '' for others."""
        c = self._byte(timeout)
        if c is None:
            return None
        if c == "\x1b":
            seq = ""
            while len(seq) < 8:
                nxt = self._byte(0.05)
                if nxt is None:
                    break
                seq += nxt
                if nxt.isalpha() or nxt == "~":
                    break
            return {"[C": "next", "OC": "next", "[D": "back", "OD": "back", "[6~": "next", "[5~": "back"}.get(seq, "")
        return key_name(c)


def key_name(c: str) -> str:
    if c in ("\r", "\n"):
        return "enter"
    if c in (" ", "n", "l"):
        return "next"
    if c in ("b", "B", "p", "h"):
        return "back"
    if c in ("q", "Q", "\x04"):
        return "quit"
    if c in ("\x7f", "\x08"):
        return "backspace"
    if c.isdigit():
        return c
    return ""


class Pager:
    """Where the class is: the page, a number being typed, a message. Pure logic, tested without a terminal."""

    def __init__(self, steps: list[Step], pages: list[Page]):
        self.steps = steps
        self.pages = pages
        self.i = 0
        self.typed = ""
        self.message = ""
        self.done = False

    @property
    def page(self) -> Page:
        return self.pages[self.i]

    def first_page_of(self, step: int) -> int:
        return next(i for i, p in enumerate(self.pages) if p.step == step)

    def press(self, key: str | None) -> None:
        """Apply one key (None: the --auto timer)."""
        self.message = ""
        if key is None or key == "next" or (key == "enter" and not self.typed):
            self.typed = ""
            if self.i < len(self.pages) - 1:
                self.i += 1
            elif key is not None:
                self.message = say("demo.last_step")
        elif key == "back":
            self.typed = ""
            if self.i > 0:
                self.i -= 1
        elif key == "quit":
            self.done = True
        elif key == "backspace":
            self.typed = self.typed[:-1]
        elif key.isdigit():
            self.typed = (self.typed + key)[-3:]
        elif key == "enter":
            n = int(self.typed)
            self.typed = ""
            if 1 <= n <= len(self.steps):
                self.i = self.first_page_of(n - 1)
            else:
                self.message = say("demo.no_step", n=str(n), steps=str(len(self.steps)))

    def status(self) -> str:
        if self.typed:
            return say("demo.go_to", typed=self.typed)
        return self.message


def run_interactive(d: Demo, steps: list[Step], pages: list[Page], console: Console, stdin,
                    auto: float | None) -> None:
    pager = Pager(steps, pages)
    keys = RawKeys(stdin)
    try:
        console.show_cursor(False)
        shown = None
        while not pager.done:
            state = (pager.i, pager.status())
            if state != shown:
                view = screen(d, steps, pager.page, pager.status(), keys=True)
                tall = len(console.render_lines(view, console.options, pad=False))
                if tall > console.height:
                    view = screen(d, steps, pager.page, (pager.status() + "  " if pager.status() else "") +
                                  say("demo.too_tall", tall=str(tall), height=str(console.height)), keys=True)
                console.clear()
                console.print(view)
                shown = state
            at_end = pager.i == len(pages) - 1
            try:
                key = keys.read(auto if auto and not at_end else None)
            except EOFError:
                break
            if key is None and (not auto or at_end):
                continue
            if key == "":
                continue
            pager.press(key)
    finally:
        keys.restore()
        console.show_cursor(True)
