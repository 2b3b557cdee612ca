"""Gemma 4 (gemma4_text): tracer's decoder on the fixture transformers made (tests/data/gemma4-tiny,
tools/make_new_family_fixtures.py: per-layer inputs, layers 3 and 4 attending with layers 1's and 2's keys
and values, K = V on layer 2, heads of 32 with one key/value head on the full layers and of 16 with two on
the sliding ones, double-wide MLPs on the sharing layers, proportional RoPE, layer scalars, soft-capped
logits) gives transformers' numbers — logits, every residual, every pattern, the per-layer inputs and
their two halves, greedy generation with and without the cache, a cached step — and the naive float64
forward of tests/reference.py to 1e-9; the backward pass equals central differences through every new
piece (the value norm, K = V, the shared keys and values, the per-layer inputs, the layer scalar); the
walkthrough says the differences where they happen; what tracer does not compute is a one-line error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.core.config import Config
from tracer.errors import TracerError
from tracer.formats.files import load_npz

from .reference import grads_match_central_differences, ids, new_family_folder, new_family_forward

DATA = Path(__file__).parent / "data"
FOLDER = DATA / "gemma4-tiny"
ATOL = 1e-4  # float32 through five layers; logits are soft-capped at 10 (measured: 2.1e-5, residuals 3.3e-5)
PATTERN_ATOL = 1e-5  # measured: 6.6e-6


@pytest.fixture(scope="module")
def model():
    return tracer.load(str(FOLDER))


@pytest.fixture(scope="module")
def ref():
    return load_npz(FOLDER / "reference.npz")


@pytest.mark.parametrize("k", [0, 1])
def test_logits_residuals_and_patterns_match_transformers(model, ref, k):
    t = model.run(ids(ref, k))
    np.testing.assert_allclose(t["logits"], ref[f"logits_{k}"], atol=ATOL, rtol=0)
    hidden = ref[f"hidden_states_{k}"]  # [layer + 1, pos, d_model]
    for l in range(5):
        np.testing.assert_allclose(t[f"blocks.{l}.hook_resid_pre"], hidden[l], atol=ATOL, rtol=0, err_msg=str(l))
    np.testing.assert_allclose(t["unembed.hook_in"], hidden[5], atol=ATOL, rtol=0)
    assert ref["attention_layers"].tolist() == [0, 1, 2, 3, 4]
    for l in range(5):
        np.testing.assert_allclose(t[f"blocks.{l}.attn.hook_pattern"], ref[f"attentions_{k}"][l], atol=PATTERN_ATOL, rtol=0)


@pytest.mark.parametrize("k", [0, 1])
def test_the_per_layer_inputs_match_transformers(model, ref, k):
    """[layer, pos, d_ple]: the inputs, the token's share (× √d_ple) and the embedding's normed projection."""
    t = model.run(ids(ref, k))
    np.testing.assert_allclose(t["hook_per_layer_inputs"], ref[f"per_layer_inputs_{k}"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(t["ple.hook_token"], ref[f"per_layer_token_{k}"], atol=1e-5, rtol=0)
    proj = t["ple.norm.hook_normalized"] * model.params["ple.norm.w"]  # the norm's output: what transformers keeps
    np.testing.assert_allclose(proj, ref[f"per_layer_proj_{k}"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("cache", [True, False])
def test_greedy_generation_matches_transformers(model, ref, cache):
    for k in (0, 1):
        gen = model.generate(ids(ref, k), max_new_tokens=8, cache=cache)
        assert gen.generated_ids == [int(i) for i in ref[f"greedy_ids_{k}"]], k
        assert gen.generated_ids == [int(i) for i in ref[f"greedy_ids_nocache_{k}"]], k


def test_a_cached_one_token_step_matches_transformers(model, ref):
    """The step reads the cache of layers 0–2 and, in layers 3 and 4, the keys and values of layers 1 and 2
    (their caches, and the new position's from this pass)."""
    gen = model.generate(ids(ref, 0), max_new_tokens=2)
    step = gen.steps[1]
    assert step.start == len(ids(ref, 0)) and int(step.tokens[-1]) == int(ref["step_input_0"][0])
    np.testing.assert_allclose(step["logits"][-1], ref["step_logits_0"], atol=ATOL, rtol=0)
    for shared, source in ((3, 1), (4, 2)):
        for name in ("hook_k", "hook_rot_k", "hook_v"):
            np.testing.assert_array_equal(step[f"blocks.{shared}.attn.{name}"], step[f"blocks.{source}.attn.{name}"])
        assert step[f"blocks.{shared}.attn.hook_pattern"].shape == (4, 1, step.start + 1)


def test_the_config_reads_every_difference(model, ref):
    cfg = model.config
    assert list(cfg.kv_source) == ref["kv_source"].tolist() == [0, 1, 2, 1, 2]
    assert cfg.k_eq_v == (2,) and cfg.windowed == (0, 1, 3) and cfg.d_ple == 8 and cfg.layer_scalar
    assert [(cfg.layer(l).d_head, cfg.layer(l).kv_heads, cfg.layer(l).d_mlp) for l in range(5)] == [
        (16, 2, 64), (16, 2, 64), (32, 1, 64), (16, 2, 128), (32, 1, 128)]
    assert cfg.scores_scale is None and cfg.norm == "rms" and cfg.final_softcap == 10.0
    assert "blocks.4.attn.W_K" not in model.params and "blocks.2.attn.W_V" not in model.params
    assert model.params["blocks.2.attn.W_K"].shape == (1, 64, 32) and model.params["blocks.3.mlp.W_in"].shape == (64, 128)
    from tracer.core.fast import layout

    w = layout(cfg, model.params)  # RoPE's frequencies per layer type: transformers' inv_freq
    np.testing.assert_allclose(w.rope, ref["inv_freq_full_attention"], rtol=1e-6)
    np.testing.assert_allclose(w.rope_local, ref["inv_freq_sliding_attention"], rtol=1e-6)
    assert (w.rope[4:] == 0).all() and (w.rope[:4] > 0).all()  # proportional: 4 of 16 pairs turn


def test_the_value_norm_k_eq_v_and_shared_keys_are_what_is_recorded(model, ref):
    """Layer 2's values are its keys' projection ÷ their root mean square (K = V); layer 0's its own W_V's;
    layers 3 and 4 record layers 1's and 2's keys and values, and keep no cache (0 bytes)."""
    t = model.run(ids(ref, 1))
    rms = lambda x: x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6)  # noqa: E731
    np.testing.assert_allclose(t["blocks.2.attn.hook_v"], rms(t["blocks.2.attn.hook_k"]), atol=1e-5)
    assert not np.allclose(t["blocks.0.attn.hook_v"], rms(t["blocks.0.attn.hook_k"]), atol=1e-2)
    for shared, source in ((3, 1), (4, 2)):
        np.testing.assert_array_equal(t[f"blocks.{shared}.attn.hook_rot_k"], t[f"blocks.{source}.attn.hook_rot_k"])
        np.testing.assert_array_equal(t[f"blocks.{shared}.attn.hook_v"], t[f"blocks.{source}.attn.hook_v"])
        assert f"blocks.{shared}.attn.k_norm.hook_scale" not in t.arrays
    from tracer.core.decoder import KVCache

    cache = KVCache(model.config, 16)
    sizes = [getattr(c, "nbytes", None) for c in cache.layers]
    assert sizes == [2 * 16 * 2 * 16 * 4, 2 * 16 * 2 * 16 * 4, 2 * 16 * 1 * 32 * 4, 0, 0]
    assert cache.nbytes == sum(sizes)


