"""Nothing from a data file is ever executed: pickles are refused unopened, escapes are shown.

Each hostile file below carries a live pickle payload whose unpickling would create a marker
file (`open(marker, "w")` through `__reduce__`). A sanity test first proves the payload is live
(numpy with allow_pickle=True does create the marker); then every way a file reaches tracer
(`tracer show`, `--model`, a scenario's weights file) must refuse it with exit code 2 and leave
the marker uncreated. Text from a trace file must never reach the terminal as a control sequence.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.cli import app
from tracer.errors import TracerError
from tracer.formats.files import load_npz, load_weights_file
from tracer.run.trace import Generation

SMALL = dict(n_ctx=8, n_heads=1, n_layers=1)  # changes to `gpt2_config`: GPT-2's vocabulary, one layer of one head


class Payload:
    """Unpickling this calls open(marker, "w"): it creates the marker file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _evil_array(marker: Path) -> np.ndarray:
    arr = np.empty(1, dtype=object)
    arr[0] = Payload(marker)
    return arr  # [1] object: np.save pickles it


@pytest.fixture()
def files(tmp_path, gpt2_weights):
    marker = tmp_path / "PWNED"
    f = {"marker": marker}
    # a real trace and a real weights file, each with a pickled object added
    tracer_file = gpt2_weights(tmp_path / "good_w.npz", 0, **SMALL)
    model = tracer.load(str(tracer_file))
    model.generate("hi", max_new_tokens=1).save(tmp_path / "good.npz")
    good = dict(np.load(tmp_path / "good.npz", allow_pickle=False))
    f["trace_extra"] = tmp_path / "trace_extra.npz"
    np.savez(f["trace_extra"], **good, extra=_evil_array(marker))
    f["trace_meta"] = tmp_path / "trace_meta.npz"  # the payload where the metadata should be
    np.savez(f["trace_meta"], **{**good, "meta": _evil_array(marker)})
    weights = dict(np.load(tracer_file, allow_pickle=False))
    f["weights"] = tmp_path / "weights.npz"
    np.savez(f["weights"], **{**weights, "W_E": _evil_array(marker)})
    f["raw_pickle"] = tmp_path / "raw.npz"  # not a zip at all: a bare pickle stream
    f["raw_pickle"].write_bytes(pickle.dumps(Payload(marker)))
    f["npy"] = tmp_path / "single.npz"  # a bare .npy holding an object array
    with open(f["npy"], "wb") as fh:
        np.save(fh, _evil_array(marker), allow_pickle=True)
    for suffix in (".bin", ".pt", ".pkl", ".ckpt"):
        f[suffix] = tmp_path / f"checkpoint{suffix}"
        f[suffix].write_bytes(pickle.dumps(Payload(marker)))
    f["scenario"] = tmp_path / "evil.toml"
    f["scenario"].write_text(f'title = "evil"\n[weights]\nfile = "{f["weights"].name}"\n')
    assert not marker.exists()
    return f


def test_the_payload_is_live(files, tmp_path):
    """numpy itself, allowed to unpickle, runs the payload: so the refusals below mean something."""
    live = tmp_path / "LIVE"
    path = tmp_path / "live.npz"
    np.savez(path, x=_evil_array(live))
    with np.load(path, allow_pickle=True) as z:
        z["x"]
    assert live.exists()
    live.unlink()
    pickle.loads(files["raw_pickle"].read_bytes())
    assert files["marker"].exists()
    files["marker"].unlink()


@pytest.mark.parametrize("key", ["trace_extra", "trace_meta", "raw_pickle", "npy"])
def test_show_refuses_pickles(files, key, runner):
    r = runner.invoke(app, ["show", str(files[key])])
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "refused" in r.stderr or "not a readable .npz" in r.stderr, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert not files["marker"].exists()


@pytest.mark.parametrize("key", ["weights", "raw_pickle", "npy", ".bin", ".pt", ".pkl", ".ckpt"])
def test_model_refuses_pickles(files, key, runner):
    r = runner.invoke(app, ["trace", "hi", "--model", str(files[key])])
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "refused" in r.stderr or "never loaded" in r.stderr or "not a readable .npz" in r.stderr, r.stderr
    assert not files["marker"].exists()


def test_scenario_weights_file_refuses_pickles(files, runner):
    r = runner.invoke(app, ["replay", str(files["scenario"])])
    assert r.exit_code == 2 and "refused" in r.stderr, r.stderr
    assert not files["marker"].exists()


