"""The commands through typer's CliRunner: `tracer trace`, `show`, `--export`, the view options, `--json`,
`tokens`, the generation options, and one-line errors; then `python -m tracer` as a real process.

The walkthrough tests use the embedded untrained model `tiny` (24 layers, d_model 8, 2 heads, GPT-2
tokens, seeded weights: `run` adds `--model tiny` to `trace`), whose shape they spell out; the default
model, the trained `abc`, has its own tests at the end. Bad input in depth is `test_bad_inputs.py`; `demo`, `replay` and
`download` are tested with what they read (`test_demo.py`, `test_scenario.py`, `test_hf.py`).
"""

from __future__ import annotations

import json
import re

import pytest

import tracer
from tracer.cli import app

PROMPT = "The cat sat"  # three GPT-2 tokens: The, ␣cat, ␣sat
ARTICLE = "You are a business consultant, please analyze the impact of rising oil prices on the automotive industry."
WALKTHROUGH_ENV = {"NO_COLOR": "1", "COLUMNS": "100"}


def run(runner, *args):
    """A command as the walkthrough tests run it: no color, 100 columns, `trace` on the tiny model."""
    args = list(args)
    if args[:1] == ["trace"] and "--model" not in args and "-m" not in args:
        args += ["--model", "tiny"]
    return runner.invoke(app, args, env=WALKTHROUGH_ENV)


@pytest.fixture(scope="module")
def traced(runner):
    r = run(runner, "trace", PROMPT)
    assert r.exit_code == 0, r.output
    return r.stdout


# --------------------------------------------------------------------------- the walkthrough: trace, show, --export


def test_trace_shows_every_section(traced):
    out = re.sub(r"\s+", " ", traced)
    for words in ("1 · Tokens", "from the gpt2 vocabulary of 50,257 tokens",
                  "2 · First layer (layer 0 of 24), token by token",
                  "A queries the embedding matrix W_E (50,257 × 8) at row 464",  # 'The' is GPT-2 id 464
                  "+ position vector (W_pos row 0, learned)", "the causal mask hides B and C",
                  "3 · All 24 layers",
                  "× W_U (8 × 50,257; W_E transposed, tied)", "5 · Every position predicts",
                  "6 · Attention heatmaps", "predictions are meaningless until real weights are loaded",
                  "ABC → ABCD"):
        assert words in out, words
    # the untrained model's choice is no letter: it is named by its text, at D ("predicts D" read as the letter)
    assert re.search(r"4 · Predicting the next token \(how to predict \S+ at D\)", out), out[:3000]
    assert "␣cat" in traced and "\x1b[" not in traced


def test_save_then_show_gives_the_same_walkthrough(runner, tmp_path, traced):
    path = tmp_path / "t.npz"
    r = run(runner, "trace", PROMPT, "--save", str(path))
    assert r.exit_code == 0, r.output
    assert r.stdout == traced
    r = run(runner, "show", str(path))
    assert r.exit_code == 0, r.output
    assert r.stdout == traced


@pytest.mark.parametrize("suffix", [".terminal.html", ".svg", ".txt"])  # FILE.html is the page: tests/test_page.py
def test_export_writes_what_was_shown(runner, tmp_path, suffix, traced):
    path = tmp_path / ("out" + suffix)
    r = run(runner, "trace", PROMPT, "--export", str(path))
    assert r.exit_code == 0, r.output
    text = path.read_text(encoding="utf-8")
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
    if suffix == ".txt":
        assert text == r.stdout == traced
    elif suffix.endswith(".html"):
        assert text.startswith("<!DOCTYPE html>")
        assert "queries the embedding matrix" in text and "<link" not in text and "<script" not in text
    else:
        assert text.lstrip().startswith("<svg") and "@font-face" not in text
        assert "queries" in text


def test_export_bad_suffix(runner, tmp_path):
    r = run(runner, "trace", PROMPT, "--export", str(tmp_path / "x.pdf"))
    assert r.exit_code == 2
    assert "--export" in r.stderr and ".html, .svg, .txt" in r.stderr


