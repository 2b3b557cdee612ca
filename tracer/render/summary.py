"""A minimal text summary of a generation (the walkthrough renderer builds the full view)."""

from __future__ import annotations

import numpy as np
from rich.console import Group
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


def summary(gen, tokenizer) -> Group:
    first = gen.steps[0]
    cfg = first.config
    parts = [token_table(gen.prompt_ids, tokenizer)]
    parts.append(Text(f"model {first.meta.get('model')}: {cfg.n_layers} layers, d_model {cfg.d_model}, "
                      f"{cfg.n_heads} heads; {len(first)} arrays recorded in the prompt pass"))
    if not first.meta.get("trained"):
        parts.append(Text("These weights are untrained (seeded at random): the predictions are meaningless "
                          "until real weights are loaded (--model gpt2).", style="bold yellow"))
    for n, step in enumerate(gen.steps):
        probs = step["sample.probs"]
        tok = int(step["sample.token"])
        parts.append(Text(f"step {n}: {len(step.tokens)} tokens seen, {step.n_new} computed → "
                          f"{show_token(tokenizer.token_str(tok))!s} (id {tok}, p={float(probs[tok]):.4f})"))
    seq = "".join(label(i) for i in range(len(gen.tokens)))
    parts.append(Text(f"sequence {seq}: {gen.text!r}"))
    return Group(*parts)
