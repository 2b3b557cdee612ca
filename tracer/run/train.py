"""Training a small GPT-2 on a text corpus, with the NumPy backward pass (`tracer train`).

The loop is nanoGPT's: draw a batch of windows from the token stream, run the decoder forward
(recording what the backward pass reads), take the mean next-token loss and every gradient
(`tracer.core.backward`), clip the gradients' global norm, and take one AdamW step with a learning rate
that warms up linearly and decays along a cosine. Everything is seeded: the same corpus, settings
and seed give the same weights, bit for bit, on the same machine and thread count.

The loop stops cleanly between steps: when `should_stop()` says so (Ctrl-C, a signal), or when
the loss, a gradient or a weight stops being finite, the weights are those of the last completed
step (always finite). The unembedding bias stays zero (GPT-2 has none), so the result saves in
transformers' GPT-2 layout (`tracer.readers.gpt2.write_folder`). Core module: imports numpy only.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ..core.backward import loss_and_grads
from ..core.config import Config
from ..errors import TracerError, is_whole
from ..core.fast import layout
from ..core.params import init_weights
from ..core.equations import largest_first

GPT2_VOCAB = 50257


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 1500  # optimizer steps
    layers: int = 4  # blocks
    d_model: int = 64  # width of the residual stream
    heads: int = 4  # attention heads (d_model must divide by it)
    context: int = 64  # tokens per training window (the model's n_ctx)
    batch: int = 16  # windows per step
    lr: float = 3e-3  # peak learning rate
    seed: int = 0  # initial weights and the windows drawn
    warmup: int = 100  # steps of linear warm-up (at most a tenth of the steps)
    min_lr_ratio: float = 0.1  # the cosine ends at lr × this
    weight_decay: float = 0.1  # AdamW's, on matrices only
    clip: float = 1.0  # largest global gradient norm
    betas: tuple = (0.9, 0.95)
    eps: float = 1e-8

    def __post_init__(self) -> None:
        for name in ("steps", "layers", "d_model", "heads", "context", "batch"):
            v = getattr(self, name)
            if not is_whole(v, 1):
                raise TracerError(f"--{name.replace('_', '-')} must be a whole number ≥ 1, got {v!r}")
        if self.d_model % self.heads:
            raise TracerError(f"--d-model {self.d_model} is not divisible by --heads {self.heads}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise TracerError(f"--lr must be a number > 0, got {self.lr!r}")
        if not is_whole(self.seed, 0):
            raise TracerError(f"--seed must be a whole number ≥ 0, got {self.seed!r}")

    def config(self) -> Config:
        return Config(d_vocab=GPT2_VOCAB, n_ctx=self.context, d_model=self.d_model, n_heads=self.heads,
                      n_layers=self.layers, dtype="float32")

    def lr_at(self, step: int) -> float:
        """Linear warm-up, then a cosine from lr down to lr × min_lr_ratio at the last step."""
        warm = min(self.warmup, max(self.steps // 10, 1))
        if step < warm:
            return self.lr * (step + 1) / warm
        t = (step - warm + 1) / max(self.steps - warm, 1)  # 1 at the last step
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))


@dataclass
class Progress:
    step: int  # steps completed
    loss: float
    lr: float
    tokens_per_s: float


@dataclass
class Result:
    config: Config
    params: dict  # TransformerLens names → float32 arrays: the weights of the last completed step
    losses: list = field(default_factory=list)  # the loss of every completed step
    stopped: str = "done"  # done | interrupted | not finite
    seconds: float = 0.0


def windows(tokens: np.ndarray, batch: int, context: int, rng: np.random.Generator) -> np.ndarray:  # → [batch, context]
    """`batch` windows of `context` consecutive tokens, from seeded random starts."""
    starts = rng.integers(0, len(tokens) - context + 1, batch)  # [batch]
    return tokens[starts[:, None] + np.arange(context)[None, :]]  # [batch, context]


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter), on named arrays in place."""

    def __init__(self, params: dict, names: list, decayed: set, s: TrainSettings):
        self.names, self.decayed, self.s = names, decayed, s
        self.m = {n: np.zeros_like(params[n]) for n in names}
        self.v = {n: np.zeros_like(params[n]) for n in names}
        self.t = 0

    def step(self, params: dict, grads: dict, lr: float) -> bool:
        """One update of every weight; False, and nothing changed, when a weight would stop being
        finite (a diverging run keeps the last finite weights). The same arithmetic, in the same
        order, as the in-place update, so the weights are the same bits."""
        b1, b2 = self.s.betas
        t = self.t + 1
        c1, c2 = 1 - b1**t, 1 - b2**t
        new = {}
        for n in self.names:
            g, p = grads[n], params[n]
            m = self.m[n] * b1
            m += (1 - b1) * g
            v = self.v[n] * b2
            v += (1 - b2) * (g * g)
            q = p - np.float32(lr * self.s.weight_decay) * p if n in self.decayed else p.copy()
            q -= np.float32(lr / c1) * m / (np.sqrt(v / np.float32(c2)) + np.float32(self.s.eps))
            if not np.isfinite(q).all():
                return False
            new[n] = m, v, q
        for n, (m, v, q) in new.items():
            self.m[n], self.v[n] = m, v
            params[n][...] = q
        self.t = t
        return True


