"""Mixtures of experts (gpt-oss, Qwen3-MoE, OLMoE, Mixtral, Qwen2-MoE with its shared expert and a dense
layer): tracer's decoder on the fixtures transformers made (tests/data/*-tiny, tools/make_moe_fixtures.py)
gives transformers' numbers — logits, every residual, every attention pattern (with gpt-oss's sinks'
share), the router's logits, the chosen experts and their weights, each chosen expert's output, greedy
generation with and without the KV cache and a cached step — and the vectorized routing (tokens gathered
per expert) equals a naive loop over tokens and experts written here."""

from __future__ import annotations

import re

from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.formats.files import load_npz

from .reference import grads_match_central_differences, ids

DATA = Path(__file__).parent / "data"
FOLDERS = ["gpt-oss-tiny", "qwen3-moe-tiny", "olmoe-tiny", "mixtral-tiny", "qwen2-moe-tiny"]
ATOL = 1e-4  # float32 through a few layers; logits are of size ~5
ROUTER_ATOL = 1e-4  # the router's logits, from the same residual stream


@pytest.fixture(scope="module", params=FOLDERS)
def fixture(request):
    name = request.param
    return name, tracer.load(str(DATA / name)), load_npz(DATA / name / "reference.npz")


@pytest.mark.parametrize("k", [0, 1])
def test_logits_residuals_and_patterns_match_transformers(fixture, k):
    name, model, ref = fixture
    t = model.run(ids(ref, k))
    np.testing.assert_allclose(t["logits"], ref[f"logits_{k}"], atol=ATOL, rtol=0, err_msg=name)
    hidden = ref[f"hidden_states_{k}"]  # [layer + 1, pos, d_model]
    L = model.config.n_layers
    for l in range(L):
        np.testing.assert_allclose(t[f"blocks.{l}.hook_resid_pre"], hidden[l], atol=ATOL, rtol=0, err_msg=f"{name} {l}")
        np.testing.assert_allclose(t[f"blocks.{l}.attn.hook_pattern"], ref[f"attentions_{k}"][l], atol=1e-5, rtol=0)
        np.testing.assert_allclose(t[f"blocks.{l}.hook_mlp_out"], ref[f"mlp_out_{k}"][l], atol=ATOL, rtol=0)
    np.testing.assert_allclose(t["unembed.hook_in"], hidden[L], atol=ATOL, rtol=0)


@pytest.mark.parametrize("k", [0, 1])
def test_the_routing_matches_transformers(fixture, k):
    """Router logits, the chosen experts (most weight first) and their weights, and each chosen expert's
    output before its weight, in every MoE layer (the fixtures keep every top-k choice away from ties)."""
    name, model, ref = fixture
    t = model.run(ids(ref, k))
    for i, l in enumerate(int(x) for x in ref["moe_layers"]):
        m = f"blocks.{l}.mlp."
        np.testing.assert_allclose(t[m + "hook_router_logits"], ref[f"router_logits_{k}"][i], atol=ROUTER_ATOL, rtol=0)
        assert np.array_equal(t[m + "hook_expert_indices"], ref[f"expert_indices_{k}"][i]), (name, l)
        np.testing.assert_allclose(t[m + "hook_expert_weights"], ref[f"expert_weights_{k}"][i], atol=1e-5, rtol=0)
        np.testing.assert_allclose(t[m + "hook_expert_out"], ref[f"expert_outputs_{k}"][i], atol=ATOL, rtol=0)
        if f"shared_expert_out_{k}" in ref:
            np.testing.assert_allclose(t[m + "hook_shared_gate"][:, 0], ref[f"shared_expert_gate_{k}"][i], atol=1e-5)
    if f"sink_share_{k}" in ref:  # gpt-oss: what each head's sink took of each row
        for l in range(model.config.n_layers):
            np.testing.assert_allclose(t[f"blocks.{l}.attn.hook_sink_share"], ref[f"sink_share_{k}"][l], atol=1e-5)


@pytest.mark.parametrize("cache", [True, False])
def test_greedy_generation_matches_transformers(fixture, cache):
    name, model, ref = fixture
    for k in (0, 1):
        gen = model.generate(ids(ref, k), max_new_tokens=8, cache=cache)
        assert gen.generated_ids == [int(i) for i in ref[f"greedy_ids_{k}"]], (name, k)


def test_a_cached_one_token_step_matches_transformers(fixture):
    name, model, ref = fixture
    gen = model.generate(ids(ref, 0), max_new_tokens=2)
    step = gen.steps[1]
    assert step.start == len(ids(ref, 0)) and int(step.tokens[-1]) == int(ref["step_input_0"][0])
    np.testing.assert_allclose(step["logits"][-1], ref["step_logits_0"], atol=ATOL, rtol=0)


