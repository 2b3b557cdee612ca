"""Qwen3.5's hybrid (tests/data/qwen3-5-tiny: linear attention on layers 0 and 2, gated softmax attention on
layers 1 and 3) shown: the walkthrough works a linear layer's state update token by token, and every number
it prints equals the recorded arrays (parsed back with tolerances, never compared as text), the state
recalled and written is the delta rule on the recorded numbers, the bytes it says a layer keeps are the
cache's real `nbytes` (`tracer.core.decoder.KVCache`), the gated layers show their output gate, and every
section and option of `tracer trace` (and `tracer show`, `tracer demo`, the page) works on the hybrid at 80
and 100 columns, or refuses in one line."""

from __future__ import annotations

import io
import itertools
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

import tracer
from tracer.cli import app
from tracer.core.decoder import KVCache
from tracer.render import resolved_for, show_generation
from tracer.render.view import View

DATA = Path(__file__).parent / "data"
MODEL = str(DATA / "qwen3-5-tiny")
PROMPT = "The quick brown fox"
NUMBER = r"-?\d+\.\d+(?:e[-+]?\d+)?"
SHOWN = 6e-4  # a number printed with 3 decimals is within half a unit of its last decimal (and float32's rounding)
UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}


@pytest.fixture(scope="module")
def run():
    m = tracer.load(MODEL)
    return m, m.generate(m.prompt(PROMPT), max_new_tokens=2)


def shown(gen, tok, width: int = 100, **view) -> str:
    out = Console(file=io.StringIO(), width=width, color_system=None, record=True)
    show_generation(gen, tok, View(max_lines=0, **view), console=out)
    text = out.export_text()
    assert all(len(line) <= width for line in text.splitlines())
    return text


def vector(text: str, name: str) -> np.ndarray:
    """The numbers of `name = [ … ]` as printed (a short vector whole)."""
    m = re.search(re.escape(name) + r" = \[([^\]]*)\]", text)
    assert m, f"{name} = […] is not shown"
    return np.array([float(x) for x in re.findall(NUMBER, m.group(1))])


def matrix_after(text: str, words: str) -> np.ndarray:
    """The state table printed under the line that contains `words`: its k0, k1, … rows."""
    lines = text[text.index(words):].splitlines()[1:]
    rows = []
    for line in lines[1:]:  # the header (v0 v1 …) first
        m = re.match(r"\s+k\d+\s+(.*)", line)
        if not m:
            break
        rows.append([float(x) for x in re.findall(NUMBER, m.group(1))])
    return np.array(rows)


def number_after(text: str, words: str) -> float:
    """The number printed right after `words` (wherever the line wrapped)."""
    text = " ".join(text.split())
    m = re.search(re.escape(words) + r"\s*(" + NUMBER + ")", text)
    assert m, f"{words!r} is not followed by a number"
    return float(m.group(1))


def nbytes(text: str, words: str) -> float:
    """A size as `fmt.size` prints it ("1.79 KB"), right before `words` (wherever the line wrapped)."""
    text = " ".join(text.split())
    m = re.search(r"(\d+(?:\.\d+)?) (B|KB|MB|GB)" + re.escape(words), text)
    assert m, f"no size before {words!r}"
    return float(m.group(1)) * UNITS[m.group(2)]


def worked(text: str) -> dict:
    """The state's number worked by hand: "row k5, column v6 (…): 0.923 × 0.080 + 0.464 × 0.264 × 2.019 = 0.321"."""
    flat = " ".join(text.split())
    m = re.search(r"row k(\d+), column v(\d+) \([^)]*\): (" + NUMBER + r") × (" + NUMBER + r") \+ (" + NUMBER + r") × ("
                  + NUMBER + r") × (" + NUMBER + r") = (" + NUMBER + ")", flat)
    assert m, "no number of the state worked by hand"
    return {"i": int(m.group(1)), "j": int(m.group(2)),
            **{key: float(m.group(n)) for n, key in enumerate(("keep", "s", "k", "beta", "e", "after"), start=3)}}


def close_to_size(said: float, exact: int):
    """`fmt.size` keeps three significant digits."""
    assert abs(said - exact) <= 0.005 * exact + 0.5, (said, exact)


# --------------------------------------------------------------------------- a linear layer, token by token


