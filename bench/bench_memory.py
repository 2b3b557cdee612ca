#!/usr/bin/env python
"""Benchmark (issue 23): a Llama-2-7B-shaped Q4_0 GGUF traced layer by layer under a memory budget.

    .venv/bin/python bench/bench_memory.py                       # the 7B shape: 32 layers, 3.9 GB file
    .venv/bin/python bench/bench_memory.py --layers 2            # the same width, 2 layers (a quick check)
    .venv/bin/python bench/bench_memory.py --memory 2GB --keep /tmp/llama7b.gguf

Three child processes, so that each one's peak resident memory is its own:
1. `write`: a GGUF file written with the gguf package's writer (llama architecture, d_model 4096,
   d_mlp 11008, 32 heads, vocab 32000, Llama 2's RoPE base and norm epsilon): every matrix Q4_0 with
   random nibbles and float16 scales d = 1 / (4.6·√d_in) ± 10% (so w = d·(q − 8) has the spread of a
   trained layer's, std ≈ 1/√d_in), the norms' gains float32 near 1. Written tensor by tensor:
   nothing is held whole.
2. `trace`: `tracer.load(file, memory=…)` and `Model.generate` of a 4-token prompt and one new token,
   recording everything (every hook, the lens), then every layer's `hook_result` read (a recipe of
   W_O, which a streamed layer expands again); wall times and peak RSS (getrusage) reported.
3. `reference`: an independent layer-by-layer NumPy forward written here (gguf.GGUFReader for the
   bytes, gguf.quants.dequantize for the numbers, llama.cpp's own rotary convention on the rows as
   stored, so neither tracer's de-quantization nor its un-permuting is used), whose logits the
   trace's are compared with (the largest difference, against the logits' scale).
Then the de-quantization throughput (numbers per second) of tracer (`tracer.formats.stored.Quantized.expand`,
what a streamed layer runs) and of gguf.quants.dequantize on the same blocks (layer 0's ffn_up), and
for every type `bench/bench_gguf.py` measures, with `--types`. The last line is `JSON: {...}`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

SHAPE = dict(d_model=4096, d_mlp=11008, n_heads=32, vocab=32000, ctx=4096, theta=10000.0, eps=1e-5)
PROMPT = [1, 450, 4996, 17354]  # four token ids
Q4_0_BYTES = 18  # a block: float16 d, 16 bytes of nibbles (32 numbers)


# --------------------------------------------------------------------------- 1. the file


def q4_0_blocks(rows: int, cols: int, rng) -> np.ndarray:  # → [rows, cols / 32 · 18] uint8
    """Random Q4_0 blocks: nibbles uniform in 0..15, scales 1 / (4.6·√cols) ± 10% as float16."""
    out = rng.integers(0, 256, (rows, cols // 32, Q4_0_BYTES), dtype=np.uint8)
    d = (rng.uniform(0.9, 1.1, (rows, cols // 32)) / (4.6 * np.sqrt(cols))).astype(np.float16)
    out[:, :, 0:2] = d.view(np.uint8).reshape(rows, cols // 32, 2)
    return out.reshape(rows, -1)


def tensors(n_layers: int):
    """(name, numpy shape [rows, cols], quantized?) in the file's order."""
    d, m, v = SHAPE["d_model"], SHAPE["d_mlp"], SHAPE["vocab"]
    yield "token_embd.weight", (v, d), True
    for l in range(n_layers):
        b = f"blk.{l}."
        yield b + "attn_norm.weight", (d,), False
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            yield b + part + ".weight", (d, d), True
        yield b + "ffn_norm.weight", (d,), False
        yield b + "ffn_gate.weight", (m, d), True
        yield b + "ffn_up.weight", (m, d), True
        yield b + "ffn_down.weight", (d, m), True
    yield "output_norm.weight", (d,), False
    yield "output.weight", (v, d), True


