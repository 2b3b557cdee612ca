"""What a run will record and hold, estimated before its first pass (a 5,000-word prompt on
SmolLM2 grew past 11 GB for 76 s and ended "out of memory").

A recorded pass keeps every name it records (its kind's table gives each one's shape, `tracer.core.hooks`)
as the store holds it (the ways each sublayer kind declares, `Sublayer.hold`, read through
`tracer.core.store.held_bytes`: a long pass's attention weights as their causal half, the scores and
Q·K as recipes); the attention weights alone are heads × positions² / 2 numbers a layer. While a
layer runs it also holds its [head, query, key] arrays whole (PEAK_ARRAYS of them when they are recorded,
or the REBUILT_KEPT of them the store keeps rebuilt whole once a view reads them), and every position's
logits are turned into probabilities over the vocabulary, a chunk of rows at a time; the KV cache holds
what each layer's kind keeps per position (`Sublayer.cache_row`). `footprint` adds these up for the
prompt's pass and the passes after it; `fitting` finds the longest prompt that fits a number of
bytes; `check_room` refuses a run that does not fit in one line with the numbers, or says how many
tokens to keep when the user asked for the prompt to be cut (`--truncate`). Core module: numpy and
the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import hooks
from ..core.memory import available_bytes, gb
from ..core.record import _compile
from ..core.store import REBUILT_KEPT, held_bytes
from ..errors import TracerError

PEAK_ARRAYS = 3  # [head, query, key] arrays a layer holds whole while it runs and records them (Q·K, scores, weights)
LOGIT_ARRAYS = 1.0  # [pos, d_vocab] arrays held beside the recorded logits (the unembedding's product; predictions go by rows)
LENS_ARRAYS = 4  # [rows, d_vocab] arrays of one logit-lens chunk held at once (its logits, their exp, the rank's comparison, a soft-cap's)
SHARE = 0.9  # of the memory available that a run may plan to take
PATTERN = "attn.hook_pattern"  # the attention weights, the array a refusal counts


@dataclass(frozen=True)
class Footprint:
    """Bytes a run holds: `recorded` (every pass's recording, `attention` of it its attention weights,
    `logits` its logits) and `peak`, held at once on top while the longest pass runs."""

    recorded: int
    attention: int
    logits: int
    peak: int

    @property
    def total(self) -> int:
        return self.recorded + self.peak


def recorded_names(cfg) -> list[str]:
    """Every name a pass of `cfg` records (the decoder's own list; the table's when that cannot be had)."""
    from ..core.decoder import hook_names

    try:
        return hook_names(cfg)
    except Exception:  # noqa: BLE001  an estimate must not fail where the run itself may not
        return list(hooks.TOP) + [f"blocks.{l}.{leaf}" for l in range(cfg.n_layers) for leaf in hooks.LAYER]


def squares(cfg, names: list[str]) -> list[str]:
    """The [head, query, key] arrays among `names` (every kind's whose axes run over the keys)."""
    return [n for n in names if (hook := hooks.find(n, cfg)) is not None and "key" in hook.axes and "pos" in hook.axes]


def pass_bytes(cfg, names: list[str], n_new: int, n_seen: int) -> tuple[int, int, int]:
    """(all, attention weights, logits) bytes one recorded pass of `n_new` positions over `n_seen` keys
    holds, for the recorded `names`, as the store holds them: each name's shape from its kind's table
    (`hooks.shape`, the layer's own sizes), held by the ways its kind declares (`tracer.core.store.held_bytes`:
    causal halves, recipes)."""
    size = np.dtype(cfg.dtype).itemsize
    recorded = set(names)
    total = attention = logits = 0
    for name in names:
        shape = hooks.shape(name, cfg, n_new, n_seen)
        if shape is None:
            continue
        hook = hooks.find(name, cfg)
        n = held_bytes(cfg, name, shape, 8 if hook is not None and hook.whole else size, recorded)
        if name.endswith(PATTERN):
            attention += n
        elif name == "logits":
            logits += n
        total += n
    total += 3 * cfg.d_vocab * size + 5 * n_new * 8  # the sampler's stages, each position's prediction and loss
    return total, attention, logits


def footprint(cfg, n_prompt: int, max_new_tokens: int, names=None, cache: bool = True) -> Footprint:
    """What a generation of `max_new_tokens` after a prompt of `n_prompt` tokens records and holds, for
    the recorded `names` (globs, None: everything) — the prompt's pass and each pass after it (one new
    position each with the KV cache, the whole context again without it: `cache=False`)."""
    wanted = _compile(names)
    every = recorded_names(cfg)
    kept = every if wanted is True else [] if wanted is False else [n for n in every if wanted(n)]
    size = np.dtype(cfg.dtype).itemsize
    recorded, attention, logits = pass_bytes(cfg, kept, n_prompt, n_prompt)
    for k in range(1, max(max_new_tokens, 1)):  # one position each, over the keys seen so far (or all of them again)
        more = pass_bytes(cfg, kept, 1 if cache else n_prompt + k, n_prompt + k)
        recorded, attention, logits = recorded + more[0], attention + more[1], logits + more[2]
    capacity = n_prompt + max(max_new_tokens, 1)
    row = sum(cfg.attention_of(l).cache_row(cfg.layer(l), l) for l in range(cfg.n_layers))  # each kind's cache per position
    kv = row * capacity * size if cache else 0
    longest = n_prompt + (0 if cache else max(max_new_tokens, 1) - 1)  # the longest pass's positions
    # the largest [head, query, key] array any layer makes in the longest pass (recorded or not)
    square = max([int(np.prod(hooks.shape(n, cfg, longest, longest), dtype=np.int64)) * size for n in squares(cfg, every)],
                 default=0)
    shown = bool(squares(cfg, kept))  # recorded: held whole while packed, rebuilt when read
    arrays = max(PEAK_ARRAYS, min(REBUILT_KEPT, cfg.n_layers)) if shown else 1  # while a layer runs, or a view reads
    lens = LENS_ARRAYS * lens_rows(cfg, n_prompt) * cfg.d_vocab * size  # the prompt pass's logit lens, one chunk
    peak = int(max(arrays * square, LOGIT_ARRAYS * longest * cfg.d_vocab * size, lens)) + kv
    return Footprint(recorded, attention, logits, peak)


def lens_rows(cfg, n: int) -> int:
    """Rows of one chunk of a pass's logit lens over `n` positions (`tracer.run.lens.logit_lens`)."""
    from .lens import LENS_CHUNK, lens_width

    width = lens_width(cfg, n)
    return min(max(width, LENS_CHUNK // max(cfg.d_vocab, 1) // width * width), cfg.n_layers * width)


def fitting(cfg, room: int, max_new_tokens: int, names=None, most: int | None = None, cache: bool = True) -> int:
    """The longest prompt (in tokens, at most `most`) whose run fits `room` bytes; 0 when none does."""
    lo, hi = 0, int(most if most is not None else cfg.n_ctx)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if footprint(cfg, mid, max_new_tokens, names, cache).total <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


def cut(prompt, keep: int, side: str):
    """`prompt` (a `Prompt`) cut to its last (`side` "left") or first ("right") `keep` tokens, the note saying why."""
    from dataclasses import replace

    ids = prompt.ids[-keep:] if side == "left" else prompt.ids[:keep]
    before = (prompt.truncated or {}).get("prompt_tokens", len(prompt.ids))
    return replace(prompt, ids=tuple(ids), truncated={"side": side, "prompt_tokens": before, "kept": keep,
                                                      "dropped": before - keep, "memory": True})


def check_room(model, n_prompt: int, max_new_tokens: int, names=None, truncate: str | None = None,
               room: int | None = None, cache: bool = True) -> int:
    """How many of the prompt's `n_prompt` tokens to run: all of them when the run fits the memory available
    (`room`: SHARE of it by default); with `truncate` ("left"/"right"), as many as fit; else a TracerError
    with the numbers and the options that narrow it."""
    cfg = model.config
    room = int(SHARE * available_bytes()) if room is None else int(room)
    need = footprint(cfg, n_prompt, max_new_tokens, names, cache)
    if need.total <= room:
        return n_prompt
    fit = fitting(cfg, room, max_new_tokens, names, n_prompt, cache)
    if truncate is not None and fit >= 1:
        return fit
    layers = len({hooks.split(n)[0] for n in recorded_names(cfg) if n.endswith(PATTERN)})  # softmax attention's layers
    what = (f"{gb(need.attention)} of it attention weights, {layers} layers × {cfg.n_heads} heads × "
            f"{n_prompt:,}² / 2" if need.attention * 2 > need.recorded else f"{gb(need.logits)} of it logits")
    narrow = (f"about {fit:,} tokens fit: shorten it, or give --truncate left (keeps its last {fit:,} tokens) or "
              f"--truncate right" if fit >= 1 else "no prompt fits: free some memory, or use a smaller model")
    raise TracerError(f"prompt: {n_prompt:,} tokens on {model.name}: the run would record {gb(need.recorded)} ({what}) "
                      f"and need {gb(need.peak)} more while a layer runs; {gb(room)} is available; {narrow}")
