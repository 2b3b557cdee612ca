"""Hostile files, resource limits and the terminal (issue 17), one test per finding.

A small file must never cost minutes or gigabytes, a file must never write to the terminal, and
input at fault is one line and exit 2, never exit 1 ("internal error"). Runs that could take
gigabytes or hang run as their own process under a memory limit (1 GiB of address space) and a
time limit (the `limited` fixture); the rest through typer's CliRunner. Overflowing arithmetic is
not damage: a model built to overflow is traced, shown, replayed and demonstrated with exit 0, and
the first value that went non-finite is named.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.cli import app
from tracer.formats.files import save_safetensors, save_weights
from tracer.core.params import init_weights

FIXTURE = Path(__file__).parent / "data" / "gpt2-tiny" / "hub"
ESCAPES = "\x1b]52;c;aGk=\x07\x1b[2J\x9b31m\u202e"  # write the clipboard, clear the screen, C1 CSI, RLO
FAST = 2.0  # CPU seconds a refusal may take in its forked process (a refusal itself is milliseconds)


def one_line(r, *patterns) -> str:
    """The run was refused as bad input: exit 2, one line naming the problem, nothing raw."""
    err = r.stderr
    assert r.exit_code == 2, (r.exit_code, r.stdout[-500:], err[-1500:])
    assert len(err.strip().splitlines()) == 1 and err.startswith("tracer: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    for p in patterns:
        assert p in err, (p, err)
    return err


def rewrite(src: Path, dst: Path, **changes) -> Path:
    """A copy of the `.npz` at `src` with entries replaced (a value of None removes the entry)."""
    arrays = dict(np.load(src, allow_pickle=False))
    for k, v in changes.items():
        if v is None:
            arrays.pop(k, None)
        else:
            arrays[k] = v
    np.savez(dst, **arrays)
    return dst


def with_meta(src: Path, dst: Path, change) -> Path:
    meta = json.loads(str(np.load(src, allow_pickle=False)["meta"]))
    change(meta)
    return rewrite(src, dst, meta=np.array(json.dumps(meta)))


@pytest.fixture(scope="module")
def good(tmp_path_factory, gpt2_weights) -> Path:
    """A trace of a one-layer model that reads GPT-2's tokens (`tracer trace … --save`)."""
    d = tmp_path_factory.mktemp("good")
    w = gpt2_weights(d / "w.npz", 0, n_layers=1)
    tracer.load(str(w)).generate("Hello world", max_new_tokens=2).save(d / "good.npz")
    return d / "good.npz"


def hf_folder(tmp_path: Path, name: str = "m", config=None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "model.safetensors").write_bytes((FIXTURE / "model.safetensors").read_bytes())
    cfg = json.loads((FIXTURE / "config.json").read_text())
    cfg.update(config or {})
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


# --------------------------------------------------------------------------------------------
# 1. A tiny file never costs gigabytes or minutes: sizes are checked before anything is built


@pytest.mark.slow
def test_a_trace_that_declares_a_billion_layers_is_refused_at_once(good, tmp_path, limited):
    bad = with_meta(good, tmp_path / "layers.npz", lambda m: m["config"].update(n_layers=10**9))
    r = limited("show", bad, "--layer", "all")
    assert r.returncode == 2 and r.seconds < FAST, (r.returncode, r.seconds, r.stderr)
    assert "n_layers 1,000,000,000 is more than tracer reads (at most 1,024" in r.stderr


def test_a_trace_that_declares_more_passes_than_tokens_is_refused(good, tmp_path, runner):
    """Each pass sees one token more than the one before: a file cannot make tracer build 10^5 of them."""
    bad = with_meta(good, tmp_path / "passes.npz",
                    lambda m: m.update(steps=[{"start": 0, "n_tokens": 2}] * 100_000, step_meta=[{}] * 100_000))
    one_line(runner.invoke(app, ["show", str(bad)]), "'steps' is not a list of at most 4 passes")


@pytest.mark.slow
@pytest.mark.parametrize("tensors", [True, False])
def test_a_config_json_with_a_billion_layers_is_refused_at_once(tmp_path, limited, tensors):
    folder = hf_folder(tmp_path, config={"n_layer": 10**9})
    if not tensors:
        save_safetensors(folder / "model.safetensors", {"wte.weight": np.zeros((4, 16), np.float32)})
    r = limited("trace", "hi", "--model", folder)
    assert r.returncode == 2 and r.seconds < FAST, (r.returncode, r.seconds, r.stderr)
    assert "config.json: n_layers 1,000,000,000 is more than tracer reads" in r.stderr


