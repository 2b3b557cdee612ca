"""Families read from GGUF files: Qwen3.5 (`qwen35`), SmolLM3 (`smollm3`) and OLMo 3 (an `olmo2` file
with sliding windows), each written from its fixture folder as llama.cpp's converter writes it (tests/conftest.py,
`_write_new_family_gguf`; tests/test_gguf_converter_fixtures.py checks what is written). Read back by tracer, the F32 file
gives transformers' numbers (the folder's reference.npz): logits, every residual, the softmax layers' patterns,
Qwen3.5's recurrent state after every position, greedy tokens with and without the cache; its vocabulary gives the
folder tokenizer's ids. A Q8_0 copy, and a Q6_K copy of a wider model (rows of whole 256-number super-blocks), hold
every parameter within its storage type's step of the F32 read; a model streamed layer by layer computes exactly
the numbers of the whole read; metadata tracer cannot compute is one line naming the key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.errors import TracerError
from tracer.formats.files import load_npz

from .reference import ids

pytest.importorskip("gguf")

DATA = Path(__file__).parent / "data"
PRE = {"qwen3-5-tiny": "qwen35", "smollm3-tiny": "smaug-bpe", "olmo3-tiny": "gpt-2"}  # llama.cpp's pre-tokenizer names
ATOL = 1e-4  # float32 through four layers; logits of size ~5 (the folder reader's own tolerance)
PATTERN_ATOL = 5e-5  # OLMo 3: YaRN's attention factor (1.21) sharpens the float32 scores



@pytest.fixture(scope="module", params=list(PRE))
def read(request, gguf_of_folder):
    name = request.param
    return (name, tracer.load(str(gguf_of_folder(DATA / name, PRE[name]))), load_npz(DATA / name / "reference.npz"),
            tracer.load(str(DATA / name)))


@pytest.mark.parametrize("k", [0, 1])
def test_the_f32_file_gives_transformers_numbers(read, k):
    name, model, ref, folder = read
    t = model.run(ids(ref, k))
    np.testing.assert_allclose(t["logits"], ref[f"logits_{k}"], atol=ATOL, rtol=0, err_msg=name)
    hidden = ref[f"hidden_states_{k}"]  # [layer + 1, pos, d_model]
    for l in range(model.config.n_layers):
        np.testing.assert_allclose(t[f"blocks.{l}.hook_resid_pre"], hidden[l], atol=ATOL, rtol=0, err_msg=f"{name} {l}")
    np.testing.assert_allclose(t["unembed.hook_in"], hidden[-1], atol=ATOL, rtol=0)
    for i, l in enumerate(int(x) for x in ref["attention_layers"]):
        np.testing.assert_allclose(t[f"blocks.{l}.attn.hook_pattern"], ref[f"attentions_{k}"][i], atol=PATTERN_ATOL, rtol=0)
    for i, l in enumerate(int(x) for x in ref.get("linear_layers", [])):  # [pos, v_head, d_k, d_v]: S after each position
        np.testing.assert_allclose(t[f"blocks.{l}.attn.hook_state"], ref[f"linear_state_{k}"][i], atol=ATOL, rtol=0)
        np.testing.assert_allclose(t[f"blocks.{l}.attn.hook_decay"], ref[f"linear_g_{k}"][i], atol=1e-5, rtol=0)
    # the stored forms undone (1 + w norms, −exp(A_log), tiled value heads, permuted Q/K rows): the folder's numbers
    np.testing.assert_allclose(t["logits"], folder.run(ids(ref, k))["logits"], atol=1e-6, rtol=0)


@pytest.mark.parametrize("cache", [True, False])
def test_greedy_generation_matches_transformers(read, cache):
    name, model, ref, _ = read
    for k in (0, 1):
        assert model.generate(ids(ref, k), max_new_tokens=8, cache=cache).generated_ids == [
            int(i) for i in ref[f"greedy_ids_{k}"]], (name, k)


def test_the_config_is_the_folders(read):
    """Every switch as the folder's config.json gives it, but the norm's ε (a float32 in the file) and OLMo 3's
    YaRN attention factor, which llama.cpp computes as 1 + 0.1·ln(factor) (1.2079: the folder's own value)."""
    from tracer.core.equations import rope_attention_factor

    name, model, _, folder = read
    a, b = model.config.to_dict(), folder.config.to_dict()
    assert a.pop("ln_eps") == pytest.approx(b.pop("ln_eps"), rel=1e-7)
    assert rope_attention_factor(a.pop("rope_scaling")) == pytest.approx(rope_attention_factor(b.pop("rope_scaling")), rel=1e-12)
    assert a == b
    assert model.config.nope_layers == ((3,) if name == "smollm3-tiny" else None)  # llama.cpp's every 4th layer


AWKWARD = ["Hello, world! 12345 tokens", "  two  spaces\tand a tab\n\nnew lines", "don't I'LL we'VE", "naïve café déjà vu",
           "cafe\u0301 (a decomposed é)", "数字 1234567 and 3.14159", "emoji 🙂👍 and \u00adsoft hyphen"]


def test_the_vocabulary_gives_the_folder_tokenizers_ids(read):
    """On the reference prompts and awkward strings (a decomposed é too: Qwen3.5's tokenizer.json puts text in NFC
    first, which no GGUF key says: tracer's GGUF tokenizer does it for the `qwen35` pre-tokenizer, as transformers'
    Qwen3_5Tokenizer does; llama.cpp does not, see the test below)."""
    name, model, ref, folder = read
    for k in (0, 1):
        assert model.tokenize(str(ref[f"prompt_{k}"])) == ids(ref, k), name
    for s in AWKWARD:
        assert model.tokenize(s) == folder.tokenize(s), (name, s)


def within_step(q, f, per: int, name: str) -> None:
    """Every parameter of the quantized read `q` within one step of its storage type of the F32 read `f` (the step at
    the tensor's largest magnitude: Q8_0 max/127, Q6_K max/31), vectors (stored F32 in both) equal; and some rounded.
    (Their logits are not compared: these small models' weights, N(0, 0.15) or random, grow Q8_0's 0.4% per weight
    into logits 6–12% of their range apart by the last of four layers, Q6_K's into 8–30%: no bound would say much.)"""
    rounded = 0
    for k, want in f.params.items():
        got, want = np.asarray(q.params[k]), np.asarray(want)
        step = np.abs(want).max() / per * 1.01  # (its float16 scale rounded)
        assert np.abs(got - want).max() <= step, (name, k)
        rounded += not np.array_equal(got, want)
    assert rounded > 0


@pytest.mark.parametrize("name", list(PRE))
def test_a_q8_0_copy_is_the_f32_read_within_its_step(gguf_of_folder, name):
    q8 = tracer.load(str(gguf_of_folder(DATA / name, PRE[name], "Q8_0")))
    f32 = tracer.load(str(gguf_of_folder(DATA / name, PRE[name])))
    assert q8.storage["blocks.0.attn.W_Q"].dtype == "Q8_0" and q8.storage["blocks.0.mlp.W_out"].dtype == "Q8_0"
    within_step(q8, f32, 127, name)


WIDE = {"hidden_size": 256, "intermediate_size": 256, "head_dim": 64, "linear_key_head_dim": 64,
        "linear_value_head_dim": 64}  # every matrix's rows whole super-blocks of 256 (d_v = d_k, as llama.cpp needs)


def wide_copy(name: str, out: Path) -> Path:
    """tests/data/NAME made 4 times wider (WIDE) with random weights of the same kinds (Qwen3.5's (1 + w) norms
    around 0, the others' around 1, A_log = ln U(1, 16)), its tokenizer.json copied; the tensors' names and shapes
    are the ones the folder reader checks."""
    from safetensors.numpy import save_file

    from tracer.readers.families import family_module

    cfg = json.loads((DATA / name / "config.json").read_text())
    cfg.update({k: v for k, v in WIDE.items() if k in cfg or k == "head_dim"})
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(cfg))
    shutil.copy(DATA / name / "tokenizer.json", out)
    fam = family_module(cfg["model_type"])
    shapes = fam.hf_shapes(fam.config_of(cfg, out), cfg, out)
    rng = np.random.default_rng(0)
    qwen = cfg["model_type"] == "qwen3_5_text"

    def value(k: str, s: tuple) -> np.ndarray:
        if k.endswith("A_log"):
            return np.log(rng.uniform(1, 16, s))
        if len(s) == 1:
            return rng.normal(0, 0.2, s) if qwen and "linear_attn" not in k else 1 + rng.normal(0, 0.1, s)
        return rng.normal(0, 0.3 if "conv1d" in k else 0.06, s)

    save_file({k: value(k, s).astype(np.float32) for k, s in shapes.items()}, str(out / "model.safetensors"))
    return out


