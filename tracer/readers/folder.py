"""A Hugging Face folder as every family reads it: config.json, the safetensors files, training.json.

The plumbing the family modules (`gpt2`, `llama`) share, written once: config.json read once per
load as a bounded JSON object, its values checked into typed numbers (`whole`, `number`, `flag`);
`model.safetensors` or the shards its index lists, every file inside the folder (`inside`); the
declared size checked against the files before any layer's names are built (`check_sizes`); every
tensor memory-mapped (`read_tensors`) and checked for NaN and ∞ in the one read of the file's bytes
(`read_checked`), which drives the progress bar. Pickled checkpoints (`pytorch_model.bin`) are
never loaded. Core module: numpy and the standard library.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..core.config import Config
from ..errors import TracerError, is_whole, near
from ..formats.files import load_safetensors, read_safetensors_header
from ..core.params import first_non_finite
from ..formats.reading import inside, parse_json, read_small
from .checkpoint import Stored

PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack", "model.ckpt.index")
CHECK_CHUNK = 2**22  # elements checked for NaN/inf at a time: bounded extra memory (tests make it small)


# --------------------------------------------------------------------------- config.json


def config_json(folder: Path) -> dict:
    """The folder's config.json as a JSON object (a regular file, bounded in size and depth)."""
    where = inside(folder, "config.json", folder)  # a link out of the folder is refused, its values never quoted
    if not where.exists():
        raise TracerError(f"{folder}: no config.json (a Hugging Face folder holds config.json and model.safetensors)")
    raw = parse_json(read_small(where), f"{where}: not valid JSON")
    if not isinstance(raw, dict):
        raise TracerError(f"{where}: not a JSON object")
    return raw


def model_type(raw: dict) -> str:
    """config.json's model_type ("gpt2" when it names none, as GPT-2's own files do)."""
    return str(raw.get("model_type", "gpt2"))


def whole(raw: dict, key: str, where: Path, default=None) -> int:
    """config.json's `key` as a whole number ≥ 1 (`default` when absent)."""
    value = raw.get(key, default)
    if not is_whole(value, 1):
        got = " (missing)" if key not in raw and default is None else f", got {value!r}"
        raise TracerError(f"{where}: {key!r} must be a whole number ≥ 1{got}")
    return value


def number(raw: dict, key: str, where: Path, default=None) -> float:
    """config.json's `key` as a finite number > 0 (`default` when absent)."""
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise TracerError(f"{where}: {key!r} must be a number > 0, got {value!r}")
    return float(value)


def flag(raw: dict, key: str, where: Path, default: bool) -> bool:
    """config.json's `key` as true or false (`default` when absent or null; the string "false" is not false)."""
    value = raw.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise TracerError(f"{where}: {key!r} must be true or false, got {value!r}")
    return value


def config_error(e: TracerError, where: Path) -> TracerError:
    """Config's own error (which names no file) as one naming config.json, once."""
    text = str(e)
    return TracerError(text if text.startswith(f"{where}:") else f"{where}: {text.removeprefix('config: ')}")


# --------------------------------------------------------------------------- the weights files


def weight_files(folder: Path) -> list[Path]:
    """model.safetensors, or the shards its index lists; a clear error for pickled-only folders.
    Every file must be inside the folder (see `inside`)."""
    single = folder / "model.safetensors"
    if single.exists() or single.is_symlink():
        return [inside(folder, "model.safetensors", single)]
    index = folder / "model.safetensors.index.json"
    if index.exists():
        raw = parse_json(read_small(inside(folder, index.name, index)), f"{index}: not a readable safetensors index")
        weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise TracerError(f"{index}: not a readable safetensors index (no \"weight_map\" of tensor names to files)")
        shards = []
        for name in weight_map.values():
            if not isinstance(name, str) or not name:
                raise TracerError(f"{index}: not a readable safetensors index (a shard is named {name!r})")
            if name not in shards:
                shards.append(name)
        return [inside(folder, name, index) for name in sorted(shards)]
    pickled = [f for f in PICKLED if (folder / f).exists()]
    if pickled:
        raise TracerError(
            f"{folder}: holds only {pickled[0]}; pickled checkpoints are never loaded; tracer needs model.safetensors "
            f"(huggingface-cli download openai-community/gpt2 config.json model.safetensors, for example)"
        )
    raise TracerError(f"{folder}: no model.safetensors (a Hugging Face folder holds config.json and model.safetensors)")


def check_sizes(cfg: Config, files: list[Path], where: Path, stored: int) -> None:
    """Refuse a config.json that declares more numbers (`stored`) than the weights files can hold
    (at 2 bytes each, float16's size), before any layer's names or shapes are built from it."""
    need = stored * 2
    try:
        have = sum(f.stat().st_size for f in files)
    except OSError:
        return  # a missing shard is reported by name when it is read
    if need > have:
        raise TracerError(f"{where}: describes {stored:,} parameters (at least {need:,} bytes), "
                          f"but {', '.join(f.name for f in files)} hold{'s' if len(files) == 1 else ''} {have:,} bytes; "
                          f"config.json does not match the weights")


