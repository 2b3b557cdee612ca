"""`tracer demo`: the classroom walkthrough, one step per screen."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..core.config import DEFAULT_MODEL, DEFAULT_PROMPT
from .app import ChatOpt, MemoryOpt, ModelOpt, ablation_record, ablations, app, make_console, memory_bytes


ARTICLE_PROMPT = ("You are a business consultant, please analyze the impact of rising oil prices "
                  "on the automotive industry.")


DEMO_NEW_TOKENS = 2  # tokens generated for `demo --prompt`: G, then one more pass that reads G and reuses A–F from the KV cache
MAX_AUTO = 86_400  # seconds of --auto: a day (a timer of inf or 1e300 seconds overflows the system's)


@app.command()
def demo(
    scenario: Annotated[Optional[str], typer.Argument(help="A shipped scenario name or .toml file: 'article' replays the seed article with its checks. Default: the trained model 'abc' on \"A B C D E F\".", show_default=False)] = None,
    prompt: Annotated[Optional[str], typer.Option("--prompt", help="Walk through this prompt (with --model) instead of a scenario. Default: \"A B C D E F\".")] = None,
    model: ModelOpt = DEFAULT_MODEL,
    auto: Annotated[Optional[float], typer.Option("--auto", help="Advance by itself every SECONDS.")] = None,
    quiz: Annotated[bool, typer.Option("--quiz", help="Pause before values the class can work out: predict, then press Enter.")] = False,
    export: Annotated[Optional[str], typer.Option("--export", help="Write every step as one self-contained HTML page (deck.html).")] = None,
    chat: ChatOpt = False,
    ablate: Annotated[Optional[list[str]], typer.Option("--ablate", help="Walk through the run with a part of the model removed (repeatable; as tracer trace --ablate: LAYER:HEAD, LAYER:HEAD:mean, LAYER:*, LAYER:mlp).")] = None,
    memory: MemoryOpt = None,
) -> None:
    """A paced, narrated classroom walkthrough: one step per screen.

    Keys: Enter/space/→ next, b/← back, a number then Enter jumps, q quits.
    Examples: tracer demo   (the trained model predicts G after A B C D E F);  tracer demo article --quiz
    """
    from ..errors import TracerError
    from ..render.demo import MAX_WIDTH, check_deck_path, show_demo

    if auto is not None and not 0 < auto <= MAX_AUTO:  # inf, 1e300: a timer the system cannot wait for
        raise TracerError(f"--auto must be a number of seconds > 0, got {auto:g}"
                          + ("" if auto <= 0 else f"; at most {MAX_AUTO:,} (a day)"))
    if scenario is not None and prompt is not None:
        raise TracerError("give a scenario or --prompt (with --model), not both")
    if ablate and scenario is not None:
        raise TracerError("--ablate changes a model run on --prompt; give --prompt (and --model), not a scenario")
    if chat and scenario is not None:
        raise TracerError("--chat applies a model's chat template to --prompt; a scenario has none")
    budget = memory_bytes(memory)
    if scenario is None and prompt is None:
        prompt = DEFAULT_PROMPT
    if export is not None:
        check_deck_path(export)
    console = make_console()
    if console.width > MAX_WIDTH:  # legible on a projector
        console = make_console(width=MAX_WIDTH)
    if console.is_terminal:
        with console.status("running the model and recording every step…"):
            d = _demo_run(scenario, prompt, model, chat, ablate or (), budget)
    else:
        d = _demo_run(scenario, prompt, model, chat, ablate or (), budget)
    if d.cfg.n_layers < 1:
        raise TracerError(f"model {d.trace.meta.get('model')!r}: has no layers; the demo walks through at least one")
    show_demo(d, console, quiz=quiz, auto=auto, export=export)


def _demo_run(scenario: str, prompt: str | None, model: str, chat: bool = False, ablate=(), memory: int | None = None):
    """The demo's recorded run: a scenario replayed (with its checks), or a prompt through --model."""
    from ..loaders import load
    from ..render.demo import Demo
    from ..replay import replay as run

    if prompt is None:
        done = run(scenario)
        return Demo(done.gen, done.model.tokenizer, title=done.scenario.title or scenario, checks=done.checks,
                    notes=list(done.scenario.notes))
    m = load(model, memory=memory)
    text = m.prompt(prompt, chat=chat)
    removed, hooks = ablations(m, ablate)
    from ..render.progress import layers_progress
    from ..run.footprint import check_room

    new = max(0, min(DEMO_NEW_TOKENS, m.config.n_ctx - len(text.ids)))
    check_room(m, len(text.ids), new)  # a prompt whose recording cannot fit: refused before the first pass
    with layers_progress(m):  # a streamed model: the layers' bar on stderr, Ctrl-C between layers
        gen = m.generate(text, max_new_tokens=new, hooks=hooks)
    if hooks:
        gen.meta["ablation"] = ablation_record(m, text.ids, ablate, removed, hooks)
        prompt = f"{prompt} without {' and '.join(removed)}"
    return Demo(gen, m.tokenizer, title=f"{m.name}: {prompt[:40]}" + ("…" if len(prompt) > 40 else ""))
