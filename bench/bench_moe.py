#!/usr/bin/env python
"""Mixtures of experts bigger than memory (issue 35's targets): a gpt-oss-20b-shaped GGUF file with MXFP4
experts and a Qwen3-30B-A3B-shaped one in Q4_K, random blocks with sane scales, traced by tracer with a
4-token prompt and one new token under `--memory 4GB`, timed, its peak resident memory read, and its logits
checked against an independent float64 NumPy forward written here on the `gguf` package's
de-quantization (of the routed experts only).

    python bench/bench_moe.py --shape gpt-oss-20b              # make the file (once, ~12 GB), run, check
    python bench/bench_moe.py --shape qwen3-30b-a3b --dir /big  # where the files go (default /work/bench-data)
    python bench/bench_moe.py --shape tiny                      # the same steps on a small shape (a check)

Each run prints one `JSON: {...}` line: the file's size, tracer's wall time and peak RSS (of its own process,
`ru_maxrss`), the reference's time, the largest logit difference and whether the argmax agrees. The file is
written tensor by tensor (nothing the size of the model is ever in memory here) and kept for the next run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "2")
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

SHAPES = {
    "gpt-oss-20b": dict(arch="gpt-oss", layers=24, d=2880, heads=64, kv=8, d_head=64, experts=32, k=4, d_mlp=2880,
                        vocab=201088, expert_type="MXFP4", other_type="BF16", window=128, theta=150000.0,
                        yarn=(32.0, 4096)),
    "qwen3-30b-a3b": dict(arch="qwen3moe", layers=48, d=2048, heads=32, kv=4, d_head=128, experts=128, k=8, d_mlp=768,
                          vocab=151936, expert_type="Q4_K", other_type="Q4_K", window=None, theta=1e6, yarn=None),
    "tiny": dict(arch="gpt-oss", layers=3, d=256, heads=8, kv=2, d_head=32, experts=8, k=2, d_mlp=256, vocab=1024,
                 expert_type="MXFP4", other_type="BF16", window=4, theta=150000.0, yarn=(32.0, 4096)),
}
PROMPT = [17, 230, 4, 88]  # four token ids (the vocabulary is the bench's own: only ids matter)


# --------------------------------------------------------------------------- the file


def random_blocks(qtype: str, n_values: int, rng) -> np.ndarray:
    """Random blocks of `qtype` with sane scales (weights of size ~0.02): MXFP4's E8M0 exponent 2^-9..2^-6,
    Q4_K's d 1e-4 and dmin 6e-5 (values ~0.02 with the 6-bit sub-scales); the quantized digits uniform."""
    import gguf

    q = gguf.GGMLQuantizationType[qtype]
    block, size = gguf.GGML_QUANT_SIZES[q]
    n = n_values // block
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    if qtype == "MXFP4":
        raw[:, 0] = rng.integers(118, 122, size=n, dtype=np.uint8)  # E8M0: 2^(e − 127)
    elif qtype == "Q4_K":
        raw[:, 0:2] = np.array([1e-4], dtype=np.float16).view(np.uint8)  # d
        raw[:, 2:4] = np.array([6e-5], dtype=np.float16).view(np.uint8)  # dmin
    return raw.reshape(-1)


def tensors_of(s: dict):
    """(name, GGUF shape [ne.. reversed: numpy order], storage type) of every tensor, in file order."""
    d, H, KV, dh, E, f, V = s["d"], s["heads"], s["kv"], s["d_head"], s["experts"], s["d_mlp"], s["vocab"]
    oss = s["arch"] == "gpt-oss"
    out = [("token_embd.weight", (V, d), s["other_type"])]
    for l in range(s["layers"]):
        b = f"blk.{l}."
        out += [(b + "attn_norm.weight", (d,), "F32"), (b + "attn_q.weight", (H * dh, d), s["other_type"]),
                (b + "attn_k.weight", (KV * dh, d), s["other_type"]), (b + "attn_v.weight", (KV * dh, d), s["other_type"]),
                (b + "attn_output.weight", (d, H * dh), s["other_type"]),
                (b + ("post_attention_norm.weight" if oss else "ffn_norm.weight"), (d,), "F32"),
                (b + "ffn_gate_inp.weight", (E, d), "F32"),
                (b + "ffn_gate_exps.weight", (E, f, d), s["expert_type"]),
                (b + "ffn_up_exps.weight", (E, f, d), s["expert_type"]),
                (b + "ffn_down_exps.weight", (E, d, f), s["expert_type"])]
        if oss:
            out += [(b + n, shape, "F32") for n, shape in (
                ("attn_q.bias", (H * dh,)), ("attn_k.bias", (KV * dh,)), ("attn_v.bias", (KV * dh,)),
                ("attn_output.bias", (d,)), ("attn_sinks.weight", (H,)), ("ffn_gate_inp.bias", (E,)),
                ("ffn_gate_exps.bias", (E, f)), ("ffn_up_exps.bias", (E, f)), ("ffn_down_exps.bias", (E, d)))]
        else:
            out += [(b + "attn_q_norm.weight", (dh,), "F32"), (b + "attn_k_norm.weight", (dh,), "F32")]
    out += [("output_norm.weight", (d,), "F32"), ("output.weight", (V, d), s["other_type"])]
    return out


