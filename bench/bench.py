#!/usr/bin/env python
"""Benchmarks of issue 8: tracer against the machine's limits and against transformers.

    python bench/bench.py            # the full run (a few minutes on 2 cores)
    python bench/bench.py --quick    # a fast sanity run: fewer rounds, a 256-token capture
    python bench/bench.py --json-out results.json
    python bench/bench.py --threads 1 --cpu-clock   # on a loaded machine: CPU seconds, not wall seconds

Everything runs on a random GPT-2-small-shaped model (`GPT2_SHAPES["gpt2"]`, float32, seeded
`init_weights`). Each case runs once as a warm-up, then several times, in interleaved rounds
(tracer, the machine's limit and transformers take turns, so that a burst of load from other
processes hits all of them alike); the report gives medians and the ratios issue 8 sets targets
for. transformers is compared when torch and transformers import in this interpreter or in
`--torch-python` (default: this one, else /work/torchvenv/bin/python). Torch runs in a
subprocess worker, with the same weights (copied into a `GPT2LMHeadModel`), the same thread
count and the same inputs; its logits are checked against tracer's before any timing.

The last line printed is `JSON: {...}`, a machine-readable summary. Thread counts are pinned
before numpy is imported (`--threads`, default 2: OPENBLAS/OMP/MKL_NUM_THREADS and
torch.set_num_threads).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _early_threads() -> str:
    threads = "2"
    for i, a in enumerate(sys.argv):
        if a == "--threads" and i + 1 < len(sys.argv):
            threads = sys.argv[i + 1]
        elif a.startswith("--threads="):
            threads = a.split("=", 1)[1]
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = threads
    if "--cpu-clock" in sys.argv:  # read by the torch worker too (it inherits the environment)
        if threads != "1":
            raise SystemExit("--cpu-clock times one thread's CPU: use it with --threads 1")
        os.environ["TRACER_BENCH_CLOCK"] = "cpu"
    return threads


_early_threads()
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402  (after the thread count is pinned)

# --------------------------------------------------------------------------- helpers


# Every timing reads `now`: wall time, or with --cpu-clock (and --threads 1) the process's CPU time, which a
# loaded machine does not stretch while the process waits for a core (memory stalls still count: a decode
# step's streaming of the weights is in it). Both sides of every ratio read the same clock.
now = time.process_time if os.environ.get("TRACER_BENCH_CLOCK") == "cpu" else time.perf_counter


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def clock(fn, n: int) -> list[float]:
    """Seconds of `n` calls of fn (results dropped between calls)."""
    out = []
    for _ in range(n):
        t0 = now()
        r = fn()
        out.append(now() - t0)
        del r
    return out


def ms(x: float) -> str:
    return f"{x * 1e3:8.1f} ms"


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine() -> dict:
    info = {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
            "threads": int(os.environ["OPENBLAS_NUM_THREADS"]), "load_at_start": loadavg()}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                info["cpu"] = line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        info["blas"] = f'{blas.get("name")} {blas.get("version")}: {blas.get("openblas configuration", "")}'.strip()
    except Exception as e:  # older numpy
        info["blas"] = f"unknown ({type(e).__name__})"
    return info


# --------------------------------------------------------------------------- the model


def gpt2_small():
    from tracer.core.config import GPT2_SHAPES, Config
    from tracer.core.fast import layout
    from tracer.core.params import init_weights

    cfg = Config(**GPT2_SHAPES["gpt2"], dtype="float32")
    params = init_weights(cfg, 0)
    return cfg, params, layout(cfg, params)


def weight_bytes_per_token(cfg, params) -> int:
    """Bytes a one-token decode step must read: every matrix once (tied W_U = W_E), one row of W_pos."""
    total = 0
    for name, arr in params.items():
        if name == "W_pos":
            total += arr.shape[1] * arr.itemsize
        else:
            total += arr.nbytes
    return total


def matmul_gflops(n: int = 2048) -> callable:
    a = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(2).standard_normal((n, n), dtype=np.float32)
    flops = 2 * n**3

    def run():
        t0 = now()
        a @ b
        return flops / (now() - t0) / 1e9

    return run


def bandwidth_probes(nbytes: int):
    """GB/s of (a) numpy summing a float32 array (one thread) and (b) BLAS vector-matrix
    products over a matrix of the same size (all threads), as dot products of rows and as sums
    of rows (BLAS streams the two layouts at different speeds): the fastest is the limit."""
    rows = nbytes // (768 * 4)
    big = np.random.default_rng(3).standard_normal((rows, 768), dtype=np.float32)  # [rows, 768]
    x = np.random.default_rng(4).standard_normal(768, dtype=np.float32)  # [768]
    y = np.random.default_rng(4).standard_normal(rows, dtype=np.float32)  # [rows]
    flat = big.reshape(-1)

    def by_sum():
        t0 = now()
        flat.sum()
        return big.nbytes / (now() - t0) / 1e9

    def by_gemv():
        t0 = now()
        big @ x  # one dot product per row
        dot = now() - t0
        t0 = now()
        y @ big  # a weighted sum of rows
        axpy = now() - t0
        return big.nbytes / min(dot, axpy) / 1e9

    return by_sum, by_gemv, big


# --------------------------------------------------------------------------- the torch worker


def to_hf_state(cfg, params) -> dict:
    """tracer (TransformerLens) names → GPT2LMHeadModel's state dict names, as numpy arrays."""
    from tracer.core.qkv import fuse_qkv_weights as fuse_qkv

    H, dm = cfg.n_heads, cfg.d_model
    sd = {"transformer.wte.weight": params["W_E"], "transformer.wpe.weight": params["W_pos"],
          "transformer.ln_f.weight": params["ln_final.w"], "transformer.ln_f.bias": params["ln_final.b"]}
    for l in range(cfg.n_layers):
        b, h = f"blocks.{l}.", f"transformer.h.{l}."
        sd[h + "ln_1.weight"], sd[h + "ln_1.bias"] = params[b + "ln1.w"], params[b + "ln1.b"]
        sd[h + "ln_2.weight"], sd[h + "ln_2.bias"] = params[b + "ln2.w"], params[b + "ln2.b"]
        sd[h + "attn.c_attn.weight"] = fuse_qkv(params[b + "attn.W_Q"], params[b + "attn.W_K"], params[b + "attn.W_V"])
        sd[h + "attn.c_attn.bias"] = np.concatenate([params[b + f"attn.b_{m}"].reshape(-1) for m in "QKV"])
        sd[h + "attn.c_proj.weight"] = params[b + "attn.W_O"].reshape(H * cfg.d_head, dm)
        sd[h + "attn.c_proj.bias"] = params[b + "attn.b_O"]
        sd[h + "mlp.c_fc.weight"], sd[h + "mlp.c_fc.bias"] = params[b + "mlp.W_in"], params[b + "mlp.b_in"]
        sd[h + "mlp.c_proj.weight"], sd[h + "mlp.c_proj.bias"] = params[b + "mlp.W_out"], params[b + "mlp.b_out"]
    return sd


