"""The generation views as text, with numbers worked out by hand: every position's prediction
(`tracer.render.predict`), the sampling stages (`sampling`), the loop and the KV cache (`loop`), and
the logit lens (`lens`).

The hand model has no layers: the embedding is the identity and W_U holds the log of a chosen
distribution per token, so every probability, loss and sampling band below is arithmetic on
those distributions, written in the test, never copied from the code's output.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracer
from tracer.core.config import Config
from tracer.render import lens as L
from tracer.render import loop as LP
from tracer.render import predict as P
from tracer.render import sampling as S
from tracer.render.fmt import letters
from tracer.render.view import View

from .reference import naive_forward

VOCAB = ["A", "B", "C", "D"]
DIST = {  # what each token predicts next
    "A": [0.1, 0.6, 0.2, 0.1],
    "B": [0.1, 0.1, 0.7, 0.1],
    "C": [0.5, 0.1, 0.1, 0.3],
    "D": [0.25, 0.25, 0.25, 0.25],
}


@pytest.fixture
def hand_model(make_model):
    """`hand_model()`: the model of the module docstring, over the words A–D."""

    def make():
        cfg = Config(d_vocab=4, n_ctx=8, d_model=4, n_heads=1, n_layers=0, dtype="float64", positional="none",
                     layer_norm=False, tied_unembed=False)
        W_U = np.log(np.array([DIST[w] for w in VOCAB]))  # [d_model, d_vocab]: row t is token t's next-token logits
        return make_model(cfg, VOCAB, {"W_E": np.eye(4), "W_U": W_U, "b_U": np.zeros(4)}, name="hand", seed=0)

    return make


def row(text: str, first: str) -> str:
    """The table line whose first cell is `first`."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if cells and cells[0] == first:
            return line
    raise AssertionError(f"no row {first!r} in:\n{text}")


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("│").split("│")]


# --------------------------------------------------------------------------- every position


@pytest.mark.parametrize("width", [80, 120])
def test_every_position_by_hand(width, hand_model, render_text):
    m = hand_model()
    gen = m.generate("A B C", max_new_tokens=1)
    text = render_text(P.every_position(gen.steps[0], m.tokenizer, View()), width)
    # A predicts B with 0.6 and B follows: loss -ln 0.6; B predicts C with 0.7; C predicts A (0.5), chosen
    assert cells(row(text, "A")) == ["A", "A", "B", "0.600", "B", "0.600", f"{-math.log(0.6):.3f}", ""]
    assert cells(row(text, "B")) == ["B", "B", "C", "0.700", "C", "0.700", f"{-math.log(0.7):.3f}", ""]
    assert cells(row(text, "C")) == ["C", "C", "A", "0.500", "A*", "0.500", f"{-math.log(0.5):.3f}", "◀"]
    flat = " ".join(text.split())
    assert f"mean loss over rows A and B = {(-math.log(0.6) - math.log(0.7)) / 2:.3f} nats" in flat
    assert f"a uniform guess over 4 tokens: {math.log(4):.3f}" in flat
    assert "Generation reads only the last row (C)" in flat


def test_every_position_on_a_cached_pass_has_one_row_and_says_why(hand_model, render_text):
    m = hand_model()
    gen = m.generate("A B C", max_new_tokens=2)
    text = render_text(P.every_position(gen.steps[1], m.tokenizer, View()), 80)
    assert cells(row(text, "D"))[:4] == ["D", "A", "B", "0.600"]  # D is the generated A
    assert "This pass computed only D" in " ".join(text.split())