def test_loaders_refuse_pickles_in_process(files):
    for key in ("trace_extra", "trace_meta", "raw_pickle", "npy"):
        with pytest.raises(TracerError):
            Generation.load(files[key])
    for key in ("weights", ".bin", ".pt", ".pkl", ".ckpt"):
        with pytest.raises(TracerError):
            load_weights_file(files[key])
    with pytest.raises(TracerError, match="refused"):
        load_npz(files["weights"])
    assert not files["marker"].exists()


@pytest.mark.slow
def test_real_process_refuses_and_creates_nothing(files, run_tracer):
    for args in (["show", str(files["trace_extra"])], ["trace", "hi", "--model", str(files["weights"])]):
        p = run_tracer(*args)
        assert p.returncode == 2 and b"refused" in p.stderr and b"Traceback" not in p.stderr, p.stderr
    assert not files["marker"].exists()


# --------------------------------------------------------------------------------------------
# Terminal escapes: text in a trace file is shown, never obeyed

HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[31m"  # retitle the window, clear the screen, turn red


@pytest.fixture
def hostile_trace(tmp_path, gpt2_weights) -> Path:
    """A trace whose model name, prompt, text and token strings carry terminal escapes."""
    w = gpt2_weights(tmp_path / "w.npz", 0, **SMALL)
    tracer.load(str(w)).generate("hi", max_new_tokens=1).save(tmp_path / "good.npz")
    arrays = dict(np.load(tmp_path / "good.npz", allow_pickle=False))
    meta = json.loads(str(arrays["meta"]))
    meta.update(model=HOSTILE + "model", prompt=HOSTILE + "prompt", text=HOSTILE)
    meta["token_strs"] = [HOSTILE + s for s in meta["token_strs"]]
    arrays["meta"] = np.array(json.dumps(meta))
    path = tmp_path / "hostile.npz"
    np.savez(path, **arrays)
    return path


def test_escape_sequences_in_a_trace_are_shown_not_sent(hostile_trace, runner):
    path = hostile_trace
    r = runner.invoke(app, ["show", str(path)], env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "␛" in r.stdout  # the escape is visible as a control picture


@pytest.mark.slow
def test_escape_sequences_even_on_a_color_terminal(hostile_trace, run_tracer):
    """With colors forced, Rich's own SGR codes are fine; the file's OSC and clear-screen are not."""
    p = run_tracer("show", str(hostile_trace), env={"FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "120",
                                                    "NO_COLOR": None})
    out = p.stdout.decode()
    assert p.returncode == 0, p.stderr.decode()
    assert "\x1b]" not in out and "\x1b[2J" not in out and "\x07" not in out
    assert "\x1b[" in out  # colors were on: the check above is not vacuous


def test_prompt_escapes_are_shown_in_trace_and_tokens(runner):
    for args in (["tokens", HOSTILE + "hi"], ["trace", HOSTILE + "hi", "-n", "0", "--layer", "0"]):
        r = runner.invoke(app, args, env={"COLUMNS": "120"})
        assert r.exit_code == 0, r.stderr
        assert "\x1b" not in r.stdout and "\x07" not in r.stdout


def test_scenario_text_cannot_drive_the_terminal(tmp_path, runner):
    """A scenario someone shared: its title and description are shown, escapes and all, never obeyed."""
    shipped = Path(tracer.__file__).parent / "scenarios" / "two_heads.toml"
    text = shipped.read_text()
    lines = [ln if not ln.startswith("title = ") else 'title = "shared \\u001b]0;owned\\u0007\\u001b[2J title"'
             for ln in text.splitlines()]
    assert lines != text.splitlines()
    path = tmp_path / "shared.toml"
    path.write_text("\n".join(lines) + "\n")
    for args in (["replay", str(path)], ["demo", str(path)]):
        r = runner.invoke(app, args, env={"COLUMNS": "100"})
        assert r.exit_code == 0, r.stderr
        assert "\x1b" not in r.stdout and "\x07" not in r.stdout
        assert "shared ␛]0;owned" in r.stdout  # shown, as control pictures


def test_scenario_text_is_escaped_in_html_exports(tmp_path, runner):
    shipped = Path(tracer.__file__).parent / "scenarios" / "two_heads.toml"
    lines = [ln if not ln.startswith("title = ") else 'title = "<script>alert(1)</script><img src=x onerror=alert(2)>"'
             for ln in shipped.read_text().splitlines()]
    path = tmp_path / "xss.toml"
    path.write_text("\n".join(lines) + "\n")
    for args, out in ((["replay", str(path), "--export"], "page.html"), (["demo", str(path), "--export"], "deck.html")):
        r = runner.invoke(app, [*args, str(tmp_path / out)])
        assert r.exit_code == 0, r.stderr
        html = (tmp_path / out).read_text()
        assert "&lt;script&gt;alert(1)" in html  # the title is there, as text
        assert "<script>alert" not in html and "<img src=x" not in html
