"""Hooks (`Model.run/generate(…, hooks=…)`, TransformerLens's `run_with_hooks`) and the interventions
built on them: each checked against an independent way of making the same change to the model (its
weights edited instead), and the CLI's --ablate."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tracer.errors import TracerError
from tracer.run.ablation import Ablation
from tracer.run.interventions import ablate_head, ablate_mlp, add_to_residual, combine, patch
from tracer.model import Model


@pytest.fixture(scope="module")
def model(small_config):
    from tracer.core.params import init_weights
    from tracer.tokenizers.tokens import WordTokenizer

    cfg = small_config(n_layers=2, n_heads=2, d_head=4, d_model=8, d_mlp=16, d_vocab=40)
    params = init_weights(cfg, 7)
    rng = np.random.default_rng(3)
    params = {k: (v + rng.normal(0, 0.3, v.shape)).astype(v.dtype) for k, v in params.items()}  # beyond the init
    return Model(cfg, params, WordTokenizer([f"w{i}" for i in range(40)]), "hooked")


IDS = [3, 1, 4, 1, 5, 9, 2, 6]


def edited(model, **changes) -> Model:
    """The same model with some weights replaced: the independent way to make a change."""
    params = {**model.params, **changes}
    return Model(model.config, params, model.tokenizer, "edited")


def test_an_identity_hook_changes_nothing_and_is_recorded(model):
    clean = model.run(IDS)
    same = model.run(IDS, hooks={"blocks.*.attn.hook_z": lambda z: z})
    np.testing.assert_array_equal(same["logits"], clean["logits"])
    assert same.meta["hooked"] == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]


def test_zeroing_a_heads_z_equals_zeroing_its_slice_of_W_O(model):
    W_O = np.array(model.params["blocks.1.attn.W_O"])  # [head, d_head, d_model]
    W_O[0] = 0
    want = edited(model, **{"blocks.1.attn.W_O": W_O}).run(IDS)["logits"]
    got = model.run(IDS, hooks=ablate_head(1, 0))
    np.testing.assert_allclose(got["logits"], want, rtol=0, atol=1e-5)
    assert not np.allclose(got["logits"], model.run(IDS)["logits"], atol=1e-3)  # the head mattered
    assert np.all(got["blocks.1.attn.hook_z"][:, 0] == 0)  # the trace records the replaced value


def test_mean_ablation_replaces_a_head_by_its_mean_over_positions(model):
    z = model.run(IDS)["blocks.0.attn.hook_z"]
    got = model.run(IDS, hooks=ablate_head(0, 1, "mean"))["blocks.0.attn.hook_z"]
    np.testing.assert_allclose(got[:, 1], np.broadcast_to(z[:, 1].mean(axis=0), z[:, 1].shape), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(got[:, 0], z[:, 0])


def test_removing_an_mlp_equals_zeroing_its_output_weights(model):
    zero = {"blocks.0.mlp.W_out": np.zeros_like(model.params["blocks.0.mlp.W_out"]),
            "blocks.0.mlp.b_out": np.zeros_like(model.params["blocks.0.mlp.b_out"])}
    np.testing.assert_allclose(model.run(IDS, hooks=ablate_mlp(0))["logits"], edited(model, **zero).run(IDS)["logits"],
                               rtol=0, atol=1e-5)


def test_adding_to_the_residual_stream_equals_adding_to_every_position_vector(model):
    v = np.linspace(-1, 1, model.config.d_model).astype(np.float32)
    want = edited(model, W_pos=model.params["W_pos"] + v).run(IDS)["logits"]
    np.testing.assert_allclose(model.run(IDS, hooks=add_to_residual(0, v))["logits"], want, rtol=0, atol=1e-5)


def test_patching_every_position_of_the_first_residual_stream_gives_the_other_runs_numbers(model):
    other = [7, 7, 2, 8, 1, 8, 2, 8]
    src = model.run(other)
    got = model.run(IDS, hooks=patch("blocks.0.hook_resid_pre", src["blocks.0.hook_resid_pre"]))
    np.testing.assert_allclose(got["logits"], src["logits"], rtol=0, atol=1e-6)
    one = model.run(IDS, hooks=patch("blocks.0.hook_resid_pre", src["blocks.0.hook_resid_pre"], positions=[3]))
    np.testing.assert_array_equal(one["blocks.0.hook_resid_pre"][3], src["blocks.0.hook_resid_pre"][3])
    np.testing.assert_array_equal(one["blocks.0.hook_resid_pre"][2], model.run(IDS)["blocks.0.hook_resid_pre"][2])


def test_hooks_in_generation_agree_with_and_without_the_kv_cache(model):
    hooks = combine(ablate_head(0, 0), ablate_head(1, 1))
    a = model.generate(IDS, max_new_tokens=6, hooks=hooks)
    b = model.generate(IDS, max_new_tokens=6, hooks=hooks, cache=False)
    assert a.generated_ids == b.generated_ids
    for sa, sb in zip(a.steps, b.steps):
        np.testing.assert_allclose(sa["logits"][-1], sb["logits"][-1], rtol=0, atol=1e-5)
    assert a.meta["hooked"] == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]


def test_a_hook_given_the_name_as_well(model):
    seen = []
    model.run(IDS, hooks={"blocks.*.hook_resid_post": lambda v, name: seen.append(name) or v})
    assert seen == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]


def _bound(x, i=1):  # a loop variable bound as Python binds it
    return x * (i + 1)


def _scaled(x, scale=2.0):  # an option with a default
    return x * scale


def _keyword_name(x, *, name):
    return x * (2 if name.startswith("blocks.0") else 1)


@pytest.mark.parametrize("fn, gets_name", [
    (lambda x, i=1: x * (i + 1), False), (_bound, False), (_scaled, False), (lambda x, *rest: x * 2, False),
    (lambda x, name: x * (2 if name.startswith("blocks.0") else 1), True),
    (lambda x, hook=None: x * (2 if hook.startswith("blocks.0") else 1), True),
    (_keyword_name, True), (lambda v, where, /: v * (2 if where.startswith("blocks.0") else 1), True),
])
def test_a_hook_gets_the_name_only_when_it_asks_for_it(model, fn, gets_name):
    """The name goes to a second required positional parameter or one called `hook`/`name`; a default
    (`lambda x, i=i: …`, `def f(x, scale=2.0)`) keeps its value. Checked against the value doubled by hand
    at layer 0's input (as a name-reading hook does) or at both layers' (as a value-only one does)."""
    got = model.run(IDS, hooks={"blocks.*.hook_resid_pre": fn})["logits"]
    layers = ["blocks.0.hook_resid_pre"] if gets_name else ["blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre"]
    want = model.run(IDS, hooks=combine(*({n: lambda x: x * 2} for n in layers)))["logits"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    twice = model.run(IDS, hooks=combine({"blocks.*.hook_resid_pre": fn}, {"blocks.*.hook_resid_pre": lambda x: x}))
    np.testing.assert_allclose(twice["logits"], want, rtol=0, atol=1e-6)  # combine asks the same question


def test_a_hook_that_edits_its_argument_in_place_changes_neither_the_weights_nor_what_was_recorded(model):
    """`v *= 0.5` at hook_pos_embed (whose value is W_pos's rows) acts like the pure `v * 0.5`, equals the
    model with W_pos halved, and leaves the model as it was; in place at every layer's input (the value
    the previous layer recorded as its output) the whole generation, every pass, is the pure hook's."""
    before = {k: np.array(v) for k, v in model.params.items()}
    clean = model.run(IDS)["logits"]

    def halve(v):
        v *= 0.5
        return v

    got = model.run(IDS, hooks={"hook_pos_embed": halve})["logits"]
    want = edited(model, W_pos=model.params["W_pos"] * np.float32(0.5)).run(IDS)["logits"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(model.run(IDS)["logits"], clean)  # the next run is the model's own
    for k, v in before.items():
        np.testing.assert_array_equal(model.params[k], v)

    def shrink(x):
        x[:] = x * 0.9
        return x

    a = model.generate(IDS, max_new_tokens=3, hooks={"blocks.*.hook_resid_pre": shrink, "hook_embed": halve})
    b = model.generate(IDS, max_new_tokens=3, hooks={"blocks.*.hook_resid_pre": lambda x: x * 0.9,
                                                     "hook_embed": lambda x: x * 0.5})
    assert_same_generation(a, b)
    np.testing.assert_array_equal(model.run(IDS)["logits"], clean)


def assert_same_generation(a, b) -> None:
    """The same tokens, and every pass the same names with the same values."""
    assert a.generated_ids == b.generated_ids
    for sa, sb in zip(a.steps, b.steps, strict=True):
        assert list(sa.keys()) == list(sb.keys())
        for name in sb.keys():
            np.testing.assert_array_equal(sa[name], sb[name], err_msg=name)


def test_only_the_attention_scores_carry_minus_infinity_as_the_hook_table_says(model, small_config):
    """The names whose recorded values hold −∞ in a clean run (with and without a sliding window) are
    exactly those the hook table marks `masked`."""
    from tracer.core import hooks
    from tracer.core.params import init_weights

    marked = {n for n in hooks.LAYER if hooks.LAYER[n].masked} | {n for n in hooks.TOP if hooks.TOP[n].masked}
    assert marked == {"attn.hook_attn_scores"}
    windowed = small_config(n_layers=2, positional="rope", norm="rms", mlp="swiglu", sliding_window=3, d_vocab=40)
    for m in (model, Model(windowed, init_weights(windowed, 1), model.tokenizer, "windowed")):
        trace = m.run(IDS)
        carry = {hooks.split(n)[1] for n in trace.keys() if np.isneginf(trace[n]).any()}
        assert carry == marked


def test_a_hook_on_the_attention_scores_may_keep_the_masks_minus_infinity_and_nothing_else(model, small_config):
    """The identity passes; adding one number to every score (−∞ + c is −∞) changes no softmax, so no
    logit; halving the scores is recorded as the halved scores, and the pattern is their softmax by hand.
    NaN, +∞ or a −∞ where the mask has none are refused in one line; so on a sliding window's layers."""
    from tracer.core.params import init_weights

    name = "blocks.1.attn.hook_attn_scores"
    clean = model.run(IDS)
    np.testing.assert_array_equal(model.run(IDS, hooks={name: lambda s: s})["logits"], clean["logits"])
    np.testing.assert_allclose(model.run(IDS, hooks={name: lambda s: s + 3.0})["logits"], clean["logits"], rtol=0, atol=1e-5)
    half = model.run(IDS, hooks={name: lambda s: s * 0.5})
    np.testing.assert_array_equal(half[name], clean[name] * np.float32(0.5))
    s = clean[name].astype(np.float64) * 0.5
    want = np.exp(s - s.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(half["blocks.1.attn.hook_pattern"], want / want.sum(axis=-1, keepdims=True), rtol=0, atol=1e-6)

    def put(value, at):
        def fn(s):
            out = np.array(s)
            out[(0, *at[:-1])] = at[-1]
            return out
        return fn

    for at in [(3, 1, np.nan), (3, 1, np.inf), (3, 1, -np.inf), (1, 5, np.inf), (1, 5, np.nan)]:  # (1, 5): masked
        with pytest.raises(TracerError, match=f"hook on {name}: returned NaN or infinite numbers"):
            model.run(IDS, hooks={name: put(None, at)})
    windowed = small_config(n_layers=2, positional="rope", norm="rms", mlp="swiglu", sliding_window=3, d_vocab=40)
    w = Model(windowed, init_weights(windowed, 1), model.tokenizer, "windowed")
    np.testing.assert_array_equal(w.run(IDS, hooks={"blocks.*.attn.hook_attn_scores": lambda s: s})["logits"],
                                  w.run(IDS)["logits"])
    with pytest.raises(TracerError, match="returned NaN or infinite numbers"):
        w.run(IDS, hooks={"blocks.0.attn.hook_attn_scores": put(None, (5, 4, -np.inf))})  # inside the window: seen


def test_hooks_ablations_and_compare_work_on_a_gguf_with_llama3s_rope_freqs(gguf_of_folder, runner):
    """llama-tiny written as llama.cpp writes Llama 3 (its RoPE scaling as the rope_freqs tensor): a hooked
    run gives the hooked folder's logits, and the CLI's --ablate and compare run on it."""
    import tracer
    from tracer.cli import app
    from pathlib import Path

    folder = Path(__file__).parent / "data" / "llama-tiny"
    path = gguf_of_folder(folder, "llama-bpe")
    gg, hf = tracer.load(str(path)), tracer.load(str(folder))
    assert gg.config.rope_scaling["rope_type"] == "factors"
    ids = hf.tokenize("hello world")
    for hooks in (ablate_head(0, 1), ablate_mlp(1), {"blocks.*.attn.hook_attn_scores": lambda s: s}):
        np.testing.assert_allclose(gg.run(ids, hooks=hooks)["logits"], hf.run(ids, hooks=hooks)["logits"], rtol=0, atol=1e-4)
    r = runner.invoke(app, ["trace", "hello world", "--model", str(path), "--ablate", "0:1", "-n", "1", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ablation"]["ablated"] == ["head 0:1"]
    c = runner.invoke(app, ["compare", "hello world", "hello word", "--model", str(path), "--json"])
    assert c.exit_code == 0, c.output


KINDS = ["gpt-oss-tiny", "qwen2-moe-tiny", "qwen3-5-tiny", "gemma4-tiny", "gemma4-moe-tiny", "smollm3-tiny", "olmo3-tiny"]


@pytest.mark.parametrize("folder", KINDS)
def test_in_place_hooks_at_every_point_of_every_kind_act_as_pure_ones_and_leave_the_model(folder):
    """Sinks, routed experts (Gemma 4's beside its MLP too), linear attention, Gemma 4's shared keys and
    per-layer inputs, partial rotary, NoPE layers: `v *= 0.5` at every hook point of a generation (hooks
    accepted at all: a partial rotary's width fit only the model's d_head) gives the pure `v * 0.5`'s every
    recorded value, and the model's next run, unhooked, is its own."""
    from pathlib import Path

    import tracer

    m = tracer.load(str(Path(__file__).parent / "data" / folder))
    ids = [1, 2, 3, 4, 5, 6, 7]
    before = {k: np.array(v) for k, v in m.params.items()}
    clean = m.run(ids)["logits"]

    def halve(v):
        if v.dtype.kind == "f":
            v *= 0.5
        return v

    a = m.generate(ids, max_new_tokens=3, hooks={"*": halve})
    b = m.generate(ids, max_new_tokens=3, hooks={"*": lambda v: v * 0.5 if v.dtype.kind == "f" else v})
    assert_same_generation(a, b)
    np.testing.assert_array_equal(m.run(ids)["logits"], clean)
    for k, v in before.items():
        np.testing.assert_array_equal(m.params[k], v, err_msg=k)


@pytest.mark.parametrize("hooks, says", [
    ({"blocks.0.attn.hook_zz": lambda z: z}, r"no hook point is called 'blocks.0.attn.hook_zz' \(did you mean"),
    ({"blocks.0.ln1.hook_scale": lambda s: s * 2}, "recorded beside the computation"),
    ({"blocks.0.attn.hook_z": lambda z: z[:, :1]}, r"returned shape \[8, 1, 4\]; the value has shape \[8, 2, 4\]"),
    ({"blocks.0.attn.hook_z": lambda z: z * np.nan}, "returned NaN or infinite numbers"),
    ({"blocks.0.attn.hook_z": lambda z: [[1.0, 2.0], [3.0]]}, r"hook on blocks.0.attn.hook_z: returned a ragged list"),
    ({"blocks.0.hook_resid_pre": lambda x: [list(r) for r in x[:-1]] + [list(x[-1][:3])]},
     r"hook on blocks.0.hook_resid_pre: returned a ragged list .* \[8, 8\]"),
    ({"blocks.0.attn.hook_z": lambda z: (z, z[:1])}, r"hook on blocks.0.attn.hook_z: returned a ragged tuple"),
    ({"blocks.0.attn.hook_z": lambda z: "zeros"}, "returned str, not an array"),
    ({"blocks.0.attn.hook_z": lambda z: 1 / 0}, "hook on blocks.0.attn.hook_z: ZeroDivisionError: division by zero"),
    ({"blocks.0.attn.hook_z": 3}, "must name hook points and map to a function"),
])
def test_a_hook_that_cannot_be_is_one_line(model, hooks, says):
    with pytest.raises(TracerError, match=says):
        model.run(IDS, hooks=hooks)


def test_ablate_on_the_command_line_reports_both_predictions(runner):
    from tracer.cli import app

    r = runner.invoke(app, ["trace", "A B C D E F", "-n", "1", "--ablate", "1:0", "--ablate", "2:*", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)["ablation"]
    assert out["ablated"] == ["head 1:0", "every head of layer 2"]
    assert out["heads"] == [[1, 0], [2, 0], [2, 1], [2, 2], [2, 3]]  # the pairs removed, each once, in order
    assert out["clean"]["top_id"] == 402 and 0.9 < out["clean"]["p_top"] < 1  # ␣G
    shown = runner.invoke(app, ["trace", "A B C D E F", "-n", "1", "--ablate", "1:0", "--section", "predict"])
    assert shown.exit_code == 0 and f"without head 1:0: p(␣G) {out['clean']['p_top']:.3f} → " in shown.output


@pytest.mark.parametrize("spec, says", [
    ("9:0", "--ablate: 9:0 names layer 9; the model has layers 0–3"), ("1:7", "--ablate: 1:7 names head 7; layer 1 has heads 0–3"),
    ("x:y", "--ablate: 'x:y' is not an ablation: expected LAYER:HEAD"), ("1:0:max", "'1:0:max' is not an ablation"),
    ("١:0", "'١:0' is not an ablation"), ("1:mlp:mean", "'1:mlp:mean': an MLP is removed by zeros only")])
def test_an_ablation_that_does_not_fit_is_one_line_before_anything_runs(runner, tmp_path, spec, says):
    from tracer.cli import app

    save = tmp_path / "t.npz"
    for command in (["trace", "A B C", "--save", str(save)], ["demo", "--prompt", "A B C"]):
        r = runner.invoke(app, [*command, "--ablate", spec])
        assert r.exit_code == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not save.exists()


@pytest.mark.parametrize("text, value, words, heads", [
    ("1:0", Ablation(1, 0), "head 1:0", [[1, 0]]), (" 2:3:MEAN ", Ablation(2, 3, "mean"), "head 2:3 (mean)", [[2, 3]]),
    ("3:*", Ablation(3, "*"), "every head of layer 3", [[3, 0], [3, 1], [3, 2], [3, 3]]),
    ("0:*:mean", Ablation(0, "*", "mean"), "every head of layer 0 (mean)", [[0, 0], [0, 1], [0, 2], [0, 3]]),
    ("1:MLP", Ablation(1, "mlp"), "layer 1's MLP", [])])
def test_an_ablation_is_parsed_once_into_the_value_its_hooks_words_and_heads_come_from(text, value, words, heads):
    import tracer

    cfg = tracer.load("abc").config
    got = Ablation.parse(text)
    assert got == value and Ablation.parse(got) is got and str(Ablation.parse(str(got))) == str(got)
    assert got.words == words and got.heads(cfg) == heads
    want = {"mlp": lambda: ablate_mlp(1), "*": lambda: combine(*(ablate_head(got.layer, h, got.how) for h in range(4)))}
    assert set(got.hooks(cfg)) == set(want.get(got.head, lambda: ablate_head(got.layer, got.head, got.how))())


def test_attribution_is_the_central_difference_of_the_logit_along_each_inputs_own_vector(small_config):
    """gradient × input at position p = d/dε logit(x + ε·x_p at p) at ε = 0, taken here through the hooks
    API by central differences in float64 (an independent way to the backward pass's number)."""
    from tracer.core.params import init_weights
    from tracer.tokenizers.tokens import WordTokenizer

    cfg = small_config(dtype="float64", n_layers=2)
    rng = np.random.default_rng(11)
    params = {k: v + rng.normal(0, 0.2, v.shape) for k, v in init_weights(cfg, 5).items()}
    m = Model(cfg, params, WordTokenizer([f"w{i}" for i in range(40)]), "fd")
    got = m.attribute(IDS)
    target = got["target_id"]
    assert target == int(np.argmax(m.run(IDS)["logits"][-1]))
    x = m.run(IDS)["blocks.0.hook_resid_pre"]
    h = 1e-5
    for p in range(len(IDS)):
        def logit(eps):
            bump = np.zeros_like(x)
            bump[p] = eps * x[p]
            return m.run(IDS, names=["logits"], hooks={"blocks.0.hook_resid_pre": lambda v: v + bump})["logits"][-1, target]
        fd = (logit(h) - logit(-h)) / (2 * h)
        np.testing.assert_allclose(got["per_position"][p], fd, rtol=1e-6, atol=1e-8)
    with pytest.raises(TracerError, match="target must be a token id"):
        m.attribute(IDS, target=40)


def test_attribute_on_the_command_line_gives_the_apis_numbers(runner):
    import tracer
    from tracer.cli import app

    r = runner.invoke(app, ["trace", "red fox jumps. red fox", "-n", "1", "--attribute", "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["attribution"]
    want = tracer.load("abc").attribute("red fox jumps. red fox", target=got["target_id"])
    np.testing.assert_allclose(got["per_position"], want["per_position"], rtol=1e-6, atol=1e-9)
    assert got["target_id"] == json.loads(r.stdout)["generated_ids"][0] and len(got["per_position"]) == 6
    shown = runner.invoke(app, ["trace", "red fox jumps. red fox", "-n", "0", "--attribute", "--section", "tokens"])
    assert shown.exit_code == 0 and "Which prompt token mattered to ␣jumps" in shown.output, shown.output


@pytest.mark.parametrize("model_name, given", [("abc", "(embedding + position)"),
                                               ("rotary", "(its embedding: this model adds no position vector)")])
def test_attribute_says_what_it_differentiates_and_that_an_ablation_measures(runner, model_name, given):
    """The input the scores are taken over is the model's own (a rotary model adds no position vector: the
    words said 'embedding + position' on every model), and the table says that gradient × input is an estimate
    that can disagree with knocking a part out, naming --ablate (the README's copy lesson gives its cue ␣window a
    negative score while the copying heads carry the answer)."""
    import tracer
    from tracer.cli import app

    cfg = tracer.load(model_name).config
    assert cfg.has_positions == (model_name == "abc") and cfg.position_kind.rotary == (model_name == "rotary")
    r = runner.invoke(app, ["trace", "A B C", "--model", model_name, "-n", "0", "--attribute", "--section", "tokens"],
                      env={"COLUMNS": "100", "NO_COLOR": "1"})
    said = " ".join(r.stdout.split())
    assert r.exit_code == 0 and given in said, said
    assert "Gradient × input is a linear estimate" in said and "--ablate L:H" in said


def test_patching_at_layer_0_recovers_exactly_all_at_the_differing_position_and_nothing_elsewhere(model):
    from tracer.run.interventions import activation_patching

    top = lambda ids: int(np.argmax(model.run(ids, names=["logits"])["logits"][-1]))  # noqa: E731
    a = IDS
    b = next(IDS[:6] + [t] + IDS[7:] for t in range(40) if top(IDS[:6] + [t] + IDS[7:]) != top(IDS))  # differs at 6
    got = activation_patching(model, a, b)
    assert got["differs"] == [0, 0, 0, 0, 0, 0, 1, 0] and got["answers"] == [top(a), top(b)]
    assert got["recovered"][0] == [0.0] * 6 + [1.0, 0.0]  # exactly: the patched input is A's or B's own
    np.testing.assert_allclose(got["distance"][0], [0] * 6 + [got["distance"][0][6], 0], atol=0)
    assert got["distance"][0][6] > 0 and got["recovered"][1][:6] == [0.0] * 6  # before the difference: no effect
    with pytest.raises(TracerError, match="A has 8, B has 7"):
        activation_patching(model, a, b[:-1])


def test_compare_on_the_command_line(runner):
    from tracer.cli import app

    r = runner.invoke(app, ["compare", "A B C D E F", "A B C D E Q", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["patch"]["answers"] == [" G", out["answer_tokens"][1]] and out["differs"] == [0, 0, 0, 0, 0, 1]
    assert [row[5] for row in out["patch"]["recovered"]] == [1.0] * 4
    shown = runner.invoke(app, ["compare", "A B C D E F", "A B C D E Q"])
    assert shown.exit_code == 0 and "Activation patching" in shown.output and "A predicts ␣G" in shown.output
    bad = runner.invoke(app, ["compare", "A B C", "A B"])
    assert bad.exit_code == 2 and "A has 3, B has 2" in bad.stderr
    assert "none for patching to recover" not in " ".join(shown.output.split())
    same = runner.invoke(app, ["compare", "A B C", "A B C"])  # one answer: nothing to recover, and it says so
    assert same.exit_code == 0 and "there is none for patching to recover: every fraction below is 0 ÷ 0 (nan)" in \
        " ".join(same.output.split())


def test_compare_never_prints_minus_zero(runner):
    """A fraction a hair below 0 (B C D E F G's patched layer 3 at B: -0.0035) prints as 0.00, and every
    cell is --json's fraction rounded once to 2 decimals."""
    from tracer.cli import app

    a, b = "A B C D E F", "B C D E F G"
    got = json.loads(runner.invoke(app, ["compare", a, b, "--json"]).stdout)["patch"]["recovered"]
    assert any(-0.005 < v < 0 for row in got for v in row)  # the case this test is about
    shown = runner.invoke(app, ["compare", a, b], env={"COLUMNS": "120"}).stdout
    assert "-0.00" not in shown
    rows = [ln.split() for ln in shown.splitlines() if ln.split()[:1] in (["0"], ["1"], ["2"], ["3"])][-4:]
    cells = np.array([[float(x) for x in r[1:]] for r in rows])  # [layer, pos]
    np.testing.assert_allclose(cells, np.array(got), atol=0.005 + 1e-12)


def test_the_demo_walks_through_the_ablated_run_and_says_what_it_changed():
    from rich.console import Console

    from tracer.cli.teach import _demo_run
    from tracer.render.demo.output import step_chosen

    d = _demo_run(None, "A B C D E F", "abc", ablate=(Ablation.parse("1:0"),))
    assert d.gen.meta["hooked"] == ["blocks.1.attn.hook_z"] and "without head 1:0" in d.title
    c = Console(record=True, width=80, color_system=None)
    c.print(step_chosen(d).body)
    clean = d.gen.meta["ablation"]["clean"]["p_top"]  # the clean run's p(␣G), beside the ablated run's
    assert f"without head 1:0: p(␣G) {clean:.3f} → " in c.export_text()


@pytest.mark.parametrize("key, value", [("ablation", {"clean": 1}), ("ablation", "x"), ("attribution", {"target_id": -1}),
                                        ("attribution", {"target_id": 402, "per_position": ["a"]}), ("hooked", "blocks.0.hook_z"),
                                        ("hooked", [3])])
def test_a_damaged_intervention_record_in_a_saved_trace_is_named(runner, tmp_path, key, value):
    import tracer
    from tracer.run.damage import damage
    from tracer.run.trace import Generation

    gen = tracer.load("abc").generate("A B C", max_new_tokens=1)
    gen.meta[key] = value
    assert key in damage(Generation(gen.steps, gen.prompt_ids, gen.generated_ids, gen.text, gen.meta), 50257)


def test_removed_heads_are_the_pairs_the_ablations_name_once_and_no_mlp():
    import tracer
    from tracer.run.ablation import removed_heads

    cfg = tracer.load("abc").config
    given = [Ablation.parse(t) for t in ["1:0", "1:0:mean", "0:mlp", "3:*", "3:2"]]
    assert removed_heads(given, cfg) == [[1, 0], [3, 0], [3, 1], [3, 2], [3, 3]]
    assert removed_heads([], cfg) == [] and removed_heads([Ablation(2, "mlp")], cfg) == []
