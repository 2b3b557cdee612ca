"""The Llama / Qwen2 / Mistral fixtures of tests/data/ (tools/make_family_fixtures.py) agree with
themselves: files present, weights shaped as config.json says, tokenizer.json as large as the
vocabulary and giving the prompts' ids, reference.npz shaped and consistent (greedy tokens are the
argmax of the logits, with and without the cache, attention rows are causal and sum to 1). No torch:
these check the fixtures, not tracer's decoder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tracer.formats.files import load_npz, load_safetensors, read_safetensors_header
from tracer.tokenizers.hf_tokenizer import HFTokenizer

DATA = Path(__file__).parent / "data"
FOLDERS = ["llama-tiny", "llama-tiny-bf16", "qwen2-tiny", "mistral-tiny", "qwen3-tiny", "olmo2-tiny", "phi3-tiny", "gemma3-tiny", "gemma2-tiny"]
N_PROMPTS, NEW = 2, 8


def _config(name: str) -> dict:
    return json.loads((DATA / name / "config.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", FOLDERS)
def test_folder_has_the_files_and_stays_small(name):
    folder = DATA / name
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "reference.npz", "tokenizer.json"]
    assert sum(p.stat().st_size for p in folder.iterdir()) < 2_000_000


@pytest.mark.parametrize("name", FOLDERS)
def test_weights_have_the_shapes_config_json_gives(name):
    cfg = _config(name)
    d, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or d // heads
    header, _ = read_safetensors_header(DATA / name / "model.safetensors")
    header.pop("__metadata__", None)
    want = {"model.embed_tokens.weight": [cfg["vocab_size"], d], "model.norm.weight": [d]}
    if not cfg["tie_word_embeddings"]:
        want["lm_head.weight"] = [cfg["vocab_size"], d]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        want |= {p + "input_layernorm.weight": [d], p + "post_attention_layernorm.weight": [d],
                 p + "self_attn.q_proj.weight": [heads * hd, d], p + "self_attn.k_proj.weight": [kv * hd, d],
                 p + "self_attn.v_proj.weight": [kv * hd, d], p + "self_attn.o_proj.weight": [d, heads * hd],
                 p + "mlp.gate_proj.weight": [cfg["intermediate_size"], d], p + "mlp.up_proj.weight": [cfg["intermediate_size"], d],
                 p + "mlp.down_proj.weight": [d, cfg["intermediate_size"]]}
        if cfg["model_type"] == "qwen2":
            want |= {p + "self_attn.q_proj.bias": [heads * hd], p + "self_attn.k_proj.bias": [kv * hd],
                     p + "self_attn.v_proj.bias": [kv * hd]}
        if cfg["model_type"] == "qwen3":
            want |= {p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd]}
        if cfg["model_type"] == "gemma3_text":  # four norms per layer, per-head Q/K norms
            want |= {p + "pre_feedforward_layernorm.weight": [d], p + "post_feedforward_layernorm.weight": [d],
                     p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd]}
        if cfg["model_type"] == "gemma2":  # four norms per layer, no Q/K norms
            want |= {p + "pre_feedforward_layernorm.weight": [d], p + "post_feedforward_layernorm.weight": [d]}
        if cfg["model_type"] == "phi3":  # Q, K, V in one matrix, gate and up in another
            for part in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
                del want[p + part + ".weight"]
            want |= {p + "self_attn.qkv_proj.weight": [(heads + 2 * kv) * hd, d],
                     p + "mlp.gate_up_proj.weight": [2 * cfg["intermediate_size"], d]}
        if cfg["model_type"] == "olmo2":  # norms after the sublayers (none before), Q and K normalized whole
            del want[p + "input_layernorm.weight"]
            want |= {p + "post_feedforward_layernorm.weight": [d], p + "self_attn.q_norm.weight": [heads * hd],
                     p + "self_attn.k_norm.weight": [kv * hd]}
    assert {k: v["shape"] for k, v in header.items()} == want
    dtype = "BF16" if name.endswith("bf16") else "F32"
    assert {v["dtype"] for v in header.values()} == {dtype} and cfg["dtype"] == {"BF16": "bfloat16", "F32": "float32"}[dtype]


def test_the_families_cover_what_issue_15_needs():
    llama, qwen, mistral = _config("llama-tiny"), _config("qwen2-tiny"), _config("mistral-tiny")
    assert llama["tie_word_embeddings"] and llama["rope_parameters"]["rope_type"] == "llama3"
    assert not qwen["tie_word_embeddings"] and qwen["rope_parameters"]["rope_theta"] == 1e6
    assert mistral["head_dim"] * mistral["num_attention_heads"] != mistral["hidden_size"] and mistral["sliding_window"] == 64
    for cfg in (llama, qwen, mistral):
        assert cfg["num_key_value_heads"] < cfg["num_attention_heads"]  # grouped-query attention


def test_bf16_copy_is_llama_tiny_rounded_to_bfloat16():
    f32, _ = load_safetensors(DATA / "llama-tiny" / "model.safetensors", mmap=False)
    bf16, _ = load_safetensors(DATA / "llama-tiny-bf16" / "model.safetensors", mmap=False)
    assert f32.keys() == bf16.keys()
    for k, v in f32.items():
        bits = np.ascontiguousarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
        rounded = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)  # nearest even
        assert np.array_equal(bf16[k], rounded), k
    assert _config("llama-tiny-bf16") | {"dtype": "float32"} == _config("llama-tiny")


@pytest.mark.parametrize("name", FOLDERS)
def test_tokenizer_json_matches_the_vocabulary_and_the_prompts(name):
    cfg, ref = _config(name), load_npz(DATA / name / "reference.npz")
    tok = HFTokenizer(DATA / name)
    assert tok.n_vocab == cfg["vocab_size"]
    assert tok.end_id == cfg["eos_token_id"]
    for k in range(N_PROMPTS):
        assert tok.encode(str(ref[f"prompt_{k}"])) == ref[f"input_ids_{k}"].tolist()
    if cfg.get("bos_token_id") is not None and tok.before:
        assert tok.before == [cfg["bos_token_id"]]


@pytest.mark.parametrize("name", FOLDERS)
def test_reference_shapes_and_consistency(name):
    cfg, ref = _config(name), load_npz(DATA / name / "reference.npz")
    layers, heads, d, vocab = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["hidden_size"], cfg["vocab_size"]
    assert all(a.dtype != object for a in ref.values())
    for k in range(N_PROMPTS):
        n = len(ref[f"input_ids_{k}"])
        window = None if "sliding_attention" in (cfg.get("layer_types") or []) else cfg.get("sliding_window")  # Gemma 3's hides keys
        assert n + NEW <= (window or n + NEW) <= cfg["max_position_embeddings"]
        logits, hidden, attn = ref[f"logits_{k}"], ref[f"hidden_states_{k}"], ref[f"attentions_{k}"]
        assert logits.shape == (n, vocab) and hidden.shape == (layers + 1, n, d) and attn.shape == (layers, heads, n, n)
        assert np.allclose(attn.sum(-1), 1, atol=1e-5) and np.all(np.triu(attn, 1) == 0)
        assert attn.max(-1).mean() > 0.3  # patterns far from uniform
        greedy = ref[f"greedy_ids_{k}"]
        assert greedy.shape == (NEW,) and np.array_equal(greedy, ref[f"greedy_ids_nocache_{k}"])
        assert greedy[0] == logits[-1].argmax() and np.all(ref[f"greedy_margins_{k}"] > 1e-3)
        assert ref[f"step_input_{k}"].tolist() == [greedy[0]]
        assert ref[f"step_logits_{k}"].shape == (vocab,) and ref[f"step_logits_{k}"].argmax() == greedy[1]