@pytest.fixture(scope="module")
def wide(tmp_path_factory, gguf_of_folder):
    """{name: (its Q6_K read, its F32 read, the Q6_K file)} for the three wide copies."""
    out = {}
    for name, pre in PRE.items():
        folder = wide_copy(name, tmp_path_factory.mktemp("wide") / name)
        path = gguf_of_folder(folder, pre, "Q6_K")
        out[name] = tracer.load(str(path)), tracer.load(str(gguf_of_folder(folder, pre))), path
    return out


@pytest.mark.parametrize("name", list(PRE))
def test_a_q6_k_copy_is_the_f32_read_within_its_step(wide, name):
    """Q6_K: a 6-bit integer times an 8-bit scale per 16 numbers times a float16 one per 256 (tests/quant_blocks.py's
    quantize_q6_k); Qwen3.5's tiled value heads, −exp(A_log) and 1 + w norms undone after the expansion as in F32."""
    q6, f32, _ = wide[name]
    assert q6.storage["blocks.0.attn.W_Q"].dtype == "Q6_K" and q6.storage["blocks.0.attn.W_O"].dtype == "Q6_K"
    within_step(q6, f32, 31, name)


def one_layer_budget(path) -> tuple:
    """The file read whole, and the same file under a budget of its largest layer (streamed)."""
    whole = tracer.load(str(path))
    streamed = tracer.load(str(path), memory=whole.expansion["layer_bytes"])
    return whole, streamed


