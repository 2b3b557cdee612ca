"""What the page carries of each pass: the prediction (logits, the top candidates, the draw), the
KV cache's split, every position's prediction and the logit lens; and where each stated value
(a scenario's check) belongs.

The temperature control recomputes softmax(logits ÷ T) in the page over the last position's logits,
so those are carried exactly: little-endian float64 (or float32 for a float32 model), base64, the
same bits the sampler read. Passes whose logits would pass `LOGITS_BUDGET` bytes carry only the
recorded top candidates, and the page says so. Reads recorded arrays only.
"""

from __future__ import annotations

import base64

import numpy as np

from ... import sections
from ...core import hooks
from ...tokenizers.tokens import label, named, show_token
from ..checks import check_line
from ..lens import LENS_ROWS, lens_notes, lens_row_label
from ..loop import cache_rows, pass_who, stop_reason
from .data import cut, r6, r6s
from ...core.equations import largest_first

LOGITS_BUDGET = 2_500_000  # bytes of base64 logits per page (GPT-2's 50,257 float32 logits: 268 kB a pass)


def exact_logits(row, dtype: str) -> dict:
    """The logits' bits as base64 (little-endian), for the page to recompute softmax exactly."""
    a = np.ascontiguousarray(np.asarray(row, dtype="<f8" if dtype == "float64" else "<f4"))  # [d_vocab]
    return {"dtype": dtype, "b64": base64.b64encode(a.tobytes()).decode("ascii")}


def top_ids(probs, chosen: int | None, k: int) -> list[int]:
    """The k most likely ids (ties by id, as the terminal's tables), and the chosen one if lower."""
    order = largest_first(probs)[: min(k, len(probs))]
    ids = [int(i) for i in order]
    if chosen is not None and chosen not in ids:
        ids.append(chosen)
    return ids


def pass_data(gen, k: int, cfg, top_k: int, whole: int, carry_logits: bool) -> dict:
    st = gen.steps[k]
    arrays = st.arrays
    total, start = len(st.tokens), st.start
    chosen = int(arrays["sample.token"]) if "sample.token" in arrays else None
    out = {"start": int(start), "n": int(total), "reads": int(total - 1), "chosen": chosen,
           "appended": k < len(gen.generated_ids), "logits": None, "logits_vec": None, "top": None}
    if "logits" in arrays:
        last = np.asarray(arrays["logits"][-1])  # [d_vocab]
        out["logits_vec"] = {"dims": int(last.size), "whole": bool(last.size <= whole), "rows": [cut(last, whole)],
                             "norm": [r6(np.linalg.norm(last.astype(float)))]}
        if carry_logits:
            out["logits"] = exact_logits(last, cfg.dtype)
    if "sample.probs" in arrays:
        probs = np.asarray(arrays["sample.probs"])  # [d_vocab]
        ids = top_ids(probs, chosen, max(top_k, 20) if cfg.d_vocab <= 20 else top_k)
        pick = lambda name: r6s(np.asarray(arrays[name])[ids]) if name in arrays else None  # noqa: E731
        out["top"] = {"ids": ids, "logit": r6s(np.asarray(arrays["logits"][-1])[ids]) if "logits" in arrays else None,
                      "scaled": pick("sample.scaled"), "probs": pick("sample.probs"), "final": pick("sample.final"),
                      "rank": [int((probs > probs[i]).sum()) + 1 for i in ids]}
    lens = lens_data(st)
    if lens is not None:
        out["lens"] = lens
    return out


def lens_data(st) -> dict | None:
    names = ("lens.positions", "lens.top_token", "lens.top_prob", "lens.target", "lens.target_rank")
    if not all(n in st.arrays for n in names):
        return None
    a = st.arrays
    n = int(np.asarray(a["lens.top_token"]).shape[0]) - 1  # layers: row r is the stream after r of them
    return {"positions": [int(x) for x in a["lens.positions"]],
            "top": np.asarray(a["lens.top_token"]).astype(int).tolist(),
            "p": [r6s(row) for row in np.asarray(a["lens.top_prob"])],
            "target": [int(x) for x in a["lens.target"]],
            "rank": np.asarray(a["lens.target_rank"]).astype(int).tolist(),
            "head": LENS_ROWS,  # the words of the terminal's lens (render/lens.py), once
            "rows": [lens_row_label(r, n) for r in range(n + 1)]}


