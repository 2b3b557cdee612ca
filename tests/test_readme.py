"""The README's Python example runs as written, and its stated results hold; every pasted output of the README
and of the docs/ pages is what its command prints now."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs_and_its_comments_hold(tmp_path, monkeypatch):
    text = README.read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)  # the example saves a file
    env: dict = {}
    exec(compile(code, "README.md", "exec"), env)
    trace, model, gen = env["trace"], env["model"], env["gen"]
    np.testing.assert_allclose(trace["blocks.0.attn.hook_q"][1, 0], [0.7, 0.1, 0.3, -0.4, 0.2], atol=1e-12)
    np.testing.assert_allclose(trace["blocks.0.attn.hook_attn_scores"][0, 1, :2], [0.67, 0.58], atol=1e-12)
    np.testing.assert_allclose(trace["blocks.0.attn.hook_pattern"][0, 1, :2], [0.52248482, 0.47751518], atol=1e-8)
    assert [model.tokenizer.token_str(t) for t in gen.generated_ids] == ["G", "H", "<end>"]
    assert gen.steps[1].start == 6
    assert (tmp_path / "article.npz").exists()


def test_readme_starts_with_the_two_commands_and_ci_runs_the_second():
    blocks = re.findall(r"```bash\n(.*?)\n```", README.read_text(), re.S)
    assert blocks[0].endswith('.venv/bin/tracer trace "A B C D E F"')  # the trained model predicting G
    ci = (README.parent / ".ci" / "run").read_text()
    assert blocks[1] in ci.splitlines()  # .ci/run runs exactly the README's test command


def _pasted():
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_output", README.parent / "tools" / "readme_output.py")
    mod = importlib.util.module_from_spec(spec)
    import sys

    sys.modules[spec.name] = mod  # its dataclass looks its module up
    spec.loader.exec_module(mod)
    return mod


PASTED = _pasted()
RUNS = [(page.name, r) for page in PASTED.pages() for r in PASTED.blocks(page.read_text(encoding="utf-8"))]


def test_every_pasted_output_block_names_its_command():
    """Each fenced block of output (no language) in the README and the docs/ pages says which command printed
    it (`<!-- output: … -->`); a block that is not output names its language (```text, ```bash, …)."""
    assert len(RUNS) >= 17 and {page for page, _ in RUNS} >= {"README.md", "walkthrough.md", "gguf.md", "teaching.md"}
    unnamed = []
    for page in PASTED.pages():
        lines, inside = page.read_text(encoding="utf-8").split("\n"), False
        for i, line in enumerate(lines):
            if line.startswith("```"):
                if not inside and line == "```" and not lines[i - 1].startswith("<!-- output: "):
                    unnamed.append((page.name, lines[i + 1]))  # a block of output without its command
                inside = not inside
    servers = [("lesson.md", "tracer serve: open http://127.0.0.1:8000/  (models: abc; 2 workers, queue 16; Ctrl-C stops)"),
               ("serve.md", "$ tracer serve --host 0.0.0.0 --model abc --model tiny")]
    assert unnamed == servers, unnamed  # what a server prints as it starts: not run here


@pytest.mark.parametrize("run", [pytest.param(r, id=f"{page}: {r.command[:70]}",
                                              marks=[pytest.mark.slow] if ".gguf" in r.command else [])
                                 for page, r in RUNS])
def test_pasted_output_is_what_its_command_prints(run):
    """Each pasted line (README.md, docs/*.md) is, in order, a line of what the command prints now (numbers within two units of
    their last decimal: another CPU's rounding). `python tools/readme_output.py --write` refreshes them."""
    missing = PASTED.needs(run.command)
    if missing is not None:
        pytest.skip(f"needs {missing} (tests/test_real_smollm2.py fetches it into ~/.cache/tracer-tests)")
    wrong = PASTED.compare(run.expected, PASTED.run(run.command))
    assert not wrong, f"{run.command}:\n" + "\n".join(wrong)
