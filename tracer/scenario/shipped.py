"""The scenarios shipped with tracer (`tracer/scenarios/`, the package `tracer.scenarios`).

Core module: standard library only.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from ..core.config import Config
from ..errors import TracerError, near


def shipped() -> dict[str, Path]:
    """Name → path of every scenario shipped in `tracer.scenarios`."""
    from importlib.resources import files

    root = files("tracer.scenarios")
    out = {}
    for item in sorted(root.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".toml"):
            out[item.name[: -len(".toml")]] = Path(str(item))
    return out


def find_scenario(name: str) -> Path | None:
    """A shipped scenario by name ("article" or "article.toml"), or None."""
    name = str(name)
    stem = name[: -len(".toml")] if name.endswith(".toml") else name
    return shipped().get(stem)


def resolve(scenario: str) -> Path:
    """A file path as given, else a shipped scenario by name, else a TracerError with suggestions."""
    path = Path(scenario).expanduser()
    try:
        if path.is_file():
            return path
    except (OSError, ValueError) as e:  # a name too long for the file system, a NUL byte
        raise TracerError(f"{scenario}: cannot read ({e.strerror if isinstance(e, OSError) else e})") from None
    found = find_scenario(scenario) if "/" not in scenario else None
    if found is not None:
        return found
    if os.path.lexists(path):  # a folder, a device, a FIFO: reading it says what it is, not "no such file"
        return path
    names = list(shipped())
    if path.suffix == ".toml" or "/" in scenario:
        raise TracerError(f"{scenario}: no such scenario file")
    raise TracerError(f"scenario {scenario!r}: no such file and no shipped scenario of that name"
                      f"{near(scenario, names)}; shipped: {', '.join(names)}")


def summaries() -> list[tuple[str, str, str]]:
    """(name, title, model shape) of every shipped scenario, read without building any model."""
    out = []
    for name, path in shipped().items():
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            out.append((name, f"(unreadable: {e})", ""))
            continue
        out.append((name, str(doc.get("title", "")), _shape_summary(doc)))
    return out


def _shape_summary(doc: dict) -> str:
    m, t = doc.get("model", {}), doc.get("tokenizer", {})
    c = Config()
    layers, width, heads = m.get("n_layers", c.n_layers), m.get("d_model", c.d_model), m.get("n_heads", c.n_heads)
    tok = f"{len(t['vocab'])} words" if "vocab" in t else t.get("encoding", "gpt2")
    return (f"{layers} layer{'s' if layers != 1 else ''} × {width} wide, {heads} head{'s' if heads != 1 else ''}, "
            f"{tok}")
