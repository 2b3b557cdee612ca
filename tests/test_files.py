"""Weights files (`tracer.formats.files`): .npz and safetensors round trips, our safetensors reader and
writer against the safetensors library, truncated files, and pickled checkpoints refused."""

from __future__ import annotations

import numpy as np
import pytest

from tracer.core.config import Config
from tracer.errors import TracerError
from tracer.formats.files import load_safetensors, load_weights_file, save_safetensors, save_weights
from tracer.core.params import init_weights, param_shapes

CFG = Config(d_vocab=11, n_ctx=6, d_model=4, n_heads=2, n_layers=2, dtype="float64")


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_weights_round_trip_bit_exact(tmp_path, suffix):
    p = init_weights(CFG, 2)
    path = tmp_path / f"w{suffix}"
    save_weights(path, CFG, p, seed=2)
    arrays, cfg = load_weights_file(path)
    assert cfg == CFG
    assert set(arrays) == set(param_shapes(CFG))
    for k in p:
        assert arrays[k].dtype == p[k].dtype and np.array_equal(arrays[k], p[k]), k


def test_our_safetensors_agree_with_the_safetensors_library(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    arrays = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.linspace(0, 1, 5), "c": np.arange(3, dtype=np.int64)}
    ours = tmp_path / "ours.safetensors"
    theirs = tmp_path / "theirs.safetensors"
    save_safetensors(ours, arrays, {"k": "v"})
    st.save_file(arrays, str(theirs), metadata={"k": "v"})
    back = st.load_file(str(ours))
    mine, meta = load_safetensors(theirs)
    assert meta == {"k": "v"}
    for k, v in arrays.items():
        assert np.array_equal(back[k], v) and np.array_equal(mine[k], v) and mine[k].dtype == v.dtype


def test_truncated_safetensors_is_a_clear_error(tmp_path):
    path = tmp_path / "w.safetensors"
    save_safetensors(path, {"W_E": np.zeros((100, 10), dtype=np.float32)})
    raw = path.read_bytes()
    path.write_bytes(raw[:-100])
    with pytest.raises(TracerError, match="truncated: tensor 'W_E'"):
        load_safetensors(path)
    path.write_bytes(b"\x05\x00")
    with pytest.raises(TracerError, match="not a safetensors file"):
        load_safetensors(path)


def test_pickled_checkpoints_are_refused(tmp_path):
    with pytest.raises(TracerError, match="never loaded"):
        load_weights_file(tmp_path / "pytorch_model.bin")
