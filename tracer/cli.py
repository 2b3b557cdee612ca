"""The `tracer` command: thin typer commands that check their inputs, call the core, and print.

Every input is checked once, before any model runs or any file is written: typer checks the
ranges of numbers (its message is printed as one line, like ours), `GenerationSettings` the
sampling options, the output paths are checked, and
the view options (`--token`, `--layer`, `--head`) are resolved against the model as soon as it
is loaded. Errors: a `TracerError` (bad input) prints one line on stderr and exits 2; any other
exception is a bug in tracer and exits 1 with a one-line message (`--debug` shows the traceback).
Ctrl-C exits 130; a closed pipe (`tracer … | head`) exits 141 quietly. Output goes through a
console that shows control characters from prompts and files (␛) instead of sending them to the
terminal. A trace file that loads but cannot be shown is examined (`tracer.trace.damage`): if it
is damaged, that is bad input (2); if it looks sound, a bug of ours (1). Heavy modules are
imported inside the commands so that `tracer --help` stays fast.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup


class _Group(TyperGroup):
    """Turns exceptions from any command into one line on stderr and an exit code."""

    def invoke(self, ctx):
        from .errors import TracerError

        try:
            return super().invoke(ctx)
        except typer.BadParameter as e:  # typer's own checks: an option out of range or of the wrong type, …
            path = e.ctx.command_path if e.ctx is not None else "tracer"
            _echo_err(f"{e.format_message()} (see {path} --help)")
            raise typer.Exit(e.exit_code) from None
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
        except BrokenPipeError:  # `tracer trace … | head`: the reader left; not an error of ours
            _quiet_stdout()
            raise typer.Exit(141) from None
        except MemoryError:
            if STATE["debug"]:
                raise
            _echo_err("out of memory: the model or trace is too large for this machine")
            raise typer.Exit(1) from None
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


class Side(str, Enum):
    left = "left"
    right = "right"


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="'tiny' (default, untrained), a scenario name or .toml, a GPT-2 folder or name, or a tracer weights file.")]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, help="Seed for weights not given and for the sampling draw.")]
TokenOpt = Annotated[Optional[str], typer.Option("--token", help="Show this token step by step: a letter (B) or a 0-based position (1). Default: every prompt token.")]
LayerOpt = Annotated[str, typer.Option("--layer", help="Layer shown token by token: a number (0 is the first) or 'all'.")]
HeadOpt = Annotated[str, typer.Option("--head", help="Head to show: a number (0 is the first) or 'all'.")]
DimsOpt = Annotated[int, typer.Option("--dims", min=1, help="Vectors longer than this show first dims … last dims and the norm.")]
PrecisionOpt = Annotated[int, typer.Option("--precision", min=0, max=12, help="Decimals shown.")]
BriefOpt = Annotated[bool, typer.Option("--brief/--full", help="Brief: token-by-token view for one layer; full: every detail.")]
ExportOpt = Annotated[Optional[str], typer.Option("--export", help="Also write exactly what was shown to FILE.html, .svg or .txt.")]


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show Python tracebacks on errors.")] = False) -> None:
    STATE["debug"] = debug


def _echo_err(message: str) -> None:
    typer.echo(f"tracer: {message}", err=True)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so Python's exit flush does not fail again on the closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _console(record: bool = False, **options):
    from .render.text import safe_console

    return safe_console(record=record, **options)


def _view(token, layer, head, dims, precision, brief, checks=()):
    from .render.view import View

    return View(token=token, layer=layer, head=head, dims=dims, precision=precision, brief=brief, checks=tuple(checks))


def _check_export(export: str | None) -> None:
    if export:
        from .render.export import check_export_path

        check_export_path(export)


def _passes(prompt_len: int, max_new_tokens: int) -> int:
    """Positions that can have a pass of their own: the prompt's, then each generated token but the last."""
    return prompt_len + max(max_new_tokens, 1) - 1