def passes_data(gen, cfg, top_k: int, whole: int, logits_budget: int = LOGITS_BUDGET) -> tuple[list[dict], list[str]]:
    """Every pass, and what was left out: the exact logits of passes beyond the budget."""
    per_pass = cfg.d_vocab * (8 if cfg.dtype == "float64" else 4) * 4 // 3 + 4  # base64 bytes
    fits = max(logits_budget // per_pass, 1)  # the prompt pass always carries them
    passes = [pass_data(gen, k, cfg, top_k, whole, k < fits) for k in range(len(gen.steps))]
    for p, row in zip(passes, cache_rows(gen, gen.steps)):
        p["macs"], p["full"] = int(row["macs"]), int(row["full"])
    notes = []
    if len(passes) > fits:
        notes.append(f"the exact logits of passes {fits}–{len(passes) - 1} (temperature recomputation: passes "
                     f"0–{fits - 1} only; the others show the recorded probabilities)")
    return passes, notes


def rows_data(gen) -> dict | None:
    """A generation of several rows (beams) or with a draft model's passes: every pass in the order run,
    whose it is (the terminal's words, finished), its KV cache split and work, its token and whether its
    row kept it, and `step`, its place among `passes` (row 0's sequence; None for the others). None for
    one row of the target model's passes: `passes` are all of them."""
    if gen.plain:
        return None
    place = {id(p): k for k, p in enumerate(gen.steps)}
    out = []
    for p, c in zip(gen.passes, cache_rows(gen)):
        out.append({"who": pass_who(p), "row": int(p.row), "model": p.model, "parent": p.parent, "start": int(p.start),
                    "n": len(p.tokens), "chosen": int(p["sample.token"]) if "sample.token" in p else None,
                    "kept": gen.kept(p), "macs": int(c["macs"]), "full": int(c["full"]), "step": place.get(id(p))})
    return {"passes": out, "n_rows": len(gen.rows)}


def positions_data(rows) -> list[dict | None]:
    """Every position's prediction (teacher forcing), from the pass that computed it."""
    names = ("predict.top_token", "predict.top_prob", "predict.next_token", "predict.next_prob", "loss.per_position")
    out = []
    for t in range(rows.n_rows):
        got = [rows.row(n, t) for n in names]
        if any(g is None for g in got):
            out.append(None)
            continue
        top, top_p, nxt, nxt_p, loss = got
        out.append({"top": int(top), "top_p": r6(top_p), "next": int(nxt), "next_p": r6(nxt_p), "loss": r6(loss)})
    return out


def page_step(name: str) -> str:
    """The page's step for a stated value: the one that shows its step (`tracer.sections`: the rotation
    is shown with each layer's Q, K and V); a later layer's input at the end of the layer before (the
    MLP's step); "checks" for a name the table does not know."""
    layer, _ = hooks.split(name)
    step = hooks.step_of(name)
    if step == "input" and layer != 0:
        return "mlp"
    return next((page for page, shows in sections.page_steps() if step in shows), sections.CHECKS)


def check_data(c, gen, precision: int, dims: int) -> dict:
    """A stated value, its words as the terminal writes them, and where the page shows it (the step,
    and the layer, position and head its index names, by the name's axes in `tracer.core.hooks`)."""
    name = c.name
    layer, _ = hooks.split(name)
    step = int(c.step)
    start = gen.steps[step].start if 0 <= step < len(gen.steps) else 0
    ints = [int(x) if not isinstance(x, str) else None for x in c.index]
    at = {"pos": hooks.axis_of(name, "pos"), "head": hooks.axis_of(name, "head", "kv")}
    got = {k: ints[i] if i is not None and i < len(ints) else None for k, i in at.items()}
    pos = start + got["pos"] if got["pos"] is not None and name != "logits" else None
    text = check_line(c, precision, dims, where=True).plain
    return {"ok": bool(c.ok), "text": text[2:], "section": page_step(name), "pos": pos,
            "layer": None if (layer == 0 and hooks.step_of(name) == "input") else layer, "head": got["head"], "pass": step}


def tokens_data(gen, tokenizer, rows) -> list[dict]:
    """Every token of the run: letter, visible text, id, and the pass that computed it (None: appended
    after the last pass, never run)."""
    out = []
    for t, i in enumerate(gen.tokens):
        out.append({"label": label(t), "text": show_token(tokenizer.token_str(int(i))), "id": int(i),
                    "pass": rows.pass_of[t] if t < rows.n_rows else None})
    return out


def name_passes(passes: list[dict], gen, tokenizer) -> None:
    """Each pass's chosen token and the token it read, named as the terminal names them (`tokens.named`:
    "G = ␣G", "↵ at H"), so the page says the same words."""
    for k, q in enumerate(passes):
        if q["chosen"] is not None:
            q["named"] = named(q["n"], show_token(tokenizer.token_str(int(q["chosen"]))))
        if k > 0:
            q["reads_named"] = named(q["n"] - 1, show_token(tokenizer.token_str(int(gen.steps[k].tokens[-1]))))
        if q.get("lens"):  # the terminal's sentences of this pass's lens (render/lens.py)
            q["lens"]["notes"] = lens_notes(gen.steps[k], tokenizer)


def texts_of(ids, tokenizer) -> dict[str, str]:
    return {str(int(i)): show_token(tokenizer.token_str(int(i))) for i in sorted({int(i) for i in ids})}


def referenced_ids(passes, positions) -> set[int]:
    ids: set[int] = set()
    for p in passes:
        if p["top"]:
            ids.update(p["top"]["ids"])
        if p["chosen"] is not None:
            ids.add(p["chosen"])
        if p.get("stages"):  # the draw's stages, as one picture
            ids.update(p["stages"]["ids"])
        lens = p.get("lens")
        if lens:
            ids.update(int(x) for row in lens["top"] for x in row)
            ids.update(lens["target"])
    for q in positions:
        if q:
            ids.update((q["top"], q["next"]))
    return ids


def stop_words(gen) -> str:
    return stop_reason(gen)


def branch_data(gen, tokenizer, passes: list[dict]) -> dict:
    """What clicking a candidate token needs (the page forces it and continues): each pass's text so far (the
    prompt and the tokens generated before it, decoded), each shown candidate's own text, the ids generated
    before each pass, and the command that runs the branch (the model, the options of this run that are not the
    commands' defaults, the new tokens left)."""
    from ...run import settings as declared

    ids = {int(i) for q in passes for i in (q["top"]["ids"] if q.get("top") else [])}
    ids |= {int(i) for q in passes for i in (q["stages"]["ids"] if q.get("stages") else [])}
    s, flags = gen.settings, []
    for d in declared.SETTINGS:
        v = getattr(s, d.name)
        if d.name in ("max_new_tokens", "stop") or v == d.run_default or (d.needs and getattr(s, d.needs) is None):
            continue
        flags.append(d.flag if d.kind == "switch" and v else f"--no-{d.flag[2:]}" if d.kind == "switch" else f"{d.flag} {v}")
    model = gen.meta.get("model")
    return {"prefix": [tokenizer.decode([int(t) for t in st.tokens]) for st in gen.steps],
            "before": [[int(t) for t in st.tokens[len(gen.prompt_ids):]] for st in gen.steps],
            "raw": {str(i): tokenizer.decode([i]) for i in sorted(ids)},
            "model": model if isinstance(model, str) else None, "flags": " ".join(flags), "n_new": s.max_new_tokens}
