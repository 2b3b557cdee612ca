"""GGUF files as models: the Llama-family fixtures written by the gguf package (llama.cpp's own writer,
with llama.cpp's names, metadata and Q/K permutation) give transformers' numbers; where people keep
GGUF files (Ollama's manifests, LM Studio's folders); what a GGUF model refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.errors import TracerError

DATA = Path(__file__).parent / "data"
pytest.importorskip("gguf")


def _ref(name):
    with np.load(DATA / name / "reference.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("name, pre", [("mistral-tiny", "llama-bpe"), ("qwen2-tiny", "qwen2"), ("llama-tiny", "llama-bpe"),
                                       ("qwen3-tiny", "qwen2"), ("olmo2-tiny", "qwen2"), ("phi3-tiny", "llama-bpe")])
def test_a_gguf_file_gives_transformers_logits_like_its_folder(gguf_of_folder, name, pre):
    """mistral-tiny is written as llama.cpp writes Mistral (architecture llama, Q and K rows permuted),
    qwen2-tiny with its Q/K/V biases, llama-tiny with Llama 3's RoPE scaling as the rope_freqs tensor
    llama.cpp's converter computes; prompts shorter than Mistral's window (llama.cpp has none)."""
    model = tracer.load(str(gguf_of_folder(DATA / name, pre)))
    ref = _ref(name)
    for k in (0, 1):
        ids = ref[f"input_ids_{k}"].tolist()
        trace = model.run(ids)
        np.testing.assert_allclose(trace["logits"], ref[f"logits_{k}"], rtol=0, atol=1e-4)
        for l in range(model.config.n_layers):
            np.testing.assert_allclose(trace[f"blocks.{l}.attn.hook_pattern"], ref[f"attentions_{k}"][l], rtol=0, atol=1e-5)
    gen = model.generate(ref["input_ids_0"].tolist(), max_new_tokens=8)
    assert gen.generated_ids == ref["greedy_ids_0"].tolist()[: len(gen.generated_ids)]


def test_quantized_matrices_are_stored_and_said_so(gguf_of_folder):
    f16 = tracer.load(str(gguf_of_folder(DATA / "qwen2-tiny", "qwen2", "F16")))
    q8 = tracer.load(str(gguf_of_folder(DATA / "qwen2-tiny", "qwen2", "Q8_0")))
    folder = tracer.load(str(DATA / "qwen2-tiny"))
    assert f16.storage["blocks.0.attn.W_Q"].dtype == "F16" and f16.storage["blocks.0.ln1.w"].dtype == "F32"
    assert q8.storage["blocks.0.mlp.W_out"].dtype == "Q8_0"
    np.testing.assert_allclose(f16.params["blocks.0.attn.W_Q"],
                               folder.params["blocks.0.attn.W_Q"].astype(np.float16).astype(np.float32), rtol=0, atol=0)
    w, ref = q8.params["blocks.1.mlp.W_in"], folder.params["blocks.1.mlp.W_in"]
    step = np.abs(ref).max() / 127  # Q8_0: 8-bit integers times one scale per 32 numbers
    assert np.abs(w - ref).max() <= step and not np.array_equal(w, ref)
    ex = q8.storage_examples["Q8_0"]
    assert ex["param"] and "value" in ex


def test_a_gguf_model_traces_in_the_cli_and_json_names_the_storage(runner, gguf_of_folder):
    from tracer.cli import app

    path = gguf_of_folder(DATA / "qwen2-tiny", "qwen2", "Q8_0")
    r = runner.invoke(app, ["trace", "hello world", "--model", str(path), "--json", "-n", "2"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["storage"]["blocks.0.attn.W_Q"] == "Q8_0" and out["storage"]["blocks.0.ln1.w"] == "F32"
    r = runner.invoke(app, ["trace", "hello world", "--model", str(path), "-n", "1", "--section", "attention"])
    assert r.exit_code == 0, r.output
    assert "W_Q of layer 0 is stored as Q8_0" in r.output


def test_a_saved_gguf_trace_shows_again_with_the_files_own_tokenizer(runner, gguf_of_folder, tmp_path):
    from tracer.cli import app

    path = gguf_of_folder(DATA / "qwen2-tiny", "qwen2")
    saved = tmp_path / "t.npz"
    r = runner.invoke(app, ["trace", "hello world", "--model", str(path), "-n", "2", "--save", str(saved),
                            "--section", "tokens"])
    assert r.exit_code == 0, r.output
    again = runner.invoke(app, ["show", str(saved), "--section", "tokens"])
    assert again.exit_code == 0, again.output
    table = lambda out: [line for line in out.splitlines() if line.startswith("│")]  # noqa: E731
    assert table(again.output) == table(r.output) and table(r.output)


# --------------------------------------------------------------------------- where people keep them


def _ollama_store(tmp_path, blob_src: Path, digest: str | None = None, name=("library", "tiny", "latest")) -> Path:
    import hashlib

    home = tmp_path / "ollama"
    data = blob_src.read_bytes()
    hexd = digest or hashlib.sha256(data).hexdigest()
    (home / "blobs").mkdir(parents=True)
    (home / "blobs" / f"sha256-{hexd}").write_bytes(data)
    manifest = home / "manifests" / "registry.ollama.ai" / name[0] / name[1] / name[2]
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{hexd}", "size": len(data)}]}))
    return home


def test_ollama_names_find_the_blob_through_the_manifest(tmp_path, monkeypatch, gguf_of_folder):
    src = gguf_of_folder(DATA / "qwen2-tiny", "qwen2")
    monkeypatch.setenv("OLLAMA_MODELS", str(_ollama_store(tmp_path, src)))
    a, b = tracer.load("ollama:tiny"), tracer.load(str(src))
    np.testing.assert_array_equal(a.run([1, 2, 3])["logits"], b.run([1, 2, 3])["logits"])
    assert tracer.load("ollama:tiny:latest").config == b.config
    with pytest.raises(TracerError, match="no manifest"):
        tracer.load("ollama:other:7b")


@pytest.mark.parametrize("bad, says", [
    ("../../etc/passwd", "not an Ollama model name"),
    ("tiny:..", "not an Ollama model name"),
    ("Tiny/../x", "not an Ollama model name"),
])
def test_ollama_names_that_could_leave_the_store_are_refused(tmp_path, monkeypatch, gguf_of_folder, bad, says):
    monkeypatch.setenv("OLLAMA_MODELS", str(_ollama_store(tmp_path, gguf_of_folder(DATA / "qwen2-tiny", "qwen2"))))
    with pytest.raises(TracerError, match=says):
        tracer.load("ollama:" + bad)


def test_an_ollama_manifest_pointing_outside_the_blobs_is_refused(tmp_path, monkeypatch, gguf_of_folder):
    home = _ollama_store(tmp_path, gguf_of_folder(DATA / "qwen2-tiny", "qwen2"))
    manifest = home / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "latest"
    doc = json.loads(manifest.read_text())
    doc["layers"][1]["digest"] = "sha256:../../../../etc/passwd"
    manifest.write_text(json.dumps(doc))
    monkeypatch.setenv("OLLAMA_MODELS", str(home))
    with pytest.raises(TracerError, match="digest is not sha256") as e:
        tracer.load("ollama:tiny")
    assert "root:" not in str(e.value)
    secret = tmp_path / "secret.gguf"
    secret.write_bytes(b"GGUF secret")
    blob = next((home / "blobs").iterdir())
    blob.unlink()
    blob.symlink_to(secret)  # a blob that is a link out of the store
    doc["layers"][1]["digest"] = "sha256:" + blob.name.removeprefix("sha256-")
    manifest.write_text(json.dumps(doc))
    with pytest.raises(TracerError, match="leads outside"):
        tracer.load("ollama:tiny")


def test_lm_studio_files_are_found_by_name_and_models_lists_them(tmp_path, monkeypatch, runner, gguf_of_folder):
    src = gguf_of_folder(DATA / "qwen2-tiny", "qwen2", "Q8_0")
    home = tmp_path / "lms"
    (home / "someone" / "tiny-GGUF").mkdir(parents=True)
    target = home / "someone" / "tiny-GGUF" / "tiny.Q8_0.gguf"
    target.write_bytes(src.read_bytes())
    monkeypatch.setenv("LMSTUDIO_MODELS", str(home))
    monkeypatch.setenv("OLLAMA_MODELS", str(_ollama_store(tmp_path, src)))
    monkeypatch.chdir(tmp_path)
    assert tracer.load("tiny.Q8_0.gguf").source == str(target)
    from tracer.cli import app

    r = runner.invoke(app, ["models"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "ollama:tiny:latest" in r.output and "tiny.Q8_0.gguf" in r.output and "Q8_0" in r.output and "qwen2" in r.output


def test_models_lists_the_current_folders_files_and_a_near_miss_names_them(tmp_path, monkeypatch, runner, gguf_of_folder):
    """The README has you put SmolLM2-135M-Instruct.Q4_1.gguf in the current folder: `tracer models` lists it
    (and a Hugging Face folder there), as `--model NAME` opens it, with the family and the types its header
    holds (read here by the gguf package); `--model smollm2` names it (it said only "not found")."""
    from tracer.cli import app

    src = gguf_of_folder(DATA / "qwen2-tiny", "qwen2", "Q8_0")
    here = tmp_path / "here"
    here.mkdir()
    (here / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(src.read_bytes())  # a real GGUF under the README's name
    shutil.copytree(DATA / "llama-tiny", here / "llama-tiny")
    (here / "notes.txt").write_text("not a model")
    for var in ("LMSTUDIO_MODELS", "OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE"):
        monkeypatch.setenv(var, str(tmp_path / "nothing"))
    monkeypatch.chdir(here)
    from gguf import GGUFReader

    types = {t.tensor_type.name for t in GGUFReader(str(src)).tensors}
    r = runner.invoke(app, ["models"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    row = next(l for l in r.output.splitlines() if "SmolLM2-135M-Instruct.Q4_1.gguf" in l)
    assert "this folder" in row and "qwen2" in row and all(t in row for t in types), row
    assert any("llama-tiny" in l and "this folder" in l and "llama" in l for l in r.output.splitlines())
    assert "notes.txt" not in r.output
    assert tracer.load("SmolLM2-135M-Instruct.Q4_1.gguf").config.d_vocab == tracer.load(str(src)).config.d_vocab  # it opens
    for typo in ("smollm2", "SmolLM2-135M-Instruct.Q4_1", "lama-tiny"):
        miss = runner.invoke(app, ["trace", "A", "--model", typo])
        assert miss.exit_code == 2 and len(miss.stderr.strip().splitlines()) == 1, miss.stderr
        want = "llama-tiny" if typo == "lama-tiny" else "SmolLM2-135M-Instruct.Q4_1.gguf"
        assert f"(did you mean '{want}' in this folder?)" in miss.stderr, miss.stderr


@pytest.mark.parametrize("factors, says", [([1.0] * 3, r"has shape \[3\]; rotary positions need 8 factors"),
                                           ([1.0] * 7 + [0.0], "must be 8 numbers > 0"),
                                           ([1.0] * 7 + [float("inf")], "must be 8 numbers > 0")])
def test_rope_factors_that_cannot_be_are_one_line(factors, says):
    from types import SimpleNamespace

    from tracer.core.config import Config
    from tracer.readers.gguf import ROPE_FREQS, with_rope_factors

    arr = np.array(factors, dtype=np.float32)
    f = SimpleNamespace(tensors={ROPE_FREQS: SimpleNamespace(shape=arr.shape)}, dequantize=lambda name: arr)
    cfg = Config(d_model=32, n_heads=2, positional="rope", norm="rms", mlp="swiglu")  # d_head 16: 8 pairs
    with pytest.raises(TracerError, match=says):
        with_rope_factors(f, cfg, Path("m.gguf"))
    assert with_rope_factors(SimpleNamespace(tensors={}), cfg, Path("m.gguf")) is cfg


def test_a_model_whose_float32_layer_would_not_fit_is_refused_with_the_numbers(gguf_of_folder, monkeypatch):
    """A model bigger than memory runs layer by layer; one whose single layer would not fit in what the
    process may take is one line, before any copy (issue 23)."""
    import tracer.core.memory

    path = gguf_of_folder(DATA / "qwen2-tiny", "qwen2", "Q8_0")
    monkeypatch.setattr(tracer.core.memory, "memory_room", lambda: 100_000)
    with pytest.raises(TracerError, match=r"qwen2-tiny.Q8_0.gguf: one layer needs 122\.9 KB expanded to float32 \(F32, "
                                          r"Q8_0 in the file\), more than this process can take 100 KB \(the whole model needs 892\.9 KB\)$"):
        tracer.load(str(path))
    with pytest.raises(TracerError, match=r"one layer needs 148 KB expanded to float32 \(BF16 in the file\), more than "
                                          r"this process can take 100 KB"):
        tracer.load(str(DATA / "llama-tiny-bf16"), memory="1GB")


# --------------------------------------------------------------------------- Q and K rows as the converter stores them


@pytest.mark.parametrize("name, pre, q_rows", [("olmo2-tiny", "qwen2", "self_attn.q_proj.weight"),
                                               ("phi3-tiny", "llama-bpe", "self_attn.qkv_proj.weight"),
                                               ("qwen3-tiny", "qwen2", "self_attn.q_proj.weight"),
                                               ("gemma2-tiny", "default", "self_attn.q_proj.weight")])
def test_q_and_k_rows_are_read_in_the_order_the_converter_stores_them(gguf_of_folder, name, pre, q_rows):
    """convert_hf_to_gguf.py permutes Q and K rows only where llama.cpp's RoPE turns neighbouring pairs
    (LlamaModel.modify_tensors: architecture llama); Olmo2Model, Phi3MiniModel, Qwen3Model and the
    Gemma models override no tensor's rows (llama.cpp turns their halves, LLAMA_ROPE_TYPE_NEOX, as
    transformers does). The gguf package's reader sees the file's rows as the folder's (Phi-3's fused
    Q|K|V included), and tracer's W_Q and W_K are the folder's."""
    import gguf
    from safetensors.numpy import load_file

    path = gguf_of_folder(DATA / name, pre)
    stored = {x.name: np.asarray(x.data) for x in gguf.GGUFReader(str(path)).tensors}
    t = load_file(str(DATA / name / "model.safetensors"))
    g = "blk.1.attn_qkv.weight" if "qkv" in q_rows else "blk.1.attn_q.weight"
    np.testing.assert_array_equal(stored[g], t[f"model.layers.1.{q_rows}"])
    if "qkv" not in q_rows:
        np.testing.assert_array_equal(stored["blk.1.attn_k.weight"], t["model.layers.1.self_attn.k_proj.weight"])
    m, f = tracer.load(str(path)), tracer.load(str(DATA / name))
    for p in ("blocks.0.attn.W_Q", "blocks.1.attn.W_K"):
        np.testing.assert_array_equal(m.params[p], f.params[p])


@pytest.mark.parametrize("name, pre, permute", [("olmo2-tiny", "qwen2", True), ("llama-tiny", "llama-bpe", False)])
def test_rows_in_the_other_order_would_show_in_the_logits(gguf_of_folder, name, pre, permute):
    """The parity tests above would catch a reader that undid the wrong order: OLMo 2 written with Llama's
    permutation, or Llama without it, gives logits far from transformers'."""
    model = tracer.load(str(gguf_of_folder(DATA / name, pre, permute=permute)))
    ref = _ref(name)
    assert np.abs(model.run(ref["input_ids_1"].tolist())["logits"] - ref["logits_1"]).max() > 1e-2


