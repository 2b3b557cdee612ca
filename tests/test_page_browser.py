"""The classroom page in a real browser, as a person uses it: Debian's headless Chromium driven by
selenium through /usr/bin/chromedriver (nothing downloaded; skipped where either is missing).

Pages of the default model (`tracer trace "A B C D E F"`) and of the article scenario (`tracer replay
article`) are opened from file:// with the network switched off: no script error, nothing fetched;
clicking tokens, layers, heads and passes changes what is shown; the temperature control gives the
probabilities Python's `tempered_softmax` gives; ← → move through the steps; no step scrolls
sideways at 1280×720; a head clicked shows the prediction without it, and the compare page shows --json's
patching numbers. `TRACER_PAGE_SCREENSHOTS=DIR` keeps the screenshots (docs/ holds some).
"""

from __future__ import annotations

import os
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.cli import app
from tracer.core.equations import tempered_softmax
from tracer.render.fmt import num
from tracer.run.trace import Generation

pytestmark = pytest.mark.slow

SIZE = (1280, 720)


@pytest.fixture(scope="module")
def browser(chromium):
    driver = chromium(SIZE)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions",  # offline: a page that fetched anything would break
                           {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def pages(tmp_path_factory, runner):
    """The default model's page (and its trace file) and the article's page."""
    out = tmp_path_factory.mktemp("pages")
    env = {"COLUMNS": "100", "NO_COLOR": "1"}
    r = runner.invoke(app, ["trace", "A B C D E F", "--save", str(out / "default.npz"), "--export", str(out / "default.html"),
                            "--model", "tiny"], env=env)
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, ["replay", "article", "--export", str(out / "article.html")], env=env)
    assert r.exit_code == 0, r.stderr
    return {"default": out / "default.html", "article": out / "article.html", "npz": out / "default.npz"}


def open_page(driver, path: Path, address: str = "", full_screen: bool = True):
    """Open a page at 1280×720: the whole screen (a projector in full screen), or a 1280×720 window."""
    if full_screen:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": SIZE[0], "height": SIZE[1], "deviceScaleFactor": 1, "mobile": False})
    else:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        driver.set_window_size(*SIZE)
    driver.get("about:blank")  # a new address with only a different #fragment would not load the page again
    driver.get(path.as_uri() + address)
    driver.get_log("browser")  # what an earlier page logged is not this one's
    assert driver.execute_script("return document.body.dataset.step") is not None, "the page did not draw"


def errors(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def step(driver) -> str:
    return driver.execute_script("return document.body.dataset.step")


def steps(driver) -> list[str]:
    return driver.execute_script("return STEPS.map(s => s[0])")


def key(driver, name: str, times: int = 1, target=None):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    element = target or driver.find_element(By.TAG_NAME, "body")
    for _ in range(times):
        element.send_keys(getattr(Keys, name))


def click(driver, selector: str):
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, selector).click()


def text(driver, selector: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector).text


def go(driver, name: str):
    click(driver, f'#path [data-goto="{name}"]')
    assert step(driver) == name


def sideways(driver) -> int:
    """How far the page scrolls sideways (0: it fits)."""
    return driver.execute_script("const e = document.documentElement; return e.scrollWidth - e.clientWidth")


GARBLED = ("[object ", "undefined", "NaN", "null", "function ")


def assert_reads_right(shown: str, where: str):
    """What a slide says is words and numbers, never a stringified script value."""
    for bad in GARBLED:
        assert bad not in shown, f"step {where} shows {bad!r}: {shown[max(shown.find(bad) - 80, 0):shown.find(bad) + 80]!r}"


@pytest.mark.parametrize("name", ["default", "article"])
def test_every_step_draws_offline_without_errors_and_fits_1280x720(browser, pages, name):
    for full_screen in (True, False):
        open_page(browser, pages[name], full_screen=full_screen)
        names = steps(browser)
        assert names[:12] == ["tokens", "embed", "qkv", "scores", "sum", "heads", "mlp", "layers", "predict", "loop",
                              "positions", "lens"]
        assert (names[-1] == "checks") == (name == "article")  # the article's ✓/✗ checks
        for i, expected in enumerate(names):
            assert step(browser) == expected
            assert sideways(browser) <= 0, f"step {expected} scrolls sideways"
            assert browser.find_element("css selector", f"#step-{expected} h2").text.startswith(f"{i + 1} ·")
            assert_reads_right(text(browser, "#slides") + "\n" + text(browser, "#detail"), expected)
            key(browser, "ARROW_RIGHT")
        assert errors(browser) == []
        assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0  # nothing fetched


def test_the_keyboard_moves_through_the_steps(browser, pages):
    open_page(browser, pages["article"])
    assert step(browser) == "tokens"
    key(browser, "ARROW_RIGHT", 3)
    assert step(browser) == "scores" and "step=scores" in browser.current_url
    key(browser, "ARROW_LEFT")
    assert step(browser) == "qkv" and text(browser, "#where") == "3 / 13"
    key(browser, "END")
    assert step(browser) == "checks" and "17 of 22 stated values agree (5 disagree)" in text(browser, "#slides")
    notes = [e.text for e in browser.find_elements("css selector", "#slides p.about")]
    assert [n.split(":")[0] for n in notes][:2] == ["Note (softmax)", "Note (B_Q)"]  # the scenario's notes, as words
    key(browser, "ARROW_RIGHT")
    assert step(browser) == "checks"  # the last step stays
    key(browser, "HOME")
    assert step(browser) == "tokens"
    click(browser, "#next")
    assert step(browser) == "embed"
    open_page(browser, pages["article"], "#step=sum&token=1")  # the address opens a step for a token
    assert step(browser) == "sum" and "0.522×A_V + 0.478×B_V" in text(browser, "#slides")


def test_clicking_a_token_follows_it(browser, pages):
    open_page(browser, pages["default"])
    go(browser, "scores")
    assert text(browser, "#detail h2").startswith("Following F")  # the last prompt token first
    click(browser, '[data-token="1"]')
    assert text(browser, "#detail h2").startswith("Following B")
    assert browser.find_element("css selector", '[data-token="1"]').get_attribute("aria-pressed") == "true"
    assert text(browser, "table.heat tr.on th") == "B"  # B's attention row is the one marked
    assert "B can see" not in text(browser, "#slides") and "B's query" in text(browser, "#slides")
    rows = text(browser, "table.scores tbody")
    assert rows.splitlines()[0].startswith("A") and "C–" in rows  # A and B, then the masked keys
    click(browser, "table.heat tr[data-follow='3'] th")  # a row of the map follows its token too
    assert text(browser, "#detail h2").startswith("Following D")
    gen = Generation.load(pages["npz"])
    E = gen.steps[0]["hook_embed"][3]
    shown = [c.text for c in browser.find_elements("css selector", "#detail tr[data-for='embed'] td.n")][:5]
    assert shown == [num(x, 3) for x in [*E[:3], *E[-2:]]]  # D's embedding row's ends, as the terminal writes them
    gap = browser.find_element("css selector", "#detail tr[data-for='embed'] td.gap")
    assert gap.text == "…" and gap.value_of_css_property("padding-left") == "8px"  # apart from the numbers
    assert "predicts" in text(browser, "#detail")


