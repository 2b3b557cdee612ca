"""Determinism and faults: the same command gives the same bytes; a failed write loses nothing.

- `tracer trace … --save a.npz` run twice, in separate processes with different hash seeds and
  a different wall clock, writes byte-identical `.npz` files and prints identical text.
- Output files go through `tracer.formats.files.atomic_write` (a temporary name, then a rename): a
  writer that fails half-way (disk full, Ctrl-C) leaves neither a partial file nor the temporary
  one, and an older file of the same name is kept whole.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.formats import files
from tracer.cli import app
from tracer.errors import TracerError

SAMPLED = ["-n", "3", "--temperature", "0.9", "--top-k", "40", "--seed", "7"]


@pytest.fixture(scope="module")
def small_model(tmp_path_factory, gpt2_weights) -> Path:
    return gpt2_weights(tmp_path_factory.mktemp("model") / "small.npz", seed=3)


@pytest.mark.slow
def test_same_command_twice_same_bytes_and_text(tmp_path, small_model, run_tracer):
    """Two processes, different hash seeds, more than a zip timestamp's 2 s apart in effect."""
    outs = []
    for i, hash_seed in enumerate(["1", "2"]):
        cwd = tmp_path / f"run{i}"
        cwd.mkdir()
        p = run_tracer("trace", "The cat sat on the", "--model", str(small_model), *SAMPLED, "--save", "a.npz", cwd=cwd,
                       env={"PYTHONHASHSEED": hash_seed}, timeout=120)
        assert p.returncode == 0, p.stderr.decode()
        outs.append((p.stdout, p.stderr, (cwd / "a.npz").read_bytes()))
        if i == 0:
            time.sleep(2.1)  # zip stores times in 2-second steps: a clock-dependent writer would differ now
    (out1, err1, npz1), (out2, err2, npz2) = outs
    assert hashlib.sha256(npz1).hexdigest() == hashlib.sha256(npz2).hexdigest()
    assert out1 == out2 and err1 == err2
    assert b"saved a.npz" in err1 and len(out1) > 500


def test_saved_zip_has_fixed_dates_and_no_pickles(tmp_path, small_model):
    gen = tracer.load(str(small_model)).generate("hello", max_new_tokens=1)
    gen.save(tmp_path / "g.npz")
    with zipfile.ZipFile(tmp_path / "g.npz") as z:
        infos = z.infolist()
        assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
        for info in infos:  # every member is a plain .npy: no object arrays, so np.load never needs pickle
            with z.open(info) as f:
                version = np.lib.format.read_magic(f)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                _, _, dtype = read(f)
                assert not dtype.hasobject, info.filename


def test_clock_does_not_reach_the_file(tmp_path, small_model, monkeypatch):
    """In one process: save, move the clock a year on, save again: the same bytes."""
    gen = tracer.load(str(small_model)).generate("hello", max_new_tokens=2, temperature=1.0, seed=3)
    gen.save(tmp_path / "a.npz")
    later = time.time() + 365 * 86400
    monkeypatch.setattr(time, "time", lambda: later)
    monkeypatch.setattr(time, "localtime", lambda t=None: time.gmtime(later))
    gen.save(tmp_path / "b.npz")
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()


def test_rerun_gives_the_same_generation(small_model):
    m = tracer.load(str(small_model))
    a = m.generate("The cat", max_new_tokens=4, temperature=1.3, top_p=0.9, seed=11)
    b = tracer.load(str(small_model)).generate("The cat", max_new_tokens=4, temperature=1.3, top_p=0.9, seed=11)
    assert a.generated_ids == b.generated_ids
    for sa, sb in zip(a.steps, b.steps):
        assert list(sa) == list(sb)
        for name in sa:
            np.testing.assert_array_equal(sa[name], sb[name])  # exactly, not approximately


def test_show_is_deterministic_and_matches_json(tmp_path, small_model, runner):
    r = runner.invoke(app, ["trace", "The cat sat", "--model", str(small_model), *SAMPLED, "--save", str(tmp_path / "t.npz"), "--json"])
    assert r.exit_code == 0, r.stderr
    first = runner.invoke(app, ["show", str(tmp_path / "t.npz")], env={"COLUMNS": "100"})
    second = runner.invoke(app, ["show", str(tmp_path / "t.npz")], env={"COLUMNS": "100"})
    assert first.exit_code == 0 and first.stdout == second.stdout and first.stdout
    again = runner.invoke(app, ["trace", "The cat sat", "--model", str(small_model), *SAMPLED, "--json"])
    assert json.loads(again.stdout) == json.loads(r.stdout)


