"""The naive forward of issue 37's families (tests/reference.py: Qwen3.5's Gated DeltaNet as a token-by-token
recurrence, Gemma 4's per-layer inputs and shared keys and values, SmolLM3's NoPE layer, OLMo 3's windows and
YaRN) against what transformers computed for each fixture (tools/make_new_family_fixtures.py): proven right
here, it is the second reference the decoder is checked against."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from .reference import new_family_folder, new_family_forward, nf_inv_freq, nf_kv_source

DATA = Path(__file__).parent / "data"
FOLDERS = ["qwen3-5-tiny", "gemma4-tiny", "smollm3-tiny", "olmo3-tiny"]


@pytest.fixture(scope="module")
def naive():
    """{(folder, prompt): (config, reference arrays, the naive forward's output)}, each computed once."""
    pytest.importorskip("safetensors.numpy")
    made = {}

    def get(folder: str, k: int):
        if (folder, k) not in made:
            cfg, params = new_family_folder(DATA / folder)
            with np.load(DATA / folder / "reference.npz", allow_pickle=False) as z:
                ref = {name: z[name] for name in z.files}
            made[folder, k] = cfg, ref, new_family_forward(cfg, params, ref[f"input_ids_{k}"].tolist())
        return made[folder, k]

    return get


@pytest.mark.parametrize("k", [0, 1])
@pytest.mark.parametrize("folder", FOLDERS)
def test_logits_residuals_and_patterns(naive, folder, k):
    cfg, ref, got = naive(folder, k)
    np.testing.assert_allclose(got["logits"], ref[f"logits_{k}"], rtol=0, atol=1e-4)
    np.testing.assert_allclose(got["hidden_states"], ref[f"hidden_states_{k}"], rtol=0, atol=1e-4)
    layers = ref["attention_layers"].tolist()
    assert sorted(got["patterns"]) == layers  # every softmax layer, and (Qwen3.5) no linear one
    patterns = np.array([got["patterns"][l] for l in layers])  # OLMo 3's YaRN layer scales scores by 1.21²: 5e-5
    np.testing.assert_allclose(patterns, ref[f"attentions_{k}"], rtol=0, atol=5e-5)
    assert got["logits"].argmax(-1)[-1] == ref[f"greedy_ids_{k}"][0]


@pytest.mark.parametrize("k", [0, 1])
def test_gated_deltanet_recurrence(naive, k):
    """The states after every position, the gates, the convolution's kept inputs and the read-outs before and
    after the gated norm equal transformers' (its token-by-token recurrence, checked there against its chunked
    prefill)."""
    cfg, ref, got = naive("qwen3-5-tiny", k)
    linear = ref["linear_layers"].tolist()
    assert linear == [l for l, t in enumerate(cfg["layer_types"]) if t == "linear_attention"] == sorted(got["linear"])
    # transformers computes in float32: layer 2's inputs differ from float64's by ~2e-5, and the gated norm
    # divides a read-out by its own RMS (amplifying small ones), hence the wider tolerances after it
    for name, tol in [("state", 1e-5), ("beta", 5e-6), ("g", 5e-6), ("conv_tail", 5e-5), ("q", 5e-5), ("k", 5e-5),
                      ("v", 5e-5), ("core_out", 1e-5), ("gated_out", 1e-4)]:
        mine = np.array([got["linear"][l][name] for l in linear])
        np.testing.assert_allclose(mine, ref[f"linear_{name}_{k}"], rtol=0, atol=tol, err_msg=name)


def test_the_recurrence_is_not_trivial(naive):
    """The fixture's decays and write strengths are in the range where the state carries the prompt: no decay
    near 0 (the state forgotten each token) for most heads, β neither all 0 nor all 1, and the state changes."""
    _, ref, _ = naive("qwen3-5-tiny", 0)
    decay = np.exp(ref["linear_g_0"])
    assert np.median(decay) > 0.7 and decay.min() > 0.2 and decay.max() < 1.0
    beta = ref["linear_beta_0"]
    assert beta.min() < 0.2 and beta.max() > 0.8
    states = ref["linear_state_0"]  # [linear_layer, pos, head, d_k, d_v]
    assert np.abs(np.diff(states, axis=1)).max(axis=(2, 3, 4)).min() > 1e-3  # every token writes
    asymmetry = np.abs(states - states.swapaxes(3, 4)).max(axis=(3, 4))  # d_k = d_v (as llama.cpp needs): a read-out
    assert asymmetry[:, 1:].min() > 1e-2  # Sq instead of Sᵀq must give other numbers, from the second token on


def test_gemma4_per_layer_inputs_and_kv_sharing(naive):
    cfg, ref, got = naive("gemma4-tiny", 1)
    np.testing.assert_allclose(got["per_layer_inputs"], ref["per_layer_inputs_1"], rtol=0, atol=1e-5)
    np.testing.assert_allclose((ref["per_layer_proj_1"] + ref["per_layer_token_1"]) / np.sqrt(2), ref["per_layer_inputs_1"],
                               rtol=0, atol=1e-5)
    assert nf_kv_source(cfg) == ref["kv_source"].tolist() == [0, 1, 2, 1, 2]  # layer 3 reuses layer 1's, 4 layer 2's
    layer3 = "model.layers.3.self_attn."
    from safetensors.numpy import load_file

    names = load_file(str(DATA / "gemma4-tiny" / "model.safetensors"))
    assert not any(n.startswith((layer3 + "k_proj", layer3 + "v_proj", "model.layers.2.self_attn.v_proj")) for n in names)


@pytest.mark.parametrize("folder", FOLDERS)
def test_rotary_frequencies(folder):
    """nf_inv_freq (from config.json) against the frequencies and the cos/sin factor transformers used."""
    cfg, _ = new_family_folder(DATA / folder)
    with np.load(DATA / folder / "reference.npz", allow_pickle=False) as z:
        ref = {name: z[name] for name in z.files if name.startswith(("inv_freq_", "attention_scaling_"))}
    from .reference import _nf_rope_tables

    tables = _nf_rope_tables(cfg)
    for kind, (freqs, scale) in tables.items():
        key = kind if f"inv_freq_{kind}" in ref else "default"
        np.testing.assert_allclose(freqs, ref[f"inv_freq_{key}"], rtol=1e-6, atol=0)
        np.testing.assert_allclose(scale, ref[f"attention_scaling_{key}"], rtol=1e-6)
    if folder == "olmo3-tiny":  # YaRN blends pairs 2 and 3 and divides pairs 4 to 7 by the factor 8
        full, plain = tables["full_attention"][0], tables["sliding_attention"][0]
        np.testing.assert_allclose(full[:2], plain[:2])
        np.testing.assert_allclose(full[4:], plain[4:] / 8)
        assert all(plain[i] / 8 < full[i] < plain[i] for i in (2, 3))