@pytest.mark.parametrize("t, h", [(3, 0), (3, 3), (0, 1), (14, 1)])  # D; A (a zero state); O, a cached pass's token
def test_each_step_of_a_linear_layer_shows_the_recorded_numbers(run, t, h):
    m, gen = run
    L = "ABCDEFGHIJKLMNOP"[t]
    text = shown(gen, m.tokenizer, token=str(t), layer="0", head=str(h), brief=False, sections=("attention",))
    k_pass = 0 if t < 14 else 1
    st = gen.steps[k_pass]
    row = t - st.start
    a = "blocks.0.attn."
    q, k, v = st[a + "hook_q"][row], st[a + "hook_k"][row], st[a + "hook_v"][row]
    g_head = h // (v.shape[0] // k.shape[0])  # value heads 0–1 read key head 0, 2–3 key head 1
    np.testing.assert_allclose(vector(text, f"{L}_q[{g_head}]"), q[g_head], atol=SHOWN)
    np.testing.assert_allclose(vector(text, f"{L}_k[{g_head}]"), k[g_head], atol=SHOWN)
    np.testing.assert_allclose(vector(text, f"{L}_v[{h}]"), v[h], atol=SHOWN)
    np.testing.assert_allclose(np.linalg.norm(q[g_head]), 1.0, atol=1e-5)  # L2-normalized, as the words say
    beta, g = float(st[a + "hook_beta"][row, h]), float(st[a + "hook_decay"][row, h])
    assert number_after(text, f"W_β[{h}]) =") == pytest.approx(beta, abs=SHOWN)
    assert number_after(text, "exp(g) =") == pytest.approx(np.exp(g), abs=SHOWN)
    # S before the token: zeros for A, else the state the previous position recorded (for O: the cache's)
    before = np.zeros(st[a + "hook_state"].shape[-2:]) if t == 0 else gen.steps[0][a + "hook_state"][t - 1, h]
    if t == 0:
        assert f"S before {L}: zeros" in text
    else:
        np.testing.assert_allclose(matrix_after(text, f"S before {L}"), before, atol=SHOWN)
        assert ("from the cache: pass 0" in text) == (k_pass == 1)
    # the delta rule on these numbers, written out here: decay, recall, error, write
    S = np.exp(g) * before.astype(np.float64)
    recalled = S.T @ k[g_head]
    error = v[h] - recalled
    np.testing.assert_allclose(vector(text, "Sᵀk"), recalled, atol=SHOWN)
    np.testing.assert_allclose(vector(text, "v − Sᵀk"), error, atol=SHOWN)
    after = S + np.outer(k[g_head], beta * error)
    np.testing.assert_allclose(st[a + "hook_state"][row, h], after, atol=1e-5)  # the recorded state is that write
    np.testing.assert_allclose(matrix_after(text, f"the state after {L}"), st[a + "hook_state"][row, h], atol=SHOWN)
    cell = worked(text)  # one number of the state by hand: the largest write, its sum equal to the recorded state
    write = np.outer(k[g_head], beta * error)
    i, j = np.unravel_index(np.argmax(np.abs(write)), write.shape)
    assert (cell["i"], cell["j"]) == (i, j)
    np.testing.assert_allclose([cell["keep"], cell["s"], cell["k"], cell["beta"], cell["e"], cell["after"]],
                               [np.exp(g), before[i, j], k[g_head][i], beta, error[j], st[a + "hook_state"][row, h, i, j]],
                               atol=SHOWN)
    assert cell["keep"] * cell["s"] + cell["k"] * cell["beta"] * cell["e"] == pytest.approx(cell["after"], abs=4 * SHOWN)
    o = st[a + "hook_z"][row, h]
    np.testing.assert_allclose(o, after.T @ q[g_head] / np.sqrt(len(q[g_head])), atol=1e-5)  # read: Sᵀq / √d_k
    np.testing.assert_allclose(vector(text, f"o_{L}"), o, atol=SHOWN)
    np.testing.assert_allclose(vector(text, "gate"), st[a + "hook_gate_z"][row, h], atol=SHOWN)
    np.testing.assert_allclose(vector(text, f"o_{L} gated"), st[a + "hook_z_gated"][row, h], atol=SHOWN)
    rms = np.sqrt(np.mean(o.astype(np.float64) ** 2))
    assert number_after(text, "its root mean square (") == pytest.approx(rms, abs=SHOWN)
    # the convolution: this token's projection and the K − 1 before it (zeros before A), then SiLU
    conv = gen.steps[0].config.linear_conv
    pre = re.findall(r"c_([A-P])(?: \(cache \d+\))? = \[", text[text.index("short causal convolution"):text.index(f"conv_{L} =")])
    assert pre == ["ABCDEFGHIJKLMNOP"[j] for j in range(max(0, t - conv + 1), t + 1)]
    assert ("× zeros (before A)" in text) == (t < conv - 1)
    conv_row = st[a + "hook_qkv_conv"][row]
    shown_conv = vector(text, f"conv_{L}")
    np.testing.assert_allclose(shown_conv[:4], conv_row[:4], atol=SHOWN)
    np.testing.assert_allclose(shown_conv[-4:], conv_row[-4:], atol=SHOWN)  # the first 4 … the last 4
    assert number_after(text[text.index(f"conv_{L} ="):], "‖·‖") == pytest.approx(np.linalg.norm(conv_row), abs=SHOWN)


