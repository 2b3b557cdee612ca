"""Hostile inputs (a second audit's findings that are not about tokenizers), one test per finding.

The rule every finding broke is the README's: bad input is one line on stderr and exit 2, in
bounded time and memory, and nothing of the user's is lost. Timings are checked as growth (doubling
the input must not quadruple the time), never as absolute times.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.cli import app

from .test_hostile_files import one_line  # exit 2, one line naming the problem

TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--context", "16", "--batch", "4"]
TEXT = "\n".join(["A B C D E F G H I J K", "one two three four five six", "Monday Tuesday Wednesday Thursday"] * 40)


@pytest.fixture
def corpus(tmp_path) -> Path:
    p = tmp_path / "data" / "corpus.txt"
    p.parent.mkdir()
    p.write_text(TEXT + "\n", encoding="utf-8")
    return p


def train(runner, corpus, out, *more):
    return runner.invoke(app, ["train", str(corpus), "--out", str(out), "--steps", "2", *TINY, *more])


# --------------------------------------------------------------------------- 4: tracer train deletes files it did not write


def test_train_refuses_folders_that_hold_what_it_did_not_write(runner, corpus, tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    for out, says in [(".", "the current folder"), ("", "an empty name"), (corpus.parent, "holds"),
                      (tmp_path, "holds"), ("/", "the root")]:
        one_line(train(runner, corpus, out, "--force"), says)
    assert corpus.read_text() == TEXT + "\n"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    one_line(train(runner, corpus, mine, "--force"), "'keep.txt'", "did not write")
    (mine / "keep.txt").unlink()
    (mine / "config.json").write_text("{}")  # a downloaded model, not one tracer train saved
    one_line(train(runner, corpus, mine, "--force"), "not a model that tracer train saved")
    assert (mine / "config.json").read_text() == "{}"
    ours = tmp_path / "ours"
    assert train(runner, corpus, ours).exit_code == 0
    assert train(runner, corpus, ours, "--force").exit_code == 0  # a model tracer saved is replaced with --force
    assert sorted(x.name for x in ours.iterdir()) == ["config.json", "model.safetensors", "training.json"]


@pytest.mark.parametrize("force", [False, True])
def test_files_put_into_out_while_training_are_kept(runner, corpus, tmp_path, monkeypatch, force):
    import tracer.cli.learn as learn

    out = tmp_path / "m"
    if force:
        assert train(runner, corpus, out).exit_code == 0
    real = learn._train

    def meanwhile(*args):
        result = real(*args)
        out.mkdir(exist_ok=True)
        (out / "theirs.txt").write_text("another process")  # another run, or the user, wrote there
        return result

    monkeypatch.setattr(learn, "_train", meanwhile)
    r = train(runner, corpus, out, *(["--force"] if force else []))
    last = r.stderr.strip().splitlines()[-1]
    assert r.exit_code == 2 and last.startswith("tracer: ") and "another process wrote there" in last, r.stderr
    assert "nothing in it was touched" in last and f"saved in {tmp_path / 'm-2'}" in last
    assert (out / "theirs.txt").read_text() == "another process"
    assert (tmp_path / "m-2" / "model.safetensors").is_file()  # and this run's model is not lost either
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".")]


# --------------------------------------------------------------------------- 10: a diverged run saved NaN weights


@pytest.mark.parametrize("lr", ["1e30", "1e38"])
def test_a_diverging_run_keeps_the_last_finite_weights_and_never_replaces_a_good_model(runner, corpus, tmp_path, lr):
    out = tmp_path / "m"
    assert train(runner, corpus, out).exit_code == 0
    good = {p.name: p.read_bytes() for p in out.iterdir()}
    r = train(runner, corpus, out, "--force", "--lr", lr)
    assert r.exit_code == 2 and "not finite" in r.stderr, r.output
    m = tracer.load(str(out))  # what is in --out loads, and every weight is a number
    assert all(np.isfinite(a).all() for a in m.params.values())
    if "nothing was saved" in r.stderr:
        assert {p.name: p.read_bytes() for p in out.iterdir()} == good
    else:
        assert "are saved" in r.stderr and json.loads((out / "training.json").read_text())["stopped"] == "not finite"


# --------------------------------------------------------------------------- 9, 15: --out checked before training


@pytest.mark.parametrize("link_to", ["missing", "folder"])
def test_an_out_that_is_a_link_is_refused_before_training(runner, corpus, tmp_path, link_to):
    target = tmp_path / link_to
    if link_to == "folder":
        target.mkdir()
    (tmp_path / "m").symlink_to(target)
    r = train(runner, corpus, tmp_path / "m")
    one_line(r, "--out", "is a link")
    assert "step 1" not in r.stderr  # refused before any training


def test_an_out_name_too_long_is_refused_before_training(runner, corpus, tmp_path):
    r = train(runner, corpus, tmp_path / ("m" * 300))
    one_line(r, "--out", "File name too long")
    assert "step 1" not in r.stderr


# --------------------------------------------------------------------------- 8: a sparse corpus was read whole


def test_a_sparse_corpus_is_refused_from_its_first_chunk_not_read_whole(tmp_path):
    import tracemalloc

    from tracer.errors import TracerError
    from tracer.run.train import read_corpus

    sparse = tmp_path / "sparse.txt"
    with open(sparse, "wb") as f:
        f.truncate(256 * 2**20)  # 256 MB of nothing on disk
    tracemalloc.start()
    try:
        with pytest.raises(TracerError, match="NUL bytes"):
            read_corpus(sparse)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"read {peak / 2**20:.0f} MB of a sparse corpus"


def test_a_corpus_larger_than_memory_is_refused_before_it_is_read(runner, tmp_path, monkeypatch):
    import tracer.core.memory

    huge = tmp_path / "huge.txt"
    with open(huge, "wb") as f:
        f.truncate(40 * 10**9)  # 40 GB that take no disk
    monkeypatch.setattr(tracer.core.memory, "memory_room", lambda: 8 * 10**9)
    r = runner.invoke(app, ["train", str(huge), "--out", str(tmp_path / "m"), "--steps", "2", *TINY])
    one_line(r, "40.00 GB", "this process can take 8.0 GB more")


# --------------------------------------------------------------------------- 3: the scenario scanner was quadratic


@pytest.mark.parametrize("text", [
    lambda n: "x = [\n" + "  1.0,\n" * n + "]\n",  # a multi-line array
    lambda n: 'x = """\n' + "a [ b\n" * n + '"""\n',  # a multi-line string
    lambda n: "[" + " " * n + "\n",  # a header that never closes
], ids=["array", "string", "header"])
def test_the_scenario_scanner_takes_linear_time(text, grows_linearly):
    from tracer.scenario.source import Source

    grows_linearly(lambda n: Source(text(n)), 2000)
    src = Source("[run]\nx = [\n  1.0, # ] not this\n  \"]\",\n  2.50,\n]\ny = 3\n")
    assert src.raw("run", 0, "x") == '[\n  1.0, # ] not this\n  "]",\n  2.50,\n]' and src.line("run", 0, "y") == 7


# --------------------------------------------------------------------------- 11: the page export crashed on ±∞ and NaN



def test_the_page_export_writes_non_finite_numbers_as_json_does(tmp_path, runner, overflow):
    from tracer.render.page.html import json_for_script

    model = overflow
    page = tmp_path / "p.html"
    r = runner.invoke(app, ["trace", "a b", "--model", str(model), "--verify-cache", "--export", str(page)])
    assert r.exit_code == 0, (r.exit_code, r.stderr, r.exception)
    text = page.read_text()
    start = text.index(">", text.index('id="trace-data"')) + 1
    got = json.loads(text[start : text.index("</script>", start)], parse_constant=lambda c: pytest.fail(c))
    assert got["meta"]["verify_cache"] if "meta" in got else got
    data = {"rope_theta": float("inf"), "bound": np.float32("-inf"), "gap": np.array([np.nan, 1.0])}
    assert json.loads(json_for_script(data)) == {"rope_theta": "inf", "bound": "-inf", "gap": ["nan", 1.0]}


# --------------------------------------------------------------------------- 12: trace metadata damage() did not check


@pytest.fixture(scope="module")
def verified(tmp_path_factory, gpt2_weights) -> Path:
    """A trace saved with `--verify-cache` (its result is in the metadata)."""
    from typer.testing import CliRunner

    d = tmp_path_factory.mktemp("verified")
    w = gpt2_weights(d / "w.npz", 0, n_layers=1)
    r = CliRunner().invoke(app, ["trace", "Hello", "--model", str(w), "--max-new-tokens", "2", "--verify-cache",
                                 "--save", str(d / "t.npz")])
    assert r.exit_code == 0, r.output
    return d / "t.npz"


@pytest.mark.parametrize("change, says", [
    (lambda m: m["verify_cache"].update(bound="x"), "verify_cache.bound is not a number"),
    (lambda m: m["verify_cache"].update(per_step_max_abs_diff=5), "verify_cache.per_step_max_abs_diff"),
    (lambda m: m["verify_cache"].update(generated_cache=[float("nan")]), "verify_cache.generated_cache"),
    (lambda m: m.update(weights=["given"]), "'weights' is list"),
], ids=["string-bound", "int-for-list", "nan-token", "weights-list"])
def test_trace_metadata_of_the_wrong_kind_is_a_damaged_trace(verified, tmp_path, runner, change, says):
    arrays = dict(np.load(verified, allow_pickle=False))
    meta = json.loads(str(arrays["meta"]))
    change(meta)
    arrays["meta"] = np.array(json.dumps(meta))
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    for more in ([], ["--export", str(tmp_path / "p.html")]):
        r = runner.invoke(app, ["show", str(bad), *more])
        if r.exit_code != 0:  # what shows it without trouble may show it; what cannot says why, in one line
            one_line(r, "damaged trace", says)


# --------------------------------------------------------------------------- 13: Unicode digits and 5,000 digits in --token/--layer/--head


@pytest.mark.parametrize("option, value", [("--layer", "²"), ("--head", "⑤"), ("--head", "۱"), ("--token", "١"),
                                           ("--token", "9" * 5000), ("--layer", "9" * 5000), ("--head", "+" + "1" * 5000),
                                           ("--token", "A" * 5000)])
def test_positions_layers_and_heads_are_ascii_digits_of_a_sensible_length(tmp_path, runner, gpt2_weights, option, value):
    w = gpt2_weights(tmp_path / "w.npz", 0, n_layers=2)
    r = runner.invoke(app, ["trace", "Hello world", "--model", str(w), "--max-new-tokens", "1", option, value])
    err = one_line(r, option)
    assert len(err) < 300, err


# --------------------------------------------------------------------------- 14: demo --auto inf


@pytest.mark.parametrize("seconds", ["inf", "1e300", "nan"])
def test_demo_auto_takes_a_number_of_seconds_a_timer_can_wait(runner, seconds):
    one_line(runner.invoke(app, ["demo", "--auto", seconds]), "--auto must be a number of seconds")


# --------------------------------------------------------------------------- 16: seeds above 2⁵³ were rounded through a float


def test_whole_numbers_above_2_53_are_kept_exactly(runner, tmp_path, gpt2_weights):
    from tracer.run.settings import GenerationSettings

    big = 2**53 + 1
    s = GenerationSettings(seed=big, top_k=big, max_new_tokens=np.int64(2**62 + 1))
    assert (s.seed, s.top_k, s.max_new_tokens) == (big, big, 2**62 + 1)
    w = gpt2_weights(tmp_path / "w.npz", 0, n_layers=1)
    seeds = []
    for seed in (big, big - 1):
        r = runner.invoke(app, ["trace", "Hello", "--model", str(w), "--max-new-tokens", "1", "--temperature", "1",
                                "--seed", str(seed), "--json"])
        assert r.exit_code == 0, r.output
        seeds.append(json.loads(r.stdout)["settings"]["seed"])
    assert seeds == [big, big - 1]


# --------------------------------------------------------------------------- 17: the API took bytes as ids, and None as a TypeError


@pytest.mark.parametrize("prompt, says", [(b"A B C", "bytes"), (bytearray(b"A"), "bytes"), (None, "got NoneType"),
                                          (5, "got int"), (5.0, "got float"), ({"a": 1}, "got dict"),
                                          (np.int64(3), "got int64")])
def test_the_api_refuses_what_is_not_a_prompt_in_one_tracer_error(prompt, says):
    from tracer.errors import TracerError

    m = tracer.load("tiny")
    for call in (m.run, m.generate, m.tokenize):
        with pytest.raises(TracerError, match=says):
            call(prompt)
    assert list(m.tokenize([1, 2])) == [1, 2] and m.tokenize(np.array([1, 2])) == [1, 2]


# --------------------------------------------------------------------------- 18: config.json and tokenizer.json links out of the folder


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "tokenizer_config.json", "training.json"])
def test_no_file_of_a_model_folder_is_read_through_a_link_out_of_it(tmp_path, runner, name):
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(Path(__file__).parent / "data" / "llama-tiny", folder)
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"hidden_size": "secret-value-from-outside", "eos_token": "secret-value-from-outside",
                                   "format": "secret-value-from-outside", "model": {"vocab": "secret-value-from-outside"}}))
    (folder / name).unlink(missing_ok=True)
    (folder / name).symlink_to(outside)
    err = one_line(runner.invoke(app, ["trace", "hi", "--model", str(folder)]), f"{name!r} leads outside the model folder")
    assert "secret" not in err


def test_a_tokenizer_json_that_is_not_a_regular_file_is_not_called_missing(tmp_path, runner):
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(Path(__file__).parent / "data" / "llama-tiny", folder)
    (folder / "tokenizer.json").unlink()
    os.mkfifo(folder / "tokenizer.json")
    err = one_line(runner.invoke(app, ["trace", "hi", "--model", str(folder)]), "not a regular file")
    assert "no tokenizer.json" not in err


# --------------------------------------------------------------------------- 19: what a SIGKILL left was never removed


def test_the_next_write_removes_what_a_killed_write_left_and_nothing_else(tmp_path):
    import subprocess
    import sys

    from tracer.formats.files import atomic_write
    from tracer.formats.folders import atomic_folder

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process that no longer exists
    dead, alive = gone.pid, os.getppid()
    left = {
        f".t.npz.{dead}.tmp": True,  # a killed write to t.npz: removed
        f".t.npz.{alive}.tmp": False,  # a write still going on: kept
        f".other.npz.{dead}.tmp": False,  # another file's (the next write to it removes it)
        ".t.npz.notapid.tmp": False,  # not tracer's
    }
    for name in left:
        (tmp_path / name).write_bytes(b"x" * 1000)
    (tmp_path / f".out.{dead}.tmp").mkdir()  # a killed `tracer train`'s folder
    (tmp_path / f".out.{dead}.tmp" / "model.safetensors").write_bytes(b"x")
    atomic_write(tmp_path / "t.npz", lambda f: f.write(b"new"))
    atomic_folder(tmp_path / "out", lambda d: (d / "f").write_text("new"))
    for name, removed in left.items():
        assert (tmp_path / name).exists() != removed, name
    assert not (tmp_path / f".out.{dead}.tmp").exists()
    assert (tmp_path / "t.npz").read_bytes() == b"new" and (tmp_path / "out" / "f").read_text() == "new"


def test_a_model_moved_aside_by_a_killed_train_goes_back_to_its_place(tmp_path):
    import subprocess
    import sys

    from tracer.formats.files import sweep_leftovers

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    old = tmp_path / f".m.{gone.pid}.old"
    old.mkdir()
    (old / "training.json").write_text("the only copy")
    sweep_leftovers(tmp_path / "m")
    assert (tmp_path / "m" / "training.json").read_text() == "the only copy" and not old.exists()


# --------------------------------------------------------------------------- 20: messages that did not fit


def test_each_message_names_what_is_wrong_once_and_rightly(tmp_path, runner, monkeypatch, corpus):
    import errno
    import shutil

    import tracer.formats.files as files

    folder = tmp_path / "m"
    shutil.copytree(Path(__file__).parent / "data" / "llama-tiny", folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 0}))
    err = one_line(runner.invoke(app, ["trace", "hi", "--model", str(folder)]), "'max_position_embeddings'")
    assert err.count("config.json") == 1, err  # the path once
    (tmp_path / "sc").mkdir()
    for scenario, says in [("/dev/zero", "not a regular file"), (str(tmp_path / "sc"), "is a folder")]:
        one_line(runner.invoke(app, ["replay", scenario]), says)
    one_line(train(runner, corpus, ""), "--out ''", "an empty name")

    real = files.save_safetensors

    def disk_full(path, arrays, metadata=None):  # the disk fills while the model is written
        def write(f):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        files.atomic_write(path, write)

    monkeypatch.setattr(files, "save_safetensors", disk_full)
    out = tmp_path / "out"
    r = train(runner, corpus, out)
    last = r.stderr.strip().splitlines()[-1]
    assert r.exit_code == 2 and f"{out}/model.safetensors: cannot write (No space left on device)" in last, r.stderr
    assert ".tmp" not in last and not out.exists() and not [x for x in tmp_path.iterdir() if x.name.startswith(".")]
    monkeypatch.setattr(files, "save_safetensors", real)
