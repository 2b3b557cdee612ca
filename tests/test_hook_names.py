"""`tracer/core/hooks.py`, the one table of recorded names, against what runs really record: every name a
pass of every block switch records is in the table with the shape its axes give, whole numbers
where the table says so, and every name in the table is recorded by some model; the demo's screens
and the page's steps place every step of the table; a trace file is checked against it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.core import hooks
from tracer.errors import TracerError
from tracer import sections
from tracer.render.demo.screens import screen_of, step_layers
from tracer.render.page.passes import page_step
from tracer.run.trace import Generation

DATA = Path(__file__).parent / "data"
MODELS = ["tiny", *(str(DATA / f) for f in ("llama-tiny", "qwen3-tiny", "olmo2-tiny", "gemma2-tiny", "gemma3-tiny",
                                            "phi3-tiny", "gpt-oss-tiny", "qwen2-moe-tiny", "gemma4-tiny", "qwen3-5-tiny",
                                            "gemma4-moe-tiny")), "hybrid", "decoding", "beams", "speculative"]
DECODING = {"decoding": dict(min_p=0.05, repetition_penalty=1.2, presence_penalty=0.5),  # every stage of the draw
            "beams": dict(beams=2, temperature=0.0),  # every beam's continuations
            "speculative": dict(max_new_tokens=6, draft="layer:1")}  # a draft's passes, the model's verifying ones


def hybrid():
    """A model of linear-attention and softmax layers (the hybrid kinds' names), seeded."""
    from tracer.core.config import Config
    from tracer.core.params import init_weights
    from tracer.model import Model
    from tracer.tokenizers.tokens import get_tokenizer

    cfg = Config(d_vocab=50257, n_ctx=64, d_model=16, n_heads=2, n_layers=2, positional="rope", norm="rms",
                 mlp="swiglu", layer_types=("linear_attention", "softmax"), linear_k_heads=1, linear_v_heads=2,
                 linear_d_k=4, linear_d_v=4, linear_conv=3)
    return Model(cfg, init_weights(cfg, 0), get_tokenizer("gpt2"), name="hybrid")


@pytest.fixture(scope="module")
def runs() -> dict[str, Generation]:
    """Each model's prompt pass and two cached one-token passes, sampled (so the draw is recorded),
    everything recorded, the logit lens on every pass."""
    return {m: (hybrid() if m == "hybrid" else tracer.load("tiny" if m in DECODING else m)).generate(
        "the cat sat on the", lens=True, **{**dict(max_new_tokens=2, temperature=1.0, top_k=5, seed=3), **DECODING.get(m, {})})
        for m in MODELS}


def recorded(gen: Generation):
    """(name, array, step) of every pass of the run (of every row and model)."""
    for step in gen.passes:
        for name in step:
            yield name, np.asarray(step[name]), step


@pytest.mark.parametrize("model", MODELS)
def test_every_recorded_name_is_in_the_table_with_its_shape(runs, model):
    gen = runs[model]
    assert gen.steps[1].start > 0  # a cached pass: its new positions are fewer than its keys
    for name, arr, step in recorded(gen):
        hook = hooks.find(name)
        assert hook is not None, f"{name} is recorded but not in tracer/core/hooks.py"
        n_lens = step["lens.positions"].shape[0] if "lens.positions" in step else None
        runs = [len(step[x]) if x in step else None for x in ("beam.tokens", "verify.drafted")]
        want = hooks.shape(name, step.config, len(step.tokens) - step.start, len(step.tokens), n_lens, *runs)
        assert arr.shape == want, (name, arr.shape, want)
        assert (arr.dtype.kind in "iu") == hook.whole, (name, arr.dtype)
        if hook.ids:
            assert ((arr >= 0) & (arr < step.config.d_vocab)).all(), name
        assert hook.step in hooks.STEPS, name


def test_every_name_in_the_table_is_recorded_by_some_model(runs):
    seen = {hooks.split(name)[1] if name.startswith("blocks.") else name for gen in runs.values()
            for name, _, _ in recorded(gen)}
    assert set(hooks.TOP) - seen == set() and set(hooks.LAYER) - seen == set()


def test_the_tables_order_is_the_order_a_pass_records(runs):
    """TOP and LAYER list the names in the order the decoder records them (docs and errors list them so)."""
    for gen in runs.values():
        names = list(gen.steps[0])
        layer0 = [n.split(".", 2)[2] for n in names if n.startswith("blocks.0.")]
        assert layer0 == [n for n in hooks.LAYER if n in layer0]
        top = [n for n in names if not n.startswith("blocks.")]
        assert top == [n for n in hooks.TOP if n in top], top


def test_split_and_find():
    assert hooks.split("blocks.12.attn.hook_z") == (12, "attn.hook_z")
    assert hooks.split("logits") == (None, "logits")
    assert hooks.split("blocks.x.attn.hook_z")[0] is None and hooks.find("blocks.x.attn.hook_z") is None
    assert hooks.split("blocks.٣.attn.hook_z")[0] is None  # a digit that is not 0-9
    assert hooks.find("blocks." + "9" * 5000 + ".attn.hook_z") is None  # too long for int(): not a layer
    assert hooks.find("hook_resid_pre") is None  # a layer's name outside the layers
    assert hooks.find("blocks.0.logits") is None
    assert hooks.axis_of("blocks.0.attn.hook_pattern", "pos") == 1
    assert hooks.axis_of("blocks.0.attn.hook_k", "head", "kv") == 1
    assert hooks.axis_of("sample.token", "pos") is None


def test_every_step_has_a_demo_screen_and_a_page_step():
    demo = {s for _, shows in sections.demo_screens() for s in shows}
    page = {s for _, shows in sections.page_steps() for s in shows}
    assert set(hooks.STEPS) == demo | page  # hooks.STEPS is what tracer/sections.py's steps and screens show
    # what the demo's last screen takes: every position's prediction, the lens, the loop
    assert set(hooks.STEPS) - demo == {"positions", "lens", "loop", "beams"}
    assert set(hooks.STEPS) - page == set()
    assert screen_of("blocks.3.attn.hook_z") is step_layers
    assert screen_of("blocks.0.hook_resid_pre") is sections.drawn("screen", "position")[0]
    assert screen_of("sample.token") is sections.drawn("screen", "chosen")[0] and screen_of("lens.top_token") is None
    assert page_step("blocks.0.hook_resid_pre") == "embed" and page_step("blocks.2.hook_resid_pre") == "mlp"
    assert page_step("blocks.1.attn.hook_rot_q") == page_step("rope.hook_angle") == "qkv"
    assert page_step("hook_pos_embed") == "embed"
    assert page_step("blocks.0.attn.hook_pattern") == "scores" and page_step("sample.token") == "predict"
    assert page_step("no.such") == "checks"


def test_a_saved_trace_is_checked_against_the_table(runs, tmp_path):
    """A trace file whose array has another shape than the table's is refused, naming the shape."""
    gen = runs[str(DATA / "qwen3-tiny")]
    path = tmp_path / "t.npz"
    gen.save(path)
    Generation.load(path)  # as saved, it loads
    with np.load(path, allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files}
    name = "blocks.1.attn.q_norm.hook_scale"
    entries[name] = np.concatenate([entries[name]] * 2, axis=1)
    np.savez(path, **entries)
    want = list(hooks.shape(name, gen.steps[0].config, len(gen.steps[0].tokens), len(gen.steps[0].tokens)))
    with pytest.raises(TracerError, match=rf"{name}.*its config needs \[{', '.join(map(str, want))}\]"):
        Generation.load(path)


def test_the_names_other_modules_read_are_the_tables():
    """The page's vectors and patterns, the store's recipes (each sublayer kind's `hold`), the JSON record's names, the recorder's
    names that no hook may change, and the page's wanted names are all names of the table."""
    import fnmatch

    from tracer.run.overflow import REACHED_NAMES
    from tracer.core.record import NOT_FLOWING
    from tracer.render.page.data import ATTENTION, VECTORS
    from tracer.core.blocks import ATTENTIONS, MLPS

    every = list(hooks.TOP) + [f"blocks.0.{n}" for n in hooks.LAYER]
    for leaf in [h for _, h, _ in VECTORS] + [h for _, h in ATTENTION] + [n for kind in (*ATTENTIONS.values(), *MLPS.values()) for n in kind.hold]:
        assert leaf in hooks.LAYER, leaf
    for glob in REACHED_NAMES + [f"*{n}" for n in NOT_FLOWING]:
        assert fnmatch.filter(every, glob), glob


def test_the_page_steps_a_stated_value_may_go_to_are_the_pages_steps():
    """page_step's answers (for every name of the table and for a name it does not know) are ids of the
    page's steps (`tracer.sections`, sent with the page's data), each a slide of the page's script."""
    import re

    import tracer.render.page as page_module

    ids = {step for step, _ in sections.page_steps()} | {sections.CHECKS}
    answers = {page_step(n) for n in [*hooks.TOP, *(f"blocks.{l}.{n}" for l in (0, 1) for n in hooks.LAYER), "no.such"]}
    assert {"embed", "mlp", "qkv", "predict", "checks"} <= answers <= ids
    scripts = "".join(p.read_text(encoding="utf-8") for p in Path(page_module.__file__).parent.glob("*.js"))
    assert set(re.findall(r"^SLIDES\.(\w+) = function", scripts, re.M)) == ids
