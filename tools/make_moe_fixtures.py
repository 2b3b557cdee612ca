"""Build the mixture-of-experts parity fixtures of `tests/data/` with PyTorch + transformers.

Run it with the torch venv (never a dependency of tracer or its tests):

    .venv/bin/python tools/make_moe_fixtures.py                  # torch 2.13.0 CPU, transformers 5.24.0
    .venv/bin/python tools/make_moe_fixtures.py gpt-oss-tiny     # only the named ones

Each folder is written as tools/make_family_fixtures.py writes its own (config.json and model.safetensors
exactly as `save_pretrained(safe_serialization=True)` writes them, a tokenizer.json copied from
tests/data/tokenizers/, reference.npz with that tool's arrays for prompts k = 0, 1), and reference.npz
holds, besides, for the MoE layers `moe_layers` [moe_layer] (the layer numbers, in order; the other
layers are dense MLPs):
- router_logits_k [moe_layer, pos, expert]: the router's scores before any selection (transformers'
  `router_logits` of `output_router_logits=True`, checked equal to the router module's own output);
- expert_indices_k [moe_layer, pos, k]: the chosen experts, most weight first (torch.topk's order);
- expert_weights_k [moe_layer, pos, k]: the weights the family's forward multiplies them by: softmax over
  all experts then top-k (Qwen3-MoE and Mixtral renormalised over the k, OLMoE and Qwen2-MoE not), or
  gpt-oss's top-k of the logits then a softmax over those k;
- expert_outputs_k [moe_layer, pos, k, d_model]: each chosen expert's output before its weight
  (transformers' experts module run on that expert alone with weight 1);
- router_margins_k [moe_layer, pos]: the k-th minus the (k+1)-th router logit (all ≥ ROUTER_MARGIN, and the
  gaps inside the top k too, on the prompt and its greedy continuation: no top-k choice near a tie);
- mlp_out_k [layer, pos, d_model]: each layer's MLP output (dense or MoE, the shared expert included);
- Qwen2-MoE: shared_expert_out_k [moe_layer, pos, d_model] (the always-on expert before its gate) and
  shared_expert_gate_k [moe_layer, pos] (its sigmoid gate);
- gpt-oss: sink_share_k [layer, head, pos] (the attention weight that went to the sink: 1 − the pattern's
  sum over keys, eager attention), inv_freq [d_head / 2] and attention_scaling (YaRN as transformers
  computes it for this folder).
Weights are random (seeded) as the family tool makes them (norm gains 1 + N(0, 0.2), biases N(0, 0.2),
Q/K norm gains 2.5 × that), and besides: router weights × ROUTER_GAIN so routing is far from uniform,
gpt-oss's router bias N(0, 0.5), its sinks N(1, 1) (a visible share), its experts' gate/up weights large
enough that the SwiGLU clamp (limit 7) cuts some gate and up values (counted and asserted), their biases
N(0, 0.2). Run twice, the files are byte for byte the same (compare sha256sum).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import (GptOssConfig, GptOssForCausalLM, MixtralConfig, MixtralForCausalLM, OlmoeConfig,
                          OlmoeForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_family_fixtures import DATA, build, reference_arrays, save, versions  # noqa: E402

ROUTER_GAIN = 2.0  # router weights × this: scores of std ≈ 2.5, so the top k stand out
ROUTER_MARGIN = 1e-2  # the least gap allowed between neighbouring router logits in the top k + 1

FAMILIES = {
    "gpt-oss-tiny": dict(  # gpt-oss: router with a bias, top-k then softmax, clamped SwiGLU experts with biases (interleaved
        # gate/up, stored [expert, in, out]), attention sinks, Q/K/V/O biases, layers sliding (window 4, shorter than
        # the prompts) then full, YaRN as gpt-oss ships it (truncate false), GQA; MoE layers 0 and 1
        cls=GptOssForCausalLM, tokenizer="gpt2-like.json", seed=23, gate_up_std=0.45, down_std=0.03,
        config=GptOssConfig(vocab_size=512, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
                            num_experts_per_tok=2, sliding_window=4, max_position_embeddings=131072, rms_norm_eps=1e-5,
                            tie_word_embeddings=False, bos_token_id=None, eos_token_id=511, pad_token_id=None,
                            initializer_range=0.15, layer_types=["sliding_attention", "full_attention"],
                            rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                                             "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                             "original_max_position_embeddings": 4096})),
    "qwen3-moe-tiny": dict(  # Qwen3-MoE: softmax, top-k, norm_topk_prob true, per-head Q/K norms, GQA;
        # every layer MoE (llama.cpp's qwen3moe has no dense layer); tied embeddings; MoE layers 0 and 1
        cls=Qwen3MoeForCausalLM, tokenizer="qwen2-like.json", seed=31,
        config=Qwen3MoeConfig(vocab_size=1024, hidden_size=64, intermediate_size=64, moe_intermediate_size=16,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_experts=8,
                              num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=128,
                              rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=None, eos_token_id=1019,
                              initializer_range=0.15, use_sliding_window=False,
                              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "olmoe-tiny": dict(  # OLMoE: softmax, top-k, no renormalisation, Q and K RMS-normalised whole ([64] and [32]), GQA;
        # MoE layers 0 and 1
        cls=OlmoeForCausalLM, tokenizer="gpt2-like.json", seed=32,
        config=OlmoeConfig(vocab_size=512, hidden_size=64, intermediate_size=16, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, num_experts=8, num_experts_per_tok=2,
                           norm_topk_prob=False, max_position_embeddings=128, rms_norm_eps=1e-5,
                           tie_word_embeddings=False, bos_token_id=None, eos_token_id=511, pad_token_id=None,
                           initializer_range=0.15, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "mixtral-tiny": dict(  # Mixtral: softmax, top-k, renormalised over the k; stored as block_sparse_moe.experts.E.w1/w2/w3;
        # no sliding window; BOS; MoE layers 0 and 1
        cls=MixtralForCausalLM, tokenizer="mistral-like.json", seed=39,
        config=MixtralConfig(vocab_size=768, hidden_size=64, intermediate_size=16, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
                             max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=True,
                             bos_token_id=1, eos_token_id=2, sliding_window=None, initializer_range=0.15,
                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen2-moe-tiny": dict(  # Qwen2-MoE: softmax, top-k, no renormalisation, a shared expert behind a sigmoid gate,
        # Q/K/V biases, GQA; layer 1 of 3 dense (mlp_only_layers), MoE layers 0 and 2
        cls=Qwen2MoeForCausalLM, tokenizer="gpt2-like.json", seed=33,
        config=Qwen2MoeConfig(vocab_size=512, hidden_size=64, intermediate_size=64, moe_intermediate_size=16,
                              shared_expert_intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
                              num_key_value_heads=2, num_experts=8, num_experts_per_tok=2, norm_topk_prob=False,
                              mlp_only_layers=[1], max_position_embeddings=128, rms_norm_eps=1e-6,
                              tie_word_embeddings=True, bos_token_id=None, eos_token_id=511, initializer_range=0.15,
                              use_sliding_window=False, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}


def build_moe(family: dict) -> torch.nn.Module:
    """The family tool's weights, then the MoE parts: routers sharpened, gpt-oss's biases, sinks and clamped experts."""
    model = build(family)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("mlp.gate.weight", "mlp.router.weight")):
                p.mul_(ROUTER_GAIN)
            elif name.endswith("mlp.router.bias"):
                p.copy_(0.5 * torch.randn_like(p))
            elif name.endswith("self_attn.sinks"):
                p.copy_(1.0 + torch.randn_like(p))
            elif name.endswith("experts.gate_up_proj") and "gate_up_std" in family:
                p.copy_(family["gate_up_std"] * torch.randn_like(p))
            elif name.endswith("experts.down_proj") and "down_std" in family:
                p.copy_(family["down_std"] * torch.randn_like(p))
            elif name.endswith(("_proj_bias")):
                p.copy_(0.2 * torch.randn_like(p))
    return model.eval()


def _mlps(model) -> list:
    return [layer.mlp for layer in model.model.layers]


def _is_moe(mlp) -> bool:
    return hasattr(mlp, "experts")


def _router(mlp):
    return mlp.router if hasattr(mlp, "router") else mlp.gate


class Recorder:
    """Forward hooks on every layer's MLP, router, experts and shared expert: what one pass computed."""

    def __init__(self, model):
        self.seen: dict[str, list] = {}
        self.handles = []
        for l, mlp in enumerate(_mlps(model)):
            self._hook(mlp, f"mlp_out.{l}", lambda out: out[0] if isinstance(out, tuple) else out)
            if _is_moe(mlp):
                self._hook(_router(mlp), f"router.{l}", lambda out: out)
                self.handles.append(mlp.experts.register_forward_pre_hook(
                    lambda m, args, l=l: self.seen.setdefault(f"experts_in.{l}", []).append(args[0].detach().clone())))
                if hasattr(mlp, "shared_expert"):
                    self._hook(mlp.shared_expert, f"shared.{l}", lambda out: out)
                    self._hook(mlp.shared_expert_gate, f"shared_gate.{l}", torch.sigmoid)

    def _hook(self, module, key, pick):
        def hook(m, args, out):
            picked = pick(out)
            picked = tuple(t.detach().clone() for t in picked) if isinstance(picked, tuple) else picked.detach().clone()
            self.seen.setdefault(key, []).append(picked)
        self.handles.append(module.register_forward_hook(hook))

    def clear(self):
        self.seen = {}

    def remove(self):
        for h in self.handles:
            h.remove()


