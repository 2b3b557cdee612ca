"""What rendering a chat template may cost: time, memory and depth, each bounded (`tracer.tokenizers.chat`
wires these into jinja's sandbox; this module knows no jinja).

A template is a program that came with a model file. jinja's sandbox keeps it from Python's internals, not
from `range(10**6)` loops, `'x' * 10**10`, `'{:>2000000000}'.format(x)` or a macro that calls itself. So:
  - every value a template makes is sized before it is made where one operation can make it large (a
    repeat, a width, a padding, a join, a replace, a range, lorem ipsum, JSON's indent), and after it is
    made everywhere else; no value may exceed `Budget.most` characters (or items), the characters made in
    all may not exceed `Budget.total`, and the text rendered may not exceed `Budget.most` either;
  - a value shown as text (`{{ x }}`, `x ~ y`, `x | string`, `x | tojson`) is weighed as the text it
    becomes, shared references counted each time they are shown (a list holding one long list a
    thousand times is a thousand long lists once printed);
  - macros may call one another at most DEPTH_MAX deep; Python's own recursion limit catches the rest;
  - the render runs in a thread of its own (`run_bounded`) for at most `seconds`: past that, or when
    `stop_all` is called (a server stopping), an exception is raised in that thread at its next Python
    step and the caller has its answer at once.
A bound that is hit raises `TemplateBound`, whose message says which bound and its numbers. Core module:
the standard library only.
"""

from __future__ import annotations

import ctypes
import re
import threading

OUTPUT_MOST = 1_000_000  # characters of rendered text (or of any one value), at least; more for longer messages
COUNT_MOST = 100_000  # numbers in a range, slices, lines of a batch: what a loop may be asked to walk
DEPTH_MAX = 64  # macros calling macros (real templates nest a JSON schema's levels: under 10)
INT_BITS_MAX = 100_000  # a whole number's size (Python's int to text stops at 4,300 digits anyway)
SECONDS = 2.0  # a template's render (real ones take milliseconds)
WIDTH = re.compile(r"(?:\d+)(?=[,_]?(?:\.\d+)?[a-zA-Z%]?$)")  # a format spec's width
PERCENT = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([diouxXeEfFgGcrsa%])")


class TemplateBound(Exception):
    """A bound was hit: the message says which, with the numbers."""


class TemplateStopped(BaseException):
    """Raised in a rendering thread that ran out of time or was stopped (a BaseException: no template
    code or library `except Exception` swallows it)."""


class Budget:
    """The sizes one render may reach: `most` for any value and for the text, `total` for all it makes."""

    def __init__(self, input_chars: int = 0):
        self.most = max(OUTPUT_MOST, 4 * int(input_chars))
        self.total = 32 * self.most
        self.made = 0
        self.depth = 0

    @classmethod
    def for_input(cls, *values) -> "Budget":
        """A budget for a render of `values` (the messages, the special tokens): the text bound grows with them."""
        measure = cls()
        measure.most = 2**62
        return cls(sum(measure.shown(v) for v in values))

    def size(self, n: int, what: str) -> None:
        """`what` would be `n` characters or items: within the bound, or TemplateBound."""
        if n > self.most:
            raise TemplateBound(f"{what} would be {n:,} characters or items; a chat template's values are at most "
                                f"{self.most:,}")

    def count(self, n: int, what: str) -> None:
        if n > COUNT_MOST:
            raise TemplateBound(f"{what} of {n:,}; a chat template may ask for at most {COUNT_MOST:,}")

    def made_value(self, value):
        """Count a value the template made; one over the bound, or too much made in all, is refused."""
        n = len(value) if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)) else 0
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > INT_BITS_MAX:
            raise TemplateBound(f"a whole number of {value.bit_length():,} bits; at most {INT_BITS_MAX:,}")
        self.size(n, "a value")
        self.made += n
        if self.made > self.total:
            raise TemplateBound(f"it made more than {self.total:,} characters in all; a chat template may make at "
                                f"most {self.total:,}")
        return value

    def shown(self, value, what: str = "a value shown as text") -> int:
        """The characters `value` becomes as text, about (containers walked, shared parts each time), within
        the bound; returns them."""
        n, stack = 0, [value]
        while stack:
            v = stack.pop()
            if isinstance(v, str):
                n += len(v) + 2
            elif isinstance(v, dict):
                n += 2 + 4 * len(v)
                stack.extend(v.keys())
                stack.extend(v.values())
            elif isinstance(v, (list, tuple, set, frozenset)):
                n += 2 + 2 * len(v)
                stack.extend(v)
            elif isinstance(v, int) and not isinstance(v, bool):
                n += v.bit_length() // 3 + 2
            else:
                n += 24
                inner = getattr(v, "_Namespace__attrs", None)  # jinja's namespace shows its table
                if isinstance(inner, dict):
                    stack.append(inner)
            if n > self.most:
                self.size(n, what)
        return n

    def repeat(self, left, right) -> None:
        """`left * right`: a text or list repeated, or two whole numbers multiplied."""
        for seq, k in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(k, int):
                self.size(len(seq) * max(k, 0), f"{type(seq).__name__} × {k:,}")
        if _whole(left) and _whole(right) and left.bit_length() + right.bit_length() > INT_BITS_MAX:
            raise TemplateBound(f"a product of {left.bit_length() + right.bit_length():,} bits; at most {INT_BITS_MAX:,}")

    def power(self, left, right) -> None:
        if _whole(left) and _whole(right) and right > 0 and abs(left) > 1 and left.bit_length() * right > INT_BITS_MAX:
            raise TemplateBound(f"a power of about {left.bit_length() * right:,} bits; at most {INT_BITS_MAX:,}")

    def percent(self, fmt: str, args) -> None:
        """`fmt % args`: no width or precision from an argument ('*'), none over the bound, the values shown within it."""
        for star_or_width, precision, _ in PERCENT.findall(fmt):
            for n in (star_or_width, precision):
                if n == "*":
                    raise TemplateBound("a '*' width or precision in % formatting; write the number")
                if n:
                    self.size(int(n) if len(n) < 12 else 10**12, "a % format's width or precision")
        self.size(len(fmt) + self.shown(args, "the values formatted"), "a formatted text")

    def spec(self, spec: str, value) -> None:
        """A str.format field's spec (after its nested fields are filled) and its value."""
        for n in re.findall(r"\d+", spec):
            self.size(int(n) if len(n) < 12 else 10**12, "a format spec's width or precision")
        self.shown(value, "a formatted value")


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# --------------------------------------------------------------------------- time: a thread of its own

