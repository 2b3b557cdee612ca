"""A block entry owns its whole sublayer: a new MLP kind and a new attention kind, written here in the
test file alone and entered with `tracer.core.blocks.register` (no edit to the decoder, the backward
pass, the fast layout or the store), run, record (every name in the hook table with its axes), keep
their cache, differentiate (central differences against the kinds' own backward passes), and render.
Every registered kind's backward is also checked against central differences through its `run`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from tracer.core import blocks, hooks
from tracer.core.attention import AttentionWeights, SoftmaxAttention
from tracer.core.backward import loss_and_grads
from tracer.core.config import Config
from tracer.core.decoder import KVCache, forward
from tracer.core.equations import causal_softmax
from tracer.core.derivatives import d_causal_softmax
from tracer.core.fast import layout
from tracer.core.hooks import h
from tracer.core.params import init_weights
from tracer.core.record import Recorder
from tracer.core.sublayer import Span, Sublayer

EPS = 1e-6  # central-difference step, float64
TOL = dict(rel=1e-5, abs=1e-8)

# --------------------------------------------------------------------------- a toy MLP: (x·W_a)² · W_b


@dataclass
class SquareWeights:
    kind: object
    W_a: np.ndarray  # [d_model, d_toy]
    W_b: np.ndarray  # [d_toy, d_model]


class SquareMlp(Sublayer):
    """An MLP no model has: a = x·W_a, then a², then W_b; its own axis (d_toy) and names."""

    key = "toy_square"
    scope = "mlp"
    title = "square MLP (a test's toy)"
    name = "square MLP"
    plain = "a toy network squares each token's projection"
    hooks = {"hook_a": h("pos d_toy", "mlp"), "hook_sq": h("pos d_toy", "mlp")}
    steps = (("mlp.hook_a", "a", "toy: a = ln2(x)·W_a ({shape})"), ("mlp.hook_sq", "sq", "toy: sq = a² (squared)"))
    def width(self, cfg=None) -> int:
        return 3  # the hidden width its steps show

    def axes(self, cfg):
        return {"d_toy": (self.width(),)}

    def shapes(self, cfg, l=0):
        return {"W_a": (cfg.d_model, self.width()), "W_b": (self.width(), cfg.d_model)}

    def layout(self, cfg, params, l, fused=None):
        return SquareWeights(self, params[f"blocks.{l}.mlp.W_a"], params[f"blocks.{l}.mlp.W_b"])

    def run(self, cfg, w, x, rec, span):
        a = rec("hook_a", x @ w.W_a)  # [pos, d_toy]
        sq = rec("hook_sq", a * a)  # [pos, d_toy]
        return sq @ w.W_b  # [pos, d_model]

    def backward(self, cfg, w, dy, acts, p, grads, x, span):
        a, sq = acts[p + "hook_a"], acts[p + "hook_sq"]
        flat = lambda v: v.reshape(-1, v.shape[-1])  # noqa: E731
        grads[p + "W_b"] = flat(sq).T @ flat(dy)
        da = 2 * a * (dy @ w.W_b.T)  # [..., pos, d_toy]
        grads[p + "W_a"] = flat(x).T @ flat(da)
        return da @ w.W_a.T

    def needed(self, cfg):
        return ("hook_a", "hook_sq")

    def macs(self, cfg, n_new, n_seen):
        return 2 * n_new * cfg.d_model * self.width()

    def record_bytes(self, cfg, n_new, n_seen):
        return 2 * n_new * self.width()


# --------------------------------------------------------------------------- a toy attention: a learned temperature per head


@dataclass
class TemperedWeights(AttentionWeights):
    tau: np.ndarray = None  # [head]


class TemperedAttention(SoftmaxAttention):
    """Softmax attention whose scores each head multiplies by exp(τ_h) before the softmax (a
    parameter `attn.tau` [head] and a name `hook_tempered` of its own): written as its differences
    from softmax attention, the way attention sinks are."""

    key = "toy_tempered"
    title = "tempered attention (a test's toy)"
    hooks = {k: v for name, hook in SoftmaxAttention.hooks.items()  # hook_tempered just before hook_pattern
             for k, v in ((("hook_tempered", h("head pos key", "softmax")),) if name == "hook_pattern" else ()) + ((name, hook),)}

    def shapes(self, cfg, l):
        return {**super().shapes(cfg, l), "tau": (cfg.n_heads,)}

    def layout(self, cfg, params, l, fused=None):
        base = super().layout(cfg, params, l, fused)
        return TemperedWeights(**{**vars(base), "kind": self}, tau=params[f"blocks.{l}.attn.tau"])

    def weights(self, cfg, w, scores, rec):
        tempered = rec("hook_tempered", scores * np.exp(w.tau)[:, None, None])  # [head, query_pos, key_pos]
        return causal_softmax(tempered)

    def d_weights(self, cfg, w, dpattern, acts, p, grads):
        dt = d_causal_softmax(dpattern, acts[p + "hook_pattern"])  # [..., head, query_pos, key_pos]
        scores = acts[p + "hook_attn_scores"]
        seen = np.where(np.isfinite(scores), scores, 0.0)  # masked keys: weight 0, no gradient
        e = np.exp(w.tau)[:, None, None]
        grads[p + "tau"] = (dt * seen * e).reshape(-1, *dt.shape[-3:]).sum(axis=(0, 2, 3))
        return dt * e

    def needed(self, cfg):
        return (*super().needed(cfg), "hook_attn_scores")


SQUARE = SquareMlp()
TEMPERED = TemperedAttention()


@pytest.fixture(scope="module", autouse=True)
def toys():
    """The toys are entered for this module's tests only (the hook table's every name is recorded by
    some shipped model, `tests/test_hook_names.py`)."""
    for kind in (SQUARE, TEMPERED):
        blocks.register(kind)
    yield
    for kind in (SQUARE, TEMPERED):
        blocks.unregister(kind)


def toy_config(**kw) -> Config:
    base = dict(d_vocab=11, n_ctx=16, d_model=6, n_heads=2, d_head=4, n_layers=2, dtype="float64", positional="rope",
                norm="rms", mlp="toy_square", attention="toy_tempered")
    return Config(**{**base, **kw})


def toy_params(cfg: Config, seed: int = 0) -> dict:
    params = init_weights(cfg, seed)
    rng = np.random.default_rng(seed)
    for name in params:  # not GPT-2's small initialisation: every part must matter
        if name.endswith((".W_a", ".W_b", ".tau", "W_Q", "W_K")):
            params[name] = rng.standard_normal(params[name].shape) * 0.6
    return params


def test_the_toys_are_entries_of_the_table_and_their_names_of_the_hook_table():
    cfg = toy_config()
    assert cfg.mlp_kind is SQUARE and cfg.attention_kind is TEMPERED
    assert hooks.find("blocks.1.mlp.hook_sq") == h("pos d_toy", "mlp")
    assert hooks.find("blocks.0.attn.hook_tempered").axes == ("head", "pos", "key")
    shapes = init_weights(cfg, 0)
    assert shapes["blocks.0.mlp.W_a"].shape == (6, 3) and shapes["blocks.1.attn.tau"].shape == (2,)
    assert cfg.n_params() == sum(int(np.prod(v.shape)) for k, v in shapes.items())


def test_the_toys_run_and_record_every_name_with_its_axes():
    cfg = toy_config()
    params = toy_params(cfg)
    rec = Recorder()
    tokens = [1, 4, 2, 7]
    logits = forward(cfg, params, tokens, rec)
    assert logits.shape == (4, 11) and np.isfinite(logits).all()
    for name in rec.store:
        assert hooks.shape(name, cfg, 4, 4) == rec.store[name].shape, name
    order = [n.split(".", 2)[2] for n in rec.store if n.startswith("blocks.0.")]
    assert order == [n for n in hooks.LAYER if n in order]  # the hook table's order is the order recorded
    # the toy MLP by hand: (ln2(x)·W_a)²·W_b is what was added to the residual stream
    x = rec.store["blocks.0.ln2.hook_normalized"] * params["blocks.0.ln2.w"]
    want = (x @ params["blocks.0.mlp.W_a"]) ** 2 @ params["blocks.0.mlp.W_b"]
    np.testing.assert_allclose(rec.store["blocks.0.hook_mlp_out"], want, rtol=1e-12)
    # the toy attention by hand: softmax of the scores × exp(τ), row by row
    s = rec.store["blocks.0.attn.hook_attn_scores"][1, 2, :3] * np.exp(params["blocks.0.attn.tau"][1])
    np.testing.assert_allclose(rec.store["blocks.0.attn.hook_pattern"][1, 2, :3], np.exp(s) / np.exp(s).sum(), rtol=1e-12)


def test_the_toys_cache_gives_the_numbers_of_a_full_recompute():
    cfg = toy_config()
    w = layout(cfg, toy_params(cfg))
    tokens = [3, 1, 4, 1, 5, 9]
    full = forward(cfg, w, tokens)
    cache = KVCache(cfg, 8)
    first = forward(cfg, w, tokens[:4], cache=cache)
    rest = [forward(cfg, w, [t], cache=cache)[0] for t in tokens[4:]]
    np.testing.assert_allclose(np.vstack([first, *rest]), full, rtol=1e-10, atol=1e-12)


def central_difference(cfg, params, tokens, name, index) -> float:
    up, down = dict(params), dict(params)
    up[name], down[name] = params[name].copy(), params[name].copy()
    up[name][index] += EPS
    down[name][index] -= EPS
    return (loss_and_grads(cfg, up, tokens)[0] - loss_and_grads(cfg, down, tokens)[0]) / (2 * EPS)


@pytest.mark.parametrize("name", ["blocks.0.mlp.W_a", "blocks.1.mlp.W_b", "blocks.0.attn.tau", "blocks.1.attn.tau",
                                  "blocks.0.attn.W_Q", "blocks.1.attn.W_V", "blocks.0.ln2.w", "W_E"])
def test_the_toys_backward_passes_are_the_losss_derivative(name):
    cfg = toy_config()
    params = toy_params(cfg, 1)
    tokens = np.array([2, 5, 1, 8, 3])
    _, grads = loss_and_grads(cfg, params, tokens)
    rng = np.random.default_rng(3)
    for _ in range(4):
        index = tuple(int(rng.integers(n)) for n in params[name].shape)
        assert grads[name][index] == pytest.approx(central_difference(cfg, params, tokens, name, index), **TOL), index


def test_a_generation_of_the_toys_renders(render_text):
    from tracer.model import Model
    from tracer.render import show_generation
    from tracer.render.view import View
    from tracer.tokenizers.tokens import get_tokenizer

    cfg = toy_config(d_vocab=50257, d_model=8, n_heads=2, d_head=4, n_ctx=32)
    tok = get_tokenizer("gpt2")
    gen = Model(cfg, toy_params(cfg), tok, name="toy").generate("A B C", max_new_tokens=2)
    out = render_text(lambda console: show_generation(gen, tok, View(max_lines=0), console=console))
    assert "square MLP (a test's toy)" in out  # the header's block line: the kind's own title
    assert "toy: sq = a² (squared)" in out and "toy: a = ln2(x)·W_a" in out  # the MLP step: the kind's own steps


# --------------------------------------------------------------------------- every registered kind


def _kind_cases():
    for scope, table in blocks.TABLES.items():
        for key, kind in table.items():
            yield pytest.param(scope, key, id=f"{scope}-{key}")


@pytest.mark.parametrize("scope, key", list(_kind_cases()))
def test_every_kinds_backward_is_its_runs_derivative(scope, key):
    """Through `run` alone (one layer, float64, no norm): the input's and every parameter's gradient of
    Σ run(x)·r against central differences."""
    kind = blocks.TABLES[scope][key]
    run_derivative_matches(kind, {**({scope if scope == "mlp" else "attention": key} if scope != "ple" else {}), **kind.example})


EXPERT_VARIANTS = {
    "gpt-oss": dict(router="topk_softmax", expert_mlp="clamped_swiglu", router_bias=True, expert_bias=True,
                    swiglu_limit=0.9, experts_per_token=2),  # a low limit, so that some values are clamped
    "qwen3-moe": dict(norm_topk=True, n_experts=6, experts_per_token=3),
    "qwen2-moe": dict(shared_d_mlp=3),
    "mixtral": dict(norm_topk=True),
}


@pytest.mark.parametrize("variant", EXPERT_VARIANTS)
def test_every_routed_experts_variants_backward_is_its_runs_derivative(variant):
    """The router's two ways (softmax then top-k, renormalized or not; top-k then softmax), the clamped
    SwiGLU with biases and the shared expert with its gate, each through its backward, the choice held."""
    run_derivative_matches(blocks.MLPS["experts"], {"mlp": "experts", "n_experts": 4, "experts_per_token": 2,
                                                    **EXPERT_VARIANTS[variant]})


def run_derivative_matches(kind, fields: dict) -> None:
    scope = kind.scope
    cfg = Config(d_vocab=7, n_ctx=8, d_model=4, n_heads=2, n_kv_heads=1, d_head=2, d_mlp=5, n_layers=1,
                 dtype="float64", layer_norm=False, **fields)
    params = toy_params(cfg, 2)
    rng = np.random.default_rng(4)
    for name in params:
        params[name] = rng.standard_normal(params[name].shape) * 0.5
    x, r = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))  # [pos, d_model]
    given = rng.standard_normal((3, cfg.d_ple)) if cfg.d_ple else None  # [pos, d_ple] a per-layer input (Gemma 4's)

    def f(p, x, given=given):
        rec = Recorder()
        out = kind.run(cfg, kind.layout(cfg, p, 0), x, rec.scope(f"blocks.0.{scope}"), Span(0, 3, layer_input=given, stream=x))
        return float(np.sum(out * r)), rec.store

    _, acts = f(params, x)
    if "blocks.0.mlp.hook_expert_pre" in acts and cfg.expert_mlp == "clamped_swiglu":  # the clamp is exercised
        gate = acts["blocks.0.mlp.hook_expert_pre"]
        assert (gate > cfg.swiglu_limit).any() and (gate < cfg.swiglu_limit).any()
    grads: dict = {}
    span = Span(0, 3, layer_input=given, stream=x)  # no norm: the stream is the sublayer's input
    dx = kind.backward(cfg, kind.layout(cfg, params, 0), r, acts, f"blocks.0.{scope}.", grads, x, span)
    if span.d_stream is not None:  # a kind that also reads the stream itself (Gemma 4's router): both paths
        dx = dx + span.d_stream
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += EPS
        down[i] -= EPS
        assert dx[i] == pytest.approx((f(params, up)[0] - f(params, down)[0]) / (2 * EPS), **TOL), i
    for i in np.ndindex(given.shape) if given is not None else ():  # the per-layer input's gradient
        up, down = given.copy(), given.copy()
        up[i] += EPS
        down[i] -= EPS
        assert span.d_layer_input[i] == pytest.approx((f(params, x, up)[0] - f(params, x, down)[0]) / (2 * EPS), **TOL), i
    for name, g in grads.items():
        assert name.startswith(f"blocks.0.{scope}.") and g.shape == params[name].shape, name
        for i in np.ndindex(g.shape):
            up, down = dict(params), dict(params)
            up[name], down[name] = params[name].copy(), params[name].copy()
            up[name][i] += EPS
            down[name][i] -= EPS
            assert g[i] == pytest.approx((f(up, x)[0] - f(down, x)[0]) / (2 * EPS), **TOL), (name, i)
    own = {f"blocks.0.{scope}.{n}" for n in kind.shapes(cfg, 0)}
    assert set(grads) == own  # a gradient for every parameter the kind owns
