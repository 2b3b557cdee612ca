"""Small tables outside the walkthrough: `tracer tokens` (letter, visible text, id and position of
each token), `tracer scenarios`, a scenario's heading before its replay, and the note on a run
whose arithmetic overflowed (`overflow_note`, shown by the walkthrough and the demo)."""

from __future__ import annotations

from rich.console import group
from rich.table import Table
from rich.text import Text

from ..run.settings import setting
from ..tokenizers.tokens import label, show_token
from .fmt import num


def token_table(ids, tokenizer) -> Table:
    t = Table(title=f"Tokens ({tokenizer.name} vocabulary of {tokenizer.n_vocab:,})")
    for col in ("token", "text", "id", "position"):
        t.add_column(col, justify="right" if col in ("id", "position") else "left")
    for pos, i in enumerate(ids):
        t.add_row(label(pos), show_token(tokenizer.token_str(i)), str(int(i)), str(pos))
    return t


def models_table(found) -> Table:
    """What tracer can open on this machine (`tracer.readers.inventory.Found` rows)."""
    table = Table(title="Models tracer can open here (tracer trace PROMPT --model NAME)", title_justify="left")
    suggests = any(f.sampling for f in found)
    for col in ("name", "where", "family", "size", "stored as") + (("its file suggests",) if suggests else ()):
        table.add_column(col, justify="right" if col == "size" else "left", overflow="fold",
                         no_wrap=col == "name")  # a name whole, to copy into --model
    for f in found:
        size = f"{f.size / 2**20:,.1f} MB" if f.size else ""
        said = ", ".join(w for name, v in f.sampling if v is not None and (w := setting(name).words(v)))
        table.add_row(f.name, f.where, f.family, size, f.storage, *((said,) if suggests else ()))
    return table


def scenarios_table(rows) -> Table:
    """The shipped scenarios: (name, title, model shape) rows (`tracer.scenario.summaries`)."""
    table = Table(title="Shipped scenarios (tracer replay NAME)", title_justify="left")
    table.add_column("name", no_wrap=True)
    table.add_column("title")
    table.add_column("model")
    for row in rows:
        table.add_row(*row)
    return table


@group()
def scenario_header(scn):
    """A scenario's title, description and notes, printed before its walkthrough."""
    yield Text(scn.title, style="bold")
    if scn.description:
        yield Text(" ".join(scn.description.split()))
    for note in scn.notes:
        yield Text("Note" + (f" ({note['label']})" if note["label"] else "") + ": ", style="bold") + Text(note["text"])
    yield Text()


def overflow_words(found, dtype: str) -> str:
    """Where a run's arithmetic first left the finite numbers (`tracer.run.trace.NonFinite`), in words."""
    import numpy as np

    where = f"{found.name}[{', '.join(str(i) for i in found.index)}]" if found.index else found.name
    which = "the prompt's pass (pass 0)" if found.step == 0 else f"pass {found.step}"
    return (f"The arithmetic overflowed: in {which}, {where} = {num(found.value)} is the first recorded value "
            f"that is not a finite number ({dtype} holds numbers up to about {float(np.finfo(dtype).max):.1e}). "
            f"Values computed from it are ∞ or nan as well (∞ − ∞ and 0 × ∞ are nan): the numbers below are "
            f"what was computed, shown as nan, ∞ and −∞.")


def overflow_note(gen):
    """A marked panel naming the first value of `gen` that went NaN or ±∞, or None for a finite run."""
    from rich.panel import Panel

    from ..run.overflow import non_finite

    found = non_finite(gen)
    if found is None:
        return None
    return Panel(Text(overflow_words(found, gen.steps[0].config.dtype), style="bold"), title="⚠ overflow",
                 title_align="left", border_style="red", expand=False)