_RUNNING: dict[int, "Render"] = {}  # thread id → the render running there
_LOCK = threading.Lock()
_local = threading.local()


def budget() -> Budget:
    """The budget of the render running in this thread (a generous one outside any render)."""
    b = getattr(_local, "budget", None)
    if b is None:
        b = _local.budget = Budget()
    return b


class Render:
    """One render in its own daemon thread: `fn()` run with `budget` as this thread's budget."""

    def __init__(self, fn, budget: Budget):
        self.fn, self.budget = fn, budget
        self.done = threading.Event()
        self.result = self.error = None
        self.why: str | None = None  # "time" or "stopping" once stopped
        self.thread = threading.Thread(target=self._run, name="tracer-chat-template", daemon=True)

    def _run(self) -> None:
        _local.budget = self.budget
        try:
            self.result = self.fn()
        except BaseException as e:  # noqa: BLE001  handed to the caller, whatever it is
            self.error = e
        while True:  # a stop made just as the render ended is raised at the first call here, and caught
            try:
                with _LOCK:
                    _RUNNING.pop(self.thread.ident, None)  # from now on `stop` raises nothing here
                break
            except TemplateStopped as e:
                self.error = self.error or e
        self.done.set()

    def stop(self, why: str) -> None:
        """Raise TemplateStopped in the render's thread at its next Python step (once)."""
        with _LOCK:
            if self.why is not None or self.done.is_set() or _RUNNING.get(self.thread.ident) is not self:
                return
            self.why = why
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread.ident), ctypes.py_object(TemplateStopped))


class within:  # noqa: N801  (a context manager read as a phrase: `with within(deadline, stopping):`)
    """Renders started in this thread inside the block end by `deadline` (time.monotonic()) at the latest, and
    stop when `should_stop()` turns true (a server's time limit and its stopping)."""

    def __init__(self, deadline: float, should_stop=None):
        self.limit = (deadline, should_stop)

    def __enter__(self):
        self.before, _local.limit = getattr(_local, "limit", None), self.limit
        return self

    def __exit__(self, *exc):
        _local.limit = self.before


def run_bounded(fn, budget: Budget, seconds: float = SECONDS, should_stop=None):
    """`fn()`'s result, run in a thread of its own within `seconds` (TemplateBound past them, naming them;
    TemplateBound "stopping" when `stop_all` is called or `should_stop()` turns true; both tightened by an
    enclosing `within`). Its errors are raised here."""
    import time

    limit = getattr(_local, "limit", None)
    if limit is not None:
        seconds = max(0.0, min(seconds, limit[0] - time.monotonic()))
        should_stop = should_stop or limit[1]
    r = Render(fn, budget)
    with _LOCK:
        r.thread.start()
        _RUNNING[r.thread.ident] = r
    deadline = time.monotonic() + seconds
    while not r.done.wait(0.02):
        if time.monotonic() >= deadline:
            r.stop("time")
        elif should_stop is not None and should_stop():
            r.stop("stopping")
        if r.why is not None:
            r.done.wait(0.5)  # the thread ends at its next step; the caller does not wait longer than this
            break
    if r.why == "time":
        raise TemplateBound(f"it ran for more than {seconds:.3g} s; a chat template may take at most {seconds:.3g} s")
    if r.why is not None:
        raise TemplateBound("stopped: the program is stopping")
    if r.error is not None:
        raise r.error
    return r.result


def stop_all(why: str = "stopping") -> int:
    """Stop every render running now (the server stopping); returns how many."""
    with _LOCK:
        running = list(_RUNNING.values())
    for r in running:
        r.stop(why)
    return len(running)
