#!/usr/bin/env python
"""Speculative decoding measured: `--draft layer:L` (self-speculation, the model's own logit lens at layer L
proposing) against the plain greedy loop, on the shipped abc model and on the real SmolLM2-135M-Instruct.

    python bench/bench_decoding.py                    # abc and SmolLM2 (when its GGUF file is here)
    python bench/bench_decoding.py --rounds 5 -n 32

For each model, prompt and draft layer: the generated tokens are checked identical to plain greedy decoding's
(else the run stops), then the plain loop and the speculative one take turns (interleaved rounds, so that a
burst of load from the other processes on this machine hits both alike). Reported per case: the acceptance
rate (accepted ÷ drafted tokens), the model's and the draft's passes per generated token, the median wall
times and their ratio (> 1: speculative decoding is faster). Both record only what the loop needs
(`names=[]`), as a server generating text would. SmolLM2's file: $TRACER_SMOLLM2_GGUF, else the tests' cache
(~/.cache/tracer-tests/SmolLM2-135M-Instruct.Q4_1.gguf). The last line printed is `JSON: {...}`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

PROMPTS = {"abc": ["A B C D", "Monday Tuesday", "the cat sat on the"],
           "smollm2": ["The capital of France is", "def fibonacci(n):", "Once upon a time"]}
DRAFTS = {"abc": ["layer:1", "layer:2"], "smollm2": ["layer:15", "layer:24", "layer:27"]}


def smollm2_path() -> Path | None:
    given = os.environ.get("TRACER_SMOLLM2_GGUF")
    path = Path(given) if given else Path("~/.cache/tracer-tests/SmolLM2-135M-Instruct.Q4_1.gguf").expanduser()
    return path if path.is_file() else None


def timed(run) -> tuple[float, object]:
    t = time.perf_counter()
    out = run()
    return time.perf_counter() - t, out


def case(model, prompt: str, draft: str, n: int, rounds: int) -> dict:
    """One prompt and draft: the tokens checked, then `rounds` interleaved timings of each loop."""
    plain = model.generate(prompt, max_new_tokens=n, names=[])  # also the warm-up of both
    spec = model.generate(prompt, max_new_tokens=n, names=[], draft=draft)
    if spec.generated_ids != plain.generated_ids:
        raise SystemExit(f"{draft} on {prompt!r}: speculative tokens differ from plain greedy decoding's")
    meta = spec.meta["speculative"]
    drafted = sum(len(r["drafted_ids"]) for r in meta["rounds"])
    accepted = sum(r["accepted"] for r in meta["rounds"])
    t_plain, t_spec = [], []
    for _ in range(rounds):
        t_plain.append(timed(lambda: model.generate(prompt, max_new_tokens=n, names=[]))[0])
        t_spec.append(timed(lambda: model.generate(prompt, max_new_tokens=n, names=[], draft=draft))[0])
    made = len(spec.generated_ids)
    a, b = statistics.median(t_plain), statistics.median(t_spec)
    return {"prompt": prompt, "draft": draft, "tokens": made, "acceptance": round(accepted / drafted, 3) if drafted else None,
            "target_passes_per_token": round(meta["target_passes"] / made, 3),
            "draft_passes_per_token": round(meta["draft_passes"] / made, 3),
            "plain_s": round(a, 4), "speculative_s": round(b, 4), "speedup": round(a / b, 3),
            "spread_plain": round((max(t_plain) - min(t_plain)) / a, 3),
            "spread_speculative": round((max(t_spec) - min(t_spec)) / b, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=24, help="new tokens per generation")
    ap.add_argument("--models", default="abc,smollm2")
    ap.add_argument("--drafts", default="", help="comma-separated draft layers for every model (layer:L,…); default: "
                                                 "each model's own list")
    ap.add_argument("--prompts", type=int, default=3, help="how many of each model's prompts")
    args = ap.parse_args()
    import tracer

    results = {}
    for name in args.models.split(","):
        where = "abc" if name == "abc" else smollm2_path()
        if where is None:
            print(f"{name}: its file is not on this machine; skipped")
            continue
        model = tracer.load(str(where))
        print(f"\n{name}: {model.config.n_layers} layers, {args.n} new tokens, {args.rounds} interleaved rounds, "
              f"4 drafted tokens a round")
        print(f"{'draft':>9} {'prompt':28} {'accept':>7} {'model passes/token':>19} {'draft passes/token':>19} "
              f"{'plain s':>8} {'spec s':>8} {'speedup':>8}")
        rows = []
        for draft in args.drafts.split(",") if args.drafts else DRAFTS[name]:
            for prompt in PROMPTS[name][:args.prompts]:
                r = case(model, prompt, draft, args.n, args.rounds)
                rows.append(r)
                acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.0%}"
                print(f"{draft:>9} {prompt[:28]:28} {acc:>7} {r['target_passes_per_token']:>19.2f} "
                      f"{r['draft_passes_per_token']:>19.2f} {r['plain_s']:>8.3f} {r['speculative_s']:>8.3f} "
                      f"{r['speedup']:>7.2f}×")
        results[name] = rows
    print("JSON: " + json.dumps({"rounds": args.rounds, "n": args.n, "results": results}))


if __name__ == "__main__":
    main()
