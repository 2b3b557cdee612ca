"""Reading a file someone gave us: only regular files, each sized from what it declares before
anything is allocated.

A small file must never cost minutes or gigabytes. So:
  - `open_regular` opens only a regular file (not a folder, /dev/zero, a FIFO, a socket), without
    blocking, and turns any OS error (missing, unreadable, a name too long, /proc/self/mem's EIO)
    into one line;
  - `read_small` reads a text file (a scenario, config.json, an index) of at most MAX_TEXT_BYTES;
  - `inside` refuses a file of a model folder that leads out of it (a link, `../`), before it is opened;
  - `parse_json` and `check_depth` refuse JSON that is not JSON or nests deeper than MAX_DEPTH
    (Python's parsers recurse, so 2,000 brackets would end in a RecursionError);
  - `Npz` opens an `.npz` (a zip archive of `.npy` files) and reads every entry's `.npy` header
    first: the entry must be what numpy writes (stored or deflated, no pickles), its declared
    size must match its header's shape and be one the archive can hold, and the whole must fit
    the memory the process may still take (`tracer.core.memory.memory_room`). A caller checks each
    header's shape against what its own config expects (`Npz.header`) before reading the array
    (`Npz.read`).
Pickled objects are refused, never unpickled. Core module: numpy and the standard library only.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tokenize
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TracerError
from ..core.memory import memory_room

MAX_TEXT_BYTES = 16 * 2**20  # a scenario, config.json, an index or a trace's metadata: never near this
MAX_DEPTH = 32  # nesting of JSON and TOML data (a weight written as a list has 3 or 4 levels)
MAX_NPY_HEADER = 65_536  # bytes of an .npy header (numpy writes about 128 for tracer's arrays)
DEFLATE_MAX_RATIO = 1_032  # the most deflate can expand: a larger declared size is a lie
READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def what_is(path) -> str | None:
    """What `path` is when it is not a regular file: "a folder", "a named pipe (FIFO)", "a character
    device", "a block device", "a socket", "a link to nothing", "unreadable (…)"; None for a regular file
    (through links) and for nothing there at all (the caller's "no such …")."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a link to nothing" if os.path.islink(path) else None
    except OSError as e:
        return f"unreadable ({reason(e)})"
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in KINDS if test(mode)), "not a regular file")


def reason(e: OSError) -> str:
    """What went wrong, in the system's words: 'Permission denied', 'File name too long'."""
    return e.strerror or type(e).__name__


