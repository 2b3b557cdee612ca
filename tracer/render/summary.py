"""Small tables outside the walkthrough: `tracer tokens` (letter, visible text, id and position of
each token), `tracer scenarios`, and a scenario's heading before its replay."""

from __future__ import annotations

from rich.console import group
from rich.table import Table
from rich.text import Text

from ..tokens import label, show_token


def token_table(ids, tokenizer) -> Table:
    t = Table(title=f"Tokens ({tokenizer.name} vocabulary of {tokenizer.n_vocab:,})")
    for col in ("token", "text", "id", "position"):
        t.add_column(col, justify="right" if col in ("id", "position") else "left")
    for pos, i in enumerate(ids):
        t.add_row(label(pos), show_token(tokenizer.token_str(i)), str(int(i)), str(pos))
    return t


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
