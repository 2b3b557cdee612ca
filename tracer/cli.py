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


@app.command()
def trace(
    prompt: Annotated[str, typer.Argument(help="The text to run through the model.")],
    model: ModelOpt = "tiny",
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", help="Tokens to generate after the prompt (0: only predict).")] = 1,
    temperature: Annotated[float, typer.Option("--temperature", "-t", help="0 is greedy; higher flattens the distribution.")] = 0.0,
    top_k: Annotated[Optional[int], typer.Option("--top-k", help="Keep only the k most likely tokens before the draw.")] = None,
    top_p: Annotated[Optional[float], typer.Option("--top-p", help="Keep the most likely tokens whose probabilities add up to p.")] = None,
    seed: SeedOpt = 0,
    save: Annotated[Optional[str], typer.Option("--save", help="Write the whole trace to FILE.npz.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (prompt_ids, generated_ids, text) instead of tables.")] = False,
) -> None:
    """Run PROMPT through the model and show every intermediate.

    Example: tracer trace "You are a business consultant, please analyze the impact of rising oil prices on the automotive industry."
    """
    import tracer as api

    m = api.load(model, seed=seed)
    gen = m.generate(prompt, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    if save:
        gen.save(save)
    if json_out:
        import json

        typer.echo(json.dumps({"model": m.name, "prompt_ids": gen.prompt_ids, "generated_ids": gen.generated_ids,
                               "text": gen.text, "tokens": [m.tokenizer.token_str(t) for t in gen.tokens]}))
        return
    from .render.summary import summary

    _print(summary(gen, m.tokenizer))
    if save:
        typer.echo(f"saved {save}")


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