@app.command()
def trace(
    prompt: Annotated[str, typer.Argument(help="The text to run through the model.")],
    model: ModelOpt = "tiny",
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", min=0, help="Tokens to generate after the prompt (0: only predict the next one). Stops early at the end token or a --stop string.")] = 3,
    temperature: Annotated[float, typer.Option("--temperature", "-t", min=0.0, help="0 is greedy (the most likely token); higher flattens the distribution.")] = 0.0,
    top_k: Annotated[Optional[int], typer.Option("--top-k", min=1, help="Keep only the k most likely tokens before the draw.")] = None,
    top_p: Annotated[Optional[float], typer.Option("--top-p", min=0.0, max=1.0, help="Keep the most likely tokens whose probabilities add up to p, in (0, 1].")] = None,
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
    truncate: Annotated[Optional[Side], typer.Option("--truncate", help="A prompt longer than the model's context: 'left' drops its start (keeps the end), 'right' drops its end. Default: an error.")] = None,
) -> None:
    """Run PROMPT through the model and show every intermediate, step by step.

    Example: tracer trace "You are a business consultant, please analyze the impact of rising oil prices on the automotive industry."
    """
    from .files import check_output_path
    from .loaders import load
    from .render.progress import generation_progress, reading_progress
    from .settings import GenerationSettings
    from .tokens import check_prompt

    settings = GenerationSettings(max_new_tokens, temperature, top_k, top_p, seed, cache, stop or ())
    view = _view(token, layer, head, dims, precision, brief)
    check_prompt(prompt)
    if save:
        check_output_path(save, "--save", (".npz",))
    _check_export(export)
    m = load(model, seed=seed, progress=reading_progress)
    side = truncate.value if truncate else None
    text = m.prompt(prompt, side, settings.max_new_tokens)
    view.resolve(m.config, len(text.ids), _passes(len(text.ids), settings.max_new_tokens))  # before anything runs
    with generation_progress(m, settings.max_new_tokens) as on_step:  # a bar on stderr for big models on a terminal
        gen = m.generate(text, settings=settings, on_step=on_step)
    resolved = view.resolve(m.config, len(text.ids), len(gen.steps[-1].tokens))  # a generated --token may not exist
    if text.truncated:
        note, kept = text.truncated, "end" if side == "left" else "start"
        _echo_err(f"note: the prompt has {note['prompt_tokens']:,} tokens and the model's context is {m.config.n_ctx:,}; "
                  f"kept its {kept}, {note['kept']:,} tokens (--truncate {side}), dropped {note['dropped']:,}")
    if verify_cache:
        from .generate import verify_cache as verify

        with generation_progress(m, settings.max_new_tokens, "verifying the KV cache") as on_step:
            gen.meta["verify_cache"] = verify(m, gen, on_step=on_step)
    if save:
        gen.save(save)
    if json_out:
        from .render.jsonout import dumps, trace_json

        typer.echo(dumps(trace_json(gen, m.tokenizer)))
        return
    from .render import show_generation

    show_generation(gen, m.tokenizer, resolved, export=export, console=_console(bool(export)))
    if save:
        typer.echo(f"saved {save}", err=True)


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
    from .errors import TracerError
    from .render import show_generation
    from .tokens import get_tokenizer
    from .trace import Generation, damage as trace_damage

    view = _view(token, layer, head, dims, precision, brief)
    _check_export(export)
    gen = Generation.load(path)
    try:
        tokenizer = get_tokenizer(gen.meta.get("tokenizer"))
    except TracerError as e:
        raise TracerError(f"{path}: {e}") from None
    try:
        show_generation(gen, tokenizer, view, export=export, console=_console(bool(export)))
    except (TracerError, MemoryError, OSError):  # OSError: a closed pipe, a failed --export write
        raise
    except Exception as e:  # a file that loaded but cannot be shown: whose fault is it?
        damage = trace_damage(gen, tokenizer.n_vocab)
        if damage is None or STATE["debug"]:
            raise  # the file is sound: a bug of ours, reported as one
        raise TracerError(f"{path}: damaged trace: {damage} ({type(e).__name__} while showing it)") from None


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

    A ✗ is a stated value that disagrees with the computation, which is what a replay is for: the
    command still exits 0. A malformed file is bad input (exit 2).

    Example: tracer replay article
    """
    import dataclasses

    from .replay import replay as run
    from .scenario import load_scenario, resolve

    view = _view(token, layer, head, dims, precision, brief)
    _check_export(export)
    scn = load_scenario(resolve(scenario))
    n = len(scn.prompt.ids)
    view.resolve(scn.config, n, _passes(n, scn.settings.max_new_tokens))  # before anything runs
    done = run(scn)
    if json_out:
        from .render.jsonout import dumps, replay_json

        typer.echo(dumps(replay_json(done), ascii_only=False))
        return
    from .render import show_generation
    from .render.summary import scenario_header

    resolved = dataclasses.replace(view, checks=tuple(done.checks)).resolve(scn.config, n, len(done.gen.steps[-1].tokens))
    show_generation(done.gen, done.model.tokenizer, resolved, export=export, console=_console(bool(export)),
                    before=[scenario_header(scn)])


@app.command()
def scenarios() -> None:
    """List the shipped scenarios with their titles.

    Example: tracer scenarios
    """
    from .render.summary import scenarios_table
    from .scenario import summaries

    _console().print(scenarios_table(summaries()))


ARTICLE_PROMPT = ("You are a business consultant, please analyze the impact of rising oil prices "
                  "on the automotive industry.")
DEMO_NEW_TOKENS = 3  # tokens generated for `demo --prompt`: enough to see G and H appended


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
    from .errors import TracerError
    from .render.demo import MAX_WIDTH, check_deck_path, show_demo

    if auto is not None and not auto > 0:
        raise TracerError(f"--auto must be a number of seconds > 0, got {auto:g}")
    if export is not None:
        check_deck_path(export)
    console = _console()
    if console.width > MAX_WIDTH:  # legible on a projector
        console = _console(width=MAX_WIDTH)
    if console.is_terminal:
        with console.status("running the model and recording every step…"):
            d = _demo_run(scenario, prompt, model)
    else:
        d = _demo_run(scenario, prompt, model)
    if d.cfg.n_layers < 1:
        raise TracerError(f"model {d.trace.meta.get('model')!r}: has no layers; the demo walks through at least one")
    show_demo(d, console, quiz=quiz, auto=auto, export=export)


def _demo_run(scenario: str, prompt: str | None, model: str):
    """The demo's recorded run: a scenario replayed (with its checks), or a prompt through --model."""
    from .loaders import load
    from .render.demo import Demo
    from .replay import replay as run

    if prompt is None:
        done = run(scenario)
        return Demo(done.gen, done.model.tokenizer, title=done.scenario.title or scenario, checks=done.checks)
    m = load(model)
    n = len(m.tokenize(prompt))
    gen = m.generate(prompt, max_new_tokens=max(0, min(DEMO_NEW_TOKENS, m.config.n_ctx - n)))
    return Demo(gen, m.tokenizer, title=f"{m.name}: {prompt[:40]}" + ("…" if len(prompt) > 40 else ""))


