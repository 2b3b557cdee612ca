"""Classroom mode (`tracer demo`): the screens' numbers, the quiz, paging, non-TTY runs, the HTML deck.

The reference is hand arithmetic on a tiny article-shaped model (one head, identity Q/K/V
matrices, no residual, no layer norm, no scaling), so Q·K is the dot product of two position-added
embeddings that the test writes out itself. The interactive terminal is tested with tmux in
`test_demo_tmux.py`.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
import subprocess

import numpy as np
import pytest

from tracer.cli import app
from tracer.core.config import Config
from tracer.model import Model
from tracer.render import demo

LESSON = "the river window garden and the doctor village. the river window"  # the README's lesson (issue 25)
from tracer.run.trace import Generation

VOCAB = ["A", "B", "C", "D", "E", "F", "G", "H", "<end>"]
E_ROWS = [  # the article's E_A and E_B (the article gives both the same numbers), then made-up C–F
    [0.8, -0.2, 0.4, -0.5, 0.1],
    [0.8, -0.2, 0.4, -0.5, 0.1],
    [0.1, 0.3, -0.2, 0.4, 0.0],
    [-0.3, 0.2, 0.5, 0.1, -0.4],
    [0.2, -0.4, 0.1, 0.3, 0.6],
    [0.5, 0.1, -0.3, -0.2, 0.2],
    [0.0, 0.0, 0.1, 0.0, 0.0],
    [0.0, 0.1, 0.0, 0.0, 0.0],
    [0.1, 0.0, 0.0, 0.0, 0.0],
]


@pytest.fixture(scope="session")
def article_like(make_model):
    """`article_like(n_layers=2)`: the model of the module docstring, over A–H and <end>."""

    def make(n_layers: int = 2) -> Model:
        cfg = Config(d_vocab=len(VOCAB), n_ctx=10, d_model=5, n_heads=1, n_layers=n_layers, positional="explicit",
                     layer_norm=False, mlp=False, residual=False, scale_scores=False, tied_unembed=False,
                     dtype="float64")
        eye = np.eye(5)[None]  # [head, d_model, d_head]
        given = {"W_E": np.array(E_ROWS), "W_pos": 0.1 * np.arange(1, 11)[:, None] * np.ones((10, 5))}
        for l in range(n_layers):
            for m in "QKVO":
                given[f"blocks.{l}.attn.W_{m}"] = eye
        return make_model(cfg, VOCAB, given, name="article-like")

    return make


@pytest.fixture(scope="module")
def run(article_like):
    m = article_like()
    gen = m.generate(["A", "B", "C", "D", "E", "F"], max_new_tokens=2)
    d = demo.Demo(gen, m.tokenizer, title="article-like")
    return d, demo.build_steps(d)


@pytest.fixture(scope="session")
def page_text(render_text):
    """`page_text(d, steps, step, quiz=False, width=100)`: step `step` (from 1) as text; `quiz`: its question."""

    def text(d, steps, step: int, quiz: bool = False, width: int = 100) -> str:
        return render_text(demo.screen(d, steps, demo.Page(step - 1, quiz)), width)

    return text


# -------------------------------------------------------------------------- hand arithmetic

X_A = [0.9, -0.1, 0.5, -0.4, 0.2]  # E_A + P1 (0.1 each)
X_B = [1.0, 0.0, 0.6, -0.3, 0.3]  # E_B + P2 (0.2 each), as the article writes it
QK_BA = sum(a * b for a, b in zip(X_B, X_A))  # 0.9 + 0 + 0.30 + 0.12 + 0.06 = 1.38
QK_BB = sum(b * b for b in X_B)  # 1 + 0 + 0.36 + 0.09 + 0.09 = 1.54
W_A = 1 / (1 + math.exp(QK_BB - QK_BA))
W_B = 1 - W_A


def test_hand_arithmetic_is_what_the_test_thinks():
    assert QK_BA == pytest.approx(1.38) and QK_BB == pytest.approx(1.54)
    assert W_A == pytest.approx(0.4601, abs=1e-4)


def test_fourteen_steps_in_the_articles_order(run, page_text):
    d, steps = run
    assert [s.name for s in steps] == [
        "Tokens", "Embedding lookup", "Position vector", "Query, Key and Value", "Scores and the mask",
        "Softmax: scores become weights", "Weighted sum of values", "Multi-head: concat and W_O",
        "The other layers", "Unembedding: one score per token", "Softmax and temperature", "The chosen token",
        "Append and repeat", "The KV cache"]
    t = page_text(d, steps, 5)
    assert t.startswith("Step 5 of 14 · Scores and the mask")


def test_the_tokens_screen_says_what_a_pass_and_the_space_sign_are(run, page_text, word_model):
    d, steps = run
    first = " ".join(page_text(d, steps, 1).split())
    assert "a pass: one run of the model, which chooses one new token" in first
    assert "␣ marks" not in first  # the article's tokens have no spaces: nothing to explain
    from tracer.loaders import load

    m = load("abc")
    gen = m.generate(m.prompt("A B C"), max_new_tokens=1)
    dd = demo.Demo(gen, m.tokenizer)
    first = " ".join(page_text(dd, demo.build_steps(dd), 1).split())
    assert "␣ marks a leading space (␣B is \" B\"), ↵ a line break." in first


def test_embedding_and_position_screens_show_the_articles_vectors(run, page_text):
    d, steps = run
    emb = page_text(d, steps, 2)
    assert "[ 0.800, -0.200,  0.400, -0.500,  0.100]" in emb
    pos = page_text(d, steps, 3)
    assert re.search(r"\+ P_B\s+\[ 0\.200,  0\.200,  0\.200,  0\.200,  0\.200\]", pos)  # one name: P_B
    flat = " ".join(pos.split())
    assert "P_B: the position vector of position 1 (row 1 of W_pos; the article counts places from 1 and calls it P2)" in flat
    assert "P2:" not in flat and "place 2" not in flat
    assert re.search(r"= x_B\s+\[ 1\.000,  0\.000,  0\.600, -0\.300,  0\.300\]", pos)  # the article's new E_B


def test_focus_token_is_marked_by_a_character_not_only_by_color(run, page_text):
    d, steps = run
    for n in (1, 2, 3, 4, 5, 6, 7):
        lines = page_text(d, steps, n).splitlines()
        marked = [l for l in lines if l.startswith("▶")]
        assert marked and all(re.match(r"▶\s+B(\b|_[KV])", l) for l in marked), (n, marked)


def test_scores_screen_matches_hand_dot_products_and_shows_the_mask(run, page_text):
    d, steps = run
    t = page_text(d, steps, 5)
    row_a = next(l for l in t.splitlines() if re.match(r"\s+A\s+\[", l))
    row_b = next(l for l in t.splitlines() if re.match(r"▶\s+B\s+\[", l))
    assert row_a.split()[-1] == f"{QK_BA:.3f}"
    assert row_b.split()[-1] == f"{QK_BB:.3f}"
    assert "hidden by the mask" in next(l for l in t.splitlines() if re.match(r"\s+C\s", l))
    assert "●" not in t  # the table's hidden rows show the mask: no grid repeats it


def test_the_mask_grid_shows_when_no_later_key_is_in_the_table(article_like, page_text):
    m = article_like()
    gen = m.generate(["A", "B"], max_new_tokens=1)  # B, the followed token, is the last: nothing hidden
    d = demo.Demo(gen, m.tokenizer)
    t = page_text(d, demo.build_steps(d), 5)
    grid = [l for l in t.splitlines() if re.match(r"^[▶ ]\s+[AB]\s+[●·]", l)]
    assert [l.split()[-2:] for l in grid] == [["●", "·"], ["●", "●"]]  # A sees A; B sees A and B


def test_softmax_screen_matches_hand_softmax_and_sums_to_one(run, page_text):
    d, steps = run
    t = page_text(d, steps, 6)
    weights = {re.match(r"^[▶ ]\s+([AB])\s", l)[1]: l.split()[-1] for l in t.splitlines()
               if re.match(r"^[▶ ]\s+[AB]\s", l)}
    assert weights == {"A": f"{W_A:.3f}", "B": f"{W_B:.3f}"}
    assert re.search(r"sum\s+\S+\s+1\.000", t)
    assert "[0.450, 0.550]" in t  # the narration's check of the article's rounding


def test_weighted_sum_line_reads_like_the_article(run, page_text):
    d, steps = run
    t = page_text(d, steps, 7)
    assert f"B's new vector = {W_A:.3f}×A_V + {W_B:.3f}×B_V" in t
    z = [W_A * a + W_B * b for a, b in zip(X_A, X_B)]  # identity W_V: V is x itself
    assert ", ".join(f"{v:6.3f}" for v in z) in t


def test_prediction_screens_read_the_recorded_logits(run, page_text):
    d, steps = run
    logits = d.gen.steps[0]["logits"][-1]
    ranked = sorted(range(len(VOCAB)), key=lambda i: -logits[i])
    t = page_text(d, steps, 10)
    rows = [l.split() for l in t.splitlines() if re.match(r"\s+\d\s+\S+\s+\d+\s+-?\d", l)]
    assert [r[1] for r in rows] == [VOCAB[i] for i in ranked[:len(rows)]]
    chosen = page_text(d, steps, 12)
    top = VOCAB[ranked[0]]
    assert f"F predicts  ▶ {'G' if top == 'G' else top + ' at G'}   (id {ranked[0]}," in chosen
    p = math.exp(logits[ranked[0]]) / sum(math.exp(x) for x in logits)
    assert f"probability {p:.3f}" in chosen


def test_append_and_cache_screens_follow_every_pass(run, page_text):
    d, steps = run
    t = page_text(d, steps, 13)
    g, h = (VOCAB[i] for i in d.gen.generated_ids)
    assert re.search(rf"0\s+ABCDEF\s+ABCDEF\s+{'G' if g == 'G' else g + ' at G'}\s", t)  # passes count from 0
    assert re.search(rf"1\s+G \(new\)\s+ABCDEFG\s+{'H' if h == 'H' else h + ' at H'}\s", t)
    kv = page_text(d, steps, 14)
    assert re.search(r"1\s+G\s+G\s+ABCDEF\s", kv)  # computed G alone, reused A–F


def test_cache_screen_without_the_cache_recomputes_everything(page_text, article_like):
    m = article_like()
    gen = m.generate(["A", "B", "C", "D", "E", "F"], max_new_tokens=2, cache=False)
    d = demo.Demo(gen, m.tokenizer)
    kv = page_text(d, demo.build_steps(d), 14)
    assert "did not use the cache" in kv
    assert re.search(r"1\s+G\s+ABCDEFG\s+—\s", kv)  # all seven computed, none reused
    assert re.search(r"1\s+G \(new\)", page_text(d, demo.build_steps(d), 13)) is None


def test_screens_never_run_the_model(run, monkeypatch, render_text):
    import tracer.core.decoder
    import tracer.run.rows
    import tracer.model

    def boom(*a, **k):
        raise AssertionError("the demo ran the model")

    monkeypatch.setattr(tracer.core.decoder, "forward", boom)
    monkeypatch.setattr(tracer.run.rows, "forward", boom)  # the loop's passes (run_pass)
    monkeypatch.setattr(tracer.model, "forward", boom)
    monkeypatch.setattr(Model, "generate", boom)
    d, _ = run
    steps = demo.build_steps(demo.Demo(d.gen, d.tokenizer))
    render_text(demo.screen(d, steps, demo.Page(0, False)))


def test_a_saved_and_loaded_trace_gives_the_same_screens(run, tmp_path, page_text):
    d, steps = run
    d.gen.save(tmp_path / "t.npz")
    loaded = demo.Demo(Generation.load(tmp_path / "t.npz"), d.tokenizer, title="article-like")
    again = demo.build_steps(loaded)
    for n in range(1, 15):
        assert page_text(loaded, again, n) == page_text(d, steps, n)


# -------------------------------------------------------------------------- quiz


def test_quiz_hides_the_answer_then_reveals_it(run, page_text):
    d, steps = run
    pages = demo.pages_of(steps, quiz=True)
    assert len(pages) == 14 + 3
    assert [p.step + 1 for p in pages if p.quiz] == [5, 6, 10]  # greedy: asked at the logits, before any ranking
    q5, a5 = page_text(d, steps, 5, quiz=True), page_text(d, steps, 5)
    assert "your turn" in q5 and "Predict, then press Enter" in q5
    assert "[ 0.900, -0.100,  0.500, -0.400,  0.200]" in q5  # the inputs: A's key
    assert f"{QK_BA:.3f}" not in q5 and f"{QK_BA:.3f}" in a5
    q6 = page_text(d, steps, 6, quiz=True)
    assert f"{W_A:.3f}" not in q6 and f"softmax({QK_BA:.3f}, {QK_BB:.3f})" in q6
    q10, a10 = page_text(d, steps, 10, quiz=True), page_text(d, steps, 10)
    assert "what will F predict?" in " ".join(q10.split()) and "rank" not in q10 and "rank" in a10
    top = VOCAB[int(np.argmax(d.trace["logits"][d.last]))]
    assert "generation uses this row" not in q10 and "generation uses this row" in a10
    assert not any(p.quiz for p in pages if p.step + 1 in (11, 12))  # no question after the answer was shown
    assert top in a10


def test_the_quiz_asks_what_a_wide_model_lets_a_class_answer(page_text):
    from tracer.loaders import load

    m = load("abc")  # d_head 16: Q and K are shown as their ends, too long to multiply by hand
    d = demo.Demo(m.generate(m.prompt("A B C D E F"), max_new_tokens=1), m.tokenizer)
    steps = demo.build_steps(d)
    q5 = " ".join(page_text(d, steps, 5, quiz=True).split())
    assert "Which key will B's query score highest: A_K or B_K?" in q5 and "Work out" not in q5
    assert "guess, then see" in q5


def test_sampling_shows_the_draw_and_the_band_that_holds_it(page_text, article_like):
    m = article_like()
    gen = m.generate(["A", "B", "C"], max_new_tokens=1, temperature=2.0, seed=3)
    d = demo.Demo(gen, m.tokenizer)
    steps = demo.build_steps(d)
    t = page_text(d, steps, 12)
    s = gen.steps[0]
    u = float(s["sample.uniform"])
    assert f"random draw u = {u:.4f}" in t
    marked = next(l for l in t.splitlines() if l.startswith("▶") and "–" in l)
    lo, hi = (float(x) for x in re.findall(r"(\d\.\d{3}) – (\d\.\d{3})", marked)[0])
    assert lo - 5e-4 <= u <= hi + 5e-4
    assert marked.split()[1] == VOCAB[int(s["sample.token"])]


# -------------------------------------------------------------------------- paging logic


def test_pager_next_back_jump_and_quit(run):
    _, steps = run
    pager = demo.Pager(steps, demo.pages_of(steps, quiz=True))
    for key in ("next", "enter", "next"):
        pager.press(key)
    assert pager.page.step == 3
    pager.press("back")
    assert pager.page.step == 2
    pager.press("1")
    pager.press("0")
    assert pager.status() == "go to step 10_  (Enter)"
    pager.press("enter")
    assert pager.page == demo.Page(9, True)  # a jump lands on the question first
    pager.press("9")
    pager.press("9")
    pager.press("enter")
    assert pager.page.step == 9 and "no step 99" in pager.status()
    pager.press("1")
    pager.press("4")
    pager.press("enter")
    pager.press("next")
    assert pager.page.step == 13 and "last step" in pager.status()
    pager.press(None)  # the --auto timer does nothing at the end
    assert pager.page.step == 13 and not pager.done
    pager.press("quit")
    assert pager.done


def test_key_names():
    assert [demo.key_name(c) for c in ("\r", "\n", " ", "b", "q", "7", "\x7f", "x")] == [
        "enter", "enter", "next", "back", "quit", "7", "backspace", ""]


# -------------------------------------------------------------------------- the command

PROMPT = ["demo", "--prompt", "A B C D E F"]


def test_cli_non_tty_prints_every_step_in_order_and_exits_0(runner):
    r = runner.invoke(app, PROMPT, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    heads = re.findall(r"^Step (\d+) of 14 · ", r.output, flags=re.M)
    assert heads == [str(i) for i in range(1, 15)]
    assert max(len(l) for l in r.output.splitlines()) <= 100


def test_cli_quiz_prints_question_then_answer(runner):
    r = runner.invoke(app, PROMPT + ["--quiz"])
    assert r.exit_code == 0, r.output
    heads = re.findall(r"^Step (\d+) of 14 · (.*)$", r.output, flags=re.M)
    assert [n for n, rest in heads if "your turn" in rest] == ["5", "6", "10"]
    assert len(heads) == 17


def test_cli_export_writes_one_self_contained_page(tmp_path, runner):
    out = tmp_path / "deck.html"
    r = runner.invoke(app, PROMPT + ["--export", str(out)])
    assert r.exit_code == 0, r.output
    assert "Step 1 of 14" not in r.stdout and f"wrote {out}" in r.output  # the deck instead of the screens
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("<section") == 14
    for n in range(1, 15):
        assert f'id="step-{n}"' in page
    assert "Scores and the mask" in page and "▶" in page
    for remote in ("<script", "<link", "src=", "url(", "@import", "http://", "https://"):
        assert remote not in page, remote
    assert not list(tmp_path.glob(".*tmp"))


@pytest.mark.parametrize("args, message", [
    (["--export", "/no/such/folder/deck.html"], "does not exist"),
    (["--export", "deck.txt"], "must end in .html"),
    (["--auto", "0"], "--auto must be"),
    (["--auto", "-1"], "--auto must be"),
])
def test_cli_bad_options_are_one_line_errors(args, message, runner):
    r = runner.invoke(app, PROMPT + args)
    assert r.exit_code == 2
    assert message in r.output and "Traceback" not in r.output


def test_cli_unknown_scenario_is_a_clear_error(runner):
    r = runner.invoke(app, ["demo", "no-such-scenario"])
    assert r.exit_code == 2
    assert "no-such-scenario" in r.output and "Traceback" not in r.output


@pytest.mark.slow
def test_subprocess_with_stdin_from_dev_null_prints_everything(run_tracer):
    p = run_tracer("demo", "--prompt", "A B C", stdin=subprocess.DEVNULL, text=True)
    assert p.returncode == 0, p.stderr
    assert re.findall(r"^Step (\d+) of 14", p.stdout, flags=re.M) == [str(i) for i in range(1, 15)]
    assert "\x1b[2J" not in p.stdout  # no screen clearing when not a terminal


# -------------------------------------------------------------------------- the shipped article scenario


def test_default_demo_is_the_trained_model_predicting_g(runner):
    r = runner.invoke(app, ["demo"])
    assert r.exit_code == 0, r.output
    assert re.findall(r"^Step (\d+) of 14 · ", r.output, flags=re.M) == [str(i) for i in range(1, 15)]
    flat = re.sub(r"\s+", " ", r.output)
    assert "abc: A B C D E F" in flat and "Trained by `tracer train` (6000 steps)" in flat
    assert "not trained" not in flat
    assert re.search(r"G = ␣G", flat), flat[-2000:]


def test_the_multihead_screen_prints_each_vector_once(render_text):
    """Step 8 on abc (residual, MLP): the running sum, what the MLP adds (its recorded output), then the layer's
    output, each once (the MLP's row printed the layer's output, which the next row printed again); the MLP's
    row plus the residual's row is the output, to the printed decimals."""
    import tracer
    from tracer.render.fmt import num

    m = tracer.load("abc")
    gen = m.generate("A B C D E F", max_new_tokens=1)
    d = demo.Demo(gen, m.tokenizer, title="abc")
    steps = demo.build_steps(d)
    k = next(i for i, s in enumerate(steps) if s.name == "Multi-head: concat and W_O")
    text = render_text(demo.screen(d, steps, demo.Page(k, False)), 100)
    rows = [l for l in text.splitlines() if re.match(r"^(concat|× W_O|\+ x|MLP|\+ that)", l)]
    vectors = [re.findall(r"-?\d+\.\d+", l.split("[", 1)[1]) for l in rows]
    assert len(rows) == 5 and len({tuple(v) for v in vectors}) == 5, rows  # no vector twice
    st, f = gen.steps[0], d.focus
    first = lambda name: [num(x, 3) for x in st[f"blocks.0.{name}"][f][:4]]  # noqa: E731
    assert vectors[3][:4] == first("hook_mlp_out") and vectors[4][:4] == first("hook_resid_post")
    assert rows[4].startswith("+ that = out of layer 0") and vectors[2][:4] == first("hook_resid_mid")


