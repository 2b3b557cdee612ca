"""The walkthrough: a recorded generation shown in the seed article's order and words.

1 Tokens (A, B, … with their text, id and position), 2 the first layer token by token
("A queries the embedding matrix…", "+ position vector P1", Q, K, V per head, the causal mask,
Q·K, softmax, "0.450×A_V + 0.550×B_V = …", heads concatenated through W_O, residual, layer
norm, MLP), 3 the other layers at a glance, 4 "How to Predict G" (final vector, W_U, logits,
softmax with temperature, top-k, the chosen token, ABCDEF → ABCDEFG), 5 every position's
prediction, 6 attention heatmaps, then the generation loop and the checks of stated values.

It reads recorded arrays only (a `tracer.run.trace.Generation`); it never recomputes the model.
Weights are not in a trace, so matrices appear by their shapes (from the config). A trace
recorded with a names filter renders what it holds and lists what is missing. Stated values
(`view.checks`, from a scenario) appear beside the step that shows their hook, with ✓ or ✗;
the rest are listed at the end with "N of M stated values agree". `--token` may also name a
generated token: its own pass is shown, with the keys and values it reused from the KV cache.
Follows the seed article (`shared/seeds/000_…txt`).
"""

from __future__ import annotations

import numpy as np
from rich.console import Group, RenderableType, group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .. import sections
from ..sections import renders
from .checks import check_line
from .context import Ctx
from .experts import expert_heatmaps
from .fmt import count, integer
from .header import ablation_words, file_sampling_words, head_roles_line, model_words, settings_words, training_line, weights_warning
from .heatmap import heatmaps
from .layer import layer_sections  # noqa: F401  section 2: it enters itself in tracer.sections, as sections 3–5 do
from .lens import logit_lens_view
from .linear import heatmap_note
from .loop import generation_steps, kv_cache_view
from .predict import every_position_section, layers_section, predict_section  # noqa: F401
from .storage import expansion_words, storage_words
from .summary import overflow_note
from .text import line, section
from .view import Resolved
from .words import say


@group()
def header(ctx: Ctx):
    cfg, meta = ctx.cfg, ctx.gen.meta
    yield line(("tracer", "bold"), " · " + model_words(meta, cfg))
    yield Text(settings_words(ctx.gen), style="dim")
    suggested = file_sampling_words(ctx.gen)
    if suggested:
        yield Text(suggested, style="dim")
    if isinstance(meta.get("training"), dict):
        yield Text(training_line(meta["training"]), style="dim")
    stored = storage_words(meta)
    if stored:
        yield Text(stored, style="dim")
    expanded = expansion_words(meta)
    if expanded:
        yield Text(expanded, style="dim")
    if isinstance(meta.get("ablation"), dict):
        yield Text(ablation_words(meta["ablation"], ctx.tok) + ". Every number below is the changed run's.", style="bold")
    words = weights_warning(meta)
    if words:
        yield Panel(Text(words, style="bold"), border_style="yellow", expand=False)
    overflow = overflow_note(ctx.gen)
    if overflow is not None:
        yield overflow


def token_rows(ctx: Ctx) -> Table:
    t = Table(show_edge=True, padding=(0, 1))
    t.add_column("token", style="bold")
    t.add_column("text")
    t.add_column("id", justify="right")
    t.add_column("position", justify="right")
    for pos, i in enumerate(ctx.ids[: ctx.n]):
        t.add_row(ctx.labels[pos], ctx.text(i), str(i), str(pos))
    return t


@renders("tokens")
@group()
def tokens_section(ctx: Ctx, number: str):
    n = ctx.n
    first = f"{ctx.labels[0]}–{ctx.labels[n - 1]}" if n > 1 else "A"
    yield section(f"{number} · Tokens")
    yield line(say("tokens.intro", tokens=count(n, "token"), first=first, vocab=ctx.tok.name, n_vocab=integer(ctx.tok.n_vocab)))
    yield token_rows(ctx)
    yield from ctx.checks("tokens", (), None)
    if isinstance(ctx.gen.meta.get("attribution"), dict):
        yield attribution_table(ctx, ctx.gen.meta["attribution"])


def attribution_table(ctx: Ctx, att: dict) -> Group:
    """--attribute: gradient × input at each prompt position for the chosen token's logit, as signed bars,
    and what such a score can and cannot say (a measurement is --ablate's)."""
    from .fmt import bar, num

    per = [float(v) for v in att.get("per_position", [])]
    top = max((abs(v) for v in per), default=0.0) or 1.0
    target = ctx.text(int(att["target_id"]))
    t = Table(box=None)
    for col, how in (("token", "left"), ("text", "left"), ("grad × input", "right"), ("", "left")):
        t.add_column(col, justify=how, no_wrap=True)
    for p, v in enumerate(per):
        t.add_row(ctx.labels[p], ctx.text(int(ctx.gen.prompt_ids[p])), num(v, ctx.p),
                  ("+" if v >= 0 else "−") + bar(abs(v) / top))
    given = say("attribute.input" if ctx.cfg.has_positions else "attribute.input_none")
    return Group(line(say("attribute.title", target=target, input=given)), t, line(say("attribute.caveat", target=target)))


