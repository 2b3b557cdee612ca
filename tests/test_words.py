"""Each step's words written once (`tracer/render/words.py`): the page's script lays out the sentences the
terminal prints and never words them itself, nor any sentence of its own (no prose literal in a script);
every template key it reads is in the page's data with the slots it fills, and every template is said; the sentences the page is sent finished (the KV cache's notes, the logit lens's verdict,
the run's result) are the terminal's, for the families whose wording differs (grouped-query attention,
RMS norm, rotary positions, Gemma's soft-caps). The demo's modules (`render/demo/`) hold no sentence of
their own either, and every key they say is in the words with the slots they give."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import tracer
import tracer.render.demo as demo_module
import tracer.render.page as page_module
from tracer.render import show_generation
from tracer.render.page import page_data, steps_data
from tracer.render.view import View
from tracer.render.words import WORDS, say

DATA = Path(__file__).parent / "data"
SCRIPTS = {p.name: p.read_text(encoding="utf-8") for p in [*sorted(Path(page_module.__file__).parent.glob("*.js")),
                                                            *sorted((Path(tracer.__file__).parent / "serve").glob("*.js"))]}
SLOT = re.compile(r"\{(\w+)\}")
PAGE_WORDS = {key: words for key, words in WORDS.items()  # not the demo's, the prompt box's, the rows' (sent finished),
              if not key.startswith(("demo.", "serve.", "rows.", "lesson."))}  # a led lesson's (lesson.js's)
LEAST = 20  # a template's fixed part this long, found in a script, is the script wording a step itself
DEMO = sorted(Path(demo_module.__file__).parent.glob("*.py"))


def fixed_parts(template: str) -> list[str]:
    """The words of a template between its slots, long enough to be a sentence's own."""
    return [part.strip() for part in SLOT.split(template)[::2] if len(part.strip()) >= LEAST]


def outside_strings(src: str):
    """(index, character, bracket depth before it) of each character of a script not inside a string or
    template literal."""
    depth, j, quote = 0, 0, None
    while j < len(src):
        c = src[j]
        if quote:
            if c == "\\":
                j += 1
            elif c == quote:
                quote = None
        elif c in "\"'`":
            quote = c
        else:
            yield j, c, depth
            depth += (c in "([{") - (c in ")]}")
        j += 1


def closing(src: str, i: int) -> int:
    """The index just past the bracket that closes the one opened at src[i]."""
    for j, c, depth in outside_strings(src[i:]):
        if c in ")]}" and depth == 1:
            return i + j + 1
    raise AssertionError(f"unbalanced at {src[i:i + 60]!r}")


def top_level(src: str, sep: str = ",") -> list[str]:
    """src split at `sep` outside brackets and strings."""
    cuts = [j for j, c, depth in outside_strings(src) if c == sep and depth == 0]
    parts = [src[a + 1:b] for a, b in zip([-1] + cuts, cuts + [len(src)])]
    return [p.strip() for p in parts if p.strip()]


def say_calls(src: str):
    """Every `say(KEY, {slots})` of a script: the keys its first argument may be (string literals, a
    ternary's two) and the slot names its object gives (None: no object)."""
    src = re.sub(r"(^|\s)//[^\n]*", r"\1", src)  # comments name say(key, slots) too
    for m in re.finditer(r"(?<!function )(?<![\w.])say\(", src):
        args = top_level(src[m.end() - 1 + 1:closing(src, m.end() - 1) - 1])
        keys = re.findall(r'"([^"]*)"', args[0])
        slots = None
        if len(args) > 1:
            assert args[1].startswith("{") and args[1].endswith("}"), args[1]
            slots = {item.split(":")[0].strip() for item in top_level(args[1][1:-1])}
        yield keys, slots


def test_the_page_script_holds_no_sentence_of_the_words_module():
    for key, template in PAGE_WORDS.items():
        for part in fixed_parts(template):
            for name, src in SCRIPTS.items():
                assert part not in src, f"{name} words “{part}” itself: say({key!r}) instead (tracer/render/words.py)"


AFTER_WHICH_A_REGEX = set("(,=:[!&|?{};+-*%<>~^")  # a '/' after one of these starts a regex literal, not a division