def test_brief_shows_one_head_whole_and_the_others_in_a_line(run):
    m, gen = run
    text = shown(gen, m.tokenizer, token="D", layer="0", sections=("attention",))
    st = gen.steps[0]
    assert text.count("S before D") == 1 and "(the first 4 × 4 of 8 × 8; --full shows more)" in text
    np.testing.assert_allclose(matrix_after(text, "the state after D"), st["blocks.0.attn.hook_state"][3, 0, :4, :4],
                               atol=SHOWN)
    for h in (1, 2, 3):
        line = text[text.index(f"head {h}: β"):]
        assert float(re.search(NUMBER, line).group()) == pytest.approx(st["blocks.0.attn.hook_beta"][3, h], abs=SHOWN)
        np.testing.assert_allclose(vector(line, "o_D gated"), st["blocks.0.attn.hook_z_gated"][3, h], atol=SHOWN)
    np.testing.assert_allclose(vector(text, "z_D gated")[:4], st["blocks.0.attn.hook_z_gated"][3].reshape(-1)[:4], atol=SHOWN)
    assert "× W_O (32 × 64), back to 64 dims" in text and "b_O" not in text  # the linear layer's W_O has no bias


def test_the_bytes_said_are_the_caches_real_nbytes(run):
    m, gen = run
    cfg = gen.steps[0].config
    n = len(gen.steps[0].tokens)
    for length in (1, 2, n, 6000):  # each kind's own count, for every layer and length
        cache = KVCache(cfg, length)
        for l in range(cfg.n_layers):
            assert cfg.attention_of(l).cache_bytes(cfg, length) == cache.layers[l].nbytes
    assert KVCache(cfg, 6).layers[0].nbytes == KVCache(cfg, 6000).layers[0].nbytes  # a state: the same size
    text = shown(gen, m.tokenizer, token="D", layer="0", sections=("attention",))
    close_to_size(nbytes(text, " in all (float32)"), KVCache(cfg, n).layers[0].nbytes)
    grows = KVCache(cfg, 2).layers[1].nbytes - KVCache(cfg, 1).layers[1].nbytes
    close_to_size(nbytes(text, " more per token in its KV cache"), grows)
    close_to_size(nbytes(text, f" after these {n} tokens"), KVCache(cfg, n).layers[1].nbytes)
    close_to_size(nbytes(text, f" at {cfg.n_ctx}."), KVCache(cfg, cfg.n_ctx).layers[1].nbytes)
    assert "no keys and values and no attention weights over earlier tokens" in " ".join(text.split())
    # the loop's table: what each kind of layer keeps after the run's positions, and the whole cache
    loop = shown(gen, m.tokenizer, sections=("loop",))
    held = len(gen.steps[-1].tokens)
    cache = KVCache(cfg, held)
    table = loop[loop.index("What each layer keeps"):]
    for l, words in ((0, "layers 0 and 2"), (1, "layers 1 and 3")):
        row = table[table.index(words):].splitlines()[0]
        sizes = re.findall(r"(\d+(?:\.\d+)?) (B|KB|MB)", row)[-2:]  # after the run's positions, at n_ctx
        close_to_size(float(sizes[0][0]) * UNITS[sizes[0][1]], cache.layers[l].nbytes)
        close_to_size(float(sizes[1][0]) * UNITS[sizes[1][1]], KVCache(cfg, cfg.n_ctx).layers[l].nbytes)
    total = re.findall(r"(\d+(?:\.\d+)?) (B|KB|MB)", table[table.index("all 4 layers"):].splitlines()[0])
    close_to_size(float(total[0][0]) * UNITS[total[0][1]], cache.nbytes)
    flat = " ".join(loop.split())
    assert "layers 0 and 2 (linear attention) keep no rows" in flat
    assert "2 × 2 layers × 2 key/value heads × 32 dims = 256 numbers" in flat  # the softmax layers' rows only
    assert "no such recurrence and hidden-states" in flat


