"""Gemma 4 with experts beside each MLP (`enable_moe_block`, the 26B-A4B's block): tracer's decoder on the
fixture transformers made (tests/data/gemma4-moe-tiny, tools/make_new_family_fixtures.py: a dense GeGLU of 48
and 8 GeGLU experts of 24, 2 per token, the router's and experts' norms, scales and per-expert scales drawn away
from 1) gives transformers' numbers — logits, every residual, each layer's chosen experts and their weights
(taken from transformers' router), greedy generation with and without the cache; a naive per-token,
per-expert float64 loop over the recorded inputs gives the layer's MLP output; the backward pass equals central
differences through every new parameter; --ablate L:expert:E reroutes; the walkthrough runs and names it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.core.config import Config
from tracer.errors import TracerError
from tracer.formats.files import load_npz

from .reference import grads_match_central_differences, ids
from .test_family_gemma4 import float64_model

FOLDER = Path(__file__).parent / "data" / "gemma4-moe-tiny"
ATOL = 1e-4  # float32 through three layers (measured: logits 6.3e-6, residuals 5.7e-6)


@pytest.fixture(scope="module")
def model():
    return tracer.load(str(FOLDER))


@pytest.fixture(scope="module")
def ref():  # transformers' numbers (tools/make_new_family_fixtures.py)
    return load_npz(FOLDER / "reference.npz")


def test_the_config_reads_the_experts_beside_the_mlp(model):
    cfg = model.config
    assert (cfg.mlp, cfg.n_experts, cfg.experts_per_token, cfg.d_mlp, cfg.dense_d_mlp) == ("geglu_and_experts", 8, 2, 24, 48)
    assert (cfg.router, cfg.norm_topk, cfg.expert_mlp) == ("softmax_topk", True, "geglu")
    assert model.params["blocks.1.mlp.W_gate"].shape == (8, 64, 24) and model.params["blocks.1.mlp.dense.W_in"].shape == (64, 48)
    dense = 3 * 64 * 48
    assert cfg.mlp_of(0).active_params(cfg) == cfg.mlp_of(0).n_params(cfg) - 6 * 3 * 64 * 24
    assert cfg.mlp_of(0).n_params(cfg) == dense + 48 + 64 + 64 * 8 + 64 + 8 + 3 * 64 + 8 * 3 * 64 * 24


@pytest.mark.parametrize("k", [0, 1])
def test_logits_residuals_and_routing_match_transformers(model, ref, k):
    t = model.run(ids(ref, k))
    np.testing.assert_allclose(t["logits"], ref[f"logits_{k}"], atol=ATOL, rtol=0)
    for l in range(3):
        np.testing.assert_allclose(t[f"blocks.{l}.hook_resid_pre"], ref[f"hidden_states_{k}"][l], atol=ATOL, rtol=0)
        m = f"blocks.{l}.mlp."
        np.testing.assert_array_equal(t[m + "hook_expert_indices"], ref[f"expert_indices_{k}"][l])
        np.testing.assert_allclose(t[m + "hook_expert_weights"], ref[f"expert_weights_{k}"][l], atol=1e-6, rtol=0)
        probs = np.exp(t[m + "hook_router_logits"] - t[m + "hook_router_logits"].max(-1, keepdims=True))
        np.testing.assert_allclose(probs / probs.sum(-1, keepdims=True), ref[f"router_probs_{k}"][l], atol=1e-6, rtol=0)
    np.testing.assert_allclose(t["unembed.hook_in"], ref[f"hidden_states_{k}"][3], atol=ATOL, rtol=0)


@pytest.mark.parametrize("cache", [True, False])
def test_greedy_generation_matches_transformers(model, ref, cache):
    for k in (0, 1):
        gen = model.generate(ids(ref, k), max_new_tokens=8, cache=cache)
        assert gen.generated_ids == [int(i) for i in ref[f"greedy_ids_{k}"]], k


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def test_a_naive_per_token_per_expert_loop_gives_the_mlp_output(model, ref):
    """Layer 1 in float64: from the recorded stream before ln2, each token on its own — the dense GeGLU, the
    router's softmax over 8, the 2 best renormalized × their scales, each chosen expert's GeGLU one by one —
    gives the recorded mlp_out and choice."""
    cfg, p = float64_model(model)
    from tracer.core.decoder import forward
    from tracer.core.record import Recorder

    rec = Recorder()
    forward(cfg, p, ids(ref, 1)[:12], rec)
    t = rec.store
    b, eps = "blocks.1.", cfg.ln_eps
    for pos in range(12):
        x = t[b + "hook_resid_mid"][pos]  # [d_model]
        h = rms(x, p[b + "ln2.w"], eps)
        dense = (gelu_tanh(h @ p[b + "mlp.dense.W_gate"]) * (h @ p[b + "mlp.dense.W_in"])) @ p[b + "mlp.dense.W_out"]
        dense = rms(dense, p[b + "mlp.dense_post.w"], eps)
        scores = rms(x, p[b + "mlp.router_scale"] / 8.0, eps) @ p[b + "mlp.W_router"]  # √64 = 8
        probs = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
        best = sorted(range(8), key=lambda e: -probs[e])[:2]
        weights = [probs[e] / sum(probs[j] for j in best) * p[b + "mlp.expert_scale"][e] for e in best]
        xe, routed = rms(x, p[b + "mlp.experts_pre.w"], eps), np.zeros(64)
        for e, wt in zip(best, weights):
            out = (gelu_tanh(xe @ p[b + "mlp.W_gate"][e]) * (xe @ p[b + "mlp.W_in"][e])) @ p[b + "mlp.W_out"][e]
            routed += wt * out
        mlp = rms(dense + rms(routed, p[b + "mlp.experts_post.w"], eps), p[b + "ln2_post.w"], eps)
        assert list(t[b + "mlp.hook_expert_indices"][pos]) == best, pos
        np.testing.assert_allclose(t[b + "mlp.hook_expert_weights"][pos], weights, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(t[b + "hook_mlp_out"][pos], mlp, rtol=1e-9, atol=1e-10)


CHECKED = ["blocks.0.mlp.W_router", "blocks.0.mlp.router_scale", "blocks.1.mlp.expert_scale", "blocks.2.mlp.expert_scale",
           "blocks.1.mlp.experts_pre.w", "blocks.1.mlp.experts_post.w", "blocks.0.mlp.dense_post.w", "blocks.2.mlp.W_gate",
           "blocks.1.mlp.W_in", "blocks.0.mlp.W_out", "blocks.1.mlp.dense.W_gate", "blocks.2.mlp.dense.W_out",
           "blocks.1.ln2.w", "blocks.1.ln2_post.w", "blocks.0.attn.W_Q", "W_E"]


def test_the_backward_pass_matches_central_differences(model):
    """Float64: three entries of each new parameter (the router, its scale, the per-expert scales, the three norms,
    the experts and the dense MLP) and of the ones around it, against central differences of the next-token loss;
    the router's input and the experts' norm reach the stream before ln2 (`Span.d_stream`)."""
    cfg, params = float64_model(model)
    tokens = np.array(model.tokenize("The quick brown fox jumps over")[:9])
    grads_match_central_differences(cfg, params, tokens, CHECKED, seed=2)


def test_a_batch_of_sequences_gives_the_mean_of_their_losses_and_gradients(model):
    """Training's shape [batch, pos]: the kind reads the stream before ln2 and leaves its gradient per sequence, so two
    sequences at once give the mean of each one's loss and gradients (the trainer's batches)."""
    from tracer.core.backward import loss_and_grads

    cfg, params = float64_model(model)
    tokens = np.array(model.tokenize("The quick brown fox jumps over the lazy dog again")[:12]).reshape(2, 6)
    loss, grads = loss_and_grads(cfg, params, tokens)
    (l0, g0), (l1, g1) = (loss_and_grads(cfg, params, tokens[i]) for i in (0, 1))
    assert loss == pytest.approx((l0 + l1) / 2, rel=1e-12)
    for name in ("blocks.1.mlp.router_scale", "blocks.1.mlp.expert_scale", "blocks.0.mlp.W_router", "blocks.2.mlp.dense.W_in",
                 "blocks.1.mlp.experts_pre.w", "blocks.0.mlp.W_gate"):
        np.testing.assert_allclose(grads[name], (g0[name] + g1[name]) / 2, rtol=1e-9, atol=1e-14, err_msg=name)


def test_ablating_an_expert_reroutes_its_tokens(model, ref):
    """--ablate 1:expert:E: no token chooses E in layer 1; each token's experts are the clean scores' best two
    without E, their weights renormalized and × the experts' own scales; layer 0 is untouched."""
    from tracer.run.ablation import Ablation

    prompt = ids(ref, 0)[:16]
    clean = model.run(prompt)
    m = "blocks.1.mlp."
    e = int(np.bincount(clean[m + "hook_expert_indices"].reshape(-1), minlength=8).argmax())  # the busiest expert
    gone = model.run(prompt, hooks=Ablation.parse(f"1:expert:{e}").hooks(model.config))
    scores = clean[m + "hook_router_logits"].astype(np.float64)
    scores[:, e] = -np.inf
    want = np.argsort(-scores, axis=-1, kind="stable")[:, :2]
    np.testing.assert_array_equal(gone[m + "hook_expert_indices"], want)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    w = np.take_along_axis(probs, want, -1)
    w = w / w.sum(-1, keepdims=True) * model.params[m + "expert_scale"][want]
    np.testing.assert_allclose(gone[m + "hook_expert_weights"], w, atol=1e-5)
    np.testing.assert_array_equal(gone["blocks.1.hook_resid_mid"], clean["blocks.1.hook_resid_mid"])