def _margins(logits: torch.Tensor, k: int) -> torch.Tensor:
    """[pos, expert] → [pos, k]: the gaps between neighbouring logits of the top k + 1 (the last: k-th − (k+1)-th)."""
    top = torch.topk(logits, k + 1, dim=-1).values
    return top[:, :-1] - top[:, 1:]


def moe_arrays(model, arrays: dict) -> dict:
    """The MoE arrays of reference.npz for prompts k = 0, 1 (from the family tool's input ids and greedy ids)."""
    cfg = model.config
    top_k = cfg.num_experts_per_tok
    mlps = _mlps(model)
    moe = [l for l, mlp in enumerate(mlps) if _is_moe(mlp)]
    rec = Recorder(model)
    extra: dict = {"moe_layers": np.array(moe, dtype=np.int64)}
    checks: dict = {"least_router_gap": float("inf"), "gate_clamped": 0, "up_clamped": 0}
    for k in (0, 1):
        ids = torch.tensor(arrays[f"input_ids_{k}"])[None]
        full = torch.cat([ids[0], torch.tensor(arrays[f"greedy_ids_{k}"])])[None]
        with torch.no_grad():
            rec.clear()  # the prompt and its greedy continuation: no top-k choice there may be near a tie
            model(full)
            for l in moe:
                gaps = _margins(rec.seen[f"router.{l}"][0][0], top_k)
                checks["least_router_gap"] = min(checks["least_router_gap"], float(gaps.min()))
            rec.clear()
            out = model(ids, output_router_logits=True, output_attentions=True)
        assert len(out.router_logits) == len(moe), "one router_logits entry per MoE layer"
        logits, indices, weights, outputs, margins = [], [], [], [], []
        for i, l in enumerate(moe):
            r_logits, r_weights, r_indices = rec.seen[f"router.{l}"][0]
            assert torch.equal(r_logits, out.router_logits[i].reshape(r_logits.shape)), "router output ≠ router_logits"
            x = rec.seen[f"experts_in.{l}"][0]  # [pos, d_model]: the experts' input (after the norm)
            one = torch.ones_like(r_weights[:, :1])
            with torch.no_grad():  # each chosen expert alone, weight 1: its output before weighting
                each = torch.stack([mlps[l].experts(x, r_indices[:, j : j + 1], one) for j in range(top_k)], dim=1)
            if hasattr(mlps[l].experts, "limit"):  # gpt-oss: how often the SwiGLU clamp cuts a chosen expert's values
                ex = mlps[l].experts
                for p in range(x.shape[0]):
                    for e in r_indices[p].tolist():
                        gate_up = x[p] @ ex.gate_up_proj[e] + ex.gate_up_proj_bias[e]
                        checks["gate_clamped"] += int((gate_up[::2] > ex.limit).sum())
                        checks["up_clamped"] += int((gate_up[1::2].abs() > ex.limit).sum())
            logits.append(r_logits)
            indices.append(r_indices)
            weights.append(r_weights)
            outputs.append(each)
            margins.append(_margins(r_logits, top_k)[:, -1])
        extra.update({
            f"router_logits_{k}": torch.stack(logits).numpy().astype(np.float32),
            f"expert_indices_{k}": torch.stack(indices).numpy().astype(np.int64),
            f"expert_weights_{k}": torch.stack(weights).numpy().astype(np.float32),
            f"expert_outputs_{k}": torch.stack(outputs).numpy().astype(np.float32),
            f"router_margins_{k}": torch.stack(margins).numpy().astype(np.float32),
            f"mlp_out_{k}": torch.stack([rec.seen[f"mlp_out.{l}"][0][0] for l in range(len(mlps))]).numpy().astype(np.float32),
        })
        if any(hasattr(mlps[l], "shared_expert") for l in moe):
            extra[f"shared_expert_out_{k}"] = torch.stack([rec.seen[f"shared.{l}"][0] for l in moe]).numpy().astype(np.float32)
            extra[f"shared_expert_gate_{k}"] = torch.stack([rec.seen[f"shared_gate.{l}"][0][:, 0] for l in moe]).numpy().astype(np.float32)
        if hasattr(model.model.layers[0].self_attn, "sinks"):
            sink = 1 - torch.stack(out.attentions)[:, 0].sum(-1)  # [layer, head, pos]
            assert float(sink.min()) > 0 and float(sink.max()) > 0.05, "the sinks take no visible share"
            extra[f"sink_share_{k}"] = sink.numpy().astype(np.float32)
    rec.remove()
    assert checks["least_router_gap"] >= ROUTER_MARGIN, f"a top-k choice is near a tie: {checks['least_router_gap']}"
    if hasattr(mlps[moe[0]].experts, "limit"):
        assert checks["gate_clamped"] > 0 and checks["up_clamped"] > 0, f"the SwiGLU clamp never acts: {checks}"
        rotary = model.model.rotary_emb
        extra["inv_freq"] = rotary.inv_freq.numpy().astype(np.float32)
        extra["attention_scaling"] = np.array(rotary.attention_scaling, dtype=np.float64)
    return extra, checks


def main(only: list[str]) -> int:
    """Every fixture, or only those named on the command line (the others are left as they are)."""
    summary = versions()
    for name, family in FAMILIES.items():
        if only and name not in only:
            continue
        save(build_moe(family), DATA / name, family["tokenizer"])
        model, arrays = reference_arrays(family["cls"], DATA / name)
        extra, checks = moe_arrays(model, arrays)
        np.savez_compressed(DATA / name / "reference.npz", **arrays, **extra)
        summary[name] = {"moe_layers": extra["moe_layers"].tolist(), **checks,
                         "least_prompt_margin": float(min(extra["router_margins_0"].min(), extra["router_margins_1"].min())),
                         "greedy_ids_0": arrays["greedy_ids_0"].tolist()}
    print(json.dumps(summary))
    for folder in [n for n in FAMILIES if n in summary]:
        for f in sorted((DATA / folder).iterdir()):
            print(f"{f.stat().st_size:>10,}  {folder}/{f.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
