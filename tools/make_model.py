#!/usr/bin/env python
"""Rebuild the model tracer ships (`tracer/models/abc`): the corpus, `tracer train`, float16 on disk.

    python tools/make_model.py                  # the full run (about half an hour on 2 idle cores)
    python tools/make_model.py --steps 20 --out /tmp/abc-check   # a quick look at the pipeline
    python tools/make_model.py --build BUILD --reuse   # convert an earlier full run kept in BUILD

1. The corpus is `tools/make_corpus.py`'s, seed 0, default size, recipe `induction` (regenerated bit
   for bit; its sha256 and recipe are in training.json).
2. `tracer train` trains on it with the settings below (the defaults of `tracer train` but the
   number of steps), writing float32 weights, config.json and training.json to a build folder.
3. The weights are written again as float16 (under 10 MB in the repository; tracer loads them as
   float32), with the same config.json and training.json (which notes the conversion), and a
   README.md model card. The model's answers to a few prompts are checked before anything is
   written to `--out`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = 6000
RECIPE = "induction"  # tracer.run.corpus.RECIPES: phrases and runs of random words said again, in any shape
ABOUT = ("`tracer corpus`'s lines: letter runs, counting, weekdays and months, short sentences, and phrases and "
         "runs of random words said again later in the line, whatever surrounds them, to copy")
CHECKS = {  # prompt → the next token the shipped model must give (greedy)
    "A B C D E F": " G",
    "Monday Tuesday Wednesday": " Thursday",
    "March April May": " June",
    "14 15 16 17": " 18",
    "we saw a purple lizard eat. then a purple lizard": " eat",  # copied whatever surrounds it
}
HELD_OUT = ROOT / "tests" / "test_abc_induction.py"  # the held-out copying test, with its own generator


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--out", default=str(ROOT / "tracer" / "models" / "abc"))
    ap.add_argument("--build", help="keep the float32 build here (default: a temporary folder)")
    ap.add_argument("--reuse", action="store_true",
                    help="do not train: convert the float32 build already in --build (its corpus must be this one)")
    a = ap.parse_args()
    if a.reuse and not a.build:
        ap.error("--reuse needs --build")
    sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("make_corpus", ROOT / "tools" / "make_corpus.py")
    mc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mc)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text(mc.corpus(seed=0, recipe=RECIPE), encoding="utf-8")
        build = Path(a.build) if a.build else Path(tmp) / "build"
        if a.reuse:
            import hashlib

            done = json.loads((build / "training.json").read_text())
            sha = hashlib.sha256(corpus.read_bytes()).hexdigest()
            if done.get("corpus_sha256") != sha or done.get("steps") != a.steps or done.get("stopped") != "done":
                sys.exit(f"{build} was not trained on this corpus for {a.steps} steps to the end; nothing written")
        else:
            subprocess.run([sys.executable, "-m", "tracer", "train", str(corpus), "--out", str(build), "--steps",
                            str(a.steps), "--force"], check=True)

        import tracer
        from tracer.readers.gpt2 import write_folder
        from tracer.run.train import record_json

        m = tracer.load(str(build))
        info = json.loads((build / "training.json").read_text())
        if info.get("heads") is not None:  # `tracer train`'s probe: common corpus tokens in a random order, twice
            info["heads_on_random_tokens"] = info["heads"]
        info["heads"] = copy_heads(m)  # the shipped model's heads, measured on what it is shipped to copy
        info["saved_as"] = "float16 (tools/make_model.py); tracer computes in float32"
        info["corpus_about"] = ABOUT
        info["corpus_recipe"] = RECIPE
        fresh = Path(tmp) / "abc"
        fresh.mkdir()
        write_folder(fresh, m.config, m.params, dtype="float16", extra={"training.json": record_json(info)})
        (fresh / "README.md").write_text(card(info), encoding="utf-8")
        shipped = tracer.load(str(fresh))
        bad = []
        for prompt, want in CHECKS.items():
            got = greedy(shipped, prompt)
            print(f"  {prompt!r} → {got!r}" + ("" if got == want else f"  (wanted {want!r})"))
            if got != want:
                bad.append(prompt)
        from tracer.run.corpus import copy_cases

        cases = copy_cases()
        copied = sum(greedy(shipped, prompt) == want for prompt, want in cases)
        print(f"  copies {copied} of {len(cases)} phrases of everyday words (copy_cases(): 'the X Y Z and the V W. the X Y')")
        if copied < 0.8 * len(cases):
            bad.append(f"copying ({copied} of {len(cases)})")
        info["copies"] = copied
        info["held_out_copies"] = held_out(shipped)
        rates = info["held_out_copies"]["copied"]
        print("  held-out shapes copied (of 40): " + ", ".join(f"{k} {v}" for k, v in rates.items()))
        if sum(rates.values()) < 0.8 * 40 * len(rates) or min(rates.values()) < 0.6 * 40:
            bad.append("held-out copying")
        (fresh / "training.json").write_text(record_json(info), encoding="utf-8")
        (fresh / "README.md").write_text(card(info), encoding="utf-8")
        if bad and a.steps >= STEPS:
            sys.exit(f"the trained model misses {bad}; nothing written to {a.out}")
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        for f in fresh.iterdir():
            (out / f.name).write_bytes(f.read_bytes())
        print(f"wrote {out}: " + ", ".join(f"{f.name} {f.stat().st_size:,} B" for f in sorted(out.iterdir())))
    return 0


HEAD_CASES = 5  # copy_cases(seed=…) the heads are measured on: not make_model's check (1) nor the tests' (3, 7)


def copy_heads(model) -> dict:
    """Each head's previous-token and induction scores ([layer][head], `tracer.run.heads`), the mean over the
    40 phrases of copy_cases(seed=HEAD_CASES) with their answers: what the heatmap and the card name.
    (`tracer train`'s own probe, a random order of common corpus tokens shown twice, finds this model's
    copying heads weak: they copy a phrase after a full stop, which that probe never has.)"""
    import numpy as np

    from tracer.run.corpus import copy_cases
    from tracer.run.heads import head_scores

    found = []
    for prompt, answer in copy_cases(seed=HEAD_CASES, n=40):
        t = model.run(prompt + answer, names=["blocks.*.attn.hook_pattern"])
        found.append(head_scores(t, t.tokens))
    return {"measured_on": f"40 phrases of everyday words said twice in part (copy_cases(seed={HEAD_CASES}): "
                           "'the X Y Z and the V W. the X Y Z'); the mean over them",
            **{kind: np.round(np.mean([f[kind] for f in found], axis=0, dtype=np.float64), 3).tolist() for kind in found[0]}}


def held_out(model) -> dict:
    """How many of the 40 cases of each shape of tests/test_abc_induction.py (its own generator of shapes,
    words and gaps, not the corpus's) the model copies: its top-1 next token is the phrase's next token."""
    spec = importlib.util.spec_from_file_location("test_abc_induction", HELD_OUT)
    test = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(test)
    cases = test.cases(model.tokenizer)
    return {"measured_on": f"tests/test_abc_induction.py: {test.CASES} cases a shape, seed 40",
            "copied": {shape: test.copied(model, these) for shape, these in cases.items()}}


def greedy(model, prompt: str) -> str:
    """The model's most likely next token after `prompt`, as text."""
    import numpy as np

    logits = model.run(prompt, names=["logits"])["logits"][-1]
    return model.tokenizer.token_str(int(np.argmax(logits)))


def card(info: dict) -> str:
    s = info["settings"]
    return f"""# abc: the model tracer ships

A GPT-2 (transformers' `GPT2LMHeadModel` layout) with {s['layers']} layers, d_model {s['d_model']}, {s['heads']} heads
and a context of {s['context']} tokens, GPT-2's tokenizer and vocabulary (50,257 tokens), trained by
`tracer train` with tracer's own NumPy backward pass: {info['steps']:,} steps of {s['batch']} windows of
{s['context']} tokens, AdamW (peak learning rate {s['lr']}, warm-up and cosine decay), seed {info['seed']},
final loss {info['final_loss']}.

It learned from `tracer corpus --recipe {info['corpus_recipe']}` (seed 0; sha256 `{info['corpus_sha256']}`,
{info['corpus_tokens']:,} tokens): letter runs (`A B C D E F G`), counting, weekdays and months in order,
short sentences written for it, and, in about half its lines, something said again later in the line,
the way induction heads form in the literature (Olsson et al. 2022: repeated random token sequences):
runs of 3-14 random tokens, or phrases of 2-6 random words with or without an article, said again
after 0-16 other words, at the start of a line or inside it; the words are any of GPT-2's 17,534
lower-case word tokens, so it can only predict the repeat by copying from the context.

{held_out_text(info.get("held_out_copies"))} It also copies {info.get("copies", "?")} of the 40 phrases of
`tracer.run.corpus.copy_cases()` ("the river window garden and the doctor village. the river window"
→ " garden"), the one shape the `recall` recipe taught (the abc trained on it copied 40 of those and
3 of the 400 held-out phrases).

{heads_text(info.get("heads"))}

Rebuild it with `python tools/make_model.py`. The weights are stored as float16 (under 10 MB);
tracer computes in float32. `training.json` records every step's loss and each head's
previous-token and induction scores.
"""


def held_out_text(held: dict | None) -> str:
    """The held-out copying test's numbers, in words."""
    if not held:
        return ""
    copied = held["copied"]
    total, n = sum(copied.values()), 40 * len(copied)
    shapes = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in copied.items())
    return (f"On phrases in shapes, words and gaps its corpus never used ({held['measured_on']}), it copies "
            f"{total} of {n} ({100 * total / n:.0f}%): the next token of the repeat is its top-1 in {shapes} of 40.")


def heads_text(heads: dict | None) -> str:
    """What training made of the heads, in words, from training.json's scores."""
    if not heads:
        return ""
    prev, ind = heads["previous_token"], heads["induction"]
    cells = [(l, h) for l in range(len(prev)) for h in range(len(prev[l]))]
    p = max(cells, key=lambda c: prev[c[0]][c[1]])
    copies = sorted((c for c in cells if ind[c[0]][c[1]] >= 0.4), key=lambda c: -ind[c[0]][c[1]])
    said = ", ".join(f"layer {l} head {h} ({ind[l][h]:.2f})" for l, h in copies) or "none above 0.4"
    return (f"Its heads, measured on {heads['measured_on']}: the strongest previous-token head is layer {p[0]} head "
            f"{p[1]} ({prev[p[0]][p[1]]:.2f} of its weight on the token just before; spread evenly it would be about "
            f"0.1); induction heads, which look from a repeated token to what followed it last time: {said}.")


if __name__ == "__main__":
    sys.exit(main())
