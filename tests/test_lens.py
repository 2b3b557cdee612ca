"""What the residual stream predicts (`tracer.run.lens`): every position's next-token prediction and loss
(teacher forcing), and the logit lens after every layer.

References are independent of the code under test: log-softmax written with `math`, the final
layer norm and W_U written from their definitions (`final_ln_unembed`, in conftest), and the
naive per-number decoder in `tests/reference.py` for the residual streams.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracer
from tracer.run.lens import record_logit_lens

from .reference import naive_forward


def log_softmax_row(row) -> list[float]:
    m = max(float(x) for x in row)
    total = sum(math.exp(float(x) - m) for x in row)
    return [float(x) - m - math.log(total) for x in row]


# --------------------------------------------------------------------------- every position's prediction


def test_per_position_loss_is_minus_log_softmax_of_the_next_token(word_model):
    m = word_model(seed=4)
    g = m.generate([5, 1, 7, 2, 9], max_new_tokens=3, temperature=1.0, seed=2, cache=True)
    seq = g.tokens
    for n, s in enumerate(g.steps):
        rows = s["logits"]  # [pos, d_vocab] of the positions this pass computed
        assert s["loss.per_position"].shape == (rows.shape[0],)
        for r, row in enumerate(rows):
            pos = s.start + r
            nxt = seq[pos + 1] if pos + 1 < len(seq) else int(s["sample.token"])
            lp = log_softmax_row(row)
            assert int(s["predict.next_token"][r]) == nxt
            assert float(s["loss.per_position"][r]) == pytest.approx(-lp[nxt], abs=1e-12)
            assert float(s["predict.next_prob"][r]) == pytest.approx(math.exp(lp[nxt]), abs=1e-12)
            assert int(s["predict.top_token"][r]) == max(range(len(lp)), key=lambda i: lp[i])
            assert float(s["predict.top_prob"][r]) == pytest.approx(math.exp(max(lp)), abs=1e-12)
    # the last row of every pass is judged against the token the sampler chose
    assert [int(s["predict.next_token"][-1]) for s in g.steps] == g.generated_ids


# --------------------------------------------------------------------------- logit lens


@pytest.mark.parametrize("cfg", [{}, {"layer_norm": False}, {"n_layers": 3, "residual": False}])
def test_logit_lens_matches_a_hand_written_final_layer_norm_and_unembedding(cfg, word_model, final_ln_unembed):
    m = word_model(seed=7, **cfg)
    g = m.generate([1, 2, 3, 4], max_new_tokens=2, temperature=0)
    s = g.steps[0]
    L = m.config.n_layers
    ref = naive_forward(m.config, m.params, [1, 2, 3, 4])
    streams = [ref[f"blocks.{l}.hook_resid_pre"] for l in range(L)] + [ref[f"blocks.{L - 1}.hook_resid_post"]]
    assert s["lens.top_token"].shape == (L + 1, 4)
    assert s["lens.positions"].tolist() == [0, 1, 2, 3]
    target = [2, 3, 4, g.generated_ids[0]]
    assert s["lens.target"].tolist() == target
    for r, x in enumerate(streams):
        logits = final_ln_unembed(m, x)  # [pos, d_vocab]
        for c in range(4):
            lp = log_softmax_row(logits[c])
            best = max(range(len(lp)), key=lambda i: lp[i])
            assert int(s["lens.top_token"][r, c]) == best
            assert float(s["lens.top_prob"][r, c]) == pytest.approx(math.exp(lp[best]), abs=1e-9)
            assert float(s["lens.target_prob"][r, c]) == pytest.approx(math.exp(lp[target[c]]), abs=1e-9)
            assert int(s["lens.target_rank"][r, c]) == sum(1 for v in logits[c] if v > logits[c][target[c]])


def test_logit_lens_last_row_is_the_final_prediction(word_model):
    m = word_model(seed=11, n_layers=4)
    g = m.generate([0, 6, 2], max_new_tokens=3, temperature=0)
    for s in g.steps:
        top = np.argmax(s["logits"], axis=-1)  # [pos]
        cols = s["lens.positions"] - s.start
        assert s["lens.top_token"][-1].tolist() == top[cols].tolist()
        assert int(s["lens.top_token"][-1, -1]) == int(s["sample.token"])  # greedy: the top-1 is chosen
        assert int(s["lens.target_rank"][-1, -1]) == 0


def test_logit_lens_on_a_model_without_layers(word_model):
    m = word_model(n_layers=0)
    s = m.generate([1, 2], max_new_tokens=1).steps[0]
    assert s["lens.top_token"].shape == (1, 2)
    assert s["lens.top_token"][0].tolist() == np.argmax(s["logits"], axis=-1).tolist()


def test_logit_lens_keeps_to_its_budget_on_large_vocabularies(monkeypatch, word_model):
    import tracer.run.lens as lens

    m = word_model()
    per_position = (m.config.n_layers + 1) * m.config.d_model * m.config.d_vocab
    monkeypatch.setattr(lens, "LENS_BUDGET", 2 * per_position)
    monkeypatch.setattr(lens.lens_width, "__defaults__", (2 * per_position,))
    s = m.generate([1, 2, 3, 4, 5], max_new_tokens=1).steps[0]
    assert s["lens.positions"].tolist() == [3, 4]  # the last two positions only
    assert s["lens.top_token"].shape == (3, 2)


def test_record_logit_lens_on_a_plain_run(word_model):
    m = word_model(seed=2)
    t = m.run([3, 1, 4])
    assert record_logit_lens(m, t)
    assert t["lens.top_token"][-1].tolist() == np.argmax(t["logits"], axis=-1).tolist()
    assert t["predict.next_token"].tolist() == [1, 4, int(np.argmax(t["logits"][-1]))]


def test_lens_is_skipped_without_the_residual_streams(word_model):
    m = word_model()
    s = m.generate([1, 2], max_new_tokens=1, names=["logits"]).steps[0]
    assert "lens.top_token" not in s and "loss.per_position" not in s and "logits" in s


def test_saved_generation_keeps_every_step_with_lens_and_loss(tmp_path, word_model):
    m = word_model()
    g = m.generate([1, 2, 3], max_new_tokens=3, temperature=1.0, seed=3)
    path = tmp_path / "g.npz"
    g.save(path)
    with np.load(path, allow_pickle=False) as z:
        names = set(z.files)
    assert {"lens.top_token", "loss.per_position", "steps.1.lens.top_token", "steps.2.loss.per_position",
            "steps.2.sample.uniform"} <= names
    back = tracer.run.trace.Generation.load(path)
    for a, b in zip(g.steps, back.steps):
        np.testing.assert_array_equal(a["lens.top_token"], b["lens.top_token"])
        np.testing.assert_array_equal(a["loss.per_position"], b["loss.per_position"])
        assert a.start == b.start


def test_logit_lens_in_chunks_and_without_recorded_logits_agrees(monkeypatch, word_model):
    import tracer.run.lens as lens

    m = word_model(seed=5, n_layers=3)
    whole = m.generate([1, 2, 3, 4], max_new_tokens=2).steps[0]
    monkeypatch.setattr(lens, "LENS_CHUNK", 1)  # one layer's rows per chunk
    chunked = m.generate([1, 2, 3, 4], max_new_tokens=2).steps[0]
    no_logits = m.generate([1, 2, 3, 4], max_new_tokens=2, names=["blocks.*", "hook_*", "lens.*"]).steps[0]
    assert "logits" not in no_logits  # so the last row went through the lens too
    for name in ("lens.top_token", "lens.target_rank", "lens.target"):
        np.testing.assert_array_equal(chunked[name], whole[name])
        np.testing.assert_array_equal(no_logits[name], whole[name])
    for name in ("lens.top_prob", "lens.target_prob"):
        np.testing.assert_allclose(chunked[name], whole[name], rtol=0, atol=1e-12)
        np.testing.assert_allclose(no_logits[name], whole[name], rtol=0, atol=1e-12)


def test_top_and_target_without_log_probabilities_matches_float64_log_softmax():
    from tracer.run.lens import top_and_target

    rng = np.random.default_rng(8)
    logits = (rng.standard_normal((4, 50257)) * 6).astype(np.float32)  # [rows, d_vocab] GPT-2's width
    logits[2, 7] = logits[2, 9] = logits[2].max() + 1  # a tie: the first index wins, as argmax does
    target = np.array([0, 5, 9, 50256])
    x = logits.astype(np.float64)
    want = x - x.max(axis=-1, keepdims=True)
    want -= np.log(np.exp(want).sum(axis=-1, keepdims=True))  # float64 log-softmax
    for arr in (logits, np.asfortranarray(logits)):  # unembed returns Fortran order: same answers
        best, top_lp, tgt_lp, rank = top_and_target(arr, target)
        assert best.tolist() == want.argmax(axis=-1).tolist() and best[2] == 7
        rows = np.arange(4)
        np.testing.assert_allclose(top_lp, want[rows, best], rtol=0, atol=1e-6)  # float32 exp, float64 sum
        np.testing.assert_allclose(tgt_lp, want[rows, target], rtol=0, atol=1e-6)
        assert rank.tolist() == [int((logits[r] > logits[r, target[r]]).sum()) for r in range(4)]
        assert np.all(arr == logits)  # input untouched
