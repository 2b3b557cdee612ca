"""The classroom page (`--export FILE.html`, `tracer.render.page`) as a file: self-contained, its data
the recorded numbers, everything from the trace escaped, small enough, and written by `trace`,
`show` and `replay`. What the page does in a browser is tests/test_page_browser.py."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

from tracer.cli import app
from tracer.core.config import Config
from tracer.render.page import page, page_data
from tracer.replay import replay
from tracer.tokenizers.tokens import show_token

README_PROMPT = ("You are a business consultant, please analyze the impact of rising oil prices on the automotive "
                 "industry.")


def data_of(html: str) -> dict:
    """The JSON the page carries (json.loads reads the \\u003c escapes back)."""
    m = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', html, re.S)
    assert m, "no data block"
    return json.loads(m.group(1))


def assert_self_contained(html: str) -> None:
    """Nothing to fetch in the markup, the styles or the script (the data block is text: see the escaping test)."""
    assert html.startswith("<!DOCTYPE html>")
    low = re.sub(r'(<script type="application/json" id="trace-data">).*?(</script>)', r"\1\2", html, flags=re.S).lower()
    for fetch in ("http://", "https://", "<link", " src=", "@import", "url(", "//cdn", "@font-face"):
        assert fetch not in low, fetch
    assert low.count("<script") == 2 and low.count("</script") == 2  # the data and the script, nothing else


@pytest.fixture(scope="module")
def article():
    done = replay("article")
    return done, page(done.gen, done.model.tokenizer, checks=done.checks, title=done.scenario.title, token=1)


def test_the_article_page_is_one_self_contained_file(article):
    done, html = article
    assert_self_contained(html)
    assert len(html.encode()) < 400_000
    d = data_of(html)
    assert d["format"] == "tracer-page" and d["version"] == 1
    assert [t["text"] for t in d["tokens"]] == ["A", "B", "C", "D", "E", "F", "G", "H", "<end>"]
    assert d["n_prompt"] == 6 and d["carried"] == list(range(8)) and d["start"]["token"] == 1
    assert d["left_out"] == []  # a small run: everything is in the page


def test_the_article_page_carries_the_recorded_numbers(article):
    done, html = article
    d, gen = data_of(html), done.gen
    attn = gen.steps[0]["blocks.0.attn.hook_pattern"]  # [head, query_pos, key_pos]
    w = d["layers"][0]["att"]["w"][0][1]  # head 0, B's row
    np.testing.assert_allclose(w, attn[0, 1, :2], rtol=1e-6)  # 6 significant digits
    q = d["layers"][0]["q"]["rows"][1][0]  # B's query, head 0
    np.testing.assert_allclose(q, [0.7, 0.1, 0.3, -0.4, 0.2], atol=1e-12)
    h_pass = gen.steps[2]  # the pass that read H computed position 7 only
    z = d["layers"][23]["z"]["rows"][7][0]
    np.testing.assert_allclose(z, h_pass["blocks.23.attn.hook_z"][-1, 0], rtol=1e-5)
    for k, p in enumerate(d["passes"]):
        st = gen.steps[k]
        assert (p["start"], p["n"], p["chosen"]) == (st.start, len(st.tokens), int(st["sample.token"]))
        raw = np.frombuffer(base64.b64decode(p["logits"]["b64"]), dtype="<f8")
        assert np.array_equal(raw, st["logits"][-1])  # the very bits the sampler read


def test_the_article_page_places_every_check(article):
    done, html = article
    checks = data_of(html)["checks"]
    assert len(checks) == 22 and sum(c["ok"] for c in checks) == 17
    by_label = {c["text"].split(":")[0]: c for c in checks}
    qk = next(c for c in checks if '"Q·A_K = 0.6"' in c["text"])
    assert (qk["section"], qk["pos"], qk["head"], qk["layer"], qk["ok"]) == ("scores", 1, 0, 0, False)
    assert "computed 0.670, difference 0.070" in qk["text"]  # the terminal's words
    assert {c["section"] for c in checks} == {"tokens", "embed", "qkv", "scores", "sum", "loop"}
    assert by_label


def test_text_from_the_trace_cannot_become_markup(make_model):
    vocab = ["</script><script>alert(1)</script>", "<!--", "\u202eevil", "a&b", "x\x1b[2Jy", "]]>", "<end>"]
    cfg = Config(d_vocab=len(vocab), n_ctx=16, d_model=4, n_heads=2, n_layers=1, dtype="float64")
    m = make_model(cfg, vocab, name="</title><img src=x onerror=alert(2)>", end="<end>")
    gen = m.generate(vocab[:6], max_new_tokens=2)
    html = page(gen, m.tokenizer, title="<script>alert(3)</script>")
    assert_self_contained(html)
    assert "alert(1)" not in html.split('id="trace-data">')[0]  # nothing of the data before its block
    body = html.split('id="trace-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in body and ">" not in body and "&" not in body and body.isascii()
    assert "\u202e" not in html and "\x1b" not in html
    assert "<title>tracer · &lt;script&gt;alert(3)&lt;/script&gt;</title>" in html
    d = data_of(html)
    assert [t["text"] for t in d["tokens"][:6]] == [show_token(v) for v in vocab[:6]]
    assert d["tokens"][2]["text"] == "⟨U+202E⟩evil" and d["model"]["name"] == "</title><img src=x onerror=alert(2)>"


def test_the_script_sets_text_never_markup():
    from tracer.render.page.html import SCRIPTS, asset

    for name in SCRIPTS:
        js = asset(name)
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in js, f"{name} uses {sink}"
        assert "fetch(" not in js and "XMLHttpRequest" not in js and "import(" not in js


def test_the_readme_prompt_page_stays_small(runner, tmp_path):
    out = tmp_path / "page.html"
    r = runner.invoke(app, ["trace", README_PROMPT, "--export", str(out)], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.stderr
    html = out.read_text(encoding="utf-8")
    assert_self_contained(html)
    assert len(html.encode()) < 4_000_000  # a few MB at most
    d = data_of(html)
    assert d["carried"] == list(range(d["n_rows"])) and not any("positions" in s for s in d["left_out"])


def test_a_page_too_large_carries_the_followed_token_and_the_last_ones(word_model):
    m = word_model(n_layers=2)
    gen = m.generate([f"w{i}" for i in range(12)], max_new_tokens=2)
    full = page_data(gen, m.tokenizer, token=2)
    small = page_data(gen, m.tokenizer, token=2, budget=4_000, logits_budget=10)
    assert full["carried"] == list(range(13)) and not any("position" in s or "logits" in s for s in full["left_out"])
    assert 2 in small["carried"] and small["carried"][-1] == 12 and len(small["carried"]) < 13
    assert any("position" in s for s in small["left_out"]) and any("logits of passes" in s for s in small["left_out"])
    assert small["passes"][0]["logits"] is not None and small["passes"][1]["logits"] is None
    att = small["layers"][0]["att"]
    i = small["carried"].index(12)
    keys, weights = att["keys"][0][i], att["w"][0][i]
    recorded = gen.steps[1]["blocks.0.attn.hook_pattern"][0, -1]  # the second pass read position 12
    np.testing.assert_allclose(weights, recorded[keys], rtol=1e-5)
    assert att["rest"][0][i] == pytest.approx(1 - recorded[keys].sum(), abs=1e-5)


def test_long_vectors_are_carried_as_their_ends_and_norm(word_model):
    m = word_model(d_model=40, n_heads=2, d_mlp=160)
    gen = m.generate(["w1", "w2", "w3"], max_new_tokens=1)
    d = page_data(gen, m.tokenizer)
    pre = d["layers"][0]["pre"]
    assert pre["dims"] == 160 and not pre["whole"] and len(pre["rows"][0]) == 16
    row = gen.steps[0]["blocks.0.mlp.hook_pre"][0]
    np.testing.assert_allclose(pre["rows"][0], np.r_[row[:8], row[-8:]], rtol=1e-5)
    assert pre["norm"][0] == pytest.approx(np.linalg.norm(row), rel=1e-5)
    assert d["layers"][0]["x"]["whole"]  # 40 numbers are carried whole


def test_a_float32_model_carries_float32_logits(small_config, make_model):
    cfg = small_config()
    m = make_model(cfg, [f"t{i}" for i in range(cfg.d_vocab)], name="small")
    gen = m.generate(["t1", "t2"], max_new_tokens=1)
    p = page_data(gen, m.tokenizer)["passes"][0]["logits"]
    assert p["dtype"] == "float32"
    assert np.array_equal(np.frombuffer(base64.b64decode(p["b64"]), dtype="<f4"), gen.steps[0]["logits"][-1])


def test_trace_show_and_replay_write_the_page(runner, tmp_path):
    npz, one, two, three, rich = (tmp_path / n for n in ("t.npz", "t.html", "s.html", "r.html", "t.terminal.html"))
    r = runner.invoke(app, ["trace", "A B C D E F", "--save", str(npz), "--export", str(one), "--token", "B",
                            "--layer", "3", "--head", "1", "--model", "tiny"], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.stderr
    assert "Layer 3 (layer 3 of 24), token by token" in r.stdout  # the terminal still shows the walkthrough
    d = data_of(one.read_text(encoding="utf-8"))
    assert d["start"] == {"token": 1, "layer": 3, "head": 1}
    r = runner.invoke(app, ["show", str(npz), "--export", str(two)], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.stderr
    shown = data_of(two.read_text(encoding="utf-8"))
    assert shown["tokens"] == d["tokens"] and shown["passes"] == d["passes"] and shown["layers"] == d["layers"]
    r = runner.invoke(app, ["replay", "article", "--export", str(three)], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.stderr
    html = three.read_text(encoding="utf-8")
    assert "<title>tracer · The seed article" in html and len(data_of(html)["checks"]) == 22
    r = runner.invoke(app, ["trace", "A B C D E F", "--export", str(rich)], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.stderr
    text = rich.read_text(encoding="utf-8")
    assert "queries the embedding matrix" in text and "<script" not in text  # Rich's record, as before


# --------------------------------------------------------------------------- a mixture of experts, attention sinks

DATA = __import__("pathlib").Path(__file__).parent / "data"


def test_a_routed_models_page_carries_each_tokens_routing_and_each_heads_sink():
    """gpt-oss-tiny: per layer and token, the experts and weights the trace recorded; the router's highest
    scores, in order (argsort of the recorded scores, here); the weighted sum of the chosen experts' outputs,
    which is the MLP's output (no shared expert: checked against the recorded mlp_out); each head's sink share
    as recorded and its logit, worked back from a row, equal to the checkpoint's `self_attn.sinks`."""
    import tracer
    from safetensors.numpy import load_file

    m = tracer.load(str(DATA / "gpt-oss-tiny"))
    gen = m.generate("The quick brown fox", max_new_tokens=2)
    d = json.loads(json.dumps(page_data(gen, m.tokenizer)))  # as the page reads it
    cfg, k = m.config, m.config.experts_per_token
    sinks = load_file(str(DATA / "gpt-oss-tiny" / "model.safetensors"))
    for l, Y in enumerate(d["layers"]):
        M = Y["moe"]
        assert (M["E"], M["k"]) == (cfg.n_experts, k) and M["removed"] == [] and M["rerouted"] == {}
        assert M["block"] == cfg.mlp_kind.block_words(cfg) and "parameters active per token" in M["block"]
        for i, t in enumerate(d["carried"]):
            st = gen.steps[0] if t < d["n_prompt"] else gen.steps[t - d["n_prompt"] + 1]
            row = t - st.start
            b = f"blocks.{l}.mlp."
            assert M["chosen"][i] == st[b + "hook_expert_indices"][row].tolist()
            np.testing.assert_allclose(M["weights"][i], st[b + "hook_expert_weights"][row], rtol=1e-5)
            logits = st[b + "hook_router_logits"][row]
            assert [e for e, _ in M["top"][i]] == np.argsort(-logits, kind="stable")[: k + 4].tolist()
            np.testing.assert_allclose(M["mixed"]["rows"][i], st[f"blocks.{l}.hook_mlp_out"][row], rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(M["out"]["rows"][i], st[b + "hook_expert_out"][row], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose([s[i] for s in Y["sink"]["share"]], st[f"blocks.{l}.attn.hook_sink_share"][:, row],
                                       rtol=1e-5)
        np.testing.assert_allclose(Y["sink"]["logit"], sinks[f"model.layers.{l}.self_attn.sinks"], atol=1e-4)
    assert all(lw["mlp"] == [] and lw["among_experts"] is False for lw in d["layer_words"])


def test_a_dense_layer_among_experts_and_the_shared_expert(runner, tmp_path):
    """qwen2-moe-tiny: layer 1 is a dense MLP of its own width (no routing; its gate, up and post carried at
    that width); in the routed layers the experts' sum plus the shared expert's gated part is the MLP's
    output; with --ablate 0:expert:E the page names E removed and the tokens that had chosen it (the clean
    run's choices, here), with their experts before and after."""
    import tracer

    m = tracer.load(str(DATA / "qwen2-moe-tiny"))
    cfg = m.config
    prompt = "the cat sat on the mat"
    clean = m.run(m.tokenize(prompt))
    e = int(np.bincount(clean["blocks.0.mlp.hook_expert_indices"].reshape(-1)).argmax())  # the busiest expert
    out = tmp_path / "q.html"
    r = runner.invoke(app, ["trace", prompt, "-n", "1", "--model", str(DATA / "qwen2-moe-tiny"), "--ablate",
                            f"0:expert:{e}", "--export", str(out)], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.stderr
    d = data_of(out.read_text(encoding="utf-8"))
    dense = d["layers"][1]
    assert dense["moe"] is None and d["layer_words"][1]["among_experts"] is True
    assert d["layer_words"][1]["width"] == cfg.dense_d_mlp and dense["pre"]["dims"] == cfg.dense_d_mlp
    assert [key for key, _, _ in d["layer_words"][1]["mlp"]] == ["pre", "up", "post"]
    M = d["layers"][0]["moe"]
    assert M["removed"] == [e] and M["shared_width"] == cfg.shared_d_mlp
    chose = [p for p in range(len(clean["blocks.0.mlp.hook_expert_indices"]))
             if e in clean["blocks.0.mlp.hook_expert_indices"][p]]
    assert sorted(int(p) for p in M["rerouted"]) == chose and chose
    for p in chose:
        before = M["rerouted"][str(p)]["before"]
        assert [x for x, _ in before] == clean["blocks.0.mlp.hook_expert_indices"][p].tolist()
        assert e not in [x for x, _ in M["rerouted"][str(p)]["after"]] and e not in M["chosen"][p]
    for i in range(len(d["carried"])):
        np.testing.assert_allclose(np.add(M["mixed"]["rows"][i], M["shared"]["rows"][i]),
                                   d["layers"][0]["mlp_out"]["rows"][i], rtol=1e-4, atol=1e-5)