def same_arrays(a, b) -> None:
    assert set(a.arrays) == set(b.arrays)
    for k in a.arrays:
        assert np.array_equal(np.asarray(a[k]), np.asarray(b[k]), equal_nan=True), k


@pytest.mark.parametrize("name, quant", [(n, q) for n in PRE for q in ("F32", "Q8_0")])
def test_streamed_layer_by_layer_the_numbers_are_the_whole_reads(gguf_of_folder, name, quant):
    """Layer l's tensors expanded when a pass reaches it, translated as layer l (Qwen3.5's layers of two kinds each
    as its own kind), with the cache (Qwen3.5's state and convolution inputs) carried between passes."""
    whole, streamed = one_layer_budget(gguf_of_folder(DATA / name, PRE[name], quant))
    assert not whole.streamed and streamed.streamed and streamed.expansion["mode"] == "layer by layer"
    prompt = [1, 5, 9, 2, 7]
    same_arrays(whole.run(prompt), streamed.run(prompt))
    ga, gb = whole.generate(prompt, max_new_tokens=3), streamed.generate(prompt, max_new_tokens=3)
    assert ga.generated_ids == gb.generated_ids and len(ga.steps) == len(gb.steps)
    for sa, sb in zip(ga.steps, gb.steps):
        same_arrays(sa, sb)


def test_a_streamed_q6_k_read_is_the_whole_one(wide):
    whole, streamed = one_layer_budget(wide["qwen3-5-tiny"][2])
    assert streamed.streamed
    same_arrays(whole.run([1, 5, 9, 2, 7]), streamed.run([1, 5, 9, 2, 7]))


