"""Hugging Face GPT-2 loading (`tracer.readers.gpt2`): parity with transformers, the cache lookup, and errors.

The reference is transformers itself: `tests/data/gpt2-tiny/reference.npz` holds its logits,
hidden states, attention patterns and greedy continuation for a random 3-layer GPT-2 with the
full vocabulary (built by `tools/make_gpt2_fixture.py`; this file needs no torch).
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.readers import hub
from tracer.readers import folder as hf_folder, gpt2
from tracer.cli import app
from tracer.errors import TracerError
from tracer.formats.files import load_safetensors, save_safetensors

FIXTURE = Path(__file__).parent / "data" / "gpt2-tiny"
LAYOUTS = ("transformers", "hub")
ARTICLE = "You are a business consultant, please analyze the impact of rising oil prices on the automotive industry."
ATOL = 1e-4  # float32 through 3 layers, against PyTorch's float32: observed ≤ 3e-6


@pytest.fixture(scope="module")
def ref() -> dict[str, np.ndarray]:
    with np.load(FIXTURE / "reference.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module", params=LAYOUTS)
def model(request):
    return tracer.load(str(FIXTURE / request.param))


@pytest.fixture(scope="module")
def traced(model, ref):
    return model.run(ref["input_ids"].tolist())


def n_layers(ref) -> int:
    return sum(1 for k in ref if k.startswith("attentions."))


# --------------------------------------------------------------------------- parity with transformers


def test_fixture_prompt_is_the_article_sentence_in_gpt2_tokens(ref):
    tok = tracer.load(str(FIXTURE / "hub")).tokenizer
    assert tok.encode(ARTICLE) == ref["input_ids"].tolist()


def test_logits_match_transformers(traced, ref):
    np.testing.assert_allclose(traced["logits"], ref["logits"], atol=ATOL, rtol=0)


def test_each_resid_pre_matches_hidden_states(traced, ref):
    for l in range(n_layers(ref)):
        np.testing.assert_allclose(traced[f"blocks.{l}.hook_resid_pre"], ref[f"hidden_states.{l}"], atol=ATOL, rtol=0,
                                   err_msg=f"layer {l}")


def test_unembed_input_matches_last_hidden_state_after_ln_f(traced, ref):
    last = n_layers(ref)
    np.testing.assert_allclose(traced["unembed.hook_in"], ref[f"hidden_states.{last}"], atol=ATOL, rtol=0)
    # and it really is after the final layer norm: the last block's output differs from it
    assert np.abs(traced[f"blocks.{last - 1}.hook_resid_post"] - ref[f"hidden_states.{last}"]).max() > 0.1


def test_each_attention_pattern_matches(traced, ref):
    for l in range(n_layers(ref)):
        np.testing.assert_allclose(traced[f"blocks.{l}.attn.hook_pattern"], ref[f"attentions.{l}"], atol=ATOL, rtol=0,
                                   err_msg=f"layer {l}")
    assert ref["attentions.0"].max() > 0.5  # the fixture's patterns are far from uniform, so this test can fail


@pytest.mark.parametrize("cache", [True, False])
def test_greedy_generation_matches_transformers_generate(model, ref, cache):
    gen = model.generate(ref["input_ids"].tolist(), max_new_tokens=8, temperature=0, cache=cache)
    assert list(gen.generated_ids) == ref["greedy_ids"].tolist()
    assert ref["greedy_margins"].min() > 1e-3  # no near-tie that float32 noise could flip


def test_loaded_model_is_trained_float32_gpt2(model):
    c = model.config
    assert (c.n_layers, c.d_model, c.n_heads, c.d_vocab, c.n_ctx, c.dtype) == (3, 16, 4, 50257, 64, "float32")
    assert model.trained and model.tokenizer.name == "gpt2"
    assert all(v.dtype == np.float32 for v in model.params.values())


# --------------------------------------------------------------------------- translation, without copies


def test_c_attn_split_matches_a_per_element_loop():
    rng = np.random.default_rng(0)
    d_model, H = 6, 3
    dh = d_model // H
    W = rng.standard_normal((d_model, 3 * d_model))  # [d_model, 3 * d_model]
    b = rng.standard_normal(3 * d_model)  # [3 * d_model]
    (W_Q, W_K, W_V), (b_Q, b_K, b_V) = gpt2.split_qkv(W, b, H)
    for which, (Wm, bm) in enumerate([(W_Q, b_Q), (W_K, b_K), (W_V, b_V)]):
        for h in range(H):
            for d in range(dh):
                col = which * d_model + h * dh + d  # Q block, then K, then V; heads side by side
                assert Wm[h, :, d].tolist() == W[:, col].tolist()
                assert bm[h, d] == b[col]


def test_translated_params_reproduce_the_fused_path(model, traced):
    """W_Q/W_K/W_V, b_Q/b_K/b_V and W_O as renderers read them give the recorded q, k, v and output."""
    p = model.params
    for l in range(model.config.n_layers):
        b = f"blocks.{l}."
        x = traced[b + "ln1.hook_normalized"] * p[b + "ln1.w"] + p[b + "ln1.b"]  # [pos, d_model]
        for m in "qkv":
            want = np.einsum("pd,hde->phe", x, p[b + f"attn.W_{m.upper()}"]) + p[b + f"attn.b_{m.upper()}"]  # [pos, head, d_head]
            np.testing.assert_allclose(traced[b + f"attn.hook_{m}"], want, atol=1e-5, rtol=0, err_msg=b + m)
        out = np.einsum("phe,hed->pd", traced[b + "attn.hook_z"], p[b + "attn.W_O"]) + p[b + "attn.b_O"]  # [pos, d_model]
        np.testing.assert_allclose(traced[b + "hook_attn_out"], out, atol=1e-5, rtol=0)


def test_weights_are_read_only_views_of_the_mapped_file():
    m = tracer.load(str(FIXTURE / "transformers"))
    for name in ("W_E", "blocks.0.attn.W_Q", "blocks.1.attn.W_O", "blocks.2.mlp.W_in"):
        assert not m.params[name].flags.writeable, name  # a copy would be writeable
    assert np.shares_memory(m.params["blocks.0.attn.W_Q"], m.weights.layers[0].attn.qkv.W)  # c_attn passed as the fused matrix
    assert np.shares_memory(m.weights.unembed.W, m.params["W_E"])  # tied: W_U is W_E.T


def test_untied_lm_head_is_used_as_W_U(tmp_path, ref):
    folder = copy_fixture(tmp_path, "hub")
    arrays, meta = load_safetensors(folder / "model.safetensors", mmap=False)
    lm_head = np.random.default_rng(1).standard_normal((50257, 16)).astype(np.float32)  # [d_vocab, d_model]
    save_safetensors(folder / "model.safetensors", {**arrays, "lm_head.weight": lm_head}, meta)
    edit_config(folder, tie_word_embeddings=False)
    t = tracer.load(str(folder)).run(ref["input_ids"].tolist())
    np.testing.assert_allclose(t["logits"], t["unembed.hook_in"] @ lm_head.T, atol=1e-4, rtol=1e-5)


def test_float16_weights_are_cast_to_float32(tmp_path, ref):
    folder = copy_fixture(tmp_path, "hub")
    arrays, meta = load_safetensors(folder / "model.safetensors", mmap=False)
    save_safetensors(folder / "model.safetensors", {k: v.astype(np.float16) for k, v in arrays.items()}, meta)
    m = tracer.load(str(folder))
    assert m.params["W_E"].dtype == np.float32
    np.testing.assert_allclose(m.run(ref["input_ids"].tolist())["logits"], ref["logits"], atol=0.1)


# --------------------------------------------------------------------------- CLI


def test_cli_trace_with_the_fixture_folder(runner):
    r = runner.invoke(app, ["trace", "You are a business consultant", "--model", str(FIXTURE / "transformers")])
    assert r.exit_code == 0, r.output
    assert "3 layers" in r.output


def test_cli_download_explains_the_missing_optional_package(monkeypatch, runner):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import raises ImportError
    r = runner.invoke(app, ["download", "gpt2-medium"])
    assert r.exit_code == 2
    assert "pip install huggingface_hub" in r.output and "openai-community/gpt2-medium" in r.output


def test_download_fetches_both_files_into_a_cache_that_load_finds(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    isolate_cache(monkeypatch, tmp_path, hub_cache=cache)
    asked = []

    def fake_hf_hub_download(repo_id, filename):
        asked.append((repo_id, filename))
        snap = cache / f"models--{repo_id.replace('/', '--')}" / "snapshots" / "0123abcd"
        snap.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURE / "hub" / filename, snap / filename)
        return str(snap / filename)

    folder = hub.download("gpt2", fake_hf_hub_download)
    assert asked == [("openai-community/gpt2", "config.json"), ("openai-community/gpt2", "model.safetensors")]
    assert folder.name == "0123abcd"
    assert tracer.load("gpt2").name == "gpt2"


# --------------------------------------------------------------------------- the local HF cache


def isolate_cache(monkeypatch, tmp_path, hub_cache=None):
    """No real cache is consulted: HOME, HF_HOME and XDG point into tmp_path."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    if hub_cache is None:
        monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    else:
        monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))


