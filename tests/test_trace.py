"""The trace object and its .npz file: bit-exact round trips, generation steps, refusing pickles."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tracer
from tracer.errors import TracerError
from tracer.run.trace import Generation, Trace


@pytest.fixture(scope="module")
def model():
    return tracer.load("tiny")


def test_run_returns_a_mapping_of_hook_names(model):
    t = model.run("Hello world")
    assert isinstance(t, Trace)
    assert t["blocks.0.attn.hook_pattern"].shape == (2, 2, 2)  # [head, query_pos, key_pos]
    assert t["logits"].shape == (2, 50257)
    assert t.token_strs == ["Hello", " world"]
    with pytest.raises(KeyError, match="did you mean"):
        t["blocks.0.attn.hook_patern"]


def test_save_load_is_bit_exact_and_plain_numpy(model, tmp_path):
    t = model.run("The cat sat")
    path = tmp_path / "t.npz"
    t.save(path)
    back = Trace.load(path)
    assert list(back) == list(t)
    for name in t:
        assert back[name].dtype == t[name].dtype and np.array_equal(back[name], t[name]), name
    assert back.config == t.config and back.token_strs == t.token_strs
    with np.load(path, allow_pickle=False) as z:  # any numpy program can read it
        meta = json.loads(str(z["meta"]))
        assert meta["format"] == "tracer-trace" and meta["prompt"] == "The cat sat"
        assert list(z["tokens"]) == list(t.tokens)
        assert np.array_equal(z["blocks.3.attn.hook_q"], t["blocks.3.attn.hook_q"])


def test_generation_saves_every_step(model, tmp_path):
    gen = model.generate("The cat", max_new_tokens=3, temperature=1.0, seed=4)
    assert len(gen.steps) == 3 and len(gen.generated_ids) == 3
    assert [s.start for s in gen.steps] == [0, 2, 3]  # KV cache: each later pass computes one position
    assert gen.steps[2]["blocks.0.attn.hook_pattern"].shape == (2, 1, 4)
    path = tmp_path / "g.npz"
    gen.save(path)
    with np.load(path, allow_pickle=False) as z:
        assert "steps.2.blocks.0.attn.hook_q" in z.files and "blocks.0.attn.hook_q" in z.files
    back = Generation.load(path)
    assert back.generated_ids == gen.generated_ids and back.text == gen.text
    for a, b in zip(gen.steps, back.steps):
        assert a.start == b.start and list(a.tokens) == list(b.tokens)
        assert all(np.array_equal(a[k], b[k]) for k in a)


class _Boom:
    def __reduce__(self):
        return (print, ("unpickled!",))


def test_a_pickled_npz_is_refused_without_unpickling(tmp_path, capsys):
    path = tmp_path / "evil.npz"
    np.savez(path, meta=np.array([_Boom()], dtype=object), tokens=np.arange(3))
    with pytest.raises(TracerError, match="pickled object; refused"):
        Generation.load(path)
    assert "unpickled!" not in capsys.readouterr().out


def test_not_a_trace_and_newer_versions_are_clear_errors(model, tmp_path):
    bad = tmp_path / "x.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(TracerError, match="not a readable .npz"):
        Generation.load(bad)
    np.savez(bad, tokens=np.arange(3))
    with pytest.raises(TracerError, match="no 'meta'"):
        Generation.load(bad)
    path = tmp_path / "t.npz"
    model.run("Hi").save(path)
    with np.load(path) as z:
        arrays = dict(z)
    meta = json.loads(str(arrays["meta"]))
    meta["version"] = 99
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(path, **arrays)
    with pytest.raises(TracerError, match="newer than this tracer reads"):
        Generation.load(path)


def test_recorded_arrays_are_read_only_as_the_readme_says(tmp_path):
    """A trace records what was computed: writing into one of its arrays is refused, so a saved
    trace can only hold what the model made (copy an array to change it)."""
    gen = tracer.load("abc").generate("A B C", max_new_tokens=1)
    for name in ("blocks.0.attn.hook_q", "blocks.0.attn.hook_pattern", "logits", "blocks.0.attn.hook_result"):
        arr = gen.steps[0][name]
        with pytest.raises(ValueError, match="read-only"):
            arr[..., 0] = 5
    path = tmp_path / "t.npz"
    gen.save(path)
    again = tracer.Generation.load(path)
    with pytest.raises(ValueError, match="read-only"):
        again.steps[0]["blocks.0.hook_resid_post"][0, 0] = 1
    copy = np.array(again.steps[0]["blocks.0.hook_resid_post"])
    copy[0, 0] = 1  # a copy is the reader's own
