"""The Split regexes of a tokenizer.json, which may come from anyone: translated from Oniguruma's syntax,
checked for a shape whose matching time is bounded, and run on an engine a signal and a time limit stop.

A backtracking engine (Python's `re`, Oniguruma, fancy-regex) takes time exponential in the text on a
pattern such as `(a+)+b`, and Python's `re` cannot be interrupted, not even by Ctrl-C. So a file's
pattern is refused, in one line, when it is longer than MAX_PATTERN characters, when a quantifier of
more than one repetition applies to anything but one character or one class (`(a+)+`, `(a|aa)*`,
`(?:ab){2,}`: nested quantifiers), when it refers back to a group, or when a repetition count is beyond
what the engine takes (`a{4294967296}`). Every pre-tokenizer pattern of the Hub's families (GPT-2,
Llama 3, Qwen2, GPT-4o, Tekken, DeepSeek, SmolLM2's digits) has that shape. The rest is matched by
the `regex` module (installed with tiktoken, which needs it), which returns to the interpreter while
it matches: Ctrl-C stops it, and so does a time limit that grows with the text (`budget`), after which
the prompt is refused in one line rather than run for hours.
"""

from __future__ import annotations

import os
import re
import re._constants as C
import re._parser
import sys
from contextlib import contextmanager
from functools import lru_cache

import regex

from ..errors import TracerError

MAX_PATTERN = 1_000  # characters of a Split regex; the Hub's longest (GPT-4o's) has about 330
_WS_CLASS = "\\t\\n\\x0b\\x0c\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
_ONE_CHARACTER = {C.LITERAL, C.NOT_LITERAL, C.IN, C.ANY, C.CATEGORY}
_REPEATS = {C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT}


def refuse(where, why: str):
    raise TracerError(f"tokenizer {where}: tracer cannot reproduce this tokenizer exactly: {why}; "
                      f"refusing rather than approximating")


def is_panic(e: BaseException) -> bool:
    """A PyO3 PanicException (tiktoken's Rust panicking): a BaseException, so `except Exception` misses it."""
    return type(e).__name__ == "PanicException"


@contextmanager
def rust_quiet():
    """stderr (fd 2) to /dev/null while a call into tiktoken runs: Rust writes a panic's message there itself
    (with RUST_BACKTRACE set, 60 lines of backtrace), though the panic is caught and becomes one line."""
    try:
        sys.stderr.flush()
        saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def budget(text: str) -> float:
    """Seconds one split of this text may take: the Hub's patterns take a few µs per character."""
    return 5.0 + 5e-5 * len(text)


@lru_cache(maxsize=None)
def unicode_class(name: str) -> str:
    """The body of a [...] class matching what \\p{name} matches in Rust's regex (tiktoken's engine)."""
    if not re.fullmatch(r"[A-Za-z_]{1,40}", name):
        raise TracerError(f"unicode class {name!r}: not a property name")
    import numpy as np
    import tiktoken

    try:
        enc = tiktoken.Encoding(f"tracer-class-{name}", pat_str=r"\p{%s}+" % name,
                                mergeable_ranks={bytes([b]): b for b in range(256)}, special_tokens={})
    except BaseException as e:  # an unknown property: ValueError, or a PyO3 PanicException (a BaseException)
        if not (is_panic(e) or isinstance(e, Exception)):
            raise
        raise TracerError(f"unicode class {name!r}: not a property tracer knows") from None
    every = np.r_[0:0xD800, 0xE000:0x110000].astype("<u4").tobytes().decode("utf-32-le")  # all but surrogates
    got = enc.decode_bytes(enc.encode_ordinary(every)).decode("utf-8").encode("utf-32-le")
    points = np.frombuffer(got, "<u4").astype(np.int64)  # in order: the text was
    cut = np.flatnonzero(np.diff(points) != 1) + 1
    runs = zip(points[np.r_[0, cut]], points[np.r_[cut - 1, len(points) - 1]]) if len(points) else ()
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in runs)