def trained_names(cfg: Config, params: dict) -> list[str]:
    """Every parameter but the unembedding bias (GPT-2 has none: it stays zero)."""
    return [n for n in params if n != "b_U"]


def train(tokens: np.ndarray, s: TrainSettings, on_step=None, should_stop=None) -> Result:
    """Train from seeded initial weights on the token stream `tokens` ([n] int64).

    `on_step(Progress)` is called after every step; `should_stop()` is asked before each step.
    """
    if len(tokens) < s.context + 1:
        raise TracerError(f"the corpus has {len(tokens):,} tokens; training needs at least --context + 1 = "
                          f"{s.context + 1:,}")
    cfg = s.config()
    params = {n: np.array(a, dtype=np.float32) for n, a in init_weights(cfg, s.seed).items()}  # writeable copies
    names = trained_names(cfg, params)
    opt = AdamW(params, names, {n for n in names if params[n].ndim >= 2}, s)
    rng = np.random.default_rng([s.seed, 1])  # the windows' own stream, apart from the weights'
    result = Result(cfg, params)
    t_start = time.perf_counter()
    for step in range(s.steps):
        if should_stop is not None and should_stop():
            result.stopped = "interrupted"
            break
        t0 = time.perf_counter()
        batch = windows(tokens, s.batch, s.context, rng)  # [batch, context]
        loss, grads = loss_and_grads(cfg, layout(cfg, params), batch)
        norm = math.sqrt(sum(float(np.vdot(grads[n], grads[n])) for n in names))
        if not (math.isfinite(loss) and math.isfinite(norm)):
            result.stopped = "not finite"
            break
        if norm > s.clip:
            for n in names:
                grads[n] *= np.float32(s.clip / norm)
        lr = s.lr_at(step)
        if not opt.step(params, grads, lr):  # a weight would overflow: keep those of the last step
            result.stopped = "not finite"
            break
        result.losses.append(loss)
        if on_step is not None:
            on_step(Progress(step + 1, loss, lr, s.batch * s.context / max(time.perf_counter() - t0, 1e-9)))
    result.seconds = time.perf_counter() - t_start
    return result


def settings_dict(s: TrainSettings) -> dict:
    d = asdict(s)
    d["betas"] = list(s.betas)
    return d


# --------------------------------------------------------------------------- the corpus and the saved run


CORPUS_CHUNK = 2**20  # bytes read, checked and hashed at a time
CORPUS_BYTES_NEED = 16  # bytes of memory per byte of corpus: its text, its tokens as a list, the id array


def read_corpus(path) -> tuple[str, str]:
    """A corpus file's text and its sha256; a one-line TracerError for anything that is not usable text.

    Its size is weighed against the memory the process may still take before anything is read, and
    it is read a chunk at a time, each checked (NUL bytes, UTF-8) as it comes: a sparse file of
    40 GB of nothing is refused from its first megabyte, never read whole."""
    import codecs
    import hashlib
    import os

    from ..core.memory import memory_room
    from ..formats.reading import open_regular

    with open_regular(path, "file") as f:
        size = os.fstat(f.fileno()).st_size
        room = memory_room()
        if size * CORPUS_BYTES_NEED > room:
            raise TracerError(f"{path}: the corpus is {size / 1e9:.2f} GB; training on it needs about "
                              f"{size * CORPUS_BYTES_NEED / 1e9:.1f} GB and this process can take {room / 1e9:.1f} GB more")
        digest, decoder = hashlib.sha256(), codecs.getincrementaldecoder("utf-8")("strict")
        parts, seen, blank = [], 0, True
        while chunk := f.read(CORPUS_CHUNK):
            if b"\x00" in chunk:
                raise TracerError(f"{path}: a binary file (it holds NUL bytes); the corpus is UTF-8 text")
            try:
                parts.append(decoder.decode(chunk))
            except UnicodeDecodeError as e:
                raise TracerError(f"{path}: not UTF-8 text (byte {seen + e.start:,} of {size:,}); the corpus is "
                                  "UTF-8 text") from None
            digest.update(chunk)
            seen += len(chunk)
            blank = blank and not chunk.strip()
            if seen * CORPUS_BYTES_NEED > room:  # a file that grows while it is read (or says it is empty)
                raise TracerError(f"{path}: the corpus grew past what this process can take "
                                  f"({room / 1e9:.1f} GB) while it was read")
        try:
            parts.append(decoder.decode(b"", final=True))
        except UnicodeDecodeError:
            raise TracerError(f"{path}: not UTF-8 text (it ends inside a character); the corpus is UTF-8 text") from None
    if blank:
        raise TracerError(f"{path}: the corpus is empty")
    return "".join(parts), digest.hexdigest()


