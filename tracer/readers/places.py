"""Where people keep models: Ollama's store, LM Studio's folders (the Hugging Face cache is `tracer.readers.hub`).

- `ollama:NAME[:TAG]` (`smollm2:135m`, `user/model:tag`): Ollama keeps a manifest per name and tag,
  `$OLLAMA_MODELS` (else `~/.ollama/models`) `/manifests/registry.ollama.ai/library/NAME/TAG`, a JSON
  list of layers; the one whose mediaType is `application/vnd.ollama.image.model` names the GGUF
  file by digest, `blobs/sha256-HEX`. The name, the digest and the blob are checked before anything is
  opened: a manifest cannot point outside the blob folder.
- The current folder: its GGUF files and its Hugging Face folders (config.json beside the weights), as
  `--model NAME` finds them there (`here_models`).
- LM Studio keeps GGUF files as `~/.lmstudio/models/PUBLISHER/REPO/FILE.gguf` (older versions:
  `~/.cache/lm-studio/models`; `$LMSTUDIO_MODELS` first); a `--model FILE.gguf` that is not a path
  is looked for there by file name.
Core module: the standard library.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import TracerError
from ..formats.reading import parse_json, read_small, what_is

OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_NAME = re.compile(r"^(?:([a-z0-9][a-z0-9._-]{0,79})/)?([a-z0-9][a-z0-9._-]{0,79})(?::([A-Za-z0-9][A-Za-z0-9._-]{0,79}))?$")
DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")


def ollama_home() -> Path:
    """Ollama's store: $OLLAMA_MODELS, else ~/.ollama/models."""
    return Path(os.environ.get("OLLAMA_MODELS") or "~/.ollama/models").expanduser()


def ollama_blob(name: str) -> Path:
    """The GGUF blob of `ollama:NAME[:TAG]` (the part after `ollama:`), through its manifest."""
    m = OLLAMA_NAME.match(name)
    if not m or ".." in name:
        raise TracerError(f"ollama:{name[:80]}: not an Ollama model name (NAME, NAME:TAG or USER/NAME:TAG, "
                          f"e.g. ollama:smollm2:135m)")
    user, model, tag = m.group(1) or "library", m.group(2), m.group(3) or "latest"
    home = ollama_home()
    manifest = home / "manifests" / "registry.ollama.ai" / user / model / tag
    kind = what_is(manifest)
    if kind is not None:  # there, but not a file: say what it is, not "no manifest"
        raise TracerError(f"ollama:{name}: its manifest is {kind}, not a file ({manifest}); tracer reads only files")
    if not manifest.is_file():
        raise TracerError(f"ollama:{name}: no manifest at {manifest} (pull it with: ollama pull {model}:{tag}; "
                          f"tracer looks in $OLLAMA_MODELS, else ~/.ollama/models)")
    doc = parse_json(read_small(manifest, "Ollama manifest"), f"{manifest}: not an Ollama manifest (not JSON)")
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list):
        raise TracerError(f"{manifest}: not an Ollama manifest (no list of layers)")
    digests = [x.get("digest") for x in layers if isinstance(x, dict) and x.get("mediaType") == OLLAMA_MODEL_LAYER]
    if not digests:
        raise TracerError(f"{manifest}: names no model layer ({OLLAMA_MODEL_LAYER})")
    d = DIGEST.match(digests[0]) if isinstance(digests[0], str) else None
    if d is None:
        raise TracerError(f"{manifest}: the model layer's digest is not sha256:<64 hex digits>; refused")
    blobs = home / "blobs"
    blob = blobs / f"sha256-{d.group(1)}"
    try:
        inside = blob.resolve().is_relative_to(blobs.resolve())
    except (OSError, RuntimeError):
        inside = False
    if not inside:
        raise TracerError(f"{manifest}: its model blob leads outside {blobs} (a link elsewhere); refused")
    kind = what_is(blob)
    if kind is not None:
        raise TracerError(f"ollama:{name}: its model blob is {kind}, not a file ({blob}); tracer reads only files")
    if not blob.is_file():
        raise TracerError(f"ollama:{name}: the manifest names blob sha256-{d.group(1)[:12]}…, which is not in {blobs} "
                          f"(ollama pull {model}:{tag} again)")
    return blob


def ollama_models() -> list[tuple[str, Path]]:
    """(ollama:NAME:TAG, manifest) for every manifest in Ollama's store (one that is not a file too: a
    folder, a FIFO, a device, so that `tracer models` says what it is)."""
    root = ollama_home() / "manifests" / "registry.ollama.ai"
    found = []
    if not root.is_dir():
        return found
    for manifest in sorted(root.glob("*/*/*")):
        if manifest.is_file() or what_is(manifest) is not None:
            user, model, tag = manifest.parts[-3:]
            found.append((f"ollama:{'' if user == 'library' else user + '/'}{model}:{tag}", manifest))
    return found


def lmstudio_homes() -> list[Path]:
    """LM Studio's model folders: $LMSTUDIO_MODELS, ~/.lmstudio/models, ~/.cache/lm-studio/models."""
    homes = [os.environ.get("LMSTUDIO_MODELS"), "~/.lmstudio/models", "~/.cache/lm-studio/models"]
    return [Path(h).expanduser() for h in homes if h]


def lmstudio_files(limit: int = 10_000) -> list[Path]:
    """Every GGUF file in LM Studio's folders (PUBLISHER/REPO/FILE.gguf), at most `limit`."""
    found: list[Path] = []
    for home in lmstudio_homes():
        if home.is_dir():
            for f in sorted(home.glob("*/*/*.gguf")):
                found.append(f)
                if len(found) >= limit:
                    return found
    return found


def lmstudio_file(name: str) -> Path | None:
    """The GGUF file called `name` in LM Studio's folders, or None."""
    if "/" in name or "\\" in name or not name.lower().endswith(".gguf"):
        return None
    return next((f for f in lmstudio_files() if f.name == name), None)


def here_models(folder: Path | None = None, limit: int = 1_000) -> list[Path]:
    """The GGUF files and the model folders (a config.json inside) in `folder` (default: the current one), by
    name, at most `limit`: what `--model NAME` opens from here."""
    folder = Path.cwd() if folder is None else folder
    found: list[Path] = []
    try:
        for p in sorted(folder.iterdir()):
            if (p.suffix.lower() == ".gguf" and p.is_file()) or (p.is_dir() and (p / "config.json").is_file()):
                found.append(p)
                if len(found) >= limit:
                    break
    except OSError:  # a folder we may not read: nothing here
        return []
    return found
