"""The generation settings, each declared once (`tracer.run.settings.SETTINGS`): a setting added to the table
from this file alone is a CLI option of `trace` and `demo` (range-checked, in `--help`), a key of a scenario's
`[generate]`, a field of a request to `tracer serve` (422 naming it), listed by `/api/limits` and in the served
form, carried by `--json`, the trace file and the page's data. A run's settings are never None: a single pass
holds greedy settings, and a file written without them still loads."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.cli import app
from tracer.run import settings as declared
from tracer.run.settings import GenerationSettings, Setting, SettingError

# A min-p–like setting, as the decoding issue's settings will be declared: a number in (0, 1], off by default.
TOY = Setting("min_q", "number", None, low=0.0, high=1.0, low_open=True, optional=True, step=0.05, off="off",
              help="Keep tokens whose probability is at least q times the top one's (a toy of the tests).",
              words=lambda q: f"min-q {q:g}")


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(declared, "SETTINGS", (*declared.SETTINGS, TOY))
    return TOY


def one_line_error(r, *needles) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and "Traceback" not in r.stderr, (r.exit_code, r.stderr)
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------------- the toy setting, everywhere


def test_a_setting_added_to_the_table_is_checked_by_generation_settings(toy):
    assert GenerationSettings(min_q=0.25).min_q == 0.25 and GenerationSettings().min_q is None
    for bad in (0, 0.0, 1.5, -1, float("nan"), "x", True):
        with pytest.raises(SettingError, match=r"^min-q must be in \(0, 1\], got ") as e:
            GenerationSettings(min_q=bad)
        assert e.value.field == "min_q"
    assert GenerationSettings().replace(min_q=1).to_dict()["min_q"] == 1.0


def test_a_setting_added_to_the_table_is_a_cli_option_range_checked_and_in_json(toy, runner):
    r = runner.invoke(app, ["trace", "A B C", "--min-q", "0.5", "-n", "1", "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["settings"]
    assert got["min_q"] == 0.5 and got["max_new_tokens"] == 1 and got["stopped"] == "max_new_tokens"
    one_line_error(runner.invoke(app, ["trace", "A B C", "--min-q", "0"]), "min-q must be in (0, 1], got 0.0")
    one_line_error(runner.invoke(app, ["trace", "A B C", "--min-q", "1.5"]), "--min-q")  # typer's range, as --top-p's
    one_line_error(runner.invoke(app, ["demo", "--min-q", "2"]), "--min-q")
    one_line_error(runner.invoke(app, ["demo", "article", "--min-q", "0.5"]), "--min-q", "[generate]")
    for command in ("trace", "demo"):
        helped = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).stdout
        assert "--min-q" in helped and "a toy of the tests" in helped


def test_a_setting_added_to_the_table_is_a_key_of_a_scenarios_generate_table(toy, tmp_path):
    from tracer.errors import TracerError
    from tracer.scenario import load_scenario

    base = (Path(__file__).resolve().parents[1] / "scenarios" / "article.toml").read_text(encoding="utf-8")
    assert "\n[generate]\n" in base
    path = tmp_path / "toy.toml"
    path.write_text(base.replace("\n[generate]\n", "\n[generate]\nmin_q = 0.5\n"), encoding="utf-8")
    assert load_scenario(path).settings.min_q == 0.5
    path.write_text(base.replace("\n[generate]\n", "\n[generate]\nmin_q = 0\n"), encoding="utf-8")
    with pytest.raises(TracerError, match=r"generate\.min_q.*must be in \(0, 1\]"):
        load_scenario(path)


def test_a_setting_added_to_the_table_is_a_request_field_checked_and_listed_by_the_server(toy):
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    from tracer.loaders import load
    from tracer.serve.app import make_app
    from tracer.serve.engine import Engine
    from tracer.serve.limits import Limits, RequestError, parse_trace_request

    req = parse_trace_request(json.dumps({"prompt": "A", "min_q": 0.5}).encode(), ["abc"], Limits(), "abc")
    assert req.settings["min_q"] == 0.5 and req.to_dict()["min_q"] == 0.5
    assert parse_trace_request(b'{"prompt": "A"}', ["abc"], Limits(), "abc").settings["min_q"] is None
    for bad in (0, 1.5, "half", True):
        with pytest.raises(RequestError) as e:
            parse_trace_request(json.dumps({"prompt": "A", "min_q": bad}).encode(), ["abc"], Limits(), "abc")
        assert e.value.status == 422 and e.value.field == "min_q" and e.value.message.startswith("min_q: ")
    engine = Engine({"abc": load("abc")}, workers=1, queue=1)
    try:
        with TestClient(make_app(engine)) as client:
            limits = client.get("/api/limits").json()
            assert limits["limits"]["min_q"] == 1.0 and limits["limits"]["temperature"] == 100.0
            assert {"name": "min_q", "kind": "number", "default": None, "low": 0.0, "low_open": True, "most": 1.0,
                    "optional": True, "choices": None} in limits["settings"]
            page = client.get("/").text
            assert 'id="gen-min-q" name="min_q" type="number"' in page and "a toy of the tests" in page
            r = client.post("/api/trace", json={"prompt": "A B", "model": "abc", "max_new_tokens": 1, "min_q": 0.5})
            assert r.status_code == 200 and r.json()["settings"]["min_q"] == 0.5
            assert r.json()["page"]["settings"]["min_q"] == 0.5  # the page's data, as the header says the settings
            r = client.post("/api/trace", json={"prompt": "A B", "model": "abc", "min_q": 2})
            assert r.status_code == 422 and r.json()["field"] == "min_q"
    finally:
        engine.close()


def test_a_setting_added_to_the_table_is_kept_by_the_api_the_file_and_the_header(toy, tmp_path):
    from tracer.render.header import settings_words

    m = tracer.load("abc")
    gen = m.generate("A B C", max_new_tokens=1, min_q=0.5)
    assert gen.settings.min_q == 0.5 and "min-q 0.5" in settings_words(gen)
    gen.save(tmp_path / "t.npz")
    assert tracer.Generation.load(tmp_path / "t.npz").settings == gen.settings


def test_a_file_written_before_a_setting_existed_loads_with_its_default(toy, tmp_path, monkeypatch):
    m = tracer.load("abc")
    with monkeypatch.context() as without:
        without.setattr(declared, "SETTINGS", declared.SETTINGS[:-1])
        m.generate("A B", max_new_tokens=1).save(tmp_path / "old.npz")
    assert tracer.Generation.load(tmp_path / "old.npz").settings.min_q is None


# --------------------------------------------------------------------------- never None


def test_a_single_pass_holds_greedy_settings_and_saves_them(tmp_path):
    m = tracer.load("abc")
    t = m.run("A B C")
    assert t.settings == GenerationSettings(max_new_tokens=0) and t.settings.greedy
    t.save(tmp_path / "one.npz")
    back = tracer.Generation.load(tmp_path / "one.npz")
    assert back.settings == t.settings and back.stopped == "max_new_tokens"
    assert t.as_generation().settings is t.settings


def test_a_file_without_settings_loads_with_greedy_settings_for_what_it_generated(tmp_path):
    m = tracer.load("abc")
    m.generate("A B", max_new_tokens=2).save(tmp_path / "new.npz")
    with np.load(tmp_path / "new.npz", allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files}
    meta = json.loads(str(entries["meta"]))
    del meta["settings"]  # as a single pass was saved before every pass recorded its settings
    entries["meta"] = np.array(json.dumps(meta))
    np.savez(tmp_path / "old.npz", **entries)
    gen = tracer.Generation.load(tmp_path / "old.npz")
    assert gen.settings == GenerationSettings(max_new_tokens=2) and gen.stopped is None
    assert all(step.settings is gen.settings for step in gen.steps)


def test_no_renderer_defaults_missing_settings():
    """Settings are never None, so no renderer (Python or the page's scripts) falls back to greedy ones."""
    root = Path(tracer.__file__).parent
    found = []
    for path in sorted((root / "render").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value is None for c in node.comparators) \
                    and isinstance(node.left, ast.Attribute) and node.left.attr == "settings":
                found.append(f"{path.name}:{node.lineno}")
    for path in sorted((root / "render" / "page").glob("*.js")):
        for i, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if re.search(r"D\.settings\s*(\?|&&|\|\|)|D\.run\s*\?", text):
                found.append(f"{path.name}:{i}")
    assert not found, found


# --------------------------------------------------------------------------- the table


def test_every_setting_is_declared_whole():
    for s in declared.SETTINGS:
        assert s.kind in declared.KINDS and s.help.endswith(".") and s.name.isidentifier()
        assert s.check(s.default) == s.default or s.check(s.default) == tuple(s.default)  # the default is a value
        assert s.check(s.run_default) is not None or s.optional


def test_the_cli_options_are_the_declarations(runner):
    helped = runner.invoke(app, ["trace", "--help"], env={"COLUMNS": "300"}).stdout
    for s in declared.SETTINGS:
        assert s.flag in helped and s.help in " ".join(helped.split()), s.name
    assert "-n, --max-new-tokens" in helped and "-t, --temperature" in helped and "--cache / --no-cache" in helped


def test_the_server_refuses_each_setting_out_of_its_range_naming_it():
    from tracer.serve.limits import Limits, RequestError, fields_of_request, parse_trace_request

    assert fields_of_request() == ("prompt", "model", "max_new_tokens", "temperature", "top_k", "top_p", "min_p",
                                   "repetition_penalty", "presence_penalty", "frequency_penalty", "penalty_last_n",
                                   "seed", "beams", "length_penalty", "draft", "draft_tokens", "sampling", "chat",
                                   "force")
    limits = Limits()
    for s in declared.served():
        most = limits.most(s)
        above = (most + 1) if most is not None else None
        for bad in [v for v in (above, "x", [1]) if v is not None]:
            with pytest.raises(RequestError) as e:
                parse_trace_request(json.dumps({"prompt": "A", s.name: bad}).encode(), ["abc"], limits, "abc")
            assert e.value.status == 422 and e.value.field == s.name
