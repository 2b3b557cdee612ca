"""The generation settings as typer options, built from their one declaration (`tracer.run.settings.SETTINGS`).

A command takes them as one parameter, `settings: GenerationSettings = SETTING_OPTIONS`, and is wrapped
in `with_settings`: typer sees, in that parameter's place, one `Annotated` option per setting (its
flag and short flag, type, range, default and help from the record), and the command receives the
checked `GenerationSettings` (a value out of range: one line, exit 2, before anything loads). The
options are built each time typer reads the command, from the table as it is then.
"""

from __future__ import annotations

import functools
import inspect
from typing import Annotated, Optional

import typer

from ..run import settings as table
from ..run.settings import GenerationSettings, Setting

SETTING_OPTIONS = object()  # the default that marks a command's `settings` parameter: one option per setting here


def option(s: Setting) -> tuple:
    """The typer annotation and default of `s`'s option."""
    default = s.run_default
    if s.kind == "switch":
        return Annotated[bool, typer.Option(f"{s.flag}/--no-{s.flag[2:]}", help=s.help)], bool(default)
    flags = (s.flag, s.short) if s.short else (s.flag,)
    if s.kind == "texts":
        return Annotated[Optional[list[str]], typer.Option(*flags, help=s.help)], None
    kind = {"integer": int, "number": float, "text": str}[s.kind]
    bounds = {} if kind is str else {k: kind(v) for k, v in (("min", s.low), ("max", s.high)) if v is not None}
    shown = Optional[kind] if s.optional or default is None else kind
    return Annotated[shown, typer.Option(*flags, help=s.help, **bounds)], default


def parameters() -> list[inspect.Parameter]:
    return [inspect.Parameter(s.name, inspect.Parameter.KEYWORD_ONLY, annotation=a, default=d)
            for s in table.SETTINGS for a, d in [option(s)]]


def defaults() -> GenerationSettings:
    """The settings of a command given no option."""
    return GenerationSettings(**{s.name: s.run_default for s in table.SETTINGS})


def given(settings: GenerationSettings) -> list[Setting]:
    """The settings whose value is not the commands' default (what a command may refuse beside a scenario)."""
    usual = defaults()
    return [s for s in table.SETTINGS if getattr(settings, s.name) != getattr(usual, s.name)]


class with_settings:
    """A typer command whose `settings` parameter (default `SETTING_OPTIONS`) becomes the settings' options."""

    def __init__(self, command):
        functools.update_wrapper(self, command)
        self.__annotations__ = {}  # the signature below holds the resolved annotations
        self.command = command

    @property
    def __signature__(self) -> inspect.Signature:
        sig = inspect.signature(self.command, eval_str=True)
        params = []
        for p in sig.parameters.values():
            params += parameters() if p.default is SETTING_OPTIONS else [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)]
        params.append(inspect.Parameter(CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context))
        return sig.replace(parameters=params)

    def __call__(self, **values):
        ctx = values.pop(CONTEXT, None)
        settings = GenerationSettings(**{s.name: values.pop(s.name) for s in table.SETTINGS if s.name in values})
        return self.command(settings=settings.given_only(explicit(ctx)), **values)


CONTEXT = "_settings_context"  # the parameter typer fills with the command's context (where each value came from)


def explicit(ctx) -> list[str]:
    """The settings this command line gave (not left at their defaults): what a file's suggestions do not
    replace (`--sampling file`). Without a context (called from Python): all of them."""
    if ctx is None:
        return [s.name for s in table.SETTINGS]
    return [s.name for s in table.SETTINGS if getattr(ctx.get_parameter_source(s.name), "name", "DEFAULT") != "DEFAULT"]
