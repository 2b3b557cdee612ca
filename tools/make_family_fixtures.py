"""Build the Llama / Qwen2 / Mistral parity fixtures of `tests/data/` with PyTorch + transformers.

Run it with the separate torch venv (never a dependency of tracer or its tests):

    /work/torchvenv/bin/python tools/make_family_fixtures.py    # torch 2.13.0 CPU, transformers 5.24.0, tokenizers

It writes, for each of llama-tiny, qwen2-tiny, mistral-tiny, llama-tiny-bf16, qwen3-tiny, … (FAMILIES;
tests/data/README.md says what each one covers; name some on the command line to write only those):
- config.json and model.safetensors exactly as `save_pretrained(safe_serialization=True)` writes them;
- tokenizer.json, a copy of one of tests/data/tokenizers/ (tools/make_tokenizer_fixtures.py) with
  exactly config.vocab_size ids, so tokenizer and model agree;
- reference.npz, transformers' own outputs (eager attention, float32), plain arrays only, for two
  prompts k = 0, 1 (the prompts' ids come from the folder's tokenizer.json through `tokenizers`):
  prompt_k (the text), input_ids_k [pos], logits_k [pos, vocab], hidden_states_k [layer + 1, pos, hidden]
  (output_hidden_states: the embeddings, then each layer's output, the last one after the final norm),
  attentions_k [layer, head, pos, pos] (output_attentions), greedy_ids_k [8] (`generate(do_sample=False)`
  with the KV cache, end token disabled so all 8 come), greedy_ids_nocache_k [8] (the same without the
  cache), greedy_margins_k [8] (best minus second-best logit at each greedy step), step_input_k [1]
  (the first greedy token) and step_logits_k [vocab] (the logits of that one-token step after the
  cached prompt: the KV-cache check).
Every weight is random (seeded), norm gains 1 + N(0, 0.2) and biases N(0, 0.2) rather than 1 and 0, so a
missing gain or bias shows (Q/K norm gains 2.5 × that, so that the patterns are not near uniform). Run twice, the files are byte for byte the same (the script checks nothing
of that; compare sha256sum).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM, Olmo2Config, Olmo2ForCausalLM,
                          Phi3Config, Phi3ForCausalLM, Gemma3TextConfig, Gemma3ForCausalLM, Gemma2Config,
                          Gemma2ForCausalLM)

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
MAX_NEW_TOKENS = 8
PROMPTS = ["The quick brown fox jumps over the lazy dog, and the model predicts the next token.",
           "def f(x):\n    return x * 2  # 12345 😀 café"]

FAMILIES = {
    "llama-tiny": dict(  # Llama 3.2 style: llama3 RoPE scaling, tied embeddings, GQA
        cls=LlamaForCausalLM, tokenizer="llama3-like.json", seed=0,
        config=LlamaConfig(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                           rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=768, eos_token_id=769,
                           initializer_range=0.15,
                           rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 64})),
    "qwen2-tiny": dict(  # Qwen2 / 2.5: Q/K/V biases, untied embeddings, rope_theta 1e6, GQA, 3 layers
        cls=Qwen2ForCausalLM, tokenizer="qwen2-like.json", seed=1,
        config=Qwen2Config(vocab_size=1024, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                           rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=None, eos_token_id=1019,
                           initializer_range=0.15, use_sliding_window=False,
                           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "mistral-tiny": dict(  # Mistral: sliding window (longer than the prompts), explicit head_dim ≠ hidden / heads
        cls=MistralForCausalLM, tokenizer="mistral-like.json", seed=2,
        config=MistralConfig(vocab_size=768, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=128,
                             rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                             sliding_window=64, initializer_range=0.15,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "qwen3-tiny": dict(  # Qwen3: per-head Q/K RMS norms, no biases, head_dim 32 ≠ hidden / heads, tied, GQA
        cls=Qwen3ForCausalLM, tokenizer="qwen2-like.json", seed=3,
        config=Qwen3Config(vocab_size=1024, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=128,
                           rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=None, eos_token_id=1019,
                           initializer_range=0.15, use_sliding_window=False,
                           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "olmo2-tiny": dict(  # OLMo 2: norms after attention and the MLP (none before), Q and K normalized whole, untied
        cls=Olmo2ForCausalLM, tokenizer="qwen2-like.json", seed=4,
        config=Olmo2Config(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                           rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=None, eos_token_id=1019,
                           pad_token_id=None, initializer_range=0.15,
                           rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
    "phi3-tiny": dict(  # Phi-3: fused qkv_proj and gate_up_proj, sliding window on every layer (longer than the prompts)
        cls=Phi3ForCausalLM, tokenizer="mistral-like.json", seed=5,
        config=Phi3Config(vocab_size=768, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                          original_max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
                          bos_token_id=1, eos_token_id=2, pad_token_id=None, sliding_window=64, initializer_range=0.15,
                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "gemma3-tiny": dict(  # Gemma 3 text: √d_model, (1 + w) norms, four per layer, Q/K norms, GeGLU, scalar 24,
        # a sliding window of 6 on layer 0 of 2 (shorter than the prompts: it hides keys), local RoPE base 10000
        cls=Gemma3ForCausalLM, tokenizer="mistral-like.json", seed=6, qk_gain=1.0,  # Gemma's gain is 1 + w: about 2
        config=Gemma3TextConfig(vocab_size=768, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=128,
                                rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                                pad_token_id=0, sliding_window=6, query_pre_attn_scalar=24, initializer_range=0.15,
                                layer_types=["sliding_attention", "full_attention"],
                                rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                                 "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
    "gemma2-tiny": dict(  # Gemma 2: Gemma 3's block without Q/K norms; scores soft-capped at 5 and logits at 8 (both
        # far below Gemma 2's 50 and 30, so the tanh bends these small numbers); a window of 6 on layer 0 of 2
        # (transformers' even/odd rule: no layer_types given), shorter than the prompts
        cls=Gemma2ForCausalLM, tokenizer="mistral-like.json", seed=8,
        config=Gemma2Config(vocab_size=768, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=128,
                            rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                            pad_token_id=0, sliding_window=6, query_pre_attn_scalar=24, initializer_range=0.15,
                            attn_logit_softcapping=5.0, final_logit_softcapping=8.0,
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
}


def build(family: dict) -> torch.nn.Module:
    torch.manual_seed(family["seed"])
    model = family["cls"](family["config"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):  # Q and K of RMS 1 would give near-uniform patterns
                p.copy_(family.get("qk_gain", 2.5) * (1.0 + 0.2 * torch.randn_like(p)))
            elif name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn_like(p))
    return model.eval()


def save(model: torch.nn.Module, folder: Path, tokenizer: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(folder, safe_serialization=True)
    for extra in folder.iterdir():
        if extra.name not in ("config.json", "model.safetensors"):
            extra.unlink()
    shutil.copy(DATA / "tokenizers" / tokenizer, folder / "tokenizer.json")


def reference(cls, folder: Path) -> dict:
    _, arrays = reference_arrays(cls, folder)
    np.savez_compressed(folder / "reference.npz", **arrays)
    return {k: v.tolist() for k, v in arrays.items() if k.startswith(("greedy_ids_", "input_ids_"))}


def reference_arrays(cls, folder: Path) -> tuple[torch.nn.Module, dict]:
    """transformers' outputs for both prompts (the arrays of reference.npz) and the model that gave them."""
    model = cls.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None  # all 8 greedy tokens, whatever they are
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == model.config.vocab_size, "tokenizer and model disagree"
    arrays = {}
    for k, prompt in enumerate(PROMPTS):
        ids = torch.tensor([tok.encode(prompt).ids])
        n = ids.shape[1]
        with torch.no_grad():
            out = model(ids, output_hidden_states=True, output_attentions=True)
            unembedded, cap = model.lm_head(out.hidden_states[-1]), getattr(model.config, "final_logit_softcapping", None)
            if cap is not None:  # Gemma 2: the logits are soft-capped after the unembedding
                unembedded = cap * torch.tanh(unembedded / cap)
            assert torch.allclose(unembedded, out.logits, atol=1e-5), "last hidden state not after the norm"
            runs = [model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
                                   min_new_tokens=0, use_cache=cache, pad_token_id=0)[0, n:] for cache in (True, False)]
            full = model(torch.cat([ids[0], runs[0]])[None]).logits[0, n - 1 : -1]  # [step, vocab]
            top2 = torch.topk(full, 2, dim=-1).values
            first = model(ids, use_cache=True)
            step = model(runs[0][None, :1], cache=first.cache, use_cache=True).logits[0, -1]
        assert len(runs[0]) == MAX_NEW_TOKENS and torch.equal(runs[0], runs[1]), "cache and no cache disagree"
        assert torch.equal(full.argmax(-1), runs[0]), "generate() disagrees with argmax of a full pass"
        assert (top2[:, 0] - top2[:, 1]).min() > 1e-3, "a greedy step is too close to a tie"
        assert torch.allclose(step, full[1], atol=1e-4), "the cached step disagrees with the full pass"
        if "sliding_attention" not in (getattr(model.config, "layer_types", None) or []):  # Gemma 3's hides keys on purpose
            assert n + MAX_NEW_TOKENS <= (getattr(model.config, "sliding_window", None) or n + MAX_NEW_TOKENS), "longer than the window"
        arrays.update({
            f"prompt_{k}": np.array(prompt), f"input_ids_{k}": ids[0].numpy().astype(np.int64),
            f"logits_{k}": out.logits[0].numpy().astype(np.float32),
            f"hidden_states_{k}": torch.stack(out.hidden_states)[:, 0].numpy().astype(np.float32),
            f"attentions_{k}": torch.stack(out.attentions)[:, 0].numpy().astype(np.float32),
            f"greedy_ids_{k}": runs[0].numpy().astype(np.int64), f"greedy_ids_nocache_{k}": runs[1].numpy().astype(np.int64),
            f"greedy_margins_{k}": (top2[:, 0] - top2[:, 1]).numpy().astype(np.float32),
            f"step_input_{k}": runs[0][:1].numpy().astype(np.int64), f"step_logits_{k}": step.numpy().astype(np.float32),
        })
    return model, arrays


def main(only: list[str]) -> int:
    """Every fixture, or only those named on the command line (the others are left as they are)."""
    import tokenizers
    import transformers

    transformers.utils.logging.disable_progress_bar()

    summary = {"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
    for name, family in FAMILIES.items():
        if only and name not in only:
            continue
        model = build(family)
        save(model, DATA / name, family["tokenizer"])
        summary[name] = reference(family["cls"], DATA / name)
        if name == "llama-tiny":  # the same weights in bfloat16, as the Hub's Llama 3.2 files are
            save(model.to(torch.bfloat16), DATA / "llama-tiny-bf16", family["tokenizer"])
            summary["llama-tiny-bf16"] = reference(family["cls"], DATA / "llama-tiny-bf16")
    print(json.dumps(summary))
    for folder in [n for n in ("llama-tiny", "llama-tiny-bf16", *FAMILIES) if n in summary]:
        for f in sorted((DATA / folder).iterdir()):
            print(f"{f.stat().st_size:>10,}  {folder}/{f.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
