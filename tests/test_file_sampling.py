"""A GGUF file's suggested sampling settings (`general.sampling.*`, llama.cpp's src/llama-arch.cpp names), read
by `tracer.readers.gguf_sampling`: shown in the header and by `tracer models`, used by `--sampling file` (and
`sampling="file"`, a request's `"sampling": "file"`) where no option was given, and refused in one line when a
value has the wrong type or is out of range. The files are written by the gguf package (llama.cpp's writer)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.cli import app
from tracer.errors import TracerError

DATA = Path(__file__).parent / "data"
SUGGESTS = {"general.sampling.temp": 0.6, "general.sampling.top_k": 20, "general.sampling.top_p": 0.95,
            "general.sampling.min_p": 0.05, "general.sampling.penalty_repeat": 1.1,
            "general.sampling.penalty_last_n": np.int32(-1), "general.sampling.mirostat": 2,
            "general.sampling.sequence": "edskypmxt"}


@pytest.fixture(scope="module")
def suggesting(request):
    pytest.importorskip("gguf")
    return request.getfixturevalue("gguf_of_folder")(DATA / "qwen2-tiny", "qwen2", meta=SUGGESTS)


def one_line(r, *needles):
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and "Traceback" not in r.stderr, (r.exit_code, r.stderr)
    for n in needles:
        assert n in lines[0], lines[0]


def test_the_files_suggestions_are_read_as_llama_cpp_names_them(suggesting):
    m = tracer.load(str(suggesting))
    assert m.sampling == pytest.approx({"temperature": 0.6, "top_k": 20, "top_p": 0.95, "min_p": 0.05,
                                        "repetition_penalty": 1.1, "penalty_last_n": None})  # −1: the whole context
    assert m.sampling_unused == {"general.sampling.mirostat": 2, "general.sampling.sequence": "edskypmxt"}


def test_the_header_says_them_and_sampling_file_uses_them_where_no_option_was_given(suggesting, runner):
    r = runner.invoke(app, ["trace", "hello there", "--model", str(suggesting), "-n", "2", "--section", "tokens"],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.stderr
    head = " ".join(r.stdout.split())
    assert ("This file suggests temperature 0.6, top-k 20, top-p 0.95, min-p 0.05, repetition penalty 1.1 "
            "(general.sampling.*); --sampling file uses them.") in head
    assert "samplers tracer does not have: mirostat 2, sequence edskypmxt" in head
    r = runner.invoke(app, ["trace", "hello there", "--model", str(suggesting), "-n", "2", "--sampling", "file", "--json"])
    got = json.loads(r.stdout)["settings"]
    assert (got["temperature"], got["top_k"], got["top_p"], got["min_p"]) == pytest.approx((0.6, 20, 0.95, 0.05))
    assert got["repetition_penalty"] == pytest.approx(1.1) and got["penalty_last_n"] is None and got["sampling"] == "file"
    r = runner.invoke(app, ["trace", "hello there", "--model", str(suggesting), "-n", "2", "--sampling", "file", "-t", "0",
                            "--top-k", "3", "--json"])  # options given explicitly win, even at their defaults' values
    got = json.loads(r.stdout)["settings"]
    assert (got["temperature"], got["top_k"], got["top_p"]) == pytest.approx((0.0, 3, 0.95))
    r = runner.invoke(app, ["trace", "hello there", "--model", str(suggesting), "-n", "1", "--json"])
    assert json.loads(r.stdout)["settings"]["temperature"] == 0.0  # without --sampling file: the file is only shown


def test_the_api_and_a_request_use_them_the_same_way(suggesting):
    m = tracer.load(str(suggesting))
    gen = m.generate("hello", max_new_tokens=2, sampling="file", top_p=0.5, seed=3)
    s = gen.settings
    assert (s.temperature, s.top_k, s.top_p, s.min_p) == pytest.approx((0.6, 20, 0.5, 0.05))
    assert "sample.kept_min_p" in gen.passes[0] and gen.settings.sampling == "file"  # the file's min-p cut the draw
    pytest.importorskip("starlette")
    from tracer.serve.engine import Engine
    from tracer.serve.limits import Limits, parse_trace_request

    engine = Engine({"q": m}, workers=1, queue=1)
    try:
        req = parse_trace_request(json.dumps({"prompt": "hello", "model": "q", "sampling": "file", "top_k": 4}).encode(),
                                  ["q"], Limits(), "q")
        answer = engine.answer(req)
        assert (answer["settings"]["temperature"], answer["settings"]["top_k"]) == pytest.approx((0.6, 4))
    finally:
        engine.close()


def test_models_lists_them(suggesting, runner, tmp_path):
    folder = tmp_path / "lmstudio" / "someone" / "model"
    folder.mkdir(parents=True)
    (folder / "suggesting.gguf").write_bytes(Path(suggesting).read_bytes())
    r = runner.invoke(app, ["models"], env={"COLUMNS": "250", "LMSTUDIO_MODELS": str(tmp_path / "lmstudio"),
                                            "OLLAMA_MODELS": str(tmp_path / "none"), "HF_HUB_CACHE": str(tmp_path / "none")})
    assert r.exit_code == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if "suggesting.gguf" in line)
    assert "temperature 0.6, top-k 20, top-p 0.95, min-p 0.05, repetition penalty 1.1" in " ".join(row.split())
    assert "its file suggests" in r.stdout


@pytest.mark.parametrize("key,value,needle", [
    ("general.sampling.top_p", 1.5, "general.sampling.top_p is 1.5, out of its range"),
    ("general.sampling.temp", -0.2, "general.sampling.temp is -0.2"),
    ("general.sampling.top_k", 2.5, "general.sampling.top_k must be a whole number, but the file holds a float32"),
    ("general.sampling.temp", "hot", "general.sampling.temp must be a number, but the file holds a string"),
    ("general.sampling.penalty_repeat", 0.0, "general.sampling.penalty_repeat is 0.0"),
    ("general.sampling.penalty_last_n", np.int32(-2), "general.sampling.penalty_last_n is -2"),
    ("general.sampling.mirostat", "two", "general.sampling.mirostat must be a number"),
])
def test_a_bad_suggestion_is_refused_in_one_line(key, value, needle, gguf_of_folder, runner):
    pytest.importorskip("gguf")
    path = gguf_of_folder(DATA / "qwen2-tiny", "qwen2", meta={key: value})
    with pytest.raises(TracerError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        tracer.load(str(path))
    one_line(runner.invoke(app, ["trace", "hello", "--model", str(path)]), needle, str(path))


def test_sampling_file_needs_a_file_that_suggests(runner):
    one_line(runner.invoke(app, ["trace", "A B", "--sampling", "file"]), "file suggests no sampling settings")
    one_line(runner.invoke(app, ["trace", "A B", "--sampling", "model"]), "sampling must be one of file")
