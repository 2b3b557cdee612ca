"""A non-editable install (`pip install .`): it installs the package and its data, and
leaves the source tree as it found it (setuptools' build/ and .egg-info go to a temporary directory,
tools/build/out_of_tree.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "LICENSE", "README.md", "MANIFEST.in", "scenarios", "tracer", "tools/build")


def _setuptools_major() -> int:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("setuptools").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return 0


@pytest.mark.slow
def test_pip_install_of_the_folder_leaves_no_build_folder(tmp_path):
    src, target = tmp_path / "src", tmp_path / "site"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    before = sorted(p.relative_to(src) for p in src.rglob("*"))
    # pyproject.toml asks for setuptools>=77 (the SPDX license): build with this Python's when it has one,
    # else in pip's isolated environment, which fetches it from the package index (a fresh CI venv)
    offline = ["--no-build-isolation", "--no-index"] if _setuptools_major() >= 77 else []
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *offline,
                        "--target", str(target), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    after = sorted(p.relative_to(src) for p in src.rglob("*") if "__pycache__" not in p.parts)
    assert after == before, sorted(set(map(str, after)) - set(map(str, before)))
    assert not (src / "build").exists() and not list(src.glob("*.egg-info"))
    for shipped in ("tracer/models/abc/model.safetensors", "tracer/scenarios/article.toml",
                    "tracer/render/page/app.js", "tracer/readers/llama.py"):
        assert (target / shipped).is_file(), shipped
