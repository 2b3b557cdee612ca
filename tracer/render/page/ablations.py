"""What the page carries of the single-head ablations `tracer.run.interventions.head_ablations` ran: for
each (layer, head), the prediction after the prompt's last token with that head zero-ablated, its top
tokens beside the clean run's, and the terminal's sentence for it (`walkthrough.ablation_words`:
"without head 1:0: p(␣G) 0.971 → 0.041; top-1 becomes ␣H (0.512)"), so that the script shows words
it is given and words none of its own. When they were not run, the words say why. Reads plain
numbers only; never runs the model.
"""

from __future__ import annotations

from ..header import ablation_words
from .data import r6


def _scale(n: float) -> str:  # 135M, 3.5M, 48k parameters: the size a model is known by
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            v = n / div
            return f"{v:.0f}{unit}" if v >= 10 else f"{v:.1f}{unit}"
    return str(int(n))


def left_out_words(result: dict | None, meta: dict, cfg) -> str:
    """Why the page has no head ablations, in one sentence (what to run instead)."""
    if result is None:
        if isinstance(meta.get("ablation"), dict):
            what = " and ".join(meta["ablation"].get("ablated") or ["a part of the model"])
            return (f"head ablations not precomputed: this run already has {what} removed (--ablate); export it "
                    f"without --ablate to click a head and see the prediction without it")
        return ("head ablations not precomputed for this page (`tracer trace … --export FILE.html` runs them; a saved "
                "trace holds no weights); run `tracer trace … --ablate L:H` for one head")
    if result.get("not_finite"):
        return ("head ablations not precomputed: this run's numbers overflow (NaN or ∞), so a head removed would "
                "not show what the head does")
    return (f"head ablations not precomputed: {cfg.n_layers} layers × {cfg.n_heads} heads = {result['runs']:,} runs of a "
            f"{_scale(result['params'])} model over {result['tokens']:,} tokens, more than the page runs "
            f"(about {result['work']:.1e} multiply-adds; it runs up to {result['limit']:.0e}); "
            f"run `tracer trace … --ablate L:H` for one head")


def head_ablations_data(result: dict | None, tokenizer, meta: dict, cfg, position: int) -> dict:
    """The page's `head_ablations`: {"done", "words" (why not, or null), "position", "clean": {ids, p},
    "heads": [layer][head] {ids, p, p_clean_top, changed, words}} (null heads when not done)."""
    if result is None or not result.get("done"):
        return {"done": False, "words": left_out_words(result, meta, cfg), "position": int(position),
                "clean": None, "heads": None}
    clean = result["clean"]
    top, p_top = int(clean["top_ids"][0]), float(clean["top_p"][0])
    heads = []
    for layer, row in enumerate(result["heads"]):
        out = []
        for head, h in enumerate(row):
            change = {"ablated": [f"head {layer}:{head}"], "clean": {"top_id": top, "p_top": p_top},
                      "changed": {"top_id": int(h["top_ids"][0]), "p_top": float(h["top_p"][0]),
                                  "p_clean_top": float(h["p_clean_top"])}}
            out.append({"ids": [int(i) for i in h["top_ids"]], "p": [r6(x) for x in h["top_p"]],
                        "p_clean_top": r6(h["p_clean_top"]), "changed": bool(h["top_changed"]),
                        "words": ablation_words(change, tokenizer)})
        heads.append(out)
    return {"done": True, "words": None, "position": int(position),
            "clean": {"ids": [int(i) for i in clean["top_ids"]], "p": [r6(x) for x in clean["top_p"]]}, "heads": heads}


def ablation_ids(block: dict) -> set[int]:
    """The token ids the ablations name (for the page's texts)."""
    if not block["done"]:
        return set()
    ids = set(block["clean"]["ids"])
    for row in block["heads"]:
        for h in row:
            ids.update(h["ids"])
    return ids
