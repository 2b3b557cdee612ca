"""Output folders (`tracer train --out`): checked before any work, made whole or not at all, and never
over what tracer did not write.

`check_output_folder` refuses a folder before training starts (an empty name, a link, the current,
home or root folder, the corpus's folder or one above it, a folder holding anything but a model
tracer saved) and notes what the folder held; `atomic_folder` fills a hidden sibling and puts it in
place by one rename, after checking that nothing changed there meanwhile: what another process
wrote is left as it is, and the new folder goes beside it ('NAME-2'). Core module: standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import TracerError
from .files import _check_name_length, _remove, _sibling, stop_signals, sweep_leftovers
from .reading import reason


@dataclass(frozen=True)
class FolderSeen:
    """An output folder as `check_output_folder` found it: its absolute path and what it held then
    (None: it did not exist). `atomic_folder` compares it with what is there when it saves."""

    path: Path
    state: tuple | None


def _folder_state(p: Path) -> tuple | None:
    """The folder's identity and every entry's name, inode, size and change time: a writer that adds,
    removes or rewrites anything there changes it."""
    try:
        st = os.lstat(p)
        if not os.path.isdir(p) or os.path.islink(p):
            return ("not a folder", st.st_ino, st.st_mtime_ns)
        entries = []
        with os.scandir(p) as it:
            for e in it:
                es = e.stat(follow_symlinks=False)
                entries.append((e.name, es.st_ino, es.st_size, es.st_mtime_ns))
        return (st.st_dev, st.st_ino, tuple(sorted(entries)))
    except FileNotFoundError:
        return None


def check_output_folder(path, option: str, force: bool, keep=(), ours=None) -> FolderSeen:
    """Refuse an output folder before any work: an empty name, a link, a file in its place, a missing or
    read-only parent, a name too long, the current, home or root folder, a folder that holds or is one
    of the `keep` paths (the corpus), or a folder that holds something already. With `force`, a
    folder that holds something is replaced only when `ours(folder)` finds nothing tracer did not
    write in it (it returns what is wrong, or None); nothing else is ever deleted. Returns what the
    folder held, for `atomic_folder` to see whether another process wrote there meanwhile."""
    if not str(path).strip():
        raise TracerError(f"{option} {str(path)!r}: an empty name; give the name of a new folder")
    p = Path(path)
    try:
        if p.is_symlink():
            to = os.readlink(p)
            what = "a link to nothing" if not p.exists() else "a link"
            raise TracerError(f"{option} {path}: is {what} (to {to!r}); give a new folder's own name")
        if p.exists() and not p.is_dir():
            raise TracerError(f"{option} {path}: is a file; give a folder")
        where = p.resolve()
        special = {Path(where.anchor): "the root of the file system", Path.cwd().resolve(): "the current folder"}
        try:
            special.setdefault(Path.home().resolve(), "your home folder")
        except RuntimeError:  # no home folder to be found
            pass
        if where in special:
            raise TracerError(f"{option} {path}: is {special[where]}; give the name of a new folder")
        for k in keep:
            kr = Path(k).resolve()
            if kr == where or where in kr.parents:
                raise TracerError(f"{option} {path}: holds {k}, which tracer reads; give a folder of its own")
        if p.is_dir() and any(p.iterdir()):
            if not force:
                raise TracerError(f"{option} {path}: exists and is not empty; give --force to replace it")
            wrong = ours(p) if ours is not None else "holds files"
            if wrong:
                raise TracerError(f"{option} {path}: {wrong}; --force replaces only a folder tracer wrote, "
                                  "and nothing else is ever deleted")
        parent = p.absolute().parent
        if not parent.is_dir():
            raise TracerError(f"{option} {path}: folder {str(parent)!r} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise TracerError(f"{option} {path}: folder {str(parent)!r} is not writable")
        _check_name_length(p.absolute())
        return FolderSeen(p.absolute(), _folder_state(p))
    except OSError as e:
        raise TracerError(f"{option} {path}: cannot write there ({reason(e)})") from None


def _spare(path: Path) -> Path:
    """The first free name 'NAME-2', 'NAME-3', … beside `path` (cut to fit the file system)."""
    name = path.name
    while len(os.fsencode(name)) > 240:
        name = name[: len(name) // 2]
    n = 2
    while os.path.lexists(path.with_name(f"{name}-{n}")):
        n += 1
    return path.with_name(f"{name}-{n}")


def _keep_elsewhere(tmp: Path, path: Path) -> str:
    """Move the finished folder `tmp` to a free visible name beside `path`; that name, or '' when none
    could be had (then the folder is lost with tmp)."""
    for _ in range(100):
        spare = _spare(path)
        try:
            os.rename(tmp, spare)
            return str(spare)
        except OSError:
            continue
    return ""


def atomic_folder(path, fill, seen: FolderSeen | None = None) -> None:
    """Make folder `path` whole or not at all: `fill(tmp)` writes into a temporary sibling folder,
    which then takes the place of `path` by one rename.

    With `seen` (from `check_output_folder`), what `path` holds now must be what it held then: when
    another process wrote there meanwhile, nothing in it is touched and the new folder is kept under
    a free name beside it ('NAME-2'), said in the TracerError. An old `path` (one `seen` allowed to
    be replaced) is moved aside first and removed only once the new one is in place; the final
    rename lands only on a missing or empty folder, so a writer that slips in is found, not deleted."""
    import errno

    path = Path(path).absolute()
    sweep_leftovers(path)
    tmp, old = _sibling(path, "tmp"), _sibling(path, "old")
    placed = False
    try:
        with stop_signals():
            tmp.mkdir()
            try:
                fill(tmp)
            except TracerError as e:  # name the folder asked for, not the hidden one (a full disk)
                raise TracerError(str(e).replace(str(tmp), str(path))) from None
            if seen is not None and _folder_state(path) != seen.state:
                raise _changed(tmp, path)
            if path.is_dir() and not path.is_symlink() and any(path.iterdir()):
                os.replace(path, old)
            try:
                os.rename(tmp, path)  # onto nothing or an empty folder only
                placed = True
            except OSError as e:
                if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                    raise _changed(tmp, path) from None
                raise
    except OSError as e:
        raise TracerError(f"{path}: cannot write ({reason(e)})") from None
    finally:
        if not placed and old.exists():  # the old folder goes back, or beside it when its place was taken
            if not os.path.lexists(path):
                os.replace(old, path)
            else:
                _keep_elsewhere(old, path)
        _remove(tmp)
        if placed:
            _remove(old)


def _changed(tmp: Path, path: Path) -> TracerError:
    kept = _keep_elsewhere(tmp, path)
    return TracerError(f"{path}: another process wrote there since it was checked; nothing in it was touched"
                       + (f"; the new folder is saved in {kept} instead" if kept else ""))
