"""The generation loop made visible: each pass (what it read, what it computed, what it reused from
the KV cache, what it predicted), the cache's rows and the multiply-adds it saves, and the
`--verify-cache` result.

The article's loop: "Add G to sequence becoming ABCDEFG and goes through another 24 layers of
calculation to get H, until we generate the end token". The seed Q&A claims "You have to
recompute everything for the new context"; the KV cache view shows that every earlier key and value
is reused. Multiply-adds are counted from the shapes (`Config.pass_macs`).
"""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..tokenizers.tokens import label, named
from .fmt import count, cprob, integer, layer_runs, num, prob, sequence, size, span, stok, tok
from ..core.equations import largest_first
from ..run.trace import DRAFT
from .words import say


def cache_rows(gen, passes=None) -> list[dict]:
    """Per pass (every pass of `gen` by default): positions reused from the cache, computed, and
    multiply-adds with and without reuse (by the config of the model that ran it)."""
    rows = []
    for n, s in enumerate(gen.passes if passes is None else passes):
        total, start, cfg = len(s.tokens), s.start, s.config
        rows.append({"step": n, "positions": total, "reused": start, "computed": total - start,
                     "macs": cfg.pass_macs(total - start, total), "full": cfg.pass_macs(total, total)})
    return rows


def pass_who(p) -> str:
    """Which row a pass extends, the row it continued, and whether the draft model ran it: "row 1,
    continuing row 0 (the draft model)"."""
    who = say("rows.row", row=str(p.row)) if p.parent is None else say("rows.continues", row=str(p.row),
                                                                         parent=str(p.parent))
    return who + (say("rows.draft") if p.model == DRAFT else "")


def kv_cache_view(gen, tokenizer, view) -> Group:
    """Which rows each pass reused from the KV cache and which it computed, and the work saved."""
    on = gen.settings.cache
    rows = cache_rows(gen)
    many = not gen.plain  # several rows, or a draft's passes: each pass says whose it is
    t = Table(title=say("loop.table", state="on" if on else say("loop.cache_off")),
              title_justify="left")
    for c, j in (("pass", "right"), *((("row", "left"),) if many else ()), ("reused | computed", "left"),
                 ("rows", "right"), ("multiply-adds", "right"), ("recompute all", "right"), ("saved", "right")):
        t.add_column(c, justify=j, no_wrap=True)
    for r, p in zip(rows, gen.passes):
        n, start = r["positions"], r["reused"]
        if n <= 26:
            split = f"{sequence(0, start)} | {''.join(label(i) for i in range(start, n))}" if start else f"| {sequence(0, n)}"
        else:
            split = f"{span(0, start)} | {span(start, n)}" if start else f"| {span(0, n)}"
        saved = r["full"] - r["macs"]
        t.add_row(str(r["step"]), *((pass_who(p),) if many else ()), split, f"{start} + {n - start}",
                  integer(r["macs"]), integer(r["full"]), f"{100 * saved / r['full']:.0f}%" if r["full"] else "0%")
    notes = kv_notes(gen, rows)
    kinds = cache_by_layer(gen)  # a hybrid: what each layer keeps, in bytes
    parts = [t, *(Text(x) for x in notes), *([kinds] if kinds is not None else [])]
    if "verify_cache" in gen.meta and isinstance(gen.meta["verify_cache"], dict):
        parts.append(verify_cache_view(gen.meta["verify_cache"]))
    return Group(*parts)


def kept_words(cfg, kept: list[int]) -> str:
    """What each layer's cache keeps of a position: "layers 0, 1: 2 × 2 × 16; layer 2: 2 × 1 × 32; layers 3, 4: none
    (they attend with the keys and values of layers 1, 2)"."""
    groups: dict = {}
    for l, n in enumerate(kept):
        view = cfg.layer(l)
        groups.setdefault(f"2 × {view.kv_heads} × {view.d_head}" if n else "none", []).append(l)
    said = []
    for what, layers in groups.items():
        names = f"layer{'s' * (len(layers) > 1)} {', '.join(map(str, layers))}"
        why = ""
        if what == "none" and cfg.kv_source and any(cfg.kv_source[l] != l for l in layers):
            why = f" of their own (they attend with the keys and values of layers {', '.join(str(cfg.kv_source[l]) for l in layers)})"
        said.append(f"{names}: {what}{why}")
    return "; ".join(said)


