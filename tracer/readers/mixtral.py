"""Mixtral folders (`model_type` mixtral) → a `Checkpoint`: the mixture-of-experts reader
(`tracer.readers.moe`) with Mixtral's names (`block_sparse_moe.gate`, `experts.{e}.w1` the gate,
`w3` up, `w2` down) and its routing (softmax, top k, renormalized over the k). Core module: numpy
and the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..core.config import Config
from . import llama, moe
from .checkpoint import Checkpoint

FAMILIES = ("mixtral",)
config_of = moe.config_of
translate, file_names = moe.for_layout(moe.MIXTRAL_LAYOUT)


def hf_shapes(cfg: Config, raw: dict, where: Path) -> dict[str, tuple[int, ...]]:
    return moe.hf_shapes(cfg, raw, where, moe.MIXTRAL_LAYOUT)


def read(folder: Path, raw: dict, name: str | None = None, progress=None) -> Checkpoint:
    return llama.read(folder, raw, name, progress, family=sys.modules[__name__])
