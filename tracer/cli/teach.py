"""`tracer demo`: the classroom walkthrough, one step per screen."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..core.config import DEFAULT_MODEL, DEFAULT_PROMPT
from ..run.ablation import Ablation
from ..run.settings import GenerationSettings
from .app import ChatOpt, MemoryOpt, ModelOpt, ablation_hooks, ablation_record, app, make_console, streamed_layers
from .settings import SETTING_OPTIONS, given, with_settings


ARTICLE_PROMPT = ("You are a business consultant, please analyze the impact of rising oil prices "
                  "on the automotive industry.")


MAX_AUTO = 86_400  # seconds of --auto: a day (a timer of inf or 1e300 seconds overflows the system's)


@app.command()
@with_settings
def demo(
    scenario: Annotated[Optional[str], typer.Argument(help="A shipped scenario name or .toml file: 'article' replays the seed article with its checks. Default: the trained model 'abc' on \"A B C D E F\".", show_default=False)] = None,
    prompt: Annotated[Optional[str], typer.Option("--prompt", help="Walk through this prompt (with --model) instead of a scenario. Default: \"A B C D E F\".")] = None,
    model: ModelOpt = DEFAULT_MODEL,
    settings: GenerationSettings = SETTING_OPTIONS,  # as trace's: -n 2 is G, then one pass through the KV cache
    auto: Annotated[Optional[float], typer.Option("--auto", help="Advance by itself every SECONDS.")] = None,
    quiz: Annotated[bool, typer.Option("--quiz", help="Pause before values the class can work out: predict, then press Enter.")] = False,
    export: Annotated[Optional[str], typer.Option("--export", help="Write every step as one self-contained HTML page (deck.html).")] = None,
    chat: ChatOpt = False,
    ablate: Annotated[Optional[list[Ablation]], typer.Option("--ablate", parser=Ablation.parse, metavar="<list[str]>", help="Walk through the run with a part of the model removed (repeatable; as tracer trace --ablate: LAYER:HEAD, LAYER:HEAD:mean, LAYER:*, LAYER:mlp, LAYER:expert:E).")] = None,
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
    if given(settings) and scenario is not None:
        raise TracerError(f"{given(settings)[0].flag} changes a model run on --prompt; a scenario has its own [generate]")
    if scenario is None and prompt is None:
        prompt = DEFAULT_PROMPT
    if export is not None:
        check_deck_path(export)
    console = make_console()
    if console.width > MAX_WIDTH:  # legible on a projector
        console = make_console(width=MAX_WIDTH)
    if console.is_terminal:
        with console.status("running the model and recording every step…"):
            d = _demo_run(scenario, prompt, model, chat, ablate or (), memory, settings)
    else:
        d = _demo_run(scenario, prompt, model, chat, ablate or (), memory, settings)
    if d.cfg.n_layers < 1:
        raise TracerError(f"model {d.trace.meta.get('model')!r}: has no layers; the demo walks through at least one")
    show_demo(d, console, quiz=quiz, auto=auto, export=export)


def _demo_run(scenario: str, prompt: str | None, model: str, chat: bool = False, ablate=(), memory=None,
              settings: GenerationSettings | None = None):
    """The demo's recorded run: a scenario replayed (with its checks), or a prompt through --model with `settings`
    (None: the commands' defaults; new tokens not asked for: as many as the context holds, up to the default's 2;
    `ablate`: `Ablation` values; `memory`: a `Size` or bytes)."""
    from ..loaders import load
    from ..render.demo import Demo
    from ..replay import replay as run
    from .settings import defaults

    if prompt is None:
        done = run(scenario)
        return Demo(done.gen, done.model.tokenizer, title=done.scenario.title or scenario, checks=done.checks,
                    notes=list(done.scenario.notes))
    m = load(model, memory=memory)
    settings = defaults() if settings is None else settings
    asked = any(s.name == "max_new_tokens" for s in given(settings))
    text = m.prompt(prompt, None, settings.max_new_tokens if asked else 0, chat=chat)
    if not asked:
        settings = settings.replace(max_new_tokens=max(0, min(settings.max_new_tokens, m.config.n_ctx - len(text.ids))))
    hooks = ablation_hooks(m, ablate)
    from ..render.progress import layers_progress
    from ..run.footprint import check_room

    check_room(m, len(text.ids), settings.max_new_tokens, cache=settings.cache)  # a recording that cannot fit: refused first
    with layers_progress(streamed_layers(m)):  # a streamed model: the layers' bar on stderr, Ctrl-C between layers
        gen = m.generate(text, settings=settings, hooks=hooks)
    if hooks:
        gen.meta["ablation"] = ablation_record(m, text.ids, ablate, hooks)
        prompt = f"{prompt} without {' and '.join(a.words for a in ablate)}"
    return Demo(gen, m.tokenizer, title=f"{m.name}: {prompt[:40]}" + ("…" if len(prompt) > 40 else ""))
