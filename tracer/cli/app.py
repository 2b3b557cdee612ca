"""The `tracer` command: thin typer commands that check their inputs, call the core, and print.

Every input is checked once, before any model runs or any file is written: typer checks the
ranges of numbers (its message is printed as one line, like ours) and parses `--memory` and
`--ablate` once into typed values (`parser=`: a `tracer.core.memory.Size`, `tracer.run.ablation.Ablation`s)
that every layer reads (a refusal of a value names the value, and the line here adds the flag:
`ValueRefused`), `GenerationSettings` the sampling options, the output paths are checked, and
the view options (`--token`, `--layer`, `--head`) are resolved against the model as soon as it
is loaded. Errors: a `TracerError` (bad input) prints one line on stderr and exits 2; any other
exception is a bug in tracer and exits 1 with a one-line message (`--debug` shows the traceback).
Ctrl-C exits 130, SIGTERM 143 and SIGHUP 129 (a file being written is removed first); a closed
pipe (`tracer … | head`) exits 141 quietly. Output goes through a console that shows control
characters from prompts and files (␛) instead of sending them to the terminal, and so does every
error message (`echo_err`), which may quote a file's text (a key name, a shard's name); a Python
warning is one such line too, never a source line. A trace file that loads but cannot be shown is examined (`tracer.run.damage.damage`): if it
is damaged, that is bad input (2); if it looks sound, a bug of ours (1). Heavy modules are
imported inside the commands so that `tracer --help` stays fast.

This module holds the typer app, its error handling and what the commands share; the
commands are in `tracer.cli.run` (trace, show, replay, scenarios, tokens), `tracer.cli.teach`
(demo) and `tracer.cli.learn` (train, download).
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from ..core.memory import Size, parse_size
from ..run.ablation import Ablation
from ..sections import help_words, names


class _Group(TyperGroup):
    """Turns exceptions from any command into one line on stderr and an exit code."""

    def invoke(self, ctx):
        import warnings

        from ..errors import TracerError

        path = self._path(ctx)  # before click consumes the words
        try:
            with warnings.catch_warnings(), _pipe_watch():
                warnings.showwarning = warn_on_one_line
                return super().invoke(ctx)
        except typer.BadParameter as e:  # typer's own checks: an option out of range or of the wrong type, …
            path = e.ctx.command_path if e.ctx is not None else "tracer"
            echo_err(f"{e.format_message()} (see {path} --help)")
            raise typer.Exit(e.exit_code) from None
        except (typer.Exit, typer.Abort, typer.TyperException) as e:
            _one_usage_line(e, path)
            raise
        except TracerError as e:
            if STATE["debug"]:  # the traceback, and still the error's own exit code (2: the input's fault)
                import traceback

                traceback.print_exc()
            echo_err(self._flagged(ctx, e))
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM / SIGHUP (tracer.formats.files.Stopped)
            signum = getattr(e, "signum", 2)
            said = str(e) if type(e).__name__ == "LayerStop" else ""  # a streamed pass stopped between layers
            echo_err(said or ("interrupted" if signum == 2 else f"stopped by signal {signum}"))
            raise typer.Exit(128 + signum) from None
        except BrokenPipeError:  # `tracer trace … | head`: the reader left; not an error of ours
            quiet_stdout()
            raise typer.Exit(141) from None
        except MemoryError:
            if STATE["debug"]:
                raise
            echo_err("out of memory: the model or trace is too large for this machine (a shorter prompt, fewer new "
                     "tokens or --json records less)")
            raise typer.Exit(2) from None
        except Exception as e:
            if STATE["debug"]:
                raise
            echo_err(f"internal error: {type(e).__name__}: {e} (run with --debug for the traceback; please report it)")
            raise typer.Exit(1) from None

    def make_context(self, info_name, args, parent=None, **extra):
        try:  # `tracer --bogus`: the group's own options are parsed here, before invoke
            return super().make_context(info_name, args, parent=parent, **extra)
        except typer.TyperException as e:
            _one_usage_line(e, info_name or "tracer")
            raise

    def _path(self, ctx) -> str:
        """The command being parsed ('tracer trace'), for an error click raised without its context."""
        words = [*(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", None) or []), *ctx.args]
        name = words[0] if words else None
        return f"{ctx.command_path} {name}" if isinstance(name, str) and name in self.commands else ctx.command_path

    def _flagged(self, ctx, e) -> str:
        """The error's line; a value's refusal (`ValueRefused`) led by the flag that gave the value
        ("--memory: …"), when the command has that flag."""
        option = getattr(e, "option", None)
        cmd = self.get_command(ctx, ctx.invoked_subcommand) if option and ctx.invoked_subcommand else None
        if cmd is not None and any(f"--{option}" in p.opts for p in cmd.params):
            return f"--{option}: {e}"
        return str(e)


def _one_usage_line(e, path: str) -> None:
    """A usage error of the command line (click's, which typer vendors: an unknown option or command, a
    missing argument) as one line naming the nearest option or command, instead of click's usage block;
    returns only when `e` is not one (help asked for by giving no arguments stays the help)."""
    kind = type(e).__name__
    ctx = getattr(e, "ctx", None)
    if not hasattr(e, "format_message") or kind == "NoArgsIsHelpError" or getattr(e, "exit_code", 0) != 2:
        return
    path = ctx.command_path if ctx is not None else path
    option = getattr(e, "option_name", None)
    if kind == "NoSuchOption" and isinstance(option, str):
        if _looks_negative(option):
            echo_err(f"no such option: {option}; a prompt that starts with '-' goes after --, which ends the "
                     f"options: {path} [OPTIONS] -- \"{option} …\"")
            raise typer.Exit(2) from None
        known = [o for p in (ctx.command.params if ctx is not None else ()) for o in (*p.opts, *p.secondary_opts)
                 if o.startswith("-")]
        near = _nearest(option, known)
        echo_err(f"no such option: {option}" + (f" (did you mean {near}?)" if near else "") + f"; see {path} --help")
    elif kind == "UsageError" and ctx is not None and hasattr(ctx.command, "commands") and \
            e.format_message().startswith("No such command"):
        typed = e.format_message().split("'")[1] if e.format_message().count("'") >= 2 else ""
        near = _nearest(typed, list(ctx.command.commands))
        echo_err(f"no such command: {typed}" + (f" (did you mean {near}?)" if near else "") + f"; see {path} --help")
    elif (kind == "UsageError" and e.format_message().startswith("Got unexpected extra argument") and ctx is not None
          and any(p.name == "prompt" for p in ctx.command.params)):
        echo_err(f"{e.format_message()}: a prompt of several words goes in quotes, {path} \"A B C\" (see {path} --help)")
    else:
        echo_err(f"{e.format_message()} (see {path} --help)")
    raise typer.Exit(2) from None


def _nearest(word: str, known: list[str]) -> str | None:
    """The known word closest to `word` (difflib's ratio, at least 0.6), or None."""
    import difflib

    found = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return found[0] if found else None


def _looks_negative(option: str) -> bool:
    """'-5', '-0.5', '-3C': a word a person meant as text (a prompt such as "-5 degrees"), not an option."""
    return len(option) > 1 and option[0] == "-" and (option[1].isdigit() or option[1] == ".")


class _pipe_watch:
    """SIGPIPE (a write reached a pipe whose reader left) raises BrokenPipeError where the command
    stands. Python ignores the signal, and a write the reader's leaving cut short returns without
    an error, so without this `tracer … | head -1` could finish with status 0."""

    def __enter__(self):
        import signal
        import threading

        self.old = None
        if hasattr(signal, "SIGPIPE") and threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGPIPE, _pipe_broke)

    def __exit__(self, *exc):
        import signal

        if self.old is not None:
            signal.signal(signal.SIGPIPE, self.old)
        return False