def naive_moe(model, x: np.ndarray, l: int) -> np.ndarray:  # [pos, d_model] → [pos, d_model]
    """Layer l's MLP, one token and one expert at a time: the router's scores, the choice, each chosen
    expert's gate, up, middle and down, their weighted sum (and the shared expert), in plain loops."""
    cfg, p = model.config, {k: np.asarray(v, dtype=np.float64) for k, v in model.params.items()
                            if k.startswith(f"blocks.{l}.mlp.")}
    m = f"blocks.{l}.mlp."
    out = np.zeros_like(x, dtype=np.float64)
    for i, xi in enumerate(x.astype(np.float64)):
        scores = xi @ p[m + "W_router"] + (p[m + "b_router"] if m + "b_router" in p else 0)
        if cfg.router == "topk_softmax":
            chosen = sorted(range(cfg.n_experts), key=lambda e: -scores[e])[: cfg.experts_per_token]
            e_s = np.exp(scores[chosen] - scores[chosen].max())
            weights = e_s / e_s.sum()
        else:
            probs = np.exp(scores - scores.max())
            probs /= probs.sum()
            chosen = sorted(range(cfg.n_experts), key=lambda e: -probs[e])[: cfg.experts_per_token]
            weights = probs[chosen] / (probs[chosen].sum() if cfg.norm_topk else 1.0)
        for e, w in zip(chosen, weights):
            gate = xi @ p[m + "W_gate"][e] + (p[m + "b_gate"][e] if m + "b_gate" in p else 0)
            up = xi @ p[m + "W_in"][e] + (p[m + "b_in"][e] if m + "b_in" in p else 0)
            if cfg.expert_mlp == "clamped_swiglu":
                g, u = np.minimum(gate, cfg.swiglu_limit), np.clip(up, -cfg.swiglu_limit, cfg.swiglu_limit)
                mid = (u + 1) * g / (1 + np.exp(-cfg.swiglu_alpha * g))
            else:
                mid = gate / (1 + np.exp(-gate)) * up
            out[i] += w * (mid @ p[m + "W_out"][e] + (p[m + "b_out"][e] if m + "b_out" in p else 0))
        if m + "shared.W_gate" in p:
            g = xi @ p[m + "shared.W_gate"]
            shared = (g / (1 + np.exp(-g)) * (xi @ p[m + "shared.W_in"])) @ p[m + "shared.W_out"]
            out[i] += shared / (1 + np.exp(-(xi @ p[m + "W_shared_gate"])[0]))
    return out


def test_the_vectorized_routing_equals_a_loop_over_tokens_and_experts(fixture):
    name, model, ref = fixture
    t = model.run(ids(ref, 1))
    for l in (int(x) for x in ref["moe_layers"]):
        x = t[f"blocks.{l}.ln2.hook_normalized"] * model.params[f"blocks.{l}.ln2.w"]  # the MLP's input
        np.testing.assert_allclose(t[f"blocks.{l}.hook_mlp_out"], naive_moe(model, x, l), atol=2e-5, rtol=1e-5,
                                   err_msg=f"{name} layer {l}")


def test_the_configs_read_each_familys_switches():
    oss = tracer.load(str(DATA / "gpt-oss-tiny")).config
    assert (oss.attention, oss.mlp, oss.router, oss.expert_mlp, oss.router_bias, oss.expert_bias) == (
        "sinks", "experts", "topk_softmax", "clamped_swiglu", True, True)
    assert oss.rope_scaling["rope_type"] == "yarn" and oss.rope_scaling["truncate"] is False and oss.windowed == (0,)
    q3 = tracer.load(str(DATA / "qwen3-moe-tiny")).config
    assert (q3.qk_norm, q3.norm_topk, q3.router) == ("per_head", True, "softmax_topk")
    olmoe = tracer.load(str(DATA / "olmoe-tiny")).config
    assert (olmoe.qk_norm, olmoe.norm_topk) == ("whole", False)
    assert tracer.load(str(DATA / "mixtral-tiny")).config.norm_topk is True
    q2 = tracer.load(str(DATA / "qwen2-moe-tiny")).config
    assert q2.shared_d_mlp and q2.dense_layers == (1,) and q2.dense_d_mlp and q2.mlp_of(1).key != "experts"