def make_snapshot(cache: Path, repo_folder: str, rev: str, files=("config.json", "model.safetensors"), main=True) -> Path:
    """A huggingface_hub-style snapshot: files are symlinks to blobs, refs/main names the revision."""
    repo = cache / repo_folder
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for f in files:
        blob = repo / "blobs" / f"{rev}-{f}"
        shutil.copy(FIXTURE / "hub" / f, blob)
        (snap / f).symlink_to(blob)
    if main:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(rev)
    return snap


@pytest.mark.parametrize("name, repo_folder", [
    ("gpt2", "models--openai-community--gpt2"),
    ("openai-community/gpt2-medium", "models--openai-community--gpt2-medium"),
    ("gpt2-large", "models--gpt2-large"),  # the legacy, unprefixed repo name
    ("distilgpt2", "models--distilbert--distilgpt2"),
])
def test_name_is_found_in_the_hf_hub_cache(tmp_path, monkeypatch, ref, name, repo_folder):
    cache = tmp_path / "cache"
    isolate_cache(monkeypatch, tmp_path, hub_cache=cache)
    make_snapshot(cache, repo_folder, "abc123")
    m = tracer.load(name)
    assert m.name == name.split("/")[-1]
    np.testing.assert_allclose(m.run(ref["input_ids"].tolist())["logits"], ref["logits"], atol=ATOL, rtol=0)