def test_the_tokens_screen_says_when_the_tokenizer_put_a_token_first(runner):
    """A Gemma 3 folder's tokenizer puts <s> (its <bos>) before the text: the tokens screen says that A is that
    token and B the prompt's first word, so the letters are places (the screen said nothing; "we follow B" was
    the text "A"). The ids are the tokenizers package's own; abc, which adds nothing, says nothing of it."""
    tokenizers = pytest.importorskip("tokenizers")
    folder = Path(__file__).parent / "data" / "gemma3-tiny"
    ids = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json")).encode("A B C D E F").ids
    r = runner.invoke(app, ["demo", "--model", str(folder)], env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    first = " ".join(r.output.split("Step 2 of 14")[0].split())
    assert re.search(rf"A <s> {ids[0]} 0 ▶ B ␣A {ids[1]} 1", first), first
    assert "A is <s>, a special token the tokenizer puts before the text" in first and "(B is the prompt's first token, “␣A”)" in first
    plain = runner.invoke(app, ["demo"], env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert "a special token the tokenizer puts before" not in " ".join(plain.output.split())


def test_demo_refuses_a_scenario_and_a_prompt_together(runner):
    r = runner.invoke(app, ["demo", "article", "--prompt", "A B"])
    assert r.exit_code == 2 and "give a scenario or --prompt" in r.stderr


def test_demo_article_is_the_article_scenario_with_its_checks_beside_the_steps(runner):
    from tracer.replay import replay

    done = replay("article")
    sc, checks = done.scenario, done.checks
    r = runner.invoke(app, ["demo", "article"])
    assert r.exit_code == 0, r.output
    assert re.findall(r"^Step (\d+) of 14 · ", r.output, flags=re.M) == [str(i) for i in range(1, 15)]
    assert sc.title[:30] in r.output
    flat = re.sub(r"\s+", " ", r.output)  # labels may wrap
    for c in checks:
        assert f"{'✓' if c.ok else '✗'} {c.label}" in flat, c.label
    assert flat.count("✗ ") == sum(not c.ok for c in checks)


def test_the_articles_pass_through_layers_are_said_where_the_layers_are(runner):
    """The article's 24 layers are layer 0 and 23 pass-throughs: step 9 says so (and why, from the
    scenario's note for the layers section), and so do `replay --section layers` and the page's data."""
    from pathlib import Path

    from tracer.render.page import page_data
    from tracer.render.predict import unchanged_layers
    from tracer.replay import replay

    toml = Path(__file__).resolve().parents[1] / "scenarios" / "article.toml"  # this checkout's, with its notes
    done = replay(str(toml))
    assert unchanged_layers(done.gen.steps[0].get, 24) == list(range(1, 24))
    why = [n["text"] for n in done.scenario.notes if n["section"] == "layers"]
    assert len(why) == 1 and "gives the numbers of one layer only" in why[0]
    said = "In this model layers 1–23 of the 24 pass every vector on unchanged"
    r = runner.invoke(app, ["demo", str(toml)], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    nine = re.sub(r"\s+", " ", r.output.split("Step 9 of 14")[1].split("Step 10 of 14")[0])
    assert said in nine and why[0] in nine and "Every layer mixes more context" not in nine
    r = runner.invoke(app, ["replay", str(toml), "--section", "layers"], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert said in re.sub(r"\s+", " ", r.stdout)
    assert page_data(done.gen, done.model.tokenizer)["pass_through"].startswith(said)


def test_a_trained_models_layers_all_change_the_vectors(run):
    from tracer.render.predict import unchanged_layers

    d, steps = run
    assert unchanged_layers(d.trace.get, d.cfg.n_layers) == []
    assert "pass every vector on unchanged" not in str(steps)


def test_a_step_that_fits_without_its_blank_lines_is_not_split(render_text):
    """80×24: the default demo's step 4 used to continue onto a page holding one sentence; it stays on
    one screen once its blank spacer lines go, and every page still fits."""
    from rich.console import Console

    from tracer.loaders import load
    from tracer.render.demo.screens import fit_pages

    m = load("abc")
    d = demo.Demo(m.generate(m.prompt("A B C D E F"), max_new_tokens=2), m.tokenizer)
    steps = demo.build_steps(d)
    console = Console(width=80, height=24, color_system=None, record=True)
    pages = fit_pages(d, steps, False, console)
    four = [p for p in pages if p.step == 3]
    assert len(four) == 1 and four[0].tight
    for p in pages:
        assert len(console.render_lines(demo.screen(d, steps, p, keys=True), console.options, pad=False)) <= 23


def test_the_articles_demo_at_80x24_has_no_page_of_holding_checks_only(runner):
    """demo article at 80×24 showed 21 screens for 14 steps, some holding only ✓ stated values: a step
    whose stated values all hold says so in one line when that keeps it on one screen."""
    from pathlib import Path

    from rich.console import Console

    from tracer.cli.teach import _demo_run
    from tracer.render.demo.screens import fit_pages

    d = _demo_run(str(Path(__file__).resolve().parents[1] / "scenarios" / "article.toml"), None, "abc")
    steps = demo.build_steps(d)
    console = Console(width=80, height=24, color_system=None, record=True)
    pages = fit_pages(d, steps, False, console)
    assert len(pages) <= 18
    for p in pages:
        shown = demo.screen(d, steps, p, keys=True)
        assert len(console.render_lines(shown, console.options, pad=False)) <= 23
        if p.summed:
            text = "".join(s.text for line in console.render_lines(shown, console.options) for s in line)
            assert "stated values, checked: all" in text or "it holds" in text
            assert all(c.ok for c in steps[p.step].checks)
    wide = fit_pages(d, steps, False, Console(width=100, height=40, color_system=None, record=True))
    assert not any(p.summed for p in wide)  # room enough: every stated value listed


def _screen_text(console, shown) -> str:
    return "\n".join("".join(s.text for s in line).rstrip() for line in console.render_lines(shown, console.options))


@pytest.mark.parametrize("size", [(80, 24), (100, 40)])
@pytest.mark.parametrize("scenario, prompt, model", [
    ("article", None, "abc"), ("two_heads", None, "abc"), ("rotary", None, "abc"), ("gpt2_small_article", None, "abc"),
    (None, "A B C D E F", "abc"), (None, "hello", "tests/data/llama-tiny"), (None, LESSON, "abc")])
def test_every_step_of_the_shipped_demos_is_one_screen(size, scenario, prompt, model):
    """Issue 27: `demo article` steps 5, 9 and 10 (and the default demo's step 10) went on to a second,
    nearly empty screen at 80×24. Folded (no blank lines, fewer table rows, ✗ in one line) every step
    is one screen with its heading and footer in view, at 80×24 and 100×40, question pages too."""
    from pathlib import Path

    from rich.console import Console

    from tracer.cli.teach import _demo_run

    root = Path(__file__).resolve().parents[1]
    d = _demo_run(str(root / "scenarios" / f"{scenario}.toml") if scenario else None, prompt,
                  str(root / model) if "/" in model else model)
    width, height = size
    console = Console(width=width, height=height, color_system=None, record=True)
    for quiz in (False, True):
        steps, pages = demo.fitted(d, console, quiz)
        n = 15 if prompt == LESSON else 14  # the lesson's prompt repeats itself: one screen more, on copying
        assert [p.step for p in pages if not p.quiz] == list(range(n)) and all(p.parts == 1 for p in pages)
        for p in pages:
            shown = demo.screen(d, steps, p, keys=True)
            assert len(console.render_lines(shown, console.options, pad=False)) <= height - 1, p
            text = _screen_text(console, shown)
            assert text.startswith(f"Step {p.step + 1} of {n} · {steps[p.step].name}") and "(1/" not in text
            assert f"[{p.step + 1}/{n}] Enter/→ next" in text


def test_the_articles_folded_screens_keep_what_they_are_for():
    """80×24, `demo article`: step 5 keeps all three wrong scores with what was stated and recorded,
    step 9 says which layers pass through and shows the first and the last layer, step 10 the ranked
    logits and the row generation uses."""
    from pathlib import Path

    from rich.console import Console

    from tracer.cli.teach import _demo_run

    d = _demo_run(str(Path(__file__).resolve().parents[1] / "scenarios" / "article.toml"), None, "abc")
    console = Console(width=80, height=24, color_system=None, record=True)
    steps, pages = demo.fitted(d, console)
    shown = {p.step + 1: _screen_text(console, demo.screen(d, steps, p, keys=True)) for p in pages}
    five = shown[5]
    assert five.count("✗ article") == 3 and "(0 of 3 hold)" in five
    assert "stated 0.800 · recorded 0.670 · off by 0.130" in five and "stated 0.800 · recorded 0.580" in five
    assert "   A    [ 0.600,  0.200,  0.100, -0.300,  0.400]   0.670" in five
    nine = " ".join(shown[9].split())
    assert "layers 1–23 of the 24 pass every vector on unchanged" in nine and "F out of layer 23 (the last)" in nine
    assert "0 1.54 1.28 F 0.208" in nine and "23 1.28 1.28 F 1.000" in nine
    ten = shown[10]
    assert "   1  G       6  166.450" in ten and "▶  F         G   ← generation uses this row" in ten


def test_a_short_terminal_puts_each_wrong_value_on_one_line_where_it_fits():
    """80×21: the article's step 5 fits once each ✗ is one line where the width allows (the long
    first one keeps its second line)."""
    from pathlib import Path

    from rich.console import Console

    from tracer.cli.teach import _demo_run

    d = _demo_run(str(Path(__file__).resolve().parents[1] / "scenarios" / "article.toml"), None, "abc")
    console = Console(width=80, height=21, color_system=None, record=True)
    steps, pages = demo.fitted(d, console)
    five = [p for p in pages if p.step == 4]
    assert len(five) == 1 and five[0].compact
    text = _screen_text(console, demo.screen(d, steps, five[0], keys=True))
    assert '✗ article (B): "Q·A_K = 0.6"  stated 0.600 · recorded 0.670 · off by 0.070' in text
    assert '✗ article (A): "Q·K = 0.8 (attention score with itself)"\n  stated 0.800 · recorded 0.670' in text



def test_a_prompt_that_repeats_itself_gets_the_copying_screen_with_the_recorded_weights(render_text):
    """The screen after the layers: the heads that put the most of the last token's weight on the token
    after its earlier occurrence, read from the recorded patterns (recomputed here from the trace), training's
    induction scores beside them, and the --ablate to try; with --ablate, the removed heads are marked."""
    from tracer.cli.teach import _demo_run
    from tracer.run.ablation import Ablation
    from tracer.run.heads import induction_targets

    d = _demo_run(None, LESSON, "abc")
    steps = demo.build_steps(d)
    names = [s.name for s in steps]
    assert names[names.index("The other layers") + 1] == "Copying: the induction head"
    tokens = d.trace.tokens
    target = int(induction_targets(tokens)[-1])
    assert d.tokenizer.token_str(int(tokens[target])) == " garden"  # "the river window" was followed by " garden"
    weight = np.stack([d.trace[f"blocks.{l}.attn.hook_pattern"][:, -1, target] for l in range(d.cfg.n_layers)])
    best = np.unravel_index(int(np.argmax(weight)), weight.shape)
    console_text = render_text(demo.screen(d, steps, demo.Page(names.index("Copying: the induction head"), False)))
    rows = re.findall(r"^(\d):(\d)\s+(\d\.\d{3})", console_text, flags=re.M)
    assert rows and (int(rows[0][0]), int(rows[0][1])) == tuple(int(x) for x in best)
    for l, h, w in rows:
        assert float(w) == pytest.approx(weight[int(l), int(h)], abs=5e-4)
    assert [float(w) for *_, w in rows] == sorted((float(w) for *_, w in rows), reverse=True)
    strong = [(int(l), int(h)) for l, h, w in rows if float(w) >= 0.5] or [tuple(int(x) for x in best)]
    assert " ".join(f"--ablate {l}:{h}" for l, h in strong) in " ".join(console_text.split())
    cut = _demo_run(None, LESSON, "abc", ablate=(Ablation(int(best[0]), int(best[1])),))
    cut_steps = demo.build_steps(cut)
    cut_text = render_text(demo.screen(cut, cut_steps, demo.Page(names.index("Copying: the induction head"), False)))
    assert f"{best[0]}:{best[1]} (removed)" in cut_text and f"without head {best[0]}:{best[1]}" in " ".join(cut_text.split())
    plain = _demo_run(None, "A B C D E F", "abc")
    assert "Copying: the induction head" not in [s.name for s in demo.build_steps(plain)]



@pytest.mark.parametrize("model", ["abc", "tests/data/llama-tiny", "tests/data/gemma3-tiny", "tests/data/qwen3-tiny"])
def test_no_number_is_cut_short_at_80_columns(runner, model):
    """A vector shows fewer of its numbers on a narrow screen (FirstThatFits) rather than cutting a score
    or a vector's last number to 'xx.…': llama-tiny's scores table printed '-10.6…' at 80 columns."""
    r = runner.invoke(app, ["demo", "--model", str(Path(__file__).parent.parent / model) if "/" in model else model],
                      env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    cut = [line for line in r.output.splitlines() if re.search(r"\d…", line)]
    assert not cut, cut


@pytest.mark.parametrize("positional", ["learned", "rope", "none"])
def test_a_model_without_layers_gets_the_screens_it_has(word_model, render_text, positional):
    """No layer screens (they read layer 0's recording; the demo raised KeyError), the position screen
    says where the vector goes, and nothing counts "all 0 layers"."""
    from tracer.render.demo import build_steps
    from tracer.render.demo.base import Demo

    m = word_model(n_layers=0, positional=positional)
    d = Demo(m.generate("w1 w2 w3", max_new_tokens=1), m.tokenizer, title="no layers")
    steps = build_steps(d)
    assert [s.name for s in steps] == ["Tokens", "Embedding lookup", "Position vector", "Unembedding: one score per token",
                                       "Softmax and temperature", "The chosen token", "Append and repeat"]
    text = re.sub(r"\s+", " ", " ".join(render_text(s.body, 80) + " " + s.narration for s in steps))
    assert "normalized, meets W_U" in text and "all 0 layers" not in text and "limit of 1 new tokens" not in text
    assert ("+ P_" in text) == (positional == "learned") and ("rotary" in text) == (positional == "rope")


# ------------------------------------------------------------------ a mixture of experts, attention sinks

MOE = ["gpt-oss-tiny", "qwen2-moe-tiny", "qwen3-moe-tiny", "mixtral-tiny", "olmoe-tiny"]
MOE_PROMPT = "the cat sat on the mat"


def _moe_demo(model: str, ablate: str | None = None, prompt: str = MOE_PROMPT):
    from tracer.cli.teach import _demo_run
    from tracer.run.ablation import Ablation

    root = Path(__file__).resolve().parents[1]
    return _demo_run(None, prompt, str(root / "tests" / "data" / model), ablate=(Ablation.parse(ablate),) if ablate else ())


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
@pytest.mark.parametrize("model, ablate", [(m, None) for m in MOE] + [("gpt-oss-tiny", "0:expert:3"),
                                                                       ("qwen2-moe-tiny", "0:expert:1")])
def test_a_routed_models_demo_has_the_experts_screen_and_every_screen_fits(size, model, ablate):
    """The experts' screen comes right after the heads and W_O; at 80×24 and 120×35 every screen, question
    pages too, is one screen with its heading and keys in view, and no number is cut short ("1.2…")."""
    from rich.console import Console

    d = _moe_demo(model, ablate)
    width, height = size
    console = Console(width=width, height=height, color_system=None, record=True)
    for quiz in (False, True):
        steps, pages = demo.fitted(d, console, quiz)
        names = [s.name for s in steps]
        assert names[names.index("Multi-head: concat and W_O") + 1] == "Experts: the router's choice"
        assert all(p.parts == 1 for p in pages) and [p.step for p in pages if not p.quiz] == list(range(len(steps)))
        for p in pages:
            lines = _screen_text(console, demo.screen(d, steps, p, keys=True)).splitlines()
            assert len(lines) <= height - 1 and lines[0].startswith(f"Step {p.step + 1} of {len(steps)} · ")
            cut = [line for line in lines[:-1] if re.search(r"\d…", line)]  # the last line: the keys and the title
            assert not cut, cut


def test_the_experts_screen_shows_the_recorded_routing(render_text):
    """gpt-oss-tiny, B in layer 0: the router's scores and the chosen experts with their weights as recorded,
    each expert's output, and their weighted sum, written as the article writes attention's, which is the
    recorded MLP output (no shared expert); the experts not used; the header's active parameters; the
    --ablate to try. The question shows the scores and hides the weights."""
    d = _moe_demo("gpt-oss-tiny")
    steps = demo.build_steps(d)
    i = [s.name for s in steps].index("Experts: the router's choice")
    text = render_text(demo.screen(d, steps, demo.Page(i, False)), 120)
    flat = " ".join(text.split())
    st, f = d.trace, d.focus
    chosen, weights = st["blocks.0.mlp.hook_expert_indices"][f], st["blocks.0.mlp.hook_expert_weights"][f]
    logits = st["blocks.0.mlp.hook_router_logits"][f]
    for j, e in enumerate(chosen):
        out = st["blocks.0.mlp.hook_expert_out"][f, j]
        assert re.search(rf"^▶\s+E{e}\s+{re.escape(d.num(logits[e]))}\s+{re.escape(d.num(weights[j]))}\s+\[\s*"
                         rf"{re.escape(d.num(out[0]))},", text, flags=re.M), text
    terms = " + ".join(f"{d.num(w)}×E{e}(ln2(x))" for e, w in zip(chosen, weights))
    assert f"B's mixture of experts = {terms}" in flat
    mlp_out = st["blocks.0.hook_mlp_out"][f]  # the weighted sum of the recorded outputs is the MLP's output
    sum_row = next(line for line in text.splitlines() if line.strip().startswith("sum"))
    assert d.num(mlp_out[0]) in sum_row and d.num(mlp_out[-1]) in sum_row
    for e in set(range(len(logits))) - set(chosen.tolist()):
        assert re.search(rf"^\s+E{e}\s+{re.escape(d.num(logits[e]))}\s+not used", text, flags=re.M)
    E, k = len(logits), len(chosen)
    assert f"{E - k} of {E} experts not used by this token" in flat
    assert d.cfg.mlp_kind.block_words(d.cfg) in flat and "parameters active per token" in flat
    assert f"--ablate 0:expert:{chosen[0]}" in flat
    question = " ".join(re.sub("[│╭╮╰╯]", " ", render_text(demo.screen(d, steps, demo.Page(i, True)), 120)).split())
    assert d.num(logits[chosen[0]]) in question and d.num(weights[0]) not in question
    assert f"Which {k} experts does B go to" in question and "softmax over those" in question


def test_the_experts_screen_says_who_an_expert_removed_sent_where(render_text):
    """--ablate 0:expert:3 on gpt-oss-tiny: the removed expert's score is −∞; the tokens that had chosen it
    (the clean run's choices, here) are named, each with its experts in the clean run and in this one."""
    clean = _moe_demo("gpt-oss-tiny").trace
    d = _moe_demo("gpt-oss-tiny", "0:expert:3")
    steps = demo.build_steps(d)
    i = [s.name for s in steps].index("Experts: the router's choice")
    text = render_text(demo.screen(d, steps, demo.Page(i, False)), 120)
    flat = " ".join(text.split())
    assert re.search(r"^\s+E3\s+−∞\s+removed \(--ablate\)", text, flags=re.M)
    chose = [p for p, row in enumerate(clean["blocks.0.mlp.hook_expert_indices"]) if 3 in row]
    assert chose and 3 not in d.trace["blocks.0.mlp.hook_expert_indices"]
    from tracer.tokenizers.tokens import label

    who = f"{label(chose[0])}–{label(chose[-1])}" if chose == list(range(chose[0], chose[-1] + 1)) and len(chose) > 2 else None
    assert "Without E3 of layer 0 (--ablate), " in flat and (who is None or who in flat)
    p = chose[0]
    before = ", ".join(f"E{e} {w:.3f}" for e, w in zip(clean["blocks.0.mlp.hook_expert_indices"][p],
                                                      clean["blocks.0.mlp.hook_expert_weights"][p]))
    after = ", ".join(f"E{e} {w:.3f}" for e, w in zip(d.trace["blocks.0.mlp.hook_expert_indices"][p],
                                                     d.trace["blocks.0.mlp.hook_expert_weights"][p]))
    assert f"{before}  {after}" in text


def test_the_softmax_screen_of_a_model_with_sinks_has_the_sinks_row(render_text):
    """gpt-oss-tiny: the sink joins the softmax as one more score; its row holds the checkpoint's sink logit
    (worked back from the recorded row), e^(sink − max) and the recorded share, so that with it the weights
    add up to 1 and the keys' to 1 − share, as the narration and the weighted sum's screen say."""
    from safetensors.numpy import load_file

    d = _moe_demo("gpt-oss-tiny")
    steps = demo.build_steps(d)
    sink = float(load_file(str(Path(__file__).parent / "data" / "gpt-oss-tiny" / "model.safetensors"))
                 ["model.layers.0.self_attn.sinks"][d.head])
    share = float(d.trace["blocks.0.attn.hook_sink_share"][d.head, d.focus])
    scores = d.trace["blocks.0.attn.hook_attn_scores"][d.head, d.focus, : d.focus + 1]
    assert share == pytest.approx(np.exp(sink) / (np.exp(sink) + np.exp(scores).sum()), rel=1e-4)  # the softmax, by hand
    i = [s.name for s in steps].index("Softmax: scores become weights")
    text = render_text(demo.screen(d, steps, demo.Page(i, False)), 120)
    row = re.search(r"^\s+sink\s+(\S+)\s+(\S+)\s+(\S+)", text, flags=re.M).groups()
    assert float(row[0]) == pytest.approx(sink, abs=1.5e-3)
    assert float(row[1]) == pytest.approx(np.exp(sink - scores.max()), abs=1.5e-3) and row[2] == d.num(share)
    assert re.search(r"^\s+sum\s+\S+\s+1\.000", text, flags=re.M)
    assert f"the keys' weights add up to {d.num(1 - share)}, not 1" in " ".join(text.split())
    j = [s.name for s in steps].index("Weighted sum of values")
    assert f"sink takes {d.num(share)} of the weight" in " ".join(render_text(demo.screen(d, steps, demo.Page(j, False)), 120).split())
    ask = " ".join(re.sub("[│╭╮╰╯]", " ", render_text(demo.screen(d, steps, demo.Page(i, True)), 120)).split())
    assert f"the sink's score {d.num(sink)} joins the softmax too" in ask


def test_the_draw_and_beam_screens_show_the_recorded_stages_and_tree(page_text):
    """With a penalty and min-p the demo gains the draw's screen after temperature's: the stage table and each
    penalty's arithmetic, checked against the recorded logits and counts by hand; with --beams, the tree's screen
    ends with the finished sequences and their scores, those of `gen.beams`. A plain run has neither."""
    import tracer
    from tracer.render.fmt import num

    m = tracer.load("abc")
    gen = m.generate("A B C A B C A B", max_new_tokens=1, temperature=0.9, min_p=0.05, repetition_penalty=1.3,
                     presence_penalty=0.4, frequency_penalty=0.1)  # ␣C, said twice, is a top candidate
    d = demo.Demo(gen, m.tokenizer)
    steps = demo.build_steps(d)
    names = [s.name for s in steps]
    assert names.index("The draw, stage by stage") == names.index("Softmax and temperature") + 1
    t = page_text(d, steps, names.index("The draw, stage by stage") + 1, width=120)
    s = gen.steps[0]
    logits, counts = s["logits"][-1], s["sample.counts"]
    c_id = m.tokenizer.encode(" C")[0]
    c, x = int(counts[c_id]), float(logits[c_id])
    by_hand = (x / 1.3 if x > 0 else x * 1.3) - 0.4 - 0.1 * c  # repetition, presence, frequency
    assert c == 2 and f"'␣C': count 2 → {num(x, 3)} ÷ 1.3 − 0.4 − 2×0.1 = {num(by_hand, 3)}" in t, t
    assert "min-p 0.05" in t and "renormalised" in t
    beams = m.generate("A B C", max_new_tokens=3, beams=3)
    d = demo.Demo(beams, m.tokenizer)
    steps = demo.build_steps(d)
    names = [s.name for s in steps]
    assert names.index("Beam search") == names.index("Append and repeat") + 2  # after the KV cache's
    t = page_text(d, steps, names.index("Beam search") + 1, width=120)
    for k, row in enumerate(beams.rows):
        assert f"= {num(row.score, 3)}" in t.split(f"  {k + 1}. ")[1].splitlines()[0]
    plain = [s.name for s in demo.build_steps(demo.Demo(m.generate("A B C", max_new_tokens=1), m.tokenizer))]
    assert "The draw, stage by stage" not in plain and "Beam search" not in plain