def kv_notes(gen, rows: list[dict] | None = None) -> list[str]:
    """What the KV cache's table says, in sentences (the terminal and the page): each reused row's size,
    grouped-query attention's saving, the totals, the Q&A's claim."""
    cfg = gen.steps[0].config
    on = gen.settings.cache
    rows = cache_rows(gen) if rows is None else rows
    done = sum(r["macs"] for r in rows)
    full = sum(r["full"] for r in rows)
    grows, fixed = cache_layers(cfg)
    per_row = 2 * len(grows) * cfg.kv_heads * cfg.d_head
    kv = count(cfg.n_heads, "head") if cfg.kv_heads == cfg.n_heads else count(cfg.kv_heads, "key/value head")
    notes = ["Left of |: positions whose keys and values came from the cache; right: positions computed in this pass."]
    kept = [cfg.attention_of(l).cache_row(cfg.layer(l), l) for l in range(cfg.n_layers)]  # per layer: what a row holds
    if fixed:  # a hybrid: the linear-attention layers keep a state, no rows
        notes.append(say("cache.rows", layers=count(len(grows), "layer"), kv=kv, d_head=str(cfg.d_head),
                         numbers=integer(per_row), linear=layer_runs(fixed), s="s" if len(fixed) == 1 else ""))
    elif len(set(kept)) > 1:  # layers that keep different rows (Gemma 4's head sizes and shared layers)
        per_row = sum(kept)
        notes.append(f"Each reused row is that token's keys and values in the layers that keep them (key and value × "
                     f"key/value heads × dims): {kept_words(cfg, kept)}; {integer(per_row)} numbers in all, computed once "
                     f"and kept.")
    else:
        notes.append(f"Each reused row is that token's keys and values in every layer: 2 × {count(cfg.n_layers, 'layer')} × "
                     f"{kv} × {cfg.d_head} dims = {integer(per_row)} numbers, computed once and kept.")
    if cfg.kv_heads < cfg.n_heads and len({k for k in kept if k}) == 1:  # the same rows in every layer that keeps any
        full_row = 2 * len(grows) * cfg.n_heads * cfg.d_head
        notes.append(f"Grouped-query attention: {cfg.n_heads} query heads share {count(cfg.kv_heads, 'key/value head')}, so the "
                     f"cache keeps {integer(per_row)} numbers per token instead of {integer(full_row)} "
                     f"({cfg.n_heads // cfg.kv_heads}× less); at {cfg.n_ctx:,} tokens of context in bfloat16 that is "
                     f"{size(per_row * cfg.n_ctx * 2)} instead of {size(full_row * cfg.n_ctx * 2)}.")
    if len(rows) > 1 and on:
        notes.append(f"Total: {integer(done)} multiply-adds with the cache against {integer(full)} recomputing every "
                     f"row each pass: {100 * (full - done) / full:.0f}% saved.")
    elif len(rows) > 1:
        cached = sum(g.config.pass_macs(1 if k else len(g.tokens), len(g.tokens)) for k, g in enumerate(gen.passes))
        notes.append(f"Total: {integer(full)} multiply-adds recomputing every row; with the cache it would be "
                     f"{integer(cached)} ({100 * (full - cached) / full:.0f}% less).")
    else:
        notes.append("One pass only (the prompt): every row is computed; generate more tokens (--max-new-tokens) "
                     "to see later passes reuse the cache.")
    if not gen.plain:
        drafts = sum(p.model == DRAFT for p in gen.passes)
        notes.append(say("rows.caches", rows=count(len(gen.rows), "row"), drafts=str(drafts)))
    notes.append("The Q&A says \"You have to recompute everything for the new context.\" Not with a KV cache: an "
                 "earlier token's keys and values never change (the causal mask stops it from seeing later tokens), "
                 "so each new pass computes Q, K and V for the new token only and reuses the rest. "
                 "--verify-cache runs both ways and compares the logits.")
    if fixed:
        notes.append(say("cache.recurrence", layers=layer_runs(fixed)))
    expansion = gen.meta.get("expansion")
    if isinstance(expansion, dict) and expansion.get("mode") == "layer by layer" and len(rows) > 1:
        notes.append(f"The cache saves arithmetic, not reading: this model is {expansion.get('text', 'streamed')}, so "
                     f"each pass expands again every layer the budget could not keep, the one-token passes too.")
    return notes


