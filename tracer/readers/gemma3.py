"""Gemma 3 text folders (`model_type` gemma3_text) → a `Checkpoint`: the Llama block
(`tracer.readers.llama`) with Gemma's switches.

Where Gemma 3's block departs from Llama's (each a switch of `tracer.core.config.Config`, an entry of
the table of block switches):
  - the embedding is multiplied by √d_model before layer 0 (`embed_scale`);
  - its RMS norm multiplies by (1 + w) (`norm = "gemma_rms"`): the file stores the gain minus 1;
  - four norms per layer, before and after attention and the MLP (`norm_place = "both"`);
  - each head's Q and K RMS-normalized before the rotation (`qk_norm = "per_head"`, with the (1 + w) gain);
  - the GeGLU MLP, GELU (tanh approximation) as the gate (`mlp = "geglu"`);
  - scores ÷ √query_pre_attn_scalar instead of √d_head (`attn_scalar`);
  - `layer_types`: a sliding window on the "sliding_attention" layers (`windowed`), where
    RoPE turns by a local base (`rope_local_theta`, rope_local_base_freq) and by rope_theta elsewhere.
Its tensors, renamed:

    layers.{l}.input_layernorm → ln1.w            post_attention_layernorm → ln1_post.w
    layers.{l}.pre_feedforward_layernorm → ln2.w  post_feedforward_layernorm → ln2_post.w
    layers.{l}.self_attn.q_norm / k_norm [head_dim] → attn.q_norm.w / attn.k_norm.w

Gemma 2's soft-capping (`attn_logit_softcapping`, `final_logit_softcapping`) is refused, as are
scalings of the global RoPE; config.json is read as transformers 5 writes it (`rope_parameters`
per layer type) and as transformers 4 does (`rope_theta`, `rope_local_base_freq`). Core module:
numpy and the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..core.config import Config
from ..errors import TracerError
from . import llama
from .checkpoint import Checkpoint
from .folder import number, whole

FAMILIES = ("gemma3_text",)
ACTIVATIONS = ("gelu_pytorch_tanh", "gelu_new")
NAMES = {"ln1_post.w": "post_attention_layernorm.weight", "ln2.w": "pre_feedforward_layernorm.weight",
         "ln2_post.w": "post_feedforward_layernorm.weight", "attn.q_norm.w": "self_attn.q_norm.weight",
         "attn.k_norm.w": "self_attn.k_norm.weight"}


def _rope(raw: dict, where: Path) -> tuple[dict, float]:
    """config.json with the global layers' RoPE settings where llama's reader looks, and the local base."""
    params = raw.get("rope_parameters")
    out = {k: v for k, v in raw.items() if k not in ("rope_parameters", "rope_scaling")}
    if isinstance(params, dict) and isinstance(params.get("full_attention"), dict):  # transformers 5
        out["rope_parameters"] = params["full_attention"]
        local = params.get("sliding_attention") or {"rope_theta": 10000.0}
        if not isinstance(local, dict) or local.get("rope_type", "default") != "default":
            raise TracerError(f"{where}: RoPE scaling of the sliding layers {local!r} is not supported")
        return out, number(local, "rope_theta", where, 10000.0)
    if params is not None:
        out["rope_parameters"] = params
    if raw.get("rope_scaling") is not None:
        out["rope_scaling"] = raw["rope_scaling"]
    return out, number(raw, "rope_local_base_freq", where, 10000.0)


def config_of(raw: dict, where: Path) -> Config:
    act = raw.get("hidden_activation", raw.get("hidden_act", "gelu_pytorch_tanh"))
    if act not in ACTIVATIONS:
        raise TracerError(f"{where}: hidden_activation {act!r} is not supported; the GeGLU MLP tracer computes uses "
                          f"gelu_pytorch_tanh")
    for cap in ("attn_logit_softcapping", "final_logit_softcapping"):
        value = raw.get(cap)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise TracerError(f"{where}: {cap!r} must be a number > 0 or null, got {value!r}")
            raise TracerError(f"{where}: {cap} {value:g} is not supported (Gemma 2's soft-capping); tracer reads "
                              f"Gemma 3, which has none")
    if raw.get("use_bidirectional_attention"):
        raise TracerError(f"{where}: use_bidirectional_attention is not supported; tracer's attention is causal")
    n_layers = whole(raw, "num_hidden_layers", where)
    types = raw.get("layer_types")
    if types is None:
        raise TracerError(f"{where}: 'layer_types' is missing (every Gemma 3 config.json lists each layer's attention)")
    llama.check_layer_types(types, n_layers, where)
    plain, local_theta = _rope(raw, where)
    plain = {**plain, "hidden_act": "silu", "sliding_window": None}  # llama's checks of what Gemma 3 does differently
    window = whole(raw, "sliding_window", where) if "sliding_attention" in types else None
    local = tuple(l for l, t in enumerate(types) if t == "sliding_attention")
    return llama.config_of(plain, where, FAMILIES, norm="gemma_rms", mlp="geglu", norm_place="both", qk_norm="per_head",
                           embed_scale=True, attn_scalar=number(raw, "query_pre_attn_scalar", where, 256),
                           sliding_window=window, windowed=local if window else None,
                           rope_local_theta=local_theta if window else None,
                           tied_unembed=raw.get("tie_word_embeddings", True) is not False)


def hf_shapes(cfg: Config, raw: dict, where: Path) -> dict[str, tuple[int, ...]]:
    shapes = llama.hf_shapes(cfg, raw, where)
    width = {"attn.q_norm.w": cfg.d_head, "attn.k_norm.w": cfg.d_head}
    for l in range(cfg.n_layers):
        p = f"{llama.PREFIX}layers.{l}."
        shapes.update({p + hf: (width.get(tl, cfg.d_model),) for tl, hf in NAMES.items()})
    return shapes


translate, file_names = llama.adding(NAMES)  # llama's ln2 (post_attention_layernorm) is ln1_post here


def read(folder: Path, raw: dict, name: str | None = None, progress=None) -> Checkpoint:
    return llama.read(folder, raw, name, progress, family=sys.modules[__name__])