def test_the_gated_softmax_layer_shows_its_output_gate(run):
    m, gen = run
    text = shown(gen, m.tokenizer, token="D", layer="1", head="2", sections=("attention",))
    st = gen.steps[0]
    gate = 1 / (1 + np.exp(-st["blocks.1.attn.hook_gate"][3, 2].astype(np.float64)))
    shown_gate = vector(text, "sigmoid(gate)")
    np.testing.assert_allclose(shown_gate[:4], gate[:4], atol=SHOWN)
    gated = st["blocks.1.attn.hook_z_gated"][3, 2]
    np.testing.assert_allclose(gated, st["blocks.1.attn.hook_z"][3, 2] * gate, atol=1e-5)  # z × sigmoid(gate)
    np.testing.assert_allclose(vector(text, "D_z gated")[:4], gated[:4], atol=SHOWN)
    assert "attention scores: D_Q · each visible key" in text  # the softmax layer's own steps are all there


def test_the_header_overview_and_heatmaps_say_the_kinds(run):
    m, gen = run
    text = shown(gen, m.tokenizer, sections=("layers", "heatmap"), layer="all", width=80)
    flat = " ".join(text.split())
    assert ("4 layers: 2 linear attention (Gated DeltaNet: a state instead of a KV cache) on layers 0 and 2, 2 softmax "
            "attention with an output gate on layers 1 and 3") in flat
    st, last = gen.steps[0], len(gen.steps[0].tokens) - 1
    row0 = next(line for line in text.splitlines() if re.match(r"│\s+0 │", line))
    keep, beta = np.exp(st["blocks.0.attn.hook_decay"][last, 0]), st["blocks.0.attn.hook_beta"][last, 0]
    cell = re.search(r"×(\d?\.\d\d) β(\d?\.\d\d)", row0)
    assert float(cell.group(1)) == pytest.approx(keep, abs=0.006) and float(cell.group(2)) == pytest.approx(beta, abs=0.006)
    assert "Layer 0 is linear attention: no attention weights to draw" in flat
    assert "layer 1, head 0" in text and "layer 3, head 0" in text  # the softmax layers' maps


# --------------------------------------------------------------------------- every section and option

OPTIONS = [[], ["--full"], ["--layer", "all"], ["--layer", "all", "--full"], ["--layer", "2", "--head", "1"],
           ["--layer", "0", "--head", "3", "--token", "C"], ["--token", "O", "--layer", "2"], ["--no-cache"],
           ["--verify-cache"], ["--attribute"], ["--json"], ["--ablate", "0:1"], ["--ablate", "0:*"],
           ["--ablate", "0:1:mean"], ["--ablate", "1:1"], ["--ablate", "0:mlp"],
           *[["--section", s] for s in ("tokens", "embed", "attention", "layers", "predict", "positions", "heatmap",
                                        "loop", "lens")], ["--section", "heatmap", "--layer", "all"]]


@pytest.mark.slow
@pytest.mark.parametrize("columns", ["80", "100"])
def test_every_section_and_option_works_on_the_hybrid(runner, tmp_path, columns):
    env = {"COLUMNS": columns, "NO_COLOR": "1"}
    for options in OPTIONS:
        r = runner.invoke(app, ["trace", PROMPT, "--model", MODEL, "--no-pager", *options], env=env)
        assert r.exit_code == 0, (options, r.output[-400:])
        if "--json" not in options:
            assert all(len(line) <= int(columns) for line in r.stdout.splitlines()), options
    saved = tmp_path / "hybrid.npz"
    r = runner.invoke(app, ["trace", PROMPT, "--model", MODEL, "--no-pager", "--save", str(saved), "--export",
                            str(tmp_path / "page.html")], env=env)
    assert r.exit_code == 0, r.output
    for options in ([], ["--layer", "all"], ["--section", "loop"]):
        r = runner.invoke(app, ["show", str(saved), "--no-pager", *options], env=env)
        assert r.exit_code == 0, (options, r.output[-400:])
        assert "linear attention" in r.stdout
    r = runner.invoke(app, ["demo", "--model", MODEL, "--prompt", PROMPT], env=env)
    assert r.exit_code == 0, r.output[-400:]
    assert "A state instead of scores" in r.stdout and "Layer 0 works differently" in " ".join(r.stdout.split())
    r = runner.invoke(app, ["demo", "--model", MODEL, "--prompt", PROMPT, "--export", str(tmp_path / "deck.html")], env=env)
    assert r.exit_code == 0, r.output[-400:]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gemma4-tiny", "gpt-oss-tiny"])
