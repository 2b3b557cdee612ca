"""Issue 37's fixtures written as GGUF files the way llama.cpp's converter writes them (tests/conftest.py,
`_write_new_family_gguf`) and read back with the gguf package: every tensor of the folder is there under
llama.cpp's name, stored as the converter stores it (undone here, one rule per transformation, as
tests/data/README.md lists them), and the metadata llama.cpp reads says what the folder's config.json says."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from safetensors.numpy import load_file  # noqa: E402

DATA = Path(__file__).parent / "data"
PRE = {"qwen3-5-tiny": "qwen35", "gemma4-tiny": "", "smollm3-tiny": "smaug-bpe", "olmo3-tiny": "gpt-2"}
ARCH = {"qwen3-5-tiny": "qwen35", "gemma4-tiny": "gemma4", "smollm3-tiny": "smollm3", "olmo3-tiny": "olmo2"}


def _read(path: Path) -> tuple[dict, dict]:
    reader = gguf.GGUFReader(str(path))
    return ({t.name: np.array(t.data) for t in reader.tensors},
            {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")})


def _tiled_to_grouped(a: np.ndarray, axis: int, n_k: int, per_k: int, size: int) -> np.ndarray:
    """The inverse of llama.cpp's V-head reordering: position (j, i) of the tiled order [k0v0, k1v0, k0v1, k1v1]
    holds grouped head i·per_k + j."""
    shape = list(a.shape)
    b = a.reshape(shape[:axis] + [per_k, n_k, size] + shape[axis + 1 :])
    return np.swapaxes(b, axis, axis + 1).reshape(shape)


def _unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """LlamaModel.permute undone: each head's interleaved rotary pairs back into halves."""
    return w.reshape(n_heads, w.shape[0] // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _qwen35_back(cfg: dict, name: str, a: np.ndarray) -> np.ndarray:
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, per = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], nv // nk
    if name.endswith(("ssm_a", "ssm_dt.bias", "ssm_alpha.weight", "ssm_beta.weight")):
        return _tiled_to_grouped(a, 0, nk, per, 1)
    if name.endswith(("attn_qkv.weight", "ssm_conv1d.weight")):
        qk = 2 * nk * dk
        a = np.concatenate([a[:qk], _tiled_to_grouped(a[qk:], 0, nk, per, dv)])
        return a[:, None, :] if name.endswith("ssm_conv1d.weight") else a  # stored [channel, kernel]
    if name.endswith("attn_gate.weight"):
        return _tiled_to_grouped(a, 0, nk, per, dv)
    if name.endswith("ssm_out.weight"):
        return _tiled_to_grouped(a, 1, nk, per, dv)
    return a


def _stored_as(folder: str, name: str, want: np.ndarray) -> np.ndarray:
    """What the converter computes from a folder's tensor (once the reordering is undone): Qwen3.5's A_log as
    -exp(A_log), its (1 + w) norms with the 1 added (not the gated norm, whose weight is plain)."""
    if folder == "qwen3-5-tiny" and name.endswith("ssm_a"):
        return -np.exp(want)
    if folder == "qwen3-5-tiny" and name.endswith("norm.weight") and not name.endswith("ssm_norm.weight"):
        return want + np.float32(1)
    return want


def _back(folder: str, cfg: dict, name: str, a: np.ndarray) -> np.ndarray:
    if folder == "qwen3-5-tiny":
        return _qwen35_back(cfg, name, a)
    if folder == "smollm3-tiny" and name.endswith(("attn_q.weight", "attn_k.weight")):
        return _unpermute(a, cfg["num_attention_heads"] if "attn_q" in name else cfg["num_key_value_heads"])
    return a