@renders("heatmap")
@group()
def heatmap_section(ctx: Ctx, number: str):
    if ctx.cfg.n_layers == 0:
        return
    layers = ctx.resolved.heatmaps
    yield section(f"{number} · Attention heatmaps")
    sinks = any(ctx.records(f"blocks.{l}.attn.hook_sink_share") for l in layers)  # gpt-oss: rows sum to less than 1
    yield line("Row: the token that attends; column: the key it reads. Each row sums to 1; "
                   "the triangle above the diagonal is hidden by the causal mask." + (say("heatmap.sinks") if sinks else ""))
    heads = ctx.shown_heads()
    for layer in layers:
        pat = ctx.get(f"blocks.{layer}.attn.hook_pattern")
        if pat is None:
            if ctx.records(f"blocks.{layer}.attn.hook_state"):  # a linear-attention layer: a state, no weights
                yield from heatmap_note(ctx, layer)
            continue
        drawn = [h for h in heads if h < len(pat)]  # --head may name a head only another kind of layer has
        if drawn:
            yield heatmaps(np.asarray(pat), ctx.labels[: ctx.n], ctx.labels[: ctx.n], drawn, layer, ctx.width)
    if len(heads) < ctx.cfg.n_heads:
        yield Text(f"(heads {heads[-1] + 1}–{ctx.cfg.n_heads - 1}: --head N or --full)", style="dim")
    yield from expert_heatmaps(ctx, layers)  # a mixture of experts: tokens × experts, layer by layer
    roles = head_roles_line(ctx.gen.meta.get("training"))
    if roles:
        yield line(roles)


@renders("loop")
@group()
def loop_section(ctx: Ctx, number: str):
    yield section(f"{number} · After predicting {ctx.labels[ctx.n]}: the loop")
    yield generation_steps(ctx.gen, ctx.tok, ctx.view)
    if ctx.gen.beams:  # beam search: the tree of every beam's continuations
        from .beams import beam_tree

        yield beam_tree(ctx.gen, ctx.tok, ctx.view)
    if isinstance(ctx.gen.meta.get("speculative"), dict):  # speculative decoding: each round, drafted and verified
        from .speculative import speculative_view

        yield speculative_view(ctx.gen, ctx.tok, ctx.view)
    yield kv_cache_view(ctx.gen, ctx.tok, ctx.view)


@renders("lens")
@group()
def lens_section(ctx: Ctx, number: str):
    yield section(f"{number} · Logit lens: when does the prediction appear?")
    yield logit_lens_view(ctx.step, ctx.tok, ctx.view)


@group()
def checks_section(ctx: Ctx):
    checks = ctx.book.checks
    if not checks:
        return
    rest = ctx.book.rest()
    n_ok = sum(1 for c in checks if c.ok)
    yield section("Checks")
    if rest and ctx.view.sections:  # the rest belong to sections not asked for: a count, not a list
        bad = sum(not c.ok for c in rest)
        yield Text(f"{count(len(rest), 'stated value')} ({bad} disagreeing) belong to sections not shown; "
                   "without --section each appears beside its step.", style="dim")
    elif rest:
        if len(rest) < len(checks):
            yield Text("Stated values not shown beside a step above:")
        yield from [check_line(c, ctx.p, ctx.dims, where=True) for c in rest]
    style = "bold green" if n_ok == len(checks) else "bold red"
    yield (Text(say("checks.agree", ok=str(n_ok), n=str(len(checks))), style=style)
               + Text(say("checks.disagree", bad=str(len(checks) - n_ok)) if n_ok < len(checks) else "", style="bold red"))


def missing_section(ctx: Ctx) -> list[RenderableType]:
    if not ctx.missing:
        return []
    names = sorted(ctx.missing)
    shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    return [Text(f"Not in this trace (recorded with a names filter), so not shown: {shown}", style="yellow")]


def walkthrough(gen, tokenizer, resolved: Resolved, width: int = 100) -> list[RenderableType]:
    """The sections the view asks for (`--section`; all by default), in the article's order
    (`tracer.sections`): a section keeps its number when others are hidden."""
    ctx = Ctx(gen, tokenizer, resolved, width)
    parts: list[RenderableType] = [header(ctx)]
    for number, names in sections.numbered():
        if resolved.shows(*names):
            parts.append(sections.drawn("terminal", names[0])(ctx, str(number)))
    parts.append(checks_section(ctx))
    parts += missing_section(ctx)
    return parts