def literals(src: str) -> list[tuple[int, str]]:
    """(line, text) of every string and template literal of a script outside its comments and regex literals, each
    template's `${…}` substitutions removed (the literals inside them are listed too)."""
    found, n = [], len(src)

    def template(i):  # src[i] is just past the opening backtick: the text, and the index past the closing one
        text = []
        while src[i] != "`":
            if src[i] == "\\":
                text.append(src[i:i + 2])
                i += 2
            elif src.startswith("${", i):
                i = code(i + 2, "}")
            else:
                text.append(src[i])
                i += 1
        return "".join(text), i + 1

    def code(i, end):  # the code from src[i] to the `end` bracket that closes it: the index past that bracket
        depth, last = 0, "("
        while i < n:
            c = src[i]
            if src.startswith("//", i):
                i = src.find("\n", i) % (n + 1)
            elif src.startswith("/*", i):
                i = src.index("*/", i) + 2
            elif c in "\"'":
                j = i + 1
                while src[j] != c:
                    j += 2 if src[j] == "\\" else 1
                found.append((src.count("\n", 0, i) + 1, src[i + 1:j]))
                i, last = j + 1, "a"
            elif c == "`":
                line = src.count("\n", 0, i) + 1
                text, i = template(i + 1)
                found.append((line, text))
                last = "a"
            elif c == "/" and last in AFTER_WHICH_A_REGEX:
                j, in_class = i + 1, False
                while in_class or src[j] != "/":  # a '/' inside [...] does not end it
                    if src[j] == "\\":
                        j += 1
                    elif src[j] in "[]":
                        in_class = src[j] == "["
                    j += 1
                i, last = j + 1, "a"
            else:
                if c in ")]}" and depth == 0 and c == end:
                    return i + 1
                depth += (c in "([{") - (c in ")]}")
                if not c.isspace():
                    last = "a" if c.isalnum() or c in "_$" else c
                i += 1
        return i

    code(0, None)
    return found


WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")


def prose(text: str, least: int = 4) -> bool:
    """Whether `text` holds `least` words in a row (punctuation is skipped; a number or a symbol breaks the run)."""
    run = 0
    for token in text.split():
        word = token.strip(",.;:()“”\"!?")
        if word:
            run = run + 1 if WORD.fullmatch(word) else 0
        if run >= least:
            return True
    return False


def test_the_prose_rule_finds_a_sentence_and_nothing_else():
    src = """// a comment with many words in it is not prose\n/* nor is this block comment, however long */
const a = `Layer ${l}, head ${h} of ${H}. The article's analogy`, r = /"[^"]+"/g, q = x / 2 / y;
el("td", { class: "r n", title: `dim ${d}: ${exact(x)}` }, say("scores.none"), `${ok ? `the keys it weighs most` : ""}`);"""
    lits = literals(src)
    assert [t for _, t in lits if prose(t)] == ["Layer , head  of . The article's analogy", "the keys it weighs most"]
    assert ("r n" in [t for _, t in lits]) and not any(prose(t) for t in ("r n", "dim : ", "scores.none", "K (key)", "− ∞ 0 1 2"))


def test_the_page_scripts_hold_no_prose_literal():
    """Every sentence or phrase the pages show is tracer/render/words.py's, the script calls say(key, {slots}) (issue 21)."""
    said = [f"{name}:{line}: {text!r}" for name, src in SCRIPTS.items() for line, text in literals(src) if prose(text)]
    assert not said, "prose in the page's script (a WORDS entry and say() instead):\n" + "\n".join(said)


def test_the_old_twins_are_gone_from_the_script():
    """Sentences the script used to word itself, beside the terminal's (issue 21)."""
    for old in ("queries the embedding matrix", "can see the keys and values of", "the causal mask hides nothing",
                "is the end token, so generation stops", "Each reused row is that token's keys and values",
                "first becomes the top-1", "stated values agree", "Every layer repeats the steps above",
                "concatenate the", "add the layer's input back", "'s output of layer", "recomputes all",
                "the KV cache changes no logit", "goes straight to W_U", "the seeded draw"):
        for name, src in SCRIPTS.items():
            assert old not in src, f"{name}: {old!r}"


def test_every_key_the_script_says_is_in_the_words_with_the_slots_it_fills():
    seen = 0
    for name, src in SCRIPTS.items():
        for keys, slots in say_calls(src):
            assert keys, f"{name}: say() of a key that is not a string literal"
            for key in keys:
                assert key in WORDS, f"{name}: say({key!r}) is not in tracer/render/words.py"
                wanted = set(SLOT.findall(WORDS[key]))
                assert (slots or set()) == wanted, f"{name}: say({key!r}) fills {sorted(slots or ())}, it names {sorted(wanted)}"
                seen += 1
    assert seen >= 150  # the script says the sentences (a parser that found none would pass vacuously)