def test_layers_heads_and_passes_change_what_is_shown(browser, pages):
    open_page(browser, pages["default"], "#token=1")
    go(browser, "qkv")
    gen = Generation.load(pages["npz"])
    before = text(browser, "#slides")
    click(browser, '[data-layer="5"]')
    after = text(browser, "#slides")
    assert after != before and "Layer 5, head 0" in after and "B's output of layer 4" in after
    click(browser, '[data-head="1"]')
    assert "Layer 5, head 1" in text(browser, "#slides")
    q = gen.steps[0]["blocks.5.attn.hook_q"][1, 1]  # B, head 1
    expected = "[" + ", ".join(num(x, 3) for x in q) + "]"
    assert expected in text(browser, "#slides")
    assert browser.find_element("css selector", '[data-layer="5"]').get_attribute("aria-pressed") == "true"
    go(browser, "loop")
    click(browser, '[data-pass="1"]')
    words = " ".join(text(browser, "#slides").split())
    assert re.search(r"pass 1: reads (G = ␣G|\S+ at G); computes G, reuses A–F from the KV cache", words), words
    assert not re.search(r"reads G = (?!␣G)", words)  # the text first when it is not the letter: "… at G"
    assert "cache 0" in words and "computed" in words


def test_the_loop_of_several_rows_says_whose_each_pass_is(browser, word_model, runner, tmp_path):
    from .test_generation_rows import two_rows

    m = word_model(seed=3)
    two_rows(m).save(tmp_path / "rows.npz")
    r = runner.invoke(app, ["show", str(tmp_path / "rows.npz"), "--section", "loop", "--export", str(tmp_path / "rows.html")])
    assert r.exit_code == 0, r.output
    open_page(browser, tmp_path / "rows.html")
    go(browser, "loop")
    head = [th.text for th in browser.find_elements("css selector", "#slides table.grid thead th")]
    assert head[:3] == ["pass", "row", "reused | computed"]
    body = [[td.text for td in tr.find_elements("css selector", "td")]
            for tr in browser.find_elements("css selector", "#slides table.grid tbody tr")]
    assert [row[1] for row in body] == ["row 0", "row 0", "row 1, continuing row 0", "row 0, continuing row 1", "row 1"]
    assert [row[0] for row in body][0] == "▶ 0"  # the followed pass: row 0's prompt pass
    click(browser, '[data-pick-pass="2"]')  # row 0's third pass is the run's pass 3
    assert browser.find_element("css selector", "#slides table.grid tbody tr.on td").text == "▶ 3"
    assert not errors(browser)


def _shown_probs(browser) -> dict[int, float]:
    cells = browser.find_elements("css selector", "#probs [data-p]")
    return {int(c.get_attribute("data-id")): float(c.get_attribute("data-p")) for c in cells}


def test_the_temperature_control_recomputes_the_probabilities_as_python_does(browser, pages):
    from selenium.webdriver.common.by import By

    gen = Generation.load(pages["npz"])
    logits = gen.steps[0]["logits"][-1]
    open_page(browser, pages["default"])
    go(browser, "predict")
    recorded = _shown_probs(browser)
    assert len(recorded) >= 10
    slider = browser.find_element(By.ID, "temperature")
    key(browser, "ARROW_LEFT", 6, target=slider)  # as a person does it: 6 steps of 0.05 down from 1
    T = float(slider.get_attribute("value"))
    assert T == pytest.approx(0.7) and text(browser, "#temperature-value") == "0.70"
    got = _shown_probs(browser)
    want = tempered_softmax(logits, T)
    ids = list(got)
    np.testing.assert_allclose([got[i] for i in ids], want[ids], rtol=1e-9, atol=1e-15)
    assert got != recorded and max(got.values()) > max(recorded.values())  # colder: the top token gains
    assert "÷ 0.70" in text(browser, "#topk thead")
    # a script drives it the same way: set the value, send the input event
    browser.execute_script("const t = document.getElementById('temperature'); t.value = '2.5';"
                           "t.dispatchEvent(new Event('input'))")
    got = _shown_probs(browser)
    np.testing.assert_allclose([got[i] for i in ids], tempered_softmax(logits, 2.5)[ids], rtol=1e-9, atol=1e-15)
    click(browser, "#temperature-reset")
    assert _shown_probs(browser) == pytest.approx(recorded, rel=1e-12)
    assert errors(browser) == []


def _bar_heights(browser) -> dict[int, float]:
    """Each candidate's bar as a share of the bars' box (the page draws p × 80%)."""
    return browser.execute_script(
        "const out = {}; for (const c of document.querySelectorAll('#probs [data-id]')) {"
        " out[c.dataset.id] = parseFloat(c.querySelector('.fill').style.height) / 80; } return out;")


def test_the_temperature_control_has_an_argmax_setting_labels_and_absolute_bars(browser, pages):
    gen = Generation.load(pages["npz"])
    logits = gen.steps[0]["logits"][-1]
    top = int(np.argmax(logits))
    open_page(browser, pages["default"])
    go(browser, "predict")
    row = text(browser, ".temp-row")
    assert "greedy: plain softmax" not in row and "T = 1 (softmax)" in row and "T = 0 (argmax: this run)" in row
    click(browser, "#temperature-zero")  # the run's own T = 0: greedy, the largest logit takes all
    assert text(browser, "#temperature-value") == "0.00"
    assert browser.find_element("css selector", "#temperature").get_attribute("value") == "0"
    got = _shown_probs(browser)
    assert got[top] == 1.0 and all(v == 0.0 for i, v in got.items() if i != top)
    assert "argmax" in text(browser, "#temperature-note") and "÷ T (T = 0: argmax)" in text(browser, "#topk thead")
    browser.execute_script("const t = document.getElementById('temperature'); t.value = '3';"
                           "t.dispatchEvent(new Event('input'))")
    got, bars = _shown_probs(browser), _bar_heights(browser)
    for i, p in got.items():  # bars on one absolute 0–1 scale: a falling probability is a shorter bar
        assert bars[str(i)] == pytest.approx(p, abs=2e-3)
    assert got[top] < 0.9 and bars[str(top)] < 0.9
    assert "0–1 scale" in browser.find_element("css selector", "#probs + p.note").text
    click(browser, "#temperature-reset")
    assert text(browser, "#temperature-value") == "1.00"
    assert errors(browser) == []


