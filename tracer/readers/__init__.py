"""Readers of weights files: one module per format or family, one value out (`Checkpoint`), one registry.

What a file says it is picks its reader — a folder's config.json `model_type`, a GGUF file's
`general.architecture`, a scenario's `.toml`, a tracer weights file's stored config — and every
reader returns a `tracer.readers.checkpoint.Checkpoint`: the config, the parameters under
TransformerLens's names, the tokenizer, how each parameter is stored, where it came from.

    folder.py       the Hugging Face folder plumbing every family shares (config.json, safetensors, checks)
    gpt2.py         model_type gpt2 (and the GPT-2 writer `tracer train` uses)
    llama.py        model_type llama, qwen2, mistral
    qwen3.py        model_type qwen3 (the Llama block with per-head Q/K norms)
    olmo2.py        model_type olmo2 (norms after the sublayers, Q and K normalized whole)
    phi3.py         model_type phi3 (fused qkv_proj and gate_up_proj split once)
    gemma3.py       model_type gemma3_text (Gemma's switches: √d_model, (1 + w), four norms, GeGLU, local layers)
    gemma2.py       model_type gemma2 (Gemma 3's switches without Q/K norms, with soft-capped scores and logits)
    gemma4.py       model_type gemma4_text (Gemma 4: per-layer inputs, shared keys and values, K = V, per-layer head sizes)
    families.py     model_type → the module reading a Llama-block family (folders and GGUF files)
    gguf.py         GGUF files (llama.cpp, Ollama, LM Studio): metadata and tensors renamed to a family's
    gguf_meta.py    a GGUF metadata value checked, each layer's attention kind as llama.cpp decides it
    gguf_gemma.py   what llama.cpp decides by rule where a Gemma file says nothing
    gguf_qwen35.py  Qwen3.5 files: the linear layers' keys, names and stored forms undone
    gguf_gemma4.py  Gemma 4 files: the per-layer metadata and rope_freqs as Gemma 4's config.json
    gguf_olmo3.py   OLMo 3 files (an `olmo2` file with windows), as llama.cpp's olmo2 graph computes them
    gguf_experts.py mixture-of-experts files: the experts stacked as the file stores them
                    (the container itself is `tracer.formats.gguf_file`, its storage types `tracer.formats.quants`: data readers)
    tracer_files.py tracer's own weights files and scenarios
    places.py       where people keep models: Ollama's manifests, LM Studio's folders
    ollama_compat.py Ollama's own older blobs, translated as its compat layer does before llama.cpp reads them
    inventory.py    `tracer models`: what this machine has, from headers only

A new family that only renames tensors is one module here plus an entry in FOLDER_FAMILIES (and,
for GGUF, in `gguf.ARCHITECTURES`). `tracer.loaders` turns a Checkpoint into a `Model`.
Core modules: numpy and the standard library.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TracerError
from .checkpoint import Checkpoint, Stored
from .families import BLOCK_FAMILIES, family_module


def _gpt2(folder, raw, name, progress, lazy=False):
    from . import gpt2

    return gpt2.read(folder, raw, name, progress, lazy=lazy)


def _block_family(folder, raw, name, progress, lazy=False):
    fam = family_module(raw["model_type"])
    if lazy:  # every such family's `read` is llama's with its module as `family`
        from . import llama

        return llama.read(folder, raw, name, progress, family=fam, lazy=True)
    return fam.read(folder, raw, name, progress)


# config.json's model_type → the reader of such a folder (imported when used: `--help` stays fast)
FOLDER_FAMILIES = {"gpt2": _gpt2, **{family: _block_family for family in BLOCK_FAMILIES}}


def known_families() -> str:
    """'gpt2, llama, qwen2 and mistral': what a folder's model_type may say, in words."""
    names = list(FOLDER_FAMILIES)
    return ", ".join(names[:-1]) + " and " + names[-1]


def read_folder(folder, name: str | None = None, progress=None, lazy: bool = False) -> Checkpoint:
    """A Hugging Face folder: config.json is read once, its model_type picks the family's reader.
    `lazy`: nothing expanded (the Checkpoint's `lazy` source expands it: `tracer.readers.source`)."""
    from .folder import config_json, model_type

    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise TracerError(f"{folder}: not a folder")
    raw = config_json(folder)
    family = model_type(raw)
    reader = FOLDER_FAMILIES.get(family)
    if reader is None:
        raise TracerError(f"{folder / 'config.json'}: model_type is {family!r}; tracer loads {known_families()} checkpoints")
    return reader(folder, raw, name, progress, lazy) if lazy else reader(folder, raw, name, progress)


def read_path(path, name: str | None = None, seed: int = 0, progress=None, lazy: bool = False) -> Checkpoint | None:
    """The checkpoint at `path` by what it is (a folder, a `.gguf`, a `.toml` scenario, a tracer
    weights file), or None when the path is none of these (the caller says what it expected)."""
    path = Path(path).expanduser()
    if path.is_dir():
        return read_folder(path, name, progress, lazy)
    suffix = path.suffix.lower()
    if suffix == ".gguf" or (path.is_file() and _gguf_magic(path)):  # Ollama's blobs have no suffix
        from . import gguf

        return gguf.read(path, name, progress, lazy=lazy)
    if suffix == ".toml":
        from .tracer_files import scenario_checkpoint
        from ..scenario import load_scenario

        return scenario_checkpoint(load_scenario(path))
    from ..formats.files import PICKLED_SUFFIXES

    if suffix in (".npz", ".safetensors") + PICKLED_SUFFIXES:
        from .tracer_files import weights_file

        return weights_file(path, seed)
    return None


def _gguf_magic(path: Path) -> bool:
    """Whether the file starts with GGUF's magic (a regular file we may read)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


__all__ = ["Checkpoint", "FOLDER_FAMILIES", "Stored", "known_families", "read_folder", "read_path"]
