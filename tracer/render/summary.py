"""The token table of `tracer tokens`: letter, visible text, id and position of each token.

(The walkthrough's own token section lives in `walkthrough.py`.)
"""

from __future__ import annotations

from rich.table import Table

from ..tokens import label, show_token


def token_table(ids, tokenizer) -> Table:
    t = Table(title=f"Tokens ({tokenizer.name} vocabulary of {tokenizer.n_vocab:,})")
    for col in ("token", "text", "id", "position"):
        t.add_column(col, justify="right" if col in ("id", "position") else "left")
    for pos, i in enumerate(ids):
        t.add_row(label(pos), show_token(tokenizer.token_str(i)), str(int(i)), str(pos))
    return t
