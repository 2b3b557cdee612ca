"""Files: atomic writes, output-path checks, `.npz` and safetensors, and tracer's own weights files.

Every file tracer writes goes through `atomic_write` (a temporary name in the same folder, then a
rename), so a failure, Ctrl-C, SIGTERM or SIGHUP never leaves a partial file. Files are read
through `tracer.formats.reading` (regular files only, sized from what they declare before anything is
allocated): a weights file's stored config is read first and every array's header checked
against the shapes that config gives before the array is read (`weights_header`, then
`load_weights_file`). `.npz` arrays are read with `allow_pickle=False`: a pickled object is
refused, never unpickled. safetensors is read and written with numpy alone (an 8-byte length, a JSON
header and raw little-endian bytes), so that the core stays numpy-only and large files are
memory-mapped rather than copied; the tests check this code against the `safetensors` library.
Core module: imports numpy only.
"""

from __future__ import annotations

import json
import math
import os
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.config import Config
from ..errors import TracerError
from .reading import MAX_TEXT_BYTES, open_regular, parse_json, read_npz, reason
from .reading import load_npz  # noqa: F401  still part of this module's API (tests, tools)

MAX_ST_HEADER = 16 * 2**20  # bytes of a safetensors JSON header (GPT-2 xl's is 60 KB)


def check_output_path(path, option: str, suffixes: tuple[str, ...]) -> None:
    """Refuse an output path before any work is done: wrong suffix, a folder, a missing or read-only
    folder, a name the system refuses (too long)."""
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise TracerError(f"{option} {path}: the file must end in {', '.join(suffixes)}")
    try:
        if not p.parent.is_dir():
            raise TracerError(f"{option} {path}: folder {str(p.parent)!r} does not exist")
        if p.is_dir():
            raise TracerError(f"{option} {path}: is a folder; give a file name")
        if not os.access(p.parent, os.W_OK | os.X_OK):
            raise TracerError(f"{option} {path}: folder {str(p.parent)!r} is not writable")
        _check_name_length(p)
    except OSError as e:
        raise TracerError(f"{option} {path}: cannot write there ({reason(e)})") from None


def _check_name_length(p: Path) -> None:
    """An OSError (ENAMETOOLONG) for a name the folder's file system cannot hold, before any work."""
    import errno

    try:
        most = os.pathconf(p.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        most = 255
    if len(os.fsencode(p.name)) > most:
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))


