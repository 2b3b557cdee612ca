"""The generation loop made visible: each step, the sampling stages, the KV cache, every position's
prediction with its loss, the logit lens, the `--verify-cache` result, and a progress bar.

The article's loop: "Add G to sequence becoming ABCDEFG and goes through another 24 layers of
calculation to get H, until we generate the end token". The seed Q&A asks which output vector
feeds the final linear layer (every position's does; generation uses only the last row, see
`every_position`) and claims "You have to recompute everything for the new context" (the KV cache
reuses every earlier key and value, see `kv_cache_view`).

Each function takes recorded arrays (a `Trace` step or a `Generation`), the tokenizer and a
`tracer.render.view.View`, and returns a Rich renderable. They read what the core recorded
(`sample.*`, `predict.*`, `loss.per_position`, `lens.*`, `tracer.generate.verify_cache`'s dict);
the only arithmetic here is about what is shown (sorting, cumulative bands, norms, and the
multiply-add counts of `tracer.generate.pass_macs`, which depend on the config alone).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

import numpy as np
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..generate import pass_macs
from ..tokens import label, show_token
from .fmt import integer, letters, num, prob

BRIEF_ROWS = 16  # rows of the every-position table in brief mode (first and last ones)
BRIEF_LENS_COLUMNS = 6  # positions of the logit lens table in brief mode (the last ones)
PROGRESS_PARAMS = 50_000_000  # models larger than this get a progress bar for multi-token runs


# --------------------------------------------------------------------------- small helpers


def tok(tokenizer, i) -> str:
    """A token's text with visible whitespace, quoted: '␣are'."""
    return "'" + show_token(tokenizer.token_str(int(i))) + "'"


def stok(tokenizer, i, width: int = 10) -> str:
    """A token's text with visible whitespace, cut to `width` characters (for narrow columns)."""
    return short(show_token(tokenizer.token_str(int(i))), width)


def short(text: str, width: int = 10) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def cprob(x) -> str:
    """A probability in at most 4 characters: '.45', '1.00', '3e-5'."""
    x = float(x)
    if x >= 0.995:
        return "1.00"
    if x >= 0.005:
        return f"{x:.2f}"[1:]
    if x <= 0:
        return "0"
    return f"{x:.0e}".replace("e-0", "e-")


def sequence(n: int) -> str:
    """The letters of n positions: 'ABCDEF'; long ones 'A…AD'."""
    if n <= 26:
        return "".join(label(i) for i in range(n))
    return f"{label(0)}…{label(n - 1)}"


def span(a: int, b: int) -> str:
    """Letters of positions a..b-1: 'A–F', 'G', 'none'."""
    return letters([label(i) for i in range(a, b)])


def missing(step, names) -> Text | None:
    gone = [n for n in names if n not in step]
    if not gone:
        return None
    return Text(f"(not recorded in this trace: {', '.join(gone)})", style="dim")


def compact_rows(n: int, brief: bool, limit: int = BRIEF_ROWS) -> list[int | None]:
    """Row indices to show; None marks an elision."""
    if not brief or n <= limit:
        return list(range(n))
    head = limit // 2
    return list(range(head)) + [None] + list(range(n - (limit - head), n))


def settings_of(step) -> dict:
    return dict(step.meta.get("settings") or {})


# --------------------------------------------------------------------------- every position