def test_every_section_and_option_works_beside_the_hybrid(runner, model):
    """The hybrid's views share their code with Gemma 4's per-layer sizes and shared keys and values and with
    gpt-oss's sinks and experts: those models' every section and option still fits 80 and 100 columns."""
    last = str(tracer.load(str(DATA / model)).config.n_layers - 1)
    for columns, options in itertools.product(["80", "100"], [[*(last if o == "2" else o for o in opts)] for opts in OPTIONS]):
        r = runner.invoke(app, ["trace", PROMPT, "--model", str(DATA / model), "--no-pager", *options],
                          env={"COLUMNS": columns, "NO_COLOR": "1"})
        assert r.exit_code == 0, (columns, options, r.output[-400:])
        if "--json" not in options:
            assert all(len(line) <= int(columns) for line in r.stdout.splitlines()), (columns, options)


def test_a_head_the_layer_lacks_is_refused_in_one_line(runner):
    r = runner.invoke(app, ["trace", PROMPT, "--model", MODEL, "--ablate", "0:4"], env={"COLUMNS": "100"})
    assert r.exit_code == 2 and r.stderr.strip().count("\n") == 0 and "layer 0 has heads 0–3" in r.stderr


def test_ablating_a_linear_head_zeroes_its_read_out_before_w_o(run):
    m, gen = run
    from tracer.run.ablation import Ablation

    ids = list(gen.steps[0].tokens)
    t = m.run(ids, hooks=Ablation.parse("0:1").hooks(m.config))
    assert not t["blocks.0.attn.hook_z"][:, 1].any() and not t["blocks.0.attn.hook_z_gated"][:, 1].any()
    W_O = m.params["blocks.0.attn.W_O"]  # [v_head, d_v, d_model]
    np.testing.assert_allclose(t["blocks.0.hook_attn_out"], np.einsum("phd,hdm->pm", t["blocks.0.attn.hook_z_gated"], W_O),
                               atol=1e-4)
    clean = m.run(ids)
    np.testing.assert_allclose(t["blocks.0.attn.hook_state"], clean["blocks.0.attn.hook_state"], atol=1e-6)  # S unchanged


# --------------------------------------------------------------------------- the line estimate, the page, the demo


@pytest.mark.slow
def test_the_line_estimate_is_within_ten_percent_on_the_hybrid(run):
    m, gen = run
    off = []
    grid = [*itertools.product(["attention", "layers", "heatmap", "loop"], ["0", "all"], [True, False]), (None, "0", True)]
    for section, layer, brief in grid:
        view = View(layer=layer, brief=brief, sections=(section,) if section else (), max_lines=0)
        out = Console(file=io.StringIO(), width=100, color_system=None)
        show_generation(gen, m.tokenizer, view, console=out)
        lines, guess = out.file.getvalue().count("\n"), resolved_for(gen, view, 100).estimated_lines()
        if abs(guess - lines) > 0.1 * lines:
            off.append(f"{section} --layer {layer} brief={brief}: printed {lines}, estimated {guess}")
    assert not off, "\n".join(off)