@pytest.mark.parametrize("meta, says", [
    ({"{arch}.ssm.conv_kernel": 0}, r"metadata 'qwen35\.ssm\.conv_kernel' must be a whole number ≥ 1 \(the convolution's taps\), got 0"),
    ({"{arch}.ssm.conv_kernel": 3}, r"tensor 'blk\.0\.ssm_conv1d\.weight' has shape \[64, 4\] but the metadata implies \[64, 3\] "
                                    r"\(sizes from qwen35\.ssm\.conv_kernel 3, qwen35\.ssm\.state_size 8"),
    ({"{arch}.ssm.state_size": 4}, r"tensor 'blk\.0\.attn_qkv\.weight' has shape \[64, 64\] but the metadata implies \[48, 64\] "
                                   r"\(sizes from .*qwen35\.ssm\.state_size 4, qwen35\.ssm\.group_count 2"),
    ({"{arch}.ssm.time_step_rank": 3},
     r"'qwen35\.ssm\.time_step_rank' 3 \(value heads\) is not a multiple of 'qwen35\.ssm\.group_count' 2"),
    ({"{arch}.ssm.inner_size": 30}, r"'qwen35\.ssm\.inner_size' 30 is not 'qwen35\.ssm\.time_step_rank' 4 value heads of one size"),
    ({"{arch}.ssm.group_count": None}, r"metadata 'qwen35\.ssm\.group_count' is missing"),
    ({"{arch}.ssm.state_size": 2.5}, r"metadata 'qwen35\.ssm\.state_size' must be a whole number, got 2\.5"),
    ({"{arch}.full_attention_interval": 0}, r"'qwen35\.full_attention_interval' must be a whole number ≥ 1 \(every how many"),
    ({"{arch}.full_attention_interval": 4}, r"missing tensor 'blk\.1\.attn_qkv\.weight' \(the qwen3_5_text block needs it\) "
                                            r"\(each layer's kind by qwen35\.full_attention_interval 4\)"),
    ({"{arch}.attention.recurrent_layers": [True, False]},
     r"'qwen35\.attention\.recurrent_layers' must be one true/false per layer \(4\), got 2 values"),
    ({"{arch}.rope.dimension_count": 7}, r"'qwen35\.rope\.dimension_count' 7 must be an even number of a head's 32 dimensions"),
    ({"{arch}.nextn_predict_layers": 4}, r"'qwen35\.nextn_predict_layers' 4 leaves no layers of the 4 \('qwen35\.block_count'\)"),
    ({"{arch}.block_count": 10 ** 9}, r"'qwen35\.block_count' 1,000,000,000 is more than tracer reads"),
])
def test_qwen35_metadata_tracer_cannot_compute_is_one_line(gguf_of_folder, meta, says):
    with pytest.raises(TracerError, match=says) as e:
        tracer.load(str(gguf_of_folder(DATA / "qwen3-5-tiny", "qwen35", meta=meta)))
    assert "\n" not in str(e.value)


def test_the_layer_kinds_may_be_listed(gguf_of_folder):
    """`qwen35.attention.recurrent_layers` (newer files) instead of full_attention_interval: the same layers."""
    listed = tracer.load(str(gguf_of_folder(DATA / "qwen3-5-tiny", "qwen35", meta={
        "{arch}.attention.recurrent_layers": [True, False, True, False], "{arch}.full_attention_interval": None})))
    assert listed.config.layer_types == ("linear_attention", "gated") * 2


def test_an_ssm_a_that_is_no_negative_exponential_is_refused(gguf_of_folder, tmp_path):
    """ssm_a holds −exp(A_log), < 0: a value ≥ 0 has no A_log (ln of a number ≤ 0)."""
    gguf = pytest.importorskip("gguf")
    path = gguf_of_folder(DATA / "qwen3-5-tiny", "qwen35")
    t = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "blk.2.ssm_a")
    data = bytearray(path.read_bytes())
    data[t.data_offset:t.data_offset + 16] = np.array([-1.0, 0.5, -2.0, -3.0], dtype=np.float32).tobytes()
    (tmp_path / "bad.gguf").write_bytes(bytes(data))
    with pytest.raises(TracerError, match=r"bad\.gguf: tensor 'blk\.2\.ssm_a' holds 0\.5 at \[1\]; llama\.cpp stores "
                                          r"−exp\(A_log\), a number < 0") as e:
        tracer.load(str(tmp_path / "bad.gguf"))
    assert "\n" not in str(e.value)


def test_the_multi_token_prediction_block_after_the_trunk_is_not_read(gguf_of_folder, family_copy, tmp_path):
    """A file with `nextn_predict_layers` 1 holds one more block after the model's own (here a copy of layer 3, as
    blk.4): llama.cpp's main pass does not run it, and tracer reads the four layers before it."""
    from safetensors.numpy import load_file, save_file

    cfg = json.loads((DATA / "qwen3-5-tiny" / "config.json").read_text())
    folder = family_copy(tmp_path, "qwen3-5-tiny", num_hidden_layers=5, layer_types=cfg["layer_types"] + ["full_attention"])
    t = load_file(str(folder / "model.safetensors"))
    t.update({k.replace("layers.3.", "layers.4."): v for k, v in t.items() if ".layers.3." in k})
    save_file(t, str(folder / "model.safetensors"))
    five = tracer.load(str(gguf_of_folder(folder, "qwen35", meta={"{arch}.nextn_predict_layers": 1})))
    four = tracer.load(str(gguf_of_folder(DATA / "qwen3-5-tiny", "qwen35")))
    assert five.config.n_layers == 4
    np.testing.assert_array_equal(five.run([1, 5, 9, 2, 7])["logits"], four.run([1, 5, 9, 2, 7])["logits"])


