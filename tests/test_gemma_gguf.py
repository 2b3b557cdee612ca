"""Gemma 2 and Gemma 3 as GGUF files: the gemma2-tiny and gemma3-tiny fixtures written as
llama.cpp's convert_hf_to_gguf.py writes them (Gemma2Model / Gemma3Model: norm weights stored with
the 1 added, gguf's own tensor map, the soft-caps and window as metadata, no query_pre_attn_scalar,
no layer types, no local RoPE base) give the numbers of the same model as llama.cpp reads such a
file: scores ÷ √key_length, the sliding window on the layers llama.cpp's pattern picks, base 10000
there. That model is the fixture's config.json changed to llama.cpp's settings, run by tracer from
its folder and by transformers; and the rules llama.cpp applies to other sizes, and the metadata
tracer refuses, in one line each."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.errors import TracerError
from tracer.formats.files import load_npz

DATA = Path(__file__).parent / "data"
pytest.importorskip("gguf")

# the fixture's config.json as llama.cpp reads its GGUF file: scores ÷ √head_dim (32, not the fixture's
# query_pre_attn_scalar 24), and for Gemma 3 the window on layers 0–4 of every 6 (both of the fixture's 2)
AS_LLAMA_CPP = {"gemma2-tiny": {"query_pre_attn_scalar": 32},
                "gemma3-tiny": {"query_pre_attn_scalar": 32, "layer_types": ["sliding_attention"] * 2}}


def _ids(name: str) -> list[list[int]]:
    ref = load_npz(DATA / name / "reference.npz")
    return [[int(i) for i in ref[f"input_ids_{k}"]] for k in (0, 1)]


def _transformers(folder: Path, prompts: list[list[int]]) -> list[dict]:
    """transformers' logits, attention patterns and 8 greedy tokens for the folder's model (eager attention)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    out = []
    for ids in prompts:
        x = torch.tensor([ids])
        with torch.no_grad():
            run = model(x, output_attentions=True)
            greedy = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=8, min_new_tokens=0,
                                    pad_token_id=0)[0, len(ids):]
        out.append({"logits": run.logits[0].numpy(), "patterns": [a[0].numpy() for a in run.attentions],
                    "greedy": greedy.tolist()})
    return out


@pytest.mark.parametrize("name", ["gemma2-tiny", "gemma3-tiny"])
def test_a_gemma_gguf_file_gives_the_numbers_llama_cpp_reads_from_it(gguf_of_folder, family_copy, tmp_path, name):
    g = tracer.load(str(gguf_of_folder(DATA / name, "default")))
    folder = family_copy(tmp_path, name, **AS_LLAMA_CPP[name])
    f = tracer.load(str(folder))
    assert {**g.config.to_dict(), "ln_eps": 0} == {**f.config.to_dict(), "ln_eps": 0}  # GGUF keeps ε as float32
    assert g.config.attn_scalar == 32.0 and g.config.windowed == ((0,) if name == "gemma2-tiny" else (0, 1))
    for k in f.params:  # the 1 the converter added to each norm weight is taken off again
        np.testing.assert_allclose(g.params[k], f.params[k], rtol=0, atol=1e-6, err_msg=k)
    assert g.storage["blocks.0.ln2.w"].tensor == "blk.0.ffn_norm.weight"
    assert g.storage["blocks.1.ln1_post.w"].tensor == "blk.1.post_attention_norm.weight"
    assert g.storage["blocks.1.ln2_post.w"].tensor == "blk.1.post_ffw_norm.weight"
    prompts = _ids(name)
    assert max(map(len, prompts)) > 6  # longer than the window: the sliding layers hide keys
    refs = _transformers(folder, prompts)
    for ids, ref in zip(prompts, refs):
        tg, tf = g.run(ids), f.run(ids)
        np.testing.assert_allclose(tg["logits"], ref["logits"], rtol=0, atol=1e-4 * max(1.0, np.abs(ref["logits"]).max()))
        np.testing.assert_allclose(tg["logits"], tf["logits"], rtol=0, atol=1e-5)
        for l in range(g.config.n_layers):
            np.testing.assert_allclose(tg[f"blocks.{l}.attn.hook_pattern"], ref["patterns"][l], rtol=0, atol=1e-5)
            np.testing.assert_allclose(tg[f"blocks.{l}.hook_resid_pre"], tf[f"blocks.{l}.hook_resid_pre"], rtol=0, atol=1e-5)
        for cache in (True, False):
            assert g.generate(ids, max_new_tokens=8, cache=cache).generated_ids == ref["greedy"], (name, cache)


