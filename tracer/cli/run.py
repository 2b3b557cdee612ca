"""The commands that run or show a trace: `trace`, `show`, `replay`, `scenarios`, `tokens`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..core.config import DEFAULT_MODEL
from ..run.settings import GenerationSettings
from .app import (STATE, AblateOpt, BriefOpt, ChatOpt, DimsOpt, ExportOpt, HeadOpt, LayerOpt, MaxLinesOpt, MemoryOpt, ModelOpt, PagerOpt,
                  PrecisionOpt, SectionOpt, Side, TokenOpt, WeightsSeedOpt, ablation_hooks, ablation_record, app,
                  check_export, echo_err, make_console, passes, say_notes, streamed_layers, view_of)
from .settings import SETTING_OPTIONS, with_settings


@app.command()
@with_settings
def trace(
    prompt: Annotated[str, typer.Argument(help="The text to run through the model.")],
    model: ModelOpt = DEFAULT_MODEL,
    settings: GenerationSettings = SETTING_OPTIONS,  # --max-new-tokens, --temperature, …: tracer.run.settings
    weights_seed: WeightsSeedOpt = 0,
    verify_cache: Annotated[bool, typer.Option("--verify-cache", help="Run with and without the KV cache and show that logits and tokens agree.")] = False,
    save: Annotated[Optional[str], typer.Option("--save", help="Write the whole trace (every step) to FILE.npz.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (prompt_ids, generated_ids, text, …) instead of tables.")] = False,
    token: TokenOpt = None,
    layer: LayerOpt = "0",
    head: HeadOpt = "all",
    dims: DimsOpt = 8,
    precision: PrecisionOpt = 3,
    brief: BriefOpt = True,
    section: SectionOpt = None,
    max_lines: MaxLinesOpt = 20_000,
    pager: PagerOpt = True,
    export: ExportOpt = None,
    truncate: Annotated[Optional[Side], typer.Option("--truncate", help="A prompt longer than the model's context: 'left' drops its start (keeps the end), 'right' drops its end. Default: an error.")] = None,
    chat: ChatOpt = False,
    attribute: Annotated[bool, typer.Option("--attribute", help="Show which prompt position mattered to the chosen next token: gradient × input (Σ over each position's input to layer 0, its embedding plus the position vector where the model adds one, of value × ∂logit/∂value), from tracer's own backward pass; an estimate that can disagree with knocking a part out (--ablate measures).")] = False,
    ablate: AblateOpt = None,
    memory: MemoryOpt = None,
) -> None:
    """Run PROMPT through the model and show every intermediate, step by step.

    Example: tracer trace "A B C D E F"   (the default model, trained by tracer, predicts G)
    """
    from ..formats.files import check_output_path
    from ..run.footprint import check_room, cut
    from ..run.generate import recording_plan
    from ..loaders import load
    from ..render.progress import generation_progress, layers_progress, pass_progress, reading_progress
    from ..tokenizers.tokens import check_prompt

    view = view_of(token, layer, head, dims, precision, brief, section, 0 if json_out else max_lines)
    check_prompt(prompt)
    if save:
        check_output_path(save, "--save", (".npz",))
    check_export(export)
    out = make_console(bool(export))
    m = load(model, seed=weights_seed, progress=reading_progress, memory=memory)
    side = truncate.value if truncate else None
    text = m.prompt(prompt, side, settings.max_new_tokens, chat=chat)
    say_notes(m, text.text)
    hooks = ablation_hooks(m, ablate)
    n = len(text.ids)
    resolved = view.resolve(m.config, n, passes(n, settings.max_new_tokens), out.width, m.meta())  # once, before anything runs
    plan = recording_plan(json=json_out, save=bool(save), lens_shown=resolved.shows("lens"))  # what is read from the run
    keep = check_room(m, n, settings.max_new_tokens, plan["names"], side, cache=settings.cache)  # it fits, or
    if keep < n:  # --truncate: the prompt cut to what fits
        text = cut(text, keep, side)
        echo_err(f"note: the prompt has {n:,} tokens and about {keep:,} fit in the memory available; kept its "
                 f"{'end' if side == 'left' else 'start'}, {keep:,} tokens (--truncate {side}), dropped {n - keep:,}")
        n = keep
        resolved = view.resolve(m.config, n, passes(n, settings.max_new_tokens), out.width, m.meta())
    with layers_progress(streamed_layers(m), not json_out), \
            generation_progress(m.config.n_params(), settings.max_new_tokens) as on_step, \
            pass_progress(m.config.n_layers, m.config.pass_macs(n, n), n) as on_layer:  # bars on stderr
        gen = m.generate(text, settings=settings, on_step=on_step, hooks=hooks, on_layer=on_layer, **plan)
    change = None
    if hooks:
        change = ablation_record(m, text.ids, ablate, hooks)
        gen.meta["ablation"] = change
    if attribute:  # the chosen next token (the first generated, or the most likely when none was)
        gen.meta["attribution"] = m.attribute(text, target=gen.generated_ids[0] if gen.generated_ids else None)
    resolved = resolved.for_run(gen)  # a generation that stopped early: its --token may not exist
    if text.truncated and "memory" not in text.truncated:
        note, kept = text.truncated, "end" if side == "left" else "start"
        echo_err(f"note: the prompt has {note['prompt_tokens']:,} tokens and the model's context is {m.config.n_ctx:,}; "
                  f"kept its {kept}, {note['kept']:,} tokens (--truncate {side}), dropped {note['dropped']:,}")
    if verify_cache:
        from ..run.generate import verify_cache as verify

        with layers_progress(streamed_layers(m), not json_out), \
                generation_progress(m.config.n_params(), settings.max_new_tokens, "verifying the KV cache") as on_step:
            gen.meta["verify_cache"] = verify(m, gen, on_step=on_step)
    if save:
        gen.save(save)
    if json_out:
        from ..render.jsonout import dumps, trace_json

        typer.echo(dumps(trace_json(gen, m.tokenizer)))
        return
    from ..run.interventions import head_ablations  # each head of the clean run knocked out, for the page to click

    shown(gen, m.tokenizer, resolved, out, pager, export, heads=None if hooks else lambda: head_ablations(m, text.ids))
    if save:
        from ..tokenizers.tokens import show_invisible

        typer.echo(f"saved {show_invisible(save)}", err=True)


@app.command()
def show(
    path: Annotated[str, typer.Argument(help="A trace saved with --save (FILE.npz).")],
    token: TokenOpt = None,
    layer: LayerOpt = "0",
    head: HeadOpt = "all",
    dims: DimsOpt = 8,
    precision: PrecisionOpt = 3,
    brief: BriefOpt = True,
    section: SectionOpt = None,
    max_lines: MaxLinesOpt = 20_000,
    pager: PagerOpt = True,
    export: ExportOpt = None,
) -> None:
    """Render a saved trace with the same views as `trace` (no model needed).

    Example: tracer trace "Hello" --save hello.npz && tracer show hello.npz --layer 3
    """
    from ..errors import TracerError
    from pathlib import Path

    from ..render import resolved_for
    from ..tokenizers.table import trace_tokenizer
    from ..run.damage import damage as trace_damage
    from ..run.trace import Generation

    view = view_of(token, layer, head, dims, precision, brief, section, max_lines)
    check_export(export)
    gen = Generation.load(path)
    try:
        tokenizer = trace_tokenizer(gen.meta.get("tokenizer"), Path(path).parent)
    except TracerError as e:
        raise TracerError(f"{path}: {e}") from None
    out = make_console(bool(export))
    try:
        shown(gen, tokenizer, resolved_for(gen, view, out.width), out, pager, export)  # resolved once, for both
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
    section: SectionOpt = None,
    max_lines: MaxLinesOpt = 20_000,
    pager: PagerOpt = True,
    export: ExportOpt = None,
) -> None:
    """Replay a scenario: run it, show the walkthrough, and check every stated value (✓ / ✗).

    A ✗ is a stated value that disagrees with the computation, which is what a replay is for: the
    command still exits 0. A malformed file is bad input (exit 2).

    Example: tracer replay article
    """
    from ..replay import replay as run
    from ..scenario import load_scenario, resolve

    view = view_of(token, layer, head, dims, precision, brief, section, max_lines)
    check_export(export)
    scn = load_scenario(resolve(scenario))
    n = len(scn.prompt.ids)
    out = make_console(bool(export))
    from ..render.summary import scenario_header
    from ..render.text import Rendered

    before = [scenario_header(scn)]
    resolved = view.resolve(scn.config, n, passes(n, scn.settings.max_new_tokens), out.width,  # once, before anything runs
                            {"weights": scn.weights}, len(Rendered(out, before[0]).lines), len(scn.expects))
    done = run(scn)
    if json_out:
        from ..render.jsonout import dumps, replay_json

        typer.echo(dumps(replay_json(done)))
        return
    resolved = resolved.with_checks(done.checks).for_run(done.gen)
    from ..run.interventions import head_ablations

    shown(done.gen, done.model.tokenizer, resolved, out, pager, export, before=before, scenario=scn,
          heads=lambda: head_ablations(done.model, scn.prompt.ids))


def shown(gen, tokenizer, resolved, out, pager: bool, export: str | None, before=(), scenario=None, heads=None) -> None:
    """The one export path of `trace`, `show` and `replay`: print the walkthrough of `resolved` on
    `out`, then --export FILE.html writes the classroom page (with a scenario's title and notes, and
    `heads()`: each head knocked out, computed only for a page), any other --export what was printed;
    and say what was written."""
    from ..render import show_generation
    from ..render.export import export_page, is_page

    page = export if is_page(export) else None  # FILE.html: the interactive page; the rest: what was shown
    show_generation(gen, tokenizer, resolved, export=None if page else export, console=out, pager=pager, before=before)
    if page:
        export_page(gen, tokenizer, resolved, page, scenario=scenario, heads=heads() if heads else None)
    if export:
        said_export(export, page is not None)


def said_export(path: str, page: bool, what: str | None = None) -> None:
    """What --export wrote, on stderr (as --save says "saved …" and demo --export "wrote …")."""
    import os

    from ..tokenizers.tokens import show_invisible

    what = what or ("the classroom page, one self-contained file: open it in a browser" if page
                    else "the record of what the terminal printed")
    size = os.path.getsize(path) if os.path.isfile(path) else None
    typer.echo(f"wrote {show_invisible(path)}" + (f" ({size / 1000:,.0f} kB)" if size is not None else "") + f": {what}",
               err=True)


@app.command()
def scenarios() -> None:
    """List the shipped scenarios with their titles.

    Example: tracer scenarios
    """
    from ..render.summary import scenarios_table
    from ..scenario import summaries

    make_console().print(scenarios_table(summaries()))


@app.command()
def tokens(
    prompt: Annotated[str, typer.Argument(help="The text to split into tokens.")],
    encoding: Annotated[str, typer.Option("--encoding", "-e", help="gpt2 (default) or cl100k_base.")] = "gpt2",
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Use this model's own tokenizer instead (any --model that `tracer trace` takes: a folder, a .gguf file, ollama:NAME, …).")] = None,
    chat: ChatOpt = False,
    memory: MemoryOpt = None,
) -> None:
    """Show how PROMPT splits into tokens: letter, text, id, position.

    Example: tracer tokens "building a house" --encoding gpt2
             tracer tokens "Hello!" --model SmolLM2-135M-Instruct.Q4_1.gguf --chat
    """
    from ..errors import TracerError
    from ..render.summary import token_table
    from ..tokenizers.tokens import check_prompt, get_tokenizer

    check_prompt(prompt)
    if model is None:
        if chat:
            raise TracerError("--chat needs --model: the chat template is the model's")
        tok = get_tokenizer(encoding)
        make_console().print(token_table(tok.encode(prompt), tok))
        return
    from ..loaders import load
    from ..render.progress import reading_progress

    m = load(model, progress=reading_progress, memory=memory)
    text = m.chat_prompt(prompt) if chat else prompt
    say_notes(m, text)
    make_console().print(token_table(m.tokenizer.encode(text), m.tokenizer))


@app.command()
def compare(
    a: Annotated[str, typer.Argument(help="The first prompt (A).")],
    b: Annotated[str, typer.Argument(help="The second prompt (B), with as many tokens as A.")],
    model: ModelOpt = DEFAULT_MODEL,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (answers, ld, patch.recovered[layer][position], …).")] = False,
    export: Annotated[Optional[str], typer.Option("--export", help="Also write FILE.html: both prompts, both predictions and the patching heatmap, one self-contained page for a browser.")] = None,
    memory: MemoryOpt = None,
) -> None:
    """Compare two prompts of one length, and find where A's answer lives by activation patching:
    B's run with A's residual stream put in at each layer and position, and how much of the logit
    difference between A's and B's answers that gives back.

    Example: tracer compare "A B C D E F" "A B C D E Q"
    """
    from ..run.interventions import activation_patching
    from ..loaders import load
    from ..render.progress import reading_progress
    from ..tokenizers.tokens import check_prompt

    check_prompt(a)
    check_prompt(b)
    if export:
        from ..formats.files import check_output_path

        check_output_path(export, "--export", (".html",))
    m = load(model, progress=reading_progress, memory=memory)
    a_ids, b_ids = m.tokenize(a), m.tokenize(b)
    from ..render.progress import layers_progress

    with layers_progress(streamed_layers(m), not json_out):
        result = activation_patching(m, a_ids, b_ids)
    if export:
        from ..render.page.compare import export_compare

        export_compare(export, result, m.tokenizer, a_ids, b_ids, prompts=(a, b), model=m.name)
        said_export(export, True, "the comparison page, one self-contained file: open it in a browser")
    if json_out:
        from ..render.jsonout import dumps

        names = [m.tokenizer.token_str(i) for i in result["answers"]]
        typer.echo(dumps({"a_ids": a_ids, "b_ids": b_ids, "answers": result["answers"], "answer_tokens": names,
                          "ld": result["ld"], "differs": result["differs"], "distance": result["distance"],
                          "patch": {"recovered": result["recovered"], "answers": names}}))
        return
    from ..render.compare import compare_view

    make_console().print(compare_view(result, m.tokenizer, a_ids, b_ids))
