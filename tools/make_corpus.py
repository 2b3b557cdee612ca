#!/usr/bin/env python
"""Write the small synthetic training corpus of `tracer corpus`, the same bytes every time.

    python tools/make_corpus.py                       # corpus.txt in the current folder, seed 0
    python tools/make_corpus.py --out c.txt --seed 1 --size 20000
    python tools/make_corpus.py --check corpus.txt    # exit 0 if it has exactly the expected bytes

A thin wrapper for a checkout: the corpus itself (its categories, word lists and seeded draws) is
`tracer.run.corpus`, which an installed tracer runs as `tracer corpus` with the same options and bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's tracer, installed or not

from tracer.run.corpus import CATEGORIES, DEFAULT_LINES, DEFAULT_SEED, RECIPES, SHIPPED_RECIPE, corpus  # noqa: E402,F401  (the tool's old names)


# ---------------------------------------------------------------- command line


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; give it an ordinary file's mode
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _check(path: Path, expected: bytes) -> int:
    try:
        actual = path.read_bytes()
    except OSError as e:
        print(f"{path}: cannot read ({e.strerror})", file=sys.stderr)
        return 1
    if actual == expected:
        print(f"{path}: same bytes (sha256 {hashlib.sha256(actual).hexdigest()})")
        return 0
    from tracer.run.corpus import first_difference

    print(f"{path}: differs from the expected corpus first at line {first_difference(actual, expected)}")
    return 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("corpus.txt"), help="where to write (corpus.txt)")
    p.add_argument("--check", type=Path, metavar="PATH",
                   help="write nothing; exit 0 if PATH holds exactly the corpus for --seed/--size")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed ({DEFAULT_SEED})")
    p.add_argument("--size", type=int, default=DEFAULT_LINES, help=f"lines ({DEFAULT_LINES})")
    p.add_argument("--recipe", choices=list(RECIPES), default=SHIPPED_RECIPE,
                   help=f"which lines teach copying ({SHIPPED_RECIPE}: the shipped abc's)")
    args = p.parse_args(argv)
    if args.size < 0:
        p.error("--size must be 0 or more")
    data = corpus(args.seed, args.size, args.recipe).encode("ascii")
    if args.check is not None:
        return _check(args.check, data)
    _write_atomic(args.out, data)
    print(f"{args.out}: {args.size} lines, {len(data)} bytes, "
          f"sha256 {hashlib.sha256(data).hexdigest()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