def test_phi3_without_a_window_and_olmo3_windows_on_some_layers(gguf_of_folder, family_copy, tmp_path):
    """convert_hf_to_gguf.py writes Phi-3's sliding_window as 0 when config.json has none (Phi-4): no window.
    An `olmo2` file with a window is OLMo 3's, windowed on 3 layers of every 4 (llama.cpp's pattern 4, or
    the file's sliding_window_pattern): read as the OLMo 3 folder with those layer types computes it."""
    from tracer.readers.gguf import config_json_of

    none = tracer.load(str(gguf_of_folder(DATA / "phi3-tiny", "llama-bpe", meta={"{arch}.attention.sliding_window": 0})))
    assert none.config.sliding_window is None
    both = gguf_of_folder(DATA / "olmo2-tiny", "qwen2", meta={"{arch}.attention.sliding_window": 4096})
    assert tracer.load(str(both)).config.sliding_window == 4096  # layers 0 and 1 of the pattern 4: both windowed
    some = tracer.load(str(gguf_of_folder(DATA / "olmo2-tiny", "qwen2", meta={
        "{arch}.attention.sliding_window": 3, "{arch}.attention.sliding_window_pattern": [True, False]})))
    assert (some.config.sliding_window, some.config.windowed) == (3, (0,))
    olmo3 = family_copy(tmp_path, "olmo2-tiny", model_type="olmo3", sliding_window=3,
                        layer_types=["sliding_attention", "full_attention"],
                        rope_parameters={kind: {"rope_type": "default", "rope_theta": 500000.0}
                                         for kind in ("full_attention", "sliding_attention")})
    ids = _ref("olmo2-tiny")["input_ids_1"].tolist()  # longer than the window
    np.testing.assert_allclose(some.run(ids)["logits"], tracer.load(str(olmo3)).run(ids)["logits"], atol=1e-6, rtol=0)
    meta = {f"olmo2.{k}": v for k, v in {"block_count": 8, "embedding_length": 64, "feed_forward_length": 128,
                                          "attention.head_count": 4, "context_length": 64, "attention.sliding_window": 16,
                                          "attention.layer_norm_rms_epsilon": 1e-6, "vocab_size": 10}.items()}
    raw = config_json_of({"general.architecture": "olmo2", **meta}, {}, Path("m.gguf"))
    assert [l for l, t in enumerate(raw["layer_types"]) if t == "full_attention"] == [3, 7]