@app.command()
def tokens(
    prompt: Annotated[str, typer.Argument(help="The text to split into tokens.")],
    encoding: Annotated[str, typer.Option("--encoding", "-e", help="gpt2 (default) or cl100k_base.")] = "gpt2",
) -> None:
    """Show how PROMPT splits into tokens: letter, text, id, position.

    Example: tracer tokens "building a house" --encoding gpt2
    """
    from .render.summary import token_table
    from .tokens import check_prompt, get_tokenizer

    check_prompt(prompt)
    tok = get_tokenizer(encoding)
    _console().print(token_table(tok.encode(prompt), tok))


@app.command()
def download(
    name: Annotated[str, typer.Argument(help="gpt2, gpt2-medium, gpt2-large, gpt2-xl or distilgpt2.")],
) -> None:
    """Fetch a GPT-2's config.json and model.safetensors into the Hugging Face cache (the only command that uses the network; needs `pip install 'tracer[download]'`).

    Example: tracer download gpt2-medium && tracer trace "Hello" --model gpt2-medium
    """
    from .errors import TracerError
    from .hf import download as fetch_files, hub_repos
    from .loaders import hf_model
    from .render.progress import reading_progress

    short = hub_repos(name)[0]
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise TracerError(f"download: needs the optional package huggingface_hub: pip install 'tracer[download]', then run "
                          f"this again (or put config.json and model.safetensors of {hub_repos(name)[1][0]} in a folder "
                          f"and pass --model FOLDER)") from None
    folder = fetch_files(name, hf_hub_download)
    m = hf_model(folder, name=short, progress=reading_progress)  # reads every tensor once: checks the files are whole
    typer.echo(f"{short}: {m.config.n_layers} layers, d_model {m.config.d_model}, {m.config.n_heads} heads, in {folder}")
    typer.echo(f'try: tracer trace --model {short} "The capital of France is"')


def main() -> None:
    for stream in (sys.stdout, sys.stderr):
        # A terminal or pipe that is not UTF-8 (PYTHONIOENCODING=ascii, an old code page) gets '?'
        # for the characters it cannot show (─, ␣, ·) rather than a crash.
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding not in ("utf8", "utf8sig") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="replace")
            except (ValueError, OSError):
                pass
    if len(sys.argv) > 1 and sys.argv[1] not in ("--help", "-h", "tokens", "scenarios"):
        from .memory import retain_freed_memory

        retain_freed_memory()  # reuse freed arrays instead of faulting fresh pages in (BENCHMARKS.md)
    app()