def torch_worker(weights: str, threads: int) -> None:
    """GPT-2 small in transformers (sdpa and eager attention), served by `serve`."""
    torch = torch_setup(threads)
    from transformers import GPT2Config, GPT2LMHeadModel

    from tracer.formats.files import load_weights_file

    arrays, cfg = load_weights_file(weights)
    hf_cfg = GPT2Config(vocab_size=cfg.d_vocab, n_positions=cfg.n_ctx, n_embd=cfg.d_model, n_layer=cfg.n_layers,
                        n_head=cfg.n_heads, n_inner=cfg.d_mlp, activation_function="gelu_new",
                        layer_norm_epsilon=cfg.ln_eps, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        tie_word_embeddings=True)
    sd = {k: torch.from_numpy(np.array(v)) for k, v in to_hf_state(cfg, arrays).items()}
    models = {}
    for impl in ("sdpa", "eager"):
        m = GPT2LMHeadModel._from_config(hf_cfg, attn_implementation=impl)
        missing, unexpected = m.load_state_dict(sd, strict=False)
        bad = [k for k in missing if not k.startswith("lm_head")] + list(unexpected)
        if bad:
            raise SystemExit(f"torch worker: state dict mismatch {bad[:3]}")
        m.tie_weights()
        models[impl] = m.eval()
    serve(models.__getitem__)


def torch_setup(threads: int):
    """torch with `threads` threads and the tracer side's malloc settings; returns the torch module."""
    import torch

    torch.set_num_threads(threads)
    if os.environ.get("TRACER_BENCH_MALLOC", "retain") == "retain":
        from tracer.core.memory import retain_freed_memory

        retain_freed_memory()  # the same malloc settings as the tracer side
    return torch


