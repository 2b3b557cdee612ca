"""The backward pass (`tracer.core.backward`) against central finite differences in float64, for every
kind of parameter under several block switches and head counts, and against PyTorch autograd on the
GPT-2 fixture (`tests/data/gpt2-tiny/grads.npz`, made once by tools/make_grad_fixture.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.core.backward import cross_entropy, loss_and_grads, next_token_targets
from tracer.core.config import Config
from tracer.core.params import param_shapes

FIXTURE = Path(__file__).parent / "data" / "gpt2-tiny"
from .reference import loss_slope, next_token_loss


CONFIGS = {
    "gpt2 block": {},
    "no layer norm": {"layer_norm": False},
    "no MLP": {"mlp": False},
    "unscaled scores": {"scale_scores": False},
    "untied W_U": {"tied_unembed": False},
    "no residual": {"residual": False},
    "given positions": {"positional": "explicit"},
    "no positions": {"positional": "none"},
    "rms norm": {"norm": "rms"},
    "swiglu MLP": {"mlp": "swiglu"},
    "rotary positions": {"positional": "rope", "rope_theta": 7.0},
    "llama3 rope scaling": {"positional": "rope", "rope_theta": 50.0, "rope_scaling": {
        "rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 2.0,
        "original_max_position_embeddings": 8}},
    "one key/value head": {"n_kv_heads": 1},
    "sliding window": {"sliding_window": 2},
    "llama block": {"positional": "rope", "norm": "rms", "mlp": "swiglu", "n_kv_heads": 1, "tied_unembed": False},
}


@pytest.mark.parametrize("n_heads", [1, 2, 4])
@pytest.mark.parametrize("switches", list(CONFIGS.values()), ids=list(CONFIGS))
def test_every_gradient_matches_central_differences(n_heads, switches, random_params):
    cfg = Config(d_vocab=7, n_ctx=6, d_model=8, n_heads=n_heads, d_head=2, d_mlp=6, n_layers=2, dtype="float64",
                 **switches)
    params = random_params(cfg, seed=n_heads)
    for name in params:  # smaller weights keep the softmaxes away from saturation
        params[name] = params[name] * (0.3 if params[name].ndim >= 2 else 1.0)
    tokens = np.array([[3, 1, 4, 1, 5], [2, 6, 5, 3, 0]])  # [batch, pos]: a batch of two sequences
    loss, grads = loss_and_grads(cfg, params, tokens)
    assert loss == pytest.approx(next_token_loss(cfg, params, tokens), rel=1e-12)
    assert set(grads) == set(param_shapes(cfg)), set(grads) ^ set(param_shapes(cfg))
    rng = np.random.default_rng(0)
    h = 1e-5
    for name, shape in param_shapes(cfg).items():
        g = grads[name]
        assert g.shape == shape and g.dtype == np.float64, name
        flat = params[name].reshape(-1)
        picks = rng.choice(flat.size, size=min(flat.size, 12), replace=False)
        for i in picks:
            want = loss_slope(cfg, params, tokens, name, i, h)
            assert g.reshape(-1)[i] == pytest.approx(want, rel=1e-5, abs=1e-8), (name, int(i))


def test_a_tied_embedding_holds_both_its_uses(random_params):
    cfg = Config(d_vocab=7, n_ctx=6, d_model=4, n_heads=2, n_layers=1, dtype="float64")
    params = random_params(cfg, seed=3)
    _, grads = loss_and_grads(cfg, params, [1, 2, 1, 3])
    unused = [0, 4, 5, 6]  # never in the input: only the unembedding (W_E transposed) reaches them
    assert np.abs(grads["W_E"][unused]).max() > 0
    untied = Config(**{**cfg.to_dict(), "tied_unembed": False})
    p2 = {**params, "W_U": params["W_E"].T.copy()}
    _, g2 = loss_and_grads(untied, p2, [1, 2, 1, 3])  # the same function with W_U as its own matrix
    np.testing.assert_allclose(grads["W_E"], g2["W_E"] + g2["W_U"].T, rtol=1e-12, atol=1e-15)


def test_cross_entropy_by_hand():
    logits = np.array([[[1.0, 2.0, 0.0], [0.5, 0.5, 3.0], [9.0, 9.0, 9.0]]])  # [batch, pos, d_vocab]
    tokens = np.array([[0, 1, 2]])
    t = next_token_targets(tokens)
    assert t.tolist() == [[1, 2, -1]]  # the last position predicts nothing
    loss, d = cross_entropy(logits.copy(), t)
    p0 = np.exp(logits[0, 0]) / np.exp(logits[0, 0]).sum()
    p1 = np.exp(logits[0, 1]) / np.exp(logits[0, 1]).sum()
    assert loss == pytest.approx(-(np.log(p0[1]) + np.log(p1[2])) / 2, rel=1e-14)
    np.testing.assert_allclose(d[0, 0], (p0 - [0, 1, 0]) / 2, rtol=1e-14)
    np.testing.assert_allclose(d[0, 1], (p1 - [0, 0, 1]) / 2, rtol=1e-14)
    assert np.all(d[0, 2] == 0)


def _torch_grads_in_tracer_names(f, prefix: str, cfg: Config) -> tuple[dict, dict]:
    """The fixture's gradients (transformers' GPT-2 names, c_attn fused) under TransformerLens's names,
    and for each the largest |gradient| of the tensor it came from (b_K's true gradient is 0: softmax
    ignores a shift common to every key, so its values are rounding noise of c_attn's scale)."""
    H, dh, dm = cfg.n_heads, cfg.d_head, cfg.d_model
    g = {k[len(prefix) + len("grad.transformer."):]: f[k] for k in f.files if k.startswith(prefix + "grad.")}
    out = {"W_E": g["wte.weight"], "W_pos": g["wpe.weight"], "ln_final.w": g["ln_f.weight"], "ln_final.b": g["ln_f.bias"]}
    scale = {}
    for l in range(cfg.n_layers):
        h, b = f"h.{l}.", f"blocks.{l}."
        W, bias = g[h + "attn.c_attn.weight"], g[h + "attn.c_attn.bias"]  # [d_model, 3·d_model], [3·d_model]
        for i, m in enumerate("QKV"):
            out[b + f"attn.W_{m}"] = W[:, i * dm : (i + 1) * dm].reshape(dm, H, dh).transpose(1, 0, 2)
            out[b + f"attn.b_{m}"] = bias[i * dm : (i + 1) * dm].reshape(H, dh)
            scale[b + f"attn.W_{m}"] = scale[b + f"attn.b_{m}"] = float(np.abs(np.concatenate([W.ravel(), bias])).max())
        out[b + "attn.W_O"] = g[h + "attn.c_proj.weight"].reshape(H, dh, dm)
        out[b + "attn.b_O"] = g[h + "attn.c_proj.bias"]
        for ours, theirs in (("ln1.w", "ln_1.weight"), ("ln1.b", "ln_1.bias"), ("ln2.w", "ln_2.weight"),
                             ("ln2.b", "ln_2.bias"), ("mlp.W_in", "mlp.c_fc.weight"), ("mlp.b_in", "mlp.c_fc.bias"),
                             ("mlp.W_out", "mlp.c_proj.weight"), ("mlp.b_out", "mlp.c_proj.bias")):
            out[b + ours] = g[h + theirs]
    return out, {name: scale.get(name, float(np.abs(v).max())) for name, v in out.items()}


@pytest.mark.parametrize("prefix", ["", "case2."])
def test_gradients_equal_torch_autograd_on_the_gpt2_fixture(prefix):
    m = tracer.load(str(FIXTURE / "transformers"))
    with np.load(FIXTURE / "grads.npz", allow_pickle=False) as f:
        ids, want_loss = f[prefix + "ids"], float(f[prefix + "loss"])
        want, scale = _torch_grads_in_tracer_names(f, prefix, m.config)
    loss, grads = m.loss_and_grads(ids.tolist())
    assert loss == pytest.approx(want_loss, rel=2e-6)  # float32 sums in another order
    assert set(grads) == set(want) | {"b_U"} and np.all(grads["b_U"] == grads["b_U"])
    for name, w in want.items():  # float32 rounding, relative to the size of the tensor's gradients
        np.testing.assert_allclose(grads[name], w, rtol=0, atol=2e-5 * scale[name], err_msg=name)