def every_position(step, tokenizer, view) -> Group:
    """Each position's top next token, the token that actually follows, and its loss; generation uses the last row."""
    gone = missing(step, ["predict.top_token", "predict.top_prob", "predict.next_token", "predict.next_prob",
                          "loss.per_position"])
    title = Text("Every position predicts the next token", style="bold")
    if gone is not None:
        return Group(title, gone)
    p = view.precision
    top, top_p = step["predict.top_token"], step["predict.top_prob"]
    nxt, nxt_p, loss = step["predict.next_token"], step["predict.next_prob"], step["loss.per_position"]
    start, n = step.start, len(step.tokens)
    last = n - 1 - start  # row of the last position
    t = Table(title="Every position's prediction (teacher forcing, as in training)", title_justify="left")
    for col, just in (("", "left"), ("token", "left"), ("top next", "left"), ("p", "right"),
                      ("actual next", "left"), ("p(actual)", "right"), ("loss", "right"), ("", "left")):
        t.add_column(col, justify=just, no_wrap=True)
    for r in compact_rows(len(loss), view.brief):
        if r is None:
            t.add_row("…", "", "", "", "", "", "", "")
            continue
        pos = start + r
        t.add_row(label(pos), stok(tokenizer, step.tokens[pos]), stok(tokenizer, top[r]), prob(top_p[r], p),
                  stok(tokenizer, nxt[r]) + ("*" if r == last else ""), prob(nxt_p[r], p), num(loss[r], p),
                  "◀" if r == last else "", style="bold" if r == last else None)
    notes = [
        "The decoder turns every position's final vector into logits (the unembedding is applied to all rows at "
        "once); row p predicts the token at p + 1. loss = −log p(actual), in nats. * the token the sampler chose.",
    ]
    if last > 0:
        mean = float(np.mean(loss[:last]))
        notes.append(f"Training (teacher forcing) scores every row against the token that really follows: "
                     f"mean loss over rows {span(start, start + last)} = {num(mean, p)} nats "
                     f"(a uniform guess over {integer(step.config.d_vocab)} tokens: {num(np.log(step.config.d_vocab), p)}).")
    notes.append(f"◀ Generation reads only the last row ({label(n - 1)}) to choose the next token; the other rows "
                 "are computed anyway, because the same matrices process every position at once.")
    if start > 0:
        notes.append(f"This pass computed only {span(start, n)}: the earlier rows came from the KV cache and have no "
                     "logits in this pass (the prompt pass, step 0, has every row).")
    return Group(t, *(Text(s) for s in notes))


# --------------------------------------------------------------------------- sampling


def candidate_rows(probs: np.ndarray, chosen: int, k: int) -> tuple[np.ndarray, list[int]]:
    """Token ids by probability (ties by id), and the ranks to show: the top k, the chosen one last if lower."""
    order = np.argsort(-probs, kind="stable")  # [d_vocab]
    ranks = list(range(min(k, len(order))))
    where = int(np.flatnonzero(order == chosen)[0])
    if where not in ranks:
        ranks = ranks[: max(k - 1, 0)] + [where]
    return order, ranks