def test_every_script_says_its_words_and_every_template_is_said():
    said = {name: {key for keys, _ in say_calls(src) for key in keys} for name, src in SCRIPTS.items()}
    wordless = {"state.js"}  # the model, the path of steps (worded by Python: `steps_data`) and the state
    assert all(keys for name, keys in said.items() if name not in wordless), {name: len(keys) for name, keys in said.items()}
    assert not any(said[name] for name in wordless)  # the compare page's, the panel's, …
    steps = {f"{kind}.{step}" for step, _, _ in steps_data(checked=True) for kind in ("path", "title")}  # each page step's
    python = "\n".join(p.read_text(encoding="utf-8") for p in Path(tracer.__file__).parent.rglob("*.py") if not p.name.startswith("words"))  # words.py, words_experts.py, words_kinds.py, words_decoding.py
    unsaid = [key for key in WORDS if not any(key in keys for keys in said.values()) and key not in steps
              and f'"{key}"' not in python and f"'{key}'" not in python]
    assert not unsaid, f"templates neither the page's scripts nor the terminal say: {unsaid}"


def test_say_fills_every_slot_and_refuses_a_missing_one():
    assert say("embed.row", L="B", shape="9 × 5", id="1") == "B queries the embedding matrix W_E (9 × 5) at row 1"
    with pytest.raises(KeyError):
        say("embed.row", L="B")


FAMILIES = ["gpt2-tiny/hub", "llama-tiny", "qwen3-tiny", "olmo2-tiny", "gemma2-tiny", "gemma3-tiny", "gpt-oss-tiny",
            "qwen2-moe-tiny"]  # the last two: attention sinks, a mixture of experts (a dense layer, a shared expert)


@pytest.fixture(scope="module", params=FAMILIES)
def run(request):
    m = tracer.load(str(DATA / request.param))
    gen = m.generate("the cat sat", max_new_tokens=2)
    return m, gen, page_data(gen, m.tokenizer)


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_page_carries_the_words_and_the_templates_it_fills(run):
    m, gen, d = run
    cfg, sw = m.config, d["model"]["switches"]
    assert d["words"] == PAGE_WORDS
    # the templates Python fills partly, and the slots the script gives them (steps.js, predict.js)
    assert set(SLOT.findall(sw["positions"]["instead"])) <= {"L"}
    assert set(SLOT.findall(sw["norm"]["ln1"])) <= {"x"}
    assert all(set(SLOT.findall(w)) <= {"shape"} for _, _, w in sw["mlp"]["steps"])
    assert len(d["layer_words"]) == cfg.n_layers
    for l, lw in enumerate(d["layer_words"]):
        assert lw["window"] == cfg.window_of(l)
        assert (lw["rope"] is not None) == cfg.position_kind.rotary
        if lw["rope"]:
            assert set(SLOT.findall(lw["rope"])) == {"L", "t"}
    if cfg.attn_softcap is not None:
        assert set(SLOT.findall(sw["softcap"]["scores"])) == {"before", "after"}
    assert (sw["softcap"]["logits"] is not None) == (cfg.final_softcap is not None)


def test_the_sentences_sent_finished_are_the_terminals(run, render_text):
    m, gen, d = run
    text = flat(render_text(lambda console: show_generation(gen, m.tokenizer, View(), console=console), width=200))
    assert d["kv_notes"] and d["passes"][0]["lens"]["notes"]
    for words in d["kv_notes"] + d["passes"][0]["lens"]["notes"] + [d["generated"], d["model"]["line"], d["run"]]:
        assert flat(words) in text, words
    cfg = m.config
    per_row = 2 * cfg.n_layers * cfg.kv_heads * cfg.d_head  # grouped-query attention: the key/value heads, not the query heads
    assert any(f"= {per_row:,} numbers, computed once and kept" in n for n in d["kv_notes"])


