#!/usr/bin/env python
"""A training step of `tracer train` against PyTorch's on the same model, same batch, same threads.

    python bench/bench_train.py                      # the default size of `tracer train`
    python bench/bench_train.py --rounds 5 --steps 10

tracer's step (tracer.run.train: forward, loss, backward, clipping, AdamW) and torch's step
(transformers' GPT2LMHeadModel with the same config, `labels=ids` loss, backward, clipping,
torch.optim.AdamW) take turns, `--steps` steps each per round, so that the machine's speed drifting
within a run hits both alike; the report gives the median per-step time of each and the ratio.
Torch runs in a worker process (default interpreter: /work/torchvenv/bin/python) with
`torch.set_num_threads(threads)`; this process pins OpenBLAS to the same number of threads before
numpy loads. Also reports tracer's peak memory (ru_maxrss) during its steps. The last line is
`JSON: {...}`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKER = r"""
import json, sys, time
import torch
from transformers import GPT2Config, GPT2LMHeadModel
args = json.loads(sys.argv[1])
torch.set_num_threads(args["threads"])
torch.manual_seed(0)
cfg = GPT2Config(vocab_size=50257, n_positions=args["context"], n_embd=args["d_model"], n_layer=args["layers"],
                 n_head=args["heads"], activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = GPT2LMHeadModel(cfg).train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
g = torch.Generator().manual_seed(1)
def step():
    ids = torch.randint(0, 50257, (args["batch"], args["context"]), generator=g)
    loss = model(input_ids=ids, labels=ids).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss)
step()
print("ready", flush=True)
for line in sys.stdin:
    n = int(line)
    times = []
    for _ in range(n):
        t0 = time.perf_counter(); step(); times.append(time.perf_counter() - t0)
    print(json.dumps(times), flush=True)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5, help="steps per side per round")
    ap.add_argument("--torch-python", default="/work/torchvenv/bin/python")
    for name, default in (("layers", 4), ("d-model", 64), ("heads", 4), ("context", 64), ("batch", 16)):
        ap.add_argument(f"--{name}", type=int, default=default)
    a = ap.parse_args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from tracer.core.memory import retain_freed_memory
    from tracer.run.train import TrainSettings, train

    retain_freed_memory()  # as the tracer command does

    size = dict(layers=a.layers, d_model=a.d_model, heads=a.heads, context=a.context, batch=a.batch)
    worker = subprocess.Popen([a.torch_python, "-c", WORKER, json.dumps({**size, "threads": a.threads})],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "ready"
    tokens = np.random.default_rng(0).integers(0, 50257, 200_000)  # [n] random tokens: speed only
    ours, theirs = [], []
    train(tokens, TrainSettings(steps=1, **size))  # warm-up
    for _ in range(a.rounds):
        times = []
        last = [time.perf_counter()]

        def on_step(p):
            now = time.perf_counter()
            times.append(now - last[0])
            last[0] = now

        last[0] = time.perf_counter()
        train(tokens, TrainSettings(steps=a.steps, **size), on_step=on_step)
        ours += times[1:]  # the first includes building the initial weights
        worker.stdin.write(f"{a.steps}\n")
        worker.stdin.flush()
        theirs += json.loads(worker.stdout.readline())[1:]
    worker.stdin.close()
    worker.wait()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t_ours, t_theirs = statistics.median(ours), statistics.median(theirs)
    print(f"training step, {a.layers} layers, d_model {a.d_model}, {a.heads} heads, batch {a.batch} × {a.context} "
          f"tokens, vocabulary 50,257, {a.threads} threads")
    print(f"  tracer (NumPy)   {t_ours * 1e3:7.1f} ms per step  (median of {len(ours)}; "
          f"{min(ours) * 1e3:.1f}–{max(ours) * 1e3:.1f})")
    print(f"  torch            {t_theirs * 1e3:7.1f} ms per step  (median of {len(theirs)}; "
          f"{min(theirs) * 1e3:.1f}–{max(theirs) * 1e3:.1f})")
    print(f"  tracer / torch   {t_ours / t_theirs:.2f}×   tracer's peak memory {rss / 2**30:.2f} GB")
    print("JSON: " + json.dumps({"size": size, "threads": a.threads, "tracer_s": t_ours, "torch_s": t_theirs,
                                 "ratio": t_ours / t_theirs, "tracer_peak_rss": rss}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
