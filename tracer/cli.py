"""The `tracer` command: thin typer commands that parse, call the core, and print.

Errors: a `TracerError` (bad input) prints one line on stderr and exits 2; any other exception
is a bug in tracer and exits 1 with a one-line message (`--debug` shows the traceback).
Heavy modules are imported inside the commands so that `tracer --help` stays fast.
"""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup


class _Group(TyperGroup):
    """Turns exceptions from any command into one line on stderr and an exit code."""

    def invoke(self, ctx):
        from .errors import TracerError

        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except TracerError as e:
            if STATE["debug"]:
                raise
            _echo_err(str(e))
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            _echo_err("interrupted")
            raise typer.Exit(130) from None
        except Exception as e:
            if STATE["debug"]:
                raise
            _echo_err(f"internal error: {type(e).__name__}: {e} (run with --debug for the traceback; please report it)")
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_Group,
    name="tracer",
    help="Every number of a transformer decoder's autoregressive generation, step by step.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

STATE = {"debug": False}

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="'tiny' (default, untrained), a scenario name or .toml, a GPT-2 folder or name, or a tracer weights file.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for weights not given and for the sampling draw.")]


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show Python tracebacks on errors.")] = False) -> None:
    STATE["debug"] = debug


def _echo_err(message: str) -> None:
    typer.echo(f"tracer: {message}", err=True)


TokenOpt = Annotated[Optional[str], typer.Option("--token", help="Show this token step by step: a letter (B) or a 0-based position (1). Default: every prompt token.")]
LayerOpt = Annotated[str, typer.Option("--layer", help="Layer shown token by token: a number (0 is the first) or 'all'.")]
HeadOpt = Annotated[str, typer.Option("--head", help="Head to show: a number (0 is the first) or 'all'.")]
DimsOpt = Annotated[int, typer.Option("--dims", help="Vectors longer than this show first dims … last dims and the norm.")]
PrecisionOpt = Annotated[int, typer.Option("--precision", help="Decimals shown.")]
BriefOpt = Annotated[bool, typer.Option("--brief/--full", help="Brief: token-by-token view for one layer; full: every detail.")]
ExportOpt = Annotated[Optional[str], typer.Option("--export", help="Also write exactly what was shown to FILE.html, .svg or .txt.")]


def _view(token, layer, head, dims, precision, brief, checks=()):
    from .errors import TracerError
    from .render.view import View

    if dims < 1:
        raise TracerError(f"--dims must be ≥ 1, got {dims}")
    if not 0 <= precision <= 12:
        raise TracerError(f"--precision must be between 0 and 12, got {precision}")
    return View(token=token, layer=layer, head=head, dims=dims, precision=precision, brief=brief, checks=tuple(checks))


@app.command()
def trace(
    prompt: Annotated[str, typer.Argument(help="The text to run through the model.")],
    model: ModelOpt = "tiny",
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", help="Tokens to generate after the prompt (0: only predict the next one).")] = 1,
    temperature: Annotated[float, typer.Option("--temperature", "-t", help="0 is greedy (the most likely token); higher flattens the distribution.")] = 0.0,
    top_k: Annotated[Optional[int], typer.Option("--top-k", help="Keep only the k most likely tokens before the draw.")] = None,
    top_p: Annotated[Optional[float], typer.Option("--top-p", help="Keep the most likely tokens whose probabilities add up to p, in (0, 1].")] = None,
    seed: SeedOpt = 0,
    stop: Annotated[Optional[list[str]], typer.Option("--stop", help="Stop when the generated text contains this string (repeatable).")] = None,
    cache: Annotated[bool, typer.Option("--cache/--no-cache", help="Reuse earlier tokens' keys and values (KV cache) or recompute the whole context each step.")] = True,
    verify_cache: Annotated[bool, typer.Option("--verify-cache", help="Run with and without the KV cache and show that logits and tokens agree.")] = False,
    save: Annotated[Optional[str], typer.Option("--save", help="Write the whole trace (every step) to FILE.npz.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (prompt_ids, generated_ids, text, …) instead of tables.")] = False,
    token: TokenOpt = None,
    layer: LayerOpt = "0",
    head: HeadOpt = "all",
    dims: DimsOpt = 8,
    precision: PrecisionOpt = 3,
    brief: BriefOpt = True,
    export: ExportOpt = None,
) -> None:
    """Run PROMPT through the model and show every intermediate, step by step.

    Example: tracer trace "You are a business consultant, please analyze the impact of rising oil prices on the automotive industry."
    """
    import tracer as api

    view = _view(token, layer, head, dims, precision, brief)
    if export:
        from .render.export import check_export_path

        check_export_path(export)
    m = api.load(model, seed=seed)
    gen = m.generate(prompt, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                     seed=seed, cache=cache, stop=stop)
    if verify_cache:
        from .generate import verify_cache as verify

        gen.meta["verify_cache"] = verify(m, gen)
    if save:
        gen.save(save)
    if json_out:
        import json

        typer.echo(json.dumps(_json_of(gen, m.tokenizer)))
        return
    from .render import show_generation

    show_generation(gen, m.tokenizer, view, export=export)
    if save:
        typer.echo(f"saved {save}", err=True)