def test_a_config_json_is_weighed_against_the_weights_it_comes_with(tmp_path, runner):
    """1,000 layers are within the limits, but 3 MB of weights cannot hold them: refused before any
    layer's tensor names are built."""
    folder = hf_folder(tmp_path, config={"n_layer": 1000})
    one_line(runner.invoke(app, ["trace", "hi", "--model", str(folder)]),
             "config.json: describes", "but model.safetensors holds 3,312,892 bytes; config.json does not match the weights")


@pytest.mark.slow
def test_a_weights_file_with_an_absurd_stored_config_is_refused_at_once(tmp_path, limited, gpt2_config):
    cfg = gpt2_config(n_layers=1)
    path = tmp_path / "w.npz"
    save_weights(path, cfg, init_weights(cfg, 0))
    meta = json.loads(str(np.load(path)["__meta__"]))
    meta["config"] = json.dumps({**json.loads(meta["config"]), "n_layers": 999_999_999})
    rewrite(path, path, __meta__=np.array(json.dumps(meta)))
    st = tmp_path / "w.safetensors"
    save_safetensors(st, {"W_E": np.zeros((4, 4), np.float32)}, meta)
    for w in (path, st):
        r = limited("trace", "hi", "--model", w)
        assert r.returncode == 2 and r.seconds < FAST, (w, r.returncode, r.seconds, r.stderr)
        assert "n_layers 999,999,999 is more than tracer reads" in r.stderr, r.stderr


def test_a_weights_file_is_checked_against_its_config_before_an_array_is_read(tmp_path, runner, gpt2_config,
                                                                               monkeypatch):
    cfg = gpt2_config(n_layers=1)
    params = init_weights(cfg, 0)
    params["W_E"] = np.zeros((2, 4), np.float32)  # the file holds a W_E its config does not allow
    path = tmp_path / "w.npz"
    save_weights(path, cfg, params)
    import tracer.formats.reading

    read = []
    monkeypatch.setattr(tracer.formats.reading.Npz, "read", lambda self, name, real=tracer.formats.reading.Npz.read:
                        read.append(name) or real(self, name))
    one_line(runner.invoke(app, ["trace", "hi", "--model", str(path)]), "'W_E': expected [50257, 4], got [2, 4]")
    assert set(read) == {"__meta__"}, read  # only the config was read


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["devzero", "fifo"])
def test_model_toml_must_be_a_regular_file(tmp_path, limited, kind):
    path = tmp_path / "x.toml"
    if kind == "devzero":
        path.symlink_to("/dev/zero")
    else:
        os.mkfifo(path)
    r = limited("trace", "hi", "--model", path, seconds=10)
    assert r.signal is None and r.returncode == 2 and r.seconds < FAST, (r.signal, r.returncode, r.stderr)
    assert "not a regular file" in r.stderr


def zip_with(entries: list[tuple[str, bytes, int]]) -> bytes:
    """A zip archive whose entries are (name, deflated bytes, the uncompressed size it declares):
    what an attacker writes, sizes and all. The CRC is left 0; nothing that checks sizes first
    gets as far as the CRC."""
    out, central = b"", b""
    for name, data, size in entries:
        n = name.encode()
        local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, 0, len(data), size, len(n), 0)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, 0, len(data), size, len(n),
                               0, 0, 0, 0, 0, len(out)) + n
        out += local + n + data
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), len(out), 0)
    return out + central + end


def deflated_npy(shape: tuple, dtype: str, size: int) -> bytes:
    """The start of a deflated `.npy` of `shape`, padded with bytes to `size`: enough to read its header."""
    import io

    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape})
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = c.compress(head.getvalue() + bytes(2**16)) + c.flush(zlib.Z_SYNC_FLUSH)
    return data + bytes(size - len(data))


