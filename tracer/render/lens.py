"""The logit lens: each layer's residual stream through the final layer norm and W_U, as if the model
stopped there, for the last positions of a pass (`lens.*`): when does the prediction appear? The
seed article says "only after the 24th layer"; the lens shows what really happens."""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..tokenizers.tokens import label, show_token
from .fmt import count, cprob, short, tok
from .text import Fit, missing
from .words import say

BRIEF_LENS_COLUMNS = 6  # positions of the logit lens table in brief mode (the last ones)


LENS_ROWS = "read from"  # the lens's first column: where each row's residual stream was read


def lens_row_label(r: int, n_layers: int) -> str:
    """Row r of the lens (the residual stream after r layers), in the 0-based names of the layers
    everywhere else: "embedding", "out of layer 0", …, "out of layer 3 (the last)"."""
    if r == 0:
        return "embedding"
    return f"out of layer {r - 1}" + (" (the last)" if r == n_layers else "")


def lens_where(r: int, n_layers: int) -> str:
    """Row r in a sentence: "in the embedding, before any layer", "out of layer 0", "out of layer 3, the last"."""
    if r == 0:
        return "in the embedding, before any layer"
    return f"out of layer {r - 1}" + (", the last" if r == n_layers else "")


def first_top(top: np.ndarray, token: int) -> tuple[int | None, int | None]:
    """First row where `token` is the top-1, and the row from which it stays top-1 to the end."""
    hits = np.flatnonzero(top == token)
    if hits.size == 0:
        return None, None
    stay = len(top)
    while stay > 0 and top[stay - 1] == token:
        stay -= 1
    return int(hits[0]), (stay if stay < len(top) else None)


def final_norm_words(cfg) -> str:
    """What the lens reads the residual stream through: "the final layer norm and W_U" (the model's own
    norm), or W_U alone for a model with no final norm (the article's blocks)."""
    return say("lens.through", norm=cfg.norm_kind.title) if cfg.layer_norm else say("lens.through_none")


def logit_lens_view(step, tokenizer, view) -> Group:
    """Layer × position: the top token (and probability) if the model stopped after each layer."""
    gone = missing(step, ["lens.positions", "lens.top_token", "lens.top_prob", "lens.target", "lens.target_rank"])
    title = Text("Logit lens", style="bold")
    if gone is not None:
        return Group(title, gone)
    positions = step["lens.positions"]
    top, top_p, target, rank = (step[k] for k in ("lens.top_token", "lens.top_prob", "lens.target", "lens.target_rank"))
    n_layers = top.shape[0] - 1
    n_cols = len(positions) if not view.brief else min(len(positions), BRIEF_LENS_COLUMNS)
    norm = final_norm_words(step.config)

    def build(max_cols: int) -> Table:
        cols = list(range(len(positions)))[-min(n_cols, max_cols):]
        t = Table(title=say("lens.title", through=norm),
                  title_justify="left")
        t.add_column(LENS_ROWS, no_wrap=True)
        for c in cols:
            pos = int(positions[c])
            t.add_column(f"{label(pos)} {short(show_token(tokenizer.token_str(int(step.tokens[pos]))), 8)}",
                         no_wrap=True)
        chosen = short(show_token(tokenizer.token_str(int(target[-1]))), 7)
        t.add_column(say("lens.rank", token=chosen), justify="right", no_wrap=True)  # the last position's
        for r in range(n_layers + 1):
            cells = []
            for c in cols:
                i = int(top[r, c])
                mark = "✓" if i == int(target[c]) else " "
                cells.append(f"{short(show_token(tokenizer.token_str(i)), 7)} {cprob(top_p[r, c])}{mark}")
            t.add_row(lens_row_label(r, n_layers), *cells, f"{int(rank[r, -1]) + 1:,}")
        if len(cols) < len(positions):
            t.caption = f"the last {len(cols)} of {len(positions)} positions" + (" (--full and a wider terminal show more)")
        return t

    return Group(Fit(build, n_cols), *(Text(x) for x in lens_notes(step, tokenizer)))


def lens_notes(step, tokenizer) -> list[str]:
    """What the lens table shows of the last position, in sentences (the terminal and the page): where the
    chosen token first becomes the top-1, against the article's "only after the 24th layer"."""
    positions, top = step["lens.positions"], step["lens.top_token"]
    target, rank = step["lens.target"], step["lens.target_rank"]
    n_layers = top.shape[0] - 1
    last = len(positions) - 1
    chosen = int(target[last])
    pos = int(positions[last])
    first, stays = first_top(top[:, last], chosen)
    notes = [f"Each cell: the most likely next token and its probability if the model stopped where the row "
             f"says; ✓ marks the token that actually follows (at {label(pos)}: the chosen one). "
             + say("lens.rank_note", token=tok(tokenizer, chosen), at=label(pos), n=f"{step.config.d_vocab:,}")]
    if first is None:
        notes.append(f"At the last position ({label(pos)}) the chosen token {tok(tokenizer, chosen)} is never the "
                     f"top-1; out of the last layer it ranks #{int(rank[-1, last]) + 1} (it was sampled, not the most "
                     f"likely).")
    else:
        where = lens_where(first, n_layers)
        s = (f"At the last position ({label(pos)}) the chosen token {tok(tokenizer, chosen)} first becomes the top-1 "
             f"{where}")
        if stays is not None and stays != first:
            s += f", and stays the top-1 from layer {stays - 1}'s output on"
        if first < n_layers:
            s += (f". The article says the prediction appears \"only after the 24th layer\", the last; in this model "
                  f"of {count(n_layers, 'layer')}{f' (0 to {n_layers - 1})' if n_layers > 1 else ''} it is there already {where}")
        else:
            s += ", as the article says of its 24th"
        notes.append(s + ".")
    if int(positions[0]) > step.start:
        notes.append(f"(the lens covers the last {len(positions)} positions of this pass, to keep it fast on large models)")
    return notes