def test_every_position_says_which_rows_a_step_computes_and_where_every_rows_prediction_is_used(hand_model, render_text):
    """The seed Q&A's point, said precisely and held to the recorded passes: the prompt pass computes every prompt
    row, a later pass with the cache only its new row, without the cache every row again (the sentence said the
    other rows are "computed anyway" on every step); every row's prediction is used in training and in the verify
    pass of speculative decoding."""
    m = hand_model()
    cached, full = m.generate("A B C", max_new_tokens=2), m.generate("A B C", max_new_tokens=2, cache=False)
    assert [len(s.tokens) - s.start for s in cached.steps] == [3, 1]  # rows computed: the prompt's, then one
    assert [len(s.tokens) - s.start for s in full.steps] == [3, 4]  # without the cache: every row again
    flat = " ".join(render_text(P.every_position(cached.steps[0], m.tokenizer, View()), 100).split())
    assert "the prompt pass runs every prompt row through every layer" in flat
    assert "each later step with the cache computes only its one new row, and without the cache (--no-cache) every row again" in flat
    assert "in training, where each position's loss counts" in flat and "speculative decoding" in flat
    assert "computed anyway" not in flat


def test_every_position_without_the_arrays_says_so(hand_model, render_text):
    m = hand_model()
    gen = m.generate("A B", max_new_tokens=1, names=["hook_embed"])
    assert "not recorded in this trace" in render_text(P.every_position(gen.steps[0], m.tokenizer, View()), 80)


def test_every_position_brief_elides_the_middle_of_long_prompts(word_model, render_text):
    m = word_model(n_ctx=32)
    gen = m.generate(list(range(20)), max_new_tokens=1)
    brief = render_text(P.every_position(gen.steps[0], m.tokenizer, View()), 80)
    full = render_text(P.every_position(gen.steps[0], m.tokenizer, View(brief=False)), 80)
    assert cells(row(brief, "T"))[-1] == "◀" and cells(row(full, "T"))[-1] == "◀"
    assert row(brief, "…") and "J" not in [cells(l)[0] for l in brief.splitlines() if "│" in l]
    assert cells(row(full, "J"))[1] == "w9"


# --------------------------------------------------------------------------- sampling stages


def test_sampling_stages_by_hand(hand_model, render_text):
    m = hand_model()
    gen = m.generate("A B C", max_new_tokens=1, temperature=2.0, top_k=3, top_p=0.7, seed=0)
    text = render_text(S.sampling_stages(gen.steps[0], m.tokenizer, View()), 80)
    # C's distribution [A .5, B .1, C .1, D .3] at temperature 2: p ∝ sqrt(p)
    root = {w: math.sqrt(p) for w, p in zip(VOCAB, DIST["C"])}
    z = sum(root.values())
    soft = {w: r / z for w, r in root.items()}
    # order A, D, B, C (B before C: ties by id); top-k 3 keeps A, D, B; top-p 0.7 over those renormalised:
    # A alone is < 0.7, A + D ≥ 0.7, so A and D remain
    kept = soft["A"] + soft["D"]
    assert soft["A"] / (kept + soft["B"]) < 0.7 <= kept / (kept + soft["B"])
    final = {"A": soft["A"] / kept, "D": soft["D"] / kept}
    u = np.random.default_rng(0).random()  # the seeded draw
    assert final["A"] <= u < 1  # so D is chosen
    assert gen.generated_ids == [3]
    assert cells(row(text, "token"))[1:] == ["A", "D", "B", "C"]
    assert cells(row(text, "logit"))[1:] == [f"{math.log(p):.3f}" for p in (0.5, 0.3, 0.1, 0.1)]
    assert cells(row(text, "÷ 2.00"))[1:] == [f"{math.log(p) / 2:.3f}" for p in (0.5, 0.3, 0.1, 0.1)]
    assert cells(row(text, "softmax"))[1:] == [f"{soft[w]:.3f}" for w in "ADBC"]
    assert cells(row(text, "top-k 3"))[1:] == ["kept", "kept", "kept", "cut"]
    assert cells(row(text, "top-p 0.7"))[1:] == ["kept", "kept", "cut", ""]
    assert cells(row(text, "renormalised"))[1:] == [f"{final['A']:.3f}", f"{final['D']:.3f}", "0", "0"]
    assert cells(row(text, "band"))[1:] == [f"0.00–{final['A']:.2f}", f"{final['A']:.2f}–1.00", "", ""]
    assert cells(row(text, "chosen"))[1:] == ["", "◀", "", ""]  # u fell in the second band
    flat = " ".join(text.split())
    assert f"u = {u:.4f}" in flat and f"band #2 [{final['A']:.4f}, 1.0000), which is 'D'" in flat
    assert "logits → ÷ temperature 2.00 → softmax → top-k 3 → top-p 0.7 → renormalise → draw u (seed 0) → token" in flat


