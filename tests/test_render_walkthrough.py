"""The walkthrough (`tracer.render.walkthrough`, as `show_generation` prints it), read as text: every
number below is worked out by hand in the test.

The toy model: a 3-word vocabulary (cat, sat, mat), d_model 2, one head, one layer, the article's
simplified block (explicit positions, no layer norm, no MLP, no residual, unscaled scores), W_Q,
W_K and W_O the identity, W_V = diag(0.5, 2), in float64. For the prompt "cat sat":
  x_A = E_A + P_A = [0.9, -0.1] + [0.1, 0.1] = [1.0, 0.0]
  x_B = E_B + P_B = [0.4, 0.6] + [0.2, 0.2] = [0.6, 0.8]
  B_Q·A_K = 0.6, B_Q·B_K = 1.0, softmax([0.6, 1.0]) = [1/(1+e^0.4), e^0.4/(1+e^0.4)] = [0.401, 0.599]
  A_V = [0.5, 0], B_V = [0.3, 1.6], so B's new representation = 0.401×A_V + 0.599×B_V = [0.380, 0.958]
  logits of B = z_B · W_U with W_U = [[1, 0, 0.5], [0, 1, 0.5]]: cat 0.380, sat 0.958, mat 0.669.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from rich.console import Console

from tracer.run.checks import Check
from tracer.core.config import Config
from tracer.errors import TracerError
from tracer.render import show_generation
from tracer.render.heatmap import glyph
from tracer.render.view import View

CFG = Config(d_vocab=3, n_ctx=4, d_model=2, n_heads=1, n_layers=1, dtype="float64", positional="explicit",
             layer_norm=False, mlp=False, residual=False, scale_scores=False, tied_unembed=False)
GIVEN = {
    "W_E": [[0.9, -0.1], [0.4, 0.6], [0.5, 0.5]],
    "W_pos": [[0.1, 0.1], [0.2, 0.2], [0.3, 0.3], [0.0, 0.0]],
    "blocks.0.attn.W_Q": [[[1.0, 0.0], [0.0, 1.0]]],
    "blocks.0.attn.W_K": [[[1.0, 0.0], [0.0, 1.0]]],
    "blocks.0.attn.W_V": [[[0.5, 0.0], [0.0, 2.0]]],
    "blocks.0.attn.W_O": [[[1.0, 0.0], [0.0, 1.0]]],
    "W_U": [[1.0, 0.0, 0.5], [0.0, 1.0, 0.5]],
}


@pytest.fixture
def toy(make_model):
    """`toy(**cfg)`: the model of the module docstring; `n_heads=2` adds a head with W_Q, W_K, W_V doubled."""

    def make(**cfg):
        c = Config(**{**CFG.to_dict(), **cfg})
        given = dict(GIVEN)
        given["W_pos"] = (np.asarray(GIVEN["W_pos"] + [[0.0, 0.0]] * c.n_ctx)[: c.n_ctx]).tolist()
        if c.n_heads == 2:  # head 1: W_Q, W_K, W_V doubled; W_O the identity for both heads
            for m in "QKVO":
                w = np.asarray(given[f"blocks.0.attn.W_{m}"])  # [1, d_model, d_head]
                given[f"blocks.0.attn.W_{m}"] = np.concatenate([w, w if m == "O" else 2 * w])  # [2, d_model, d_head]
        return make_model(c, ["cat", "sat", "mat"], given, name="toy", trained=True)

    return make


def walkthrough(gen, tok, view: View):
    """What `tracer trace` prints for `gen`, for `render_text`."""
    return lambda console: show_generation(gen, tok, view, console=console)


def squash(text: str) -> str:
    """Whitespace runs to one space, so a line wrapped at 80 columns reads as at 120."""
    return re.sub(r"\s+", " ", text)


# --------------------------------------------------------------------------- hand arithmetic


W_A = 1 / (1 + math.exp(0.4))  # softmax([0.6, 1.0])[0]
W_B = 1 - W_A
Z_B = [W_A * 0.5 + W_B * 0.3, W_B * 1.6]  # 0.401×A_V + 0.599×B_V


@pytest.mark.parametrize("width", [80, 120])
def test_first_layer_token_by_token(width, toy, render_text):
    m = toy()
    gen = m.generate("cat sat", max_new_tokens=1)
    out = render_text(walkthrough(gen, m.tokenizer, View()), width)
    flat = squash(out)
    assert "E_A = [0.900, -0.100]" in flat
    assert "P_A = [0.100, 0.100]" in flat  # the position vector at A's place (the article's P1)
    assert "x_A = [1.000, 0.000]" in flat
    assert "x_B = [0.600, 0.800]" in flat
    assert "B_Q = x_B·W_Q + b_Q = [0.600, 0.800]" in flat
    assert "B_V = x_B·W_V + b_V = [0.300, 1.600]" in flat
    # A sees only itself: Q·K = 1.0, softmax([1.0]) = [1.0], 1.0×A_V
    assert "softmax([1.000]) = [1.000]" in flat
    assert "1.000×A_V = A's new representation = [0.500, 0.000]" in flat
    # B: the K and V it can see, row by row
    assert re.search(r"A\s+\[1\.000, 0\.000\]\s+\[0\.500, 0\.000\]", out)
    assert re.search(r"B\s+\[0\.600, 0\.800\]\s+\[0\.300, 1\.600\]", out)
    # the scores table: raw Q·K then the softmax weight, summing to 1
    assert re.search(rf"A\s+0\.600\s+{W_A:.3f}", out)
    assert re.search(rf"B\s+1\.000\s+{W_B:.3f}", out)
    assert re.search(r"sum\s+1\.000", out)
    assert f"softmax([0.600, 1.000]) = [{W_A:.3f}, {W_B:.3f}]" in flat
    assert f"{W_A:.3f}×A_V + {W_B:.3f}×B_V = B's new representation = [{Z_B[0]:.3f}, {Z_B[1]:.3f}]" in flat
    assert (f"{W_A:.3f}", f"{W_B:.3f}") == ("0.401", "0.599")
    # shapes from the config, never the weights
    assert "W_E (3 × 2)" in flat and "W_O (2 × 2)" in flat and "W_U (2 × 3)" in flat
    # no residual in this block: the layer's output is the attention output
    assert "no residual (residual = false)" in flat
    assert max(len(l) for l in out.splitlines()) <= width


def test_causal_mask_line(toy, render_text):
    m = toy()
    gen = m.generate("cat sat mat", max_new_tokens=0)
    flat = squash(render_text(walkthrough(gen, m.tokenizer, View()), 100))
    assert "A can see only itself (position 0); the causal mask hides B and C (positions 1–2" in flat
    assert "B can see the keys and values of A and B (positions 0–1); the causal mask hides C (position 2" in flat
    assert "the causal mask hides nothing: C is the last token" in flat
    # nothing appended with max_new_tokens 0
    assert "not appended" in flat


@pytest.mark.parametrize("width", [80, 120])
def test_top_k_table_and_chosen_token(width, toy, render_text):
    m = toy()
    gen = m.generate("cat sat", max_new_tokens=1)
    out = render_text(walkthrough(gen, m.tokenizer, View(top_k=3)), width)
    logits = {"cat": Z_B[0], "sat": Z_B[1], "mat": 0.5 * Z_B[0] + 0.5 * Z_B[1]}
    total = sum(math.exp(v) for v in logits.values())
    p = {k: math.exp(v) / total for k, v in logits.items()}
    for rank, (word, i) in enumerate((("sat", 1), ("mat", 2), ("cat", 0)), start=1):
        assert re.search(rf"│\s+{rank} │ {word}\s+│\s+{i} │\s+{logits[word]:.3f} │\s+{p[word]:.3f} │", out), word
    flat = squash(out)
    assert "chosen: sat at C" in flat
    assert "AB → ABC" in flat
    assert "top 3 of 3" in flat
    assert "W_U (2 × 3)" in flat


def test_scaled_scores_and_two_heads(toy, render_text):
    m = toy(n_heads=2, d_head=2, scale_scores=True)
    gen = m.generate("cat sat", max_new_tokens=0)
    flat = squash(render_text(walkthrough(gen, m.tokenizer, View()), 120))
    # head 1's W_Q and W_K are 2·I: raw B_Q·A_K = 4 × 0.6 = 2.4, ÷ √2 = 1.697
    assert re.search(r"head 1 of 2", flat)
    assert re.search(rf"A 2\.400 {2.4 / math.sqrt(2):.3f} ", flat)
    w = 1 / (1 + math.exp((4.0 - 2.4) / math.sqrt(2)))
    assert f"{w:.3f}×A_V" in flat
    assert "concatenate the 2 heads' outputs (2 × 2 = 4 numbers)" in flat
    assert "W_O (4 × 2)" in flat


def test_checks_beside_their_step_and_at_the_end(toy, render_text):
    m = toy()
    gen = m.generate("cat sat", max_new_tokens=1)
    step = gen.steps[0]
    checks = (
        Check("blocks.0.attn.hook_attn_scores", (0, 1, 0), 0.6, float(step["blocks.0.attn.hook_attn_scores"][0, 1, 0]),
              0.005, "article: Q·A_K for B"),
        Check("blocks.0.attn.hook_pattern", (0, 1), [0.4, 0.6], step["blocks.0.attn.hook_pattern"][0, 1].tolist(),
              0.001, "article: softmax([0.6, 0.8])"),
        Check("logits", (0,), [9.0, 9.0, 9.0], step["logits"][0].tolist(), 0.005, "not shown anywhere"),
    )
    out = render_text(walkthrough(gen, m.tokenizer, View(checks=checks)), 120)
    lines = out.splitlines()
    at = next(i for i, l in enumerate(lines) if "article: Q·A_K for B" in l)
    assert "✓" in lines[at] and "0.6" in lines[at]
    # placed under B's scores table, before B's weighted sum
    assert at < next(i for i, l in enumerate(lines) if "×B_V" in l)
    assert at > next(i for i, l in enumerate(lines) if l.strip().startswith("B:"))
    soft = next(l for l in lines if "article: softmax" in l)
    assert "✗" in soft and "[0.4, 0.6]" in soft and f"[{W_A:.3f}" in soft
    assert f"{W_A - 0.4:.3f}" in soft  # the difference, 0.001 more than the tolerance
    end = out.index("─ Checks") if "─ Checks" in out else out.index("Checks ─")
    assert "not shown anywhere" in out[end:]
    assert "article: Q·A_K" not in out[end:]
    assert "1 of 3 stated values agree" in out


def test_untrained_warning_and_partial_trace(toy, render_text):
    m = toy()
    m.trained = False
    gen = m.generate("cat sat", max_new_tokens=1, names=["hook_embed", "blocks.0.attn.hook_pattern"])
    flat = squash(render_text(walkthrough(gen, m.tokenizer, View()), 100))
    assert "predictions are meaningless until real weights are loaded" in flat
    assert "E_A = [0.900, -0.100]" in flat
    assert "Not in this trace" in flat and "blocks.0.attn.hook_q" in flat


def test_bad_view_values_name_the_range(toy, render_text):
    m = toy()
    gen = m.generate("cat sat mat", max_new_tokens=0)
    with pytest.raises(TracerError, match=r"--token Z: the prompt has tokens A–C \(positions 0–2\)"):
        render_text(walkthrough(gen, m.tokenizer, View(token="Z")), 80)
    with pytest.raises(TracerError, match=r"--token 3: the prompt has tokens A–C"):
        render_text(walkthrough(gen, m.tokenizer, View(token="3")), 80)
    with pytest.raises(TracerError, match=r"--layer 1: the model has layer 0 \(or 'all'\)"):
        render_text(walkthrough(gen, m.tokenizer, View(layer="1")), 80)
    with pytest.raises(TracerError, match=r"--head x: the model has head 0 \(or 'all'\)"):
        render_text(walkthrough(gen, m.tokenizer, View(head="x")), 80)


def test_token_option_by_letter_and_position(toy, render_text):
    m = toy()
    gen = m.generate("cat sat mat", max_new_tokens=0)
    for t in ("B", "b", "1"):
        flat = squash(render_text(walkthrough(gen, m.tokenizer, View(token=t)), 100))
        assert "B: sat (position 1)" in flat
        assert "A: cat (position 0)" not in flat


def test_brief_summarises_long_prompts(toy, render_text):
    m = toy(n_ctx=8, d_vocab=3)
    gen = m.generate("cat sat mat cat sat mat", max_new_tokens=0)
    flat = squash(render_text(walkthrough(gen, m.tokenizer, View()), 100))
    assert "A: cat" in flat and "B: sat" in flat and "F: mat" in flat
    assert "C: mat" not in flat
    assert "C–E: the same steps" in flat
    full = squash(render_text(walkthrough(gen, m.tokenizer, View(brief=False)), 100))
    assert "C: mat (position 2)" in full


def test_heatmap_reads_without_color(toy, render_text):
    m = toy()
    gen = m.generate("cat sat mat", max_new_tokens=0)
    out = render_text(walkthrough(gen, m.tokenizer, View()), 80)
    pattern = gen.steps[0]["blocks.0.attn.hook_pattern"][0]
    grid = out[out.index("layer 0, head 0"):]
    rows = grid.splitlines()
    assert rows[1].split() == ["A", "B", "C"]
    assert rows[2].split() == ["A", "█", "·", "·"]
    assert rows[3].split() == ["B", glyph(pattern[1, 0]), glyph(pattern[1, 1]), "·"]
    assert glyph(W_A) == "4" and glyph(0.96) == "█" and glyph(0.04) == "0"


def test_no_color_codes_when_not_a_terminal(toy):
    m = toy()
    gen = m.generate("cat sat", max_new_tokens=1)
    import io

    buf = io.StringIO()
    show_generation(gen, m.tokenizer, View(), console=Console(file=buf, width=80))
    assert "\x1b[" not in buf.getvalue()
    assert "B's new representation" in buf.getvalue()


@pytest.mark.parametrize("model", ["abc", "tiny", "tests/data/llama-tiny", "tests/data/olmo2-tiny",
                                   "tests/data/gemma2-tiny", "tests/data/gemma3-tiny", "tests/data/qwen3-tiny"])
def test_a_whole_recording_shows_every_step_and_calls_nothing_missing(runner, model):
    """Every family's walkthrough reads only the hook points its block records (an OLMo 2 block has no
    ln1, a GPT-2 block no ln1_post): a full recording never says "Not in this trace"."""
    from pathlib import Path

    from tracer.cli import app

    path = str(Path(__file__).resolve().parent.parent / model) if model.startswith("tests/") else model
    r = runner.invoke(app, ["trace", "hello world", "--model", path, "-n", "1", "--full", "--layer", "all"])
    assert r.exit_code == 0, r.output
    assert "Not in this trace" not in r.output
