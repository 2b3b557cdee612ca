"""The page's interventions: every single-head ablation of the prompt precomputed for the page
(`tracer.run.interventions.head_ablations`, checked against `model.run(…, hooks=ablate_head(…))` and against a
model whose W_O slice is zero), the sentence the page carries for each (the terminal's), what a page over
the limit says instead, and `tracer compare A B --export FILE.html`'s page (its heatmap's numbers are
--json's). What the pages do in a browser is in tests/test_page_browser.py."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tracer.run import interventions
from tracer.cli import app
from tracer.run.interventions import ablate_head, head_ablations
from tracer.render.page import page_data
from tracer.render.header import ablation_words
from tracer.render.words import PAGE_WORDS as TEMPLATES
from tracer.tokenizers.tokens import show_token

WORDS = ["w1", "w2", "w3", "w4", "w5", "w1", "w2"]
WIDE = {"COLUMNS": "400", "NO_COLOR": "1"}


def probs(trace) -> np.ndarray:  # [d_vocab] the last position's softmax, float64, written out here
    z = np.asarray(trace["logits"][-1], dtype=np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


def data_of(html: str, element: str = "trace-data") -> dict:
    m = re.search(rf'<script type="application/json" id="{element}">(.*?)</script>', html, re.S)
    assert m, "no data block"
    return json.loads(m.group(1))


@pytest.mark.parametrize("cfg", [{}, {"n_layers": 3, "n_heads": 4, "d_head": 2}])
def test_each_head_ablation_is_the_hooked_run_and_the_run_without_its_w_o_slice(word_model, cfg):
    m = word_model(seed=4, **cfg)
    ids = m.tokenize(WORDS)
    got = head_ablations(m, ids, top_k=4)
    assert got["done"] and got["runs"] == m.config.n_layers * m.config.n_heads
    clean = probs(m.run(ids))
    top = int(np.argmax(clean))
    assert got["clean"]["top_ids"] == [int(i) for i in np.argsort(-clean, kind="stable")[:4]]
    np.testing.assert_allclose(got["clean"]["top_p"], clean[got["clean"]["top_ids"]], rtol=1e-12)
    for layer in range(m.config.n_layers):
        for head in range(m.config.n_heads):
            h = got["heads"][layer][head]
            hooked = probs(m.run(ids, hooks=ablate_head(layer, head)))
            w_o = np.array(m.params[f"blocks.{layer}.attn.W_O"])  # [head, d_head, d_model]
            w_o[head] = 0.0
            without = probs(word_model(seed=4, given={f"blocks.{layer}.attn.W_O": w_o}, **cfg).run(ids))
            np.testing.assert_allclose(hooked, without, rtol=1e-9, atol=1e-15)  # zero z ≡ zero W_O slice
            assert h["top_ids"] == [int(i) for i in np.argsort(-hooked, kind="stable")[:4]]
            np.testing.assert_allclose(h["top_p"], hooked[h["top_ids"]], rtol=1e-12)
            assert h["p_clean_top"] == pytest.approx(float(hooked[top]), rel=1e-12)
            assert h["top_changed"] == (int(np.argmax(hooked)) != top)
    changed = [h["top_changed"] for row in got["heads"] for h in row]
    assert not all(changed)  # the heads do not all matter alike (the test would not see a swapped row)


def test_the_page_carries_each_heads_sentence_and_its_tokens(word_model):
    m = word_model(seed=4)
    ids = m.tokenize(WORDS)
    result = head_ablations(m, ids)
    d = page_data(m.generate(ids, max_new_tokens=1), m.tokenizer, heads=result)
    block = d["head_ablations"]
    assert block["done"] and block["words"] is None and block["position"] == len(ids) - 1
    assert block["clean"]["ids"] == result["clean"]["top_ids"]
    assert block["clean"]["ids"][0] == d["passes"][0]["chosen"]  # the precomputed clean run is the page's run
    for layer, row in enumerate(block["heads"]):
        for head, h in enumerate(row):
            r = result["heads"][layer][head]
            change = {"ablated": [f"head {layer}:{head}"], "clean": {"top_id": result["clean"]["top_ids"][0],
                                                                  "p_top": result["clean"]["top_p"][0]},
                      "changed": {"top_id": r["top_ids"][0], "p_top": r["top_p"][0], "p_clean_top": r["p_clean_top"]}}
            assert h["words"] == ablation_words(change, m.tokenizer)
            assert h["words"].startswith(f"without head {layer}:{head}: p(")
            assert h["ids"] == r["top_ids"] and h["changed"] == r["top_changed"]
            np.testing.assert_allclose(h["p"], r["top_p"], rtol=1e-5)
            assert all(str(i) in d["texts"] for i in h["ids"])


def test_the_exported_page_says_what_trace_ablate_says(runner, tmp_path):
    out = tmp_path / "page.html"
    r = runner.invoke(app, ["trace", "A B C D E F", "--export", str(out)], env=WIDE)
    assert r.exit_code == 0, r.stderr
    block = data_of(out.read_text(encoding="utf-8"))["head_ablations"]
    assert block["done"] and len(block["heads"]) == 4 and all(len(row) == 4 for row in block["heads"])  # abc: 4 × 4
    r = runner.invoke(app, ["trace", "A B C D E F", "--ablate", "1:0", "-n", "1"], env=WIDE)
    assert r.exit_code == 0, r.stderr
    said = re.search(r"without head 1:0: [^\n]*?(?=\. Every number)", r.stdout).group(0)
    assert block["heads"][1][0]["words"] == said


def test_over_the_limit_the_page_says_what_it_left_out(runner, tmp_path, monkeypatch):
    monkeypatch.setattr(interventions, "HEAD_ABLATION_WORK", 1e6)
    out = tmp_path / "page.html"
    r = runner.invoke(app, ["trace", "A B C D E F", "-n", "0", "--export", str(out)], env=WIDE)
    assert r.exit_code == 0, r.stderr
    d = data_of(out.read_text(encoding="utf-8"))
    block = d["head_ablations"]
    assert not block["done"] and block["heads"] is None and block["words"] in d["left_out"]  # said on the first step too
    assert block["words"].startswith("head ablations not precomputed: 4 layers × 4 heads = 16 runs of a 3.5M model "
                                     "over 6 tokens, more than the page runs")
    assert "run `tracer trace … --ablate L:H` for one head" in block["words"]


def test_a_page_without_its_heads_ablated_says_why(runner, tmp_path, word_model):
    out, saved = tmp_path / "page.html", tmp_path / "t.npz"
    r = runner.invoke(app, ["trace", "A B C D E F", "--ablate", "1:0", "--save", str(saved), "--export", str(out)], env=WIDE)
    assert r.exit_code == 0, r.stderr
    words = data_of(out.read_text(encoding="utf-8"))["head_ablations"]["words"]
    assert words.startswith("head ablations not precomputed: this run already has head 1:0 removed (--ablate)")
    r = runner.invoke(app, ["show", str(saved), "--export", str(out)], env=WIDE)
    assert r.exit_code == 0, r.stderr
    words = data_of(out.read_text(encoding="utf-8"))["head_ablations"]["words"]
    assert "already has head 1:0 removed" in words  # the saved trace remembers its --ablate
    m = word_model()
    words = page_data(m.generate(WORDS[:3]), m.tokenizer)["head_ablations"]["words"]
    assert words.startswith("head ablations not precomputed for this page (`tracer trace … --export FILE.html` runs them")


COMPARE = ["compare", "the red cat sat on the mat . the red cat sat on the", "the big dog ran on the mat . the red cat sat on the"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    from typer.testing import CliRunner

    out = tmp_path_factory.mktemp("compare") / "compare.html"
    runner = CliRunner()
    r = runner.invoke(app, COMPARE + ["--json", "--export", str(out)], env=WIDE)
    assert r.exit_code == 0, r.stderr
    return out, json.loads(r.stdout), r.stderr


def test_the_compare_page_carries_json_s_numbers_and_is_self_contained(compared):
    out, js, said = compared
    assert f"wrote {out}" in said
    html = out.read_text(encoding="utf-8")
    low = re.sub(r'(<script type="application/json" id="trace-data">).*?(</script>)', r"\1\2", html, flags=re.S).lower()
    for fetch in ("http://", "https://", "<link", " src=", "@import", "url(", "//cdn", "@font-face"):
        assert fetch not in low, fetch
    assert low.count("<script") == 2 and low.count("</script") == 2  # the data and the script, nothing else
    from tracer.render.page.html import COMPARE_SCRIPTS, asset

    for name in COMPARE_SCRIPTS:  # text only, never markup, nothing fetched
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "fetch(",
                     "XMLHttpRequest", "import("):
            assert sink not in asset(name), f"{name} uses {sink}"
    d = data_of(html)
    assert d["format"] == "tracer-compare" and d["recovered"] == js["patch"]["recovered"]
    assert [t["id"] for t in d["tokens"][0]] == js["a_ids"] and [t["id"] for t in d["tokens"][1]] == js["b_ids"]
    assert d["differs"] == [bool(x) for x in js["differs"]] and d["answers"] == js["answers"]
    assert [d["texts"][str(i)] for i in d["answers"]] == [show_token(t) for t in js["answer_tokens"]]
    assert [p["ids"][0] for p in d["predictions"]] == js["answers"]
    assert d["said"]["answers"].startswith("A predicts ") and d["words"] == TEMPLATES  # compare.js fills WORDS' templates too


def test_compare_export_writes_nothing_on_a_bad_input(runner, tmp_path):
    out = tmp_path / "c.html"
    r = runner.invoke(app, ["compare", "A B C", "A B", "--export", str(out)], env=WIDE)
    assert r.exit_code == 2 and "A has 3, B has 2" in r.stderr and not out.exists()
    r = runner.invoke(app, ["compare", "A B", "A C", "--export", str(tmp_path / "c.svg")], env=WIDE)
    assert r.exit_code == 2 and "must end in .html" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_135m_model_is_over_the_limit_and_runs_nothing(smollm2):
    from tracer.render.page.ablations import left_out_words

    got = head_ablations(smollm2, smollm2.tokenize("The capital of France is the city of"))
    assert not got["done"] and "heads" not in got and got["runs"] == 30 * 9
    assert left_out_words(got, {}, smollm2.config) == (
        "head ablations not precomputed: 30 layers × 9 heads = 270 runs of a 135M model over 8 tokens, more than the "
        "page runs (about 2.9e+11 multiply-adds; it runs up to 2e+09); run `tracer trace … --ablate L:H` for one head")


def test_a_replayed_scenario_s_page_has_its_heads_ablated(runner, tmp_path):
    from tracer.replay import replay

    out = tmp_path / "article.html"
    r = runner.invoke(app, ["replay", "article", "--export", str(out)], env=WIDE)
    assert r.exit_code == 0, r.stderr
    block = data_of(out.read_text(encoding="utf-8"))["head_ablations"]
    cfg = replay("article").model.config
    assert block["done"] and [len(row) for row in block["heads"]] == [cfg.n_heads] * cfg.n_layers
    assert block["heads"][0][0]["words"].startswith("without head 0:0: p(")


def test_the_compare_page_escapes_what_the_prompts_hold(runner, tmp_path):
    out = tmp_path / "c.html"
    r = runner.invoke(app, ["compare", "</script><b>x A", "</script><b>x B", "--export", str(out)], env=WIDE)
    assert r.exit_code == 0, r.stderr
    html = out.read_text(encoding="utf-8")
    body = html.split('id="trace-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in body and ">" not in body and "&" not in body and body.isascii()
    assert "<title>tracer · compare “&lt;/script&gt;&lt;b&gt;x A” and “&lt;/script&gt;&lt;b&gt;x B”</title>" in html
    assert data_of(html)["prompts"] == ["</script><b>x A", "</script><b>x B"]