def read_tensors(files: list[Path], raw_bf16: bool = False) -> tuple[dict[str, np.ndarray], dict[str, Path], dict[str, str]]:
    """Every tensor of the files, memory-mapped; the file each came from; its stored dtype ("BF16", …).
    `raw_bf16`: bfloat16 tensors as their mapped bits, not widened (a lazy read: `tracer.formats.stored`)."""
    tensors: dict[str, np.ndarray] = {}
    origin: dict[str, Path] = {}
    dtypes: dict[str, str] = {}
    for f in files:
        arrays, _ = load_safetensors(f, raw_bf16=raw_bf16)  # checks the header, offsets and truncation
        header, _ = read_safetensors_header(f)
        for k, v in arrays.items():
            tensors[k], origin[k], dtypes[k] = v, f, str(header[k]["dtype"])
    return tensors, origin, dtypes


def check_present(shapes: dict, tensors: dict, origin: dict, folder: Path, ignore=lambda name: False) -> None:
    """Every tensor `shapes` names present with that shape (names not `ignore`d suggested when one is missing)."""
    files = ", ".join(sorted({p.name for p in origin.values()})) or "model.safetensors"
    for name, shape in shapes.items():
        if name not in tensors:
            raise TracerError(f"{folder / files}: missing tensor {name!r}{near(name, [k for k in tensors if not ignore(k)])}")
        got = tuple(tensors[name].shape)
        if got != tuple(shape):
            raise TracerError(f"{origin[name]}: tensor {name!r} has shape {list(got)} but config.json implies {list(shape)}")


def check_room(need: int, where: Path, stored: str) -> None:
    """Refuse, with the numbers, a model whose float32 copies (`need` bytes: what is not stored as
    float32, and the fused Q|K|V matrices) would not fit in what this process may take, before any
    is made: one line, not an out-of-memory kill. A reader asked for every weight expanded (not
    `lazy`) calls it; `tracer.load` reads lazily and weighs layers against its budget instead."""
    from ..core.memory import memory_room

    room = memory_room()
    if need > room:
        raise TracerError(f"{where}: expanded to float32 this model needs {need / 1e9:.1f} GB more ({stored}), and this "
                          f"process can take {room / 1e9:.1f} GB; tracer.load runs such a model layer by layer (--memory)")


def expansion_bytes(shapes: dict, dtypes: dict, fused_qkv: int = 0) -> int:
    """Bytes of the float32 copies reading makes: 4 per number of every tensor not stored as float32
    (`dtypes`: name → stored type), plus `fused_qkv` numbers of the fused Q|K|V matrices."""
    copied = sum(int(np.prod(shape)) for name, shape in shapes.items() if dtypes.get(name) not in ("F32", "float32"))
    return 4 * (copied + fused_qkv)


def as_float32(name: str, arr: np.ndarray, where: Path) -> np.ndarray:
    """The array as float32: the memory-mapped view itself when it already is (no copy)."""
    if arr.dtype.kind != "f":
        raise TracerError(f"{where}: tensor {name!r} has dtype {arr.dtype}, expected floating point weights")
    arr = arr.view(np.ndarray)  # a plain array over the same mapped bytes, not an np.memmap
    return arr if arr.dtype == np.float32 else arr.astype(np.float32)


def check_finite(name: str, arr: np.ndarray, where: Path, advance=None) -> None:
    """A TracerError naming the tensor if it holds NaN or inf; reads it in bounded chunks.

    This is the one pass over the file's bytes, so it drives the progress bar (`advance(n_elements)`)."""
    bad = first_non_finite(arr, advance, CHECK_CHUNK)
    if bad is not None:
        raise TracerError(f"{where}: tensor {name!r} holds NaN or infinite values (first at index {bad})")


@contextmanager
def no_progress(total_bytes: int, label: str):
    """The progress context a reader uses when none is given: `advance` does nothing."""
    yield lambda n: None


def read_checked(tensors: dict, origin: dict, names, label: str, progress=None) -> dict[str, np.ndarray]:
    """The tensors `names` as float32 (views of the mapped file when it is float32; bfloat16 and
    float16 converted), each checked for NaN and inf in the one read of the file's bytes, which
    drives `progress(total_bytes, label)`: a context manager giving `advance(n_bytes)` (the CLI
    passes a progress bar)."""
    total = sum(tensors[k].nbytes for k in names)
    out: dict[str, np.ndarray] = {}
    with (progress or no_progress)(total, label) as advance:
        for k in names:
            arr = as_float32(k, tensors[k], origin[k])  # [...] a view when the file is float32
            check_finite(k, arr, origin[k], lambda n, size=tensors[k].itemsize: advance(n * size))
            out[k] = arr
    return out


def stored_as(names: dict, dtypes: dict, fmt: str = "safetensors") -> dict:
    """TransformerLens name → `Stored`, from {TL name: file tensor name} and the file's dtypes."""
    return {tl: Stored(dtypes[t], t, fmt) for tl, t in names.items() if t in dtypes}


def read_training(folder: Path) -> dict | None:
    """How the weights were trained, when `tracer train` made them (training.json), else None."""
    where = inside(folder, "training.json", folder)
    if not where.exists():
        return None
    info = parse_json(read_small(where), f"{where}: not readable JSON")
    if not isinstance(info, dict) or info.get("format") != "tracer-training":
        raise TracerError(f"{where}: not a tracer training record (no \"format\": \"tracer-training\")")
    return info
