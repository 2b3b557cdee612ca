"""A led lesson in a real browser: a real `tracer serve --lesson` on a free port of 127.0.0.1 (the starter lesson
`tracer lesson new` writes), the teacher's page and two students' pages in Debian's headless Chromium (three
windows of one browser; skipped where chromium or chromedriver is missing).

Each student types a prompt of their own; the teacher's ▶ moves both pages to the lesson's step, its layer, head
and token (the last prompt token of each student's own prompt); the question's tally on the teacher's page counts
both answers, the reveal marks each student's answer right or wrong; a head the teacher clicks is every page's; a move from another teacher's page moves this one and the class; a student who leaves follow mode stays where
they are and comes back when they tick it again; no page ever holds another page's prompt. Then a student's page
on a phone (390×844): nothing scrolls sideways, the bar and the question fit, and its screenshot is kept
(`TRACER_LESSON_SCREENSHOTS=DIR` keeps it and the teacher's; docs/lesson-phone.png is one).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tracer.cli import app as cli_app

pytestmark = pytest.mark.slow

SIZE, PHONE = (1280, 720), (390, 844)
JOINED = "return document.body.dataset.lesson === 'joined' && document.body.dataset.step"
PROMPTS = ("Monday Tuesday Wednesday", "J K L M N")  # each student's own; the lesson's starter is "A B C D E F"


@pytest.fixture(scope="module")
def lesson(tmp_path_factory, runner, serve_process):
    """(the class's address, the teacher's) of a lesson server on 127.0.0.1 (at most 4 pages follow)."""
    path = tmp_path_factory.mktemp("lesson") / "lesson.toml"
    r = runner.invoke(cli_app, ["lesson", "new", "-o", str(path)])
    assert r.exit_code == 0, r.output
    proc, base = serve_process.start("--lesson", str(path), "--followers", "4", until="teacher")
    teacher = re.search(r"teacher \(printed only now; keep it to yourself\): (\S+)", proc.printed).group(1)
    yield base, teacher
    code, err = serve_process.stop(proc)
    assert code == 0 and "Traceback" not in err, err


@pytest.fixture(scope="module")
def windows(chromium, lesson, served_page):
    """One browser, three windows: {"teacher": handle, "ann": handle, "ben": handle}, each page open and joined."""
    base, teacher = lesson
    driver = chromium(SIZE)
    try:
        handles = {"teacher": driver.current_window_handle}
        driver.get(teacher)
        served_page.wait_for(driver, JOINED)
        for name in ("ann", "ben"):
            driver.switch_to.new_window("window")
            handles[name] = driver.current_window_handle
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                   {"width": SIZE[0], "height": SIZE[1], "deviceScaleFactor": 1, "mobile": False})
            driver.get(base + "/")
            served_page.wait_for(driver, JOINED)
        yield driver, handles
    finally:
        driver.quit()


def on(driver, handles, name):
    driver.switch_to.window(handles[name])
    return driver


def where(driver) -> dict:
    """What the page shows: its step, the layer, head and token its address holds, its prompt's length."""
    return driver.execute_script("""const q = new URLSearchParams(location.hash.slice(1));
        const d = JSON.parse(document.getElementById('trace-data').textContent);
        return {step: document.body.dataset.step, layer: q.get('layer'), head: q.get('head'), token: q.get('token'),
                n_prompt: d.n_prompt, question: document.body.dataset.question, runs: document.body.dataset.runs,
                lesson: document.getElementById('lesson-step').textContent,
                sideways: document.documentElement.scrollWidth - document.documentElement.clientWidth}""")


def source(driver) -> str:
    return driver.execute_script("return document.documentElement.outerHTML")


def click(driver, selector: str):
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, selector).click()