def test_sampling_stages_greedy_and_narrow_columns(word_model, render_text):
    m = word_model()
    gen = m.generate([1, 2], max_new_tokens=1, temperature=0)
    text = render_text(S.sampling_stages(gen.steps[0], m.tokenizer, View()), 80)
    assert "Temperature 0 is greedy" in text and "top-k" not in text.split("Temperature 0")[0].split("→")[-1]
    assert cells(row(text, "chosen"))[1] == "◀"  # greedy: the top-1
    wide = render_text(S.sampling_stages(gen.steps[0], m.tokenizer, View(top_k=8)), 160)
    narrow = render_text(S.sampling_stages(gen.steps[0], m.tokenizer, View(top_k=8)), 50)
    assert "#8" in wide and "#8" not in narrow and "#3" in narrow  # as many columns as fit whole


def test_sampling_stages_shows_the_chosen_token_even_when_it_is_not_in_the_top_rows(word_model, render_text):
    m = word_model(seed=1)
    for seed in range(40):
        gen = m.generate([1, 2], max_new_tokens=1, temperature=5.0, seed=seed)
        s = gen.steps[0]
        rank = int((s["sample.probs"] > s["sample.probs"][int(s["sample.token"])]).sum())
        if rank >= 3:
            text = render_text(S.sampling_stages(s, m.tokenizer, View(top_k=3)), 80)
            assert f"#{rank + 1}" in text and m.tokenizer.token_str(int(s["sample.token"])) in row(text, "token")
            return
    pytest.fail("no seed drew a token outside the top 3")


# --------------------------------------------------------------------------- KV cache


def test_kv_cache_view_rows_and_work_saved(word_model, render_text, macs_by_loop):
    m = word_model()
    gen = m.generate([1, 2, 3], max_new_tokens=3)
    text = render_text(LP.kv_cache_view(gen, m.tokenizer, View()), 80)
    cfg = m.config
    for step, (reused, n) in enumerate([(0, 3), (3, 4), (4, 5)]):
        line = row(text, str(step))
        split = ("ABC | D" if step == 1 else "ABCD | E") if reused else "| ABC"
        assert cells(line)[1:3] == [split, f"{reused} + {n - reused}"]
        assert cells(line)[3:5] == [f"{macs_by_loop(cfg, n - reused, n):,}", f"{macs_by_loop(cfg, n, n):,}"]
    done = sum(macs_by_loop(cfg, k, n) for k, n in [(3, 3), (1, 4), (1, 5)])
    full = sum(macs_by_loop(cfg, n, n) for n in (3, 4, 5))
    flat = " ".join(text.split())
    assert f"Total: {done:,} multiply-adds with the cache against {full:,}" in flat
    assert "You have to recompute everything for the new context." in flat
    assert f"2 × {cfg.n_layers} layers × {cfg.n_heads} heads × {cfg.d_head} dims" in flat


def test_kv_cache_view_without_the_cache_and_with_verify(word_model, render_text):
    m = word_model()
    gen = m.generate([1, 2, 3], max_new_tokens=3, cache=False)
    from tracer.run.generate import verify_cache

    gen.meta["verify_cache"] = verify_cache(m, gen)
    text = render_text(LP.kv_cache_view(gen, m.tokenizer, View()), 80)
    assert "off: --no-cache" in text
    assert cells(row(text, "2"))[1:3] == ["| ABCDE", "0 + 5"]
    assert "with the cache it would be" in " ".join(text.split())
    assert "✓ the KV cache changes no logit beyond rounding and no token" in text