def test_the_walkthrough_works_out_the_routing(render_text):
    from tracer.render import show_generation
    from tracer.render.view import View

    model = tracer.load(str(DATA / "gpt-oss-tiny"))
    gen = model.generate("The quick brown fox", max_new_tokens=1)
    out = render_text(lambda c: show_generation(gen, model.tokenizer, View(token="D", max_lines=0), console=c))
    flat = " ".join(out.split())  # the words, whatever the line breaks
    t = gen.steps[0]
    chosen, weights = t["blocks.0.mlp.hook_expert_indices"][3], t["blocks.0.mlp.hook_expert_weights"][3]
    terms = f"{weights[0]:.3f}×E{chosen[0]}(ln2(x)) + {weights[1]:.3f}×E{chosen[1]}(ln2(x))"
    assert terms in flat  # the article's weighted sum, one level up
    E, k = model.config.n_experts, model.config.experts_per_token
    assert f"{E - k} of {E} experts not used by this token: {100 * (E - k) / E:.1f}%" in flat
    assert f"a mixture of {E} experts, {k} per token" in flat and "sink takes" in flat


def test_the_layers_section_lists_each_tokens_experts_in_each_layer(render_text):
    """--section layers --full: under each layer's table, every token's experts, most weight first, with
    their weights (the recorded choice, read back from the printed rows)."""
    from tracer.render import show_generation
    from tracer.render.view import View

    model = tracer.load(str(DATA / "qwen2-moe-tiny"))
    gen = model.generate("The quick brown fox", max_new_tokens=1)
    out = render_text(lambda c: show_generation(gen, model.tokenizer, View(sections=("layers",), brief=False,
                                                                           max_lines=0), console=c), width=120)
    t = gen.steps[0]
    for l in (0, 2):  # the routed layers (layer 1 is dense)
        block = out.split(f"layer {l}: each token's experts")[1].splitlines()[2:2 + len(t.tokens)]
        for row, chosen, weights in zip(block, t[f"blocks.{l}.mlp.hook_expert_indices"], t[f"blocks.{l}.mlp.hook_expert_weights"]):
            got = re.findall(r"E(\d+) (\d\.\d+)", row)
            assert [int(e) for e, _ in got] == [int(e) for e in chosen], row
            np.testing.assert_allclose([float(w) for _, w in got], weights, atol=0.006)
    assert "layer 1: each token's experts" not in out


def test_the_walkthrough_works_out_the_sinks_softmax_and_the_experts_output(render_text):
    """gpt-oss-tiny: the softmax line names the sink's logit, worked back from the recorded row, which is the
    checkpoint's `self_attn.sinks`; the MLP's output is said to be the experts' weighted sum, not one W_out.
    qwen2-moe-tiny: the dense layer among the experts is shown at its own width (dense_d_mlp), and the MLP's
    output of a routed layer adds the shared expert's part."""
    import re

    from safetensors.numpy import load_file

    from tracer.render import show_generation
    from tracer.render.view import View

    model = tracer.load(str(DATA / "gpt-oss-tiny"))
    gen = model.generate("The quick brown fox", max_new_tokens=1)
    out = render_text(lambda c: show_generation(gen, model.tokenizer, View(token="B", max_lines=0), console=c), width=200)
    flat = " ".join(out.split())
    sinks = load_file(str(DATA / "gpt-oss-tiny" / "model.safetensors"))["model.layers.0.self_attn.sinks"]
    found = [float(x) for x in re.findall(r"and the sink's (-?\d+\.\d+)\) = ", flat)]
    assert len(found) == model.config.n_heads  # one per head of layer 0, in order
    np.testing.assert_allclose(found, sinks, atol=1.5e-3)  # 3 decimals
    assert "the chosen experts' weighted sum: what the MLP adds" in flat and "× W_out (32 × 64)" not in flat
    q2 = tracer.load(str(DATA / "qwen2-moe-tiny"))
    cfg = q2.config
    gen = q2.generate("the cat sat", max_new_tokens=1)
    flat = " ".join(render_text(lambda c: show_generation(gen, q2.tokenizer, View(token="B", layer="all", max_lines=0),
                                                          console=c), width=200).split())
    assert f"gate = ln2(x)·W_gate ({cfg.d_model} × {cfg.dense_d_mlp})" in flat
    assert f"× W_out ({cfg.dense_d_mlp} × {cfg.d_model})" in flat
    assert "the chosen experts' weighted sum + the shared expert's part: what the MLP adds" in flat


# --------------------------------------------------------------------------- changed, differentiated, refused


