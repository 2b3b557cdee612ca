"""What tracer can open on this machine (`tracer models`): shipped models and scenarios, the Hugging
Face cache, Ollama's store and LM Studio's folders, each with its family, size and storage type.

Only headers are read (config.json, a safetensors header, a GGUF file's metadata and tensor table):
listing never de-quantizes or maps a weight. A file that cannot be read is listed with the reason.
Core module: the standard library (and numpy through the readers).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import TracerError


@dataclass(frozen=True)
class Found:
    name: str  # what to pass to --model
    where: str  # shipped | scenario | Hugging Face cache | Ollama | LM Studio
    family: str  # gpt2, llama, qwen2, … (or why it cannot be read)
    size: int  # bytes on disk (0: unknown)
    storage: str  # the storage type most of its weights use (F32, BF16, …); every type a GGUF file holds ("Q4_1, F32")
    sampling: tuple = ()  # the settings its file suggests, (name, value) pairs (a GGUF's general.sampling.*)


def _folder(folder: Path) -> tuple[str, int, str]:
    """(family, bytes, storage type) of a Hugging Face folder, from config.json and the safetensors headers."""
    from ..formats.files import read_safetensors_header
    from .folder import config_json, model_type, weight_files

    family = model_type(config_json(folder))
    files = weight_files(folder)
    counts: dict[str, int] = {}
    for f in files:
        header, _ = read_safetensors_header(f)
        for k, v in header.items():
            if k != "__metadata__":
                n = 1
                for d in v["shape"]:
                    n *= int(d)
                counts[v["dtype"]] = counts.get(v["dtype"], 0) + n
    return family, sum(f.stat().st_size for f in files), max(counts, key=counts.get) if counts else "?"


def _gguf(path: Path) -> tuple[str, int, str, tuple]:
    """(architecture, bytes, the storage types it holds, most numbers first, the sampling settings it suggests) of a
    GGUF file, from its header (the architecture with the family tracer reads it as, when that is another:
    "olmo2 (olmo3)")."""
    from ..formats.gguf_file import open_gguf
    from .gguf import ARCHITECTURES
    from .gguf_sampling import file_sampling
    from .ollama_compat import translate

    f = open_gguf(path)
    translate(f, path, known=ARCHITECTURES)  # an Ollama blob as llama.cpp reads it (gptoss: gpt-oss), or refused
    counts: dict[str, int] = {}
    for t in f.tensors.values():
        n = 1
        for d in t.shape:
            n *= int(d)
        counts[t.type_name] = counts.get(t.type_name, 0) + n
    kinds = ", ".join(sorted(counts, key=lambda k: -counts[k])) or "?"  # every type it holds, most numbers first
    suggested, _ = file_sampling(f.metadata, f.types, str(path))
    return _family(f, path), path.stat().st_size, kinds, tuple(suggested.items())


def _family(f, path: Path) -> str:
    """A GGUF file's architecture, and the family its metadata makes it when that is not the architecture's
    usual one (an `olmo2` file with sliding windows is OLMo 3's, a `llama` file with experts Mixtral's)."""
    from .gguf import ARCHITECTURES, config_json_of

    arch = str(f.metadata.get("general.architecture", "?"))
    try:
        family = config_json_of(f.metadata, f.tensors, path)["model_type"]
    except TracerError:  # an architecture tracer does not read, or metadata it refuses: listed as the file says
        return arch
    return arch if family == ARCHITECTURES[arch][0] else f"{arch} ({family})"


def _safely(name: str, where: str, read) -> Found:
    try:
        family, size, storage, *sampling = read()
    except (TracerError, OSError, ValueError, KeyError) as e:
        return Found(name, where, f"unreadable: {str(e).splitlines()[0][:80]}", 0, "")
    return Found(name, where, family, size, storage, *sampling)


def models_here(builtin: dict, shipped_dir: Path) -> list[Found]:
    """Every model tracer can open here, shipped ones first (`builtin`: name → words, their folders
    in `shipped_dir`, as `tracer.loaders` keeps them)."""
    from ..scenario import shipped
    from .places import here_models, lmstudio_files, ollama_blob, ollama_models

    found = [_safely(name, "shipped", lambda n=name: _folder(shipped_dir / n)) if (shipped_dir / name).is_dir()
             else Found(name, "shipped", "gpt2", 0, "seeded") for name in builtin]
    found += [Found(name, "scenario", "scenario", 0, "toml") for name in shipped()]
    found += [_safely(p.name, "this folder", lambda p=p: _gguf(p) if p.is_file() else _folder(p)) for p in here_models()]
    found += _hub_cache()
    found += [_safely(name, "Ollama", lambda n=name: _gguf(ollama_blob(n.removeprefix("ollama:")))) for name, _ in ollama_models()]
    found += [_safely(str(f), "LM Studio", lambda f=f: _gguf(f)) for f in lmstudio_files()]
    return found


def _hub_cache() -> list[Found]:
    """The repositories in the local Hugging Face cache that have a config.json and safetensors."""
    from .hub import cache_dirs

    out: list[Found] = []
    seen: set[str] = set()
    for cache in cache_dirs():
        if not cache.is_dir():
            continue
        for repo in sorted(cache.glob("models--*")):
            name = repo.name.removeprefix("models--").replace("--", "/")
            snaps = sorted((p for p in (repo / "snapshots").glob("*") if (p / "config.json").is_file()),
                           key=lambda p: p.stat().st_mtime, reverse=True)
            if snaps and name not in seen:
                seen.add(name)
                out.append(_safely(name, "Hugging Face cache", lambda s=snaps[0]: _folder(s)))
    return out


def names_here() -> list[tuple[str, str]]:
    """(what to pass to --model, where it is) for every model outside tracer that this machine has, by name
    alone (no file opened): the current folder's, Ollama's, LM Studio's, the Hugging Face cache's."""
    from .hub import cache_dirs
    from .places import here_models, lmstudio_files, ollama_models

    out = [(p.name, "this folder") for p in here_models()]
    out += [(name, "Ollama") for name, _ in ollama_models()]
    out += [(f.name, "LM Studio") for f in lmstudio_files()]
    for cache in cache_dirs():
        if cache.is_dir():
            out += [(r.name.removeprefix("models--").replace("--", "/"), "Hugging Face cache")
                    for r in sorted(cache.glob("models--*"))]
    return out


def near_model(name: str) -> str:
    """' (did you mean 'SmolLM2-135M-Instruct.Q4_1.gguf' in this folder?)' for a model here whose name holds
    `name` (any case) or is close to it, or ''."""
    import difflib

    found = names_here()
    low = name.lower()
    hits = [(n, w) for n, w in found if low in n.lower()]
    if not hits:
        close = set(difflib.get_close_matches(low, [n.lower() for n, _ in found], n=3, cutoff=0.6))
        hits = [(n, w) for n, w in found if n.lower() in close]
    if not hits:
        return ""
    return " (did you mean " + " or ".join(f"{n!r} in {w}" for n, w in hits[:3]) + "?)"
