"""`tracer lesson new` and `tracer lesson check`: the lesson files `tracer serve --lesson FILE.toml` leads a
class through (docs/lesson.md)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..core.config import DEFAULT_MODEL, DEFAULT_PROMPT
from .app import MemoryOpt, app

lesson_app = typer.Typer(name="lesson", help="Lesson files for tracer serve --lesson: write one (new), check one (check).",
                         no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
app.add_typer(lesson_app)


@lesson_app.command()
def new(
    model: Annotated[str, typer.Option("--model", "-m", help="The model the lesson pins (any --model of tracer trace); its next-token question is its own prediction.")] = DEFAULT_MODEL,
    prompt: Annotated[str, typer.Option("--prompt", help="The starter prompt every page opens on.")] = DEFAULT_PROMPT,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write the lesson to FILE.toml (an existing file is not replaced). Default: print it.")] = None,
    memory: MemoryOpt = None,
) -> None:
    """Write a lesson from the article's walkthrough: one step per step of the page, with notes and three questions.

    Example: tracer lesson new -o lesson.toml && tracer serve --lesson lesson.toml
    """
    from pathlib import Path

    from ..errors import TracerError
    from ..formats.files import atomic_write, check_output_path
    from ..loaders import load
    from ..render.words_lesson import STARTER_HEADER, STARTER_NOTES, STARTER_QUESTIONS, STARTER_TITLE
    from ..run.settings import setting
    from ..scenario.lesson import check_with_model, lesson_text, load_lesson, starter_steps

    if output is not None:
        check_output_path(output, "--output", (".toml",))
        if Path(output).exists():
            raise TracerError(f"--output {output}: exists; give another name (a lesson file is never replaced)")
    m = load(model, memory=memory)
    new_tokens = min(setting("max_new_tokens").run_default, max(m.config.n_ctx - len(m.tokenizer.encode(prompt)), 0))
    steps = starter_steps(m, prompt, STARTER_NOTES, STARTER_QUESTIONS, new_tokens)
    text = lesson_text(STARTER_TITLE, model, prompt, {"max_new_tokens": new_tokens, "temperature": 0.0}, steps,
                       header=STARTER_HEADER)
    if output is None:
        typer.echo(text, nl=False)
        return
    atomic_write(output, lambda f: f.write(text.encode("utf-8")))
    check_with_model(load_lesson(output), m)  # what it wrote reads back as it is meant
    typer.echo(f"wrote {output}: {len(steps)} steps; run it with: tracer serve --lesson {output}", err=True)


@lesson_app.command()
def check(
    file: Annotated[str, typer.Argument(help="The lesson file (.toml).")],
    memory: MemoryOpt = None,
) -> None:
    """Check a lesson file: its keys, then against its model (the prompt fits, the layers and heads exist, each
    next-token question's answer is the model's own top prediction).

    Example: tracer lesson check lesson.toml
    """
    from ..loaders import load
    from ..scenario.lesson import check_with_model, load_lesson

    lesson = load_lesson(file)
    check_with_model(lesson, load(lesson.model, memory=memory))
    typer.echo(f"{file}: ok: {lesson.title!r}, {len(lesson.steps)} steps, {len(lesson.questions)} questions, model "
               f"{lesson.model}" + (", pinned: " + ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in lesson.settings.items())
                                    if lesson.settings else ""))