def _json_of(gen, tokenizer) -> dict:
    return {
        "model": gen.meta.get("model"),
        "prompt": gen.meta.get("prompt"),
        "prompt_ids": [int(i) for i in gen.prompt_ids],
        "generated_ids": [int(i) for i in gen.generated_ids],
        "text": gen.text,
        "generated": [tokenizer.token_str(t) for t in gen.generated_ids],
        "tokens": [tokenizer.token_str(t) for t in gen.tokens],
        "settings": gen.meta.get("settings"),
        "verify_cache": gen.meta.get("verify_cache"),
    }


@app.command()
def show(
    path: Annotated[str, typer.Argument(help="A trace saved with --save (FILE.npz).")],
    token: TokenOpt = None,
    layer: LayerOpt = "0",
    head: HeadOpt = "all",
    dims: DimsOpt = 8,
    precision: PrecisionOpt = 3,
    brief: BriefOpt = True,
    export: ExportOpt = None,
) -> None:
    """Render a saved trace with the same views as `trace` (no model needed).

    Example: tracer trace "Hello" --save hello.npz && tracer show hello.npz --layer 3
    """
    from .render import show_generation
    from .tokens import get_tokenizer
    from .trace import Generation

    view = _view(token, layer, head, dims, precision, brief)
    gen = Generation.load(path)
    show_generation(gen, get_tokenizer(gen.meta.get("tokenizer")), view, export=export)


@app.command()
def replay(
    scenario: Annotated[str, typer.Argument(help="A scenario file (.toml) or the name of a shipped one (see `tracer scenarios`).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (checks, generated, …) instead of tables.")] = False,
    token: TokenOpt = None,
    layer: LayerOpt = "0",
    head: HeadOpt = "all",
    dims: DimsOpt = 8,
    precision: PrecisionOpt = 3,
    brief: BriefOpt = True,
    export: ExportOpt = None,
) -> None:
    """Replay a scenario: run it, show the walkthrough, and check every stated value (✓ / ✗).

    Example: tracer replay article
    """
    from .scenario import replay_command

    replay_command(scenario, json_out=json_out, view=_view(token, layer, head, dims, precision, brief), export=export)


@app.command()
def scenarios() -> None:
    """List the shipped scenarios with their titles.

    Example: tracer scenarios
    """
    from .scenario import list_command

    list_command()


@app.command()
def demo(
    scenario: Annotated[str, typer.Argument(help="A shipped scenario name or .toml file.")] = "article",
    prompt: Annotated[Optional[str], typer.Option("--prompt", help="Walk through this prompt instead of a scenario (with --model).")] = None,
    model: ModelOpt = "tiny",
    auto: Annotated[Optional[float], typer.Option("--auto", help="Advance by itself every SECONDS.")] = None,
    quiz: Annotated[bool, typer.Option("--quiz", help="Pause before values the class can work out: predict, then press Enter.")] = False,
    export: Annotated[Optional[str], typer.Option("--export", help="Write every step as one self-contained HTML page (deck.html).")] = None,
) -> None:
    """A paced, narrated classroom walkthrough: one step per screen.

    Keys: Enter/space/→ next, b/← back, a number then Enter jumps, q quits.
    Example: tracer demo article --quiz
    """
    from .demo import demo_command

    demo_command(scenario=scenario, prompt=prompt, model=model, auto=auto, quiz=quiz, export=export)


@app.command()
def tokens(
    prompt: Annotated[str, typer.Argument(help="The text to split into tokens.")],
    encoding: Annotated[str, typer.Option("--encoding", "-e", help="gpt2 (default) or cl100k_base.")] = "gpt2",
) -> None:
    """Show how PROMPT splits into tokens: letter, text, id, position.

    Example: tracer tokens "building a house" --encoding gpt2
    """
    from .render.summary import token_table
    from .tokens import get_tokenizer

    tok = get_tokenizer(encoding)
    if not prompt.strip():
        from .errors import TracerError

        raise TracerError("prompt: empty; give at least one token")
    _print(token_table(tok.encode(prompt), tok))


def _print(renderable) -> None:
    from rich.console import Console

    Console().print(renderable)


def main() -> None:
    app()