def test_verify_cache_view_marks_failures(render_text):
    bad = {"compared": "KV cache vs full recompute", "dtype": "float32", "steps": 2,
           "per_step_max_abs_diff": [0.0, 3e-3], "max_abs_diff": 3e-3, "tolerance": 1e-5, "scale": 2.0,
           "bound": 2e-5, "generated_cache": [1, 2], "generated_no_cache": [1, 3], "tokens_equal": False, "ok": False}
    text = render_text(LP.verify_cache_view(bad), 80)
    assert "✗ the KV cache and full recompute disagree" in text
    assert row(text, "pass 1: max |Δ logit|").rstrip().rstrip("│").strip().endswith("✗")
    assert "1e-05 × 2.00 = 2.00e-05 (float32)" in text
    assert cells(row(text, "tokens (no cache)"))[1:] == ["1 3", "✗"]


# --------------------------------------------------------------------------- logit lens


def test_logit_lens_view_names_the_first_layer_where_the_choice_is_top(word_model, render_text, final_ln_unembed):
    m = word_model(seed=7, n_layers=3)
    gen = m.generate([1, 2, 3, 4], max_new_tokens=1, temperature=0)
    s = gen.steps[0]
    ref = naive_forward(m.config, m.params, [1, 2, 3, 4])
    streams = [ref[f"blocks.{l}.hook_resid_pre"] for l in range(3)] + [ref["blocks.2.hook_resid_post"]]
    tops = [int(np.argmax(final_ln_unembed(m, x[-1:])[0])) for x in streams]  # the last position, by row
    chosen = gen.generated_ids[0]
    assert tops[-1] == chosen
    first = tops.index(chosen)
    text = render_text(L.logit_lens_view(s, m.tokenizer, View()), 120)
    flat = " ".join(text.split())
    where = "in the embedding, before any layer" if first == 0 else f"out of layer {first - 1}"  # layers 0, 1, 2
    assert f"the chosen token '{m.tokenizer.token_str(chosen)}' first becomes the top-1 {where}" in flat
    for r, t in enumerate(tops):  # rows in the 0-based names the layers have everywhere
        label = "embedding" if r == 0 else ("out of layer 2 (the last)" if r == 3 else f"out of layer {r - 1}")
        last_cell = cells(row(text, label))[-2]  # the last position's (the rank of the chosen token follows)
        assert last_cell.split()[0] == m.tokenizer.token_str(t)
        assert last_cell.endswith("✓") == (t == chosen)


def test_logit_lens_gives_each_rows_rank_in_its_own_column(word_model, render_text, final_ln_unembed):
    """The chosen token's rank at the last position, one number per row in the table's last column (beside
    the row's name), computed here from the naive decoder's residual streams through the final norm and W_U."""
    m = word_model(seed=7, n_layers=3)
    gen = m.generate([1, 2, 3, 4], max_new_tokens=1, temperature=0)
    ref = naive_forward(m.config, m.params, [1, 2, 3, 4])
    streams = [ref[f"blocks.{l}.hook_resid_pre"] for l in range(3)] + [ref["blocks.2.hook_resid_post"]]
    chosen = gen.generated_ids[0]
    ranks = [1 + int((lg > lg[chosen]).sum()) for lg in (final_ln_unembed(m, x[-1:])[0] for x in streams)]
    assert len(set(ranks)) > 1  # the rows differ: a column of equal numbers would prove little
    text = render_text(L.logit_lens_view(gen.steps[0], m.tokenizer, View()), 120)
    header = cells(next(l for l in text.splitlines() if "read from" in l).replace("┃", "│"))
    assert header[-1] == f"rank of {m.tokenizer.token_str(chosen)}"
    said = [int(cells(row(text, label))[-1].replace(",", ""))
            for label in ("embedding", "out of layer 0", "out of layer 1", "out of layer 2 (the last)")]
    assert said == ranks
    flat = " ".join(text.split())
    assert f"among the {m.config.d_vocab} tokens" in flat