def test_the_article_temperature_flattens_its_peaked_choice(browser, pages):
    from tracer.replay import replay

    logits = replay("article").gen.steps[0]["logits"][-1]
    open_page(browser, pages["article"], "#step=predict")
    assert _shown_probs(browser)[6] == pytest.approx(1.0, abs=1e-5)  # G, greedy
    browser.execute_script("const t = document.getElementById('temperature'); t.value = '20';"
                           "t.dispatchEvent(new Event('input'))")
    got = _shown_probs(browser)
    assert len(got) == 9  # the whole word vocabulary
    np.testing.assert_allclose([got[i] for i in range(9)], tempered_softmax(logits, 20.0), rtol=1e-9, atol=1e-15)
    assert got[6] < 0.6


@pytest.fixture(scope="module")
def odd_pages(tmp_path_factory, word_model):
    """Runs that leave parts out: no layers, a names filter, sampling with top-k and top-p and no KV
    cache, one head, and a page over its size budget (some positions and logits left out)."""
    import tracer
    from tracer.render.page import page

    out = tmp_path_factory.mktemp("odd")
    words = ["w1", "w2", "w3", "w4", "w5"]
    runs = {"no-layers": (word_model(n_layers=0), dict(max_new_tokens=2), {}),
            "names": (word_model(), dict(max_new_tokens=2, names=["blocks.*.attn.hook_pattern", "logits"]), {}),
            "one-head": (word_model(n_heads=1, d_head=8), dict(max_new_tokens=0), {}),
            "over-budget": (word_model(), dict(max_new_tokens=3), dict(budget=2_500, logits_budget=300, token=1))}
    paths = {}
    for name, (m, options, page_options) in runs.items():
        paths[name] = out / f"{name}.html"
        paths[name].write_text(page(m.generate(words, **options), m.tokenizer, **page_options), encoding="utf-8")
    m = tracer.load("tiny")
    gen = m.generate("The cat sat on the mat", max_new_tokens=3, temperature=0.8, top_k=5, top_p=0.9, seed=3, cache=False)
    paths["sampled"] = out / "sampled.html"
    paths["sampled"].write_text(page(gen, m.tokenizer), encoding="utf-8")
    return paths


@pytest.mark.parametrize("name", ["no-layers", "names", "one-head", "over-budget", "sampled"])
def test_runs_that_leave_parts_out_draw_without_errors(browser, odd_pages, name):
    open_page(browser, odd_pages[name])
    for expected in steps(browser):
        assert step(browser) == expected
        browser.execute_script(  # the last two of each control, clicked from a script (the controls are drawn anew each time)
            "for (const s of ['[data-token]', '[data-layer]', '[data-head]', '[data-pass]']) {"
            "  const n = document.querySelectorAll(s).length;"
            "  for (let i = Math.max(n - 2, 0); i < n; i++) document.querySelectorAll(s)[i].click(); }")
        assert sideways(browser) <= 0, f"step {expected} scrolls sideways"
        key(browser, "ARROW_RIGHT")
    assert errors(browser) == []
    if name in ("names", "over-budget"):
        assert "Left out of this page" in text(browser, "#detail")


def test_screenshots_at_1280x720(browser, pages, tmp_path):
    keep = os.environ.get("TRACER_PAGE_SCREENSHOTS")
    shots = [("default", "#step=scores&token=5", "page-default-scores.png"),
             ("default", "#step=predict", "page-default-predict.png"),
             ("article", "#step=sum&token=1", "page-article-sum.png"),
             ("article", "#step=scores&token=1", "page-article-scores.png")]
    for name, address, file in shots:
        open_page(browser, pages[name], address)
        path = tmp_path / file
        assert browser.save_screenshot(str(path))
        width, height = struct.unpack(">II", path.read_bytes()[16:24])  # the PNG's IHDR
        assert (width, height) == SIZE
        if keep:
            shutil.copy(path, Path(keep) / file)
    assert errors(browser) == []


