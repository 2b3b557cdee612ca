"""Ollama's own older blobs, read as llama.cpp's current code reads them through Ollama's compat layer
(tracer/readers/ollama_compat.py): the fixtures written as Ollama's converter wrote them (tests/ollama_blobs.py)
give the numbers of the same fixtures written by llama.cpp's converter with the keys the compat layer supplies
(tests/conftest.py `_write_gguf`): config, every parameter, the logits, the tokenizer's ids. The blobs that need a
fix no one makes are refused in one line naming it, as is a blob that lacks a key its architecture needs."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import tracer
from tracer.errors import TracerError
from tracer.formats.files import load_npz

from .ollama_blobs import write_ollama_blob
from .test_hostile_files import FAST, one_line

pytest.importorskip("gguf")
DATA = Path(__file__).parent / "data"
TEXT = "The quick brown fox, 12345 times: don't stop!"

# fixture, Ollama's converter, the llama.cpp file's pre-tokenizer, quant, the keys the compat layer supplies (or the
# blob says) that llama.cpp's converter writes otherwise, and what the note says was done (None: nothing)
SAME = [
    ("gemma3-tiny", "gemma3-1b-new", "default", "F32", {"{arch}.attention.sliding_window_pattern": [True, False]},
     "rope.local.freq_base read as rope.freq_base_swa"),
    ("gemma3-tiny", "gemma3-1b", "default", "F32", {"{arch}.attention.sliding_window_pattern": [True, True]},  # no pattern: every sixth global
     "the final_logit_softcapping 30 its converter wrote dropped"),
    ("gemma3-tiny", "gemma3-4b", "default", "F32", {"{arch}.context_length": 131072, "{arch}.rope.scaling.type": "linear",
                                                    "{arch}.rope.scaling.factor": 8.0},
     "64 tokenizer entries beyond token_embd's 768 rows dropped; 5 tensors of the vision tower (v.*, mm.*) not read"),
    ("gemma2-tiny", "gemma2", "default", "F32", {}, None),
    ("qwen2-tiny", "qwen2", "qwen2", "F32", {}, None),
    ("llama-tiny", "llama", "llama-bpe", "F32", {}, None),
    ("olmo2-tiny", "olmo3", "qwen2", "F32", {"{arch}.attention.sliding_window": 4096,
                                              "{arch}.attention.sliding_window_pattern": [True, True]},
     "architecture olmo3 read as olmo2"),
    ("gpt-oss-tiny", "gptoss", "gpt-4o", "MXFP4", {},
     "2 tensors *.attn_sinks* renamed *.attn_sinks.weight*; 2 tensors *.ffn_norm* renamed *.post_attention_norm*"),
]


@pytest.mark.parametrize("name, variant, pre, quant, meta, note", SAME, ids=[s[1] for s in SAME])
def test_an_ollama_blob_gives_the_numbers_of_the_file_llama_cpp_writes(gguf_of_folder, tmp_path, name, variant, pre,
                                                                       quant, meta, note):
    blob = write_ollama_blob(DATA / name, tmp_path / f"sha256-{'0' * 64}", variant,
                             pre="default" if variant == "gptoss" else pre,  # Ollama's gpt-oss blobs: GPT-2's marker
                             layer_types=[True, True] if variant == "olmo3" else None)
    o, g = tracer.load(str(blob)), tracer.load(str(gguf_of_folder(DATA / name, pre, quant, meta=meta)))
    assert o.config == g.config
    assert sorted(o.params) == sorted(g.params)
    tol = 1e-6 if variant == "llama" else 0  # Llama 3's rope factors: Ollama's float32 arithmetic, llama.cpp's float64
    for k in g.params:
        np.testing.assert_allclose(o.params[k], g.params[k], rtol=0, atol=tol, err_msg=k)
    assert o.tokenizer.encode(TEXT) == g.tokenizer.encode(TEXT)
    ref = load_npz(DATA / name / "reference.npz")
    for k in (0, 1):
        ids = [int(i) for i in ref[f"input_ids_{k}"]]
        np.testing.assert_allclose(o.run(ids)["logits"], g.run(ids)["logits"], rtol=0, atol=1e-5 if tol else 0)
    assert {k: (s.dtype, s.tensor) for k, s in o.storage.items()} == {k: (s.dtype, s.tensor) for k, s in g.storage.items()}
    if note is None:
        assert o.notes == ()
    else:
        assert len(o.notes) == 1 and note in o.notes[0] and "through Ollama's compat layer" in o.notes[0], o.notes


def test_gemma3_4b_blobs_get_the_scaling_and_template_they_dropped(tmp_path):
    """The multimodal converter wrote no ε, no RoPE base and no scaling: llama.cpp's defaults for Gemma 3, and the
    4B+ models' linear ×8 on the global layers (context_length 131072), are supplied; the tokenizer is cut to the
    embedding's rows (the image tokens it left in dropped) and Gemma's chat template, which the blob lacks, is used."""
    m = tracer.load(str(write_ollama_blob(DATA / "gemma3-tiny", tmp_path / "b.gguf", "gemma3-4b")))
    assert m.config.rope_scaling == {"rope_type": "linear", "factor": 8.0}
    assert m.config.rope_theta == 1e6 and m.config.rope_local_theta == 1e4
    assert m.config.ln_eps == pytest.approx(1e-6, rel=1e-6) and m.config.d_vocab == 768
    from tracer.tokenizers.chat import render_chat

    text = render_chat(m.tokenizer.chat_template, [{"role": "user", "content": " hi "}], bos_token="<bos>")
    assert text == "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
    with pytest.raises(TracerError, match="System role not supported"):
        render_chat(m.tokenizer.chat_template, [{"role": "system", "content": "x"}], bos_token="<bos>")


@pytest.mark.parametrize("name, variant, says", [
    ("gemma3-tiny", "embeddinggemma", "is EmbeddingGemma (dense.0.weight): llama.cpp reads it as gemma-embedding"),
    ("mixtral-tiny", "mixtral", "(a Mixtral) stores each expert's w2 (the down projection) as ffn_up_exps"),
    ("phi3-tiny", "phi3", "tensor 'rope_factors_long.weight' has a dimension of 0"),
])
def test_blobs_that_need_a_fix_no_one_makes_are_refused_by_name(tmp_path, monkeypatch, runner, name, variant, says):
    from tracer.cli import app

    from .test_gguf import _ollama_store

    blob = write_ollama_blob(DATA / name, tmp_path / "blob.gguf", variant)
    with pytest.raises(TracerError, match=None) as e:
        tracer.load(str(blob))
    assert says in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setenv("OLLAMA_MODELS", str(_ollama_store(tmp_path, blob)))
    r = runner.invoke(app, ["trace", "hi", "--model", "ollama:tiny", "-n", "1"])
    one_line(r, says)


def test_an_ollama_manifest_whose_blob_lacks_keys_is_one_line(tmp_path, monkeypatch, runner):
    """A blob without the keys its architecture needs: one line naming the blob's own keys, before any weight."""
    from tracer.cli import app

    from .test_gguf import _ollama_store

    blob = write_ollama_blob(DATA / "gpt-oss-tiny", tmp_path / "blob.gguf", "gptoss", drop=("block_count", "context_length"))
    monkeypatch.setenv("OLLAMA_MODELS", str(_ollama_store(tmp_path, blob)))
    r = runner.invoke(app, ["trace", "hi", "--model", "ollama:tiny", "-n", "1"])
    one_line(r, "this Ollama blob of gptoss lacks 'gptoss.block_count', 'gptoss.context_length', which every gpt-oss model needs")
    plain = write_ollama_blob(DATA / "qwen2-tiny", tmp_path / "q.gguf", "qwen2", pre="qwen2", drop=("attention.layer_norm_rms_epsilon",))
    (tmp_path / "q").mkdir()
    monkeypatch.setenv("OLLAMA_MODELS", str(_ollama_store(tmp_path / "q", plain)))
    one_line(runner.invoke(app, ["trace", "hi", "--model", "ollama:tiny", "-n", "1"]),
             "this Ollama blob of qwen2 lacks 'qwen2.attention.layer_norm_rms_epsilon'")