def test_a_sampled_runs_draw_is_said_in_the_terminals_words(render_text):
    m = tracer.load(str(DATA / "llama-tiny"))
    gen = m.generate("the cat sat", max_new_tokens=2, temperature=0.8, top_k=5, top_p=0.9, seed=3)
    d = page_data(gen, m.tokenizer)
    text = flat(render_text(lambda console: show_generation(gen, m.tokenizer, View(), console=console), width=200))
    drawn = d["passes"][0]["sampling"]
    assert drawn["stages"].startswith("logits → ÷ temperature 0.80") and "draw u (seed 3)" in drawn["stages"]
    assert any(n.startswith("draw: numpy's PCG64 generator seeded with 3") for n in drawn["notes"])
    assert d["run"] == "temperature 0.8, top-k 5, top-p 0.9, seed 3, KV cache on, 2 new tokens"  # the header's second line
    for words in [drawn["stages"], *drawn["notes"], d["run"]]:
        assert flat(words) in text, words
    greedy = m.generate("the cat sat", max_new_tokens=1)
    assert all(q["sampling"] is None for q in page_data(greedy, m.tokenizer)["passes"])  # greedy: the terminal shows no draw


# ------------------------------------------------------------------------------- the demo's modules

WORD = re.compile(r"\(?[A-Za-z][A-Za-z'’-]*[,.;:!?)]*")  # a plain word, with the punctuation a sentence puts around it
SENTENCE = 6  # this many plain words in a row in a string literal: a sentence (a screen's title or a column has fewer)


def py_literals(path: Path):
    """(line, text) of every string literal of a module but its docstrings; an f-string's text with each
    {slot} as a break between words."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in ast.walk(tree):
        if id(node) in docs or id(node) in parts:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr):
            yield node.lineno, " ".join(v.value if isinstance(v, ast.Constant) else " {} " for v in node.values)


def words_in_a_row(text: str) -> int:
    best = run = 0
    for token in text.split():
        run = run + 1 if WORD.fullmatch(token) else 0
        best = max(best, run)
    return best


def sentences(folder_files) -> list[str]:
    """The string literals of these modules that are sentences: `SENTENCE` plain words in a row."""
    return [f"{p.name}:{line}: {text[:80]!r}" for p in folder_files for line, text in py_literals(p)
            if words_in_a_row(text) >= SENTENCE]


def test_the_rule_tells_a_sentence_from_a_title_a_column_and_a_style_sheet():
    assert words_in_a_row("The model never sees words, only numbers: the prompt") == 9
    assert words_in_a_row("Unembedding: one score per token") == 5  # a screen's title
    assert words_in_a_row("angle of pair 0, 1, … (radians,  {}  pairs)") == 3  # a column
    assert words_in_a_row("body { margin: 0; background: #f4f4f0; color: #111; font-family: system-ui, sans-serif; }") == 3
    assert words_in_a_row("it reached the limit of  {}  new tokens") == 5  # a slot breaks the run


def test_the_demos_modules_hold_no_sentence_of_their_own():
    """The demo's narration, questions and frame are `say(key, …)` of tracer/render/words.py (issue 21)."""
    assert len(DEMO) >= 8  # __init__, base, layer, output, copying, screens, deck, pager
    found = sentences(DEMO)
    assert not found, "the demo words these itself; say(key, ...) of a WORDS entry instead:\n" + "\n".join(found)


def say_calls_of(path: Path):
    """(line, key or None when not a string literal, the slot names given or None for **slots) of every
    `say(…)` in a module."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "say":
            first = node.args[0] if node.args else None
            key = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
            slots = None if any(k.arg is None for k in node.keywords) else {k.arg for k in node.keywords}
            yield node.lineno, key, slots


def test_every_key_the_demo_says_is_in_the_words_with_the_slots_it_gives():
    said = set()
    for path in DEMO:
        for line, key, slots in say_calls_of(path):
            where = f"{path.name}:{line}"
            assert key is not None, f"{where}: say() of a key that is not a string literal"
            assert key in WORDS, f"{where}: say({key!r}) is not in tracer/render/words.py"
            assert slots is not None, f"{where}: say({key!r}, **…): give each slot by name"
            wanted = set(SLOT.findall(WORDS[key]))
            assert slots == wanted, f"{where}: say({key!r}) gives {sorted(slots)}, it names {sorted(wanted)}"
            said.add(key)
    assert {"scores.compare", "scores.masked", "heads.many", "heads.one", "predict.final"} <= said  # the walkthrough's, shared
    unsaid = sorted(k for k in WORDS if k.startswith("demo.") and k not in said)
    assert not unsaid, f"demo words no screen says: {unsaid}"
