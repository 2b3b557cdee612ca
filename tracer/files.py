"""Files: atomic writes, output-path checks, `.npz` and safetensors, and tracer's own weights files.

Every file tracer writes goes through `atomic_write` (a temporary name in the same folder, then a
rename), so a failure never leaves a partial file. `.npz` files are read with
`allow_pickle=False`: a pickled object is refused, never unpickled. safetensors is read and written
with numpy alone (the format is an 8-byte length, a JSON header and raw little-endian bytes), so
that the core stays numpy-only and large files are memory-mapped rather than copied; the tests
check this code against the `safetensors` library. Core module: imports numpy only.
"""

from __future__ import annotations

import json
import math
import os
import struct
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .config import Config
from .errors import TracerError

def check_output_path(path, option: str, suffixes: tuple[str, ...]) -> None:
    """Refuse an output path before any work is done: wrong suffix, a folder, a missing or read-only folder."""
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise TracerError(f"{option} {path}: the file must end in {', '.join(suffixes)}")
    if not p.parent.is_dir():
        raise TracerError(f"{option} {path}: folder {str(p.parent)!r} does not exist")
    if p.is_dir():
        raise TracerError(f"{option} {path}: is a folder; give a file name")
    if not os.access(p.parent, os.W_OK | os.X_OK):
        raise TracerError(f"{option} {path}: folder {str(p.parent)!r} is not writable")


def atomic_write(path: str | os.PathLike, write) -> None:
    """Write through a temporary name in the same folder and rename, so no partial file is left."""
    path = Path(path)
    if not path.parent.exists():
        raise TracerError(f"{path}: folder {str(path.parent)!r} does not exist")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except OSError as e:
        raise TracerError(f"{path}: cannot write ({e.strerror or e})") from None
    finally:
        if tmp.exists():
            tmp.unlink()


def check_output_folder(path, option: str, force: bool) -> None:
    """Refuse an output folder before any work: a file in its place, a missing or read-only parent, or
    a folder that holds something already (unless `force`)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise TracerError(f"{option} {path}: is a file; give a folder")
    if p.is_dir() and any(p.iterdir()) and not force:
        raise TracerError(f"{option} {path}: exists and is not empty; give --force to replace it")
    parent = p.absolute().parent
    if not parent.is_dir():
        raise TracerError(f"{option} {path}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TracerError(f"{option} {path}: folder {str(parent)!r} is not writable")


def atomic_folder(path, fill) -> None:
    """Make folder `path` whole or not at all: `fill(tmp)` writes into a temporary sibling folder,
    which then takes the place of `path` (an old `path` is removed only once the new one is in place)."""
    import shutil

    path = Path(path).absolute()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    old = path.with_name(f".{path.name}.{os.getpid()}.old")
    try:
        tmp.mkdir()
        fill(tmp)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    except OSError as e:
        if old.exists() and not path.exists():
            os.replace(old, path)  # put the old folder back
        raise TracerError(f"{path}: cannot write ({e.strerror or e})") from None
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)


def save_npz(path, arrays) -> None:
    """Write an `.npz` as `np.savez` does (the same bytes), from a mapping or from (name, array)
    pairs, one array at a time: a lazily rebuilt array (`tracer.record.Store`) is made, written
    and dropped before the next one."""
    import zipfile

    pairs = arrays.items() if hasattr(arrays, "items") else arrays

    def write(f):
        with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
            for name, arr in pairs:
                with z.open(name + ".npy", "w", force_zip64=True) as out:
                    np.lib.format.write_array(out, np.asanyarray(arr), allow_pickle=False)

    atomic_write(path, write)


def load_npz(path) -> dict[str, np.ndarray]:
    """Every array of an `.npz`, refusing pickled objects (never unpickled)."""
    with read_npz(path) as (names, get):
        return {k: get(k) for k in names}


@contextmanager
def read_npz(path):
    """Open an `.npz` to read one array at a time: yields (names in file order, get(name)).
    Pickled objects are refused (never unpickled); damage is a TracerError, at open or at read."""
    path = Path(path)
    if not path.is_file():
        raise TracerError(f"{path}: no such file")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"PK\x03\x04":  # an .npz is a zip archive; np.load would try other formats
        what = "a pickle; refused (tracer never unpickles)" if magic[:1] == b"\x80" else "not a zip archive"
        raise TracerError(f"{path}: not a readable .npz file ({what})")

    def refused(e: Exception) -> TracerError:
        if isinstance(e, ValueError) and "pickle" in str(e).lower():
            return TracerError(f"{path}: holds a pickled object; refused (tracer never unpickles)")
        if isinstance(e, ValueError):
            return TracerError(f"{path}: not a readable .npz file ({e})")
        return TracerError(f"{path}: not a readable .npz file ({type(e).__name__}: {e})")

    try:
        z = np.load(path, allow_pickle=False)
    except Exception as e:  # zipfile.BadZipFile, EOFError, OSError on truncated files
        raise refused(e) from None

    def get(name: str) -> np.ndarray:
        try:
            return z[name]
        except Exception as e:
            raise refused(e) from None

    try:
        yield list(z.files), get
    finally:
        z.close()


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
    if not path.is_file():
        raise TracerError(f"{path}: no such file")
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise TracerError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, 100_000_000):
            raise TracerError(f"{path}: not a safetensors file (header length {n} does not fit a {size}-byte file)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TracerError(f"{path}: not a safetensors file (header is not JSON: {e})") from None
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


def load_safetensors(path, mmap: bool = True) -> tuple[dict[str, np.ndarray], dict]:
    """Arrays (memory-mapped, read-only, where the dtype allows) and the `__metadata__`."""
    header, start = read_safetensors_header(path)
    meta = header.pop("__metadata__", {}) or {}
    out: dict[str, np.ndarray] = {}
    if not header:
        return out, meta
    if mmap:
        buf = np.memmap(path, dtype=np.uint8, mode="r")
    else:
        buf = np.fromfile(path, dtype=np.uint8)
    for name, info in header.items():
        a, b = info["data_offsets"]
        raw = buf[start + a : start + b]
        arr = raw.view(_ST_DTYPES[info["dtype"]]).reshape(info["shape"])
        if info["dtype"] == "BF16":  # bfloat16 is the top half of a float32
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
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


def load_weights_file(path) -> tuple[dict[str, np.ndarray], Config | None]:
    """Arrays of a weights file (`.npz` or `.safetensors`) and the config stored in it, if any."""
    path = Path(path)
    suffix = path.suffix
    if suffix == ".safetensors":
        arrays, meta = load_safetensors(path)
        cfg_json = meta.get("config")
    elif suffix == ".npz":
        arrays = load_npz(path)
        meta_arr = arrays.pop("__meta__", None)
        try:
            cfg_json = json.loads(str(meta_arr)).get("config") if meta_arr is not None else None
        except (ValueError, AttributeError):
            raise TracerError(f"{path}: its '__meta__' entry is not a JSON object") from None
    elif suffix in (".bin", ".pt", ".pth", ".pkl", ".ckpt"):
        raise TracerError(f"{path}: pickled checkpoints are never loaded; tracer needs .safetensors or .npz")
    else:
        raise TracerError(f"{path}: not a weights file (expected .npz or .safetensors)")
    try:
        cfg = Config.from_dict(json.loads(cfg_json)) if cfg_json else None
    except (ValueError, TypeError, AttributeError) as e:
        raise TracerError(f"{path}: its stored config is damaged ({type(e).__name__}: {e})") from None
    return arrays, cfg
