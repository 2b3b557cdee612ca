"""A non-editable install (`pip install .`): it installs the package with every data file it ships, and leaves
the source tree as it found it (hatchling builds in a temporary directory)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "LICENSE", "README.md", "tracer")


def _has_hatchling() -> bool:
    from importlib.util import find_spec

    return find_spec("hatchling") is not None


def _tracked(folder: str) -> list[str]:
    """The files git tracks under `folder` (all of them, where this is no checkout: the copy's own files)."""
    r = subprocess.run(["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        return sorted(str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*")
                      if p.is_file() and "__pycache__" not in p.parts)
    return r.stdout.split()


@pytest.mark.slow
def test_pip_install_of_the_folder_installs_every_file_and_leaves_no_build_folder(tmp_path):
    src, target = tmp_path / "src", tmp_path / "site"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    before = sorted(p.relative_to(src) for p in src.rglob("*"))
    # pyproject.toml's backend is hatchling: build with this Python's when it has one, else in pip's isolated
    # environment, which fetches it from the package index (a fresh CI venv)
    offline = ["--no-build-isolation", "--no-index"] if _has_hatchling() else []
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *offline,
                        "--target", str(target), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    after = sorted(p.relative_to(src) for p in src.rglob("*") if "__pycache__" not in p.parts)
    assert after == before, sorted(set(map(str, after)) - set(map(str, before)))
    assert not (src / "build").exists() and not list(src.glob("*.egg-info")) and not (src / "dist").exists()
    missing = [f for f in _tracked("tracer") if not (target / f).is_file()]
    assert not missing, missing  # the modules and the data: the shipped model, the scenarios, the page's scripts
    for shipped in ("tracer/models/abc/model.safetensors", "tracer/scenarios/article.toml",
                    "tracer/render/page/app.js", "tracer/serve/serve.css", "tracer/run/word_tokens.txt"):
        assert (target / shipped).is_file(), shipped
    assert (target / "bin" / "tracer").is_file()  # the command