class Fit:
    """A renderable that builds its table with as many data columns as the console width allows."""

    def __init__(self, build, label_width: int, col_width: int):
        self.build, self.label_width, self.col_width = build, label_width, col_width

    def fits(self, width: int) -> int:
        return max(1, (width - self.label_width - 4) // (self.col_width + 3))

    def __rich_console__(self, console, options):
        yield self.build(self.fits(options.max_width))


def sampling_stages(step, tokenizer, view) -> Group:
    """logits → ÷ temperature → softmax → top-k → top-p → renormalise → seeded draw → token, for the top candidates.

    One column per candidate (most likely first; the chosen one always shown), one row per stage,
    so the table reads top to bottom in the order the numbers are computed.
    """
    gone = missing(step, ["sample.scaled", "sample.probs", "sample.final", "sample.token"])
    title = Text("Sampling the next token", style="bold")
    if gone is not None:
        return Group(title, gone)
    p = view.precision
    s = settings_of(step)
    T = float(s.get("temperature", 0.0))
    greedy = T == 0
    scaled, probs, final = step["sample.scaled"], step["sample.probs"], step["sample.final"]
    chosen = int(step["sample.token"])
    n_vocab = len(probs)
    n_k = int(step["sample.kept_top_k"]) if "sample.kept_top_k" in step else int(np.count_nonzero(final))
    n_p = int(step["sample.kept_top_p"]) if "sample.kept_top_p" in step else int(np.count_nonzero(final))
    u = float(step["sample.uniform"]) if "sample.uniform" in step else None
    logits = step["logits"][-1] if "logits" in step else None
    top_k, top_p = s.get("top_k"), s.get("top_p")
    order = np.argsort(-probs, kind="stable")  # [d_vocab] most likely first, ties by id
    cum = np.cumsum(final[order[:n_p]])  # [n_keep] upper edge of each kept candidate's band

    stages = ["logits", f"÷ temperature {num(T, 2)}" if not greedy else "temperature 0 (greedy)", "softmax"]
    if not greedy:
        stages += [f"top-k {top_k}" if top_k is not None else "top-k off",
                   f"top-p {top_p}" if top_p is not None else "top-p off", "renormalise",
                   f"draw u (seed {s.get('seed', '?')})"]
    stages.append("token")
    head = Text(" → ".join(stages), style="bold")

    def build(max_cols: int) -> Table:
        _, ranks = candidate_rows(probs, chosen, min(view.top_k, max_cols))
        t = Table(title=f"The top {len(ranks)} of {integer(n_vocab)} candidates, stage by stage", title_justify="left")
        t.add_column("stage", no_wrap=True)
        for r in ranks:
            t.add_column(f"#{r + 1}", justify="right", no_wrap=True)
        ids = [int(order[r]) for r in ranks]
        rows = [("token", [short(show_token(tokenizer.token_str(i)), 11) for i in ids]),
                ("id", [str(i) for i in ids])]
        if logits is not None:
            rows.append(("logit", [num(logits[i], p) for i in ids]))
        if not greedy:
            rows.append((f"÷ {num(T, 2)}", [num(scaled[i], p) for i in ids]))
        rows.append(("softmax", [prob(probs[i], p) for i in ids]))
        if not greedy:
            rows.append((f"top-k {top_k if top_k is not None else 'off'}", ["kept" if r < n_k else "cut" for r in ranks]))
            rows.append((f"top-p {top_p if top_p is not None else 'off'}",
                         [("kept" if r < n_p else "cut") if r < n_k else "" for r in ranks]))
            rows.append(("renormalised", [prob(final[i], p) if r < n_p else "0" for r, i in zip(ranks, ids)]))
            rows.append(("band", [f"{num(cum[r - 1] if r > 0 else 0.0, 2)}–{num(cum[r], 2)}" if r < n_p else ""
                                  for r in ranks]))
        rows.append(("chosen", [("◀ u in band" if u is not None else "◀ top-1") if i == chosen else "" for i in ids]))
        for name, cells in rows:
            t.add_row(name, *cells, style="bold" if name == "chosen" else None)
        return t

    notes = []
    if greedy:
        notes.append(f"Temperature 0 is greedy: the most likely token, {tok(tokenizer, chosen)}, is chosen; "
                     "no random number is drawn (top-k and top-p do not matter).")
    else:
        notes.append(f"softmax(logits ÷ {num(T, 2)}): a temperature above 1 flattens the distribution, below 1 sharpens it.")
        notes.append(f"top-k: {'keeps the ' + str(n_k) + ' most likely' if top_k is not None else 'off, keeps all'} "
                     f"of {integer(n_vocab)} tokens.")
        mass = float(probs[order[:n_p]].sum())
        if top_p is not None and top_p < 1:
            notes.append(f"top-p {top_p}: keeps the {n_p} most likely of those, the fewest whose probabilities "
                         f"(renormalised after top-k) reach {top_p}.")
        else:
            notes.append("top-p: off, keeps them all.")
        notes.append(f"renormalise: the {n_p} kept probabilities add up to {prob(mass, p)}; each is divided by it, "
                     "so they sum to 1.")
        if u is not None:
            band = min(int(np.searchsorted(cum, u, side="right")), n_p - 1)
            lo = float(cum[band - 1]) if band > 0 else 0.0
            notes.append(f"draw: numpy's PCG64 generator seeded with {s.get('seed', '?')} gives u = {num(u, max(p, 4))}, "
                         f"uniform in [0, 1). Stacking the kept tokens' probabilities as bands from 0 to 1, u falls in "
                         f"band #{band + 1} [{num(lo, max(p, 4))}, {num(cum[band], max(p, 4))}), which is "
                         f"{tok(tokenizer, chosen)}. The same seed draws the same u on every machine.")
    return Group(head, Fit(build, 14, 12), *(Text(x) for x in notes))


# --------------------------------------------------------------------------- KV cache


def cache_rows(gen) -> list[dict]:
    """Per pass: positions reused from the cache, computed, and multiply-adds with and without reuse."""
    cfg = gen.steps[0].config
    rows = []
    for n, s in enumerate(gen.steps):
        total, start = len(s.tokens), s.start
        rows.append({"step": n, "positions": total, "reused": start, "computed": total - start,
                     "macs": pass_macs(cfg, total - start, total), "full": pass_macs(cfg, total, total)})
    return rows


def kv_cache_view(gen, tokenizer, view) -> Group:
    """Which rows each pass reused from the KV cache and which it computed, and the work saved."""
    cfg = gen.steps[0].config
    s = dict(gen.meta.get("settings") or settings_of(gen.steps[0]))
    on = bool(s.get("cache", True))
    rows = cache_rows(gen)
    t = Table(title=f"KV cache ({'on' if on else 'off: --no-cache'}): rows reused and computed per pass",
              title_justify="left")
    for c, j in (("step", "right"), ("reused | computed", "left"), ("rows", "right"), ("multiply-adds", "right"),
                 ("recompute all", "right"), ("saved", "right")):
        t.add_column(c, justify=j, no_wrap=True)
    for r in rows:
        n, start = r["positions"], r["reused"]
        if n <= 26:
            split = f"{sequence(start)} | {''.join(label(i) for i in range(start, n))}" if start else f"| {sequence(n)}"
        else:
            split = f"{span(0, start)} | {span(start, n)}" if start else f"| {span(0, n)}"
        saved = r["full"] - r["macs"]
        t.add_row(str(r["step"]), split, f"{start} + {n - start}", integer(r["macs"]), integer(r["full"]),
                  f"{100 * saved / r['full']:.0f}%" if r["full"] else "0%")
    done = sum(r["macs"] for r in rows)
    full = sum(r["full"] for r in rows)
    per_row = 2 * cfg.n_layers * cfg.n_heads * cfg.d_head
    notes = ["Left of |: positions whose keys and values came from the cache; right: positions computed in this pass.",
             f"Each reused row is that token's keys and values in every layer: 2 × {cfg.n_layers} layers × "
             f"{cfg.n_heads} heads × {cfg.d_head} dims = {integer(per_row)} numbers, computed once and kept."]
    if len(rows) > 1 and on:
        notes.append(f"Total: {integer(done)} multiply-adds with the cache against {integer(full)} recomputing every "
                     f"row each pass: {100 * (full - done) / full:.0f}% saved.")
    elif len(rows) > 1:
        cached = sum(pass_macs(cfg, 1 if k else len(g.tokens), len(g.tokens)) for k, g in enumerate(gen.steps))
        notes.append(f"Total: {integer(full)} multiply-adds recomputing every row; with the cache it would be "
                     f"{integer(cached)} ({100 * (full - cached) / full:.0f}% less).")
    else:
        notes.append("One pass only (the prompt): every row is computed; generate more tokens (--max-new-tokens) "
                     "to see later passes reuse the cache.")
    notes.append("The Q&A says \"You have to recompute everything for the new context.\" Not with a KV cache: an "
                 "earlier token's keys and values never change (the causal mask stops it from seeing later tokens), "
                 "so each new pass computes Q, K and V for the new token only and reuses the rest. "
                 "--verify-cache runs both ways and compares the logits.")
    if "verify_cache" in gen.meta and isinstance(gen.meta["verify_cache"], dict):
        return Group(t, *(Text(x) for x in notes), verify_cache_view(gen.meta["verify_cache"]))
    return Group(t, *(Text(x) for x in notes))


def verify_cache_view(result: dict) -> Group:
    """The `--verify-cache` result: the largest logit difference per pass, the bound, the tokens."""
    ok = bool(result.get("ok"))
    t = Table(title=f"--verify-cache: {result.get('compared', 'KV cache vs full recompute')}", title_justify="left")
    t.add_column("check", no_wrap=True)
    t.add_column("value")
    t.add_column("", no_wrap=True)
    diffs = result.get("per_step_max_abs_diff") or []
    bound = float(result.get("bound", result.get("tolerance", 0.0)))
    t.add_row("passes compared", str(result.get("steps", len(diffs))), "")
    for n, d in enumerate(diffs):
        t.add_row(f"step {n}: max |Δ logit|", f"{d:.2e}", "✓" if d <= bound else "✗")
    t.add_row("largest |Δ logit|", f"{float(result.get('max_abs_diff', 0.0)):.2e}", "")
    t.add_row("allowed", f"{float(result.get('tolerance', 0.0)):.0e} × {num(result.get('scale', 1.0), 2)} "
              f"= {bound:.2e} ({result.get('dtype', '?')})", "✓" if float(result.get("max_abs_diff", 0.0)) <= bound else "✗")
    t.add_row("tokens (cache)", " ".join(str(i) for i in result.get("generated_cache", [])), "")
    t.add_row("tokens (no cache)", " ".join(str(i) for i in result.get("generated_no_cache", [])),
              "✓" if result.get("tokens_equal") else "✗")
    verdict = Text("✓ the KV cache changes no logit beyond rounding and no token" if ok else
                   "✗ the KV cache and full recompute disagree", style="bold green" if ok else "bold red")
    note = Text("The allowed difference is the dtype's tolerance times the largest |logit| (at least 1): the same "
                "sums in another order differ in the last bits.", style="dim")
    return Group(t, verdict, note)


# --------------------------------------------------------------------------- logit lens


def lens_row_label(r: int, n_layers: int) -> str:
    """Row r of the lens: the residual stream after r layers."""
    if r == 0:
        return "0 (embed)"
    return f"{r}" + (" (final)" if r == n_layers else "")


def first_top(top: np.ndarray, token: int) -> tuple[int | None, int | None]:
    """First row where `token` is the top-1, and the row from which it stays top-1 to the end."""
    hits = np.flatnonzero(top == token)
    if hits.size == 0:
        return None, None
    stay = len(top)
    while stay > 0 and top[stay - 1] == token:
        stay -= 1
    return int(hits[0]), (stay if stay < len(top) else None)


def logit_lens_view(step, tokenizer, view) -> Group:
    """Layer × position: the top token (and probability) if the model stopped after each layer."""
    gone = missing(step, ["lens.positions", "lens.top_token", "lens.top_prob", "lens.target", "lens.target_rank"])
    title = Text("Logit lens", style="bold")
    if gone is not None:
        return Group(title, gone)
    positions = step["lens.positions"]
    top, top_p = step["lens.top_token"], step["lens.top_prob"]
    target, rank = step["lens.target"], step["lens.target_rank"]
    n_layers = top.shape[0] - 1
    n_cols = len(positions) if not view.brief else min(len(positions), BRIEF_LENS_COLUMNS)

    def build(max_cols: int) -> Table:
        cols = list(range(len(positions)))[-min(n_cols, max_cols):]
        t = Table(title="Logit lens: each layer's residual stream through the final layer norm and W_U",
                  title_justify="left")
        t.add_column("after layer", no_wrap=True)
        for c in cols:
            pos = int(positions[c])
            t.add_column(f"{label(pos)} {short(show_token(tokenizer.token_str(int(step.tokens[pos]))), 8)}",
                         no_wrap=True)
        for r in range(n_layers + 1):
            cells = []
            for c in cols:
                i = int(top[r, c])
                mark = "✓" if i == int(target[c]) else " "
                cells.append(f"{short(show_token(tokenizer.token_str(i)), 7)} {cprob(top_p[r, c])}{mark}")
            t.add_row(lens_row_label(r, n_layers), *cells)
        if len(cols) < len(positions):
            t.caption = f"the last {len(cols)} of {len(positions)} positions" + (" (--full and a wider terminal show more)")
        return t

    last = len(positions) - 1
    chosen = int(target[last])
    pos = int(positions[last])
    first, stays = first_top(top[:, last], chosen)
    notes = [f"Each cell: the most likely next token and its probability if the model stopped after that many "
             f"layers; ✓ marks the token that actually follows (at {label(pos)}: the chosen one)."]
    if first is None:
        notes.append(f"At the last position ({label(pos)}) the chosen token {tok(tokenizer, chosen)} is never the "
                     f"top-1; after the last layer it ranks #{int(rank[-1, last]) + 1} (it was sampled, not the most "
                     f"likely). Its rank by row: " + " ".join(str(int(x) + 1) for x in rank[:, last]) + ".")
    else:
        where = "in the embedding, before any layer" if first == 0 else f"after layer {first}"
        s = (f"At the last position ({label(pos)}) the chosen token {tok(tokenizer, chosen)} is the top-1 first "
             f"{where}")
        if stays is not None and stays != first:
            s += f", and stays the top-1 from layer {stays} on"
        notes.append(s + f". The article says it appears \"only after the 24th layer\"; this model has {n_layers} "
                     f"layers. Its rank by row: " + " ".join(str(int(x) + 1) for x in rank[:, last]) + ".")
    if int(positions[0]) > step.start:
        notes.append(f"(the lens covers the last {len(positions)} positions of this pass, to keep it fast on large models)")
    return Group(Fit(build, 11, 13), *(Text(x) for x in notes))


# --------------------------------------------------------------------------- the loop


def pass_line(step, view) -> str:
    """The new token's pass in one line: its residual norm through the layers and where the last layer looks."""
    cfg = step.config
    p = view.precision
    L = cfg.n_layers
    if L == 0 or "blocks.0.hook_resid_pre" not in step or f"blocks.{L - 1}.hook_resid_post" not in step:
        return f"through {L} layers"
    x0 = float(np.linalg.norm(step["blocks.0.hook_resid_pre"][-1]))
    x1 = float(np.linalg.norm(step[f"blocks.{L - 1}.hook_resid_post"][-1]))
    s = f"through {L} layers: ‖x‖ {num(x0, p)} → {num(x1, p)}"
    name = f"blocks.{L - 1}.attn.hook_pattern"
    if name in step:
        pat = step[name][:, -1, :]  # [head, key_pos]
        looks = [f"h{h} {label(int(np.argmax(pat[h])))} {cprob(pat[h].max())}" for h in range(pat.shape[0])]
        if len(looks) > 4:
            looks = looks[:4] + ["…"]
        s += f"; last layer looks at: {', '.join(looks)}"
    return s


def pass_table(step, view) -> Table:
    """The new token's pass, one row per layer (full mode)."""
    cfg = step.config
    p = view.precision
    t = Table(show_edge=False, pad_edge=False)
    for c in ("layer", "‖x‖ in", "‖attn out‖", "‖mlp out‖", "‖x‖ out", "heads look most at"):
        t.add_column(c, justify="left" if c in ("layer", "heads look most at") else "right", no_wrap=True)
    for l in range(cfg.n_layers):
        b = f"blocks.{l}."

        def nrm(name):
            return num(np.linalg.norm(step[b + name][-1]), p) if b + name in step else "–"

        looks = ""
        if b + "attn.hook_pattern" in step:
            pat = step[b + "attn.hook_pattern"][:, -1, :]  # [head, key_pos]
            looks = " ".join(f"{label(int(np.argmax(r)))}{num(r.max(), 2)}" for r in pat[:8])
        t.add_row(str(l), nrm("hook_resid_pre"), nrm("hook_attn_out"), nrm("hook_mlp_out") if cfg.mlp else "–",
                  nrm("hook_resid_post"), looks)
    return t


def generation_steps(gen, tokenizer, view) -> Group:
    """Every pass of the loop, compact: the sequence with letters, the new token's pass, its prediction."""
    parts = [Text("The loop: predict, append, run again", style="bold")]
    s = dict(gen.meta.get("settings") or settings_of(gen.steps[0]))
    p = view.precision
    for n, step in enumerate(gen.steps):
        total, start = len(step.tokens), step.start
        chosen = int(step["sample.token"]) if "sample.token" in step else None
        appended = n < len(gen.generated_ids)
        head = Text()
        head.append(f"step {n}: ", style="bold")
        reads = (f"reads {span(0, total)} (the prompt)" if n == 0 else
                 f"reads {label(total - 1)} = {tok(tokenizer, step.tokens[-1])}")
        head.append(reads)
        if start > 0:
            head.append(f"; computes {span(start, total)}, reuses {span(0, start)} from the KV cache")
        elif n > 0:
            head.append(f"; recomputes all {total} rows (no cache)")
        parts.append(head)
        parts.append(Text("  " + pass_line(step, view), style="dim"))
        if not view.brief:
            parts.append(pass_table(step, view))
        if chosen is not None and "sample.probs" in step:
            probs = step["sample.probs"]
            order = np.argsort(-probs, kind="stable")[:3]
            alts = ", ".join(f"{stok(tokenizer, i)} {cprob(probs[i])}" for i in order)
            line = Text("  predicts ")
            line.append(f"{label(total)} = {tok(tokenizer, chosen)}", style="bold")
            line.append(f" (p {prob(probs[chosen], p)}; top 3: {alts})")
            parts.append(line)
            if appended:
                parts.append(Text(f"  {sequence(total)} → {sequence(total + 1)}"))
            else:
                parts.append(Text(f"  (not appended: the run stops here, {stop_reason(s)})", style="dim"))
    parts.append(Text(f"Generated {len(gen.generated_ids)} token(s): {gen.text!r}; stopped: {stop_reason(s)}."))
    return Group(*parts)


def stop_reason(settings: dict) -> str:
    why = settings.get("stopped", "max_new_tokens")
    return {"end_token": "the end token was generated",
            "stop_string": f"a stop string appeared ({', '.join(repr(x) for x in settings.get('stop', []))})",
            "max_new_tokens": f"max-new-tokens {settings.get('max_new_tokens', '?')} reached"}.get(why, str(why))


# --------------------------------------------------------------------------- progress


def wants_progress(model, max_new_tokens: int, stream=None) -> bool:
    """A bar only for multi-token runs of large models, on a terminal."""
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return bool(max_new_tokens > 1 and model.config.n_params() > PROGRESS_PARAMS and isatty and isatty())


@contextmanager
def generation_progress(model, max_new_tokens: int, description: str = "generating", stream=None, force: bool = False):
    """Yields an `on_step(done, total)` callback drawing a Rich progress bar on stderr, or None."""
    if not (force or wants_progress(model, max_new_tokens, stream)):
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(file=stream if stream is not None else sys.stderr)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(description, total=max(max_new_tokens, 1))

        def on_step(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield on_step
