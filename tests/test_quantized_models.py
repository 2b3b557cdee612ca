"""GGUF models stored in the lookup types: a Llama-family model written by the gguf package's
GGUFWriter with its matrices as IQ1_S … NVFP4 (`tests/quant_blocks.stored_as`: gguf's own quantization
where it has one, random blocks with sane scales where it has none) gives, read whole or layer by
layer, the logits of a NumPy forward (`tests/reference.naive_forward`) on the gguf package's own
de-quantization of the same file; the walkthrough, the demo and the page say how W_Q is stored and work
its first number out from its block's bytes; the header counts each type's bytes by role and `tracer
models` lists every type a file holds; a scale that is no number is one line and exit 2.

The model is llama-tiny's shape made four times wider (d_model and d_mlp 256: the 256-number
super-blocks need rows of 256), without its RoPE scaling, random weights, llama-tiny's tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tracer

from .quant_blocks import wide_llama
from .reference import naive_forward
from .test_memory import assert_same_arrays, assert_same_generation, one_layer_budget

gguf = pytest.importorskip("gguf")

DATA = Path(__file__).parent / "data"
NEW = ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0",
       "MXFP4", "NVFP4"]
PROMPT = [1, 770, 42]


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> Path:
    return wide_llama(tmp_path_factory.mktemp("wide"))


def gguf_params(path: Path, model) -> dict:
    """The model's parameters as the gguf package de-quantizes the file: each parameter's tensor
    (`model.storage[...].tensor`) by gguf.quants.dequantize, in TransformerLens's layout, the way
    `tracer.readers` lays out float32 GGUF tensors (checked against transformers in test_gguf.py):
    a matrix of the file (transformers' [out, in]; llama.cpp's Q and K rows put back in order) as
    tracer's parameter of that name is laid out."""
    from .conftest import _llama_cpp_permute

    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}
    cfg = model.config
    out = {}
    for tl, s in model.storage.items():
        w = np.asarray(tensors[s.tensor], np.float32)
        if s.tensor.endswith(("attn_q.weight", "attn_k.weight")):  # the inverse of llama.cpp's permutation
            heads = cfg.n_heads if "attn_q" in s.tensor else cfg.kv_heads
            order = _llama_cpp_permute(np.arange(w.shape[0])[:, None], heads)[:, 0]
            w = w[np.argsort(order)]
        mine = model.params[tl]
        if tl.endswith(("W_Q", "W_K", "W_V")):  # [out = head·d_head, d_model] → [head, d_model, d_head]
            w = w.reshape(mine.shape[0], mine.shape[2], mine.shape[1]).transpose(0, 2, 1)
        elif tl.endswith("W_O"):  # [d_model, head·d_head] → [head, d_head, d_model]
            w = w.T.reshape(mine.shape)
        elif w.ndim == 2 and tl != "W_E":  # [out, in] → [in, out]
            w = w.T
        out[tl] = w
    for tl, v in model.params.items():  # what the file does not hold: zero biases
        out.setdefault(tl, np.zeros_like(v))
    return out


@pytest.mark.parametrize("type_name", NEW)
def test_a_model_of_each_type_gives_the_logits_of_ggufs_dequantization(gguf_of_folder, wide, type_name):
    path = gguf_of_folder(wide, "llama-bpe", type_name)
    f = gguf.GGUFReader(str(path))
    assert {t.tensor_type.name for t in f.tensors} == {type_name, "F32"}  # every matrix in the type, vectors F32
    model = tracer.load(str(path))
    assert model.storage["blocks.0.attn.W_Q"].dtype == type_name and model.storage["W_E"].dtype == type_name
    ref = gguf_params(path, model)
    for tl, w in ref.items():  # the parameters themselves: gguf's numbers, bit for bit
        np.testing.assert_array_equal(model.params[tl], w, err_msg=tl)
    want = naive_forward(model.config, ref, PROMPT[:2])["logits"]
    np.testing.assert_allclose(model.run(PROMPT[:2])["logits"], want, rtol=0, atol=2e-4 * max(1, np.abs(want).max()))


@pytest.mark.parametrize("type_name", ["MXFP4", "IQ4_XS", "IQ3_S", "IQ2_XXS", "TQ1_0", "NVFP4"])
def test_layer_by_layer_gives_exactly_the_expanded_numbers(gguf_of_folder, wide, type_name):
    """Memory-mapped and expanded a layer at a time (a budget of about one layer), the embedding's rows
    and the tied unembedding read in row blocks: the same numbers as the model expanded whole."""
    whole, streamed = one_layer_budget(gguf_of_folder(wide, "llama-bpe", type_name))
    assert streamed.streamed and not whole.streamed and streamed.expansion["unembedding"] == "row blocks"
    assert_same_arrays(whole.run(PROMPT), streamed.run(PROMPT))
    assert_same_generation(whole, streamed)