# --------------------------------------------------------------------------------------------
# Faults while writing: nothing partial is left, nothing older is lost


class FailingFile:
    """A file that accepts `limit` bytes, then fails the way a full disk (or Ctrl-C) does."""

    def __init__(self, f, limit: int, exc: BaseException):
        self.f, self.limit, self.exc, self.written = f, limit, exc, 0

    def write(self, b) -> int:
        if self.written + len(b) > self.limit:
            self.f.write(bytes(b)[: max(self.limit - self.written, 0)])  # a partial write reaches the disk
            raise self.exc
        self.written += len(b)
        return self.f.write(b)

    def __getattr__(self, name):
        return getattr(self.f, name)


def _fail_after(monkeypatch, limit: int, exc: BaseException) -> None:
    real = files.atomic_write

    def failing(path, write):
        return real(path, lambda f: write(FailingFile(f, limit, exc)))

    monkeypatch.setattr(files, "atomic_write", failing)
    import tracer.render.export as export

    monkeypatch.setattr(export, "atomic_write", failing)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("old", [False, True], ids=["new-file", "over-old-file"])
def test_save_that_fails_midway_leaves_nothing_partial(tmp_path, small_model, monkeypatch, old, runner):
    out = tmp_path / "out"
    out.mkdir()
    target = out / "t.npz"
    if old:
        target.write_bytes(b"an older trace, kept whole")
    _fail_after(monkeypatch, 20_000, OSError(errno.ENOSPC, "No space left on device"))
    r = runner.invoke(app, ["trace", "hello there", "--model", str(small_model), "--save", str(target)])
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "t.npz: cannot write (No space left on device)" in r.stderr and "Traceback" not in r.stderr
    assert _leftovers(out) == (["t.npz"] if old else [])  # no temporary file either
    if old:
        assert target.read_bytes() == b"an older trace, kept whole"


def test_interrupted_save_leaves_nothing_partial(tmp_path, small_model, monkeypatch, runner):
    out = tmp_path / "out"
    out.mkdir()
    _fail_after(monkeypatch, 5_000, KeyboardInterrupt())
    r = runner.invoke(app, ["trace", "hello there", "--model", str(small_model), "--save", str(out / "t.npz")])
    assert r.exit_code == 130 and "interrupted" in r.stderr
    assert _leftovers(out) == []


def test_export_that_fails_midway_leaves_nothing_partial(tmp_path, small_model, monkeypatch, runner):
    out = tmp_path / "out"
    out.mkdir()
    (out / "page.html").write_text("old page")
    _fail_after(monkeypatch, 100, OSError(errno.EIO, "Input/output error"))
    r = runner.invoke(app, ["trace", "hello", "--model", str(small_model), "--export", str(out / "page.html")])
    assert r.exit_code == 2 and "cannot write (Input/output error)" in r.stderr, r.stderr
    assert _leftovers(out) == ["page.html"] and (out / "page.html").read_text() == "old page"


def test_failed_rename_keeps_the_old_file(tmp_path, monkeypatch, gpt2_weights):
    target = tmp_path / "w.npz"
    target.write_bytes(b"old weights")

    def no_rename(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(files.os, "replace", no_rename)
    with pytest.raises(TracerError, match="cannot write"):
        gpt2_weights(target, seed=0)
    assert _leftovers(tmp_path) == ["w.npz"] and target.read_bytes() == b"old weights"


def test_unwritable_folder_is_refused_before_any_work(tmp_path, monkeypatch, runner):
    """Checked up front (a read-only folder; as root, os.access is what tracer asks, so fake its answer)."""
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if Path(p) == tmp_path else real_access(p, mode, **k))

    def must_not_run(*a, **k):
        raise AssertionError("the model ran although the output could not be written")

    monkeypatch.setattr(tracer.model.Model, "generate", must_not_run)
    for option, name in (("--save", "t.npz"), ("--export", "t.html")):
        r = runner.invoke(app, ["trace", "hello", option, str(tmp_path / name)])
        assert r.exit_code == 2 and f"folder {str(tmp_path)!r} is not writable" in r.stderr, r.stderr