def severe(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_two_students_follow_the_teacher_and_answer(windows, served_page, lesson):
    import httpx

    driver, handles = windows
    wait_for, run_prompt = served_page.wait_for, served_page.run_prompt
    students = ("ann", "ben")
    assert not any(p in source(on(driver, handles, n)) for p in PROMPTS for n in handles)
    for name, prompt in zip(students, PROMPTS):  # each types a prompt of their own
        run_prompt(on(driver, handles, name), prompt)
        assert driver.execute_script("return document.body.dataset.serve") == "done"
    lengths = {name: where(on(driver, handles, name))["n_prompt"] for name in students}
    assert lengths["ann"] != lengths["ben"]

    teacher = on(driver, handles, "teacher")
    for _ in range(3):  # ▶ ▶ ▶: the lesson's 4th step, the attention scores of the last layer, head 0, the last token
        click(teacher, "#lesson-next")
        time.sleep(0.3)
    assert where(teacher)["lesson"].startswith("4 of 12")
    for name in students:
        page = on(driver, handles, name)
        wait_for(page, "return document.body.dataset.step === 'scores' && document.body.dataset.question === 'open'")
        got = where(page)
        assert (got["layer"], got["head"], got["token"]) == ("3", "0", str(lengths[name] - 1)), (name, got)
        assert got["lesson"].startswith("4 of 12") and page.find_element("id", "main").is_displayed() is False  # the step waits

    for name, choice in zip(students, (0, 2)):  # ann answers right (the causal mask), ben wrong
        page = on(driver, handles, name)
        click(page, f'#question-choices [data-choice="{choice}"]')
        wait_for(page, f"""return document.querySelector('#question-choices [data-choice="{choice}"]')
                          .getAttribute('aria-pressed') === 'true'""")
    teacher = on(driver, handles, "teacher")
    wait_for(teacher, "return document.getElementById('tally').dataset.answered === '2'")
    counts = teacher.execute_script("return [...document.querySelectorAll('#question-choices .count')].map(e => e.dataset.count)")
    assert counts == ["1", "0", "1"]
    assert "2 of 2 pages answered" in teacher.find_element("id", "tally").text
    click(teacher, "#reveal")
    for name, mark in zip(students, ("✓", "✗")):
        page = on(driver, handles, name)
        wait_for(page, "return document.body.dataset.question === 'shown'")
        assert page.find_element("id", "question-note").text.startswith(mark)
        assert page.find_element("id", "main").is_displayed()  # the step shows once the answer is out

    click(on(driver, handles, "teacher"), '#heads [data-head="2"]')  # the teacher's own click on the page moves the class
    for name in students:
        wait_for(on(driver, handles, name), "return new URLSearchParams(location.hash.slice(1)).get('head') === '2'")

    ben = on(driver, handles, "ben")  # ben leaves follow mode: the class moves on, ben stays
    click(ben, "#follow")
    click(on(driver, handles, "teacher"), "#lesson-next")
    wait_for(on(driver, handles, "ann"), "return document.body.dataset.step === 'sum'")
    time.sleep(1)
    assert where(on(driver, handles, "ben"))["step"] == "scores"
    click(on(driver, handles, "ben"), "#follow")  # and back: the teacher's step at once
    wait_for(on(driver, handles, "ben"), "return document.body.dataset.step === 'sum'")

    base, secret_address = lesson  # another teacher's page (the laptop beside the projector) moves the class
    moved = httpx.post(secret_address + "/move", json={"lesson_step": 7, "show": "layers", "layer": 1}, timeout=10).json()
    for name in handles:  # this teacher's page goes there too, and every student's
        wait_for(on(driver, handles, name), "return document.body.dataset.step === 'layers' && "
                                            "new URLSearchParams(location.hash.slice(1)).get('layer') === '1'")
    assert where(on(driver, handles, "teacher"))["lesson"].startswith("8 of 12")
    time.sleep(1)
    assert httpx.get(base + "/api/lesson/state").json()["version"] == moved["version"]  # nothing sent back
    httpx.post(secret_address + "/move", json={"lesson_step": 4, "show": "sum"}, timeout=10)
    wait_for(on(driver, handles, "teacher"), "return document.body.dataset.step === 'sum'")

    for name, prompt in zip(students, PROMPTS):  # no page holds another's prompt, the teacher's none
        others = [n for n in handles if n != name]
        assert prompt in source(on(driver, handles, name))
        assert not any(prompt in source(on(driver, handles, n)) for n in others), name
    for name in handles:
        assert not severe(on(driver, handles, name)), name


def test_a_students_page_on_a_phone(windows, served_page, tmp_path):
    driver, handles = windows
    wait_for = served_page.wait_for
    ann = on(driver, handles, "ann")
    ann.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                        {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 2, "mobile": True})
    try:
        click(on(driver, handles, "teacher"), "#lesson-prev")  # back to the question's step (the answer shown)
        ann = on(driver, handles, "ann")
        wait_for(ann, "return document.body.dataset.step === 'scores'")
        time.sleep(0.5)
        got = where(ann)
        assert got["sideways"] <= 0, got
        boxes = ann.execute_script("""return ['lesson-bar', 'question', 'follow-label'].map(id => {
            const r = document.getElementById(id).getBoundingClientRect(); return [r.left, r.right, r.height]; })""")
        assert all(0 <= left and right <= PHONE[0] for left, right, _ in boxes), boxes
        assert boxes[2][2] >= 40  # follow mode's box and words: a thumb's target
        keep = Path(os.environ.get("TRACER_LESSON_SCREENSHOTS") or tmp_path)
        keep.mkdir(parents=True, exist_ok=True)
        assert ann.save_screenshot(str(keep / "lesson-phone.png")) and (keep / "lesson-phone.png").stat().st_size > 10_000
        teacher = on(driver, handles, "teacher")  # the teacher's page too, as a phone in the teacher's hand
        assert teacher.save_screenshot(str(keep / "lesson-teacher.png"))
        teacher.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 2, "mobile": True})
        time.sleep(0.3)
        assert where(teacher)["sideways"] <= 0
        assert teacher.execute_script("return document.getElementById('lesson-next').getBoundingClientRect().height") >= 44
        assert teacher.save_screenshot(str(keep / "lesson-teacher-phone.png"))
    finally:
        for name in ("ann", "teacher"):
            on(driver, handles, name).execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                                      {"width": SIZE[0], "height": SIZE[1], "deviceScaleFactor": 1,
                                                       "mobile": False})
