"""Qwen3, OLMo 2 and Phi-3 (issue 24) beyond the shared parity tests of tests/test_families.py (which
run every fixture of tests/data/*-tiny: logits, residual streams, patterns, the final norm's output,
greedy generation with and without the KV cache, a cached step): what each family switches on is
read, recorded under its names, differentiated (central differences), shown in the walkthrough, and
refused clearly when a config.json asks for what tracer does not compute."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.core.blocks import NORMS, QK_NORMS
from tracer.core.config import Config
from tracer.errors import TracerError
from tracer.formats.files import load_npz

DATA = Path(__file__).parent / "data"
from .reference import loss_slope, next_token_loss


def _ids(name: str, k: int = 1) -> list[int]:
    return [int(i) for i in load_npz(DATA / name / "reference.npz")[f"input_ids_{k}"]]




def central_differences(name: str, params_to_check: list[str], n_tokens: int = 10) -> None:
    """The backward pass on a loaded fixture's first layer (a float64 copy): three entries of each
    named parameter against central differences of the loss."""
    from tracer.core.backward import loss_and_grads

    m = tracer.load(str(DATA / name))
    local = m.config.windowed
    cfg = Config(**{**m.config.to_dict(), "dtype": "float64", "n_layers": 1,
                    "windowed": None if local is None else [l for l in local if l < 1]})
    params = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in m.params.items()
              if not k.startswith("blocks.") or k.startswith("blocks.0.")}
    tokens = np.array(_ids(name)[:n_tokens])
    loss, grads = loss_and_grads(cfg, params, tokens)
    assert loss == pytest.approx(next_token_loss(cfg, params, tokens), rel=1e-10)
    rng = np.random.default_rng(1)
    for p in params_to_check:
        flat = params[p].reshape(-1)
        for i in rng.choice(flat.size, 3, replace=False):
            slope = loss_slope(cfg, params, tokens, p, i)
            assert grads[p].reshape(-1)[i] == pytest.approx(slope, rel=1e-4, abs=1e-8), p


# --------------------------------------------------------------------------- the Q/K norm entries


@pytest.mark.parametrize("key", [k for k in QK_NORMS if QK_NORMS[k].on])
def test_every_qk_norm_is_whole_and_its_backward_is_its_forwards_derivative(key):
    from tracer.core.attention import d_qk_norm, qk_norm

    kind = QK_NORMS[key]
    cfg = Config(d_model=8, n_heads=2, n_kv_heads=1, d_head=4, positional="rope", norm="rms", qk_norm=key,
                 dtype="float64")
    assert cfg.qk_norm_kind is kind and kind.title and "{m}" in kind.words and len(kind.hooks) == 4
    shapes = kind.shapes(NORMS["rms"], 2, 1, 4)
    assert shapes == {"q_norm.w": (4 if kind.per_head else 8,), "k_norm.w": (4,)}
    rng = np.random.default_rng(0)
    x, r = rng.standard_normal((3, 2, 4)), rng.standard_normal((3, 2, 4))  # [pos, head, d_head]
    w = rng.standard_normal(shapes["q_norm.w"])
    from tracer.core.record import Recorder

    rec = Recorder()
    out = qk_norm(cfg, x, (w, None), rec)
    assert out.shape == x.shape
    grads: dict = {}
    acts = {"q_norm." + k: v for k, v in rec.store.items()}
    dx = d_qk_norm(cfg, r, (w, None), acts, "q_norm.", grads, "q_norm")

    def numeric(f, v):
        g = np.zeros_like(v)
        for i in np.ndindex(v.shape):
            up, down = v.copy(), v.copy()
            up[i] += 1e-6
            down[i] -= 1e-6
            g[i] = (np.sum(f(up) * r) - np.sum(f(down) * r)) / 2e-6
        return g

    np.testing.assert_allclose(dx, numeric(lambda v: qk_norm(cfg, v, (w, None)), x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(grads["q_norm.w"], numeric(lambda v: qk_norm(cfg, x, (v, None)), w), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("changes, says", [
    (dict(qk_norm="every"), "qk_norm must be one of none, per_head, whole"),
    (dict(qk_norm="per_head", positional="learned"), "computed with rotary positions only"),
])
def test_a_qk_norm_config_tracer_cannot_compute_is_one_line(changes, says):
    with pytest.raises(TracerError, match=says):
        Config(**{**dict(d_model=8, n_heads=2, positional="rope", norm="rms"), **changes})


# --------------------------------------------------------------------------- Qwen3


def test_qwen3_reads_its_switches_and_records_its_q_and_k_norms():
    m = tracer.load(str(DATA / "qwen3-tiny"))
    cfg = m.config
    assert (cfg.qk_norm, cfg.d_head, cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.tied_unembed) == ("per_head", 32, 64, 4, 2, True)
    assert m.params["blocks.1.attn.q_norm.w"].shape == (32,) and m.params["blocks.1.attn.k_norm.w"].shape == (32,)
    assert not np.any(m.params["blocks.0.attn.b_Q"]) and not np.any(m.params["blocks.0.attn.b_K"])  # no biases
    t = m.run("The fox")
    n = len(t.tokens)
    a = "blocks.0.attn."
    assert t[a + "q_norm.hook_scale"].shape == (n, 4, 1) and t[a + "q_norm.hook_normalized"].shape == (n, 4, 32)
    assert t[a + "k_norm.hook_scale"].shape == (n, 2, 1) and t[a + "k_norm.hook_normalized"].shape == (n, 2, 32)
    normalized = t[a + "k_norm.hook_normalized"]
    np.testing.assert_allclose(np.sqrt((normalized ** 2).mean(-1)), 1, atol=1e-3)  # each head's K has RMS 1
    np.testing.assert_allclose(t[a + "hook_k"] / t[a + "k_norm.hook_scale"], normalized, atol=1e-6)


def test_qwen3_gradients_match_central_differences():
    central_differences("qwen3-tiny", ["blocks.0.attn.q_norm.w", "blocks.0.attn.k_norm.w", "blocks.0.attn.W_Q",
                                       "blocks.0.attn.W_K", "blocks.0.ln1.w", "W_E"])


def test_qwen3_gguf_reads_its_norms(gguf_of_folder):
    g = tracer.load(str(gguf_of_folder(DATA / "qwen3-tiny", "qwen2")))
    f = tracer.load(str(DATA / "qwen3-tiny"))
    assert {**g.config.to_dict(), "ln_eps": 0} == {**f.config.to_dict(), "ln_eps": 0}  # GGUF keeps ε as float32
    assert g.storage["blocks.0.attn.q_norm.w"].tensor == "blk.0.attn_q_norm.weight"
    np.testing.assert_array_equal(g.params["blocks.1.attn.k_norm.w"], f.params["blocks.1.attn.k_norm.w"])


@pytest.mark.parametrize("changes, says", [
    ({"head_dim": 16}, r"'model\.layers\.0\.self_attn\.q_proj\.weight' has 128 rows but config.json's num_attention_heads 4 "
                       r"× head_dim 16 = 64: head_dim does not match the weights \(head_dim 32 would\)"),
    ({"head_dim": None}, "'head_dim' is missing"),
    ({"layer_types": ["full_attention"]}, "'layer_types' names 1 layers but num_hidden_layers is 2"),
    ({"layer_types": ["full_attention", "chunked_attention"]}, "layer type 'chunked_attention' is not known"),
    ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e6, "factor": 2.0}}, "RoPE scaling 'dynamic' is not supported"),
    ({"use_sliding_window": True, "sliding_window": 8}, "sliding window on some layers only"),
])
def test_qwen3_configs_tracer_cannot_compute_are_one_line_errors(tmp_path, changes, says, family_copy):
    folder = family_copy(tmp_path, "qwen3-tiny", **changes)
    with pytest.raises(TracerError, match=says) as e:
        tracer.load(str(folder))
    assert "\n" not in str(e.value)


def test_qwen3_walkthrough_says_where_q_and_k_are_normalized(run_tracer):
    r = run_tracer("trace", "The quick brown fox", "--model", str(DATA / "qwen3-tiny"), "-n", "1", "--no-pager",
                   env={"COLUMNS": "100"}, text=True)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    for said in ["Q and K normalized per head", "Q is normalized per head before the rotation",
                 "K is normalized per head before the rotation", "× attn.k_norm.w (Qwen3's and Gemma 3's Q/K norm)"]:
        assert said in out, said


# --------------------------------------------------------------------------- OLMo 2


def test_where_the_norms_sit_is_a_table_entry():
    from tracer.core.blocks import NORM_PLACES
    from tracer.core.params import param_shapes

    assert NORM_PLACES["before"].names("ln1") == ("ln1",) and NORM_PLACES["after"].names("ln2") == ("ln2_post",)
    after = Config(d_model=8, n_heads=2, positional="rope", norm="rms", mlp="swiglu", norm_place="after", n_layers=1)
    shapes = param_shapes(after)
    assert "blocks.0.ln1_post.w" in shapes and "blocks.0.ln2_post.w" in shapes and "blocks.0.ln1.w" not in shapes
    assert after.n_params() == sum(int(np.prod(s)) for s in shapes.values())
    with pytest.raises(TracerError, match="norm_place must be one of before, after"):
        Config(norm_place="around")


def test_olmo2_reads_its_switches_and_records_its_output_norms():
    m = tracer.load(str(DATA / "olmo2-tiny"))
    cfg = m.config
    assert (cfg.norm_place, cfg.qk_norm, cfg.tied_unembed) == ("after", "whole", False)
    assert m.params["blocks.0.attn.q_norm.w"].shape == (64,) and m.params["blocks.0.attn.k_norm.w"].shape == (32,)
    assert "blocks.0.ln1.w" not in m.params and "blocks.0.ln2.w" not in m.params
    t = m.run("The fox")
    n = len(t.tokens)
    b = "blocks.1."
    assert b + "ln1.hook_normalized" not in t.arrays and b + "ln2.hook_scale" not in t.arrays
    assert t[b + "attn.q_norm.hook_normalized"].shape == (n, 64) and t[b + "attn.k_norm.hook_scale"].shape == (n, 1)
    assert t[b + "ln1_post.hook_normalized"].shape == (n, 64) and t[b + "ln2_post.hook_scale"].shape == (n, 1)
    np.testing.assert_allclose(t[b + "hook_attn_out"], t[b + "ln1_post.hook_normalized"] * m.params[b + "ln1_post.w"], rtol=1e-6)
    np.testing.assert_allclose(t[b + "hook_resid_mid"], t[b + "hook_resid_pre"] + t[b + "hook_attn_out"], atol=1e-6)
    # with no norm before it, attention reads the residual stream itself
    np.testing.assert_allclose(t[b + "attn.hook_v"].reshape(n, -1), t[b + "hook_resid_pre"] @ np.concatenate(
        [m.params[b + "attn.W_V"][g] for g in range(2)], axis=1), atol=1e-5)


def test_olmo2_gradients_match_central_differences():
    central_differences("olmo2-tiny", ["blocks.0.ln1_post.w", "blocks.0.ln2_post.w", "blocks.0.attn.q_norm.w",
                                       "blocks.0.attn.k_norm.w", "blocks.0.attn.W_Q", "blocks.0.attn.W_K",
                                       "blocks.0.attn.W_O", "blocks.0.mlp.W_out", "ln_final.w", "W_U"])


def test_olmo2_gguf_reads_its_norms(gguf_of_folder):
    g = tracer.load(str(gguf_of_folder(DATA / "olmo2-tiny", "qwen2")))
    assert g.storage["blocks.0.ln1_post.w"].tensor == "blk.0.post_attention_norm.weight"
    assert g.storage["blocks.1.ln2_post.w"].tensor == "blk.1.post_ffw_norm.weight"
    assert g.storage["blocks.1.attn.k_norm.w"].tensor == "blk.1.attn_k_norm.weight"


@pytest.mark.parametrize("changes, says", [
    ({"num_key_value_heads": 4}, r"'model\.layers\.0\.self_attn\.k_proj\.weight' has shape \[32, 64\]"),
    ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 5e5, "factor": 4.0}}, "RoPE scaling 'dynamic' is not supported"),
    ({"layer_types": ["full_attention", "sliding_attention", "full_attention"]}, "'layer_types' names 3 layers"),
])
def test_olmo2_configs_tracer_cannot_compute_are_one_line_errors(tmp_path, changes, says, family_copy):
    folder = family_copy(tmp_path, "olmo2-tiny", **changes)
    with pytest.raises(TracerError, match=says) as e:
        tracer.load(str(folder))
    assert "\n" not in str(e.value)


def test_olmo2_walkthrough_says_it_normalizes_after_not_before(run_tracer):
    r = run_tracer("trace", "The quick brown fox", "--model", str(DATA / "olmo2-tiny"), "-n", "1", "--no-pager",
                   env={"COLUMNS": "100"}, text=True)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    for said in ["norms after attention and the MLP, none before", "Q and K normalized whole",
                 "normalized after the attention, not before (OLMo 2): attn_out_A ÷ its root mean square",
                 "normalized after the MLP, not before (OLMo 2)", "ln1_post(attn_out_A) = ",
                 "A_Q = x_A·W_Q[0]", "Q is normalized whole before it is cut into heads"]:
        assert said in out, said
    assert "ln1(x_A)" not in out


# --------------------------------------------------------------------------- Phi-3


def test_phi3_splits_its_fused_tensors_once():
    from safetensors.numpy import load_file

    m = tracer.load(str(DATA / "phi3-tiny"))
    t = load_file(str(DATA / "phi3-tiny" / "model.safetensors"))
    qkv, gate_up = t["model.layers.1.self_attn.qkv_proj.weight"], t["model.layers.1.mlp.gate_up_proj.weight"]
    assert qkv.shape == (128, 64) and gate_up.shape == (256, 64)
    np.testing.assert_array_equal(m.params["blocks.1.attn.W_Q"][2], qkv[32:48].T)  # query head 2's rows
    np.testing.assert_array_equal(m.params["blocks.1.attn.W_K"][1], qkv[64 + 16 : 64 + 32].T)  # key head 1's
    np.testing.assert_array_equal(m.params["blocks.1.attn.W_V"][0], qkv[96:112].T)
    np.testing.assert_array_equal(m.params["blocks.1.mlp.W_gate"], gate_up[:128].T)
    np.testing.assert_array_equal(m.params["blocks.1.mlp.W_in"], gate_up[128:].T)
    assert m.storage["blocks.1.attn.W_V"].tensor == "model.layers.1.self_attn.qkv_proj.weight"
    assert m.storage["blocks.1.mlp.W_in"].tensor == "model.layers.1.mlp.gate_up_proj.weight"
    assert m.config.sliding_window == 64 and m.config.qk_norm == "none" and m.config.norm_place == "before"


def test_phi3_gradients_match_central_differences():
    central_differences("phi3-tiny", ["blocks.0.attn.W_Q", "blocks.0.attn.W_V", "blocks.0.mlp.W_gate", "blocks.0.mlp.W_in"])


def test_phi3_gguf_reads_the_fused_tensors_and_the_window(gguf_of_folder):
    g = tracer.load(str(gguf_of_folder(DATA / "phi3-tiny", "llama-bpe")))
    assert g.config.sliding_window == 64
    assert g.storage["blocks.0.attn.W_K"].tensor == "blk.0.attn_qkv.weight"
    assert g.storage["blocks.0.mlp.W_gate"].tensor == "blk.0.ffn_up.weight"


def test_phi3_walkthrough_says_where_its_fused_tensors_were_split(run_tracer, gguf_of_folder):
    for model, qkv, gate_up in ((DATA / "phi3-tiny", "model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_up_proj.weight"),
                                (gguf_of_folder(DATA / "phi3-tiny", "llama-bpe"), "blk.0.attn_qkv.weight", "blk.0.ffn_up.weight")):
        r = run_tracer("trace", "The quick brown fox", "--model", str(model), "-n", "1", "--no-pager", env={"COLUMNS": "100"}, text=True)
        assert r.returncode == 0, r.stderr
        out = " ".join(r.stdout.split())
        assert f"W_Q, W_K and W_V of layer 0 come from one matrix in the file, {qkv} (stored fused): split once, when the model was read" in out
        assert f"W_gate and W_in of layer 0 come from one matrix in the file, {gate_up} (stored fused)" in out
        assert out.count("stored fused") == 2  # once each, where they are first used


@pytest.mark.parametrize("changes, says", [
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}},
     "RoPE scaling 'longrope' .Phi-3's long-context factors per frequency. is not supported"),
    ({"rope_parameters": None, "rope_scaling": {"type": "su", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}},
     "RoPE scaling 'su'"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.75}},
     "partial_rotary_factor 0.75 is not supported"),
    ({"num_key_value_heads": 4}, r"'model\.layers\.0\.self_attn\.qkv_proj\.weight' has shape \[128, 64\]"),
    ({"intermediate_size": 96}, r"'model\.layers\.0\.mlp\.(gate_up|down)_proj\.weight' has shape"),
])
def test_phi3_configs_tracer_cannot_compute_are_one_line_errors(tmp_path, changes, says, family_copy):
    folder = family_copy(tmp_path, "phi3-tiny", **changes)
    with pytest.raises(TracerError, match=says) as e:
        tracer.load(str(folder))
    assert "\n" not in str(e.value)


def test_a_family_tracer_does_not_know_names_the_ones_it_does(tmp_path, family_copy):
    folder = family_copy(tmp_path, "phi3-tiny", model_type="gemma")
    with pytest.raises(TracerError, match="model_type is 'gemma'; tracer loads gpt2, llama, .*qwen3, olmo2, phi3, gemma3_text, gemma2, gpt_oss, .*mixtral, .* and \\w+"):
        tracer.load(str(folder))


# --------------------------------------------------------------------------- Gemma 3 (text)


def test_gemma3_reads_its_switches_and_records_them():
    m = tracer.load(str(DATA / "gemma3-tiny"))
    c = m.config
    assert (c.norm, c.mlp, c.norm_place, c.qk_norm, c.embed_scale, c.attn_scalar) == (
        "gemma_rms", "geglu", "both", "per_head", True, 24.0)
    assert (c.sliding_window, c.windowed, c.rope_local_theta, c.rope_theta, c.tied_unembed) == (6, (0,), 1e4, 1e6, True)
    assert [c.window_of(l) for l in range(2)] == [6, None]
    t = m.run("The quick brown fox jumps over")
    n = len(t.tokens)
    np.testing.assert_allclose(t["blocks.0.hook_resid_pre"], t["hook_embed"] * 8.0, rtol=1e-6)  # × √64
    assert t["rope.hook_angle_local"].shape == (n, 16)
    np.testing.assert_allclose(t["rope.hook_angle_local"][3, 1], 3 * 10000 ** (-2 / 32), rtol=1e-6)
    np.testing.assert_allclose(t["rope.hook_angle"][3, 1], 3 * 1e6 ** (-2 / 32), rtol=1e-6)
    for ln in ("ln1", "ln1_post", "ln2", "ln2_post"):
        assert t[f"blocks.1.{ln}.hook_scale"].shape == (n, 1)
    np.testing.assert_allclose(t["blocks.1.hook_attn_out"], t["blocks.1.ln1_post.hook_normalized"] * (1 + m.params["blocks.1.ln1_post.w"]),
                               rtol=1e-5, atol=1e-6)
    far = np.tril(np.ones((n, n), dtype=bool), k=-6)  # keys 6 or more places back
    assert np.isneginf(t["blocks.0.attn.hook_attn_scores"][:, far]).all() and (t["blocks.0.attn.hook_pattern"][:, far] == 0).all()
    assert np.isfinite(t["blocks.1.attn.hook_attn_scores"][:, far]).all() and (t["blocks.1.attn.hook_pattern"][:, far] > 0).all()


@pytest.mark.parametrize("name", ["gemma2-tiny", "gemma3-tiny"])
def test_a_gemma_trace_saved_and_loaded_is_the_same(tmp_path, name):
    m = tracer.load(str(DATA / name))
    gen = m.generate("The quick brown fox jumps over the lazy dog", max_new_tokens=3)
    gen.save(tmp_path / "g.npz")
    again = type(gen).load(tmp_path / "g.npz")
    for hook in ("blocks.0.attn.hook_attn_scores", "blocks.1.attn.hook_attn_scores", "logits"):
        np.testing.assert_array_equal(again.steps[-1][hook], gen.steps[-1][hook])
        np.testing.assert_array_equal(again.steps[0][hook], gen.steps[0][hook])
    nocache = m.generate("The quick brown fox jumps over the lazy dog", max_new_tokens=3, cache=False)
    assert nocache.generated_ids == gen.generated_ids


def test_gemma3_gradients_match_central_differences():
    central_differences("gemma3-tiny", ["blocks.0.ln1.w", "blocks.0.ln1_post.w", "blocks.0.ln2.w", "blocks.0.ln2_post.w",
                                        "blocks.0.attn.q_norm.w", "blocks.0.attn.k_norm.w", "blocks.0.attn.W_Q",
                                        "blocks.0.mlp.W_gate", "blocks.0.mlp.W_in", "ln_final.w", "W_E"], n_tokens=12)


@pytest.mark.parametrize("changes, says", [
    ({"final_logit_softcapping": 0}, "'final_logit_softcapping' must be a number > 0 or null, got 0"),
    ({"attn_logit_softcapping": -50.0}, "'attn_logit_softcapping' must be a number > 0 or null, got -50.0"),
    ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping 50 is not supported .Gemma 2's soft-capping."),
    ({"layer_types": ["sliding_attention"]}, "'layer_types' names 1 layers but num_hidden_layers is 2"),
    ({"layer_types": ["local", "full_attention"]}, "layer type 'local' is not known"),
    ({"layer_types": None}, "'layer_types' is missing"),
    ({"hidden_activation": "relu"}, "hidden_activation 'relu' is not supported"),
    ({"head_dim": 16}, r"'model\.layers\.0\.self_attn\.q_proj\.weight' has 128 rows but config.json's num_attention_heads 4 "
                       r"× head_dim 16 = 64: head_dim does not match the weights \(head_dim 32 would\)"),
    ({"rope_parameters": {"full_attention": {"rope_type": "dynamic", "rope_theta": 1e6, "factor": 8.0},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}, "RoPE scaling 'dynamic' is not supported"),
])
def test_gemma3_configs_tracer_cannot_compute_are_one_line_errors(tmp_path, changes, says, family_copy):
    folder = family_copy(tmp_path, "gemma3-tiny", **changes)
    with pytest.raises(TracerError, match=says) as e:
        tracer.load(str(folder))
    assert "\n" not in str(e.value)


def test_gemma3_walkthrough_says_each_difference_where_it_happens(run_tracer):
    r = run_tracer("trace", "The quick brown fox jumps over the lazy dog", "--model", str(DATA / "gemma3-tiny"), "-n", "1",
                   "--no-pager", "--token", "K", env={"COLUMNS": "100"}, text=True)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    for said in ["embedding × √64", "sliding window 6 on layer 0 (RoPE base 10000 there)",
                 "x scaled by √64 = 8.000 before layer 0", "Gemma's RMS norm multiplies by (1 + w)",
                 "× (1 + w), w = ln1.w", "÷ √query_pre_attn_scalar = √24", "GELU(gate) ⊙ up",
                 "normalized again after the attention (Gemma: a norm before and after each sublayer)",
                 "the sliding window (6 keys) hides", "(the local base of the sliding-window layers)",
                 "× (1 + w), w = attn.q_norm.w"]:
        assert said in out, said


# --------------------------------------------------------------------------- Gemma 2


def test_gemma2_reads_its_switches_and_records_them():
    m = tracer.load(str(DATA / "gemma2-tiny"))
    c = m.config
    assert (c.norm, c.mlp, c.norm_place, c.qk_norm, c.embed_scale, c.attn_scalar) == (
        "gemma_rms", "geglu", "both", "none", True, 24.0)
    assert (c.attn_softcap, c.final_softcap, c.sliding_window, c.windowed, c.rope_local_theta) == (5.0, 8.0, 6, (0,), None)
    t = m.run("The quick brown fox jumps over the lazy dog")
    n = len(t.tokens)
    assert "blocks.0.attn.q_norm.hook_scale" not in t and "rope.hook_angle_local" not in t
    np.testing.assert_allclose(t["blocks.0.hook_resid_pre"], t["hook_embed"] * 8.0, rtol=1e-6)  # × √64
    for l in range(2):  # hook_attn_scores is after the soft-cap (TransformerLens's place): 5 · tanh(dots / √24 / 5)
        dots, scores = t[f"blocks.{l}.attn.hook_dots"], t[f"blocks.{l}.attn.hook_attn_scores"]
        seen = np.isfinite(scores)
        np.testing.assert_allclose(scores[seen], (5 * np.tanh(dots / np.sqrt(24) / 5))[seen], rtol=1e-5, atol=1e-6)
        assert np.abs(dots[seen]).max() / np.sqrt(24) > 10 and np.abs(scores[seen]).max() < 5  # the cap bends them
    w = m.params["W_E"]
    raw = t["unembed.hook_in"] @ w.T
    np.testing.assert_allclose(t["logits"], 8 * np.tanh(raw / 8), rtol=1e-5, atol=1e-5)
    assert np.abs(raw).max() > 8 > np.abs(t["logits"]).max()
    far = np.tril(np.ones((n, n), dtype=bool), k=-6)  # keys 6 or more places back: hidden on layer 0 only
    assert np.isneginf(t["blocks.0.attn.hook_attn_scores"][:, far]).all() and (t["blocks.0.attn.hook_pattern"][:, far] == 0).all()
    assert np.isfinite(t["blocks.1.attn.hook_attn_scores"][:, far]).all() and (t["blocks.1.attn.hook_pattern"][:, far] > 0).all()


def test_gemma2_with_too_many_layers_is_refused_before_any_list_is_made(tmp_path, family_copy):
    folder = family_copy(tmp_path, "gemma2-tiny", layer_types=None, num_hidden_layers=10 ** 12)
    with pytest.raises(TracerError, match="'num_hidden_layers' 1,000,000,000,000 is more than tracer reads|"
                                          "num_hidden_layers 1,000,000,000,000 is more than tracer reads"):
        tracer.load(str(folder))


def test_gemma2_without_layer_types_windows_every_other_layer_from_0(tmp_path, family_copy):
    folder = family_copy(tmp_path, "gemma2-tiny", layer_types=None, num_hidden_layers=2)
    assert tracer.load(str(folder)).config.windowed == (0,)
    cfg = json.loads((folder / "config.json").read_text())
    from tracer.readers.gemma2 import config_of
    assert config_of({**cfg, "num_hidden_layers": 5}, folder).windowed == (0, 2, 4)


def test_softcap_is_a_table_entry_with_words_and_a_derivative():
    from tracer.core.blocks import SOFTCAP
    assert SOFTCAP.words("scores", 50, 3.217, float(SOFTCAP.forward(np.float64(3.217), 50))) == \
        "scores soft-capped: 50 · tanh(s / 50): 3.217 → 3.213"
    x = np.array([[-7.0, -0.3, 0.0, 2.5, 40.0]])
    y = SOFTCAP.forward(x, 5.0)
    np.testing.assert_allclose(SOFTCAP.backward(np.ones_like(y), y, 5.0),
                               (SOFTCAP.forward(x + 1e-6, 5.0) - SOFTCAP.forward(x - 1e-6, 5.0)) / 2e-6, rtol=1e-6, atol=1e-9)
    hidden = np.array([-np.inf, 1.0])  # a masked score: no gradient, no nan
    assert list(SOFTCAP.backward(np.zeros(2), hidden, 5.0)) == [0.0, 0.0]


def test_gemma2_gradients_match_central_differences():
    central_differences("gemma2-tiny", ["blocks.0.ln1.w", "blocks.0.ln1_post.w", "blocks.0.ln2.w", "blocks.0.ln2_post.w",
                                        "blocks.0.attn.W_Q", "blocks.0.attn.W_K", "blocks.0.attn.W_V",
                                        "blocks.0.mlp.W_gate", "ln_final.w", "W_E"], n_tokens=12)


@pytest.mark.parametrize("changes, says", [
    ({"final_logit_softcapping": 0}, "'final_logit_softcapping' must be a number > 0 or null .*, got 0"),
    ({"attn_logit_softcapping": -50.0}, "'attn_logit_softcapping' must be a number > 0 or null .*, got -50.0"),
    ({"attn_logit_softcapping": "50"}, "'attn_logit_softcapping' must be a number > 0 or null .*, got '50'"),
    ({"attn_logit_softcapping": True}, "'attn_logit_softcapping' must be a number > 0 or null .*, got True"),
    ({"layer_types": ["sliding_attention"]}, "'layer_types' names 1 layers but num_hidden_layers is 2"),
    ({"layer_types": ["local", "full_attention"]}, "layer type 'local' is not known"),
    ({"hidden_activation": "relu"}, "hidden_activation 'relu' is not supported"),
    ({"head_dim": 16}, r"'model\.layers\.0\.self_attn\.q_proj\.weight' has 128 rows but config.json's num_attention_heads 4 "
                       r"× head_dim 16 = 64: head_dim does not match the weights \(head_dim 32 would\)"),
    ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 8.0}}, "dynamic"),
])
def test_gemma2_configs_tracer_cannot_compute_are_one_line_errors(tmp_path, changes, says, family_copy):
    folder = family_copy(tmp_path, "gemma2-tiny", **changes)
    with pytest.raises(TracerError, match=says) as e:
        tracer.load(str(folder))
    assert "\n" not in str(e.value)
    if "softcapping" in str(changes):  # refused before any weight is read: the weights' file may be garbage
        (folder / "model.safetensors").write_bytes(b"not a safetensors file")
        with pytest.raises(TracerError, match=says):
            tracer.load(str(folder))


def test_config_refuses_a_soft_cap_of_0():
    with pytest.raises(TracerError, match="config: attn_softcap must be a number > 0 or absent, got 0"):
        Config(attn_softcap=0)
    with pytest.raises(TracerError, match="config: final_softcap must be a number > 0 or absent, got -1"):
        Config(final_softcap=-1)


def test_gemma2_walkthrough_says_the_soft_caps_where_they_happen(run_tracer):
    r = run_tracer("trace", "The quick brown fox jumps over the lazy dog", "--model", str(DATA / "gemma2-tiny"), "-n", "1",
                   "--no-pager", "--token", "K", env={"COLUMNS": "100"}, text=True)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    for said in ["scores soft-capped at 5 (Gemma 2)", "logits soft-capped at 8 (Gemma 2)", "sliding window 6 on layer 0",
                 "÷ √24, 5·tanh(s/5)", "before the mask and softmax", "then soft-capped: 8 · tanh(s / 8)",
                 "Gemma's RMS norm multiplies by (1 + w)", "the sliding window (6 keys) hides"]:
        assert said in out, said
    import re
    for before, after in re.findall(r"scores soft-capped: 5 · tanh\(s / 5\): (-?[0-9.]+) → (-?[0-9.]+)", out):
        assert float(after) == pytest.approx(5 * np.tanh(float(before) / 5), abs=1.5e-3)
    before, after = re.search(r"logits soft-capped: 8 · tanh\(s / 8\): (-?[0-9.]+) → (-?[0-9.]+)", out).groups()
    assert float(after) == pytest.approx(8 * np.tanh(float(before) / 8), abs=1.5e-3)


def test_gemma2_demo_says_the_soft_cap_on_the_scores_screen(render_text):
    from tracer.render import demo
    m = tracer.load(str(DATA / "gemma2-tiny"))
    gen = m.generate("The quick brown fox jumps over the lazy dog", max_new_tokens=1)
    d = demo.Demo(gen, m.tokenizer)
    steps = demo.build_steps(d)
    k = next(i for i, s in enumerate(steps) if s.name == "Scores and the mask")
    out = " ".join(render_text(demo.screen(d, steps, demo.Page(k, False)), 100).split())
    assert "Gemma 2 then soft-caps them so none passes ±5, before the mask: scores soft-capped: 5 · tanh(s / 5):" in out