def _sibling(path: Path, tag: str, pid: int | None = None) -> Path:
    """A hidden name beside `path` for this process (or process `pid`): '.x.npz.1234.tmp', short
    enough for any file system however long `path`'s own name is."""
    name, pid = path.name, os.getpid() if pid is None else pid
    while len(os.fsencode(f".{name}.{pid}.{tag}")) > 255:
        name = name[: len(name) // 2]
    return path.with_name(f".{name}.{pid}.{tag}")


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def sweep_leftovers(path: Path) -> None:
    """Remove what a killed tracer (SIGKILL, a power cut) left beside `path`: the temporary
    '.NAME.PID.tmp' files and folders of writes to `path` whose process is gone. An old folder moved
    aside ('.NAME.PID.old') goes back to its place when that is empty; else it is left alone."""
    import re

    try:
        with os.scandir(path.parent) as it:
            names = [e.name for e in it if e.name.startswith(".") and e.name.endswith((".tmp", ".old"))]
    except OSError:
        return
    for name in names:
        m = re.fullmatch(r"\.(.+)\.([0-9]{1,9})\.(tmp|old)", name, re.DOTALL)
        if not m or _sibling(path, m.group(3), int(m.group(2))).name != name:
            continue  # another file's, or not tracer's
        pid = int(m.group(2))
        if pid == os.getpid() or _alive(pid):
            continue
        left = path.with_name(name)
        if m.group(3) == "tmp":
            _remove(left)
        elif not os.path.lexists(path):
            try:
                os.replace(left, path)
            except OSError:
                pass


def atomic_write(path: str | os.PathLike, write) -> None:
    """Write through a temporary name in the same folder and rename, so no partial file is left:
    not on an error, nor on Ctrl-C, SIGTERM or SIGHUP (`stop_signals`)."""
    path = Path(path)
    try:
        if not path.parent.is_dir():
            raise TracerError(f"{path}: folder {str(path.parent)!r} does not exist")
    except OSError as e:
        raise TracerError(f"{path}: cannot write ({reason(e)})") from None
    sweep_leftovers(path)
    tmp = _sibling(path, "tmp")
    try:
        with stop_signals(), open(tmp, "wb") as f:
            write(f)
            f.close()
            os.replace(tmp, path)
    except OSError as e:
        raise TracerError(f"{path}: cannot write ({reason(e)})") from None
    finally:
        _remove(tmp)


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            import shutil

            shutil.rmtree(path, ignore_errors=True)
        elif path.exists() or path.is_symlink():
            path.unlink()
    except OSError:
        pass


class Stopped(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP arrived: a KeyboardInterrupt that knows which (the exit code is 128 +
    the signal's number, as a shell reports a process the signal ended)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextmanager
def stop_signals(ask=None):
    """SIGINT, SIGTERM and SIGHUP while inside become a `Stopped` exception, so that `finally` blocks
    run (a temporary file is removed) instead of the process ending where it stands.

    With `ask`, the first signal only calls `ask()` (a loop stops after its current step: `tracer
    train`) and a second one raises. Outside the main thread (where signals cannot be caught)
    nothing changes; a signal the process ignores (nohup's SIGHUP, a background job's SIGINT) stays ignored.
    The handlers before are put back on leaving."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    asked = []

    def handler(signum, frame):
        if ask is not None and not asked:
            asked.append(signum)
            ask()
            return
        raise Stopped(signum)

    saved = {}
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:  # ignored (nohup, &): left ignored
            saved[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def save_npz(path, arrays) -> None:
    """Write an `.npz` as `np.savez` does (the same bytes), from a mapping or from (name, array)
    pairs, one array at a time: a lazily rebuilt array (`tracer.core.record.Store`) is made, written
    and dropped before the next one."""
    import zipfile

    pairs = arrays.items() if hasattr(arrays, "items") else arrays

    def write(f):
        with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
            for name, arr in pairs:
                with z.open(name + ".npy", "w", force_zip64=True) as out:
                    np.lib.format.write_array(out, np.asanyarray(arr), allow_pickle=False)

    atomic_write(path, write)


_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
              "I8": "i1", "U8": "u1", "BOOL": "?", "BF16": "<u2"}
_NP_TO_ST = {np.dtype("<f8"): "F64", np.dtype("<f4"): "F32", np.dtype("<f2"): "F16",
             np.dtype("<i8"): "I64", np.dtype("<i4"): "I32", np.dtype("u1"): "U8"}


def save_safetensors(path, arrays: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    blobs = []
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        if arr.dtype.newbyteorder("<") not in _NP_TO_ST and arr.dtype not in _NP_TO_ST:
            raise TracerError(f"{path}: cannot store {name!r} of dtype {arr.dtype} in safetensors")
        arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        header[name] = {"dtype": _NP_TO_ST[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
        blobs.append(arr)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)

    def write(f):
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for arr in blobs:
            f.write(arr.tobytes())

    atomic_write(path, write)


def read_safetensors_header(path) -> tuple[dict, int]:
    """The JSON header and where the data starts; a TracerError for anything malformed."""
    path = Path(path)
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) < 8:
            raise TracerError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, MAX_ST_HEADER):
            raise TracerError(f"{path}: not a safetensors file (header length {n} does not fit a {size}-byte file)")
        header = parse_json(f.read(n), f"{path}: not a safetensors file: its header is not JSON")
    if not isinstance(header, dict):
        raise TracerError(f"{path}: not a safetensors file (header is not a JSON object)")
    start = 8 + n
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise TracerError(f"{path}: not a safetensors file (__metadata__ is not a table of strings)")
            continue
        try:
            dtype, shape, (a, b) = info["dtype"], info["shape"], info["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise TracerError(f"{path}: tensor {name!r} has a malformed header entry") from None
        if not (isinstance(dtype, str) and isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
                and type(a) is int and type(b) is int):
            raise TracerError(f"{path}: tensor {name!r} has a malformed header entry (dtype, shape or offsets)")
        if dtype not in _ST_DTYPES:
            raise TracerError(f"{path}: tensor {name!r} has unsupported dtype {dtype}")
        count = math.prod(shape)
        if b - a != count * np.dtype(_ST_DTYPES[dtype]).itemsize or a < 0:
            raise TracerError(f"{path}: tensor {name!r}: offsets {a}..{b} do not match shape {shape} of {dtype}")
        if start + b > size:
            raise TracerError(
                f"{path}: truncated: tensor {name!r} needs bytes up to {start + b}, the file has {size}"
            )
    return header, start


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:  # [...] uint16 → [...] float32
    """bfloat16 bits widened exactly: each is the top half of a float32."""
    wide = bits.astype(np.uint32)
    wide <<= 16  # in place: one array of the float32 size, not two
    return wide.view(np.float32)


def load_safetensors(path, mmap: bool = True, raw_bf16: bool = False) -> tuple[dict[str, np.ndarray], dict]:
    """Arrays (memory-mapped, read-only, where the dtype allows) and the `__metadata__`. `raw_bf16`:
    bfloat16 tensors stay the mapped uint16 bits (`tracer.formats.stored` widens them when asked)."""
    header, start = read_safetensors_header(path)
    meta = header.pop("__metadata__", {}) or {}
    out: dict[str, np.ndarray] = {}
    if not header:
        return out, meta
    try:
        buf = np.memmap(path, dtype=np.uint8, mode="r") if mmap else np.fromfile(path, dtype=np.uint8)
    except (OSError, ValueError) as e:  # no address space left to map it (ulimit -v), a file changed meanwhile
        raise TracerError(f"{path}: cannot map it into memory ({reason(e) if isinstance(e, OSError) else e})") from None
    for name, info in header.items():
        a, b = info["data_offsets"]
        raw = buf[start + a : start + b]
        arr = raw.view(_ST_DTYPES[info["dtype"]]).reshape(info["shape"])
        if info["dtype"] == "BF16" and not raw_bf16:  # bfloat16 is the top half of a float32
            arr = bf16_to_float32(arr)
        out[name] = arr
    return out, meta


def save_weights(path, cfg: Config, params: dict, seed: int | None = None) -> None:
    """`.npz` or `.safetensors` by suffix; the config travels in the file as JSON."""
    meta = {"format": "tracer-weights", "config": json.dumps(cfg.to_dict())}
    if seed is not None:
        meta["seed"] = str(seed)
    suffix = Path(path).suffix
    if suffix == ".safetensors":
        save_safetensors(path, params, meta)
    elif suffix == ".npz":
        save_npz(path, {**params, "__meta__": np.array(json.dumps(meta))})
    else:
        raise TracerError(f"{path}: weights are saved as .npz or .safetensors, not {suffix or 'no suffix'}")


PICKLED_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


@dataclass(frozen=True)
class WeightsHeader:
    """What a weights file declares, read without its arrays: the stored config (None when it has
    none) and every array's shape and dtype."""

    config: Config | None
    shapes: dict  # name -> tuple
    dtypes: dict  # name -> np.dtype


def weights_header(path) -> WeightsHeader:
    """The stored config and the arrays' shapes and dtypes of a weights file (`.npz` or
    `.safetensors`), arrays unread: what to check before anything is allocated."""
    path = Path(path)
    if path.suffix == ".safetensors":
        header, _ = read_safetensors_header(path)
        meta = header.pop("__metadata__", {}) or {}
        shapes = {k: tuple(v["shape"]) for k, v in header.items()}
        dtypes = {k: np.dtype(np.float32 if v["dtype"] == "BF16" else _ST_DTYPES[v["dtype"]]) for k, v in header.items()}
        return WeightsHeader(_stored_config(path, meta.get("config")), shapes, dtypes)
    if path.suffix == ".npz":
        with read_npz(path) as z:
            heads = {k: z.header(k) for k in z.names if k != "__meta__"}
            cfg_json = None
            if "__meta__" in z.names:
                h = z.header("__meta__")
                if h.shape != () or h.dtype.kind not in "US" or h.nbytes > 4 * MAX_TEXT_BYTES:
                    raise TracerError(f"{path}: its '__meta__' entry is not a JSON object")
                meta = parse_json(str(z.read("__meta__")), f"{path}: its '__meta__' entry is not a JSON object")
                if not isinstance(meta, dict):
                    raise TracerError(f"{path}: its '__meta__' entry is not a JSON object")
                cfg_json = meta.get("config")
        return WeightsHeader(_stored_config(path, cfg_json), {k: h.shape for k, h in heads.items()},
                             {k: h.dtype for k, h in heads.items()})
    if path.suffix in PICKLED_SUFFIXES:
        raise TracerError(f"{path}: pickled checkpoints are never loaded; tracer needs .safetensors or .npz")
    raise TracerError(f"{path}: not a weights file (expected .npz or .safetensors)")


def _stored_config(path: Path, cfg_json) -> Config | None:
    if not cfg_json:
        return None
    try:
        d = parse_json(cfg_json, "not JSON") if isinstance(cfg_json, str) else None
        if not isinstance(d, dict):
            raise TypeError("not a JSON object")
        return Config.from_dict(d)
    except (TracerError, TypeError) as e:
        raise TracerError(f"{path}: its stored config is damaged ({e})") from None


def load_weights_file(path, shapes: dict | None = None) -> tuple[dict[str, np.ndarray], Config | None]:
    """Arrays of a weights file (`.npz` or `.safetensors`) and the config stored in it, if any.

    With `shapes` (name → shape), every array is checked against it before any is read: a name
    it does not hold, another shape, or anything but numbers is refused, one line naming it."""
    path = Path(path)
    head = weights_header(path)
    for name, dtype in head.dtypes.items():
        if dtype.kind not in "biuf":
            raise TracerError(f"{path}: {name!r} must hold numbers, got {dtype}")
        if shapes is not None and name not in shapes:
            raise TracerError(f"{path}: holds {name!r}, which is not a parameter of this model")
        if shapes is not None and tuple(head.shapes[name]) != tuple(shapes[name]):
            raise TracerError(f"{path}: {name!r}: expected {list(shapes[name])}, got {list(head.shapes[name])}")
    if path.suffix == ".safetensors":
        arrays, _ = load_safetensors(path)
    else:
        with read_npz(path) as z:
            arrays = {k: z.read(k) for k in z.names if k != "__meta__"}
    return arrays, head.config