@pytest.mark.slow
def test_a_damaged_blob_is_refused_within_limits(tmp_path, limited):
    """The same refusal of a blob given by its path in the store (sha256-…), in a process of its own under 1 GiB
    of address space, in the time a refusal takes."""
    blob = write_ollama_blob(DATA / "gpt-oss-tiny", tmp_path / f"sha256-{'a' * 64}", "gptoss", drop=("attention.head_count",))
    r = limited("trace", "hi", "--model", blob, seconds=10)
    one_line(SimpleNamespace(exit_code=r.returncode, stderr=r.stderr, stdout=r.stdout), "lacks 'gptoss.attention.head_count'")
    assert r.seconds < FAST + 3


def _fake(meta: dict, name: str = "model.gguf") -> SimpleNamespace:
    return SimpleNamespace(metadata=meta, types={}, tensors={}, path=Path(name))


def test_llama3s_tokenizer_gap_is_filled_in_ollama_blobs_only():
    """handle_llama3_metadata: a Llama 3 vocabulary with no pre-tokenizer (or "default") and <|end_of_text|> as its
    end gets llama-bpe and <|eot_id|> in an Ollama blob; a llama.cpp file with the same keys keeps them (llama.cpp
    itself changes nothing), and so does an Ollama blob that names its own."""
    from tracer.readers.gguf import ARCHITECTURES
    from tracer.readers.ollama_compat import translate as translated

    def translate(f, where, name=None):
        return translated(f, where, name, ARCHITECTURES)

    tokens = [f"t{i}" for i in range(128010)]
    tokens[128006], tokens[128009] = "<|start_header_id|>", "<|eot_id|>"
    meta = {"general.architecture": "llama", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.pre": "default",
            "tokenizer.ggml.eos_token_id": 128001, **{f"llama.{k}": 1 for k in ("block_count", "embedding_length",
            "feed_forward_length", "attention.head_count", "context_length", "attention.layer_norm_rms_epsilon")}}
    f = _fake(dict(meta))
    assert translate(f, Path("model.gguf")) == () and f.metadata["tokenizer.ggml.pre"] == "default"
    f = _fake(dict(meta))
    notes = translate(f, Path("blob"), "ollama:llama3:8b")
    assert f.metadata["tokenizer.ggml.pre"] == "llama-bpe" and f.metadata["tokenizer.ggml.eos_token_id"] == 128009
    assert "<|eot_id|> (128009)" in notes[0]
    f = _fake({**meta, "tokenizer.ggml.pre": "smaug-bpe", "tokenizer.ggml.eos_token_id": 128009})
    assert translate(f, Path(f"sha256-{'1' * 64}")) == ()
    f = _fake({**meta, "llama.rope.scaling.attn_factor": 1.2})
    with pytest.raises(TracerError, match="rope.scaling.attn_factor 1.2: llama.cpp multiplies every rotated Q and K"):
        translate(f, Path("blob"), "ollama:x")


