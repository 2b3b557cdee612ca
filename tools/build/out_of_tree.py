"""The build backend: setuptools' own, with its scratch folders outside the source tree.

pip builds a local folder in place (`pip install .`), and setuptools writes `build/` and
`transformer_tracer.egg-info/` next to the sources while it does; a non-editable install then leaves
them in the checkout. Each build here gets a temporary directory instead, named to
setuptools by a config file that `DIST_EXTRA_CONFIG` points to (read after `setup.cfg`, so it wins):
`[build] build_base` for `build/`, `[egg_info] egg_base` for the `.egg-info`. Editable installs are
setuptools' unchanged (they keep their metadata beside the sources, as pip expects).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - the editable hooks, not wrapped


@contextlib.contextmanager
def _out_of_tree() -> Iterator[None]:
    """setuptools' build/ and .egg-info in a temporary directory for the length of one hook."""
    before = os.environ.get("DIST_EXTRA_CONFIG")
    with tempfile.TemporaryDirectory(prefix="tracer-build-") as tmp:
        config = os.path.join(tmp, "out-of-tree.cfg")
        with open(config, "w", encoding="utf-8") as f:
            f.write(f"[build]\nbuild_base = {os.path.join(tmp, 'build')}\n[egg_info]\negg_base = {tmp}\n")
        os.environ["DIST_EXTRA_CONFIG"] = config
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("DIST_EXTRA_CONFIG", None)
            else:
                os.environ["DIST_EXTRA_CONFIG"] = before


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with _out_of_tree():
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    with _out_of_tree():
        return _setuptools.build_sdist(sdist_directory, config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    with _out_of_tree():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def get_requires_for_build_wheel(config_settings=None):
    with _out_of_tree():
        return _setuptools.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_sdist(config_settings=None):
    with _out_of_tree():
        return _setuptools.get_requires_for_build_sdist(config_settings)
