"""Mixtures of experts in GGUF files (gpt-oss with F32 or MXFP4 experts, qwen3moe, qwen2moe with its shared
expert and a dense layer, olmoe, Mixtral as `llama` with expert tensors), written from the fixtures as llama.cpp's
converter writes them (tests/conftest.py `gguf_of_folder`): tracer reads each and gives the numbers of the naive
float64 forward on the file's own de-quantized weights with RoPE as llama.cpp computes it
(`moe_gguf_reference`) — logits, the routing, greedy tokens — whole and layer by layer, and the file's
tokenizer gives the folder's ids."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.formats import stored
from tracer.formats.files import load_npz
from tracer.readers.source import Source

pytest.importorskip("gguf")
DATA = Path(__file__).parent / "data"
FILES = [("gpt-oss-tiny", "gpt-2", "F32"), ("gpt-oss-tiny", "gpt-2", "MXFP4"), ("qwen3-moe-tiny", "qwen2", "F32"),
         ("olmoe-tiny", "gpt-2", "F32"), ("mixtral-tiny", "llama-bpe", "F32")]
# (qwen2-moe-tiny has a dense layer, which llama.cpp's qwen2moe cannot hold: its converter refuses the tensor.)
OWN_SPLIT = {"mixtral-tiny"}  # its tokenizer.json splits digits one by one after a prefix space: no llama.cpp rule does
ATOL = 1e-4


@pytest.fixture(scope="module", params=FILES, ids=[f"{n}-{q}" for n, _, q in FILES])
def read(request, gguf_of_folder, moe_gguf_reference):
    name, pre, quant = request.param
    path = gguf_of_folder(DATA / name, pre, quant)
    return name, path, tracer.load(str(path)), moe_gguf_reference(DATA / name, pre, quant)


def prompt(name: str, k: int) -> list[int]:
    return [int(i) for i in load_npz(DATA / name / "reference.npz")[f"input_ids_{k}"]]


@pytest.mark.parametrize("k", [0, 1])
def test_logits_and_routing_equal_the_files_naive_forward(read, k):
    name, _, model, ref = read
    t = model.run(prompt(name, k))
    np.testing.assert_allclose(t["logits"], ref[k]["logits"], atol=ATOL, rtol=0, err_msg=name)
    routed = [l for l in range(model.config.n_layers) if f"blocks.{l}.mlp.hook_expert_indices" in t.arrays]
    assert routed, name
    for i, l in enumerate(routed):
        chosen = t[f"blocks.{l}.mlp.hook_expert_indices"]
        assert np.array_equal(chosen, ref[k]["expert_indices"][i]), (name, l)
        np.testing.assert_allclose(t[f"blocks.{l}.mlp.hook_expert_weights"], ref[k]["expert_weights"][i], atol=1e-5)


def test_greedy_tokens_with_and_without_the_cache(read):
    name, _, model, ref = read
    for k in (0, 1):
        want = [int(i) for i in ref[k]["greedy_ids"]]
        assert model.generate(prompt(name, k), max_new_tokens=8).generated_ids == want, (name, k)
        assert model.generate(prompt(name, k), max_new_tokens=8, cache=False).generated_ids == want, (name, k)


def test_read_layer_by_layer_is_the_same(read, monkeypatch):
    """The file streamed (each layer's weights read when the pass reaches it, only the routed experts
    expanded) gives the whole read's logits; the file is read ahead (madvise WILLNEED) for exactly the experts
    each layer routes to, and for each next layer while a layer is expanded (after the last, the unembedding, when a pass
    reads it in row blocks)."""
    name, path, model, _ = read
    per = model.expansion["expanded_bytes"] // model.config.n_layers  # a budget of one layer
    asked, layers_ahead = [], []
    real_experts, real_layer = stored.ExpertStack.prefetch, Source.prefetch
    monkeypatch.setattr(stored.ExpertStack, "prefetch",
                        lambda self, es: asked.append((self.stored.name, sorted(es))) or real_experts(self, es))
    monkeypatch.setattr(Source, "prefetch", lambda self, l: layers_ahead.append((l, real_layer(self, l))) or 0)
    streamed = tracer.load(str(path), memory=max(per, 1))
    assert streamed.expansion["mode"] == "layer by layer" != model.expansion["mode"], streamed.expansion
    ids = prompt(name, 1)
    t = streamed.run(ids)
    np.testing.assert_allclose(t["logits"], model.run(ids)["logits"], atol=1e-6, rtol=0)
    L = model.config.n_layers
    unembed_read = streamed.expansion["unembedding"] == "row blocks"  # else expanded once: its bytes never asked again
    assert [l for l, _ in layers_ahead] == list(range(1, L + unembed_read)), layers_ahead
    assert all(n > 0 for _, n in layers_ahead), layers_ahead
    routed = {l: sorted(set(t[f"blocks.{l}.mlp.hook_expert_indices"].reshape(-1).tolist())) for l in range(L)
              if f"blocks.{l}.mlp.hook_expert_indices" in t.arrays}
    assert routed
    for l, experts in routed.items():
        mine = [es for n, es in asked if f".{l}." in f".{n}"]
        assert mine and all(es == experts for es in mine), (name, l, mine, experts)


def test_the_files_tokenizer_gives_the_folders_ids(read):
    name, _, model, _ = read
    if name in OWN_SPLIT:
        pytest.skip("the file's pre-tokenizer (llama-bpe) is not the fixture's")
    ref = load_npz(DATA / name / "reference.npz")
    for k in (0, 1):
        assert model.tokenize(str(ref[f"prompt_{k}"])) == prompt(name, k), (name, k)


def test_yarn_without_its_original_context_takes_the_training_context(gguf_of_folder):
    """llama.cpp's rule: rope.scaling.original_context_length, when a file lacks it (Ollama's qwen2/qwen3 YaRN
    blobs), is the context_length the file states."""
    plain = tracer.load(str(gguf_of_folder(DATA / "gpt-oss-tiny", "gpt-2")))
    path = gguf_of_folder(DATA / "gpt-oss-tiny", "gpt-2", meta={"{arch}.rope.scaling.original_context_length": None,
                                                               "{arch}.context_length": 2048})
    cfg = tracer.load(str(path)).config
    assert plain.config.rope_scaling["original_max_position_embeddings"] == 4096
    assert cfg.rope_scaling["original_max_position_embeddings"] == 2048 and cfg.n_ctx == 2048