def cache_layers(cfg) -> tuple[list[int], list[int]]:
    """The layers whose cache grows by a row a token (softmax attention's keys and values), and those that
    keep a cache of one size whatever the length (linear attention's state): `Sublayer.cache_bytes`."""
    grows, fixed = [], []
    for l in range(cfg.n_layers):
        kind = cfg.attention_of(l)
        one, two = kind.cache_bytes(cfg.layer(l), 1, l), kind.cache_bytes(cfg.layer(l), 2, l)
        (grows if two > one else fixed if one else []).append(l)
    return grows, fixed


def cache_kinds(cfg, n: int) -> dict | None:
    """A hybrid model's cache, kind by kind: {"head": the columns' words, "rows": [layers, what they keep, bytes
    per layer after n positions, at n_ctx], "all": the whole cache's row} (`Sublayer.cache_bytes`, what
    `tracer.core.decoder.KVCache` allocates); None when every layer keeps a cache of the same kind. The
    terminal's table and the page's read it alike."""
    grows, fixed = cache_layers(cfg)
    if not fixed:
        return None
    kinds: dict = {}
    for l in grows + fixed:
        kinds.setdefault(cfg.attention_of(l), []).append(l)
    rows = []
    for kind, layers in sorted(kinds.items(), key=lambda kv: kv[1][0]):
        one = layers[0]
        kept = [size(kind.cache_bytes(cfg.layer(one), m, one)) for m in (1, n, cfg.n_ctx)]
        keeps = say("cache.grows", per_token=kept[0]) if one in grows else say("cache.state")
        rows.append([layer_runs(sorted(layers)), keeps, kept[1], kept[2]])
    total = [sum(cfg.attention_of(l).cache_bytes(cfg.layer(l), m, l) for l in range(cfg.n_layers)) for m in (n, cfg.n_ctx)]
    return {"title": say("cache.kinds"),
            "head": [say("cache.layer"), say("cache.keeps"), say("cache.now", n=str(n)), say("cache.ctx", n_ctx=f"{cfg.n_ctx:,}")],
            "rows": rows, "all": [say("cache.all", n=count(cfg.n_layers, "layer")), "", size(total[0]), size(total[1])]}


def cache_by_layer(gen) -> Table | None:
    """`cache_kinds` as a table, after the last pass's positions."""
    kinds = cache_kinds(gen.steps[0].config, len(gen.steps[-1].tokens))
    if kinds is None:
        return None
    t = Table(title=kinds["title"], title_justify="left")
    for c, j in zip(kinds["head"], ("left", "left", "right", "right")):
        t.add_column(c, justify=j, no_wrap=j == "right")
    for row in kinds["rows"]:
        t.add_row(*row)
    t.add_row(*kinds["all"], style="bold")
    return t


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
        t.add_row(f"pass {n}: max |Δ logit|", f"{d:.2e}", "✓" if d <= bound else "✗")
    t.add_row("largest |Δ logit|", f"{float(result.get('max_abs_diff', 0.0)):.2e}", "")
    t.add_row("allowed", f"{float(result.get('tolerance', 0.0)):.0e} × {num(result.get('scale', 1.0), 2)} "
              f"= {bound:.2e} ({result.get('dtype', '?')})", "✓" if float(result.get("max_abs_diff", 0.0)) <= bound else "✗")
    t.add_row("tokens (cache)", " ".join(str(i) for i in result.get("generated_cache", [])), "")
    t.add_row("tokens (no cache)", " ".join(str(i) for i in result.get("generated_no_cache", [])),
              "✓" if result.get("tokens_equal") else "✗")
    verdict = Text(say("verify.ok") if ok else say("verify.bad"), style="bold green" if ok else "bold red")
    note = Text("The allowed difference is the dtype's tolerance times the largest |logit| (at least 1): the same "
                "sums in another order differ in the last bits.", style="dim")
    return Group(t, verdict, note)


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
        elif b + "attn.hook_beta" in step and b + "attn.hook_decay" in step:  # linear attention: a state, no weights
            beta, g = step[b + "attn.hook_beta"][-1], step[b + "attn.hook_decay"][-1]  # [v_head] ×2
            looks = " ".join(say("linear.cell", keep=cprob(np.exp(float(g[h]))), beta=cprob(float(beta[h])))
                             for h in range(min(len(beta), 4)))
        t.add_row(str(l), nrm("hook_resid_pre"), nrm("hook_attn_out"), nrm("hook_mlp_out") if cfg.mlp else "–",
                  nrm("hook_resid_post"), looks)
    return t