def test_an_expert_taken_out_of_the_routing_sends_its_tokens_to_their_next_choice():
    """--ablate 0:expert:E: E's router score is −∞, so no token chooses it; each token's experts are
    the clean scores' top k without E (worked out here from the clean run's scores)."""
    from tracer.run.ablation import Ablation

    model = tracer.load(str(DATA / "qwen3-moe-tiny"))
    cfg = model.config
    ids = model.tokenize("The quick brown fox jumps over the lazy dog")
    clean = model.run(ids)
    e = int(np.bincount(clean["blocks.0.mlp.hook_expert_indices"].reshape(-1)).argmax())  # the busiest expert
    changed = model.run(ids, hooks=Ablation.parse(f"0:expert:{e}").hooks(cfg))
    chosen = changed["blocks.0.mlp.hook_expert_indices"]
    assert e not in chosen
    scores = clean["blocks.0.mlp.hook_router_logits"].astype(np.float64)
    scores[:, e] = -np.inf
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    want = np.argsort(-probs, axis=-1, kind="stable")[:, : cfg.experts_per_token]
    assert np.array_equal(chosen, want)
    w = np.take_along_axis(probs, want, -1)
    np.testing.assert_allclose(changed["blocks.0.mlp.hook_expert_weights"], w / w.sum(-1, keepdims=True), atol=1e-5)
    moved = np.abs(changed["blocks.1.hook_resid_pre"] - clean["blocks.1.hook_resid_pre"]).max(-1)  # [pos]
    chose = (clean["blocks.0.mlp.hook_expert_indices"] == e).any(-1)
    assert (moved[chose] > 1e-3).all() and (moved[~chose] < 1e-5).all()  # only its tokens changed (the others: rounding,
    # from the experts' rows being multiplied in other groups)


@pytest.mark.parametrize("spec, says", [
    ("0:expert:99", "names expert 99; layer 0 has experts 0–"),
    ("0:expert:1:mean", "taken out of the routing, not averaged"),
    ("9:expert:0", "names layer 9"),
])
def test_expert_ablations_that_cannot_be_are_one_line(spec, says):
    from tracer.errors import TracerError
    from tracer.run.ablation import Ablation

    model = tracer.load(str(DATA / "mixtral-tiny"))
    with pytest.raises(TracerError, match=says):
        Ablation.parse(spec).check(model.config)


def test_every_expert_removed_and_an_expert_of_a_dense_model_are_refused(runner):
    from tracer.cli import app

    E = tracer.load(str(DATA / "mixtral-tiny")).config.n_experts
    r = runner.invoke(app, ["trace", "a b", "--model", str(DATA / "mixtral-tiny"),
                            *[x for e in range(E - 1) for x in ("--ablate", f"1:expert:{e}")]])
    assert r.exit_code == 2 and "fewer than the 2 each token is sent to" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["trace", "a b", "--model", str(DATA / "llama-tiny"), "--ablate", "0:expert:0"])
    assert r.exit_code == 2 and "routes to no experts" in r.output


def test_the_hooks_api_changes_the_routing_and_the_experts_outputs():
    """A hook doubling every expert weight doubles the experts' part of the MLP output (Qwen3-MoE has no
    shared expert): the output is Σ weight · expert output, computed from the hooked weights."""
    model = tracer.load(str(DATA / "qwen3-moe-tiny"))
    ids = model.tokenize("a b c d")
    clean = model.run(ids)
    doubled = model.run(ids, hooks={"blocks.0.mlp.hook_expert_weights": lambda w: w * 2})
    np.testing.assert_allclose(doubled["blocks.0.hook_mlp_out"], 2 * clean["blocks.0.hook_mlp_out"], rtol=1e-5, atol=1e-6)


def test_gradient_times_input_goes_through_the_router(runner):
    """--attribute on a mixture of experts: each prompt position's gradient × input, from the backward pass
    through every router and expert (its derivatives are checked above), one finite number per position."""
    import json

    from tracer.cli import app

    r = runner.invoke(app, ["trace", "The quick brown fox", "--model", str(DATA / "gpt-oss-tiny"), "-n", "1",
                            "--attribute", "--json"])
    assert r.exit_code == 0, r.output
    att = json.loads(r.output)["attribution"]
    n = len(json.loads(r.output)["prompt_ids"])
    assert len(att["per_position"]) == n and all(np.isfinite(att["per_position"]))


@pytest.mark.parametrize("name", ["gpt-oss-tiny", "qwen2-moe-tiny"])
def test_the_backward_pass_goes_through_the_router_and_the_experts(name):
    """The loss's gradient with respect to the router's and an expert's weights (and gpt-oss's sinks)
    equals central differences of tests/reference.py's loss (float64, the top-k choice fixed: steps too
    small to change it)."""
    from tracer.core.config import Config

    model = tracer.load(str(DATA / name))
    cfg = Config(**{**model.config.to_dict(), "dtype": "float64"})
    params = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in model.params.items()}  # C order: loss_slope's view
    tokens = np.array(model.tokenize("The quick brown fox jumps"))
    names = ["blocks.0.mlp.W_router", "blocks.1.mlp.W_gate", "blocks.1.mlp.W_out"] + (
        ["blocks.0.attn.sinks", "blocks.1.mlp.b_router"] if name == "gpt-oss-tiny" else ["blocks.0.mlp.W_shared_gate"])
    grads_match_central_differences(cfg, params, tokens, names, seed=0)
