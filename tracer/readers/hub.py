"""Models by name in the local Hugging Face cache, and `tracer download`: never the network at run time.

Names are GPT-2's (`gpt2`, `gpt2-medium`, `gpt2-large`, `gpt2-xl`, `distilgpt2`, `openai-community/…`)
or any Hub repo id (`HuggingFaceTB/SmolLM2-135M`, `Qwen/Qwen2.5-0.5B`, `meta-llama/Llama-3.2-1B`).
They are looked up in the cache huggingface_hub keeps (HF_HUB_CACHE, HF_HOME/hub,
XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub); `download` fills it, with the fetch
function the CLI passes in (huggingface_hub's `hf_hub_download`), so that nothing here imports it.
Core module: the standard library.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..core.config import GPT2_SHAPES
from ..errors import TracerError, near
from .folder import weight_files


REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")  # owner/name on the Hub


def is_repo_id(name: str) -> bool:
    """A Hugging Face repo id (HuggingFaceTB/SmolLM2-135M, Qwen/Qwen2.5-0.5B, …) or a GPT-2 name."""
    return name in GPT2_SHAPES or bool(REPO_ID.match(name)) and ".." not in name


def hub_repos(name: str) -> tuple[str, list[str]]:
    """The short name (gpt2-medium, or the repo id itself) and the repo ids it is cached under, newest naming first."""
    short = name.split("/", 1)[1] if name.startswith(("openai-community/", "distilbert/")) else name
    if short not in GPT2_SHAPES:
        if REPO_ID.match(name) and ".." not in name:
            return name, [name]
        raise TracerError(f"model {name!r}: not a GPT-2 name{near(short, GPT2_SHAPES)} nor a Hugging Face repo id "
                          f"(owner/name); GPT-2's names: {', '.join(GPT2_SHAPES)}")
    if short == "distilgpt2":
        return short, ["distilbert/distilgpt2", "distilgpt2"]
    return short, [f"openai-community/{short}", short]


def cache_dirs() -> list[Path]:
    """Where huggingface_hub keeps downloads: HF_HUB_CACHE, HF_HOME/hub, then the default."""
    found: list[Path] = []
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        found.append(Path(env["HF_HUB_CACHE"]))
    if env.get("HF_HOME"):
        found.append(Path(env["HF_HOME"]) / "hub")
    if env.get("XDG_CACHE_HOME"):
        found.append(Path(env["XDG_CACHE_HOME"]) / "huggingface" / "hub")
    found.append(Path("~/.cache/huggingface/hub"))
    out: list[Path] = []
    for p in found:
        p = p.expanduser()
        if p not in out:
            out.append(p)
    return out


def _snapshots(repo_dir: Path) -> list[Path]:
    """The repo's snapshots, the one refs/main names first, then the newest."""
    snaps = repo_dir / "snapshots"
    if not snaps.is_dir():
        return []
    found = sorted((p for p in snaps.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    main = repo_dir / "refs" / "main"
    if main.is_file():
        ref = main.read_text(encoding="utf-8", errors="replace").strip()
        found.sort(key=lambda p: p.name != ref)
    return found


def find_cached(name: str) -> tuple[Path | None, list[str], list[str]]:
    """(snapshot folder or None, the places searched, notes on snapshots that lacked files)."""
    short, repos = hub_repos(name)
    needs = ("config.json", "model.safetensors") + (() if short in GPT2_SHAPES else ("tokenizer.json",))
    searched: list[str] = []
    notes: list[str] = []
    for cache in cache_dirs():
        for repo in repos:
            repo_dir = cache / ("models--" + repo.replace("/", "--"))
            searched.append(f"{repo_dir}/snapshots/*/")
            for snap in _snapshots(repo_dir):
                has = {f: (snap / f).is_file() for f in needs}
                has["model.safetensors"] = has["model.safetensors"] or (snap / "model.safetensors.index.json").is_file()
                if all(has.values()):
                    return snap, searched, notes
                lacks = [f for f in needs if not has[f]]
                pickled = " (it has pytorch_model.bin, which tracer never loads)" if (snap / "pytorch_model.bin").exists() else ""
                notes.append(f"{snap} lacks {' and '.join(lacks)}{pickled}")
    return None, searched, notes


def how_to_get(short: str) -> str:
    repo = hub_repos(short)[1][0]
    files = "config.json model.safetensors" + ("" if short in GPT2_SHAPES else " tokenizer.json")
    return (f"get them with: huggingface-cli download {repo} {files}, "
            f"or: pip install huggingface_hub && tracer download {short}")


def cached_folder(name: str) -> Path:
    """The snapshot folder of a GPT-2, by name, in the local Hugging Face cache; never touches the network."""
    short, _ = hub_repos(name)
    snap, searched, notes = find_cached(name)
    if snap is None:
        extra = f"; {'; '.join(notes)}" if notes else ""
        raise TracerError(
            f"model {name!r}: weights not found in the local Hugging Face cache (searched {', '.join(searched)}){extra}; "
            + how_to_get(short)
        )
    return snap


def download(name: str, fetch) -> Path:
    """Fetch what tracer reads with `fetch` (huggingface_hub's `hf_hub_download`, passed in by the
    CLI so that this module never imports it) and return the snapshot folder: config.json, then
    model.safetensors (or its index and every shard it lists), and for other models than GPT-2 the
    tokenizer (tokenizer.json, and tokenizer_config.json when the repo has one)."""
    short, repos = hub_repos(name)
    repo = repos[0]

    def get(f: str, optional: bool = False) -> Path | None:
        try:
            return Path(fetch(repo_id=repo, filename=f))
        except Exception as e:  # network, authentication, disk: one line, no traceback
            if optional:
                return None
            raise TracerError(f"download {repo}/{f}: {type(e).__name__}: {e}") from None

    folder = get("config.json").parent
    if get("model.safetensors", optional=True) is None:
        index = get("model.safetensors.index.json", optional=True)
        if index is None:
            raise TracerError(f"download {repo}: it has neither model.safetensors nor model.safetensors.index.json "
                              f"(tracer never loads pickled checkpoints)")
        for shard in weight_files(folder):  # the shards the index lists (each inside the folder)
            get(shard.name)
    if short not in GPT2_SHAPES:
        get("tokenizer.json")
        get("tokenizer_config.json", optional=True)
    return folder