def _pipe_broke(signum, frame):
    import errno

    raise BrokenPipeError(errno.EPIPE, "the reader of the pipe left")


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


Section = Enum("Section", {name: name for name in names()}, type=str)  # --section's choices: tracer.sections


class Side(str, Enum):
    left = "left"
    right = "right"


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="'abc' (the default: a small GPT-2 tracer trained on letter runs, counting, weekdays, months, short sentences and repeated phrases), 'tiny' (untrained, 24 layers), a scenario name or .toml, a GGUF file (llama.cpp, LM Studio) or ollama:NAME[:TAG], a Hugging Face folder or cached name (GPT-2, Llama, Qwen2, Mistral, Qwen3, OLMo 2, Phi-3, Gemma 3 text), or a tracer weights file. `tracer models` lists what this machine has.")]
# Values parsed once, as typer reads the option (`parser=`): a refusal names the value, and the
# command's error handling adds the flag (`_Group._flagged`).
MemoryOpt = Annotated[Optional[Size], typer.Option("--memory", parser=parse_size, metavar="<str>", help="The memory the weights may take expanded to float32, e.g. 6GB, 500MB, 1.5GiB (default: half the memory available). A model that needs more is expanded layer by layer as each pass reaches a layer (the same numbers, slower); one whose single layer needs more is refused.")]
AblateOpt = Annotated[Optional[list[Ablation]], typer.Option("--ablate", parser=Ablation.parse, metavar="<list[str]>", help="Run with a part of the model removed (repeatable): LAYER:HEAD (that head's z set to zeros where the heads are combined), LAYER:HEAD:mean (its mean over the positions), LAYER:* (every head of the layer), LAYER:mlp, LAYER:expert:E (expert E of a mixture of experts taken out of the routing: each token that chose it goes to its next choice). The walkthrough shows the changed run, and the prediction beside the clean run's.")]
ChatOpt = Annotated[bool, typer.Option("--chat", help="Apply the model's chat template to PROMPT (one user message), as transformers' apply_chat_template(add_generation_prompt=True) renders it; generation stops at the template's end token.")]
WeightsSeedOpt = Annotated[int, typer.Option("--weights-seed", min=0, help="Seed of the weights a model draws instead of loading (the untrained 'tiny').")]
TokenOpt = Annotated[Optional[str], typer.Option("--token", help="Show this token step by step: a letter (B) or a 0-based position (1). Default: every prompt token.")]
LayerOpt = Annotated[str, typer.Option("--layer", help="Layer shown token by token: a number (0 is the first) or 'all'.")]
HeadOpt = Annotated[str, typer.Option("--head", help="Head to show: a number (0 is the first) or 'all'.")]
DimsOpt = Annotated[int, typer.Option("--dims", min=1, help="Vectors longer than this show first dims … last dims and the norm.")]
PrecisionOpt = Annotated[int, typer.Option("--precision", min=0, max=12, help="Decimals shown.")]
BriefOpt = Annotated[bool, typer.Option("--brief/--full", help="Brief: token-by-token view for one layer; full: every detail.")]
SectionOpt = Annotated[Optional[list[Section]], typer.Option("--section", help=f"Show only this part (repeatable): {help_words()}.")]
MaxLinesOpt = Annotated[int, typer.Option("--max-lines", min=0, help="Refuse a view longer than this many lines, with a hint to narrow it (0: no limit).")]
PagerOpt = Annotated[bool, typer.Option("--pager/--no-pager", help="On a terminal, page output taller than the screen (less -R -X: q quits and the output stays on the screen; $PAGER if set); never when piped.")]
ExportOpt = Annotated[Optional[str], typer.Option("--export", help="Also write FILE.html, the interactive page for a browser, or exactly what was shown to FILE.svg, FILE.txt or FILE.terminal.html.")]


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show Python tracebacks on errors.")] = False) -> None:
    STATE["debug"] = debug