@contextmanager
def open_regular(path, kind: str = "file"):
    """`path` opened for reading in binary, when it is a regular file; else a TracerError naming it
    ("no such {kind}", "is a folder", "not a regular file", "cannot read (…)"). Opened without
    blocking (a FIFO does not hang) and checked on the open file itself (no race with a rename)."""
    path = Path(path)
    try:
        fd = os.open(path, READ_FLAGS)
    except FileNotFoundError:
        raise TracerError(f"{path}: no such {kind}") from None
    except OSError as e:
        raise TracerError(f"{path}: cannot read ({reason(e)})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise TracerError(f"{path}: is a folder, not a {kind}")
        if not stat.S_ISREG(mode):
            what = next((name for test, name in KINDS if test(mode)), "a device, a pipe or a socket")
            raise TracerError(f"{path}: not a regular file ({what}); tracer reads only files")
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        try:
            yield f
        except OSError as e:  # a read failed: /proc/self/mem, a disk error, a file cut while reading
            raise TracerError(f"{path}: cannot read ({reason(e)})") from None


def read_small(path, kind: str = "file", limit: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of a small regular file (a scenario, config.json, an index): at most `limit`."""
    with open_regular(path, kind) as f:
        data = f.read(limit + 1)  # /proc files say they are empty: trust what comes, not st_size
    if len(data) > limit:
        raise TracerError(f"{path}: larger than {limit // 2**20} MB; a {kind} is never near that size")
    return data


def parse_json(data, message: str):
    """`data` (bytes or text) parsed as JSON that nests at most MAX_DEPTH deep; else a TracerError
    "{message} (what is wrong)", e.g. message "config.json: not valid JSON"."""
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        value = json.loads(text)
    except UnicodeDecodeError as e:
        raise TracerError(f"{message} (byte {e.start} is not UTF-8)") from None
    except json.JSONDecodeError as e:
        raise TracerError(f"{message} ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise TracerError(f"{message} (nested more than {MAX_DEPTH} deep)") from None
    check_depth(value, message)
    return value


def check_depth(value, message: str, limit: int = MAX_DEPTH) -> None:
    """A TracerError "{message} (nested more than `limit` deep)" for lists and tables nested deeper
    than `limit` (checked without recursion)."""
    todo = [(value, 1)]
    while todo:
        v, depth = todo.pop()
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        if children and depth > limit:
            raise TracerError(f"{message} (nested more than {limit} deep)")
        todo.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def inside(folder: Path, name: str, named_by: Path) -> Path:
    """`folder / name`, when `name` is a plain relative path and the file it reaches (symlinks
    followed) is inside the folder, or, in the Hugging Face cache, inside the repository's `blobs/`
    (a snapshot's files are links there). Else refused, before the file is opened or looked at,
    so that the message says nothing about a file elsewhere (not even whether it exists)."""
    parts = Path(name).parts
    if Path(name).is_absolute() or ".." in parts or "\\" in name or "\x00" in name:
        raise TracerError(f"{named_by}: names {name!r}, which is not a file inside the model folder; refused")
    try:
        real, home = (folder / name).resolve(), folder.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise TracerError(f"{named_by}: names {name!r}, which cannot be resolved ({e})") from None
    homes = [home]
    if home.parent.name == "snapshots":  # models--org--name/snapshots/REV/file -> ../../blobs/HASH
        homes.append(home.parent.parent / "blobs")
    if not any(real.is_relative_to(h) for h in homes):
        raise TracerError(f"{named_by}: {name!r} leads outside the model folder (a link or a path elsewhere); refused")
    return folder / name


# --------------------------------------------------------------------------- .npz


# What numpy raises on a damaged .npy header: a header numpy's own tokenizer cannot finish (an unclosed
# bracket: tokenize.TokenError) is as much bad input as one it parses wrong (SyntaxError, ValueError).
HEADER_ERRORS = (ValueError, TypeError, OSError, EOFError, zipfile.BadZipFile, SyntaxError, RuntimeError,
                 tokenize.TokenError)


@dataclass(frozen=True)
class NpyHeader:
    """An `.npy` entry as its header declares it, read without its data."""

    shape: tuple
    dtype: np.dtype
    nbytes: int


class Npz:
    """An open `.npz`: `names` in file order, `header(name)` before reading, `read(name)` the array.

    Opening checks the archive's directory: only `.npy` entries, stored or deflated, each named
    once, each declared size one the archive can hold; then every entry's `.npy` header (no
    pickled objects, a size that matches the declared one); then the whole against the memory the
    process may still take. Nothing is allocated from a size that was not checked."""

    def __init__(self, path: Path, f):
        self.path = path
        try:
            self.zip = zipfile.ZipFile(f)
            infos = self.zip.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as e:
            raise self.refused(f"{type(e).__name__}: {e}") from None
        size = os.fstat(f.fileno()).st_size
        self.infos: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            name = info.filename.removesuffix(".npy")
            if not info.filename.endswith(".npy") or name in self.infos:
                what = "is named twice" if name in self.infos else "is not an .npy array"
                raise self.refused(f"entry {info.filename!r} {what}")
            self.check_entry(info, size)
            self.infos[name] = info
        self.names = list(self.infos)
        self.headers = {name: self.read_header(name) for name in self.names}
        total = sum(h.nbytes for h in self.headers.values())
        room = memory_room()
        if total > room:
            raise TracerError(f"{path}: its arrays take {total / 1e9:.2f} GB uncompressed; this process can take "
                              f"{room / 1e9:.2f} GB more")

    def refused(self, why: str) -> TracerError:
        return TracerError(f"{self.path}: not a readable .npz file ({why})")

    def check_entry(self, info: zipfile.ZipInfo, archive: int) -> None:
        if info.flag_bits & 1:
            raise self.refused(f"entry {info.filename!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise self.refused(f"entry {info.filename!r} is compressed with method {info.compress_type}; "
                               "numpy writes stored or deflated entries")
        if info.header_offset + info.compress_size > archive:
            raise self.refused(f"entry {info.filename!r} says it holds {info.compress_size:,} bytes, "
                               f"past the end of the {archive:,}-byte file")
        most = info.compress_size if info.compress_type == zipfile.ZIP_STORED else \
            info.compress_size * DEFLATE_MAX_RATIO + 64
        if info.file_size > most:
            raise self.refused(f"entry {info.filename!r} declares {info.file_size:,} bytes from "
                               f"{info.compress_size:,} stored; no archive holds that")

    def read_header(self, name: str) -> NpyHeader:
        info = self.infos[name]
        try:
            with self.zip.open(info) as fp:
                version = np.lib.format.read_magic(fp)
                read = {(1, 0): np.lib.format.read_array_header_1_0,
                        (2, 0): np.lib.format.read_array_header_2_0}.get(version)
                if read is None:
                    raise ValueError(f"unsupported .npy version {version}")
                shape, _, dtype = read(fp, max_header_size=MAX_NPY_HEADER)
                start = fp.tell()
        except HEADER_ERRORS as e:
            raise self.refused(f"entry {name!r}: {type(e).__name__}: {e}") from None
        if dtype.hasobject:
            raise TracerError(f"{self.path}: holds a pickled object; refused (tracer never unpickles)")
        nbytes = math.prod(shape) * dtype.itemsize
        if start + nbytes != info.file_size:
            raise self.refused(f"entry {name!r}: its header says {list(shape)} of {dtype} ({nbytes:,} bytes), "
                               f"the entry holds {info.file_size - start:,}")
        return NpyHeader(tuple(shape), dtype, nbytes)

    def header(self, name: str) -> NpyHeader:
        return self.headers[name]

    def read(self, name: str) -> np.ndarray:
        try:
            with self.zip.open(self.infos[name]) as fp:
                return np.lib.format.read_array(fp, allow_pickle=False, max_header_size=MAX_NPY_HEADER)
        except HEADER_ERRORS as e:
            if "pickle" in str(e).lower():
                raise TracerError(f"{self.path}: holds a pickled object; refused (tracer never unpickles)") from None
            raise self.refused(f"entry {name!r}: {type(e).__name__}: {e}") from None


@contextmanager
def read_npz(path):
    """An `Npz` for `path`, open while inside (see `Npz`)."""
    path = Path(path)
    with open_regular(path) as f:
        magic = f.read(4)
        if magic != b"PK\x03\x04":  # an .npz is a zip archive; np.load would try other formats
            what = "a pickle; refused (tracer never unpickles)" if magic[:1] == b"\x80" else "not a zip archive"
            raise TracerError(f"{path}: not a readable .npz file ({what})")
        f.seek(0)
        z = Npz(path, f)
        try:
            yield z
        finally:
            z.zip.close()


def load_npz(path) -> dict[str, np.ndarray]:
    """Every array of an `.npz`, each checked as `Npz` does; pickled objects refused (never unpickled)."""
    with read_npz(path) as z:
        return {name: z.read(name) for name in z.names}