def generation_steps(gen, tokenizer, view) -> Group:
    """Every pass of the loop, compact: the sequence with letters, the new token's pass, its prediction."""
    parts = [Text("The loop: predict, append, run again", style="bold")]
    p = view.precision
    many = not gen.plain
    for n, step in enumerate(gen.passes):
        total, start = len(step.tokens), step.start
        chosen = int(step["sample.token"]) if "sample.token" in step else None
        appended = gen.kept(step)
        head = Text()
        head.append(f"pass {n}: ", style="bold")
        if many:
            head.append(say("rows.pass", who=pass_who(step)), style="bold")
        reads = (say("loop.reads_prompt", span=span(0, total)) if n == 0 else
                 say("loop.reads", named=named(total - 1, tok(tokenizer, step.tokens[-1]))))
        head.append(reads)
        if start > 0:
            head.append(say("loop.computes", new=span(start, total), old=span(0, start)))
        elif many and n > 0 and not any(q.model == step.model for q in gen.passes[:n]):
            head.append(say("rows.first", n=str(total)))  # a draft's first pass: nothing of its own cached yet
        elif n > 0:
            head.append(say("loop.recomputes", n=str(total)))
        parts.append(head)
        parts.append(Text("  " + pass_line(step, view), style="dim"))
        if not view.brief:
            parts.append(pass_table(step, view))
        if chosen is not None and "sample.probs" in step:
            probs = step["sample.probs"]
            order = largest_first(probs)[:3]
            alts = ", ".join(f"{stok(tokenizer, i)} {cprob(probs[i])}" for i in order)
            end = chosen in tokenizer.eos_ids
            line = Text("  " + say("loop.predicts"))
            line.append(tok(tokenizer, chosen) if end else named(total, tok(tokenizer, chosen)), style="bold")
            line.append(say("loop.top3", p=prob(probs[chosen], p), alts=alts))
            parts.append(line)
            if end:
                parts.append(Text("  the end token: generation stops (it takes no position of its own)", style="dim"))
            elif appended:
                new = named(total, tok(tokenizer, chosen))
                parts.append(Text(f"  {sequence(0, total)} → {sequence(0, total + 1)}"
                                  + ("" if new.startswith(f"{label(total)} = ") else f"   ({new})")))
            elif many and list(step.tokens) != gen.row_tokens(step.row):  # not its row's last pass: dropped
                parts.append(Text("  " + say("rows.not_kept"), style="dim"))
            else:
                parts.append(Text("  " + say("loop.not_appended", why=stop_reason(gen, step.row)), style="dim"))
    parts.append(Text(generated_words(gen)))
    return Group(*parts)


def generated_words(gen) -> str:
    """The run's result in one sentence: how many tokens, the text, why it stopped (the terminal and the
    page); with several rows, one sentence per row."""
    if gen.plain:
        return f"Generated {len(gen.generated_ids)} token(s): {gen.text!r}; stopped: {stop_reason(gen)}."
    return " ".join(say("rows.generated", row=str(r), n=str(len(row.generated_ids)), text=repr(row.text),
                        why=stop_reason(gen, r), score="" if row.score is None else say("rows.score", score=num(row.score, 4)))
                    for r, row in enumerate(gen.rows))


def stop_reason(gen, row: int = 0) -> str:
    why, s = gen.rows[row].stopped or "max_new_tokens", gen.settings
    return {"end_token": "the end token was generated",
            "stop_string": f"a stop string appeared ({', '.join(repr(x) for x in s.stop)})",
            "max_new_tokens": f"max-new-tokens {s.max_new_tokens} reached"}.get(why, str(why))