@pytest.mark.parametrize("type_name, says", [
    ("IQ4_NL", r"d = [-0-9.e]+ \(float16\); the 4-bit index \d+ selects kvalues_iq4nl\[\d+\] = -?\d+ from the 16-entry "
               r"non-uniform table; w = d·kvalues_iq4nl\[q\] = "),
    ("MXFP4", r"the E8M0 scale byte e = \d+ is 2\^\(e − 127\) = 2\^-?\d+ = [0-9.e-]+, halved to [0-9.e-]+ because the "
              r"table holds the E2M1 values doubled; the 4-bit code \d+ is the E2M1 float -?[0-9.]+ "),
    ("IQ3_S", r"sub-block 0's 4-bit scale s = \d+, so d·\(1 \+ 2s\) = [-0-9.e]+; the 9-bit index \d+ selects row \d+ of "
              r"iq3s_grid \(512 rows of 4\): \[\d+, \d+, \d+, \d+\]; its number 0 is \d+; the sign byte 0b[01]{8}: its "
              r"bit 0 is [01], so -?\d+; w = "),
    ("IQ2_XXS", r"the 7-bit sign index \d+ gives ksigns_iq2xs\[\d+\] = 0b[01]{8} \(bit 7 makes the count of ones even\)"),
    ("IQ1_M", r"selects row \d+ of iq1s_grid \(2048 rows of 8\): \[(-?[01], ){7}-?[01]\]; its number 0 is -?[01]; bit 3 of "
              r"byte 32 gives the shift delta = -?0.125"),
    ("TQ1_0", r"byte 0 = \d+ holds five base-3 digits; digit 0, \(\(byte·3\^0\) mod 256\)·3 >> 8, is [012]; w = d·\(digit − 1\)"),
    ("NVFP4", r"sub-block 0's UE4M3 scale byte \d+ \(4 exponent bits, 3 mantissa bits\) is "),
])
def test_the_walkthrough_demo_and_page_work_the_first_number_out(gguf_of_folder, wide, runner, type_name, says):
    import re

    from tracer.cli import app
    from tracer.render.storage import example_words

    path = gguf_of_folder(wide, "llama-bpe", type_name)
    model = tracer.load(str(path))
    ex = model.storage_examples[type_name]
    assert ex["param"] == "blocks.0.attn.W_Q" and ex["tensor"] == "blk.0.attn_q.weight"
    gen = model.generate(PROMPT[:1], max_new_tokens=1)
    words = example_words(gen.meta, "blocks.0.attn.W_Q", "W_Q of layer 0")
    assert words[0].startswith(f"W_Q of layer 0 is stored as {type_name}: ") and re.search(says, words[1]), words
    assert words[1].startswith("its first number, blk.0.attn_q.weight[0, 0], from its block's bytes: ")
    r = runner.invoke(app, ["trace", "hello", "--model", str(path), "-n", "1", "--section", "attention"])
    assert r.exit_code == 0, r.output
    assert re.search(says, " ".join(r.output.split())), r.output[:3000]  # the terminal, as the same words
    r = runner.invoke(app, ["demo", "--model", str(path), "--prompt", "hello"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert re.search(says, " ".join(r.output.split())), r.output[:3000]  # the demo's Q, K, V screen
    from tracer.render.page import page_data

    assert page_data(gen, model.tokenizer)["storage_example"] == words  # the page: the same lines


def test_the_header_counts_each_types_bytes_by_role(gguf_of_folder, wide):
    from tracer.render.storage import storage_words

    path = gguf_of_folder(wide, "llama-bpe", "IQ4_XS")
    gen = tracer.load(str(path)).generate(PROMPT[:1], max_new_tokens=1)
    info = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    attention = sum(int(info[f"blk.{l}.attn_{k}.weight"].n_bytes) for k in ("q", "k", "v", "output") for l in (0, 1))
    mlp = sum(int(info[f"blk.{l}.ffn_{k}.weight"].n_bytes) for k in ("gate", "up", "down") for l in (0, 1))
    words = storage_words(gen.meta)
    from tracer.render.fmt import size

    assert words.startswith(f"weights stored as embedding IQ4_XS ({size(info['token_embd.weight'].n_bytes)}), "
                            f"attention IQ4_XS ({size(attention)}), MLP IQ4_XS ({size(mlp)}), norms F32 ("), words
    assert "de-quantized to float32 when the model is read" in words


def test_tracer_models_lists_every_type_a_file_holds(gguf_of_folder, wide, tmp_path, monkeypatch):
    from tracer.readers.inventory import _gguf

    path = gguf_of_folder(wide, "llama-bpe", "MXFP4")
    family, size, stored, _ = _gguf(path)  # and the sampling it suggests
    assert (family, size) == ("llama", path.stat().st_size) and stored == "MXFP4, F32"


def test_a_fused_tensor_is_counted_once_and_a_trace_without_sizes_counts_parameters(gguf_of_folder):
    """Phi-3's attn_qkv is W_Q, W_K and W_V: its bytes count once, under attention. A saved trace from
    before the sizes were kept says how many parameters each type holds, as it did."""
    from tracer.render.fmt import size
    from tracer.render.storage import storage_words

    path = gguf_of_folder(DATA / "phi3-tiny", "llama-bpe", "Q8_0")
    gen = tracer.load(str(path)).generate(PROMPT[:1], max_new_tokens=1)
    info = {t.name: int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors}
    attention = sum(info[f"blk.{l}.attn_{k}.weight"] for k in ("qkv", "output") for l in (0, 1))
    assert f"attention Q8_0 ({size(attention)})" in storage_words(gen.meta)
    old = {k: v for k, v in gen.meta.items() if k not in ("storage_bytes", "storage_numbers")}
    assert storage_words(old).startswith("weights stored as Q8_0 (") and " weight tensors), F32 (" in storage_words(old)


def test_the_header_counts_the_numbers_each_storage_type_holds(runner):
    """abc's file holds its weights as float16: the header says how many numbers (3,420,608, summed here from
    the file's own tensors by the safetensors package), where it said '68 parameters' (the tensors)."""
    from safetensors.numpy import load_file

    from tracer.cli import app
    from tracer.render.storage import storage_words

    tensors = load_file(str(Path(tracer.__file__).parent / "models" / "abc" / "model.safetensors"))
    assert {str(a.dtype) for a in tensors.values()} == {"float16"}
    n = sum(a.size for a in tensors.values())
    said = storage_words(tracer.load("abc").generate("A B", max_new_tokens=0).meta)
    assert said.startswith(f"weights stored as F16 ({n:,} numbers); ") and n > 3_000_000
    r = runner.invoke(app, ["trace", "A B", "-n", "0", "--section", "tokens"], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert f"F16 ({n:,} numbers)" in " ".join(r.stdout.split()) and "parameters)" not in r.stdout


@pytest.mark.parametrize("type_name, patch, says", [
    ("MXFP4", b"\xff", "tensor 'blk.1.ffn_down.weight': block 3 of MXFP4 has the E8M0 scale 255, which is NaN"),
    ("IQ4_NL", b"\x00\x7c", "tensor 'blk.1.ffn_down.weight' holds NaN or infinite values (first at index [0, 96])"),
    ("IQ3_S", b"\xff\x7f", "tensor 'blk.1.ffn_down.weight' holds NaN or infinite values (first at index [3, 0])"),
])
@pytest.mark.parametrize("memory", [None, "2MB"])
def test_a_scale_that_is_no_number_is_one_line_and_exit_2(gguf_of_folder, wide, runner, tmp_path, type_name, patch,
                                                           says, memory):
    """Block 3 of layer 1's W_out given the E8M0 scale 255, a float16 scale of ∞ or NaN: `tracer trace`
    says which file, tensor (and block) in one line, read whole or layer by layer."""
    from tracer.cli import app

    src = gguf_of_folder(wide, "llama-bpe", type_name)
    t = next(t for t in gguf.GGUFReader(str(src)).tensors if t.name == "blk.1.ffn_down.weight")
    data = bytearray(src.read_bytes())
    at = int(t.data_offset) + 3 * gguf.GGML_QUANT_SIZES[t.tensor_type][1]
    data[at:at + len(patch)] = patch
    path = tmp_path / "bad.gguf"
    path.write_bytes(bytes(data))
    r = runner.invoke(app, ["trace", "hello", "--model", str(path), "-n", "1", *(["--memory", memory] if memory else [])])
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert r.stderr.startswith(f"tracer: {path}: {says}") and len(r.stderr.strip().splitlines()) == 1, r.stderr
