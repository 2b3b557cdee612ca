"""The project's own error type.

Every problem with what a user gave us (a prompt, an option, a file) is a `TracerError`:
the CLI prints its message as one line on stderr and exits with code 2. Anything else
that escapes is a bug in tracer and exits with code 1.

Exit codes of the `tracer` command: 0 success (a replay whose checks fail still succeeds),
1 an internal error (a bug: one line asks for a report; `tracer --debug …` shows the traceback),
2 bad input (this error, and command-line usage errors), 130 interrupted (Ctrl-C), 141 the
reader of a pipe left early. A message names the input first, then what is wrong with it:
"prompt: …", "--layer 30: …", "FILE.npz: …", "FILE.toml:12: model.d_model: …".
"""

from __future__ import annotations


class TracerError(Exception):
    """Bad input: a prompt, option, scenario, weights file or trace file that cannot be used."""

    exit_code = 2


class ValueRefused(TracerError):
    """Bad input that is one value the caller gave: the message names the value ("a memory budget of
    10 KB is below one layer's 148 KB …") and `option` is the keyword that took it (`memory`,
    `ablate`), which the CLI shows as its flag ("--memory: a memory budget of 10 KB …"): the core
    never names a flag, and the CLI need not re-parse a value to say which one."""

    def __init__(self, message: str, option: str):
        super().__init__(message)
        self.option = option


def near(word: str, choices, n: int = 3) -> str:
    """' (did you mean X?)' for the closest of `choices`, or '' when nothing is close."""
    import difflib

    close = difflib.get_close_matches(word, [str(c) for c in choices], n=n, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


def is_whole(value, least: int | None = None) -> bool:
    """Whether `value` is a whole number (an int, never a bool: `true` is no count) of at least `least`:
    the one rule every count, size, seed, step and id read from a user or a file obeys."""
    return isinstance(value, int) and not isinstance(value, bool) and (least is None or value >= least)