SAVED_FILES = ("config.json", "model.safetensors", "training.json")  # what `tracer train` writes into --out


def not_saved_by_train(folder) -> str | None:
    """None when `folder` holds only what `tracer train` writes (SAVED_FILES, as regular files, with a
    tracer-training training.json): a folder `--force` may replace. Else what is wrong, for the message."""
    import os
    from pathlib import Path

    from ..formats.reading import parse_json, read_small

    with os.scandir(folder) as it:
        entries = {e.name: e.is_file(follow_symlinks=False) for e in it}
    other = sorted(n for n, regular in entries.items() if n not in SAVED_FILES or not regular)
    if other:
        names = ", ".join(repr(n) for n in other[:3]) + (f" and {len(other) - 3:,} more" if len(other) > 3 else "")
        return f"holds what tracer did not write ({names})"
    try:
        record = parse_json(read_small(Path(folder) / "training.json"), "training.json")
    except TracerError:
        record = None
    if not (isinstance(record, dict) and record.get("format") == "tracer-training"):
        return "is not a model that tracer train saved (no training.json of tracer's)"
    return None


SKIP_COMMONEST = 10  # the corpus's commonest tokens (line breaks, punctuation, digits) are left out
ROLE_SEEDS = 4  # head scores are the mean over this many random orders


def head_roles(result: Result, tokens: np.ndarray, n: int = 12) -> dict:
    """Each head's previous-token and induction scores ([layer][head], `tracer.run.heads`), the mean
    over ROLE_SEEDS sequences of `n` common corpus tokens in a seeded random order, each shown twice.
    The very commonest tokens (line breaks, punctuation) are left out: a copy does not cross a line
    break in a corpus of one example per line, so they would measure that instead."""
    from ..core.decoder import forward
    from .heads import head_scores, repeated_sequence
    from ..core.record import Recorder
    from .trace import Trace

    n = max(1, min(n, result.config.n_ctx // 2))  # twice n tokens must fit the context
    values, counts = np.unique(tokens, return_counts=True)
    order = values[largest_first(counts)]  # [tokens] commonest first
    want = max(4 * n, 50)
    skip = SKIP_COMMONEST if len(order) >= SKIP_COMMONEST + n else 0
    pool = sorted(int(t) for t in order[skip : skip + want])
    found = []
    for seed in range(ROLE_SEEDS):
        seq = repeated_sequence(min(n, len(pool)), pool, seed)
        rec = Recorder(["blocks.*.attn.hook_pattern"], result.config)
        forward(result.config, result.params, seq, rec)
        found.append(head_scores(Trace(rec.store, np.asarray(seq), result.config), seq))
    return {"measured_on": f"{n} common corpus tokens in a random order, then the same {n} again; the mean over "
                           f"{ROLE_SEEDS} orders (seeds 0–{ROLE_SEEDS - 1})",
            **{kind: np.round(np.mean([f[kind] for f in found], axis=0, dtype=np.float64), 3).tolist() for kind in found[0]}}


def training_record(result: Result, s: TrainSettings, corpus_name: str, corpus_sha256: str, n_tokens: int,
                    version: str, heads: dict | None = None) -> dict:
    """How a model was trained, written beside it (training.json) and shown in a trace's header."""
    done = len(result.losses)
    tail = result.losses[-min(20, done):] if done else []
    return {
        "format": "tracer-training",
        "corpus": corpus_name,
        "corpus_sha256": corpus_sha256,
        "corpus_tokens": int(n_tokens),
        "tokenizer": "gpt2",
        "steps": done,
        "steps_planned": s.steps,
        "stopped": result.stopped,
        "final_loss": round(float(np.mean(tail)), 4) if tail else None,  # the mean of the last 20 steps
        "seed": s.seed,
        "settings": settings_dict(s),
        "tracer_version": version,
        "heads": heads,
        "losses": [round(float(x), 4) for x in result.losses],
    }


def record_json(record: dict) -> str:
    """training.json's text: one key per line, each value on its line (the loss curve too)."""
    import json

    return "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(record.items())) + "\n}\n"