def float64_model(model):
    cfg = Config(**{**model.config.to_dict(), "dtype": "float64"})
    return cfg, {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in model.params.items()}


def test_the_float64_decoder_is_the_naive_forward(model, ref):
    """tests/reference.py's loop over positions, heads and keys, from the checkpoint's own names (itself checked
    against transformers in tests/test_reference_families.py), and tracer's decoder in float64 agree."""
    from tracer.core.decoder import forward
    from tracer.core.record import Recorder

    raw, p = new_family_folder(FOLDER)
    tokens = ids(ref, 1)[:20]
    naive = new_family_forward(raw, p, tokens)
    cfg, params = float64_model(model)
    rec = Recorder()
    logits = forward(cfg, params, tokens, rec)
    np.testing.assert_allclose(logits, naive["logits"], atol=1e-9, rtol=0)
    np.testing.assert_allclose(rec.store["hook_per_layer_inputs"], naive["per_layer_inputs"], atol=1e-10, rtol=0)
    for l in range(5):
        np.testing.assert_allclose(rec.store[f"blocks.{l}.hook_resid_pre"], naive["hidden_states"][l], atol=1e-9, rtol=0)
        np.testing.assert_allclose(rec.store[f"blocks.{l}.attn.hook_pattern"], naive["patterns"][l], atol=1e-11, rtol=0)
    np.testing.assert_allclose(rec.store["unembed.hook_in"], naive["hidden_states"][5], atol=1e-9, rtol=0)


