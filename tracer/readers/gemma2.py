"""Gemma 2 folders (`model_type` gemma2) → a `Checkpoint`: Gemma 3's block (`tracer.readers.gemma3`)
without the per-head Q/K norms, with soft-capping.

Where Gemma 2's block departs from Llama's (each a switch of `tracer.core.config.Config`, an entry of
the table of block switches):
  - the embedding is multiplied by √d_model before layer 0 (`embed_scale`);
  - its RMS norm multiplies by (1 + w) (`norm = "gemma_rms"`): the file stores the gain minus 1;
  - four norms per layer, before and after attention and the MLP (`norm_place = "both"`);
  - the GeGLU MLP, GELU (tanh approximation) as the gate (`mlp = "geglu"`);
  - scores ÷ √query_pre_attn_scalar instead of √d_head (`attn_scalar`);
  - scores soft-capped, cap · tanh(s / cap), after the scale and before the mask and softmax
    (`attn_softcap`, attn_logit_softcapping), and the final logits the same way (`final_softcap`,
    final_logit_softcapping): the table's `SOFTCAP` entry;
  - a sliding window on every other layer (`windowed`): the "sliding_attention" layers of
    `layer_types`, or, without it, layers 0, 2, 4, … (transformers' rule); one RoPE base everywhere.
Its tensors are Gemma 3's without q_norm / k_norm:

    layers.{l}.input_layernorm → ln1.w            post_attention_layernorm → ln1_post.w
    layers.{l}.pre_feedforward_layernorm → ln2.w  post_feedforward_layernorm → ln2_post.w

Core module: numpy and the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..core.config import Config
from ..errors import TracerError
from . import gemma3, llama
from .checkpoint import Checkpoint
from .folder import number, whole

FAMILIES = ("gemma2",)
NAMES = {k: v for k, v in gemma3.NAMES.items() if not k.startswith("attn.")}
CAPS = {"attn_logit_softcapping": "attn_softcap", "final_logit_softcapping": "final_softcap"}


def softcaps(raw: dict, where: Path) -> dict:
    """config.json's soft-caps as `Config` fields: a number > 0, or null for none; anything else a one-line error."""
    out = {}
    for key, field in CAPS.items():
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0
                                  or value == float("inf")):
            raise TracerError(f"{where}: {key!r} must be a number > 0 or null (the soft-cap cap · tanh(s / cap)), "
                              f"got {value!r}")
        out[field] = float(value) if value is not None else None
    return out


def config_of(raw: dict, where: Path) -> Config:
    act = raw.get("hidden_activation", raw.get("hidden_act", "gelu_pytorch_tanh"))
    if act not in gemma3.ACTIVATIONS:
        raise TracerError(f"{where}: hidden_activation {act!r} is not supported; the GeGLU MLP tracer computes uses "
                          f"gelu_pytorch_tanh")
    caps = softcaps(raw, where)
    if raw.get("use_bidirectional_attention"):
        raise TracerError(f"{where}: use_bidirectional_attention is not supported; tracer's attention is causal")
    n_layers = whole(raw, "num_hidden_layers", where)
    llama.check_layer_count(n_layers, where)
    types = raw.get("layer_types")
    if types is None:  # transformers' Gemma2Config: a sliding window on layers 0, 2, 4, …
        types = ["sliding_attention" if (l + 1) % 2 else "full_attention" for l in range(n_layers)]
    llama.check_layer_types(types, n_layers, where)
    plain = {k: v for k, v in raw.items() if k != "layer_types"}
    plain = {**plain, "hidden_act": "silu", "sliding_window": None}  # llama's checks of what Gemma 2 does differently
    window = raw.get("sliding_window")
    window = whole(raw, "sliding_window", where) if "sliding_attention" in types and window is not None else None
    local = tuple(l for l, t in enumerate(types) if t == "sliding_attention")
    return llama.config_of(plain, where, FAMILIES, norm="gemma_rms", mlp="geglu", norm_place="both",
                           embed_scale=True, attn_scalar=number(raw, "query_pre_attn_scalar", where, 256),
                           sliding_window=window, windowed=local if window else None,
                           tied_unembed=raw.get("tie_word_embeddings", True) is not False, **caps)


def hf_shapes(cfg: Config, raw: dict, where: Path) -> dict[str, tuple[int, ...]]:
    shapes = llama.hf_shapes(cfg, raw, where)
    for l in range(cfg.n_layers):
        p = f"{llama.PREFIX}layers.{l}."
        shapes.update({p + hf: (cfg.d_model,) for hf in NAMES.values()})
    return shapes


translate, file_names = llama.adding(NAMES)  # llama's ln2 (post_attention_layernorm) is ln1_post here


def read(folder: Path, raw: dict, name: str | None = None, progress=None) -> Checkpoint:
    return llama.read(folder, raw, name, progress, family=sys.modules[__name__])