def values(name: str, shape: tuple, qtype: str, rng) -> np.ndarray:
    """A tensor's data as it is written: float32 / bf16 bits, or quantized blocks."""
    n = math.prod(shape)
    if qtype == "F32":
        if name.endswith("norm.weight"):
            return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        if "sinks" in name:
            return rng.standard_normal(shape).astype(np.float32)
        scale = 1.0 if "gate_inp.weight" in name else 0.02  # the router: far from uniform
        return (scale * rng.standard_normal(shape)).astype(np.float32)
    if qtype == "BF16":
        a = (0.02 * rng.standard_normal(shape)).astype(np.float32)
        return (a.view(np.uint32) >> 16).astype(np.uint16)
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]
    return random_blocks(qtype, n, rng).reshape(*shape[:-1], shape[-1] // block * size)


def make(path: Path, s: dict, seed: int = 0) -> None:
    """The GGUF file, written tensor by tensor (gguf's writer: header, then each tensor's data in turn)."""
    import gguf

    rng = np.random.default_rng(seed)
    tok = json.loads((ROOT / "tests/data/tokenizers/gpt2-like.json").read_text())
    w = gguf.GGUFWriter(str(path) + ".part", s["arch"])
    a = s["arch"]
    w.add_block_count(s["layers"])
    w.add_context_length(4096)
    w.add_embedding_length(s["d"])
    w.add_feed_forward_length(s["d_mlp"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv"])
    w.add_key_length(s["d_head"])
    w.add_value_length(s["d_head"])
    w.add_rope_dimension_count(s["d_head"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(s["theta"])
    w.add_expert_count(s["experts"])
    w.add_expert_used_count(s["k"])
    w.add_expert_feed_forward_length(s["d_mlp"])
    w.add_vocab_size(s["vocab"])
    if s["window"]:
        w.add_sliding_window(s["window"])
    if s["yarn"]:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(s["yarn"][0])
        w.add_rope_scaling_orig_ctx_len(s["yarn"][1])
    vocab = tok["model"]["vocab"]
    tokens = [""] * s["vocab"]
    for t, i in vocab.items():
        if i < s["vocab"]:
            tokens[i] = t
    types = [1 if t else 3 for t in tokens]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([t or f"[PAD{i}]" for i, t in enumerate(tokens)])
    w.add_token_types(types)
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]])
    w.add_eos_token_id(s["vocab"] - 1)
    plan = tensors_of(s)
    for name, shape, qtype in plan:
        q = gguf.GGMLQuantizationType[qtype]
        block, size = gguf.GGML_QUANT_SIZES[q]
        nbytes = math.prod(shape) // block * size
        dtype = {"F32": np.float32, "BF16": np.uint16}.get(qtype, np.uint8)
        byte_shape = shape if qtype in ("F32", "BF16") else (*shape[:-1], shape[-1] // block * size)  # as written
        w.add_tensor_info(name, byte_shape, np.dtype(dtype), nbytes, raw_dtype=None if qtype == "F32" else q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape, qtype in plan:
        w.write_tensor_data(values(name, shape, qtype, rng))
    w.close()
    os.replace(str(path) + ".part", path)


# --------------------------------------------------------------------------- tracer, timed


RUN = """
import json, sys, time, numpy as np
import tracer
t0 = time.perf_counter()
m = tracer.load(sys.argv[1], memory="{memory}")
gen = m.generate({prompt}, max_new_tokens=2)  # the new token, and the cached pass that reads it
dt = time.perf_counter() - t0
np.savez(sys.argv[2], prompt=gen.steps[0]["logits"][-1], step=gen.steps[1]["logits"][-1], next=np.array(gen.generated_ids[:1]))
print(json.dumps({{"seconds": dt, "expansion": m.meta().get("expansion", {{}}).get("text")}}))
"""


def run_tracer(path: Path, out: Path, memory: str) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", RUN.format(memory=memory, prompt=PROMPT), str(path), str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"tracer failed:\n{r.stderr[-3000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KB; the largest child so far
    info = json.loads(r.stdout.strip().splitlines()[-1])
    return {"wall_seconds": wall, "seconds_in_process": info["seconds"], "peak_rss_bytes": max(peak, before) * 1024,
            "expansion": info["expansion"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=SHAPES, default="tiny")
    ap.add_argument("--dir", default="/work/bench-data")
    ap.add_argument("--memory", default="4GB")
    ap.add_argument("--no-reference", action="store_true", help="skip the independent forward")
    args = ap.parse_args()
    s = SHAPES[args.shape]
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{args.shape}-shape.gguf"
    if not path.exists():
        t0 = time.perf_counter()
        make(path, s)
        print(f"made {path} ({path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t0:.0f} s", flush=True)
    out = folder / f"{args.shape}-tracer.npz"
    got = run_tracer(path, out, args.memory)
    print(f"tracer: {got['wall_seconds']:.1f} s, peak RSS {got['peak_rss_bytes'] / 1e9:.2f} GB ({got['expansion']})", flush=True)
    result = {"shape": args.shape, "file_bytes": path.stat().st_size, "memory": args.memory, **got}
    if not args.no_reference:
        from bench.moe_reference import forward

        t0 = time.perf_counter()
        ref = forward(path, PROMPT)
        result["reference_seconds"] = time.perf_counter() - t0
        mine = np.load(out, allow_pickle=False)
        for key in ("prompt", "step"):
            diff = float(np.max(np.abs(mine[key].astype(np.float64) - ref[key])))
            result[f"{key}_max_abs_diff"] = diff
            result[f"{key}_scale"] = float(np.max(np.abs(ref[key])))
            result[f"{key}_argmax_equal"] = bool(np.argmax(mine[key]) == np.argmax(ref[key]))
        result["next_equal"] = int(mine["next"][0]) == int(ref["next"])
    print("JSON: " + json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