def test_olmo3_is_read_as_llama_cpp_computes_it_and_says_where_transformers_would_differ(gguf_of_folder):
    """llama.cpp's olmo2 graph turns the sliding layers by rope.freq_base, not rope.freq_base_swa, and its loader does
    not read yarn_attn_factor (ggml multiplies by 1 + 0.1·ln 8 itself): a file whose values differ from those gives
    the same numbers as one whose do not, and the notes say what transformers would compute instead."""
    plain = tracer.load(str(gguf_of_folder(DATA / "olmo3-tiny", "gpt-2")))
    other = tracer.load(str(gguf_of_folder(DATA / "olmo3-tiny", "gpt-2", meta={
        "{arch}.rope.freq_base_swa": 10000.0, "{arch}.rope.scaling.yarn_attn_factor": 1.5})))
    assert plain.notes == ()
    assert len(other.notes) == 2 and "not by rope.freq_base_swa 10000 (transformers would use 10000)" in other.notes[0]
    assert "is 1.20794 (1 + 0.1·ln 8)" in other.notes[1] and "yarn_attn_factor 1.5" in other.notes[1]
    assert (other.config.windowed, other.config.rope_local_theta) == ((0, 1, 2), 500000.0)
    ids = [int(i) for i in load_npz(DATA / "olmo3-tiny" / "reference.npz")["input_ids_1"]]  # longer than the window of 8
    np.testing.assert_array_equal(other.run(ids)["logits"], plain.run(ids)["logits"])


def test_models_lists_their_families(tmp_path, monkeypatch, runner, gguf_of_folder):
    """`tracer models` names each file's architecture, and OLMo 3's as what tracer reads it as."""
    from tracer.cli import app

    home = tmp_path / "lms" / "someone" / "new-GGUF"
    home.mkdir(parents=True)
    for name, pre in PRE.items():
        shutil.copy(gguf_of_folder(DATA / name, pre, "Q8_0"), home / f"{name}.gguf")
    monkeypatch.setenv("LMSTUDIO_MODELS", str(tmp_path / "lms"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "none"))
    r = runner.invoke(app, ["models"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    lines = {name: next(line for line in r.output.splitlines() if f"{name}.gguf" in line) for name in PRE}
    assert "qwen35" in lines["qwen3-5-tiny"] and "smollm3" in lines["smollm3-tiny"]
    assert "olmo2 (olmo3)" in lines["olmo3-tiny"] and "Q8_0, F32" in lines["olmo3-tiny"]


@pytest.mark.slow  # 248,077 tokens and half a million merges, twice (about 40 s)
def test_the_real_qwen35_vocabulary_as_a_gguf_file_gives_tokenizers_ids(tmp_path):
    """Qwen3.5's real vocabulary (tests/conftest.py, `real_qwen35_tokenizer`) written as the converter writes a `qwen35`
    file's (gpt2 model, pre-tokenizer `qwen35`, tokens, types, merges): tracer's tokenizer of that file gives
    `tokenizers`' ids on the awkward strings of tests/test_qwen35_tokenizer.py; llama.cpp's way (follow="llama.cpp",
    no NFC) gives them on text already in NFC and splits a decomposed é otherwise."""
    import unicodedata

    gguf = pytest.importorskip("gguf")
    tokenizers = pytest.importorskip("tokenizers")
    from tracer.formats.gguf_file import open_gguf
    from tracer.tokenizers.gguf_tokenizer import tokenizer_from_gguf

    from .conftest import _gguf_vocab, real_qwen35_tokenizer
    from .test_qwen35_tokenizer import AWKWARD as HARD

    source = real_qwen35_tokenizer()
    tok = json.loads(source.read_text())
    w = gguf.GGUFWriter(str(tmp_path / "vocab.gguf"), "qwen35")
    _gguf_vocab(w, {"vocab_size": len(tok["model"]["vocab"]) + len(tok["added_tokens"]), "eos_token_id": 248046}, tok, "qwen35")
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    meta = open_gguf(tmp_path / "vocab.gguf").metadata
    ours, cpp = tokenizer_from_gguf(meta, "vocab.gguf"), tokenizer_from_gguf(meta, "vocab.gguf", follow="llama.cpp")
    ref = tokenizers.Tokenizer.from_file(str(source))
    for text in HARD:
        assert ours.encode(text) == ref.encode(text).ids, text
        nfc = unicodedata.normalize("NFC", text)
        assert cpp.encode(nfc) == ref.encode(nfc).ids, text
    assert cpp.encode("cafe\u0301") != ref.encode("cafe\u0301").ids