def test_the_gemma2_page_says_the_soft_cap_on_the_scores_step(browser, runner, tmp_path):
    import re

    import numpy as np

    data = Path(__file__).parent / "data" / "gemma2-tiny"
    r = runner.invoke(app, ["trace", "The quick brown fox jumps over the lazy dog", "-n", "1", "--model", str(data),
                            "--export", str(tmp_path / "g.html")], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    open_page(browser, tmp_path / "g.html")
    go(browser, "scores")
    said = " ".join(text(browser, "#step-scores").split())
    assert "Each score is divided by √query_pre_attn_scalar = √24, then soft-capped, 5 · tanh(s / 5) (Gemma 2), before the mask" in said
    before, after = re.search(r"scores soft-capped: 5 · tanh\(s / 5\): (-?[0-9.]+) → (-?[0-9.]+)", said).groups()
    assert float(after) == pytest.approx(5 * np.tanh(float(before) / 5), abs=1.5e-3)
    assert errors(browser) == []


def test_a_step_added_to_the_one_list_is_on_the_path_and_draws_its_slide(browser, monkeypatch, tmp_path):
    """A section added to `tracer.sections` from here, with a page step: the path (sent with the data) shows
    it last, worded, and its slide draws (entered in the script's SLIDES by a script of this test)."""
    from tracer import sections
    from tracer.render.page import page_data
    from tracer.render.page.html import page_html, page_script
    from tracer.render.words import WORDS

    monkeypatch.setattr(sections, "SECTIONS", sections.SECTIONS + (sections.Section("toy", page={"toy": ()}),))
    monkeypatch.setitem(WORDS, "path.toy", "Toy")
    monkeypatch.setitem(WORDS, "title.toy", "A toy step")
    m = tracer.load(str(Path(__file__).parent / "data" / "llama-tiny"))
    data = page_data(m.generate("A B C", max_new_tokens=1), m.tokenizer)
    slide = 'SLIDES.toy = function () { return el("p", { id: "toy" }, String(STEPS.length)); };'
    path = tmp_path / "toy.html"
    path.write_text(page_html(data, script=page_script() + "\n" + slide), encoding="utf-8")
    open_page(browser, path)
    n = len(steps(browser))
    assert steps(browser)[-2:] == ["lens", "toy"] and n == len(data["steps"]) == 13
    key(browser, "END")
    assert step(browser) == "toy" and text(browser, "#toy") == str(n) and text(browser, "#where") == f"{n} / {n}"
    assert text(browser, "#step-toy h2") == f"{n} · A toy step" and text(browser, "#path li:last-child button") == f"{n} Toy"
    assert errors(browser) == []


def test_a_steps_disagreeing_stated_values_are_in_view_and_the_panel_is_readable(browser, pages):
    """At 1280×720 the article's ✗ values of a step are above the fold (its errors are the lesson), and
    the panel's type is at least 16 px (a room reads it)."""
    for address in ("#step=scores&token=1", "#step=sum&token=1", "#step=checks"):
        open_page(browser, pages["article"], address)
        tops = browser.execute_script("return [...document.querySelectorAll('#slides .check.bad')]"
                                      ".map(c => c.getBoundingClientRect().bottom)")
        assert tops and max(tops[:5]) <= SIZE[1], (address, tops)  # on the checks slide, the 5 first
    for selector in ("#detail", "table.card"):
        px = float(browser.find_element("css selector", selector).value_of_css_property("font-size").removesuffix("px"))
        assert px >= 16, (selector, px)


# --------------------------------------------------------------------------- what a class saw (issue 40)

PHONE = (390, 844)


def open_at(driver, path: Path, address: str, size: tuple[int, int]):
    """`open_page` at another screen size (a phone's: 390×844)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": size[0] < 600})
    driver.get("about:blank")
    driver.get(path.as_uri() + address)
    driver.get_log("browser")
    assert driver.execute_script("return document.body.dataset.step") is not None, "the page did not draw"


@pytest.fixture(scope="module")
def abc_page(tmp_path_factory, runner):
    """The shipped model's page of the README's first command (`abc`, "A B C D E F", two passes), and its trace."""
    out = tmp_path_factory.mktemp("abc")
    r = runner.invoke(app, ["trace", "A B C D E F", "--save", str(out / "abc.npz"), "--export", str(out / "abc.html")],
                      env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    return {"html": out / "abc.html", "gen": Generation.load(out / "abc.npz")}


def in_view(driver, selector: str) -> list[bool]:
    """Whether each element is wholly inside the box that clips it (its scrolling parent) and the screen."""
    return driver.execute_script("""return [...document.querySelectorAll(arguments[0])].map(e => {
        const r = e.getBoundingClientRect(), box = e.closest('.lenswrap') || document.documentElement;
        const b = box.getBoundingClientRect();
        return r.left >= Math.max(b.left, 0) - 1 && r.right <= Math.min(b.right, window.innerWidth) + 1; })""", selector)


@pytest.mark.parametrize("size", [SIZE, PHONE])
def test_the_lens_shows_the_predicting_position_and_its_rank(browser, abc_page, size):
    """The column that matters (F, the last position, which predicts G) and the rank column are in view at
    1280×720 and on a phone, the rows' names beside them; earlier positions scroll in the table's box."""
    open_at(browser, abc_page["html"], "#step=lens", size)
    heads = browser.execute_script("return [...document.querySelectorAll('table.lens thead th')].map(e => e.textContent)")
    assert heads[-2].startswith("F") and heads[-1] == "rank of ␣G", heads
    assert in_view(browser, "table.lens thead th:nth-last-child(-n+2)") == [True, True]
    assert all(in_view(browser, "table.lens tbody th"))  # the rows' names stay (sticky)
    ranks = browser.execute_script("return [...document.querySelectorAll('table.lens tbody tr')].map(r => r.lastChild.textContent)")
    recorded = abc_page["gen"].steps[0]["lens.target_rank"][:, -1]  # [layer + 1] the recorded ranks of G at F
    assert [int(x.replace(",", "")) for x in ranks] == [int(r) + 1 for r in recorded]
    assert sideways(browser) <= 0 and errors(browser) == []


CUT = """return [...document.querySelectorAll('#slides td, #slides .n, #detail td, #detail .n')].filter(e => {
    const r = e.getBoundingClientRect();
    if (!r.width || (r.left >= -1 && r.right <= window.innerWidth + 1)) return false;
    for (let a = e.parentElement; a; a = a.parentElement) {  // past the screen's edge: cut unless a box scrolls to it
      const s = getComputedStyle(a);
      if (['auto', 'scroll'].includes(s.overflowX) && a.scrollWidth > a.clientWidth) return false;
    }
    return true; }).map(e => e.closest('[id]').id + ': ' + e.textContent)"""


@pytest.mark.parametrize("name", ["abc", "tiny"])
def test_on_a_phone_the_controls_leave_room_and_no_number_is_cut(browser, pages, abc_page, name):
    """390×844: the header (steps, tokens, layers, heads, passes) takes at most a quarter of the height (it took
    30% on abc, 40% on the 24 layers of tiny), each row scrolling sideways with the chosen item in view; at every
    step no number is cut at the screen's edge (the card cut -10.903 to '-0.'), unless a box scrolls to it."""
    page = abc_page["html"] if name == "abc" else pages["default"]
    open_at(browser, page, "#step=lens&layer=3&token=4", PHONE)
    top = browser.execute_script("return document.getElementById('top').getBoundingClientRect().height")
    assert top <= PHONE[1] / 4, top
    for chosen in ("#path [aria-current]", "#tokens [aria-pressed=true]", "#layers [aria-pressed=true]"):
        assert in_view(browser, chosen) == [True], chosen
    for name_ in steps(browser):
        open_at(browser, page, f"#step={name_}", PHONE)
        assert browser.execute_script(CUT) == [], name_
        assert sideways(browser) <= 0
    assert errors(browser) == []


def test_the_page_shows_the_terminals_digits(browser, abc_page, runner):
    """Every number of the logits step and the card as the terminal prints it: the recorded value rounded once to
    --precision decimals (the page showed f's -10.9035… as -10.903, the terminal -10.904; the logits' norm
    1592.9436 as 1592.940, a 6-digit value padded with a zero)."""
    st = abc_page["gen"].steps[0]
    f, logits = st["unembed.hook_in"][-1], st["logits"][-1]
    open_at(browser, abc_page["html"], "#step=predict", SIZE)
    shown = browser.execute_script("return [...document.querySelectorAll('#step-predict table.eqs .vec')].map(v => "
                                   "[[...v.querySelectorAll('.n')].map(e => e.textContent), v.querySelector('.dims').textContent])")
    ends = lambda a: [num(x, 3) for x in [*a[:4], *a[-4:]]]  # noqa: E731  the terminal's --dims 8
    assert shown[0][0] == ends(f) and shown[1][0] == ends(logits)
    assert shown[0][1].endswith(f"‖·‖ {num(np.linalg.norm(f.astype(float)), 3)})")
    assert shown[1][1].endswith(f"‖·‖ {num(np.linalg.norm(logits.astype(float)), 3)})")
    r = runner.invoke(app, ["trace", "A B C D E F", "--section", "predict", "-n", "1"], env={"COLUMNS": "100", "NO_COLOR": "1"})
    said = " ".join(r.stdout.split())
    assert f"f = [{', '.join(ends(f)[:4])}, …, {', '.join(ends(f)[4:])}]" in said  # the same digits in the terminal
    card = browser.execute_script("return [...document.querySelectorAll('#detail tr[data-for=predict] td.n, "
                                  "#detail tr[data-for=predict] td.gap')].map(e => e.textContent)")
    assert [c for c in card if c != "…"] == [num(x, 3) for x in [*f[:3], *f[-2:]]]
    assert errors(browser) == []


def test_choosing_a_pass_follows_the_token_it_reads(browser, abc_page):
    """Pass 1 reads G: its slide and the card are G's (the card stayed on F of pass 0); pass 0 again: F."""
    gen = abc_page["gen"]
    open_at(browser, abc_page["html"], "#step=predict", SIZE)
    assert text(browser, "#detail h2").startswith("Following F")
    click(browser, '#passes [data-pass="1"]')
    assert text(browser, "#detail h2").startswith("Following G") and "token=6" in browser.current_url
    assert browser.find_element("css selector", '[data-token="6"]').get_attribute("aria-pressed") == "true"
    f = gen.steps[1]["unembed.hook_in"][-1]  # pass 1's final vector: G's
    card = browser.execute_script("return [...document.querySelectorAll('#detail tr[data-for=predict] td.n')].map(e => e.textContent)")
    assert card == [num(x, 3) for x in [*f[:3], *f[-2:]]]
    assert "Pass 1" in text(browser, "#step-predict")
    click(browser, '#passes [data-pass="0"]')
    assert text(browser, "#detail h2").startswith("Following F")
    assert errors(browser) == []


def test_a_newline_predicted_is_named_by_its_text_not_by_the_next_letter(browser, abc_page, runner):
    """abc's pass 1 chooses a line break after G (␣H is the runner-up): the slide says "G … predicts ↵ at H", as the
    terminal says it for "A B C D E F G" (both said "predicts H"); pass 0's letter stays "predicts G"."""
    gen = abc_page["gen"]
    tok = tracer.load("abc").tokenizer
    assert tok.token_str(gen.generated_ids[1]) == "\n"  # the recorded choice of pass 1
    open_at(browser, abc_page["html"], "#step=predict&pass=1", SIZE)
    said = " ".join(text(browser, "#step-predict").split())
    assert "G, the last token, predicts ↵ at H:" in said and "predicts H" not in said
    open_at(browser, abc_page["html"], "#step=predict&pass=0", SIZE)
    assert "F, the last token, predicts G:" in " ".join(text(browser, "#step-predict").split())
    r = runner.invoke(app, ["trace", "A B C D E F G", "-n", "1", "--section", "predict"], env={"COLUMNS": "100", "NO_COLOR": "1"})
    flat = " ".join(r.stdout.split())
    assert "(how to predict ↵ at H)" in flat and "G, the last token, predicts ↵ at H:" in flat
    assert errors(browser) == []


COPY = "the river window garden and the doctor village. the river window"  # the README's lesson (issue 25)


@pytest.fixture(scope="module")
def intervention_pages(tmp_path_factory, runner):
    """The default model's page with every head's ablation, one over the limit, and a compare page (with --json)."""
    import json

    from tracer.run import interventions

    out = tmp_path_factory.mktemp("interventions")
    env = {"COLUMNS": "100", "NO_COLOR": "1"}
    r = runner.invoke(app, ["trace", COPY, "-n", "0", "--export", str(out / "heads.html")], env=env)
    assert r.exit_code == 0, r.stderr
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(interventions, "HEAD_ABLATION_WORK", 1e6)
        r = runner.invoke(app, ["trace", COPY, "-n", "0", "--export", str(out / "over.html")], env=env)
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, ["compare", COPY, COPY.replace("garden", "forest", 1), "--json", "--export",
                            str(out / "compare.html")], env=env)  # two answers: ␣garden and ␣forest, copied
    assert r.exit_code == 0, r.stderr
    assert runner.invoke(app, ["compare", "A B C", "A B C", "--export", str(out / "same.html")], env=env).exit_code == 0
    data = re.search(r'id="trace-data">(.*?)</script>', (out / "heads.html").read_text(encoding="utf-8"), re.S).group(1)
    return {"heads": out / "heads.html", "over": out / "over.html", "compare": out / "compare.html", "same": out / "same.html",
            "json": json.loads(r.stdout), "ablations": json.loads(data)["head_ablations"]}