def test_the_fixtures_own_settings_are_not_what_llama_cpp_reads(gguf_of_folder):
    """The gemma3-tiny folder windows layer 0 only and scales by √24; its GGUF file cannot say so, and
    tracer does with it what llama.cpp does (so its logits differ from the folder's)."""
    g = tracer.load(str(gguf_of_folder(DATA / "gemma3-tiny", "default")))
    ref = load_npz(DATA / "gemma3-tiny" / "reference.npz")
    t = g.run([int(i) for i in ref["input_ids_0"]])
    assert np.abs(t["logits"] - ref["logits_0"]).max() > 1e-2


def _settings(arch: str, n_layers: int, **meta) -> dict:
    from tracer.readers.gguf import config_json_of

    base = {"general.architecture": arch, f"{arch}.block_count": n_layers, f"{arch}.embedding_length": 64,
            f"{arch}.feed_forward_length": 128, f"{arch}.attention.head_count": 4, f"{arch}.attention.head_count_kv": 2,
            f"{arch}.context_length": 128, f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
            f"{arch}.attention.key_length": 32, f"{arch}.vocab_size": 768}
    meta = {k.format(arch=arch): v for k, v in meta.items()}
    return config_json_of({**base, **{k: v for k, v in meta.items() if v is not None}}, {}, Path("m.gguf"))


def test_llama_cpp_rules_for_what_a_gemma_file_does_not_say():
    g2 = _settings("gemma2", 5)
    assert g2["layer_types"] == ["sliding_attention", "full_attention"] * 2 + ["sliding_attention"]
    assert (g2["sliding_window"], g2["attn_logit_softcapping"], g2["final_logit_softcapping"]) == (4096, 50.0, 30.0)
    assert g2["query_pre_attn_scalar"] == 32 and "rope_local_base_freq" not in g2
    assert _settings("gemma2", 46)["query_pre_attn_scalar"] == 16  # the 27B model: 64 / 4 heads, not key_length
    g3 = _settings("gemma3", 12, **{"{arch}.attention.sliding_window": 512})
    assert [l for l, t in enumerate(g3["layer_types"]) if t == "full_attention"] == [5, 11]
    assert (g3["sliding_window"], g3["rope_local_base_freq"], g3["query_pre_attn_scalar"]) == (512, 10000.0, 32)
    assert "attn_logit_softcapping" not in g3 and "final_logit_softcapping" not in g3
    assert "final_logit_softcapping" not in _settings("gemma3", 2, **{"{arch}.final_logit_softcapping": 0.0})  # 0: none
    assert _settings("gemma3", 62, **{"{arch}.attention.sliding_window": 512})["query_pre_attn_scalar"] == 16
    none = _settings("gemma3", 3)  # no window in the file: none on any layer
    assert none["layer_types"] == ["full_attention"] * 3 and "sliding_window" not in none
    given = _settings("gemma3", 3, **{"{arch}.attention.sliding_window": 8, "{arch}.attention.sliding_window_pattern": [False, True, False],
                                      "{arch}.rope.freq_base_swa": 5e4})
    assert given["layer_types"] == ["full_attention", "sliding_attention", "full_attention"] and given["rope_local_base_freq"] == 5e4
    assert _settings("gemma2", 4, **{"{arch}.attention.sliding_window_pattern": 4})["layer_types"] == [
        "sliding_attention"] * 3 + ["full_attention"]