def test_the_page_carries_the_linear_layers_state_not_heads(run):
    m, gen = run
    from tracer.render.page import page_data

    d = page_data(gen, m.tokenizer)
    st = gen.steps[0]
    lin, soft = d["layers"][0], d["layers"][1]
    assert soft["state"] is None and soft["q"] is not None and soft["att"] is not None
    assert lin["q"] is None and lin["att"] is None and lin["state"]["heads"] == 4 and lin["state"]["d_k"] == 8
    i = d["carried"].index(3)
    np.testing.assert_allclose(lin["state"]["beta"][i], st["blocks.0.attn.hook_beta"][3], rtol=1e-5)
    np.testing.assert_allclose(lin["state"]["keep"][i], np.exp(st["blocks.0.attn.hook_decay"][3]), rtol=1e-5)
    np.testing.assert_allclose(lin["state"]["o"]["rows"][i], st["blocks.0.attn.hook_z_gated"][3], rtol=1e-4, atol=1e-6)
    assert "1.79 KB in all" in lin["state"]["keeps"]
    assert lin["z_out"] is None  # the gated softmax layer's heads reach W_O through their gate
    # each head's update, as the terminal works it: recorded q, k, v, the state before and after, the delta rule
    u, a = lin["state"]["update"], "blocks.0.attn."
    for t in (0, 3):
        i = d["carried"].index(t)
        for h in range(4):
            g_head = h // 2
            k, v = st[a + "hook_k"][t, g_head], st[a + "hook_v"][t, h]
            beta, g = float(st[a + "hook_beta"][t, h]), float(st[a + "hook_decay"][t, h])
            before = np.zeros((8, 8)) if t == 0 else st[a + "hook_state"][t - 1, h].astype(np.float64)
            recalled = (np.exp(g) * before).T @ k  # the naive recall, written here
            np.testing.assert_allclose(u["k"]["rows"][i][h], k, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(u["q"]["rows"][i][h], st[a + "hook_q"][t, g_head], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(u["v"]["rows"][i][h], v, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(u["recall"]["rows"][i][h], recalled, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(u["error"]["rows"][i][h], v - recalled, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(u["o"]["rows"][i][h], st[a + "hook_z"][t, h], rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(u["after"][i][h], st[a + "hook_state"][t, h, :4, :4], rtol=1e-5, atol=1e-7)
            assert u["g"][i][h] == pytest.approx(g, rel=1e-5)
            assert (u["before"][i][h] is None) == (t == 0)
            if t:
                np.testing.assert_allclose(u["before"][i][h], before[:4, :4], rtol=1e-5, atol=1e-7)
            cell = worked(u["cell"][i][h])
            assert cell["after"] == pytest.approx(float(st[a + "hook_state"][t, h, cell["i"], cell["j"]]), abs=SHOWN)
            assert cell["keep"] * cell["s"] + cell["k"] * cell["beta"] * cell["e"] == pytest.approx(cell["after"], abs=4 * SHOWN)
    # the loop step's table of what each kind keeps: the cache's real bytes
    kinds = d["cache_kinds"]
    n = len(gen.steps[-1].tokens)
    cache = KVCache(m.config, n)
    assert [r[0] for r in kinds["rows"]] == ["layers 0 and 2", "layers 1 and 3"]
    for r, layer in zip(kinds["rows"], (0, 1)):
        close_to_size(nbytes(r[2] + "|", "|"), cache.layers[layer].nbytes)
    np.testing.assert_allclose(soft["z_out"]["rows"][i][2][:8], st["blocks.1.attn.hook_z_gated"][3, 2][:8], rtol=1e-4, atol=1e-6)


def test_the_demo_shows_the_state_then_follows_the_first_softmax_layer(run, render_text):
    m, gen = run
    from tracer.render.demo import Demo, build_steps

    d = Demo(gen, m.tokenizer)
    assert d.layer == 1 and d.state_layer == 0
    steps = build_steps(d)
    names = [s.name for s in steps]
    assert names.index("A state instead of scores") == names.index("Query, Key and Value") - 1
    text = render_text(steps[names.index("A state instead of scores")].body)
    st = gen.steps[0]
    assert number_after(text, "β") == pytest.approx(st["blocks.0.attn.hook_beta"][1, 0], abs=SHOWN)
    assert number_after(text, "exp(g)") == pytest.approx(np.exp(st["blocks.0.attn.hook_decay"][1, 0]), abs=SHOWN)
    cell = worked(text)  # B's largest write, by hand: the recorded state after B
    assert cell["after"] == pytest.approx(float(st["blocks.0.attn.hook_state"][1, 0, cell["i"], cell["j"]]), abs=SHOWN)
    assert cell["s"] == pytest.approx(float(st["blocks.0.attn.hook_state"][0, 0, cell["i"], cell["j"]]), abs=SHOWN)
    cache = render_text(steps[names.index("The KV cache")].body)
    kv = KVCache(m.config, len(gen.steps[-1].tokens))
    close_to_size(nbytes(cache, " each after 15 tokens; layers 1"), kv.layers[0].nbytes)  # the state, whatever n is
    close_to_size(nbytes(cache, " each after 15 tokens."), kv.layers[1].nbytes)  # the keys and values of 15 positions
    assert "each of the 2 softmax layers" in " ".join(cache.split())
    heads = render_text(steps[names.index("Multi-head: concat and W_O")].body)
    assert "B, layer 1" in heads and "gated, concat 4×32" in heads
