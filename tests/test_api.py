"""The Python API as the README shows it: `tracer.load`, `Model.run`, `Model.generate`, seeded weights,
and clear errors for bad prompts. The commands are in `test_cli.py`."""

from __future__ import annotations

import numpy as np
import pytest

import tracer
from tracer.errors import TracerError

ARTICLE = "You are a business consultant, please analyze the impact of rising oil prices on the automotive industry."


def test_readme_api_example():
    model = tracer.load("tiny")
    trace = model.run(ARTICLE)
    assert trace["blocks.0.attn.hook_pattern"].shape == (2, 19, 19)
    assert len(trace.tokens) == 19 and trace.config.n_layers == 24
    gen = model.generate(ARTICLE, max_new_tokens=3)
    assert len(gen.generated_ids) == 3 and gen.prompt_ids == list(trace.tokens)
    # greedy: each generated token is the argmax of the pass before it
    assert gen.generated_ids[0] == int(np.argmax(trace["logits"][-1]))


def test_same_seed_same_weights_other_seed_other_weights():
    a, b, c = tracer.load("tiny", seed=1), tracer.load("tiny", seed=1), tracer.load("tiny", seed=2)
    assert np.array_equal(a.params["blocks.5.mlp.W_in"], b.params["blocks.5.mlp.W_in"])
    assert not np.array_equal(a.params["W_E"], c.params["W_E"])


def test_bad_prompts_and_ids():
    m = tracer.load("tiny")
    for bad in ("", "   ", []):
        with pytest.raises(TracerError, match="empty"):
            m.run(bad)
    with pytest.raises(TracerError, match="outside the vocabulary"):
        m.run([1, 50257])
    with pytest.raises(TracerError, match="longer than the model's context"):
        m.run(list(range(1025)))


def test_a_generation_shows_itself_in_a_notebook_through_the_renderers():
    """`gen.show(...)` prints the walkthrough with the CLI's view options and `_repr_html_` is a
    notebook cell's summary; the trace module reaches the renderers through `tracer.showing`."""
    import io

    from rich.console import Console

    import tracer

    gen = tracer.load("abc").generate("A B C D E F", max_new_tokens=1)
    out = Console(file=io.StringIO(), width=100, color_system=None)
    gen.show(console=out, section="predict")
    text = out.file.getvalue()
    assert "4 · Predicting the next token (how to predict G)" in text
    assert "1 · Tokens" not in text  # only the section asked for
    html = gen._repr_html_()
    assert html.startswith("<pre") and "Tokens" in html and "Generation(" not in html
    assert gen.trace._repr_html_().startswith("<pre")


def test_the_recording_plan_is_what_the_cli_records():
    """`tracer.run.generate.recording_plan`: a saved trace or a walkthrough records everything; the JSON
    record alone only what places an overflow (the residual stream, the norms' scales), without the
    logit lens; a walkthrough without the lens section skips the lens."""
    import fnmatch

    import tracer
    from tracer.run.generate import recording_plan
    from tracer.run.overflow import REACHED_NAMES

    assert recording_plan() == {"names": None, "lens": None}
    assert recording_plan(json=True, save=True) == recording_plan(save=True, lens_shown=False) == recording_plan()
    assert recording_plan(lens_shown=False) == {"names": None, "lens": False}
    m = tracer.load("abc")
    gen = m.generate("A B C", max_new_tokens=1, **recording_plan(json=True))
    recorded = {n for n in gen.steps[0].arrays if not n.startswith("sample.")}  # the draw is always recorded
    assert recorded and all(any(fnmatch.fnmatchcase(n, g) for g in REACHED_NAMES) for n in recorded), recorded
    assert "blocks.0.hook_resid_pre" in recorded and not any(n.startswith("lens.") for n in recorded)
    assert gen.generated_ids == m.generate("A B C", max_new_tokens=1).generated_ids  # recording changes no number