def test_models_lists_an_ollama_blob_as_llama_cpp_reads_it_and_its_name_loads_it(tmp_path, monkeypatch, runner):
    from tracer.cli import app

    from .test_gguf import _ollama_store

    blob = write_ollama_blob(DATA / "gpt-oss-tiny", tmp_path / "blob.gguf", "gptoss")
    monkeypatch.setenv("OLLAMA_MODELS", str(_ollama_store(tmp_path, blob)))
    monkeypatch.setenv("LMSTUDIO_MODELS", str(tmp_path / "none"))
    r = runner.invoke(app, ["models"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if "ollama:tiny:latest" in x)
    assert "gpt-oss" in line and "MXFP4" in line, line
    lazy, eager = tracer.load("ollama:tiny"), tracer.load(str(blob))  # read layer by layer from the view, or at once
    np.testing.assert_array_equal(lazy.run([1, 2, 3])["logits"], eager.run([1, 2, 3])["logits"])
    assert lazy.storage["blocks.0.attn.W_O"].tensor == "blk.0.attn_output.weight"
    assert lazy.notes[0].startswith("ollama:tiny: an Ollama blob of gptoss") and eager.notes[0].startswith("blob.gguf: ")


@pytest.mark.parametrize("variant, name", [("gptoss", "gpt-oss-tiny"), ("gemma3-4b", "gemma3-tiny")])
def test_an_ollama_blob_runs_layer_by_layer_from_its_translated_view(tmp_path, variant, name):
    """Streamed, each layer's tensors are found under the names llama.cpp reads (gpt-oss's attn_output, its
    sinks' .weight) and the vision tower stays unread: the numbers are those of the blob expanded whole."""
    from .test_memory import PROMPT, assert_same_arrays, one_layer_budget

    whole, streamed = one_layer_budget(write_ollama_blob(DATA / name, tmp_path / "b.gguf", variant))
    assert streamed.streamed
    assert_same_arrays(whole.run(PROMPT), streamed.run(PROMPT))