@pytest.mark.slow
@pytest.mark.parametrize("columns", ["80", "120"])
def test_the_walkthrough_runs_and_names_the_block(run_tracer, columns):
    args = ["trace", "The quick brown fox", "--model", str(FOLDER), "-n", "1", "--no-pager", "--layer", "all", "--full"]
    r = run_tracer(*args, env={"COLUMNS": columns}, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "a GeGLU MLP (48 wide) beside a mixture of 8 experts, 2 per token" in out
    assert "each weight × its expert's own scale" in out


@pytest.mark.parametrize("changes, says", [
    ({"use_double_wide_mlp": True, "num_kv_shared_layers": 1,
      "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}, "use_double_wide_mlp with enable_moe_block is not supported"),
    ({"top_k_experts": 9}, "top_k_experts 9 is more than num_experts 8"),
    ({"num_experts": None}, "num_experts"),
])
def test_what_tracer_does_not_compute_is_a_one_line_error(tmp_path, changes, says, family_copy):
    folder = family_copy(tmp_path, "gemma4-moe-tiny", **changes)
    with pytest.raises(TracerError, match=says) as e:
        tracer.load(str(folder))
    assert "\n" not in str(e.value)


def dequantized_params(path, cfg) -> dict:
    """The file's tensors de-quantized by the gguf package, under transformers' names, through the folder reader's
    translation (float64): the weights the file holds, read without tracer's GGUF reader."""
    gguf = pytest.importorskip("gguf")
    from tracer.readers import gemma4
    from tracer.readers.gguf import tensor_names

    of = {g: hf for hf, g in tensor_names(cfg.n_layers, "gemma4").items()}
    t = {}
    for x in gguf.GGUFReader(str(path)).tensors:
        if x.name in of:
            shape = tuple(int(n) for n in reversed(x.shape))
            t[of[x.name]] = gguf.quants.dequantize(x.data, x.tensor_type).astype(np.float64).reshape(shape)
    params, _ = gemma4.translate(cfg, t)
    return {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in params.items()}


@pytest.mark.parametrize("quant", ["F32", "Q8_0"])
def test_the_gguf_file_gives_the_same_numbers(gguf_of_folder, model, ref, quant):
    """The fixture as llama.cpp's converter writes it (ffn_gate_inp and its .scale, ffn_gate_up_exps, ffn_down_exps and
    its .scale, the three extra norms, expert_count / expert_used_count / expert_feed_forward_length): F32 gives
    transformers' logits and routing; Q8_0 (the experts' stacks too) gives the float64 decoder on the weights the gguf package
    de-quantizes."""
    from tracer.core.decoder import forward

    path = gguf_of_folder(FOLDER, "default", quant)
    m = tracer.load(str(path))
    assert (m.config.mlp, m.config.n_experts, m.config.experts_per_token, m.config.d_mlp, m.config.dense_d_mlp) == \
        (model.config.mlp, 8, 2, 24, 48)
    t = m.run(ids(ref, 0))
    if quant == "F32":
        np.testing.assert_allclose(t["logits"], ref["logits_0"], atol=ATOL, rtol=0)
        for l in range(3):
            np.testing.assert_array_equal(t[f"blocks.{l}.mlp.hook_expert_indices"], ref["expert_indices_0"][l])
        np.testing.assert_array_equal(m.params["blocks.2.mlp.expert_scale"], model.params["blocks.2.mlp.expert_scale"])
    else:
        cfg = Config(**{**m.config.to_dict(), "dtype": "float64"})
        want = forward(cfg, dequantized_params(path, cfg), ids(ref, 0))
        np.testing.assert_allclose(t["logits"], want, atol=1e-4, rtol=0)
