"""Qwen3.5 (linear-attention layers that keep a state, gated softmax layers), SmolLM3 (a layer without
rotary positions) and OLMo 3 (sliding windows on three layers of four, YaRN on the full ones): tracer's
decoder on the fixtures transformers made (tests/data/*-tiny, tools/make_new_family_fixtures.py) gives
transformers' numbers — logits, every residual, the softmax layers' patterns, greedy generation with and
without the cache, a cached step — and, in Qwen3.5's linear layers, every intermediate of the Gated
DeltaNet: the convolution's input, q, k and v, β and the decay, the state after every position, the
read-out, the gate and the gated norm, and the state the cache holds after a cached step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.core.config import Config
from tracer.formats.files import load_npz

from .reference import grads_match_central_differences, ids


DATA = Path(__file__).parent / "data"
FOLDERS = ["qwen3-5-tiny", "smollm3-tiny", "olmo3-tiny"]
ATOL = 1e-4  # float32 through a few layers; logits are of size ~5
PATTERN_ATOL = 5e-5  # OLMo 3: YaRN's attention factor (1.21) sharpens the float32 scores


@pytest.fixture(scope="module", params=FOLDERS)
def fixture(request):
    name = request.param
    return name, tracer.load(str(DATA / name)), load_npz(DATA / name / "reference.npz")


@pytest.fixture(scope="module")
def qwen35():
    return tracer.load(str(DATA / "qwen3-5-tiny")), load_npz(DATA / "qwen3-5-tiny" / "reference.npz")


@pytest.mark.parametrize("k", [0, 1])
def test_logits_residuals_and_patterns_match_transformers(fixture, k):
    name, model, ref = fixture
    t = model.run(ids(ref, k))
    np.testing.assert_allclose(t["logits"], ref[f"logits_{k}"], atol=ATOL, rtol=0, err_msg=name)
    hidden = ref[f"hidden_states_{k}"]  # [layer + 1, pos, d_model]
    L = model.config.n_layers
    for l in range(L):
        np.testing.assert_allclose(t[f"blocks.{l}.hook_resid_pre"], hidden[l], atol=ATOL, rtol=0, err_msg=f"{name} {l}")
    for i, l in enumerate(int(x) for x in ref["attention_layers"]):  # the softmax layers' patterns, in order
        np.testing.assert_allclose(t[f"blocks.{l}.attn.hook_pattern"], ref[f"attentions_{k}"][i], atol=PATTERN_ATOL, rtol=0)
    np.testing.assert_allclose(t["unembed.hook_in"], hidden[L], atol=ATOL, rtol=0)


@pytest.mark.parametrize("cache", [True, False])
def test_greedy_generation_matches_transformers(fixture, cache):
    name, model, ref = fixture
    for k in (0, 1):
        gen = model.generate(ids(ref, k), max_new_tokens=8, cache=cache)
        assert gen.generated_ids == [int(i) for i in ref[f"greedy_ids_{k}"]], (name, k)


def test_a_cached_one_token_step_matches_transformers(fixture):
    name, model, ref = fixture
    gen = model.generate(ids(ref, 0), max_new_tokens=2)
    step = gen.steps[1]
    assert step.start == len(ids(ref, 0)) and int(step.tokens[-1]) == int(ref["step_input_0"][0])
    np.testing.assert_allclose(step["logits"][-1], ref["step_logits_0"], atol=ATOL, rtol=0)


def test_the_tokenizer_gives_the_fixture_ids(fixture):
    name, model, ref = fixture
    for k in (0, 1):
        assert model.tokenize(str(ref[f"prompt_{k}"])) == ids(ref, k), name


def l2(x):  # [..., d] → same, as transformers' l2norm
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)


@pytest.mark.parametrize("k", [0, 1])
def test_every_step_of_the_gated_deltanet_matches_transformers(qwen35, k):
    model, ref = qwen35
    t = model.run(ids(ref, k))
    for i, l in enumerate(int(x) for x in ref["linear_layers"]):
        a = f"blocks.{l}.attn."
        close = lambda hook, want, tol=ATOL: np.testing.assert_allclose(  # noqa: E731
            t[a + hook], want, atol=tol, rtol=0, err_msg=f"layer {l} {hook}")
        close("hook_qkv_pre", ref[f"linear_conv_in_{k}"][i])
        close("hook_q", l2(ref[f"linear_q_{k}"][i]), 1e-5)  # the reference keeps q and k before their L2 norm
        close("hook_k", l2(ref[f"linear_k_{k}"][i]), 1e-5)
        close("hook_v", ref[f"linear_v_{k}"][i])
        close("hook_beta", ref[f"linear_beta_{k}"][i], 1e-5)
        close("hook_decay", ref[f"linear_g_{k}"][i], 1e-5)
        close("hook_state", ref[f"linear_state_{k}"][i])  # [pos, v_head, d_k, d_v]: S after each position
        close("hook_z", ref[f"linear_core_out_{k}"][i])
        close("hook_gate_z", ref[f"linear_z_{k}"][i])
        close("hook_z_gated", ref[f"linear_gated_out_{k}"][i])
    for i, l in enumerate(int(x) for x in ref["attention_layers"]):  # the softmax layers' output gate
        np.testing.assert_allclose(t[f"blocks.{l}.attn.hook_gate"], ref[f"full_gate_{k}"][i], atol=ATOL, rtol=0)


def test_the_state_is_the_delta_rule_written_out_here(qwen35):
    """S after each position, from the recorded q, k, v, β and decay by the three lines of the rule
    (decay, write the error along k, read with q), one head and one position at a time."""
    model, ref = qwen35
    t = model.run(ids(ref, 1))
    cfg = model.config
    for l in (int(x) for x in ref["linear_layers"]):
        a = f"blocks.{l}.attn."
        q, k, v = (t[a + h].astype(np.float64) for h in ("hook_q", "hook_k", "hook_v"))
        beta, g = t[a + "hook_beta"].astype(np.float64), t[a + "hook_decay"].astype(np.float64)
        per = cfg.linear_v_heads // cfg.linear_k_heads
        for h in range(cfg.linear_v_heads):
            S = np.zeros((cfg.linear_d_k, cfg.linear_d_v))
            for p in range(len(q)):
                kp, qp = k[p, h // per], q[p, h // per]
                S = S * np.exp(g[p, h])
                S = S + np.outer(kp, beta[p, h] * (v[p, h] - S.T @ kp))
                np.testing.assert_allclose(t[a + "hook_state"][p, h], S, atol=1e-5, rtol=1e-5)
                np.testing.assert_allclose(t[a + "hook_z"][p, h], S.T @ qp / np.sqrt(cfg.linear_d_k), atol=1e-5, rtol=1e-5)


def test_the_cache_carries_the_state_not_keys_and_values(qwen35):
    """After a cached step the state the cache holds is transformers' (step_state), and what a linear
    layer keeps does not grow with the text: a longer prompt leaves the same number of bytes."""
    model, ref = qwen35
    gen = model.generate(ids(ref, 0), max_new_tokens=2)
    step = gen.steps[1]
    for i, l in enumerate(int(x) for x in ref["linear_layers"]):
        np.testing.assert_allclose(step[f"blocks.{l}.attn.hook_state"][-1], ref["step_state_0"][i], atol=ATOL, rtol=0)
    from tracer.core.decoder import KVCache, forward
    cfg = model.config
    kept = {}
    for n in (4, 40):  # a short and a long prompt through one pass each
        cache = KVCache(cfg, 64)
        forward(cfg, model.params, ids(ref, 0)[:n], cache=cache)
        cache.length = n
        kept[n] = cache
    conv = 2 * cfg.linear_k_heads * cfg.linear_d_k + cfg.linear_v_heads * cfg.linear_d_v
    state = 4 * (cfg.linear_v_heads * cfg.linear_d_k * cfg.linear_d_v + (cfg.linear_conv - 1) * conv)  # float32
    for l in (int(x) for x in ref["linear_layers"]):
        assert kept[4].layers[l].nbytes == kept[40].layers[l].nbytes == state
        assert not np.array_equal(kept[4].layers[l].S, kept[40].layers[l].S)  # the same room, other numbers


def test_the_configs_read_each_familys_switches(qwen35):
    cfg = qwen35[0].config
    assert cfg.layer_types == ("linear_attention", "gated", "linear_attention", "gated") and cfg.attention == "gated"
    assert cfg.rotary_dim == 8 < cfg.d_head and cfg.qk_norm == "per_head"
    smol = tracer.load(str(DATA / "smollm3-tiny")).config
    assert smol.nope_layers == (3,) and [smol.rotates(l) for l in range(4)] == [True, True, True, False]
    olmo = tracer.load(str(DATA / "olmo3-tiny")).config
    assert olmo.windowed == (0, 1, 2) and olmo.rope_scaling["rope_type"] == "yarn" and olmo.rope_local_theta == 500000


def test_a_layer_without_rotary_positions_records_no_rotation():
    t = tracer.load(str(DATA / "smollm3-tiny")).run("The quick brown fox")
    assert "blocks.3.attn.hook_rot_q" not in t.arrays and "blocks.2.attn.hook_rot_q" in t.arrays
    dots = t["blocks.3.attn.hook_dots"]  # [head, query, key]: Q·K of the unturned vectors
    q, k = t["blocks.3.attn.hook_q"], t["blocks.3.attn.hook_k"]  # [pos, head, d_head]
    per = q.shape[1] // k.shape[1]
    want = np.einsum("qhd,khd->hqk", q, np.repeat(k, per, axis=1))
    seen = np.tril(np.ones(dots.shape[1:], dtype=bool))
    np.testing.assert_allclose(dots[:, seen], want[:, seen], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name, check", [
    ("qwen3-5-tiny", ["blocks.0.attn.W_K", "blocks.0.attn.A_log", "blocks.0.attn.W_conv", "blocks.0.attn.W_beta",
                      "blocks.0.attn.W_decay", "blocks.0.attn.dt_bias", "blocks.0.attn.out_norm.w", "blocks.0.attn.W_Z"]),
    ("smollm3-tiny", ["blocks.0.attn.W_Q", "blocks.0.mlp.W_gate"]),
    ("olmo3-tiny", ["blocks.0.attn.W_K", "blocks.0.ln1_post.w"]),
])
def test_the_backward_pass_matches_central_differences(name, check):
    """The first layer of the fixture, in float64: three entries of each named parameter against
    central differences of the next-token loss."""
    m = tracer.load(str(DATA / name))
    raw = m.config.to_dict()
    one = {"dtype": "float64", "n_layers": 1}
    for key in ("layer_types", "windowed", "nope_layers"):
        if raw.get(key) is not None:
            kept = raw[key][:1] if key == "layer_types" else [x for x in raw[key] if x < 1]  # layer 0's
            one[key] = kept or None
    cfg = Config(**{**raw, **one})
    params = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in m.params.items()
              if not k.startswith("blocks.") or k.startswith("blocks.0.")}
    missing = [p for p in check if p not in params]
    assert not missing, f"{name} has no {missing}: {sorted(k for k in params if k.startswith('blocks.0.'))}"
    tokens = np.array(m.tokenize("The quick brown fox jumps")[:8])
    grads_match_central_differences(cfg, params, tokens, check, seed=1)


@pytest.mark.parametrize("name, says", [
    ("qwen3-5-tiny", "pair (q_i, q_(i+4)) turns by angle 0·θ_i, θ_i = 1e+07^(−2i/8); only the first 8 of 32 numbers turn"),
    ("olmo3-tiny", "(YaRN divides the slow ones by 8, and cos and sin are × 1.208)"),
])
def test_the_walkthrough_says_how_much_of_each_head_turns_and_by_which_scaling(runner, name, says):
    """Partial rotary (Qwen3.5: 8 of a head's 32 numbers) and YaRN's factor and attention factor, in the
    rotation's sentence of a softmax layer (OLMo 3's full layer 3; its factor 0.1·ln 8 + 1 = 1.2079)."""
    from tracer.cli import app

    layer = "1" if name == "qwen3-5-tiny" else "3"
    r = runner.invoke(app, ["trace", "The quick brown fox", "--model", str(DATA / name), "--layer", layer, "--no-pager"],
                      env={"COLUMNS": "400", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output[-800:]
    assert says in " ".join(r.output.split()), r.output[-2000:]


@pytest.mark.parametrize("change, says", [
    ({"layer_types": ["linear_attention", "mamba", "linear_attention", "full_attention"]}, "layer type 'mamba' is not known"),
    ({"layer_types": ["linear_attention", "full_attention"]}, "'layer_types' must name one kind per layer (4)"),
    ({"linear_conv_kernel_dim": 0}, "'linear_conv_kernel_dim' must be a whole number ≥ 1, got 0"),
    ({"linear_num_value_heads": 3}, "linear_v_heads 3 is not a multiple of linear_k_heads 2"),
    ({"num_key_value_heads": 3}, "n_heads 4 is not a multiple of n_kv_heads 3")])
def test_a_bad_hybrid_config_is_refused_in_one_line(runner, tmp_path, change, says):
    """Qwen3.5's config with an unknown layer kind, layer_types of the wrong length, a convolution kernel of 0, or
    head counts that do not divide: one line, exit 2, no traceback."""
    import json
    import shutil

    from tracer.cli import app

    folder = tmp_path / "qwen3-5-bad"
    shutil.copytree(DATA / "qwen3-5-tiny", folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps({**config, **change}), encoding="utf-8")
    r = runner.invoke(app, ["trace", "A B", "--model", str(folder), "--no-pager"])
    assert r.exit_code == 2 and says in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