@pytest.mark.parametrize("name, meta, says", [
    ("gemma2-tiny", {"{arch}.attn_logit_softcapping": 0.0}, "'gemma2.attn_logit_softcapping' must be a number > 0 .*, got 0"),
    ("gemma2-tiny", {"{arch}.final_logit_softcapping": -30.0}, "'gemma2.final_logit_softcapping' must be a number > 0 .*, got -30"),
    ("gemma3-tiny", {"{arch}.final_logit_softcapping": 30.0}, "final_logit_softcapping 30 is not supported"),
    ("gemma3-tiny", {"{arch}.attention.sliding_window_pattern": [True, False, True]},
     "'gemma3.attention.sliding_window_pattern' must be one true/false per layer .2."),
    ("gemma3-tiny", {"{arch}.attention.sliding_window_pattern": "every other"}, "must be a whole number ≥ 0 or a list"),
    ("gemma2-tiny", {"{arch}.attention.sliding_window": -1.0}, "'gemma2.attention.sliding_window' must be a whole number ≥ 0"),
    ("gemma2-tiny", {"{arch}.attention.key_length": 16, "{arch}.attention.value_length": 16},
     r"tensor 'blk\.0\.attn_q\.weight' has shape \[128, 64\] but the metadata implies \[64, 64\]"),
    ("gemma3-tiny", {"{arch}.rope.scaling.type": "longrope", "{arch}.rope.scaling.factor": 8.0}, "RoPE scaling 'longrope' is not supported"),
    ("gemma3-tiny", {"{arch}.rope.scaling.type": "linear"}, "metadata 'gemma3.rope.scaling.factor' is missing"),
    ("gemma3-tiny", {"{arch}.rope.scaling.type": "linear", "{arch}.rope.scaling.factor": 0.0}, "'factor' must be a number > 0, got 0"),
    ("gemma2-tiny", {"{arch}.block_count": 10 ** 9}, "metadata 'gemma2.block_count' 1,000,000,000 is more than tracer reads"),
    ("gemma3-tiny", {"{arch}.attention.sliding_window_pattern": [True] * 5000}, r"one true/false per layer \(2\), got 5000 values"),
    ("gemma3-tiny", {"general.architecture": "gemma3n"}, "GGUF architecture 'gemma3n' is not supported; tracer reads .*gemma2, gemma3"),
])
def test_gemma_metadata_tracer_cannot_compute_is_one_line_before_any_weight(gguf_of_folder, tmp_path, name, meta, says):
    path = gguf_of_folder(DATA / name, "default", meta=meta)
    with pytest.raises(TracerError, match=says) as e:
        tracer.load(str(path))
    assert "\n" not in str(e.value)
    from tracer.formats.gguf_file import open_gguf

    start = open_gguf(path).data_start  # the same header, every tensor's bytes NaN: refused the same way, so none read
    damaged = tmp_path / "nan.gguf"
    data = bytearray(path.read_bytes())
    data[start:] = b"\xff" * (len(data) - start)
    damaged.write_bytes(bytes(data))
    with pytest.raises(TracerError, match=says):
        tracer.load(str(damaged))


def test_a_gemma2_gguf_walkthrough_says_its_switches_with_llama_cpps_settings(run_tracer, gguf_of_folder):
    path = gguf_of_folder(DATA / "gemma2-tiny", "default")
    r = run_tracer("trace", "The quick brown fox jumps over the lazy dog", "--model", str(path), "-n", "1", "--no-pager",
                   "--token", "K", env={"COLUMNS": "100"}, text=True)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    for said in ["embedding × √64", "scores ÷ √32", "scores soft-capped at 5 (Gemma 2)", "logits soft-capped at 8 (Gemma 2)",
                 "sliding window 6 on layer 0", "Gemma's RMS norm multiplies by (1 + w)", "the sliding window (6 keys) hides"]:
        assert said in out, said


def test_a_quantized_gemma_file_keeps_its_norms_in_float32_with_the_1_taken_off(gguf_of_folder):
    q8 = tracer.load(str(gguf_of_folder(DATA / "gemma3-tiny", "default", "Q8_0")))
    f32 = tracer.load(str(gguf_of_folder(DATA / "gemma3-tiny", "default")))
    assert q8.storage["blocks.0.attn.W_Q"].dtype == "Q8_0" and q8.storage["blocks.0.attn.q_norm.w"].dtype == "F32"
    np.testing.assert_array_equal(q8.params["blocks.1.ln2_post.w"], f32.params["blocks.1.ln2_post.w"])
    ids = _ids("gemma3-tiny")[1]
    a, b = q8.run(ids)["logits"], f32.run(ids)["logits"]
    assert 0 < np.linalg.norm(a - b) < 0.05 * np.linalg.norm(b)  # 8-bit blocks: close, not equal