@pytest.mark.parametrize("name, pre, meta, says", [
    ("qwen3-tiny", "qwen2", {"{arch}.attention.key_length": 16, "{arch}.attention.value_length": 16, "{arch}.rope.dimension_count": 16},
     r"tensor 'blk\.0\.attn_q\.weight' has shape \[128, 64\] but the metadata implies \[64, 64\]"),
    ("olmo2-tiny", "qwen2", {"{arch}.rope.scaling.type": "longrope", "{arch}.rope.scaling.factor": 4.0}, "RoPE scaling 'longrope' is not supported"),
    ("phi3-tiny", "llama-bpe", {"{arch}.attention.sliding_window_pattern": [True]}, None),  # Phi-3's window: every layer, no pattern
    ("olmo2-tiny", "qwen2", {"{arch}.attention.sliding_window": 8, "{arch}.attention.sliding_window_pattern": [True] * 3},
     r"'olmo2\.attention\.sliding_window_pattern' must be one true/false per layer \(2\)"),
    ("phi3-tiny", "llama-bpe", {"general.architecture": "phi4"},
     "GGUF architecture 'phi4' is not supported; tracer reads llama, qwen2, qwen3, olmo2, phi3, gemma2, gemma3"),
])
def test_new_family_metadata_tracer_cannot_compute_is_one_line(gguf_of_folder, name, pre, meta, says):
    path = gguf_of_folder(DATA / name, pre, meta=meta)
    if says is None:
        assert tracer.load(str(path)).config.n_layers == 2
        return
    with pytest.raises(TracerError, match=says) as e:
        tracer.load(str(path))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["llama-tiny", "qwen2-tiny", "qwen3-tiny", "olmo2-tiny", "phi3-tiny", "gemma2-tiny", "gemma3-tiny"])
def test_the_files_tensor_names_are_the_gguf_packages_own(gguf_of_folder, name):
    """Every tensor of a written fixture is named as convert_hf_to_gguf.py's map_tensor_name names it
    (gguf's tensor_mapping.py for the file's architecture), so the tests' writer is not tracer's table."""
    import gguf
    from safetensors.numpy import load_file

    path = gguf_of_folder(DATA / name, "default" if name.startswith("gemma") else "qwen2")
    reader = gguf.GGUFReader(str(path))
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    cfg = json.loads((DATA / name / "config.json").read_text())
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], cfg["num_hidden_layers"])
    t = load_file(str(DATA / name / "model.safetensors"))
    expected = {tmap.get_name(hf, try_suffixes=(".weight", ".bias")) for hf in t}
    got = {x.name for x in reader.tensors} - {"rope_freqs.weight"}
    assert got == expected and None not in expected