def echo_err(message: str) -> None:
    """One line on stderr, 'tracer: …', with every control character of `message` shown (␛, ↵,
    ⟨U+202E⟩), never obeyed: a message may quote a file's text."""
    from ..tokenizers.tokens import show_token

    shown = " ".join(show_token(part) for part in str(message).split(" "))  # spaces stay spaces
    typer.echo(f"tracer: {shown}", err=True)


def say_notes(model, text: str) -> None:
    """What the model's reader noticed (`Model.notes`), and the characters of `text` its tokenizer
    cannot spell and drops as `tokenizers` does (`Tokenizer.dropped`), once each on stderr."""
    for note in model.notes:
        echo_err(f"note: {note}")
    dropped = getattr(model.tokenizer, "dropped", None)
    lost = dropped(text) if callable(dropped) else []
    if lost:
        shown = ", ".join(f"0x{b:02X}" if isinstance(b, int) else repr(b) for b in lost)
        echo_err(f"note: the vocabulary of {model.name} cannot spell {shown}; dropped from the prompt, as the "
                 f"model's own tokenizer (tokenizers) drops them")


def ablation_hooks(model, ablations) -> dict | None:
    """--ablate's values checked against the model, as one dict of hooks (None: none)."""
    if not ablations:
        return None
    from ..run.ablation import check_experts_left
    from ..run.interventions import combine

    hooks = combine(*(a.hooks(model.config) for a in ablations))
    check_experts_left(ablations, model.config)
    return hooks


def ablation_record(model, ids, ablations, hooks: dict) -> dict:
    """What --ablate did, as `gen.meta["ablation"]` and --json keep it: the words, the heads removed
    ([layer, head] pairs) and the next-token prediction without and with the hooks."""
    from ..run.ablation import removed_heads
    from ..run.interventions import prediction_change

    record = {"ablated": [a.words for a in ablations], "heads": removed_heads(ablations, model.config),
              **prediction_change(model, ids, hooks)}
    experts: dict = {}
    for a in ablations:
        if a.head == "expert":
            experts.setdefault(a.layer, set()).add(a.expert)
    if experts:  # who was sent elsewhere, and where
        from ..run.interventions import rerouted

        record["rerouted"] = rerouted(model, ids, experts, hooks)
    return record


def streamed_layers(model):
    """The layers a streamed model expands as each pass reaches them (the layers' bar follows them), or None."""
    return model.weights.layers if model.streamed else None


def warn_on_one_line(message, category, filename, lineno, file=None, line=None) -> None:
    """`warnings.showwarning` for the command: one sanitised line, no file name or source line."""
    echo_err(f"warning: {message} ({category.__name__})")


def quiet_stdout() -> None:
    """Point stdout at /dev/null so Python's exit flush does not fail again on the closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def make_console(record: bool = False, **options):
    """The console every command prints through (`tracer.render.text.SafeConsole`)."""
    from ..render.text import safe_console

    return safe_console(record=record, **options)


def view_of(token, layer, head, dims, precision, brief, section=None, max_lines: int | None = None):
    from ..render.view import MAX_LINES, View

    return View(token=token, layer=layer, head=head, dims=dims, precision=precision, brief=brief,
                sections=tuple(s.value for s in section or ()), max_lines=MAX_LINES if max_lines is None else max_lines)


def check_export(export: str | None) -> None:
    if export:
        from ..render.export import check_export_path

        check_export_path(export)


def passes(prompt_len: int, max_new_tokens: int) -> int:
    """Positions that can have a pass of their own: the prompt's, then each generated token but the last."""
    return prompt_len + max(max_new_tokens, 1) - 1