def test_name_is_found_under_hf_home(tmp_path, monkeypatch):
    isolate_cache(monkeypatch, tmp_path)
    make_snapshot(tmp_path / "hf_home" / "hub", "models--openai-community--gpt2", "abc123")
    assert tracer.load("gpt2").config.n_layers == 3


def test_incomplete_snapshot_is_skipped_for_a_complete_one(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    isolate_cache(monkeypatch, tmp_path, hub_cache=cache)
    make_snapshot(cache, "models--openai-community--gpt2", "aaa", files=("config.json",), main=True)
    good = make_snapshot(cache, "models--openai-community--gpt2", "bbb", main=False)
    snap, searched, notes = hub.find_cached("gpt2")
    assert snap == good
    assert any("aaa lacks model.safetensors" in n for n in notes)


def test_name_not_found_names_every_place_searched(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    isolate_cache(monkeypatch, tmp_path, hub_cache=cache)
    with pytest.raises(TracerError) as e:
        tracer.load("gpt2-medium")
    msg = str(e.value)
    for place in (cache, tmp_path / "hf_home" / "hub", tmp_path / "home" / ".cache" / "huggingface" / "hub"):
        assert f"{place}/models--openai-community--gpt2-medium/snapshots/*/" in msg
        assert f"{place}/models--gpt2-medium/snapshots/*/" in msg
    assert "huggingface-cli download openai-community/gpt2-medium config.json model.safetensors" in msg
    assert "pip install huggingface_hub && tracer download gpt2-medium" in msg
    assert "\n" not in msg


def test_cli_name_not_found_is_one_line_exit_2(tmp_path, monkeypatch, runner):
    isolate_cache(monkeypatch, tmp_path, hub_cache=tmp_path / "cache")
    r = runner.invoke(app, ["trace", "Hello", "--model", "distilgpt2"])
    assert r.exit_code == 2
    assert "models--distilbert--distilgpt2" in r.output and "Traceback" not in r.output


def test_pickled_only_snapshot_is_reported(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    isolate_cache(monkeypatch, tmp_path, hub_cache=cache)
    snap = make_snapshot(cache, "models--openai-community--gpt2", "abc", files=("config.json",))
    (snap / "pytorch_model.bin").write_bytes(b"\x80\x02pickle")
    with pytest.raises(TracerError, match="pytorch_model.bin, which tracer never loads"):
        tracer.load("gpt2")


# --------------------------------------------------------------------------- bad folders and files


def copy_fixture(tmp_path: Path, layout: str) -> Path:
    folder = tmp_path / layout
    shutil.copytree(FIXTURE / layout, folder)
    return folder


def edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def rewrite(folder: Path, change) -> None:
    """Rewrite model.safetensors with `change(arrays)` applied (tracer's numpy writer)."""
    arrays, meta = load_safetensors(folder / "model.safetensors", mmap=False)
    arrays = {k: np.array(v) for k, v in arrays.items()}
    change(arrays)
    save_safetensors(folder / "model.safetensors", arrays, meta)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_truncated_file(tmp_path, layout):
    folder = copy_fixture(tmp_path, layout)
    f = folder / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(TracerError, match=r"model\.safetensors: truncated: tensor '.+' needs bytes"):
        tracer.load(str(folder))


def test_corrupt_header(tmp_path):
    folder = copy_fixture(tmp_path, "hub")
    f = folder / "model.safetensors"
    raw = bytearray(f.read_bytes())
    raw[8:40] = b"\xff" * 32
    f.write_bytes(bytes(raw))
    with pytest.raises(TracerError, match=r"model\.safetensors: not a safetensors file: its header is not JSON \("):
        tracer.load(str(folder))


@pytest.mark.parametrize("layout, key", [("hub", "h.1.mlp.c_fc.bias"), ("transformers", "transformer.ln_f.weight")])
def test_missing_tensor(tmp_path, layout, key):
    folder = copy_fixture(tmp_path, layout)
    rewrite(folder, lambda a: a.pop(key))
    short = key.removeprefix("transformer.")
    with pytest.raises(TracerError, match=rf"model\.safetensors: missing tensor '{short}'"):
        tracer.load(str(folder))


def test_shape_disagrees_with_config(tmp_path):
    folder = copy_fixture(tmp_path, "transformers")
    edit_config(folder, n_positions=32)
    with pytest.raises(TracerError, match=r"tensor 'wpe.weight' has shape \[64, 16\] but config.json implies \[32, 16\]"):
        tracer.load(str(folder))


def test_mlp_width_disagrees_with_config(tmp_path):
    folder = copy_fixture(tmp_path, "hub")
    edit_config(folder, n_inner=32)
    with pytest.raises(TracerError, match=r"tensor 'h.0.mlp.c_fc.weight' has shape \[16, 64\] but config.json implies \[16, 32\]"):
        tracer.load(str(folder))


def test_more_layers_in_file_than_config(tmp_path):
    folder = copy_fixture(tmp_path, "hub")
    edit_config(folder, n_layer=2)
    with pytest.raises(TracerError, match=r"tensor 'h.2.\S+' is in layer 2 but config.json says n_layer 2"):
        tracer.load(str(folder))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_names_the_tensor_and_index(tmp_path, bad):
    folder = copy_fixture(tmp_path, "transformers")

    def poison(a):
        a["transformer.h.2.attn.c_proj.weight"][3, 5] = bad

    rewrite(folder, poison)
    with pytest.raises(TracerError, match=r"tensor 'h.2.attn.c_proj.weight' holds NaN or infinite values \(first at index \[3, 5\]\)"):
        tracer.load(str(folder))


def test_nan_in_the_huge_embedding_is_found_past_the_first_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(hf_folder, "CHECK_CHUNK", 1000)  # many chunks, so the bad value is not in the first
    folder = copy_fixture(tmp_path, "hub")

    def poison(a):
        a["wte.weight"][50000, 7] = np.nan

    rewrite(folder, poison)
    with pytest.raises(TracerError, match=r"'wte.weight' holds NaN .*index \[50000, 7\]"):
        tracer.load(str(folder))


def test_integer_weights_are_refused(tmp_path):
    folder = copy_fixture(tmp_path, "hub")
    rewrite(folder, lambda a: a.__setitem__("ln_f.bias", a["ln_f.bias"].astype(np.int32)))
    with pytest.raises(TracerError, match=r"tensor 'ln_f.bias' has dtype int32, expected floating point"):
        tracer.load(str(folder))


def test_pytorch_model_bin_only_is_never_unpickled(tmp_path):
    folder = tmp_path / "pt"
    folder.mkdir()
    shutil.copy(FIXTURE / "hub" / "config.json", folder / "config.json")
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x02 would run code if unpickled")
    with pytest.raises(TracerError, match="pickled checkpoints are never loaded; tracer needs model.safetensors"):
        tracer.load(str(folder))


def test_missing_config_json(tmp_path):
    folder = copy_fixture(tmp_path, "hub")
    (folder / "config.json").unlink()
    with pytest.raises(TracerError, match=r"hub: no config.json"):
        tracer.load(str(folder))


def test_invalid_config_json(tmp_path):
    folder = copy_fixture(tmp_path, "hub")
    (folder / "config.json").write_text('{"n_layer": 3,,}')
    with pytest.raises(TracerError, match=r"config.json: not valid JSON \(.* line 1, column 15\)"):
        tracer.load(str(folder))


@pytest.mark.parametrize("changes, message", [
    ({"activation_function": "relu"}, "activation_function 'relu' is not supported"),
    ({"model_type": "mamba"}, "model_type is 'mamba'; tracer loads gpt2, llama, qwen2, mistral, qwen3, olmo2(,| and) phi3"),
    ({"model_type": "llama"}, "'hidden_size' must be a whole number ≥ 1 \\(missing\\)"),
    ({"n_head": 5}, "n_embd 16 is not divisible by n_head 5"),
    ({"n_layer": "three"}, "'n_layer' must be a whole number ≥ 1, got 'three'"),
    ({"layer_norm_epsilon": -1}, "'layer_norm_epsilon' must be a number > 0"),
])
def test_bad_config_values(tmp_path, changes, message):
    folder = copy_fixture(tmp_path, "hub")
    edit_config(folder, **changes)
    with pytest.raises(TracerError, match=message):
        tracer.load(str(folder))


def test_gelu_pytorch_tanh_is_accepted(tmp_path):
    folder = copy_fixture(tmp_path, "hub")
    edit_config(folder, activation_function="gelu_pytorch_tanh")
    assert tracer.load(str(folder)).trained


def test_bad_file_errors_reach_the_cli_as_one_line(tmp_path, runner):
    folder = copy_fixture(tmp_path, "hub")
    (folder / "config.json").unlink()
    r = runner.invoke(app, ["trace", "Hello", "--model", str(folder)])
    assert r.exit_code == 2 and "no config.json" in r.output and "Traceback" not in r.output


# --------------------------------------------------------------------------- progress bar


def test_progress_bar_only_on_a_terminal_for_big_files(monkeypatch, terminal):
    from tracer.render import progress

    monkeypatch.setattr(progress, "BIG_FILE", 0)  # treat the fixture as big
    monkeypatch.setattr(sys, "stderr", terminal)
    tracer.load(str(FIXTURE / "hub"), progress=progress.reading_progress)
    assert "reading" in terminal.getvalue()
    quiet = io.StringIO()  # not a terminal: no bar
    monkeypatch.setattr(sys, "stderr", quiet)
    tracer.load(str(FIXTURE / "hub"), progress=progress.reading_progress)
    assert quiet.getvalue() == ""


def test_progress_counts_every_byte():
    from tracer.render.progress import reading_progress

    seen = []
    with reading_progress(10, "x") as advance:  # small: no bar, a no-op callback
        advance(5)
    folder = FIXTURE / "hub"
    arrays, _ = load_safetensors(folder / "model.safetensors")
    for k in ("wte.weight", "h.0.attn.c_attn.weight"):
        hf_folder.check_finite(k, arrays[k], folder, seen.append)
        assert sum(seen) == arrays[k].size
        seen.clear()
