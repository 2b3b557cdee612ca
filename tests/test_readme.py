"""The README's Python example runs as written, and its stated results hold."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

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
    np.testing.assert_allclose(trace["blocks.0.attn.hook_pattern"][0, 1, :2], [0.522, 0.478], atol=5e-4)
    assert [model.tokenizer.token_str(t) for t in gen.generated_ids] == ["G", "H", "<end>"]
    assert gen.steps[1].start == 6
    assert (tmp_path / "article.npz").exists()


def test_readme_starts_with_the_two_commands_and_ci_runs_the_second():
    blocks = re.findall(r"```bash\n(.*?)\n```", README.read_text(), re.S)
    assert blocks[0].endswith('.venv/bin/tracer trace "A B C D E F"')  # the trained model predicting G
    ci = (README.parent / ".ci" / "run").read_text()
    assert blocks[1] in ci.splitlines()  # .ci/run runs exactly the README's test command
