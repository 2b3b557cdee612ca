"""Progress bars (`tracer.render.progress`): drawn only for multi-token runs of large models on a
terminal, and advanced once per generated token. Reading big weights files with a bar is tested
with the files, in `test_reader_gpt2.py`."""

from __future__ import annotations

import io

from tracer.core.config import Config
from tracer.render import progress as PR


def test_progress_only_for_big_models_on_a_terminal(word_model, terminal):
    small = word_model().config.n_params()
    assert not PR.wants_progress(small, 10, terminal)
    big = Config(n_layers=12, d_model=768, n_heads=12).n_params()  # GPT-2's shapes: 124M parameters
    assert PR.wants_progress(big, 10, terminal)
    assert not PR.wants_progress(big, 1, terminal)  # one token: nothing to wait for
    assert not PR.wants_progress(big, 10, io.StringIO())  # piped
    with PR.generation_progress(big, 10, stream=io.StringIO()) as on_step:
        assert on_step is None


def test_progress_bar_follows_the_steps(word_model, terminal):
    m = word_model()
    seen = []
    with PR.generation_progress(m.config.n_params(), 3, stream=terminal, force=True) as on_step:
        assert on_step is not None
        m.generate([1], max_new_tokens=3, on_step=lambda d, t: (seen.append((d, t)), on_step(d, t)))
    assert seen == [(1, 3), (2, 3), (3, 3)]
