"""Llama, Qwen2 and Mistral: tracer's decoder on the fixtures transformers made
(tests/data/*-tiny, tools/make_family_fixtures.py) gives transformers' numbers — logits, every
layer's residual stream, every attention pattern, greedy generation with and without the KV cache —
and records and shows the steps where these blocks differ from GPT-2's."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.core.config import Config
from tracer.core.equations import rope_frequencies, rotate
from tracer.errors import TracerError
from tracer.formats.files import load_npz

from .reference import grads_match_central_differences, ids

DATA = Path(__file__).parent / "data"
FOLDERS = ["llama-tiny", "llama-tiny-bf16", "qwen2-tiny", "mistral-tiny", "qwen3-tiny", "olmo2-tiny", "phi3-tiny", "gemma3-tiny", "gemma2-tiny"]
ATOL = 1e-4  # float32 through a few layers; logits are of size ~5


@pytest.fixture(scope="module", params=FOLDERS)
def fixture(request):
    name = request.param
    return name, tracer.load(str(DATA / name)), load_npz(DATA / name / "reference.npz")


@pytest.mark.parametrize("k", [0, 1])
def test_logits_residuals_and_patterns_match_transformers(fixture, k):
    name, model, ref = fixture
    t = model.run(ids(ref, k))
    np.testing.assert_allclose(t["logits"], ref[f"logits_{k}"], atol=ATOL, rtol=0, err_msg=name)
    hidden = ref[f"hidden_states_{k}"]  # [layer + 1, pos, d_model]: the embeddings, then each layer's output
    L = model.config.n_layers
    for l in range(L):
        np.testing.assert_allclose(t[f"blocks.{l}.hook_resid_pre"], hidden[l], atol=ATOL, rtol=0, err_msg=f"{name} layer {l}")
        np.testing.assert_allclose(t[f"blocks.{l}.attn.hook_pattern"], ref[f"attentions_{k}"][l], atol=1e-5, rtol=0)
    np.testing.assert_allclose(t["unembed.hook_in"], hidden[L], atol=ATOL, rtol=0)  # after the final RMS norm


@pytest.mark.parametrize("cache", [True, False])
def test_greedy_generation_matches_transformers(fixture, cache):
    name, model, ref = fixture
    for k in (0, 1):
        gen = model.generate(ids(ref, k), max_new_tokens=8, cache=cache)
        assert gen.generated_ids == [int(i) for i in ref[f"greedy_ids_{k}"]], (name, k)


def test_a_cached_one_token_step_matches_transformers(fixture):
    name, model, ref = fixture
    gen = model.generate(ids(ref, 0), max_new_tokens=2)
    step = gen.steps[1]  # reads the first greedy token, the prompt's keys and values from the cache
    assert step.start == len(ids(ref, 0)) and int(step.tokens[-1]) == int(ref["step_input_0"][0])
    np.testing.assert_allclose(step["logits"][-1], ref["step_logits_0"], atol=ATOL, rtol=0)


def test_tokenizer_gives_the_fixture_ids(fixture):
    name, model, ref = fixture
    for k in (0, 1):
        assert model.tokenize(str(ref[f"prompt_{k}"])) == ids(ref, k)


def test_config_reads_the_family_switches():
    llama = tracer.load(str(DATA / "llama-tiny")).config
    assert (llama.positional, llama.norm, llama.mlp, llama.n_heads, llama.kv_heads) == ("rope", "rms", "swiglu", 4, 2)
    assert llama.rope_scaling["rope_type"] == "llama3" and llama.rope_theta == 500000 and llama.tied_unembed
    mistral = tracer.load(str(DATA / "mistral-tiny")).config
    assert mistral.d_head == 32 and mistral.d_model == 64 and mistral.sliding_window == 64
    qwen = tracer.load(str(DATA / "qwen2-tiny"))
    assert qwen.config.sliding_window is None and not qwen.config.tied_unembed
    assert np.abs(qwen.params["blocks.0.attn.b_Q"]).max() > 0  # Qwen2's Q/K/V biases are read
    bf16 = tracer.load(str(DATA / "llama-tiny-bf16"))
    assert all(v.dtype == np.float32 for v in bf16.params.values())


def test_recorded_names_and_shapes_of_a_grouped_query_rotary_block():
    model = tracer.load(str(DATA / "llama-tiny"))
    cfg = model.config
    t = model.run("The fox")
    n = len(t.tokens)
    a = "blocks.0.attn."
    assert t[a + "hook_q"].shape == (n, 4, 16) and t[a + "hook_rot_q"].shape == (n, 4, 16)
    assert t[a + "hook_k"].shape == (n, 2, 16) and t[a + "hook_rot_k"].shape == (n, 2, 16) and t[a + "hook_v"].shape == (n, 2, 16)
    assert t["blocks.0.mlp.hook_pre_linear"].shape == (n, cfg.d_mlp) and t["rope.hook_angle"].shape == (n, 8)
    assert "hook_pos_embed" not in t.arrays and "blocks.0.ln1.hook_scale" in t.arrays
    assert "blocks.0.ln1.b" not in model.params and "blocks.0.mlp.W_gate" in model.params


def test_rotation_by_complex_numbers_and_the_llama3_rule():
    """hook_rot_q is hook_q with each pair (x_i, x_(i+h)) read as x_i + i·x_(i+h) and multiplied by
    e^(i·position·θ_i), θ_i from the llama3 rule written here again."""
    model = tracer.load(str(DATA / "llama-tiny"))
    cfg = model.config
    t = model.run("The quick brown fox jumps over the lazy dog")
    q, rot = t["blocks.1.attn.hook_q"], t["blocks.1.attn.hook_rot_q"]  # [pos, head, d_head]
    h = cfg.d_head // 2
    rs = cfg.rope_scaling
    theta = []
    for i in range(h):
        f = cfg.rope_theta ** (-2 * i / cfg.d_head)
        wave = 2 * math.pi / f
        lo, hi = rs["original_max_position_embeddings"] / rs["low_freq_factor"], rs["original_max_position_embeddings"] / rs["high_freq_factor"]
        if wave > lo:
            f = f / rs["factor"]
        elif wave >= hi:
            s = (rs["original_max_position_embeddings"] / wave - rs["low_freq_factor"]) / (rs["high_freq_factor"] - rs["low_freq_factor"])
            f = (1 - s) * f / rs["factor"] + s * f
        theta.append(f)
    pos = np.arange(len(q))[:, None, None]
    z = (q[..., :h] + 1j * q[..., h:]) * np.exp(1j * pos * np.array(theta))
    np.testing.assert_allclose(rot, np.concatenate([z.real, z.imag], axis=-1), atol=1e-5, rtol=1e-5)


def test_rotated_dot_products_depend_on_the_distance_only():
    rng = np.random.default_rng(0)
    freq = rope_frequencies(8, 10000.0)
    q, k = rng.normal(size=(1, 1, 8)), rng.normal(size=(1, 1, 8))

    def dot(m: int, n: int) -> float:
        cq, sq = np.cos(m * freq)[None], np.sin(m * freq)[None]
        ck, sk = np.cos(n * freq)[None], np.sin(n * freq)[None]
        return float((rotate(q, cq, sq) * rotate(k, ck, sk)).sum())

    assert dot(7, 3) == pytest.approx(dot(107, 103), rel=1e-9) == pytest.approx(dot(4, 0), rel=1e-9)
    assert dot(7, 3) != pytest.approx(dot(7, 4), rel=1e-3)


def test_a_sliding_window_hides_old_keys_and_the_cache_agrees(tmp_path, family_copy):
    folder = family_copy(tmp_path, "mistral-tiny", sliding_window=4)
    model = tracer.load(str(folder))
    gen = model.generate("The quick brown fox jumps over the lazy dog", max_new_tokens=3)
    p = gen.steps[0]["blocks.0.attn.hook_pattern"]  # [head, query, key]
    n = p.shape[1]
    far = np.tril(np.ones((n, n), dtype=bool), k=-4)  # keys 4 or more places back
    assert (p[:, far] == 0).all() and (p[:, ~far & np.tril(np.ones((n, n), dtype=bool))] > 0).all()
    last = gen.steps[-1]["blocks.1.attn.hook_pattern"][:, -1]  # a one-token step: only its last 4 keys
    assert (last[:, :-4] == 0).all() and np.allclose(last[:, -4:].sum(-1), 1)
    nocache = model.generate("The quick brown fox jumps over the lazy dog", max_new_tokens=3, cache=False)
    assert nocache.generated_ids == gen.generated_ids
    np.testing.assert_allclose(nocache.steps[-1]["logits"][-1], gen.steps[-1]["logits"][-1], atol=1e-5)


def test_transformers_4_config_keys_read_as_transformers_5_ones(tmp_path, family_copy):
    """rope_theta + rope_scaling (most Hub checkpoints) give what rope_parameters gives."""
    old = json.loads((DATA / "llama-tiny" / "config.json").read_text())["rope_parameters"]
    scaling = {k: v for k, v in old.items() if k != "rope_theta"}
    folder = family_copy(tmp_path, "llama-tiny", rope_parameters=None, rope_theta=old["rope_theta"], rope_scaling=scaling)
    a, b = tracer.load(str(DATA / "llama-tiny")), tracer.load(str(folder))
    assert a.config == b.config
    np.testing.assert_array_equal(a.run("fox")["logits"], b.run("fox")["logits"])


@pytest.mark.parametrize("changes, says", [
    ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}}, "RoPE scaling 'dynamic' is not supported"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
    ({"mlp_bias": True}, "mlp_bias is not supported"),
    ({"num_key_value_heads": 3}, "not a multiple of n_kv_heads 3"),
    ({"num_hidden_layers": 10**9}, "n_layers 1,000,000,000 is more than tracer reads"),
    ({"num_hidden_layers": 900}, "config.json does not match the weights"),
    ({"hidden_size": "64"}, "'hidden_size' must be a whole number"),
    ({"tie_word_embeddings": "false"}, "'tie_word_embeddings' must be true or false"),
])
def test_configs_tracer_cannot_compute_are_one_line_errors(tmp_path, changes, says, family_copy):
    folder = family_copy(tmp_path, "llama-tiny", **changes)
    with pytest.raises(TracerError, match=says.replace("(", r"\(")):
        tracer.load(str(folder))


def test_qwen2_window_on_some_layers_is_refused(tmp_path, family_copy):
    folder = family_copy(tmp_path, "qwen2-tiny", use_sliding_window=True, sliding_window=16)
    with pytest.raises(TracerError, match="sliding window on some layers only"):
        tracer.load(str(folder))


def test_a_tensor_with_the_wrong_shape_or_missing_names_the_tensor(tmp_path, family_copy):
    folder = family_copy(tmp_path, "llama-tiny", num_key_value_heads=4)
    with pytest.raises(TracerError, match=r"'model\.layers\.0\.self_attn\.k_proj\.weight' has shape \[32, 64\]"):
        tracer.load(str(folder))
    folder = family_copy(tmp_path / "untied", "llama-tiny", tie_word_embeddings=False)  # float32: room for the size check
    with pytest.raises(TracerError, match="missing tensor 'lm_head.weight'"):
        tracer.load(str(folder))


def test_a_folder_without_tokenizer_json_says_so(tmp_path, family_copy):
    folder = family_copy(tmp_path, "qwen2-tiny")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(TracerError, match="tokenizer"):
        tracer.load(str(folder))


def test_gradients_of_a_llama_block_match_central_differences():
    """The backward pass on a loaded Qwen2 (float64 copy): a few entries of each kind of parameter."""
    m = tracer.load(str(DATA / "qwen2-tiny"))
    cfg = Config(**{**m.config.to_dict(), "dtype": "float64", "n_layers": 1})
    params = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in m.params.items()
              if not k.startswith(("blocks.1.", "blocks.2."))}  # C order: reshape(-1) below is a view
    tokens = np.array(ids(load_npz(DATA / "qwen2-tiny" / "reference.npz"), 1)[:12])
    grads_match_central_differences(cfg, params, tokens, ["blocks.0.attn.W_Q", "blocks.0.attn.b_K", "blocks.0.attn.W_V",
                                                          "blocks.0.mlp.W_gate", "blocks.0.mlp.W_in", "blocks.0.ln1.w",
                                                          "blocks.0.ln2.w", "ln_final.w", "W_U"], seed=1)


def test_cli_trace_shows_where_the_block_differs(run_tracer):
    r = run_tracer("trace", "The quick brown fox", "--model", str(DATA / "llama-tiny"), "-n", "1", "--no-pager",
                   env={"COLUMNS": "100"}, text=True)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    for said in ["rotary positions", "RMS norm", "SwiGLU MLP", "2 key/value heads shared by 4 query heads",
                 "no position vector is added", "B_Q↻ = ", "shares key/value head 0 of 2",
                 "SiLU(gate) ⊙ up", "the cache keeps 128 numbers per token instead of 256"]:
        assert said in out, said


def test_saved_family_trace_shows_again(run_tracer, tmp_path):
    path = tmp_path / "q.npz"
    r = run_tracer("trace", "The quick brown fox", "--model", str(DATA / "qwen2-tiny"), "-n", "2", "--save", str(path),
                   "--no-pager", env={"COLUMNS": "100"}, text=True)
    assert r.returncode == 0, r.stderr
    shown = run_tracer("show", str(path), "--no-pager", env={"COLUMNS": "100"}, text=True)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == r.stdout


# --------------------------------------------------------------------------- by name, from the local Hugging Face cache


def _fake_hub(tmp_path: Path, monkeypatch, source: Path, shard_in_two=None):
    """An isolated Hugging Face cache and an hf_hub_download stand-in serving `source`'s files
    (split into two shards with an index by `shard_in_two`, when given); returns the fetch function
    and the list of asks."""
    serve = tmp_path / "served"
    shutil.copytree(source, serve)
    if shard_in_two is not None:
        shard_in_two(serve / "model.safetensors", serve)
        (serve / "model.safetensors").unlink()
    cache = tmp_path / "hub"
    for var in ("HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    asked = []

    def fake_hf_hub_download(repo_id, filename):
        asked.append(filename)
        if not (serve / filename).is_file():
            raise FileNotFoundError(f"404 {repo_id}/{filename}")
        snap = cache / f"models--{repo_id.replace('/', '--')}" / "snapshots" / "feedbeef"
        snap.mkdir(parents=True, exist_ok=True)
        shutil.copy(serve / filename, snap / filename)
        return str(snap / filename)

    return fake_hf_hub_download, asked


@pytest.mark.parametrize("sharded", [False, True])
def test_download_then_load_by_repo_id(tmp_path, monkeypatch, shard_in_two, sharded):
    from tracer.readers import hub

    fetch, asked = _fake_hub(tmp_path, monkeypatch, DATA / "qwen2-tiny", shard_in_two if sharded else None)
    with pytest.raises(TracerError, match="weights not found in the local Hugging Face cache.*tracer download Qwen/Tiny"):
        tracer.load("Qwen/Tiny")
    folder = hub.download("Qwen/Tiny", fetch)
    weights = (["model.safetensors", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors"] if sharded else ["model.safetensors"])
    assert asked == ["config.json", *weights, "tokenizer.json", "tokenizer_config.json"]
    m = tracer.load("Qwen/Tiny")
    assert m.name == "Qwen/Tiny" and Path(m.source) == folder
    ref = load_npz(DATA / "qwen2-tiny" / "reference.npz")
    np.testing.assert_allclose(m.run(ids(ref, 0))["logits"], ref["logits_0"], atol=ATOL, rtol=0)


def test_a_cached_snapshot_without_tokenizer_json_is_named(tmp_path, monkeypatch):
    fetch, _ = _fake_hub(tmp_path, monkeypatch, DATA / "llama-tiny")
    for f in ("config.json", "model.safetensors"):
        fetch("meta-llama/Tiny", f)
    with pytest.raises(TracerError, match=r"feedbeef lacks tokenizer\.json"):
        tracer.load("meta-llama/Tiny")