def serve(model_for) -> None:
    """Says it is ready, then reads one JSON request per line on stdin and answers one JSON line on
    stdout. `model_for(impl)`: the model with attention implementation "sdpa" or "eager"."""
    import torch
    import transformers

    out = sys.stdout
    out.write(json.dumps({"ready": True, "torch": torch.__version__, "transformers": transformers.__version__,
                          "torch_threads": torch.get_num_threads()}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        case = req["case"]
        with torch.inference_mode():
            if case == "logits":
                ids = torch.tensor([req["tokens"]])
                logits = model_for(req.get("impl", "sdpa"))(ids).logits[0].numpy()
                reply = {"logits_last": logits[-1].tolist(), "logits_mean_abs": float(np.abs(logits).mean())}
                if req.get("save"):  # every position's logits, too many for a JSON line
                    np.save(req["save"], logits)
            elif case == "prefill":
                ids = torch.tensor([req["tokens"]])
                m = model_for(req.get("impl", "sdpa"))
                reply = {"times": clock(lambda: m(ids, use_cache=False).logits, req["n"])}
            elif case == "generate":
                ids = torch.tensor([req["prompt"]])
                m = model_for("sdpa")
                new = req["new"]
                kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True, pad_token_id=0)
                times, seqs = [], None
                for _ in range(req["n"]):
                    t0 = now()
                    seqs = m.generate(ids, **kw)
                    times.append(now() - t0)
                reply = {"times": times, "generated": seqs[0, ids.shape[1]:].tolist()}
            elif case == "quit":
                return
            else:
                reply = {"error": f"unknown case {case}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


class Torch:
    """A persistent torch subprocess (so torch's and OpenBLAS's thread pools never share a process)."""

    def __init__(self, python: str, weights: Path, threads: int, script: str = __file__):
        """`script` is run as `script --worker weights --threads threads` (this file: `torch_worker`)."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        self.p = subprocess.Popen([python, str(Path(script).resolve()), "--worker", str(weights), "--threads", str(threads)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.info = self._read()

    def _read(self) -> dict:
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("torch worker died (see its stderr above)")
        return json.loads(line)

    def ask(self, **req) -> dict:
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        return self._read()

    def close(self) -> None:
        try:
            self.ask(case="quit")
        except Exception:
            pass
        self.p.wait(timeout=30)


def find_torch_python(arg: str | None) -> str | None:
    cands = [arg] if arg else [sys.executable, "/work/torchvenv/bin/python"]
    for py in cands:
        if py and Path(py).exists():
            r = subprocess.run([py, "-c", "import torch, transformers"], capture_output=True)
            if r.returncode == 0:
                return py
    return None


# --------------------------------------------------------------------------- cases


def case_prefill(cfg, params, laid, torch_w, rounds: int, per: int, T: int, results: dict) -> None:
    from tracer.core.decoder import forward
    from tracer.core.record import Recorder

    tokens = np.random.default_rng(5).integers(0, cfg.d_vocab, T)  # [pos]
    flops = 2 * cfg.pass_macs(T, T)
    gflops = matmul_gflops()
    run_all = lambda: forward(cfg, laid, tokens, Recorder(None, cfg))  # noqa: E731
    run_none = lambda: forward(cfg, laid, tokens, Recorder([], cfg))  # noqa: E731
    check = {}
    if torch_w is not None:
        ref = np.array(torch_w.ask(case="logits", tokens=tokens.tolist())["logits_last"], dtype=np.float32)
        ours = run_none()[-1]
        check["max_abs_logit_diff_vs_torch"] = float(np.abs(ref - ours).max())
        check["logit_scale"] = float(np.abs(ref).max())
    run_all(), run_none(), gflops()  # warm-up
    t_all, t_none, g, t_sdpa, t_eager = [], [], [], [], []
    for r in range(rounds):
        g += [gflops() for _ in range(per)]
        for i in range(per):  # everything and nothing take turns, each first as often (the first after the
            turns = ((run_all, t_all), (run_none, t_none))  # matmul probe finds the caches cold)
            for run, times in turns if (r + i) % 2 == 0 else turns[::-1]:
                times += clock(run, 1)
                gc.collect()
        if torch_w is not None:
            t_sdpa += torch_w.ask(case="prefill", tokens=tokens.tolist(), n=per + (1 if not t_sdpa else 0), impl="sdpa")["times"][-per:]
            t_eager += torch_w.ask(case="prefill", tokens=tokens.tolist(), n=per + (1 if not t_eager else 0), impl="eager")["times"][-per:]
    limit = flops / (median(g) * 1e9)
    r = {"tokens": T, "gflop": flops / 1e9, "matmul_gflops": median(g), "compute_limit_s": limit,
         "all_s": median(t_all), "none_s": median(t_none), "all_over_none": median(t_all) / median(t_none),
         "all_over_limit": median(t_all) / limit, **check}
    if t_sdpa:
        r.update(torch_sdpa_s=median(t_sdpa), torch_eager_s=median(t_eager),
                 all_over_torch_sdpa=median(t_all) / median(t_sdpa), all_over_torch_eager=median(t_all) / median(t_eager))
    results["prefill"] = r
    print(f"\nprefill {T} tokens ({flops / 1e9:.1f} GFLOP; matmul {median(g):.0f} GFLOP/s → compute limit {ms(limit)})")
    print(f"  tracer, everything recorded {ms(r['all_s'])}   ({r['all_over_limit']:.2f}× the compute limit)")
    print(f"  tracer, nothing recorded    {ms(r['none_s'])}   (everything / nothing = {r['all_over_none']:.3f}×)")
    if t_sdpa:
        print(f"  transformers sdpa           {ms(r['torch_sdpa_s'])}   (tracer everything / torch = {r['all_over_torch_sdpa']:.2f}×)")
        print(f"  transformers eager          {ms(r['torch_eager_s'])}   (tracer everything / torch = {r['all_over_torch_eager']:.2f}×)")
        print(f"  same logits: max |tracer - torch| = {check['max_abs_logit_diff_vs_torch']:.2e} (logits up to {check['logit_scale']:.2f})")


FIRST_PASS = """
import sys, time, numpy as np
if sys.argv[3] == "retain":
    from tracer.core.memory import retain_freed_memory
    retain_freed_memory()
import tracer
from tracer.core.decoder import forward
from tracer.core.record import Recorder
m = tracer.load(sys.argv[1])
tokens = np.random.default_rng(5).integers(0, m.config.d_vocab, 128)
t0 = time.perf_counter()
forward(m.config, m.weights, tokens, Recorder(None if sys.argv[2] == "all" else [], m.config))
print(time.perf_counter() - t0)
"""


def case_first_pass(weights: Path, runs: int, malloc: str, results: dict) -> None:
    """The first 128-token pass of a fresh process (as `tracer trace` runs it): every array is new memory."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    t = {"all": [], "none": []}
    for _ in range(runs):
        for mode in ("all", "none"):
            out = subprocess.run([sys.executable, "-c", FIRST_PASS, str(weights), mode, malloc], env=env,
                                 capture_output=True, text=True)
            if out.returncode == 0:
                t[mode].append(float(out.stdout.strip()))
    if not t["all"] or not t["none"]:
        results["first_pass"] = {"error": "subprocess failed"}
        return
    r = {"all_s": median(t["all"]), "none_s": median(t["none"]), "all_over_none": median(t["all"]) / median(t["none"])}
    results["first_pass"] = r
    print(f"\nfirst 128-token pass of a fresh process (median of {runs}): everything {ms(r['all_s'])}, "
          f"nothing {ms(r['none_s'])} ({r['all_over_none']:.2f}×)")


def case_decode(cfg, params, laid, rounds: int, steps: int, prompt_len: int, results: dict) -> None:
    """One-token steps with the KV cache, each followed by the bandwidth probe: the ratio is taken
    step by step (step time / the probe's time just after it), so a change in the machine's memory
    bandwidth during the run (other tenants of the host) moves both sides of each ratio alike."""
    from tracer.core.decoder import KVCache, forward
    from tracer.core.fast import add_out_rows, layout
    from tracer.core.record import Recorder

    wbytes = weight_bytes_per_token(cfg, params)
    by_sum, by_gemv, big = bandwidth_probes(wbytes)
    prompt = np.random.default_rng(6).integers(0, cfg.d_vocab, prompt_len)  # [pos]
    plain = laid  # no transposed W_out
    rows = layout(cfg, params)
    t0 = now()
    add_out_rows(cfg, rows)  # what generate() does for long generations
    t_rows = now() - t0

    def steps_of(names, fz, out: list, ratios: list, bws: list) -> None:
        kv = KVCache(cfg, prompt_len + steps + 1)
        forward(cfg, fz, prompt, Recorder([], cfg), cache=kv)
        tok = [int(prompt[-1])]
        for i in range(steps):
            t0 = now()
            logits = forward(cfg, fz, tok, Recorder(names, cfg), cache=kv)  # [1, d_vocab]
            dt = now() - t0
            tok = [int(logits[-1].argmax())]
            bw = by_gemv()
            if i:  # the first step after the prefill is the warm-up
                out.append(dt)
                ratios.append(dt * bw * 1e9 / wbytes)
                bws.append(bw)

    by_sum(), by_gemv()
    t = {k: [] for k in ("all", "none", "plain")}
    q = {k: [] for k in t}
    bw_gemv, bw_sum = [], []
    for _ in range(rounds):
        bw_sum += [by_sum() for _ in range(3)]
        steps_of(None, rows, t["all"], q["all"], bw_gemv)
        steps_of([], rows, t["none"], q["none"], bw_gemv)
        steps_of(None, plain, t["plain"], q["plain"], bw_gemv)
    del big
    bw = median(bw_gemv)
    stream = wbytes / (bw * 1e9)
    r = {"weight_bytes": wbytes, "bandwidth_sum_gbs": median(bw_sum), "bandwidth_gemv_gbs": bw,
         "bandwidth_gemv_range_gbs": [min(bw_gemv), max(bw_gemv)], "stream_s": stream,
         "step_all_s": median(t["all"]), "step_none_s": median(t["none"]), "step_plain_w_out_s": median(t["plain"]),
         "step_all_over_stream": median(q["all"]), "step_none_over_stream": median(q["none"]),
         "step_plain_w_out_over_stream": median(q["plain"]), "w_out_rows_build_s": t_rows,
         "context": f"{prompt_len}..{prompt_len + steps}"}
    results["decode"] = r
    print(f"\ndecode step with the KV cache (context {r['context']}; {wbytes / 1e6:.0f} MB of weights per token)")
    print(f"  bandwidth: sum {median(bw_sum):.1f} GB/s; gemv {bw:.1f} GB/s (range {min(bw_gemv):.1f}–{max(bw_gemv):.1f} over the run)"
          f" → streaming the weights once {ms(stream)}")
    print(f"  each ratio: a step's time / the gemv probe's time right after it, median over {len(q['all'])} steps")
    print(f"  tracer step, everything recorded {ms(r['step_all_s'])}  ({r['step_all_over_stream']:.2f}× the stream time)")
    print(f"  tracer step, nothing recorded    {ms(r['step_none_s'])}  ({r['step_none_over_stream']:.2f}× the stream time)")
    print(f"  … everything, W_out not transposed {ms(r['step_plain_w_out_s'])}  ({r['step_plain_w_out_over_stream']:.2f}×;"
          f" the transposed copies took {t_rows * 1e3:.0f} ms to build, once)")


def tokens_per_s(run, got: dict) -> float:
    """New tokens per second of one generation `run()` (a `Generation`); its tokens go to got["ids"]."""
    t0 = now()
    gen = run()
    dt = now() - t0
    got["ids"] = list(gen.generated_ids)
    return len(gen.generated_ids) / dt


def case_generate(cfg, params, laid, torch_w, rounds: int, new: int, prompt_len: int, results: dict) -> None:
    from tracer.model import Model
    from tracer.tokenizers.tokens import get_tokenizer

    model = Model(cfg, params, get_tokenizer("gpt2"), "bench-gpt2-small", 0, weights=laid)
    prompt = np.random.default_rng(7).integers(0, cfg.d_vocab - 1, prompt_len).tolist()
    got = {}

    from tracer.run.generate import generate
    from tracer.run.settings import GenerationSettings

    settings = GenerationSettings(max_new_tokens=new)

    def run(names, lens=None):  # None: generate's default (the lens on the prompt pass only, at this size)
        return tokens_per_s(lambda: generate(model, prompt, settings, names=names, lens=lens), got)  # what Model.generate runs

    run([])  # warm-up
    tps_all, tps_none, tps_nolens, tps_torch = [], [], [], []
    torch_ids = None
    for i in range(rounds):
        tps_all.append(run(None))
        tps_nolens.append(run(None, lens=False))
        tps_none.append(run([]))
        if torch_w is not None:
            rep = torch_w.ask(case="generate", prompt=prompt, new=new, n=2 if i == 0 else 1)
            tps_torch += [new / t for t in (rep["times"][1:] if i == 0 else rep["times"])]
            torch_ids = rep["generated"]
    r = {"prompt_tokens": prompt_len, "new_tokens": new, "tracer_all_tok_s": median(tps_all),
         "tracer_none_tok_s": median(tps_none), "tracer_generated": len(got["ids"])}
    print(f"\ngenerate(): prompt {prompt_len} tokens, {new} new tokens, greedy, KV cache")
    print(f"  tracer, everything recorded {median(tps_all):6.1f} tokens/s   (the default: hooks, sampling, predictions, logit lens on the prompt pass)")
    if tps_nolens:
        r["tracer_all_but_lens_tok_s"] = median(tps_nolens)
        print(f"  tracer, all but the lens    {median(tps_nolens):6.1f} tokens/s")
    print(f"  tracer, nothing recorded    {median(tps_none):6.1f} tokens/s")
    if tps_torch:
        same = sum(a == b for a, b in zip(got["ids"], torch_ids))
        r.update(torch_tok_s=median(tps_torch), all_over_torch=median(tps_all) / median(tps_torch),
                 same_tokens_as_torch=f"{same}/{len(torch_ids)}")
        print(f"  transformers generate()     {median(tps_torch):6.1f} tokens/s   (tracer everything / torch = {r['all_over_torch']:.2f}×)")
        print(f"  same greedy tokens as transformers: {same}/{len(torch_ids)}")
    results["generate"] = r


def distinct_bytes(arrays) -> int:
    """Sum of nbytes over distinct arrays (the same object recorded under two names counts once)."""
    seen, total = set(), 0
    for a in arrays:
        if id(a) not in seen:
            seen.add(id(a))
            total += a.nbytes
    return total


def case_capture(cfg, params, laid, T: int, tmp: Path, results: dict) -> None:
    from tracer.core.decoder import forward
    from tracer.core.record import Recorder
    from tracer.run.trace import Generation, Trace

    tokens = np.random.default_rng(8).integers(0, cfg.d_vocab, T)  # [pos]
    rec = Recorder(None, cfg)
    t0 = now()
    forward(cfg, laid, tokens, rec)
    t_fwd = now() - t0
    store = rec.store
    raw = getattr(store, "raw", store.__getitem__)  # as held: an array, or a packed / derived entry
    by_kind: dict[str, int] = {}
    whole_by_kind: dict[str, int] = {}
    seen = set()
    for name in store:
        a = raw(name)
        if id(a) in seen:
            continue
        seen.add(id(a))
        kind = name.split(".")[-1] if name.startswith("blocks.") else name
        by_kind[kind] = by_kind.get(kind, 0) + int(a.nbytes)
        whole_by_kind[kind] = whole_by_kind.get(kind, 0) + int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize
    total = store.nbytes() if hasattr(store, "nbytes") else distinct_bytes(store.values())
    unpacked = sum(whole_by_kind.values())  # every array whole, each once
    naive = sum(int(np.prod(raw(n).shape)) * np.dtype(raw(n).dtype).itemsize for n in store)
    dtypes = sorted({str(np.dtype(raw(n).dtype)) for n in store})
    path = tmp / "capture.npz"
    trace = Trace(store, tokens.astype(np.int64), cfg, ["x"] * T, {"model": "bench"}, 0)
    t0 = now()
    trace.save(path)
    t_save = now() - t0
    size = path.stat().st_size
    del trace, rec
    store.clear()
    gc.collect()
    t0 = now()
    back = Generation.load(path)
    t_load = now() - t0
    n_names = len(back.steps[0].arrays)
    del back
    path.unlink()
    r = {"tokens": T, "names": n_names, "recorded_bytes": total, "unpacked_bytes": unpacked,
         "recorded_bytes_counting_aliases": naive,
         "file_bytes": size, "dtypes": dtypes, "forward_s": t_fwd, "save_s": t_save, "load_s": t_load,
         "bytes_by_hook": dict(sorted(by_kind.items(), key=lambda kv: -kv[1]))}
    results["capture"] = r
    print(f"\nfull capture at {T} tokens ({n_names} names, dtypes {', '.join(dtypes)})")
    print(f"  recorded {total / 1e9:.2f} GB in memory (causal halves and recipes as held; every array whole "
          f"{unpacked / 1e9:.2f} GB, {naive / 1e9:.2f} GB counting names that alias one array)")
    print(f"  file {size / 1e9:.2f} GB; forward {t_fwd:.2f} s, save {t_save:.2f} s, load {t_load:.2f} s")
    top = ", ".join(f"{k} {v / 1e9:.2f}" for k, v in list(r["bytes_by_hook"].items())[:6])
    print(f"  largest (GB): {top}")


_LAUNCHER = """
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
err = p.stderr.read()
_, status, usage = os.wait4(p.pid, 0)
sys.stderr.write(err)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def wait_rss(cmd: list[str], env=None) -> tuple[int, float, int, str]:
    """Exit code, wall seconds, peak RSS (KB) of one child process, and its stderr's last line.

    The child is started by a small launcher process, not by this one: Linux counts the memory a
    process had when it forked (this benchmark holds gigabytes by now) in its child's peak RSS,
    even after exec."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _LAUNCHER, *cmd], capture_output=True, env=env, text=True)
    dt = time.perf_counter() - t0
    code, rss = (int(x) for x in p.stdout.split())
    err = p.stderr
    last = err.strip().splitlines()[-1] if err.strip() else ""
    return code, dt, rss, last


def tracer_cmd(arg: str | None) -> list[str]:
    if arg:
        return arg.split()
    exe = Path(sys.executable).parent / "tracer"
    if exe.exists():
        return [str(exe)]
    venv = ROOT / ".venv" / "bin" / "tracer"
    if venv.exists():
        return [str(venv)]
    found = shutil.which("tracer")
    return [found] if found else [sys.executable, "-m", "tracer"]


def case_cli_memory(weights: Path, T: int, cmd: list[str], tmp: Path, results: dict) -> None:
    from tracer.tokenizers.tokens import get_tokenizer

    tok = get_tokenizer("gpt2")
    text = " hello" * (T - 1)
    n = len(tok.encode(text))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    r = {"prompt_tokens": n, "new_tokens": 1, "command": " ".join(cmd[-1:] + ["trace", f"<{n} tokens>", "--model", weights.name, "-n", "1"])}
    for label, extra in (("json", ["--json"]), ("json_save", ["--json", "--save", str(tmp / "cli.npz")])):
        code, dt, rss, last = wait_rss(cmd + ["trace", text, "--model", str(weights), "-n", "1"] + extra, env=env)
        r[label] = {"exit": code, "wall_s": dt, "peak_rss_bytes": rss * 1024, "stderr": last}
    if (tmp / "cli.npz").exists():
        r["json_save"]["file_bytes"] = (tmp / "cli.npz").stat().st_size
        (tmp / "cli.npz").unlink()
    results["cli_trace_memory"] = r
    print(f"\n`tracer trace` at {n} prompt tokens + 1 new, GPT-2 small (random weights file), peak memory")
    for label in ("json", "json_save"):
        x = r[label]
        bad = f"  exit {x['exit']}: {x['stderr']}" if x["exit"] else ""
        print(f"  {label:10s} peak RSS {x['peak_rss_bytes'] / 1e9:.2f} GB, wall {x['wall_s']:.1f} s{bad}")


def case_load(cfg, params, tmp: Path, rounds: int, results: dict) -> Path:
    import tracer
    from tracer.formats.files import load_weights_file, save_weights

    path = tmp / "bench-gpt2-small.safetensors"
    save_weights(path, cfg, params, seed=0)
    size = path.stat().st_size

    def read():
        with open(path, "rb") as f:
            return f.read()

    def read_np():
        return np.fromfile(path, dtype=np.uint8)

    def load_model():
        return tracer.load(str(path))

    def load_arrays():
        arrays, _ = load_weights_file(path)
        return arrays

    read(), load_model()  # page cache warm for both; tokenizer built once per process
    t_read, t_np, t_load, t_arrays = [], [], [], []
    for _ in range(rounds):
        t_read += clock(read, 2)
        t_np += clock(read_np, 2)
        t_load += clock(load_model, 2)
        t_arrays += clock(load_arrays, 2)
    ref = min(median(t_read), median(t_np))
    r = {"file_bytes": size, "read_s": median(t_read), "fromfile_s": median(t_np), "load_model_s": median(t_load),
         "load_arrays_s": median(t_arrays), "load_over_read": median(t_load) / ref}
    results["load"] = r
    print(f"\nloading a {size / 1e6:.0f} MB safetensors file (in the page cache for every case)")
    print(f"  read the file (f.read)      {ms(r['read_s'])}   np.fromfile {ms(r['fromfile_s'])}")
    print(f"  tracer.load(file) → Model   {ms(r['load_model_s'])}   ({r['load_over_read']:.2f}× reading it)")
    print(f"  load_weights_file (arrays)  {ms(r['load_arrays_s'])}")
    return path


def readme_prompt() -> str:
    """The prompt of the README's first command (`tracer trace "…"`)."""
    import shlex

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    words = shlex.split(block.split(" trace ", 1)[1].splitlines()[0])
    return words[0]


def case_cli(cmd: list[str], runs: int, results: dict) -> None:
    """Whole processes, interleaved round by round (A B C … A B C …) so that the machine's drift
    hits every case alike: Python's own start-up with numpy and rich imported (the floor any
    NumPy + Rich program pays), `tracer --help`, the README's first trace, its `--section predict`,
    and `tracer replay article`. Ratios are to the start-up of the same round."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "COLUMNS": "100"}
    prompt = readme_prompt()
    cases = {
        "startup": [sys.executable, "-c", "import numpy, rich"],
        "help": cmd + ["--help"],
        "readme_trace": cmd + ["trace", prompt, "--no-pager"],
        "readme_predict": cmd + ["trace", prompt, "--section", "predict", "--no-pager"],
        "replay_article": cmd + ["replay", "article", "--no-pager"],
    }
    walls = {k: [] for k in cases}
    failed = {}
    for round_ in range(runs + 1):  # round 0 warms the page cache and is dropped
        for label, c in cases.items():
            if label in failed:
                continue
            code, dt, _rss, last = wait_rss(c, env=env)
            if code:
                failed[label] = f"exit {code}: {last}"
            elif round_:
                walls[label].append(dt)
    out = {"command": " ".join(cmd), "prompt": prompt, "rounds": runs}
    base = walls["startup"]
    for label in cases:
        w = walls[label]
        out[label] = {"exit": 1 if label in failed else 0, "stderr": failed.get(label, ""),
                      "wall_s": median(w) if w else None,
                      "over_startup": median([a / b for a, b in zip(w, base)]) if w and base and label != "startup" else None}
    results["cli"] = out
    print(f"\nwhole process ({out['command']}), median of {runs} interleaved rounds after one warm-up")
    for label, shown in (("startup", 'python -c "import numpy, rich"'), ("help", "tracer --help"),
                         ("readme_trace", f"tracer trace {prompt!r}"), ("readme_predict", "  … --section predict"),
                         ("replay_article", "tracer replay article")):
        x = out[label]
        if x["exit"]:
            print(f"  {shown:40s} ({x['stderr']})")
            continue
        ratio = f"   {x['over_startup']:.2f}× start-up" if x["over_startup"] else ""
        print(f"  {shown:40s} {x['wall_s']:.3f} s{ratio}")


def case_render(results: dict, runs: int) -> None:
    """Issue 3: a 24-layer, 1024-wide, 20-token trace rendered in brief mode to a null console."""
    try:
        from rich.console import Console

        from tracer.core.config import Config
        from tracer.model import Model
        from tracer.render import show_generation
        from tracer.render.view import View
        from tracer.tokenizers.tokens import get_tokenizer
        from tracer.core.params import init_weights
    except ImportError as e:
        results["render"] = {"error": str(e)}
        print(f"\nrender: not available ({e})")
        return
    cfg = Config(n_layers=24, d_model=1024, n_heads=16, dtype="float32")
    model = Model(cfg, init_weights(cfg, 0), get_tokenizer("gpt2"), "bench-medium")
    gen = model.generate(list(range(1000, 1020)), max_new_tokens=0)
    view = View(brief=True)

    def render():
        with open(os.devnull, "w") as null:
            show_generation(gen, model.tokenizer, view, console=Console(file=null, width=120))

    try:
        import io

        buf = io.StringIO()
        show_generation(gen, model.tokenizer, view, console=Console(file=buf, width=120, color_system=None))
        lines = buf.getvalue().count("\n")
        t = clock(render, runs)
        results["render"] = {"tokens": 20, "layers": 24, "d_model": 1024, "brief_s": median(t), "lines": lines}
        print(f"\nrender (issue 3): 24 layers, d_model 1024, 20 tokens, brief, to a null console: {ms(median(t))} ({lines} lines)")
    except Exception as e:
        results["render"] = {"error": f"{type(e).__name__}: {e}"}
        print(f"\nrender (issue 3): failed ({type(e).__name__}: {e})")


# --------------------------------------------------------------------------- main


def arguments(doc: str) -> argparse.ArgumentParser:
    """The options of every benchmark against transformers here (bench.py, bench_families.py)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a fast sanity run")
    ap.add_argument("--threads", default="2", help="BLAS and torch threads (default 2)")
    ap.add_argument("--torch-python", help="a Python with torch + transformers (default: this one, else /work/torchvenv)")
    ap.add_argument("--no-torch", action="store_true", help="skip the transformers comparison")
    ap.add_argument("--json-out", help="also write the JSON summary to this file")
    ap.add_argument("--cpu-clock", action="store_true", help="time CPU seconds instead of wall seconds (with --threads 1): "
                    "on a machine other work loads, waiting for a core then counts on neither side")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # the torch worker's own process
    return ap


def main() -> int:
    ap = arguments(__doc__)
    ap.add_argument("--tracer-cmd", help="the tracer command for the whole-process cases (default: the installed entry point)")
    ap.add_argument("--only", default="", help="comma-separated cases: prefill,decode,generate,capture,load,cli,render")
    ap.add_argument("--malloc", choices=("retain", "default"), default="retain",
                    help="retain: keep freed memory for reuse, as the tracer command does (tracer.core.memory.retain_freed_memory), in both tracer's and torch's process; default: glibc's defaults")
    args = ap.parse_args()
    threads = int(args.threads)
    if args.worker:
        torch_worker(args.worker, threads)
        return 0

    q = args.quick
    os.environ["TRACER_BENCH_MALLOC"] = args.malloc  # read by the torch worker
    if args.malloc == "retain":
        from tracer.core.memory import retain_freed_memory

        retain_freed_memory()
    only = set(filter(None, args.only.split(",")))
    want = lambda c: not only or c in only  # noqa: E731
    results: dict = {"machine": machine(), "quick": q, "malloc": args.malloc,
                     "clock": "cpu" if now is time.process_time else "wall"}
    m = results["machine"]
    print(f"machine: {m.get('cpu', '?')}, {m['cpus']} CPUs, {threads} threads; numpy {m['numpy']}, {m['blas']}")
    print(f"load average at start: {m['load_at_start']}; malloc: {args.malloc}; clock: {results['clock']}")
    t_start = time.perf_counter()
    cfg, params, laid = gpt2_small()
    tmp = Path(tempfile.mkdtemp(prefix="tracer-bench-"))
    torch_w = None
    try:
        weights = case_load(cfg, params, tmp, 1 if q else 3, results) if want("load") or want("capture") or want("prefill") or want("generate") else None
        py = None if args.no_torch else find_torch_python(args.torch_python)
        if py and weights is not None and (want("prefill") or want("generate")):
            torch_w = Torch(py, weights, threads)
            results["machine"].update({k: torch_w.info[k] for k in ("torch", "transformers", "torch_threads")})
            print(f"transformers {torch_w.info['transformers']}, torch {torch_w.info['torch']} ({torch_w.info['torch_threads']} threads), via {py}")
        elif not args.no_torch and not py and (want("prefill") or want("generate")):
            print("transformers: not importable here or in /work/torchvenv; comparisons skipped")
        if want("prefill"):
            case_prefill(cfg, params, laid, torch_w, 2 if q else 5, 2 if q else 3, 128, results)
        if want("prefill") and weights is not None:
            case_first_pass(weights, 3 if q else 7, args.malloc, results)
        if want("decode"):
            case_decode(cfg, params, laid, 1 if q else 3, 8 if q else 24, 128, results)
        if want("generate"):
            case_generate(cfg, params, laid, torch_w, 1 if q else 3, 8 if q else 32, 16, results)
        if torch_w is not None:
            torch_w.close()
            torch_w = None
        if want("capture"):
            case_capture(cfg, params, laid, 256 if q else 1024, tmp, results)
            if weights is not None:
                case_cli_memory(weights, 256 if q else 1024, tracer_cmd(args.tracer_cmd), tmp, results)
        if want("cli"):
            case_cli(tracer_cmd(args.tracer_cmd), 3 if q else 7, results)
        if want("render"):
            case_render(results, 1 if q else 3)
    finally:
        if torch_w is not None:
            torch_w.p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    results["machine"]["load_at_end"] = loadavg()
    results["wall_s"] = time.perf_counter() - t_start
    print(f"\nload average at end: {results['machine']['load_at_end']}; {results['wall_s']:.0f} s in all")
    targets = check_targets(results)
    results["targets"] = targets
    print("\ntargets (issue 8):")
    for t in targets:
        print(f"  {'met    ' if t['met'] else 'NOT met' if t['met'] is not None else 'n/a    '}  {t['target']}: {t['value']}")
    blob = json.dumps(results, default=float)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1, default=float))
    print("JSON: " + blob)
    return 0