@pytest.mark.parametrize("folder", list(ARCH))
def test_every_tensor_of_the_folder_read_back(gguf_of_folder, folder):
    cfg = json.loads((DATA / folder / "config.json").read_text())
    hf = load_file(str(DATA / folder / "model.safetensors"))
    tensors, meta = _read(gguf_of_folder(DATA / folder, PRE[folder]))
    assert meta["general.architecture"] == ARCH[folder]
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH[ARCH[folder].upper()], cfg["num_hidden_layers"])
    expected = set()
    for name, want in hf.items():
        mapped = name.replace(".dt_bias", ".dt_proj.bias") + (".weight" if name.endswith("layer_scalar") else "")
        g = tmap.get_name(mapped, try_suffixes=(".weight", ".bias"))
        if folder == "gemma4-tiny" and name == "lm_head.weight":
            continue
        expected.add(g)
        back = _back(folder, cfg, g, tensors[g]).reshape(want.shape)
        if g.endswith("ssm_a"):  # torch's exp and numpy's may differ in the last bit
            np.testing.assert_allclose(back, _stored_as(folder, g, want), rtol=1e-6, err_msg=g)
        else:
            np.testing.assert_array_equal(back, _stored_as(folder, g, want), err_msg=g)
        if folder == "qwen3-5-tiny" and g.endswith("ssm_conv1d.weight"):
            assert tensors[g].shape == (want.shape[0], want.shape[2])  # [channel, kernel]: ne {kernel, channel}
    extra = {"rope_freqs.weight"} if folder == "gemma4-tiny" else set()
    assert set(tensors) == expected | extra


def test_the_reordering_moves_value_heads():
    """On the fixture, tiling the value heads changes in_proj_z (4 value heads over 2 key heads): a reader that
    skipped the reorder would read the wrong heads."""
    from .conftest import reorder_v_heads

    z = load_file(str(DATA / "qwen3-5-tiny" / "model.safetensors"))["model.layers.0.linear_attn.in_proj_z.weight"]
    tiled = reorder_v_heads(z, 0, 2, 2, 8)
    np.testing.assert_array_equal(tiled[8:16], z[16:24])  # tiled head 1 is grouped head 2 (key head 1's first)
    np.testing.assert_array_equal(_tiled_to_grouped(tiled, 0, 2, 2, 8), z)
    assert not np.array_equal(tiled, z)


def test_qwen35_metadata(gguf_of_folder):
    _, meta = _read(gguf_of_folder(DATA / "qwen3-5-tiny", PRE["qwen3-5-tiny"]))
    a = "qwen35."
    want = {"block_count": 4, "embedding_length": 64, "feed_forward_length": 96, "attention.head_count": 4,
            "attention.head_count_kv": 2, "attention.key_length": 32, "attention.value_length": 32,
            "rope.dimension_count": 8, "rope.dimension_sections": [2, 1, 1, 0], "ssm.conv_kernel": 4,
            "ssm.state_size": 8, "ssm.group_count": 2, "ssm.time_step_rank": 4, "ssm.inner_size": 32,
            "full_attention_interval": 2}
    for key, value in want.items():
        assert meta[a + key] == value, key
    assert meta[a + "rope.freq_base"] == pytest.approx(1e7)
    assert meta["tokenizer.ggml.pre"] == "qwen35" and meta["tokenizer.ggml.model"] == "gpt2"