def test_clicking_a_head_shows_the_prediction_without_it(browser, intervention_pages):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    words = intervention_pages["ablations"]["heads"]
    open_page(browser, intervention_pages["heads"], "#step=heads")
    buttons = browser.find_elements(By.CSS_SELECTOR, "button[data-ablate]")
    assert len(buttons) == 16 and all(b.get_attribute("aria-label").endswith(": the prediction without it") for b in buttons)
    click(browser, 'button[data-ablate="1:0"]')
    assert text(browser, "#ablation .ablation-words") == words[1][0]["words"]
    assert text(browser, "#ablation .ablation-words").startswith("without head 1:0: p(␣")
    assert [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#ablation table.bars caption")] == \
        ["the run as recorded", "without head 1:0"]
    assert words[1][0]["words"] in text(browser, "#detail")  # the card says it too, on every step
    browser.find_element(By.CSS_SELECTOR, 'button[data-ablate="2:3"]').send_keys(Keys.ENTER)  # from the keyboard
    assert text(browser, "#ablation .ablation-words") == words[2][3]["words"]
    assert browser.find_element(By.CSS_SELECTOR, 'button[data-ablate="2:3"]').get_attribute("aria-pressed") == "true"
    click(browser, '#layers [data-layer="3"]')  # the layer and head pickers choose the head shown
    click(browser, '#heads [data-head="1"]')
    assert text(browser, "#ablation .ablation-words") == words[3][1]["words"]
    assert sideways(browser) <= 0 and errors(browser) == []
    open_page(browser, intervention_pages["over"], "#step=heads")
    assert text(browser, ".ablation-missing").startswith("head ablations not precomputed: 4 layers × 4 heads = 16 runs of a "
                                                         "3.5M model over 12 tokens")
    assert browser.find_elements(By.CSS_SELECTOR, "button[data-ablate]") == [] and errors(browser) == []


def open_compare(driver, path: Path):
    """Open the compare page at 1280×720 (it has no steps: `open_page` waits for a step)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": SIZE[0], "height": SIZE[1], "deviceScaleFactor": 1, "mobile": False})
    driver.get("about:blank")
    driver.get(path.as_uri())
    driver.get_log("browser")
    assert driver.execute_script("return document.body.dataset.drawn") == "compare", "the compare page did not draw"


def test_the_compare_page_shows_json_s_recovered_values(browser, intervention_pages):
    from selenium.webdriver.common.by import By

    want = intervention_pages["json"]["patch"]["recovered"]
    open_compare(browser, intervention_pages["compare"])
    cells = browser.execute_script("return [...document.querySelectorAll('#patching-map td.cell')].map(td => "
                                   "[Number(td.dataset.layer), Number(td.dataset.pos), td.dataset.recovered, td.textContent])")
    assert len(cells) == len(want) * len(want[0])
    for layer, pos, exact_value, shown in cells:
        v = want[layer][pos]
        assert float(exact_value) == pytest.approx(v, rel=1e-12, abs=1e-15)
        assert float(shown) == pytest.approx(v, abs=0.005 + 1e-12)  # two decimals
    cell = browser.find_element(By.CSS_SELECTOR, '#patching-map td[data-layer="2"][data-pos="11"]')
    browser.execute_script("arguments[0].focus()", cell)  # focus (a keyboard's Tab) shows the whole number
    said = text(browser, "#patch-readout")
    assert said.startswith("B's run with A's blocks.2.hook_resid_pre at position L")
    assert float(re.search(r"recovers (\S+) of", said).group(1)) == pytest.approx(want[2][11], rel=1e-5)
    assert "≠" in text(browser, "#prompt-tokens") and text(browser, "#legend").startswith("0 · B's answer")
    assert sideways(browser) <= 0 and errors(browser) == []
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0  # nothing fetched
    open_compare(browser, intervention_pages["same"])  # one answer: every fraction is 0 ÷ 0
    assert {c.text for c in browser.find_elements(By.CSS_SELECTOR, "td.cell")} == {"nan"} and errors(browser) == []


def test_intervention_screenshots_at_1280x720(browser, intervention_pages, tmp_path):
    keep = os.environ.get("TRACER_PAGE_SCREENSHOTS")
    for name, address, file in (("heads", "#step=heads&layer=3&head=1", "page-ablate-head.png"),
                                ("compare", "", "page-compare.png")):
        if name == "heads":
            open_page(browser, intervention_pages[name], address)
            browser.execute_script("document.getElementById('ablation').scrollIntoView()")
        else:
            open_compare(browser, intervention_pages[name])
        path = tmp_path / file
        assert browser.save_screenshot(str(path))
        assert struct.unpack(">II", path.read_bytes()[16:24]) == SIZE
        if keep:
            shutil.copy(path, Path(keep) / file)
    assert errors(browser) == []


def test_the_draws_stages_are_one_picture_to_step_through(browser, tmp_path, runner):
    """The predict step of a run with penalties and min-p: the stage picture shows the same tokens' probabilities
    stage by stage (those of `render.sampling.stage_probs`), from the model's own softmax to the cut and
    renormalised distribution drawn from."""
    from tracer.render.fmt import prob
    from tracer.render.sampling import stage_probs

    r = runner.invoke(app, ["trace", "A B A B", "-n", "2", "-t", "0.9", "--min-p", "0.05", "--repetition-penalty", "1.3",
                            "--presence-penalty", "0.4", "--save", str(tmp_path / "s.npz"), "--export",
                            str(tmp_path / "s.html")], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    gen = Generation.load(tmp_path / "s.npz")
    want = stage_probs(gen.steps[0], tracer.load("abc").tokenizer)
    labels = [s["label"] for s in want["stages"]]
    assert len(labels) == 6 and labels[1].startswith("after the penalties") and labels[-1].startswith("min-p 0.05")
    open_page(browser, tmp_path / "s.html")
    go(browser, "predict")
    shown = lambda: [e.text for e in browser.find_elements("css selector", "#stages .stage-bars .pcol .n")]  # noqa: E731
    assert f"stage 6 of 6: {labels[-1]}" in text(browser, "#stages")  # the distribution drawn from first
    assert shown() == [prob(x) for x in want["stages"][-1]["p"]]
    for i in range(5, 0, -1):
        click(browser, "#stage-prev")
        assert f"stage {i} of 6: {labels[i - 1]}" in text(browser, "#stages")
        assert shown() == [prob(x) for x in want["stages"][i - 1]["p"]]
    assert browser.find_element("css selector", "#stage-prev").get_attribute("disabled") is not None
    click(browser, "#stage-next")
    assert "stage 2 of 6" in text(browser, "#stages") and errors(browser) == []


def test_a_beam_search_page_draws_the_tree(browser, tmp_path, runner):
    """`--beams 3`: the page gains the beams step after the loop; its tree has a node per continuation (kept ones
    holding the next step's), and the finished sequences best first with --json's scores."""
    import json

    args = ["trace", "A B C", "-n", "3", "--beams", "3"]
    r = runner.invoke(app, [*args, "--export", str(tmp_path / "b.html")], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    want = json.loads(runner.invoke(app, [*args, "--json"]).stdout)["beams"]
    open_page(browser, tmp_path / "b.html")
    assert steps(browser)[9:11] == ["loop", "beams"]
    go(browser, "beams")
    fates = browser.execute_script("return [...document.querySelectorAll('#beam-tree li')].map(e => e.dataset.fate)")
    assert fates.count("kept") == 3 + 3 and fates.count("finished") >= 1 and "pruned" in fates  # 3 beams, 2 steps on
    scores = [float(e.get_attribute("data-score")) for e in browser.find_elements("css selector", "#beam-results li")]
    assert scores == pytest.approx([b["score"] for b in want], abs=1e-9)
    assert_reads_right(text(browser, "#slides"), "beams")
    assert sideways(browser) <= 0 and errors(browser) == []


def test_a_speculative_page_shows_each_round(browser, tmp_path, runner):
    """`--draft layer:2`: the page gains the speculative step after the loop; each round's table marks the drafted
    tokens accepted or rejected as --json's rounds say, and the step answers the Q&A's X distributions."""
    import json

    args = ["trace", "A B C", "-n", "8", "--draft", "layer:2"]
    r = runner.invoke(app, [*args, "--export", str(tmp_path / "s.html")], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    spec = json.loads(runner.invoke(app, [*args, "--json"]).stdout)["speculative"]
    open_page(browser, tmp_path / "s.html")
    assert steps(browser)[9:11] == ["loop", "speculative"]
    go(browser, "speculative")
    tables = browser.find_elements("css selector", "table.spec")
    judged = [r for r in spec["rounds"] if r["drafted_ids"]]
    assert len(tables) == len(judged)
    for t, r in zip(tables, judged):
        verdicts = [e.get_attribute("data-verdict") for e in t.find_elements("css selector", "tr[data-verdict]")]
        assert verdicts.count("accepted") == r["accepted"] and len(verdicts) == len(r["drafted_ids"])
    shown = text(browser, "#slides")
    assert f"8 tokens in {spec['target_passes']} passes of the model instead of 8" in shown
    assert "X probability distributions" in text(browser, "#spec-answer")
    assert_reads_right(shown, "speculative")
    assert sideways(browser) <= 0 and errors(browser) == []


def test_the_static_page_says_which_token_a_click_forces_and_the_command(browser, tmp_path, runner):
    """A candidate clicked in the static page's logits step: the note names the token and the pass and gives the
    command that runs the branch, a command that works and puts that token after the prompt."""
    import shlex

    r = runner.invoke(app, ["trace", "A B C", "-n", "3", "--export", str(tmp_path / "p.html"), "--save",
                            str(tmp_path / "p.npz")], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    gen = Generation.load(tmp_path / "p.npz")
    second = int(np.argsort(-gen.passes[0]["sample.probs"], kind="stable")[1])
    open_page(browser, tmp_path / "p.html")
    go(browser, "predict")
    click(browser, f'#probs [data-id="{second}"]')
    note = text(browser, "#branch-note")
    word = tracer.load("abc").tokenizer.token_str(second).replace(" ", "␣")
    assert note.startswith(f"Forcing {word} at pass 0") and "this command does" in note
    command = text(browser, "#branch-command")
    args = shlex.split(command)
    assert args[:2] == ["tracer", "trace"] and "-n" in args and args[args.index("-n") + 1] == "2"
    r = runner.invoke(app, [*args[1:], "--json"])
    assert r.exit_code == 0, r.stderr
    import json

    ran = json.loads(r.stdout)
    assert ran["prompt_ids"] == gen.prompt_ids + [second] and len(ran["generated_ids"]) == 2
    assert errors(browser) == []


# --------------------------------------------------------------------------- a mixture of experts, attention sinks

@pytest.fixture(scope="module")
def moe_pages(tmp_path_factory, runner):
    """gpt-oss-tiny (sinks, experts; its trace saved) and qwen2-moe-tiny (a dense layer, the shared expert)
    without expert 1 of layer 0 (--ablate 0:expert:1)."""
    out = tmp_path_factory.mktemp("moe")
    data = Path(__file__).parent / "data"
    env = {"COLUMNS": "100", "NO_COLOR": "1"}
    r = runner.invoke(app, ["trace", "The quick brown fox", "-n", "2", "--model", str(data / "gpt-oss-tiny"),
                            "--save", str(out / "oss.npz"), "--export", str(out / "oss.html")], env=env)
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, ["trace", "the cat sat on the mat", "-n", "1", "--model", str(data / "qwen2-moe-tiny"),
                            "--ablate", "0:expert:1", "--export", str(out / "qwen2.html")], env=env)
    assert r.exit_code == 0, r.stderr
    return {"oss": out / "oss.html", "qwen2": out / "qwen2.html", "npz": out / "oss.npz"}


@pytest.mark.parametrize("name", ["oss", "qwen2"])
@pytest.mark.parametrize("size", [SIZE, PHONE])
def test_a_routed_models_steps_draw_and_fit_a_projector_and_a_phone(browser, moe_pages, name, size):
    for layer in (0, 1):  # qwen2-moe-tiny's layer 1 is a dense MLP among the experts
        open_at(browser, moe_pages[name], f"#layer={layer}", size)
        for expected in steps(browser):
            assert step(browser) == expected
            assert sideways(browser) <= 0, f"step {expected} scrolls sideways at {size}"
            assert_reads_right(text(browser, "#slides") + "\n" + text(browser, "#detail"), expected)
            key(browser, "ARROW_RIGHT")
    assert errors(browser) == []
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0


def test_the_mlp_step_works_out_the_followed_tokens_routing(browser, moe_pages, render_text):
    """The router's table marks the experts the trace recorded, with their weights; the weighted sum is
    written as the article writes attention's; the experts map's cell is the token's weight; a row of the
    map follows its token; the layers step lists the token's experts in every layer."""
    from selenium.webdriver.common.action_chains import ActionChains

    gen = Generation.load(moe_pages["npz"])
    st = gen.steps[0]
    open_page(browser, moe_pages["oss"], "#step=mlp&token=2&layer=1")
    chosen, weights = st["blocks.1.mlp.hook_expert_indices"][2], st["blocks.1.mlp.hook_expert_weights"][2]
    marked = [e.text for e in browser.find_elements("css selector", "table.route tbody tr.on th")]
    assert marked == [f"E{e}" for e in chosen]
    said = " ".join(text(browser, "#step-mlp").split())
    assert " + ".join(f"{num(w, 3)}×E{e}(ln2(x))" for e, w in zip(chosen, weights)) in said  # 0.4×A_V + 0.6×B_V, one level up
    E, k = st["blocks.1.mlp.hook_router_logits"].shape[-1], len(chosen)
    assert f"{E - k} of {E} experts not used by this token" in said and "the chosen experts' weighted sum" in said
    from tracer.render import show_generation
    from tracer.render.view import View

    tokenizer = tracer.load(str(Path(__file__).parent / "data" / "gpt-oss-tiny")).tokenizer
    terminal = " ".join(render_text(lambda c: show_generation(gen, tokenizer, View(token="C", layer="1", max_lines=0),
                                                              console=c), width=200).split())
    router = re.search(r"mixture of experts: the router scores .*?; the highest: .*?(?= the \d highest)", terminal).group(0)
    assert router in said  # the terminal's sentence, word for word and number for number
    cell = browser.find_element("css selector", f"table.heat.experts tr[data-follow='2'] td[data-e='{chosen[0]}']")
    assert float(cell.get_attribute("data-w")) == pytest.approx(float(weights[0]), rel=1e-5)
    ActionChains(browser).move_to_element(cell).perform()
    readout = text(browser, ".mapbox .readout")
    assert readout.startswith("layer 1: C (") and f") → expert {chosen[0]}: weight {float(weights[0]):.6g}" in readout
    click(browser, "table.heat.experts tr[data-follow='0'] th")
    assert text(browser, "#detail h2").startswith("Following A")
    go(browser, "layers")
    rows = [r.text for r in browser.find_elements("css selector", "table.layers tbody tr")]
    for l, row in enumerate(rows):
        ch, w = st[f"blocks.{l}.mlp.hook_expert_indices"][0], st[f"blocks.{l}.mlp.hook_expert_weights"][0]
        assert row.endswith(" ".join(f"E{e} {num(x, 2)}" for e, x in zip(ch, w)))
    assert errors(browser) == []


def test_the_scores_step_says_what_the_sink_took(browser, moe_pages):
    """gpt-oss's sinks: the scores step says the weights sum to less than 1, the sink's row holds the recorded
    share, and the terminal's sentence says where the rest went; the sum step says it too."""
    gen = Generation.load(moe_pages["npz"])
    share = float(gen.steps[0]["blocks.0.attn.hook_sink_share"][1, 3])
    open_page(browser, moe_pages["oss"], "#step=scores&token=3&layer=0&head=1")
    said = " ".join(text(browser, "#step-scores").split())
    assert "sum to less than 1 over the keys" in said
    assert text(browser, "table.scores tfoot tr.sink td.n") == num(share, 3)
    assert f"head 1's sink takes {num(share, 3)} of the weight" in said and f"sum to {num(1 - share, 3)}, not 1" in said
    go(browser, "sum")
    assert f"head 1's sink takes {num(share, 3)} of the weight" in " ".join(text(browser, "#step-sum").split())
    assert errors(browser) == []


def test_the_page_says_who_an_expert_removed_sent_where(browser, moe_pages):
    """qwen2-moe-tiny without expert 1 of layer 0: the removed expert's row, and for a token that had chosen
    it the terminal's sentence (its experts in the clean run and now); the dense layer says what it is."""
    import json
    import re

    html = moe_pages["qwen2"].read_text(encoding="utf-8")
    d = json.loads(re.search(r'id="trace-data">(.*?)</script>', html, re.S).group(1))
    moved = d["layers"][0]["moe"]["rerouted"]
    t = int(sorted(moved, key=int)[0])
    open_page(browser, moe_pages["qwen2"], f"#step=mlp&token={t}&layer=0")
    said = " ".join(text(browser, "#step-mlp").split())
    before = ", ".join(f"E{e} {num(w, 3)}" for e, w in moved[str(t)]["before"])
    assert f"without E1 (--ablate): in the clean run this token chose {before}; it was sent to" in said
    assert "removed (--ablate)" in text(browser, "table.route") and "+ the shared expert every token goes through" in said
    open_page(browser, moe_pages["qwen2"], f"#step=mlp&token={t}&layer=1")
    assert "Layer 1 is a dense MLP among the experts" in text(browser, "#step-mlp")
    assert errors(browser) == []


def test_moe_screenshots(browser, moe_pages, tmp_path):
    """At 1280×720 and a phone's 390×844: the MLP step's routing and map, the scores step's sink."""
    keep = os.environ.get("TRACER_PAGE_SCREENSHOTS")
    for size in (SIZE, PHONE):
        for name, address, scroll, file in (("oss", "#step=mlp&token=2", "table.route", "page-moe-mlp"),
                                            ("oss", "#step=scores&token=3&head=1", "table.scores", "page-sink-scores"),
                                            ("qwen2", "#step=mlp&token=6", "table.route", "page-moe-rerouted")):
            open_at(browser, moe_pages[name], address, size)
            if size == PHONE:
                browser.execute_script(f"document.querySelector({scroll!r}).scrollIntoView()")
            path = tmp_path / f"{file}-{size[0]}.png"
            assert browser.save_screenshot(str(path))
            assert struct.unpack(">II", path.read_bytes()[16:24]) == size
            if keep:
                shutil.copy(path, Path(keep) / path.name)
    assert errors(browser) == []


# --------------------------------------------------------------------------- a hybrid: linear attention's state


@pytest.fixture(scope="module")
def hybrid_page(tmp_path_factory, runner):
    """qwen3-5-tiny (linear attention on layers 0 and 2, gated softmax on 1 and 3), two tokens generated."""
    out = tmp_path_factory.mktemp("hybrid")
    r = runner.invoke(app, ["trace", "The quick brown fox", "-n", "2", "--model", str(Path(__file__).parent / "data" / "qwen3-5-tiny"),
                            "--export", str(out / "hybrid.html")], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    return out / "hybrid.html"


def table_numbers(driver, selector: str, n: int) -> list[np.ndarray]:
    """The numbers of the first n tables matching `selector`, a row per k_i."""
    return [np.array(rows, dtype=float) for rows in driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].slice(0, arguments[1]).map(t => [...t.tBodies[0].rows]"
        ".map(r => [...r.cells].slice(1).map(c => Number(c.title))))", selector, n)]


@pytest.mark.parametrize("size", [SIZE, PHONE])
def test_a_linear_layers_steps_work_its_state_update_and_fit(browser, hybrid_page, size):
    """The Q·K·V, scores and sum steps of a linear layer: the followed head's q, k, v, β and decay, the state
    before and after (their numbers the recorded states'), the recall and the error, one number by hand, the
    read-out; the loop step's bytes per kind of layer; nothing scrolls sideways, nothing garbled."""
    import json
    import re

    d = json.loads(re.search(r'id="trace-data">(.*?)</script>', hybrid_page.read_text(encoding="utf-8"), re.S).group(1))
    m = tracer.load(str(Path(__file__).parent / "data" / "qwen3-5-tiny"))
    st = m.run(m.prompt("The quick brown fox"))
    open_at(browser, hybrid_page, "#step=scores&layer=0&token=3&head=1", size)
    said = " ".join(text(browser, "#step-scores").split())
    assert "S before D: the state after C" in said and "one number of it by hand" in said
    assert d["layers"][0]["state"]["update"]["cell"][d["carried"].index(3)][1] in said
    before, after = table_numbers(browser, "#step-scores table.state", 2)
    np.testing.assert_allclose(before, st["blocks.0.attn.hook_state"][2, 1, :4, :4], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(after, st["blocks.0.attn.hook_state"][3, 1, :4, :4], rtol=1e-4, atol=1e-6)
    assert_reads_right(said, "scores")
    assert sideways(browser) == 0
    for step, words in (("qkv", f"β = sigmoid(ln1(x)·W_β[1]) = {num(st['blocks.0.attn.hook_beta'][3, 1], 3)}"),
                        ("sum", "read with the query: o = Sᵀq ÷ √d_k"), ("heads", "This layer keeps no keys and values")):
        open_at(browser, hybrid_page, f"#step={step}&layer=0&token=3&head=1", size)
        shown = " ".join(text(browser, f"#step-{step}").split())
        assert words in shown, step
        assert_reads_right(shown, step)
        assert sideways(browser) == 0, step
    open_at(browser, hybrid_page, "#step=scores&layer=2&token=14&head=0", size)  # a generated token: S from the cache
    assert "S before O: the state after N (from the cache: pass 0 computed it)" in " ".join(text(browser, "#step-scores").split())
    open_at(browser, hybrid_page, "#step=loop", size)
    loop = " ".join(text(browser, "#step-loop").split())
    assert "What each layer keeps for the next pass" in loop and "a state per head (linear attention)" in loop
    assert sideways(browser) == 0
    assert errors(browser) == []
    keep = os.environ.get("TRACER_PAGE_SCREENSHOTS")
    if keep:
        for address, scroll, file in (("#step=scores&layer=0&token=3&head=1", "#step-scores table.state", "page-linear-scores"),
                                      ("#step=loop", "#step-loop table.grid:last-of-type", "page-hybrid-cache")):
            open_at(browser, hybrid_page, address, size)
            browser.execute_script(f"document.querySelector({scroll!r}).scrollIntoView()")
            assert browser.save_screenshot(str(Path(keep) / f"{file}-{size[0]}.png"))


def test_the_page_says_what_the_models_file_suggests(browser, tmp_path, runner, gguf_of_folder):
    """A GGUF file with general.sampling.*: the tokens step says it as the terminal's header does."""
    pytest.importorskip("gguf")
    path = gguf_of_folder(Path(__file__).parent / "data" / "qwen2-tiny", "qwen2",
                          meta={"general.sampling.temp": 0.6, "general.sampling.top_p": 0.95,
                                "general.sampling.min_p": 0.05})
    args = ["trace", "hello there", "--model", str(path), "-n", "1"]
    r = runner.invoke(app, [*args, "--section", "tokens"], env={"COLUMNS": "300", "NO_COLOR": "1"})
    said = next(line for line in r.stdout.splitlines() if line.startswith("This file suggests"))
    assert said == "This file suggests temperature 0.6, top-p 0.95, min-p 0.05 (general.sampling.*); --sampling file uses them."
    r = runner.invoke(app, [*args, "--export", str(tmp_path / "f.html")], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    open_page(browser, tmp_path / "f.html")
    go(browser, "tokens")
    assert text(browser, "#file-sampling") == said and errors(browser) == []