def test_the_lens_of_a_model_without_a_final_norm_says_so(render_text):
    """The article's blocks have no norm: the lens reads W_U alone and its title says so (the terminal and
    the page's words alike), never 'the final layer norm'."""
    from tracer.render.lens import final_norm_words

    art = tracer.load("article")
    text = " ".join(render_text(L.logit_lens_view(art.generate("A B C D E F").steps[0], art.tokenizer, View()), 100).split())
    assert "through W_U alone (this model has no final norm)" in text and "final layer norm" not in text
    assert final_norm_words(art.config) == "W_U alone (this model has no final norm)"
    assert final_norm_words(tracer.load("abc").config) == "the final layer norm and W_U"


def test_logit_lens_view_fits_80_columns_and_shows_more_when_wide(word_model, render_text):
    m = word_model(seed=2, n_ctx=16)
    gen = m.generate(list(range(10)), max_new_tokens=1)
    narrow = render_text(L.logit_lens_view(gen.steps[0], m.tokenizer, View()), 80)
    wide = render_text(L.logit_lens_view(gen.steps[0], m.tokenizer, View(brief=False)), 200)
    header = next(l for l in narrow.splitlines() if "read from" in l)
    assert header.count("┃") - 2 < len(next(l for l in wide.splitlines() if "read from" in l).split("┃")) - 2
    assert "J w9" in wide and "J w9" in narrow  # the last position is always shown
    assert "A w0" in wide and "A w0" not in narrow
    assert "the last" in narrow


def test_logit_lens_view_when_the_sampled_token_never_tops(hand_model, render_text):
    m = hand_model()
    gen = m.generate("A B C", max_new_tokens=1, temperature=2.0, top_k=3, top_p=0.7, seed=0)  # draws D, not A
    text = " ".join(render_text(L.logit_lens_view(gen.steps[0], m.tokenizer, View()), 80).split())
    assert "the chosen token 'D' is never the top-1; out of the last layer it ranks #2" in text  # D .3 < A .5


# --------------------------------------------------------------------------- the loop


def test_generation_steps_by_hand(hand_model, render_text):
    m = hand_model()
    gen = m.generate("A B C", max_new_tokens=2)  # C → A (0.5), then A → B (0.6)
    flat = " ".join(render_text(LP.generation_steps(gen, m.tokenizer, View()), 80).split())
    abc = letters(["A", "B", "C"])
    assert f"pass 0: reads {abc} (the prompt)" in flat
    # the text first, the letter as its place: "D = 'A'" read as if the model had predicted D
    assert "predicts 'A' at D (p 0.500; top 3: A .50, D .30, B .10)" in flat and "ABC → ABCD ('A' at D)" in flat
    assert f"pass 1: reads 'A' at D; computes D, reuses {abc} from the KV cache" in flat
    assert "predicts 'B' at E (p 0.600; top 3: B .60, C .20, A .10)" in flat and "ABCD → ABCDE ('B' at E)" in flat
    assert "D =" not in flat and "E =" not in flat
    zero = " ".join(render_text(LP.generation_steps(m.generate("A B C", max_new_tokens=0), m.tokenizer, View()), 80).split())
    assert "(not appended: the run stops here, max-new-tokens 0 reached)" in zero
    assert "Generated 2 token(s): 'A B'; stopped: max-new-tokens 2 reached." in flat


def test_generation_steps_full_shows_a_row_per_layer(word_model, render_text):
    m = word_model(n_layers=2)
    gen = m.generate([1, 2], max_new_tokens=2)
    text = render_text(LP.generation_steps(gen, m.tokenizer, View(brief=False)), 100)
    assert "‖attn out‖" in text and "heads look most at" in text
    assert "last layer looks at: h0" in text


def test_generation_steps_names_the_stop(word_model, render_text):
    m = word_model(vocab=["A", "B", "C", "<end>"], given={"b_U": np.array([0.0, 0.0, 0.0, 50.0])})
    gen = m.generate("A B", max_new_tokens=4)
    assert "stopped: the end token was generated" in " ".join(render_text(LP.generation_steps(gen, m.tokenizer, View()), 80).split())