def test_gemma4_metadata_and_rope_freqs(gguf_of_folder):
    tensors, meta = _read(gguf_of_folder(DATA / "gemma4-tiny", PRE["gemma4-tiny"]))
    a = "gemma4."
    want = {"block_count": 5, "feed_forward_length": [64, 64, 64, 128, 128], "attention.head_count": 4,
            "attention.head_count_kv": [2, 2, 1, 2, 1], "attention.key_length": 32, "attention.value_length": 32,
            "attention.key_length_swa": 16, "attention.value_length_swa": 16, "rope.dimension_count": 32,
            "rope.dimension_count_swa": 16, "attention.sliding_window": 6, "attention.shared_kv_layers": 2,
            "embedding_length_per_layer_input": 8,
            "attention.sliding_window_pattern": [True, True, False, True, False]}
    for key, value in want.items():
        assert meta[a + key] == value, key
    assert meta[a + "final_logit_softcapping"] == pytest.approx(10.0)
    assert meta[a + "rope.freq_base"] == pytest.approx(1e6) and meta[a + "rope.freq_base_swa"] == pytest.approx(1e4)
    np.testing.assert_array_equal(tensors["rope_freqs.weight"], np.array([1.0] * 4 + [1e30] * 12, dtype=np.float32))  # 0.25 × 32 / 2 pairs rotate
    assert meta["tokenizer.ggml.model"] == "gemma4" and len(meta["tokenizer.ggml.tokens"]) == 600
    assert meta["tokenizer.ggml.add_bos_token"] is True and meta["tokenizer.ggml.add_space_prefix"] is False
    assert [meta[f"tokenizer.ggml.{k}_token_id"] for k in ("bos", "eos", "padding")] == [1, 2, 0]
    types = meta["tokenizer.ggml.token_type"]
    assert types[:5] == [3, 3, 3, 1, 6] and meta["tokenizer.ggml.scores"][:2] == [-1000.0, -1000.0]
    assert "output.weight" not in tensors  # tied: llama.cpp reads token_embd


def test_olmo3_is_olmo2_with_windows_and_yarn(gguf_of_folder):
    _, meta = _read(gguf_of_folder(DATA / "olmo3-tiny", PRE["olmo3-tiny"]))
    a = "olmo2."
    assert meta[a + "attention.sliding_window"] == 8
    assert meta[a + "attention.sliding_window_pattern"] == [True, True, True, False]
    assert meta[a + "rope.scaling.type"] == "yarn" and meta[a + "rope.scaling.factor"] == pytest.approx(8.0)
    assert meta[a + "rope.scaling.original_context_length"] == 4096
    assert meta[a + "rope.scaling.yarn_attn_factor"] == pytest.approx(1.2079441541679836)
    assert (meta[a + "rope.scaling.yarn_beta_fast"], meta[a + "rope.scaling.yarn_beta_slow"]) == (32.0, 1.0)


def test_smollm3_has_no_nope_key(gguf_of_folder):
    """llama.cpp reads no key for SmolLM3's NoPE layers (its loader sets n_no_rope_layer_step = 4): the file is a
    Llama file with another architecture name, and the folder's NoPE layer is where that step puts it."""
    _, meta = _read(gguf_of_folder(DATA / "smollm3-tiny", PRE["smollm3-tiny"]))
    assert not [k for k in meta if "rope" in k and ("no" in k.split(".")[-1] or "nope" in k)]
    cfg = json.loads((DATA / "smollm3-tiny" / "config.json").read_text())
    assert cfg["no_rope_layers"] == [int((l + 1) % 4 != 0) for l in range(cfg["num_hidden_layers"])]


@pytest.mark.parametrize("quant", ["F16", "Q8_0"])
def test_quantized_copies_read_back_close(gguf_of_folder, quant):
    """Q8_0 matrices whose rows do not split into blocks of 32 (Gemma 4's 8-wide per-layer projection) fall back
    to F16, as the converter does; every matrix reads back within the storage type's error."""
    tensors, _ = _read(gguf_of_folder(DATA / "gemma4-tiny", "", quant))
    reader = gguf.GGUFReader(str(gguf_of_folder(DATA / "gemma4-tiny", "", quant)))
    kinds = {t.name: t.tensor_type.name for t in reader.tensors}
    assert kinds["blk.0.proj.weight"] == "F16" and kinds["blk.0.attn_q.weight"] == quant
    full = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(gguf_of_folder(DATA / "gemma4-tiny", ""))).tensors}
    for t in reader.tensors:
        got = gguf.quants.dequantize(t.data, t.tensor_type).reshape(full[t.name].shape)
        np.testing.assert_allclose(got, full[t.name], rtol=0, atol=0.02 * np.abs(full[t.name]).max() + 1e-30)