@pytest.mark.parametrize("args, names", [
    (["--token", "Z"], ("--token Z", "A–", "(positions 0–")),
    (["--token", "9"], ("--token 9", "A–", "(positions 0–")),
    (["--layer", "24"], ("--layer 24", "0–23", "'all'")),
    (["--layer", "first"], ("--layer first", "0–23", "'all'")),
    (["--head", "2"], ("--head 2", "0–1", "'all'")),
])
def test_bad_view_options(runner, args, names):
    """One line on stderr naming the option, its value and the valid range; exit code 2."""
    r = run(runner, "trace", PROMPT, *args)
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("tracer: " + names[0] + ":") and "\n" not in err
    for part in names[1:]:
        assert part in err, err
    assert "Traceback" not in r.output and r.stdout == ""


def test_show_bad_token(runner, tmp_path):
    path = tmp_path / "t.npz"
    assert run(runner, "trace", PROMPT, "--save", str(path)).exit_code == 0
    r = run(runner, "show", str(path), "--token", "K")
    assert r.exit_code == 2
    assert r.stderr.startswith("tracer: --token K:") and "(positions 0–" in r.stderr


def test_view_options(runner):
    r = run(runner, "trace", PROMPT, "--token", "B", "--layer", "5", "--head", "1", "--dims", "4", "--precision", "2")
    assert r.exit_code == 0, r.output
    out = re.sub(r"\s+", " ", r.stdout)
    assert "Layer 5 (layer 5 of 24), token by token" in out
    assert "B: ␣cat (position 1)" in out and "A: The" not in out
    assert "head 1 of 2" in out and "head 0 of 2" not in out
    assert "x_B = [" in out
    # --dims 4: an 8-wide vector shows 2 … 2 and its norm; --precision 2: two decimals
    assert re.search(r"x_B = \[-?\d\.\d\d, -?\d\.\d\d, …, -?\d\.\d\d, -?\d\.\d\d\] \(8 dims, ‖·‖ \d\.\d\d\)", out)


def test_full_and_all_layers(runner):
    r = run(runner, "trace", PROMPT, "--full", "--layer", "all", "--max-new-tokens", "2")
    assert r.exit_code == 0, r.output
    out = re.sub(r"[ \t]+", " ", r.stdout)
    assert "2.24 · Layer 23 (layer 23 of 24), token by token" in out
    assert out.count("C: ␣sat (position 2)") == 24
    assert out.count("layer 23, head 1") == 1


# --------------------------------------------------------------------------- --json, tokens, errors


