"""Build the GPT-2 parity fixture `tests/data/gpt2-tiny/` with PyTorch + transformers.

Run it with the separate torch venv (never a dependency of tracer or its tests):

    /work/torchvenv/bin/python tools/make_gpt2_fixture.py      # torch 2.13.0 CPU, transformers, safetensors

What it writes (all small; the full 50,257-token vocabulary, so the gpt2 tokenizer applies):
- `transformers/` config.json + model.safetensors exactly as `save_pretrained` writes them
  (`transformer.h.0.attn.c_attn.weight`, `transformer.wte.weight`, …; the tied lm_head is not stored).
- `hub/` the same weights in the layout of the Hub's openai-community/gpt2 file: no `transformer.`
  prefix, no lm_head, plus the `h.{l}.attn.bias` causal-mask buffers [1, 1, n_positions, n_positions]
  and `h.{l}.attn.masked_bias` scalars that are not weights.
- `reference.npz` transformers' own outputs (eager attention, float32) for the article's prompt:
  input_ids, logits, hidden_states (n_layer + 1; the last one after ln_f), attentions
  (n_layer × [head, query_pos, key_pos]), and greedy_ids, the 8 tokens `generate(do_sample=False)` adds,
  with greedy_margins, the gap between the best and second-best logit at each greedy step.

Every parameter is random, biases and layer-norm gains/shifts included (transformers initialises
those to 0 and 1, which would hide a swapped or missing bias), at a scale that makes attention
patterns far from uniform and greedy choices clear-cut.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel

SEED = 0
# The article's sentence, "You are a business consultant, please analyze the impact of rising oil
# prices on the automotive industry.", as the gpt2 tokenizer encodes it.
PROMPT_IDS = [1639, 389, 257, 1597, 17028, 11, 3387, 16602, 262, 2928, 286, 7396, 3056, 4536, 319, 262, 29393, 2831, 13]
MAX_NEW_TOKENS = 8
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "gpt2-tiny"


def build_model() -> GPT2LMHeadModel:
    cfg = GPT2Config(
        vocab_size=50257, n_positions=64, n_embd=16, n_layer=3, n_head=4,
        activation_function="gelu_new", layer_norm_epsilon=1e-5, initializer_range=0.25,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
    )
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn_like(p))
    model.tie_weights()
    return model.eval()


def save_hub_layout(src: Path, dst: Path, n_layer: int, n_positions: int) -> None:
    """The openai-community/gpt2 key layout: unprefixed names, mask buffers, no lm_head."""
    tensors = load_file(src / "model.safetensors")
    hub = {}
    for k, v in tensors.items():
        if k.startswith("lm_head."):
            continue
        hub[k.removeprefix("transformer.")] = v.contiguous()
    mask = torch.tril(torch.ones(n_positions, n_positions)).view(1, 1, n_positions, n_positions)
    for l in range(n_layer):
        hub[f"h.{l}.attn.bias"] = mask.clone()
        hub[f"h.{l}.attn.masked_bias"] = torch.tensor(-1e4)
    dst.mkdir(parents=True, exist_ok=True)
    save_file(hub, dst / "model.safetensors", metadata={"format": "pt"})
    shutil.copy(src / "config.json", dst / "config.json")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for old in ("transformers", "hub"):  # README.md stays
        shutil.rmtree(OUT / old, ignore_errors=True)
    model = build_model()
    tdir, hdir = OUT / "transformers", OUT / "hub"
    model.save_pretrained(tdir, safe_serialization=True)
    for extra in tdir.iterdir():  # keep only the two files a GPT-2 folder needs
        if extra.name not in ("config.json", "model.safetensors"):
            extra.unlink()
    keys = sorted(load_file(tdir / "model.safetensors"))
    assert "transformer.wte.weight" in keys and "transformer.h.0.attn.c_attn.weight" in keys, keys
    save_hub_layout(tdir, hdir, model.config.n_layer, model.config.n_positions)

    ids = torch.tensor([PROMPT_IDS])
    ref = GPT2LMHeadModel.from_pretrained(tdir, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        out = ref(ids, output_hidden_states=True, output_attentions=True)
        hub = GPT2LMHeadModel.from_pretrained(hdir, attn_implementation="eager", dtype=torch.float32).eval()
        hub_logits = hub(ids).logits
        assert torch.equal(hub_logits, out.logits), "the hub layout does not load to the same model in transformers"
        attn_mask = torch.ones_like(ids)
        seq = ref.generate(ids, attention_mask=attn_mask, do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
                           pad_token_id=50256, eos_token_id=50256)
        greedy = seq[0, len(PROMPT_IDS):]
        # How clear-cut each greedy choice is: a tie within float32 noise would make parity luck.
        full = ref(seq).logits[0, len(PROMPT_IDS) - 1 : -1]  # [step, d_vocab]
        top2 = torch.topk(full, 2, dim=-1).values
        margins = top2[:, 0] - top2[:, 1]
    assert len(out.attentions) == model.config.n_layer and out.attentions[0] is not None, "no attentions returned"
    assert margins.min() > 1e-3, f"greedy step too close to a tie: margins {margins.tolist()}"
    assert torch.equal(full.argmax(-1), greedy), "generate() disagrees with argmax of a full pass"

    arrays = {
        "input_ids": np.array(PROMPT_IDS, dtype=np.int64),
        "logits": out.logits[0].numpy().astype(np.float32),
        "greedy_ids": greedy.numpy().astype(np.int64),
        "greedy_margins": margins.numpy().astype(np.float32),
    }
    for l, h in enumerate(out.hidden_states):
        arrays[f"hidden_states.{l}"] = h[0].numpy().astype(np.float32)
    for l, a in enumerate(out.attentions):
        arrays[f"attentions.{l}"] = a[0].numpy().astype(np.float32)
    np.savez_compressed(OUT / "reference.npz", **arrays)

    import transformers

    meta = {"torch": torch.__version__, "transformers": transformers.__version__, "seed": SEED,
            "greedy_ids": arrays["greedy_ids"].tolist(), "greedy_margins": [round(float(m), 4) for m in margins]}
    print(json.dumps(meta))
    for f in sorted(OUT.rglob("*")):
        if f.is_file():
            print(f"{f.stat().st_size:>10,}  {f.relative_to(OUT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