def write(path: Path, n_layers: int) -> dict:
    import gguf

    rng = np.random.default_rng(23)
    d, v = SHAPE["d_model"], SHAPE["vocab"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(n_layers)
    w.add_context_length(SHAPE["ctx"])
    w.add_embedding_length(d)
    w.add_feed_forward_length(SHAPE["d_mlp"])
    w.add_head_count(SHAPE["n_heads"])
    w.add_head_count_kv(SHAPE["n_heads"])
    w.add_layer_norm_rms_eps(SHAPE["eps"])
    w.add_rope_freq_base(SHAPE["theta"])
    w.add_rope_dimension_count(d // SHAPE["n_heads"])
    w.add_vocab_size(v)
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    pieces += [f"▁w{i}" for i in range(v - len(pieces))]
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores([0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(v - 259)])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (v - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    plan = list(tensors(n_layers))
    for name, shape, quantized in plan:
        if quantized:
            w.add_tensor_info(name, (shape[0], shape[1] // 32 * Q4_0_BYTES), np.dtype(np.uint8),
                              shape[0] * shape[1] // 32 * Q4_0_BYTES, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * shape[0])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape, quantized in plan:
        data = q4_0_blocks(*shape, rng) if quantized else rng.uniform(0.8, 1.2, shape).astype(np.float32)
        w.write_tensor_data(data)
    w.close()
    return {"file_bytes": path.stat().st_size}


def write_bf16(folder: Path, n_layers: int) -> dict:
    """The same shape as a Hugging Face Llama folder: config.json, a bfloat16 model.safetensors (random
    weights of std 1/√d_in, written tensor by tensor) and llama-tiny's tokenizer.json (its 1,024 tokens
    are a subset of the 32,000 ids)."""
    import shutil

    rng = np.random.default_rng(23)
    d, m, v, H = SHAPE["d_model"], SHAPE["d_mlp"], SHAPE["vocab"], SHAPE["n_heads"]
    folder.mkdir(parents=True, exist_ok=True)
    shapes = {"model.embed_tokens.weight": (v, d)}
    for l in range(n_layers):
        p = f"model.layers.{l}."
        shapes.update({p + "input_layernorm.weight": (d,), p + "self_attn.q_proj.weight": (d, d),
                       p + "self_attn.k_proj.weight": (d, d), p + "self_attn.v_proj.weight": (d, d),
                       p + "self_attn.o_proj.weight": (d, d), p + "post_attention_layernorm.weight": (d,),
                       p + "mlp.gate_proj.weight": (m, d), p + "mlp.up_proj.weight": (m, d), p + "mlp.down_proj.weight": (d, m)})
    shapes.update({"model.norm.weight": (d,), "lm_head.weight": (v, d)})
    header, at = {}, 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [at, at + n]}
        at += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(folder / "model.safetensors", "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for name, shape in shapes.items():
            if len(shape) == 1:
                x = rng.uniform(0.8, 1.2, shape).astype(np.float32)
            else:
                x = (rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(shape[1])))
            f.write((x.view(np.uint32) >> 16).astype(np.uint16).tobytes())
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": d, "intermediate_size": m,
              "num_attention_heads": H, "num_key_value_heads": H, "num_hidden_layers": n_layers, "vocab_size": v,
              "max_position_embeddings": SHAPE["ctx"], "rms_norm_eps": SHAPE["eps"], "rope_theta": SHAPE["theta"],
              "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    (folder / "config.json").write_text(json.dumps(config))
    shutil.copy(ROOT / "tests" / "data" / "llama-tiny" / "tokenizer.json", folder / "tokenizer.json")
    return {"file_bytes": (folder / "model.safetensors").stat().st_size}


# --------------------------------------------------------------------------- 2. tracer


def trace(path: Path, memory: str | None, out: Path) -> dict:
    import tracer
    from tracer.core.memory import retain_freed_memory

    retain_freed_memory()  # as the `tracer` command does
    t0 = time.perf_counter()
    model = tracer.load(str(path), memory=memory)
    loaded = time.perf_counter() - t0
    gen = model.generate(PROMPT, max_new_tokens=1)
    wall = time.perf_counter() - t0
    step = gen.steps[0]
    np.save(out, np.asarray(step["logits"], dtype=np.float32), allow_pickle=False)
    t1 = time.perf_counter()  # each head's result, a recipe of W_O: a streamed layer's W_O is expanded again alone
    for l in range(model.config.n_layers):
        step[f"blocks.{l}.attn.hook_result"]
    results = time.perf_counter() - t1
    return {"load_s": loaded, "wall_s": wall, "results_s": results,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "recorded_arrays": len(step.arrays), "expansion": model.expansion,
            "layer_expansions": getattr(model.weights.layers, "expansions", None),
            "generated": [int(t) for t in gen.generated_ids]}


# --------------------------------------------------------------------------- 3. the independent forward


def reference(path: Path, out: Path) -> dict:
    """A Llama forward written from the equations, on the file as llama.cpp reads it (float32)."""
    import gguf

    t0 = time.perf_counter()
    r = gguf.GGUFReader(str(path))
    by = {t.name: t for t in r.tensors}
    deq = lambda name, rows=None: gguf.quants.dequantize(  # noqa: E731
        by[name].data if rows is None else by[name].data[rows], by[name].tensor_type).astype(np.float32)
    n_layers = sum(1 for n in by if n.endswith("attn_q.weight"))
    d, H = SHAPE["d_model"], SHAPE["n_heads"]
    dh, n, eps = d // H, len(PROMPT), np.float32(SHAPE["eps"])

    def rms(x, g):  # [pos, d] → [pos, d]
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g

    # llama.cpp's rotation ("normal" rope): neighbours (x[2i], x[2i+1]) turn by pos · θ^(−2i/d_head)
    inv = SHAPE["theta"] ** (-np.arange(0, dh, 2, dtype=np.float64) / dh)  # [d_head / 2]
    ang = (np.arange(n)[:, None] * inv[None]).astype(np.float32)  # [pos, d_head / 2]
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]  # [pos, 1, d_head / 2]

    def rope(x):  # [pos, d] → [pos, heads, d_head]
        x = x.reshape(n, H, dh // 2, 2)
        a, b = x[..., 0], x[..., 1]
        return np.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(n, H, dh)

    mask = np.triu(np.full((n, n), -np.inf, np.float32), 1)
    x = deq("token_embd.weight", np.array(PROMPT)).reshape(n, d)  # [pos, d]
    for l in range(n_layers):
        b = f"blk.{l}."
        h = rms(x, deq(b + "attn_norm.weight"))
        q, k = rope(h @ deq(b + "attn_q.weight").T), rope(h @ deq(b + "attn_k.weight").T)
        v = (h @ deq(b + "attn_v.weight").T).reshape(n, H, dh)
        s = np.einsum("qhd,khd->hqk", q, k) / np.float32(np.sqrt(dh)) + mask  # [head, q, k]
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        z = np.einsum("hqk,khd->qhd", p, v).reshape(n, d)
        x = x + z @ deq(b + "attn_output.weight").T
        h = rms(x, deq(b + "ffn_norm.weight"))
        g = h @ deq(b + "ffn_gate.weight").T
        x = x + ((g / (1 + np.exp(-g))) * (h @ deq(b + "ffn_up.weight").T)) @ deq(b + "ffn_down.weight").T
    logits = rms(x, deq("output_norm.weight")) @ deq("output.weight").T  # [pos, vocab]
    np.save(out, logits.astype(np.float32), allow_pickle=False)
    return {"wall_s": time.perf_counter() - t0, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


# --------------------------------------------------------------------------- 4. de-quantization throughput


def throughput(path: Path, rounds: int = 3) -> dict:
    """Numbers per second, tracer (a streamed layer's expansion) and gguf-py, on layer 0's ffn_up."""
    import gguf

    from tracer.formats.gguf_file import open_gguf
    from tracer.formats.stored import Quantized

    f = open_gguf(path)
    s = Quantized(f, "blk.0.ffn_up.weight")
    s.checked = True  # the de-quantization alone (the NaN check is timed in `trace`)
    info = f.info(s.name)
    raw = np.asarray(f.blocks(s.name)).reshape(info.shape[0], -1)
    mine, theirs = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        a = s.expand()
        mine.append(time.perf_counter() - t)
        t = time.perf_counter()
        b = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q4_0)
        theirs.append(time.perf_counter() - t)
        assert np.array_equal(a, b), "tracer and gguf-py disagree on the blocks"
        del a, b
    n = info.count
    return {"type": "Q4_0", "numbers": n, "tracer_numbers_per_s": n / min(mine), "gguf_numbers_per_s": n / min(theirs)}


# --------------------------------------------------------------------------- the driver


def child(step: str, *args) -> dict:
    cmd = [sys.executable, __file__, "--step", step, *map(str, args)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{step} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def load_average() -> float:
    return os.getloadavg()[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--memory", default="2GB", help="tracer's budget for expanded weights (--memory)")
    ap.add_argument("--keep", default=None, help="write the GGUF file here (and keep it); default: a temp dir")
    ap.add_argument("--types", action="store_true", help="also run bench/bench_gguf.py's table (every type)")
    ap.add_argument("--bf16", action="store_true", help="also trace the same shape as a bfloat16 safetensors folder")
    ap.add_argument("--step", default=None, help=argparse.SUPPRESS)
    ap.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.step:  # a child process: one step, its result as the last line
        fn = {"write": lambda p, n: write(Path(p), int(n)), "write_bf16": lambda p, n: write_bf16(Path(p), int(n)),
              "trace": lambda p, m, o: trace(Path(p), m, Path(o)),
              "reference": lambda p, o: reference(Path(p), Path(o)), "throughput": lambda p: throughput(Path(p))}[a.step]
        print(json.dumps(fn(*a.args)))
        return
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        path = Path(a.keep) if a.keep else Path(tmp) / f"llama7b-shape-{a.layers}L.Q4_0.gguf"
        report = {"layers": a.layers, "memory": a.memory, "load_before": load_average()}
        t = time.perf_counter()
        report["write"] = child("write", path, a.layers)
        report["write"]["wall_s"] = time.perf_counter() - t
        print(f"wrote {path.name}: {report['write']['file_bytes'] / 1e9:.2f} GB in {report['write']['wall_s']:.0f} s")
        report["trace"] = child("trace", path, a.memory, Path(tmp) / "tracer.npy")
        tr = report["trace"]
        print(f"tracer: {tr['expansion']['text']}; 4-token prompt + 1 new token in {tr['wall_s']:.1f} s "
              f"(load {tr['load_s']:.1f} s), peak RSS {tr['peak_rss_bytes'] / 1e9:.2f} GB "
              f"(the file's {report['write']['file_bytes'] / 1e9:.2f} GB "
              f"{(tr['peak_rss_bytes'] - report['write']['file_bytes']) / 1e9:+.2f} GB), "
              f"{tr['recorded_arrays']} arrays recorded, {tr['layer_expansions']} layer expansions; every layer's "
              f"hook_result read afterwards in {tr['results_s']:.1f} s")
        report["reference"] = child("reference", path, Path(tmp) / "reference.npy")
        mine, ref = np.load(Path(tmp) / "tracer.npy"), np.load(Path(tmp) / "reference.npy")
        diff, scale = float(np.max(np.abs(mine - ref))), float(max(1.0, np.max(np.abs(ref))))
        report["logits"] = {"max_abs_diff": diff, "scale": scale, "relative": diff / scale,
                            "same_argmax": bool(np.array_equal(mine.argmax(-1), ref.argmax(-1)))}
        print(f"reference (gguf.quants.dequantize + NumPy, {report['reference']['wall_s']:.0f} s): logits differ by "
              f"at most {diff:.3g} (scale {scale:.3g}: {diff / scale:.2g} relative); same top token at every "
              f"position: {report['logits']['same_argmax']}")
        report["throughput"] = child("throughput", path)
        th = report["throughput"]
        print(f"de-quantization, {th['type']} ({th['numbers']:,} numbers): tracer {th['tracer_numbers_per_s'] / 1e6:.0f} M/s, "
              f"gguf-py {th['gguf_numbers_per_s'] / 1e6:.0f} M/s")
        if a.bf16:
            (path.unlink() if path.exists() and not a.keep else None)  # the Q4_0 file's disk space back first
            folder = Path(tmp) / "llama7b-shape-bf16"
            t = time.perf_counter()
            report["bf16_write"] = child("write_bf16", folder, a.layers)
            report["bf16_write"]["wall_s"] = time.perf_counter() - t
            report["bf16_trace"] = child("trace", folder, a.memory, Path(tmp) / "bf16.npy")
            bt, size = report["bf16_trace"], report["bf16_write"]["file_bytes"]
            print(f"bfloat16 folder ({size / 1e9:.2f} GB): {bt['expansion']['text']}; {bt['wall_s']:.1f} s, peak RSS "
                  f"{bt['peak_rss_bytes'] / 1e9:.2f} GB (the file's {size / 1e9:.2f} GB {(bt['peak_rss_bytes'] - size) / 1e9:+.2f} GB)")
        report["load_after"] = load_average()
    if a.types:
        subprocess.run([sys.executable, str(ROOT / "bench" / "bench_gguf.py"), "--numbers", str(2**22), "--rounds", "3"])
    print("JSON: " + json.dumps(report))


if __name__ == "__main__":
    main()