@pytest.mark.slow
def test_a_zip_bomb_is_refused_before_it_is_inflated(good, tmp_path, limited):
    """A 3 MB file declaring a 3 GB entry: within what deflate can do, beyond what the process may take."""
    size = 3 * 2**30
    bomb = deflated_npy((size // 8 - 16,), "<f8", size // 1024 + 4096)
    for args, entry in ((["show"], "logits.npy"), (["trace", "hi", "--model"], "W_E.npy")):
        path = tmp_path / "bomb.npz"
        path.write_bytes(zip_with([(entry, bomb, size)]))
        r = limited(*args, path)
        assert r.returncode == 2 and r.seconds < FAST, (args, r.returncode, r.seconds, r.stderr)
        assert "its arrays take 3.22 GB uncompressed; this process can take" in r.stderr, r.stderr


def test_an_entry_that_declares_more_than_deflate_can_give_is_refused(tmp_path, runner):
    path = tmp_path / "lie.npz"
    path.write_bytes(zip_with([("logits.npy", deflated_npy((10**6,), "<f8", 5000), 8 * 10**6 + 128)]))
    one_line(runner.invoke(app, ["show", str(path)]), "declares 8,000,128 bytes from 5,000 stored; no archive holds that")


@pytest.mark.slow
@pytest.mark.parametrize("model, words", [
    ("n_layers = 1000000\nd_model = 1\nn_heads = 1", "model.n_layers: 1,000,000 is more than tracer reads"),
    ("positional = \"sinusoidal\"\nn_ctx = 50000000\nd_model = 8\nn_heads = 1", "model.n_ctx: 50,000,000 is more than"),
    ("positional = \"sinusoidal\"\nn_ctx = 1000000\nd_model = 512\nn_heads = 1\nn_layers = 1",
     "too large for this process: the weights take"),
    ("n_layers = 1000\nd_model = 64\nn_heads = 1\nn_ctx = 4096", "too large for this process"),
])
def test_the_scenario_guard_counts_layers_positions_and_the_recording(tmp_path, limited, model, words):
    path = tmp_path / "s.toml"
    tokens = ", ".join(['"a"'] * 2000)
    path.write_text(f'[model]\n{model}\nmlp = false\n[tokenizer]\nvocab = ["a", "b"]\n[prompt]\n'
                    f"tokens = [{tokens}]\n[generate]\nmax_new_tokens = 1\n")
    r = limited("replay", path)
    assert r.returncode == 2 and r.seconds < FAST, (r.returncode, r.seconds, r.stderr)
    assert words in r.stderr, r.stderr


# --------------------------------------------------------------------------------------------
# 2. A file never writes to the terminal


def test_escapes_in_toml_key_names_are_shown_not_sent(tmp_path, runner):
    path = tmp_path / "keys.toml"
    path.write_text(f'[model]\n"{json.dumps(ESCAPES)[1:-1]}" = 1\n')
    err = one_line(runner.invoke(app, ["replay", str(path)]), "unknown key")
    assert "␛]52;c;aGk=␇␛[2J⟨U+009B⟩31m⟨U+202E⟩" in err
    assert not any(c in err for c in "\x1b\x07\x9b\u202e")


def test_escapes_in_shard_names_are_shown_not_sent(tmp_path, runner):
    folder = hf_folder(tmp_path)
    (folder / "model.safetensors").rename(folder / "part.safetensors")
    shard = "\x1b]0;owned\x07\x1b[2J.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"wte.weight": shard}}))
    err = one_line(runner.invoke(app, ["trace", "hi", "--model", str(folder)]), "␛]0;owned␇␛[2J.safetensors")
    assert "\x1b" not in err and "\x07" not in err


def test_replay_json_escapes_c1_controls_and_bidi_overrides(tmp_path, runner):
    text = (Path(tracer.__file__).parent.parent / "scenarios" / "two_heads.toml").read_text()
    path = tmp_path / "t.toml"
    path.write_text(text.replace('title = "Two heads', 'title = "\\u009b31m\\u202eevil Two heads', 1))
    for args in (["replay", str(path), "--json"], ["trace", "X Y", "--model", str(path), "--json"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.stderr
        assert r.stdout.isascii(), args  # every character beyond ASCII is a \u escape
        if args[0] == "replay":
            assert json.loads(r.stdout)["title"].startswith("\x9b31m\u202eevil")


def test_rich_markup_in_a_file_is_text(tmp_path, runner):
    """A vocabulary word or a title '[/x]' is shown as written: Rich does not parse it (it raised
    MarkupError, exit 1), nor style the terminal with '[bold red]'."""
    text = (Path(tracer.__file__).parent.parent / "scenarios" / "two_heads.toml").read_text()
    path = tmp_path / "markup.toml"
    path.write_text(text.replace('title = "Two heads', 'title = "[/x][bold red]Two heads', 1)
                    .replace('vocab = ["X", "Y", "Z", "<end>"]', 'vocab = ["[/x]", "Y", "Z", "<end>"]')
                    .replace('tokens = ["X", "Y", "Z"]', 'tokens = ["[/x]", "Y", "Z"]'))
    for args in (["replay", str(path), "--full"], ["demo", str(path)], ["demo", str(path), "--export",
                                                                        str(tmp_path / "deck.html")]):
        r = runner.invoke(app, args, env={"COLUMNS": "120"})
        assert r.exit_code == 0, (args, r.stderr)
    assert "[/x][bold red]Two heads" in runner.invoke(app, ["replay", str(path)]).stdout
    assert "[/x]" in (tmp_path / "deck.html").read_text()


# --------------------------------------------------------------------------------------------
# 4. Paths stay where they belong: a shard index cannot reach outside its folder


@pytest.mark.parametrize("where", ["dotdot", "absolute", "symlink"])
def test_a_shard_outside_the_model_folder_is_refused(tmp_path, runner, where):
    folder = hf_folder(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    secret = outside / "model.safetensors"
    (folder / "model.safetensors").rename(secret)  # a real, loadable file: only its place is wrong
    shard = {"dotdot": "../elsewhere/model.safetensors", "absolute": str(secret), "symlink": "link.safetensors"}[where]
    if where == "symlink":
        (folder / "link.safetensors").symlink_to(secret)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"wte.weight": shard}}))
    err = one_line(runner.invoke(app, ["trace", "hi", "--model", str(folder)]), "refused")
    assert str(secret.stat().st_size) not in err.replace(",", "")  # says nothing of the other file


def test_the_hugging_face_cache_layout_still_loads(tmp_path):
    """Snapshot files are links into the repository's blobs/: inside, not out."""
    repo = tmp_path / "models--x--y"
    snap, blobs = repo / "snapshots" / "abc", repo / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    for f in ("config.json", "model.safetensors"):
        (blobs / f"{f}.blob").write_bytes((FIXTURE / f).read_bytes())
        (snap / f).symlink_to(blobs / f"{f}.blob")
    assert tracer.load(str(snap)).config.n_layers == 3


# --------------------------------------------------------------------------------------------
# 5. Input at fault is exit 2 or a correct result, never exit 1


def test_minus_infinity_in_a_pattern_is_shown(good, tmp_path, runner):
    p = np.load(good)["blocks.0.attn.hook_pattern"].copy()
    p[0, 1, 0] = -np.inf
    path = rewrite(good, tmp_path / "neginf.npz", **{"blocks.0.attn.hook_pattern": p})
    r = runner.invoke(app, ["show", str(path), "--full", "--layer", "all"], env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.stderr
    assert "−∞" in r.stdout and "⚠ overflow" in r.stdout


def test_probabilities_stored_as_booleans_are_refused(good, tmp_path, runner):
    path = rewrite(good, tmp_path / "bool.npz", **{"sample.probs": np.load(good)["sample.probs"] > 0})
    one_line(runner.invoke(app, ["show", str(path)]), "'sample.probs' holds bool, not floating-point numbers")


def deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_deeply_nested_files_are_refused(good, tmp_path, runner, gpt2_config):
    meta = tmp_path / "meta.npz"
    rewrite(good, meta, meta=np.array('{"format": "tracer-trace", "x": ' + deep_json(2000) + "}"))
    one_line(runner.invoke(app, ["show", str(meta)]), "its 'meta' entry is not JSON (nested more than 32 deep)")
    st = tmp_path / "deep.safetensors"
    header = ('{"__metadata__": {}, "x": ' + deep_json(2000) + "}").encode()
    st.write_bytes(struct.pack("<Q", len(header)) + header)
    one_line(runner.invoke(app, ["trace", "hi", "--model", str(st)]), "its header is not JSON (nested more than 32")
    folder = hf_folder(tmp_path)
    (folder / "config.json").write_text('{"n_layer": ' + deep_json(2000) + "}")
    one_line(runner.invoke(app, ["trace", "hi", "--model", str(folder)]), "config.json: not valid JSON (nested")
    toml = tmp_path / "deep.toml"
    toml.write_text("a = " + deep_json(2000) + "\n")
    one_line(runner.invoke(app, ["replay", str(toml)]), "deep.toml: TOML too deep (nested more than 32 deep)")


@pytest.mark.parametrize("path, words", [("/proc/self/mem", "cannot read (Input/output error)"),
                                         ("{good}/x.npz", "cannot read (Not a directory)")])
def test_show_of_an_unreadable_file(good, runner, path, words):
    one_line(runner.invoke(app, ["show", path.replace("{good}", str(good))]), words)


@pytest.mark.parametrize("args", [["show", "{long}.npz"], ["trace", "hi", "--save", "{long}.npz"],
                                  ["trace", "hi", "--export", "{long}.txt"], ["replay", "{long}.toml"],
                                  ["replay", "{long}"]])
def test_a_file_name_over_255_bytes(tmp_path, runner, args):
    long = str(tmp_path / ("é" * 130))  # 260 bytes in UTF-8
    one_line(runner.invoke(app, [a.replace("{long}", long) for a in args]), "File name too long")


def test_an_expectation_that_states_nothing_is_refused(tmp_path, runner):
    text = (Path(tracer.__file__).parent.parent / "scenarios" / "two_heads.toml").read_text()
    path = tmp_path / "empty.toml"
    path.write_text(text + '\n[[expect]]\nname = "blocks.0.attn.hook_pattern"\nindex = [0, 0, "0:0"]\nvalue = []\n')
    one_line(runner.invoke(app, ["replay", str(path)]), "value: an empty list states nothing")




def test_a_model_built_to_overflow_shows_its_overflow_step_by_step(overflow, tmp_path, runner):
    """1e200 fits a float64, its square does not: Q·K of a with itself is −∞ (1e200·(−1e200)·…), the
    softmax of a row holding ∞ is NaN, and from there NaN flows on. Every command shows it and exits 0."""
    m = tracer.load(str(overflow))
    gen = m.generate(["a", "b"], max_new_tokens=2)
    dots = gen.steps[0]["blocks.0.attn.hook_dots"]
    assert np.isneginf(dots[0, 0, 0])  # the first overflow: a's query meets a's key
    assert np.isnan(gen.steps[0]["blocks.0.attn.hook_pattern"][0, 0, 0])  # softmax of a row with −∞ − (−∞)
    assert np.isfinite(gen.steps[0]["hook_embed"]).all()  # the weights themselves are finite
    from tracer.run.overflow import non_finite

    found = non_finite(gen)
    assert (found.step, found.name, found.index) == (0, "blocks.0.attn.hook_dots", [0, 0, 0])
    saved = tmp_path / "o.npz"
    for args in (["trace", "a b", "--model", str(overflow), "--save", str(saved)], ["show", str(saved)],
                 ["replay", str(overflow), "--full", "--layer", "all"], ["demo", str(overflow)]):
        r = runner.invoke(app, args, env={"COLUMNS": "120"})
        assert r.exit_code == 0, (args, r.stderr)
        assert "Warning" not in r.stderr and "damaged" not in r.stderr, r.stderr
        flat = " ".join(r.stdout.split())
        assert "The arithmetic overflowed: in the prompt's pass (pass 0), blocks.0.attn.hook_dots[0, 0, 0] = −∞" in flat
        assert "nan" in r.stdout
    got = json.loads(runner.invoke(app, ["replay", str(overflow), "--json"]).stdout)
    assert got["non_finite"] == {"step": 0, "name": "blocks.0.attn.hook_dots", "index": [0, 0, 0], "value": "-inf"}


@pytest.mark.slow
def test_an_overflowing_run_prints_no_warning_lines(overflow, run_tracer):
    p = run_tracer("trace", "a b", "--model", str(overflow), "--full", "--layer", "all")
    assert p.returncode == 0 and p.stderr == b"", p.stderr.decode()


# --------------------------------------------------------------------------------------------
# 6. Signals, pipes, terminals

KILL_MID_WRITE = """
import os, signal, sys
from tracer.{module} import {what}
def write(f):
    f.write(b"x" * 1000)
    os.kill(os.getpid(), signal.{sig})
    f.write(b"never")
{call}
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
@pytest.mark.parametrize("what", ["atomic_write", "atomic_folder"])
def test_a_signal_during_a_write_leaves_no_temporary_file(tmp_path, sig, what):
    call = ("atomic_write(sys.argv[1] + '/t.npz', write)" if what == "atomic_write" else
            "atomic_folder(sys.argv[1] + '/out', lambda tmp: write(open(tmp / 'f', 'wb')))")
    p = subprocess.run([sys.executable, "-c", KILL_MID_WRITE.format(module="files" if what == "atomic_write" else "folders", what=what, sig=sig, call=call), str(tmp_path)],
                       capture_output=True, timeout=60)
    assert p.returncode != 0
    assert sorted(os.listdir(tmp_path)) == [], os.listdir(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGHUP", "SIGINT"])
def test_a_signal_the_process_ignores_does_not_stop_a_write(tmp_path, sig):
    """nohup ignores SIGHUP, a job run with & ignores SIGINT: a write in such a process goes on to its end
    (tracer's handlers replaced the ignored ones and a hangup stopped a nohup'd run), and stays ignored after."""
    script = ("import os, signal, sys\nfrom tracer.formats.files import atomic_write\n"
              f"signal.signal(signal.{sig}, signal.SIG_IGN)\n"
              "def write(f):\n"
              f"    f.write(b'x' * 1000); os.kill(os.getpid(), signal.{sig}); f.write(b'end')\n"
              "atomic_write(sys.argv[1] + '/t.bin', write)\n"
              f"print(signal.getsignal(signal.{sig}) is signal.SIG_IGN)\n")
    p = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == b"True\n", p.stderr.decode()
    assert (tmp_path / "t.bin").read_bytes() == b"x" * 1000 + b"end" and os.listdir(tmp_path) == ["t.bin"]


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_the_command_removes_its_temporary_file_and_exits_128_plus_the_signal(tmp_path, sig, code, run_tracer):
    """A real `tracer trace --save` stopped while it writes: poll for the temporary file, then signal."""
    import time

    out = tmp_path / "t.npz"
    p = subprocess.Popen([sys.executable, "-m", "tracer", "trace", "word " * 150, "--save", str(out), "-n", "2",
                          "--section", "tokens"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env={**os.environ, "NO_COLOR": "1"})
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".t.npz.*.tmp")) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    if p.poll() is not None:
        pytest.skip("the write finished before the signal could be sent")
    p.send_signal(sig)
    err = p.communicate(timeout=60)[1].decode()
    assert p.returncode == code, err
    assert err.strip() == f"tracer: stopped by signal {int(sig)}", err
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("args", [["trace", "hi", "--full", "--layer", "all", "-m", "tiny"], ["demo", "article"]])
def test_a_closed_pipe_gives_exit_141(args):
    """tracer's own status, not head's (bash's PIPESTATUS)."""
    cmd = " ".join([f'"{sys.executable}"', "-m", "tracer", *args]) + " | head -1 > /dev/null; echo ${PIPESTATUS[0]}"
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, env={**os.environ, "NO_COLOR": "1"}, timeout=120)
    assert p.stdout.decode().strip() == "141", (p.stdout, p.stderr.decode()[-1500:])
    assert b"Traceback" not in p.stderr and b"Error" not in p.stderr, p.stderr.decode()


def test_columns_zero_is_an_unknown_width_not_a_zero_one(tmp_path, runner):
    out = tmp_path / "x.txt"
    r = runner.invoke(app, ["trace", "hi", "-n", "0", "--section", "tokens", "--export", str(out)],
                      env={"COLUMNS": "0"})
    assert r.exit_code == 0, r.stderr
    text = out.read_text()
    assert "1 · Tokens" in text and max(len(line) for line in text.splitlines()) == 80


# --------------------------------------------------------------------------------------------
# 7. Smaller


def test_a_warning_is_one_line_without_its_source(runner, monkeypatch):
    import warnings

    import tracer.model

    real = tracer.model.Model.generate

    def warns(self, *a, **k):
        warnings.warn("something odd \x1b[2J", RuntimeWarning)
        return real(self, *a, **k)

    monkeypatch.setattr(tracer.model.Model, "generate", warns)
    r = runner.invoke(app, ["trace", "hi", "-n", "0", "--json"])
    assert r.exit_code == 0
    assert r.stderr.strip() == "tracer: warning: something odd ␛[2J (RuntimeWarning)", r.stderr


def test_complex_arrays_are_refused_not_cut_to_their_real_part(good, tmp_path, runner, gpt2_config):
    path = rewrite(good, tmp_path / "c.npz", logits=np.load(good)["logits"].astype(np.complex128))
    one_line(runner.invoke(app, ["show", str(path)]), "'logits' holds complex128, not floating-point numbers")
    cfg = gpt2_config(n_layers=1)
    params = init_weights(cfg, 0)
    params["b_U"] = params["b_U"].astype(np.complex64)
    save_weights(tmp_path / "w.npz", cfg, params)
    one_line(runner.invoke(app, ["trace", "hi", "--model", str(tmp_path / "w.npz")]), "'b_U' must hold numbers, got complex64")


@pytest.mark.parametrize("key", ["scale_attn_weights", "tie_word_embeddings", "scale_attn_by_inverse_layer_idx"])
def test_false_as_a_string_in_config_json_is_not_true(tmp_path, runner, key):
    folder = hf_folder(tmp_path, config={key: "false"})
    one_line(runner.invoke(app, ["trace", "hi", "--model", str(folder)]), f"'{key}' must be true or false, got 'false'")


@pytest.mark.parametrize("version, shown", [(True, "true"), (-1, "-1"), (0, "0"), ("1", '"1"'), (1.0, "1.0")])
def test_a_trace_version_must_be_a_whole_number_from_1(good, tmp_path, runner, version, shown):
    path = with_meta(good, tmp_path / "v.npz", lambda m: m.update(version=version))
    one_line(runner.invoke(app, ["show", str(path)]), f"trace format version {shown} is not a version")


@pytest.mark.parametrize("name", ["steps.-1.logits", "steps.0.logits", "steps.+1.logits", "steps.9.logits",
                                  "steps.١.logits"])
def test_a_step_key_must_name_a_pass(good, tmp_path, runner, name):
    path = rewrite(good, tmp_path / "s.npz", **{name: np.load(good)["logits"]})
    one_line(runner.invoke(app, ["show", str(path)]), "names no pass of this trace")


def test_the_readme_says_bytes_may_differ_between_blas_thread_counts():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    promise = readme.index("gives a byte-identical `.npz`")
    assert "BLAS threads" in readme[promise - 400 : promise + 600]


# --------------------------------------------------------------------------------------------
# Issue 28: tokenizer files (tokenizer.json, a GGUF's tokenizer metadata)

QWEN2 = Path(__file__).parent / "data" / "qwen2-tiny"


def qwen2_folder(tmp_path: Path, change, family: Path = QWEN2) -> Path:
    """A copy of the tiny Qwen2 folder (or another family's) whose tokenizer.json `change(table)` has changed."""
    folder = tmp_path / family.name
    folder.mkdir()
    for f in ("config.json", "model.safetensors"):
        (folder / f).write_bytes((family / f).read_bytes())
    data = json.loads((family / "tokenizer.json").read_text(encoding="utf-8"))
    change(data)
    (folder / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    return folder


def split_regex(pattern: str):
    return lambda d: d["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex=pattern)


@pytest.mark.slow
@pytest.mark.parametrize("pattern", [r"(a+)+b", r"(a|aa)*c", r"(?:\s*)+x", r"(?:\p{L}\p{L}?)+!"])
def test_a_split_regex_with_nested_quantifiers_is_refused_at_once(tmp_path, limited, pattern):
    """(a+)+b took 2^n steps on Python's re, which Ctrl-C cannot stop: 34 characters ran for 11 minutes."""
    r = limited("trace", "a" * 40 + " " * 40, "--model", qwen2_folder(tmp_path, split_regex(pattern)), "-n", "1")
    assert r.returncode == 2 and r.seconds < FAST + 1, (r.returncode, r.seconds, r.stderr)
    assert "could take time exponential in the text: a quantifier applies to a group (nested quantifiers)" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_split_regex_with_a_huge_repetition_count_is_refused(tmp_path, runner):
    folder = qwen2_folder(tmp_path, split_regex(r"a{4294967296}|\p{L}+"))
    one_line(runner.invoke(app, ["trace", "hi", "--model", str(folder)]), "the repetition number is too large")


TOKENIZERS = Path(__file__).parent / "data" / "tokenizers"


@pytest.mark.parametrize("kind", ["tokenizer.json", "gguf"])
def test_one_long_vocabulary_token_loads_in_linear_time(tmp_path, kind, grows_linearly):
    """The test of every split of every token into two tokens was quadratic in a token's length: a token
    of 400,000 characters took 22 s to load, of 1.6 MB 11 minutes (tokenizer.json's limit is 16 MB)."""
    from tracer.tokenizers.gguf_tokenizer import tokenizer_json_from_gguf
    from tracer.tokenizers.hf_tokenizer import HFTokenizer

    base = json.loads((TOKENIZERS / "llama3-like.json").read_text(encoding="utf-8"))  # ignore_merges: tiktoken's rule

    def load(n: int):
        if kind == "gguf":  # a llama vocabulary without merges: transformers' generate_merges rebuilds them
            tokens = ["<unk>", "<s>", "</s>", "a", "aa", "b", "a" * n + "b"]
            tokenizer_json_from_gguf({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
                                      "tokenizer.ggml.scores": [0.0] * len(tokens)})
            return
        data = json.loads(json.dumps(base))
        data["model"]["vocab"]["a" * n] = max(t["id"] for t in data["added_tokens"]) + 1
        path = tmp_path / f"{n}.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        assert HFTokenizer(path).engine == "tiktoken"

    grows_linearly(load, 100_000)



def template(i: int) -> dict:
    return {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [i], "tokens": ["<s>"]}}}


OUT_OF_RANGE = {  # issue 28: a template id of 10⁹ was an IndexError (exit 1); vocab["H"] = -1 read W_E[1023] for H
    "template id 10⁹": (lambda d: d.update(post_processor=template(10**9)),
                        "the post-processor's template adds the id 1,000,000,000, which no token of the vocabulary has"),
    "vocabulary id -1": (lambda d: d["model"]["vocab"].update(H=-1), "the vocabulary's token 'H' has the id -1, outside 0..2,147,483,647"),
    "added token id -1": (lambda d: d["added_tokens"][0].update(id=-1), "the added token '<|endoftext|>' has the id -1, outside"),
    "template id -5": (lambda d: d.update(post_processor=template(-5)), "the template's special token '<s>' has the id -5, outside"),
    "vocabulary id 10⁹": (lambda d: d["model"]["vocab"].update(H=10**9), "the tokenizer has 1000000001 tokens but the model only 1024"),
}


@pytest.mark.parametrize("case", OUT_OF_RANGE, ids=list(OUT_OF_RANGE))
def test_every_token_id_of_a_tokenizer_json_is_a_row_of_the_embedding(tmp_path, runner, case):
    change, why = OUT_OF_RANGE[case]
    one_line(runner.invoke(app, ["trace", "Hello", "--model", str(qwen2_folder(tmp_path, change)), "-n", "1"]), why)


def test_sentencepiece_and_gguf_tokenizer_ids_are_checked_alike(tmp_path):
    from tracer.errors import TracerError
    from tracer.tokenizers.gguf_tokenizer import tokenizer_json_from_gguf
    from tracer.tokenizers.sp_tokenizer import SPTokenizer

    base = json.loads((TOKENIZERS / "sentencepiece" / "sp-llama.json").read_text(encoding="utf-8"))
    for change, why in [(lambda d: d["model"]["vocab"].update(H=-1), "the vocabulary's token 'H' has the id -1"),
                        (lambda d: d.update(post_processor=template(10**9)), "template adds the id 1,000,000,000"),
                        (lambda d: d["added_tokens"][0].update(id=2.0), "the added token '<unk>' has the id 2.0, not a whole number")]:
        data = json.loads(json.dumps(base))
        change(data)
        (tmp_path / "t.json").write_text(json.dumps(data), encoding="utf-8")
        with pytest.raises(TracerError, match=re.escape(why)):
            SPTokenizer(tmp_path / "t.json")
    meta = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["<unk>", "<s>", "</s>", "a"],
            "tokenizer.ggml.scores": [0.0] * 4}
    for key, value, why in [("tokenizer.ggml.token_type", ["1", "3", "3", "1"], "token_type is not a list of whole numbers"),
                            ("tokenizer.ggml.token_type", [1, True, 3, 1], "token_type is not a list of whole numbers"),
                            ("tokenizer.ggml.bos_token_id", True, "bos_token_id True is not a token id"),
                            ("tokenizer.ggml.eos_token_id", 4, "eos_token_id 4 is not a token id")]:
        with pytest.raises(TracerError, match=re.escape(why)):
            tokenizer_json_from_gguf({**meta, key: value})


LLAMA = Path(__file__).parent / "data" / "llama-tiny"  # its tokenizer.json runs on the tiktoken engine

TIKTOKEN_CASES = {  # issue 28: each was a PyO3 PanicException (a BaseException) past the CLI's handler, or accepted
    "duplicate id": (lambda d: d["model"]["vocab"].update(H=d["model"]["vocab"]["e"]), "both have the id"),
    "float id": (lambda d: d["model"]["vocab"].update(H=float(d["model"]["vocab"]["H"])), "not a whole number"),
    "bool id": (lambda d: d["model"]["vocab"].update(H=True), "the vocabulary's token 'H' has the id True, not a whole number"),
}


@pytest.mark.parametrize("case", TIKTOKEN_CASES, ids=list(TIKTOKEN_CASES))
def test_ids_tiktoken_would_panic_on_are_one_line(tmp_path, runner, case):
    change, why = TIKTOKEN_CASES[case]
    one_line(runner.invoke(app, ["trace", "Hello", "--model", str(qwen2_folder(tmp_path, change, LLAMA)), "-n", "1"]), why)


def test_a_regex_beyond_tiktokens_backtracking_limit_is_not_a_panic(tmp_path, capfd):
    """fancy-regex gives up after 10⁶ backtracking steps and tiktoken panics (a BaseException, and Rust's own
    message and backtrace on stderr): the piece runs on the other engine, which gives the same ids."""
    from tracer.tokenizers.hf_tokenizer import HFTokenizer

    folder = qwen2_folder(tmp_path, split_regex(r"\p{L}*\p{L}*\p{L}*(?=\d)|\p{L}+|\s+|\p{N}|[^\s\p{L}\p{N}]+"), LLAMA)
    tok, bpe = HFTokenizer(folder), HFTokenizer(folder, engine="bpe")
    assert tok.engine == "tiktoken"
    text = "a" * 300 + " x"
    assert tok.encode(text) == bpe.encode(text)
    assert capfd.readouterr().err == ""


def test_added_tokens_that_strip_white_space_encode_in_linear_time(tmp_path, grows_linearly):
    """Each lstrip/rstrip token copied the whole text before or after it: a 400 KB prompt took 5.6 s."""
    from tracer.tokenizers.hf_tokenizer import HFTokenizer

    def strip(d):
        d["added_tokens"][1].update(lstrip=True, rstrip=True)

    folder = qwen2_folder(tmp_path, strip)
    tok = HFTokenizer(folder)
    assert tok.encode("a  <|im_start|>  b") == [64, 1020, 65]
    grows_linearly(lambda n: tok.encode(" <|im_start|> " * (n // 14)), 400_000)


def test_a_split_that_outlasts_its_time_limit_is_one_line(tmp_path, monkeypatch):
    """A pattern of an allowed shape can still backtrack polynomially; the regex engine stops at the limit."""
    import tracer.tokenizers.patterns
    from tracer.errors import TracerError
    from tracer.tokenizers.hf_tokenizer import HFTokenizer

    tok = HFTokenizer(qwen2_folder(tmp_path, split_regex(r"\p{L}*\p{L}*\p{L}*(?=\d)|\p{L}+|\s+|\p{N}|[^\s\p{L}\p{N}]+")))
    monkeypatch.setattr(tracer.tokenizers.patterns, "budget", lambda text: 0.05)
    with pytest.raises(TracerError, match=r"its Split regex took more than 0 s on a text of 3,002 characters") as e:
        tok.encode("a" * 3000 + " x")
    assert "\n" not in str(e.value)
