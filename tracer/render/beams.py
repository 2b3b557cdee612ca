"""Beam search shown as the tree it is: from the prompt, each beam's continuations with their summed
log-probabilities, which went on as a beam of the next step, which ended a finished sequence and which
were pruned; then the finished sequences, best first, with their scores worked (sum ÷ length^α).
`beam_nodes` gives the tree as data (the terminal's `beam_tree` and the page's slide draw the same);
reads the recorded `beam.*` arrays and the rows only (`tracer.run.beams`)."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from rich.tree import Tree

from ..run.trace import FINISHED, KEPT
from .fmt import num, tok
from .words import say

FATES = {KEPT: "kept", FINISHED: "finished"}  # beam.fate → its word ("pruned" otherwise)
PRUNED_SHOWN = 2  # pruned continuations shown per beam (the rest are counted)


def beam_nodes(gen, tokenizer, p: int = 3) -> dict:
    """The tree as data: `nodes`, one per pass ({pass, beam, parent_node, token: the token that made its
    sequence (None at the prompt), text, sum}), each with its continuations (`next`: [{token, text, total,
    fate, node: the pass it became (kept) or None}]), and `finished`: [{rank, ids, text, score, sum,
    length, words}] best first."""
    by_tokens = {tuple(int(t) for t in q.tokens): i for i, q in enumerate(gen.passes)}
    nodes = []
    for i, q in enumerate(gen.passes):
        seq = tuple(int(t) for t in q.tokens)
        cont = []
        for t, total, fate in zip(q["beam.tokens"], q["beam.totals"], q["beam.fate"]):
            t, fate = int(t), int(fate)
            cont.append({"token": t, "text": tok(tokenizer, t), "total": float(total), "fate": FATES.get(fate, "pruned"),
                         "node": by_tokens.get(seq + (t,)) if fate == KEPT else None})
        nodes.append({"pass": i, "beam": int(q.row), "parent": q.parent, "depth": len(seq) - len(gen.prompt_ids),
                      "token": None if len(seq) == len(gen.prompt_ids) else seq[-1],
                      "text": tok(tokenizer, seq[-1]) if len(seq) > len(gen.prompt_ids) else None,
                      "sum": float(q["beam.score"]), "next": cont})
    alpha = gen.settings.length_penalty
    finished = []
    for r, row in enumerate(gen.rows):
        n = len(row.generated_ids)
        total = row.score * n ** alpha
        finished.append({"rank": r + 1, "ids": [int(i) for i in row.generated_ids], "text": row.text, "score": row.score,
                         "words": say("beams.score", sum=num(total, p), n=str(n), alpha=f"{alpha:g}",
                                      score=num(row.score, p)),
                         "stopped": row.stopped})
    return {"nodes": nodes, "finished": finished, "beams": gen.settings.beams, "alpha": alpha}


def beam_tree(gen, tokenizer, view) -> Group:
    """The terminal's tree: the prompt's pass at the root, each kept continuation the next beam's pass."""
    p = view.precision
    data = beam_nodes(gen, tokenizer, p)
    nodes = data["nodes"]
    root = Tree(Text(say("beams.root"), style="bold"))

    def grow(branch: Tree, i: int) -> None:
        pruned = 0
        for c in nodes[i]["next"]:
            total = num(c["total"], p)
            if c["fate"] == "kept" and c["node"] is not None:
                child = nodes[c["node"]]
                grow(branch.add(Text(say("beams.kept", token=c["text"], total=total, beam=str(child["beam"])))), c["node"])
            elif c["fate"] == "finished":
                branch.add(Text(say("beams.finished", token=c["text"], total=total), style="bold green"))
            else:
                pruned += 1
                if pruned <= PRUNED_SHOWN:
                    branch.add(Text(say("beams.pruned", token=c["text"], total=total), style="dim"))
        if pruned > PRUNED_SHOWN:
            branch.add(Text(say("beams.more", n=str(pruned - PRUNED_SHOWN)), style="dim"))

    grow(root, 0)
    parts = [Text(say("beams.title", n=str(data["beams"]), alpha=f"{data['alpha']:g}"), style="bold"),
             Text(say("beams.rule", n=str(data["beams"]), k=str(len(nodes[0]["next"])))), root,
             Text(say("beams.result", n=str(len(data["finished"]))), style="bold")]
    for f in data["finished"]:
        parts.append(Text(f"  {f['rank']}. {f['text']!r}  {f['words']}"))
    return Group(*parts)