CHECKED = ["blocks.0.attn.W_V", "blocks.1.attn.W_K", "blocks.1.attn.k_norm.w", "blocks.2.attn.W_K",  # own K, V (shared on)
           "blocks.2.attn.W_Q", "blocks.3.attn.W_Q", "blocks.4.attn.q_norm.w", "blocks.4.attn.W_O",  # the sharing layers
           "blocks.0.ple.W_gate", "blocks.3.ple.W_out", "blocks.4.ple.norm.w", "ple.W_E", "ple.W_proj", "ple.norm.w",
           "blocks.1.layer_scalar", "blocks.4.layer_scalar", "blocks.3.mlp.W_in", "W_E"]


def test_the_backward_pass_matches_central_differences(model):
    """The whole model in float64: three entries of each named parameter (every one for the scalars) against
    central differences of the next-token loss. Layer 1's and 2's K and V reach the loss through layers 3 and 4
    too; ple.W_E only through the tokens' rows."""
    cfg, params = float64_model(model)
    tokens = np.array(model.tokenize("The quick brown fox jumps over")[:9])
    grads_match_central_differences(cfg, params, tokens, CHECKED, seed=1, embeddings=("ple.W_E", "W_E"))


def test_gradient_times_input_reaches_the_per_layer_inputs_projection(model):
    """`attribution`'s gradient of layer 0's input includes the path through the per-layer inputs' projection:
    a central difference of the logit along x's direction at one position agrees with it."""
    from tracer.core.backward import attribution
    from tracer.core.decoder import forward

    cfg, params = float64_model(model)
    tokens = model.tokenize("The quick brown fox")
    _, dx, x = attribution(cfg, params, tokens, 7)
    i = 2  # scale the embedding row of position 2's token (it enters the per-layer inputs' projection too)
    e = np.zeros_like(params["W_E"])
    e[tokens[i]] = params["W_E"][tokens[i]]  # moving W_E's row along itself moves x at that token's positions
    where = [j for j, tok in enumerate(tokens) if tok == tokens[i]]
    up, down = dict(params, W_E=params["W_E"] + 1e-6 * e), dict(params, W_E=params["W_E"] - 1e-6 * e)
    numeric = (forward(cfg, up, tokens)[-1, 7] - forward(cfg, down, tokens)[-1, 7]) / 2e-6
    # the tied unembedding also moves with W_E: take its part out (the logit of 7 reads W_E's row 7 only)
    assert tokens[i] != 7
    assert float(sum((x[j] * dx[j]).sum() for j in where)) == pytest.approx(numeric, rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("full", [True, False])
def test_the_walkthrough_runs_and_says_the_differences(run_tracer, full):
    args = ["trace", "The quick brown fox", "--model", str(FOLDER), "-n", "1", "--no-pager", "--layer", "all"]
    r = run_tracer(*args, *(["--full"] if full else []), env={"COLUMNS": "100"}, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    for said in ["K = V (no W_V) on layer 2", "layer 3 uses layer 1's, layer 4 uses layer 2's",
                 "no W_V in this layer (K = V)", "this layer has no W_K or W_V: it attends with the keys and values "
                 "layer 1 computed", "no gain (Gemma 4's value norm)", "layer 3's own input from",
                 "per-layer input: gate = x·W_gate (64 × 8)", "residual: + ple_out", "× the layer's scalar (",
                 "proportional RoPE: only the first 4 of the 16 pairs turn", "d_head 32 with 1 key/value head on layers 2, 4",
                 "(W_Q: 4 × 64 × 32, one 64 × 32 slice per head)", "layers 3, 4: none of their own (they attend with the "
                 "keys and values of layers 1, 2)"]:
        assert said in out, said


@pytest.mark.parametrize("changes, says", [
    ({"enable_moe_block": True}, "enable_moe_block is not supported"),
    ({"num_kv_shared_layers": 5}, "leaves no layer of its own keys and values"),
    ({"num_kv_shared_layers": 3}, "layer 2 .full_attention. shares keys and values"),
    ({"num_kv_shared_layers": 9}, "'num_kv_shared_layers' must be a whole number from 0 to 5"),
    ({"per_layer_config": {"2": {"head_dim": 32, "intermediate_size": 7}}}, "changes 'intermediate_size' of layer 2"),
    ({"per_layer_config": {"2": {"head_dim": 32, "num_key_value_heads": 3}}}, "layer 2's 3 key/value heads do not divide"),
    ({"per_layer_config": {"9": {"head_dim": 32}}}, "per_layer_config names layer '9'"),
    ({"layer_types": ["sliding_attention"] * 4}, "'layer_types' names 4 layers but num_hidden_layers is 5"),
    ({"layer_types": ["sliding_attention", "chunked", "full_attention", "sliding_attention", "full_attention"]},
     "layer type 'chunked' is not known"),
    ({"rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 1e6}, "sliding_attention": {}}},
     "RoPE type 'yarn' on the full layers is not supported"),
    ({"vocab_size_per_layer_input": 300}, "vocab_size_per_layer_input 300 differs"),
    ({"hidden_size_per_layer_input": 4}, "embed_tokens_per_layer.weight' has shape \\[600, 40\\] but config.json implies"),
    ({"use_bidirectional_attention": "all"}, "use_bidirectional_attention 'all' is not supported"),
    ({"hidden_activation": "silu"}, "hidden_activation 'silu' is not supported"),
])
def test_what_tracer_does_not_compute_is_a_one_line_error(tmp_path, changes, says, family_copy):
    folder = family_copy(tmp_path, "gemma4-tiny", **changes)
    with pytest.raises(TracerError, match=says) as e:
        tracer.load(str(folder))
    assert "\n" not in str(e.value)


def test_a_config_json_without_per_layer_config_reads_the_hubs_keys(tmp_path, model, family_copy):
    """The Hub's files give global_head_dim and num_global_key_value_heads instead of per_layer_config."""
    folder = family_copy(tmp_path, "gemma4-tiny", per_layer_config=None, global_head_dim=32, num_global_key_value_heads=1)
    again = tracer.load(str(folder))
    assert again.config == model.config


# --------------------------------------------------------------------------- the same model as a GGUF file


def gguf_reference(path: Path, tokens) -> np.ndarray:
    """tests/reference.py's naive forward on the file's own weights, de-quantized by the gguf package and put back
    under the folder's names (its rounding included)."""
    gguf = pytest.importorskip("gguf")
    from safetensors.numpy import load_file

    raw, _ = new_family_folder(FOLDER)
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA4, raw["num_hidden_layers"])
    shapes = {k: v.shape for k, v in load_file(str(FOLDER / "model.safetensors")).items()}
    of = {tmap.get_name(hf + (".weight" if hf.endswith("layer_scalar") else ""), try_suffixes=(".weight",)): hf
          for hf in shapes if hf != "lm_head.weight"}
    params = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        if t.name in of:
            params[of[t.name]] = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape(shapes[of[t.name]])
    return new_family_forward(raw, params, tokens)["logits"]


@pytest.mark.parametrize("quant, atol", [("F32", ATOL), ("F16", 1e-4), ("Q8_0", 1e-4)])
def test_the_gguf_file_gives_the_same_numbers(gguf_of_folder, model, ref, quant, atol):
    """llama.cpp's converter's file (tests/conftest.py): the per-layer sizes, shared keys and values, K = V and
    proportional RoPE read from its metadata and rope_freqs; F32 gives transformers' logits, greedy tokens with and
    without the cache and the cached step; F16 and Q8_0 give the naive forward of their own de-quantized weights."""
    path = gguf_of_folder(FOLDER, "", quant)
    m = tracer.load(str(path))
    want = {k: v for k, v in model.config.to_dict().items() if k != "ln_eps"}  # the file holds ε as float32
    assert {k: v for k, v in m.config.to_dict().items() if k != "ln_eps"} == want
    t = m.run(ids(ref, 0))
    if quant == "F32":
        np.testing.assert_allclose(t["logits"], ref["logits_0"], atol=ATOL, rtol=0)
        for cache in (True, False):
            assert m.generate(ids(ref, 1), max_new_tokens=8, cache=cache).generated_ids == ref["greedy_ids_1"].tolist()
        step = m.generate(ids(ref, 0), max_new_tokens=2).steps[1]
        np.testing.assert_allclose(step["logits"][-1], ref["step_logits_0"], atol=ATOL, rtol=0)
    else:  # float32 arithmetic on the de-quantized weights against float64 on the same weights
        np.testing.assert_allclose(t["logits"], gguf_reference(path, ids(ref, 0)), atol=atol, rtol=0)


def test_the_gguf_tokenizer_is_transformers_gemma4_tokenizer(gguf_of_folder, ref):
    """Tokenizer model `gemma4`: GemmaTokenizer's steps (spaces as ▁, no prefix) on the file's tokens and merges, no
    BOS (transformers': the chat template writes it; llama.cpp's adds one, follow="llama.cpp")."""
    from tracer.tokenizers.gguf_tokenizer import tokenizer_from_gguf

    m = tracer.load(str(gguf_of_folder(FOLDER, "")))
    text = str(ref["prompt_0"])
    ids_ = m.tokenize(text)
    assert ids_[0] != 1 and m.tokenizer.decode(ids_) == text
    gguf = pytest.importorskip("gguf")
    meta = {k: f.contents() for k, f in gguf.GGUFReader(str(gguf_of_folder(FOLDER, ""))).fields.items()
            if k.startswith("tokenizer.") or k == "general.architecture"}
    assert tokenizer_from_gguf(meta, follow="llama.cpp").encode(text) == [1] + ids_


@pytest.mark.parametrize("changes, says", [
    ({"{arch}.feed_forward_length": [64, 80, 64, 128, 128]}, "feed_forward_length' .* is not Gemma 4's"),
    ({"{arch}.attention.sliding_window_pattern": None}, "sliding_window_pattern' must be one true/false per layer"),
    ({"{arch}.attention.head_count_kv": [2, 1, 1, 2, 1]}, "gives the sliding layers different key/value head counts"),
    ({"{arch}.attention.shared_kv_layers": 4, "{arch}.feed_forward_length": 64}, "layer 2 .full_attention. shares keys"),
    ({"{arch}.rope.dimension_count": 8}, "rope.dimension_count' is 8, not the head's 32"),
    ({"{arch}.embedding_length_per_layer_input": 4}, "per_layer_token_embd.weight' has shape"),
])
def test_gguf_metadata_tracer_cannot_read_is_a_one_line_error(gguf_of_folder, changes, says):
    with pytest.raises(TracerError, match=says) as e:
        tracer.load(str(gguf_of_folder(FOLDER, "", meta=changes)))
    assert "\n" not in str(e.value)