def translate(pattern: str, where, shape_only: bool = False) -> str:
    """An Oniguruma pattern of a tokenizer.json Split in Python's syntax, with the same matches
    (shape_only: every class written as one letter, for `check_shape`, without reading Unicode's tables)."""
    if not isinstance(pattern, str):
        refuse(where, f"a Split regex that is not text ({type(pattern).__name__})")
    if len(pattern) > MAX_PATTERN:
        refuse(where, f"a Split regex of {len(pattern):,} characters (tracer reads up to {MAX_PATTERN:,})")
    out, i, depth = [], 0, 0  # depth > 0 inside a [...] class

    def cls(name: str, negated: bool, inside: bool) -> str:
        if shape_only:
            body = "a"
        else:
            body = {"s": _WS_CLASS, "d": unicode_class("Nd")}.get(name) or (
                unicode_class("L") + unicode_class("M") + unicode_class("Nd") + unicode_class("Pc") if name == "w"
                else unicode_class(name))
        if inside and negated:
            refuse(where, f"the regex {pattern!r} negates a class inside [...]")
        return body if inside else f"[{'^' if negated else ''}{body}]"

    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            e = pattern[i + 1]
            if e in "pP" and i + 2 < len(pattern) and pattern[i + 2] == "{":
                end = pattern.find("}", i)
                if end < 0:
                    refuse(where, f"the regex {pattern!r} has an unclosed \\{e}{{")
                out.append(cls(pattern[i + 3 : end], e == "P", depth > 0))
                i = end + 1
                continue
            if e in "sSdDwW":
                out.append(cls(e.lower(), e.isupper(), depth > 0))
            elif e.isascii() and e.isalnum() and e not in "nrtfvaxu":
                refuse(where, f"the regex {pattern!r} uses \\{e}, which tracer does not translate")
            else:
                out.append(c + e)
            i += 2
            continue
        if depth == 0 and c in "^$":
            refuse(where, f"the regex {pattern!r} uses the anchor {c!r}")
        if c == "[":
            depth += 1
        elif c == "]" and depth:
            depth -= 1
        out.append(c)
        i += 1
    return "".join(out)


def _one_character(sub) -> bool:
    while len(sub) == 1 and sub[0][0] is C.SUBPATTERN:
        sub = sub[0][1][3]
    return len(sub) == 1 and sub[0][0] in _ONE_CHARACTER


def _unbounded_shape(sub) -> str | None:
    """What in a parsed pattern can make a backtracking engine take more than polynomial time, or None."""
    for op, av in sub:
        if op in _REPEATS:
            lo, hi, body = av
            if hi > 1 and not _one_character(body):
                return "a quantifier applies to a group (nested quantifiers)"
            inner = [body]
        elif op is C.SUBPATTERN:
            inner = [av[3]]
        elif op is C.BRANCH:
            inner = av[1]
        elif op in (C.ASSERT, C.ASSERT_NOT):
            inner = [av[1]]
        elif op is C.ATOMIC_GROUP:
            inner = [av]
        elif op in (C.GROUPREF, C.GROUPREF_EXISTS, C.GROUPREF_IGNORE):
            return "a reference back to a group"
        else:
            continue
        for s in inner:
            why = _unbounded_shape(s)
            if why:
                return why
    return None


def check_shape(pattern: str, where) -> None:
    """Refuse a pattern whose matching a backtracking engine cannot bound (see the module's text)."""
    try:
        parsed = re._parser.parse(translate(pattern, where, shape_only=True))
    except (re.error, ValueError, OverflowError, RecursionError, IndexError) as e:
        refuse(where, f"the regex {pattern[:200]!r} does not translate to Python ({type(e).__name__}: {str(e)[:80]})")
    why = _unbounded_shape(parsed)
    if why:
        refuse(where, f"the regex {pattern[:200]!r} could take time exponential in the text: {why}")


def compile_split(pattern: str, where) -> regex.Pattern:
    """An Oniguruma pattern of a tokenizer.json Split, checked and compiled with the same matches."""
    check_shape(pattern, where)
    try:
        compiled = regex.compile(translate(pattern, where), regex.V0)
    except (regex.error, re.error, ValueError, OverflowError, RecursionError) as e:
        refuse(where, f"the regex {pattern[:200]!r} does not translate to Python ({type(e).__name__}: {str(e)[:80]})")
    if compiled.match(""):
        refuse(where, f"the regex {pattern[:200]!r} can match empty text")
    return compiled


python_regex = compile_split  # the name tracer.tokenizers.bpe gave it


def split(text: str, pattern, behavior: str, where=None) -> list[str]:
    """`tokenizers`' NormalizedString.split: the matches (unless Removed) and the text between them, no empty
    piece. The matching stops after `budget(text)` seconds: a prompt that takes longer is refused."""
    pieces, prev = [], 0
    try:
        for m in pattern.finditer(text, timeout=budget(text)) if isinstance(pattern, regex.Pattern) else pattern.finditer(text):
            pieces += [text[prev : m.start()], m.group() if behavior == "Isolated" else ""]
            prev = m.end()
    except TimeoutError:
        raise TracerError(f"tokenizer {where or 'tokenizer.json'}: its Split regex took more than {budget(text):.0f} s "
                          f"on a text of {len(text):,} characters (backtracking); refusing the prompt") from None
    pieces.append(text[prev:])
    return [p for p in pieces if p]