def check_targets(r: dict) -> list[dict]:
    out = []

    def add(target, ok, value):
        out.append({"target": target, "met": ok, "value": value})

    p = r.get("prefill", {})
    if "torch_sdpa_s" in p:
        add("prefill 128, everything recorded ≤ 0.75× transformers (sdpa)", p["all_over_torch_sdpa"] <= 0.75, f"{p['all_over_torch_sdpa']:.2f}×")
    if p:
        add("prefill 128, everything recorded ≤ 1.25× the compute limit", p["all_over_limit"] <= 1.25, f"{p['all_over_limit']:.2f}×")
        add("recording everything vs nothing ≤ 1.05×", p["all_over_none"] <= 1.05, f"{p['all_over_none']:.3f}×")
    d = r.get("decode", {})
    if d:
        add("decode step (everything recorded) ≤ 1.15× streaming the weights", d["step_all_over_stream"] <= 1.15, f"{d['step_all_over_stream']:.2f}×")
    g = r.get("generate", {})
    if "all_over_torch" in g:
        add("generate() tokens/s ≥ 1.6× transformers", g["all_over_torch"] >= 1.6, f"{g['all_over_torch']:.2f}×")
    c = r.get("capture", {})
    if c:
        gb = c["recorded_bytes"] / 1e9
        add(f"full capture at {c['tokens']} tokens ≤ 1.2 GB recorded", gb <= 1.2 if c["tokens"] == 1024 else None,
            f"{gb:.2f} GB in memory, file {c['file_bytes'] / 1e9:.2f} GB")
    lo = r.get("load", {})
    if lo:
        add("loading a ~500 MB safetensors ≤ 1.5× reading it", lo["load_over_read"] <= 1.5, f"{lo['load_over_read']:.2f}×")
    cli = r.get("cli", {})
    if cli:
        add("tracer --help ≤ 0.3 s", cli["help"]["wall_s"] <= 0.3 and not cli["help"]["exit"], f"{cli['help']['wall_s']:.3f} s")
        ra = cli["replay_article"]
        add("tracer replay article ≤ 1.0 s", (ra["wall_s"] <= 1.0) if not ra["exit"] else None,
            f"{ra['wall_s']:.3f} s" if not ra["exit"] else f"not runnable ({ra['stderr']})")
        rt = cli["readme_trace"]
        add("the README's first trace ≤ 5× `python -c \"import numpy, rich\"` (issue 16)",
            rt["over_startup"] <= 5 if not rt["exit"] else None,
            f"{rt['over_startup']:.2f}× ({rt['wall_s']:.2f} s against {cli['startup']['wall_s']:.2f} s)" if not rt["exit"]
            else f"not runnable ({rt['stderr']})")
    return out


if __name__ == "__main__":
    sys.exit(main())