LINEAR = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
          "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}  # Gemma 3 4B's and larger's RoPE


def test_gemma3s_linear_rope_scaling_stretches_the_global_layers_only(gguf_of_folder, family_copy, tmp_path):
    """Gemma 3 (4B and up) divides the global layers' angles by rope_scaling's factor (8) and leaves the
    sliding layers' local base alone: the angles are position × θ_i / 8 by hand, transformers computes the
    same logits and patterns from the folder, and the GGUF file (rope.scaling.type 'linear', as
    convert_hf_to_gguf.py writes it) the same as the folder."""
    folder = family_copy(tmp_path, "gemma3-tiny", rope_parameters=LINEAR)
    m, plain = tracer.load(str(folder)), tracer.load(str(DATA / "gemma3-tiny"))
    assert m.config.rope_scaling == {"rope_type": "linear", "factor": 8.0}
    ids = _ids("gemma3-tiny")[0]
    t, u = m.run(ids), plain.run(ids)
    d_head = m.config.d_head
    by_hand = np.arange(len(ids))[:, None] * (1e6 ** (-np.arange(0, d_head, 2) / d_head))[None, :] / 8  # [pos, d_head / 2]
    np.testing.assert_allclose(t["rope.hook_angle"], by_hand, rtol=1e-6, atol=1e-12)
    np.testing.assert_array_equal(t["rope.hook_angle_local"], u["rope.hook_angle_local"])  # the sliding layer: unchanged
    np.testing.assert_array_equal(t["blocks.0.hook_attn_out"], u["blocks.0.hook_attn_out"])  # layer 0 slides
    assert np.abs(t["blocks.1.attn.hook_pattern"] - u["blocks.1.attn.hook_pattern"]).max() > 1e-4  # layer 1 is global
    ref = _transformers(folder, [ids])[0]
    np.testing.assert_allclose(t["logits"], ref["logits"], rtol=0, atol=1e-4 * max(1.0, np.abs(ref["logits"]).max()))
    for l in range(m.config.n_layers):
        np.testing.assert_allclose(t[f"blocks.{l}.attn.hook_pattern"], ref["patterns"][l], rtol=0, atol=1e-5)
    four = family_copy(tmp_path / "v4", "gemma3-tiny", rope_parameters=None, rope_theta=1e6, rope_local_base_freq=1e4,
                       rope_scaling={"rope_type": "linear", "factor": 8.0})  # transformers 4's keys
    np.testing.assert_array_equal(tracer.load(str(four)).run(ids)["logits"], t["logits"])
    g = tracer.load(str(gguf_of_folder(DATA / "gemma3-tiny", "default", meta={
        "{arch}.rope.scaling.type": "linear", "{arch}.rope.scaling.factor": 8.0,
        "{arch}.attention.sliding_window_pattern": [True, False]})))
    assert g.config.rope_scaling == {"rope_type": "linear", "factor": 8.0} and g.config.windowed == (0,)
    as_read = family_copy(tmp_path / "cpp", "gemma3-tiny", rope_parameters=LINEAR, query_pre_attn_scalar=32)
    np.testing.assert_allclose(g.run(ids)["logits"], tracer.load(str(as_read)).run(ids)["logits"], rtol=0, atol=1e-5)


def test_the_header_says_the_linear_scaling():
    from tracer.core.config import Config
    from tracer.render.header import block_words

    cfg = tracer.load(str(DATA / "gemma3-tiny")).config
    from dataclasses import replace

    assert "linear scaling × 8" in block_words(replace(cfg, rope_scaling={"rope_type": "linear", "factor": 8.0}))
    assert "scaling" not in block_words(cfg)
    with pytest.raises(TracerError, match="rope_scaling.factor must be a number > 0"):
        Config.from_dict({**cfg.to_dict(), "rope_scaling": {"rope_type": "linear", "factor": -1}})