def test_cli_trace_json(runner):
    r = runner.invoke(app, ["trace", ARTICLE, "--json", "-n", "2"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["prompt_ids"][:3] == [1639, 389, 257] and len(out["generated_ids"]) == 2
    assert out["text"] == "".join(out["generated"])


def test_cli_trace_saves_and_says_untrained(tmp_path, runner):
    path = tmp_path / "t.npz"
    r = runner.invoke(app, ["trace", "Hello world", "--save", str(path), "-m", "tiny"])
    assert r.exit_code == 0, r.output
    assert "untrained" in r.stdout
    assert tracer.Generation.load(path).prompt_ids == [15496, 995]


def test_cli_tokens_table(runner):
    r = runner.invoke(app, ["tokens", "building a house"])
    assert r.exit_code == 0
    for text in ("building", "␣a", "␣house", "16894", "50,257"):
        assert text in r.stdout


def test_cli_errors_are_one_line_with_exit_2(runner):
    r = runner.invoke(app, ["trace", "x", "--model", "gpt3"])
    assert r.exit_code == 2 and "did you mean 'gpt2'" in r.stderr and "Traceback" not in r.output
    r = runner.invoke(app, ["tokens", "x", "--encoding", "nope"])
    assert r.exit_code == 2 and "not available offline" in r.stderr


def test_a_prompt_that_fits_but_leaves_no_room_names_max_new_tokens(runner):
    r = runner.invoke(app, ["trace", "hello " * 1000, "-n", "100", "-m", "tiny"])
    assert r.exit_code == 2
    assert "max-new-tokens 100 overflows the context" in r.stderr and "at most 23 new tokens" in r.stderr
    assert "longer than the model's context" not in r.stderr


# --------------------------------------------------------------------------- generation options


@pytest.mark.parametrize("args,message", [
    (["--temperature", "-1"], "Invalid value for '--temperature' / '-t': Input should be greater than or equal to 0"),
    (["--top-p", "0"], "top-p must be in (0, 1]"),
    (["--top-p", "1.01"], "Invalid value for '--top-p': Input should be less than or equal to 1"),
    (["--top-k", "0"], "Invalid value for '--top-k': Input should be greater than or equal to 1"),
    (["--max-new-tokens", "1100"], "overflows the context"),
])
def test_bad_values_on_the_command_line_exit_2_with_one_line(args, message, runner):
    r = runner.invoke(app, ["trace", "A B C", *args])
    assert r.exit_code == 2, r.output
    assert message in r.stderr and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1


def test_stop_and_json_on_the_command_line(runner):
    r = runner.invoke(app, ["trace", "A B C", "-n", "4", "--json"])
    assert r.exit_code == 0, r.output
    full = json.loads(r.stdout)
    assert len(full["generated_ids"]) == 4 and full["prompt_ids"] == tracer.load("tiny").tokenizer.encode("A B C")
    first = tracer.load("tiny").tokenizer.decode(full["generated_ids"][:1])
    r = runner.invoke(app, ["trace", "A B C", "-n", "4", "--json", "--stop", first.strip()])
    got = json.loads(r.stdout)
    assert got["generated_ids"] == full["generated_ids"][:1] and got["text"] == first
    assert got["settings"]["stopped"] == "stop_string"


def test_verify_cache_on_the_command_line(runner):
    r = runner.invoke(app, ["trace", "A B C", "-n", "3", "--verify-cache", "--json", "-m", "tiny"])
    assert r.exit_code == 0, r.output
    v = json.loads(r.stdout)["verify_cache"]
    assert v["ok"] and v["steps"] == 3 and v["tokens_equal"] and v["tolerance"] == 1e-12


# --------------------------------------------------------------------------- a real process


@pytest.mark.slow
def test_python_dash_m_works(run_tracer):
    r = run_tracer("tokens", "Hi", text=True)
    assert r.returncode == 0 and "17250" in r.stdout


# --------------------------------------------------------------------------- the default model


def test_the_default_model_is_the_trained_abc_and_predicts_g(runner):
    """`tracer trace "A B C D E F"`, the README's first command: the shipped trained model, the
    article's G, said as trained (no untrained warning), and where the logit lens finds it."""
    r = runner.invoke(app, ["trace", "A B C D E F", "-n", "1"], env=WALKTHROUGH_ENV)
    assert r.exit_code == 0, r.output
    out = re.sub(r"\s+", " ", r.stdout)
    assert "tracer · model abc: 4 layers, d_model 64, 4 heads" in out
    assert "trained by tracer" in out and "untrained" not in out
    m = re.search(r"chosen: G = ␣G \(id 402, probability (0\.\d+)\)", out)
    assert m and float(m.group(1)) > 0.5, out[-3000:]
    assert "ABCDEF → ABCDEFG" in out and "first becomes the top-1 out of layer" in out


def test_the_readmes_first_command_keeps_every_table_whole_at_80_columns(runner):
    """`tracer trace "A B C D E F" | cat` at 80 columns: no table header or number cut to `l…`, `‖…`, `1…`.
    (The logit lens shortens a long token on purpose, to 6 characters and `…` beside its probability,
    `relati… 4e-5`: that is not a cut.)"""
    r = runner.invoke(app, ["trace", "A B C D E F"], env={"NO_COLOR": "1", "COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    rows = [l for l in r.stdout.splitlines() if l.lstrip()[:1] in ("┃", "│")]
    assert len(rows) > 30  # the tables are there
    lens_short = re.compile(r"\S{6}… (?:\.\d+|\d(?:\.\d+)?e-\d+|1\.00)✓?")
    cut = [l for l in rows if "…" in lens_short.sub("", l)]
    assert cut == [], "\n".join(cut)
    layers = next(l for l in rows if "‖x‖ in" in l)
    assert "layer" in layers and "‖x‖ out" in layers and "head 3" in layers


def test_a_shorter_context_than_tinys_is_named(runner):
    r = runner.invoke(app, ["trace", "A B C", "-n", "100"])
    assert r.exit_code == 2 and "max-new-tokens 100 overflows the context" in r.stderr and "64" in r.stderr


def test_a_bad_view_option_is_refused_before_anything_runs_or_is_saved(runner, tmp_path):
    """Issue 13: `--layer 30 --save x.npz` used to run, write the file, then exit 2."""
    path = tmp_path / "x.npz"
    r = run(runner, "trace", PROMPT, "--layer", "30", "--save", str(path))
    assert r.exit_code == 2 and "--layer 30" in r.stderr
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_export_says_what_it_wrote(runner, tmp_path):
    for name, what in (("page.html", "the classroom page"), ("run.svg", "the record of what the terminal printed")):
        r = runner.invoke(app, ["trace", "A B C", "-n", "1", "--export", str(tmp_path / name)], env=WALKTHROUGH_ENV)
        assert r.exit_code == 0, r.output
        assert f"wrote {tmp_path / name} (" in r.stderr and what in r.stderr
    r = runner.invoke(app, ["replay", "article", "--export", str(tmp_path / "a.html")], env=WALKTHROUGH_ENV)
    assert r.exit_code == 0 and f"wrote {tmp_path / 'a.html'}" in r.stderr


def test_a_prompt_that_starts_with_a_minus_gets_a_hint_about_the_double_dash(runner):
    r = runner.invoke(app, ["trace", "-5 degrees"])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "no such option: -5" in r.stderr and "goes after --" in r.stderr
    r = runner.invoke(app, ["trace", "-n", "1", "--section", "tokens", "--", "-5 degrees"], env=WALKTHROUGH_ENV)
    assert r.exit_code == 0 and "␣degrees" in r.stdout
    r = runner.invoke(app, ["trace", "--zzz"])  # a real unknown option: one line, no usage block
    assert r.exit_code == 2 and r.stderr == "tracer: no such option: --zzz; see tracer trace --help\n"


def test_an_option_typo_is_one_line_naming_the_nearest_option(runner):
    """Not click's four lines of usage: the line names the option meant, by its closeness to what was typed."""
    r = runner.invoke(app, ["trace", "A B", "--temprature", "0.5"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "Usage" not in r.stderr
    assert "(did you mean --temperature?)" in r.stderr
    r = runner.invoke(app, ["trace", "A B", "--sectoin", "predict"])
    assert r.stderr == "tracer: no such option: --sectoin (did you mean --section?); see tracer trace --help\n"
    r = runner.invoke(app, ["tokens", "A B", "--encodin", "gpt2"])
    assert "(did you mean --encoding?)" in r.stderr and r.stderr.count("\n") == 1
    r = runner.invoke(app, ["trce", "A B"])
    assert r.exit_code == 2 and r.stderr == "tracer: no such command: trce (did you mean trace?); see tracer --help\n"
    assert runner.invoke(app, []).exit_code in (0, 2) and "Usage" in runner.invoke(app, []).output  # no words: the help


def test_too_many_new_tokens_for_a_short_prompt_says_how_many_fit(runner):
    r = runner.invoke(app, ["trace", "A B C", "-n", "100"])
    assert r.exit_code == 2 and "so at most 61 new tokens" in r.stderr and "--truncate" not in r.stderr
    assert runner.invoke(app, ["trace", "A B C", "-n", "61", "--section", "tokens"]).exit_code == 0
    assert runner.invoke(app, ["trace", "A B C", "-n", "62", "--section", "tokens"]).exit_code == 2


def test_debug_shows_the_traceback_and_keeps_the_exit_code(runner):
    r = runner.invoke(app, ["--debug", "trace", "A B C", "-n", "100"])
    assert r.exit_code == 2
    assert "Traceback" in r.stderr and r.stderr.strip().splitlines()[-1].startswith("tracer: max-new-tokens 100")
