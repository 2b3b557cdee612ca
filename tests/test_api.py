"""The Python API as the README shows it, and the `trace` / `tokens` commands."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

import tracer
from tracer.cli import app
from tracer.errors import TracerError

runner = CliRunner()
ARTICLE = "You are a business consultant, please analyze the impact of rising oil prices on the automotive industry."


def test_readme_api_example():
    model = tracer.load("tiny")
    trace = model.run(ARTICLE)
    assert trace["blocks.0.attn.hook_pattern"].shape == (2, 19, 19)
    assert len(trace.tokens) == 19 and trace.config.n_layers == 24
    gen = model.generate(ARTICLE, max_new_tokens=3)
    assert len(gen.generated_ids) == 3 and gen.prompt_ids == list(trace.tokens)
    # greedy: each generated token is the argmax of the pass before it
    assert gen.generated_ids[0] == int(np.argmax(trace["logits"][-1]))


def test_same_seed_same_weights_other_seed_other_weights():
    a, b, c = tracer.load("tiny", seed=1), tracer.load("tiny", seed=1), tracer.load("tiny", seed=2)
    assert np.array_equal(a.params["blocks.5.mlp.W_in"], b.params["blocks.5.mlp.W_in"])
    assert not np.array_equal(a.params["W_E"], c.params["W_E"])


def test_bad_prompts_and_ids():
    m = tracer.load("tiny")
    for bad in ("", "   ", []):
        with pytest.raises(TracerError, match="empty"):
            m.run(bad)
    with pytest.raises(TracerError, match="outside the vocabulary"):
        m.run([1, 50257])
    with pytest.raises(TracerError, match="longer than the model's context"):
        m.run(list(range(1025)))


def test_cli_trace_json():
    r = runner.invoke(app, ["trace", ARTICLE, "--json", "-n", "2"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["prompt_ids"][:3] == [1639, 389, 257] and len(out["generated_ids"]) == 2
    assert out["text"] == "".join(out["generated"])


def test_cli_trace_saves_and_says_untrained(tmp_path):
    path = tmp_path / "t.npz"
    r = runner.invoke(app, ["trace", "Hello world", "--save", str(path)])
    assert r.exit_code == 0, r.output
    assert "untrained" in r.stdout
    assert tracer.Generation.load(path).prompt_ids == [15496, 995]


def test_cli_tokens_table():
    r = runner.invoke(app, ["tokens", "building a house"])
    assert r.exit_code == 0
    for text in ("building", "␣a", "␣house", "16894", "50,257"):
        assert text in r.stdout


def test_cli_errors_are_one_line_with_exit_2():
    r = runner.invoke(app, ["trace", "x", "--model", "gpt3"])
    assert r.exit_code == 2 and "did you mean 'gpt2'" in r.stderr and "Traceback" not in r.output
    r = runner.invoke(app, ["tokens", "x", "--encoding", "nope"])
    assert r.exit_code == 2 and "not available offline" in r.stderr


def test_python_dash_m_works():
    r = subprocess.run([sys.executable, "-m", "tracer", "tokens", "Hi"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "17250" in r.stdout


def test_a_prompt_that_fits_but_leaves_no_room_names_max_new_tokens():
    r = runner.invoke(app, ["trace", "hello " * 1000, "-n", "100"])
    assert r.exit_code == 2
    assert "max-new-tokens 100 overflows the context" in r.stderr and "at most 23 new tokens" in r.stderr
    assert "longer than the model's context" not in r.stderr
