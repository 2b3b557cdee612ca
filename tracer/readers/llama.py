"""Llama, Qwen2 and Mistral folders (`model_type` llama / qwen2 / mistral) → a `Checkpoint`, in TransformerLens names.

A Hugging Face folder holds `config.json`, `model.safetensors` (or shards listed in
`model.safetensors.index.json`) and `tokenizer.json`. The block differs from GPT-2's in four places
(`tracer.core.config`: positional "rope", norm "rms", mlp "swiglu", n_kv_heads), and its weights are
torch `Linear`s, stored [out, in], so each is transposed (a view, no copy) on the way in:

    model.embed_tokens → W_E [d_vocab, d_model]        (no W_pos: Q and K are rotated instead)
    layers.{l}.input_layernorm → ln1.w                  post_attention_layernorm → ln2.w
    self_attn.q_proj / k_proj / v_proj [heads·d_head, d_model]
        → the fused [W_Q | W_K | W_V] the decoder reads ([d_model, (head + 2·kv_head)·d_head], one copy),
          and W_Q [head, d_model, d_head], W_K / W_V [kv_head, d_model, d_head] as views of it;
          Qwen2's (and Llama's `attention_bias`) biases → b_Q / b_K / b_V, else zeros
    self_attn.o_proj [d_model, head·d_head] → W_O [head, d_head, d_model], b_O zeros (o_proj bias if any)
    mlp.gate_proj → W_gate [d_model, d_mlp]   mlp.up_proj → W_in   mlp.down_proj → W_out [d_mlp, d_model]
    model.norm → ln_final.w       lm_head → W_U [d_model, d_vocab] (absent when tied)   b_U zeros

config.json is read as transformers 4 writes it (`rope_theta`, `rope_scaling`) and as transformers 5
does (`rope_parameters`); Llama 3's `llama3` scaling is computed, other scalings are refused. The
GGUF reader (`tracer.readers.gguf`) renames llama.cpp's tensors and metadata to these and reuses
`config_of`, `hf_shapes` and `translate`. Core module: numpy and the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..tokenizers.chat import load_chat_template
from ..core.config import Config
from ..errors import TracerError, is_whole
from ..core.qkv import fuse_qkv, joined, split_qkv_weights
from ..tokenizers.tokens import get_tokenizer
from .checkpoint import Checkpoint
from .source import mapped_source
from .folder import (check_present, check_room, check_sizes, config_error, expansion_bytes, flag, number, read_checked,
                     read_tensors, read_training, stored_as, weight_files, whole)

FAMILIES = ("llama", "qwen2", "mistral")
ACTIVATIONS = ("silu", "swish")  # SwiGLU's gate: x·sigmoid(x)
PREFIX = "model."


# --------------------------------------------------------------------------- config.json


def rope_settings(raw: dict, where: Path) -> tuple[float, dict | None]:
    """(rope_theta, the llama3 or linear scaling or None) from transformers 4's or 5's keys."""
    params = raw.get("rope_parameters")
    if params is not None and not isinstance(params, dict):
        raise TracerError(f"{where}: 'rope_parameters' must be an object, got {params!r}")
    scaling = params if params is not None else raw.get("rope_scaling")
    theta = number(params if params is not None and "rope_theta" in params else raw, "rope_theta", where, 10000.0)
    if scaling is None:
        return theta, None
    if not isinstance(scaling, dict):
        raise TracerError(f"{where}: 'rope_scaling' must be an object or null, got {scaling!r}")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return theta, None
    if kind == "linear":  # positions stretched by one factor (Gemma 3's global layers; transformers' 'linear')
        return theta, {"rope_type": "linear", "factor": number(scaling, "factor", where)}
    if kind == "yarn":  # gpt-oss, OLMo 3: transformers' `_compute_yarn_parameters`, its `truncate` as written (default true)
        out = {"rope_type": "yarn", "factor": number(scaling, "factor", where),
               "original_max_position_embeddings": number(scaling, "original_max_position_embeddings", where)}
        for key in ("beta_fast", "beta_slow", "attention_factor"):
            if scaling.get(key) is not None:
                out[key] = number(scaling, key, where)
        for key in ("mscale", "mscale_all_dim"):
            if scaling.get(key):
                raise TracerError(f"{where}: YaRN's {key} {scaling[key]!r} is not supported (DeepSeek's attention factor)")
        out["truncate"] = flag(scaling, "truncate", where, True)
        return theta, out
    if kind != "llama3":
        raise TracerError(f"{where}: RoPE scaling {kind!r} is not supported; tracer computes plain RoPE, "
                          f"Llama 3's 'llama3' scaling, 'linear' and 'yarn'")
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    return theta, {"rope_type": "llama3", **{k: number(scaling, k, where) for k in keys}}


LAYER_TYPES = ("full_attention", "sliding_attention")


def check_layer_types(layer_types, n_layers: int, where: Path) -> None:
    """config.json's `layer_types`: one known kind of attention per layer, or a one-line error."""
    if not isinstance(layer_types, list):
        raise TracerError(f"{where}: 'layer_types' must be a list, got {layer_types!r}")
    if len(layer_types) != n_layers:
        raise TracerError(f"{where}: 'layer_types' names {len(layer_types)} layers but num_hidden_layers is {n_layers}")
    unknown = [t for t in layer_types if t not in LAYER_TYPES]
    if unknown:
        raise TracerError(f"{where}: layer type {unknown[0]!r} is not known; tracer computes {' and '.join(LAYER_TYPES)}")


def check_layer_count(n_layers: int, where: Path, key: str = "num_hidden_layers") -> None:
    """A layer count within `config.LIMITS`, checked before anything is built per layer (a list of
    layer types for 10¹² layers would never finish): the one-line error `Config` would give."""
    from ..core.config import LIMITS

    if n_layers > LIMITS["n_layers"]:
        raise TracerError(f"{where}: {key} {n_layers:,} is more than tracer reads (at most {LIMITS['n_layers']:,}; "
                          f"no published model comes near it)")


def sliding_window(raw: dict, family: str, where: Path, n_layers: int) -> int | None:
    """The window every layer uses, or None; a window on some layers only is refused."""
    window = raw.get("sliding_window")
    if family == "llama" or window is None:
        return None
    if family in ("qwen2", "qwen3") and not raw.get("use_sliding_window", False):
        return None  # Qwen2 and Qwen3 write a sliding_window they do not use
    kinds = set(raw.get("layer_types") or ["sliding_attention"] * n_layers)
    if family in ("qwen2", "qwen3") or kinds != {"sliding_attention"}:
        raise TracerError(f"{where}: a sliding window on some layers only (use_sliding_window / layer_types) is not "
                          f"supported; tracer applies one window to every layer or none")
    if not is_whole(window, 1):
        raise TracerError(f"{where}: 'sliding_window' must be a whole number ≥ 1 or null, got {window!r}")
    return window


def config_of(raw: dict, where: Path, families=FAMILIES, **switches) -> Config:
    """A Llama / Qwen2 / Mistral config.json's object (read from `where`) as a tracer `Config`
    (float32, the Llama block). A family built on this block (`tracer.readers.qwen3`, …) gives its
    own `families` and the switches it changes (`qk_norm`, …)."""
    family = raw.get("model_type")
    if family not in families:
        raise TracerError(f"{where}: model_type {family!r}; tracer loads gpt2, {', '.join(families)}")
    act = raw.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise TracerError(f"{where}: hidden_act {act!r} is not supported; the SwiGLU MLP tracer computes uses silu")
    if flag(raw, "mlp_bias", where, False):
        raise TracerError(f"{where}: mlp_bias is not supported (tracer's SwiGLU MLP has no gate bias)")
    d_model = whole(raw, "hidden_size", where)
    n_heads = whole(raw, "num_attention_heads", where)
    n_kv = whole(raw, "num_key_value_heads", where, n_heads)
    head_dim = raw.get("head_dim")
    if head_dim is None and d_model % n_heads:
        raise TracerError(f"{where}: hidden_size {d_model} is not divisible by num_attention_heads {n_heads} and no head_dim is given")
    n_layers = whole(raw, "num_hidden_layers", where)
    if raw.get("layer_types") is not None:
        check_layer_types(raw["layer_types"], n_layers, where)
    theta, scaling = rope_settings(raw, where)
    try:
        kwargs = dict(
            d_vocab=whole(raw, "vocab_size", where), n_ctx=whole(raw, "max_position_embeddings", where),
            d_model=d_model, n_heads=n_heads, d_head=whole(raw, "head_dim", where) if head_dim is not None else None,
            d_mlp=whole(raw, "intermediate_size", where), n_layers=n_layers, dtype="float32",
            positional="rope", layer_norm=True, norm="rms", mlp="swiglu", residual=True, scale_scores=True,
            tied_unembed=flag(raw, "tie_word_embeddings", where, False),
            ln_eps=number(raw, "rms_norm_eps", where, 1e-6),
            n_kv_heads=n_kv if n_kv != n_heads else None, rope_theta=theta, rope_scaling=scaling,
            sliding_window=sliding_window(raw, family, where, n_layers),
        )
        cfg = Config(**{**kwargs, **switches})
    except TracerError as e:
        raise config_error(e, where) from None
    return cfg


def hf_shapes(cfg: Config, raw: dict, where: Path, mlp=None) -> dict[str, tuple[int, ...]]:
    """Every tensor the file must hold for `cfg`, by its name in transformers' layout: Q/K/V biases
    for Qwen2 and for a Llama with `attention_bias` (which also gives o_proj one). `mlp(cfg, p)`: a
    family's own MLP tensors of layer l (`p`: `model.layers.{l}.`), instead of the dense SwiGLU MLP's."""
    o_bias = flag(raw, "attention_bias", where, False)
    qkv_bias = raw.get("model_type") == "qwen2" or o_bias
    V, d, H, KV, dh, dm = cfg.d_vocab, cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.d_head, cfg.d_mlp
    shapes: dict[str, tuple[int, ...]] = {PREFIX + "embed_tokens.weight": (V, d)}
    for l in range(cfg.n_layers):
        p = f"{PREFIX}layers.{l}."
        shapes[p + "input_layernorm.weight"] = (d,)
        for m, heads in (("q", H), ("k", KV), ("v", KV)):
            shapes[p + f"self_attn.{m}_proj.weight"] = (heads * dh, d)
            if qkv_bias:
                shapes[p + f"self_attn.{m}_proj.bias"] = (heads * dh,)
        shapes[p + "self_attn.o_proj.weight"] = (d, H * dh)
        if o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (d,)
        shapes[p + "post_attention_layernorm.weight"] = (d,)
        shapes.update((mlp or dense_mlp_shapes)(cfg, p, l))
    shapes[PREFIX + "norm.weight"] = (d,)
    if not cfg.tied_unembed:
        shapes["lm_head.weight"] = (V, d)
    return shapes


def dense_mlp_shapes(cfg: Config, p: str, l: int = 0, width: int | None = None) -> dict[str, tuple[int, ...]]:
    """The dense SwiGLU MLP's tensors of layer l (`p`: `model.layers.{l}.`), as transformers stores them
    (`width`: its hidden width, d_mlp unless given)."""
    d, dm = cfg.d_model, width or cfg.d_mlp
    return {p + "mlp.gate_proj.weight": (dm, d), p + "mlp.up_proj.weight": (dm, d), p + "mlp.down_proj.weight": (d, dm)}


# --------------------------------------------------------------------------- translation


def translate(cfg: Config, t: dict[str, np.ndarray], mlp=None) -> tuple[dict, list]:
    """transformers' names → TransformerLens names (views where possible), and each layer's fused
    [W_Q | W_K | W_V] (W_Q, W_K and W_V are views of it). `mlp(cfg, t, p, b, params)`: a family's own
    MLP tensors of one layer (routed experts), instead of the dense SwiGLU MLP's."""
    d, H, KV, dh = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.d_head
    zeros = lambda n: np.zeros(n, dtype=np.float32)  # noqa: E731
    params = {"W_E": t[PREFIX + "embed_tokens.weight"]}
    fused = []
    for l in range(cfg.n_layers):
        p, b = f"{PREFIX}layers.{l}.", f"blocks.{l}."
        a = p + "self_attn."
        if p + "input_layernorm.weight" in t:  # (OLMo 2 has no norm before attention)
            params[b + "ln1.w"] = t[p + "input_layernorm.weight"]
        parts = [t[a + f"{m}_proj.weight"].T.reshape(d, -1, dh) for m in "qkv"]  # [d_model, heads, d_head] each
        W = joined([x.reshape(d, -1) for x in parts])  # a lazy read's layer: already fused in place
        W = fuse_qkv(*parts) if W is None else W  # [d_model, (head + 2·kv_head)·d_head]
        fused.append(W)
        for m, W_m, heads in zip("QKV", split_qkv_weights(W, H, KV), (H, KV, KV)):
            params[b + f"attn.W_{m}"] = W_m  # [heads, d_model, d_head], a view of W
            bias = t.get(a + f"{m.lower()}_proj.bias")
            params[b + f"attn.b_{m}"] = (bias if bias is not None else zeros(heads * dh)).reshape(heads, dh)
        params[b + "attn.W_O"] = t[a + "o_proj.weight"].T.reshape(H, dh, d)  # [head, d_head, d_model]
        params[b + "attn.b_O"] = t.get(a + "o_proj.bias", zeros(d))
        params[b + "ln2.w"] = t[p + "post_attention_layernorm.weight"]
        (mlp or dense_mlp)(cfg, t, p, b, params)
    params["ln_final.w"] = t[PREFIX + "norm.weight"]
    if not cfg.tied_unembed:
        params["W_U"] = t["lm_head.weight"].T  # [d_model, d_vocab]
    params["b_U"] = zeros(cfg.d_vocab)
    return params, fused


def dense_mlp(cfg: Config, t: dict, p: str, b: str, params: dict) -> None:
    """The dense SwiGLU MLP of one layer: gate_proj, up_proj, down_proj (transposed views), zero biases."""
    params[b + "mlp.W_gate"] = t[p + "mlp.gate_proj.weight"].T  # [d_model, d_mlp]
    params[b + "mlp.W_in"] = t[p + "mlp.up_proj.weight"].T  # [d_model, d_mlp]
    params[b + "mlp.b_in"] = np.zeros(params[b + "mlp.W_in"].shape[1], dtype=np.float32)
    params[b + "mlp.W_out"] = t[p + "mlp.down_proj.weight"].T  # [d_mlp, d_model]
    params[b + "mlp.b_out"] = np.zeros(cfg.d_model, dtype=np.float32)


def check_tensors(cfg: Config, shapes: dict, tensors: dict, origin: dict, folder: Path) -> None:
    """Every tensor present with config.json's shape, and nothing the block would ignore."""
    check_head_dim(cfg, shapes, tensors, origin)
    check_present(shapes, tensors, origin, folder)
    extra = [k for k in tensors if k not in shapes and not k.endswith("rotary_emb.inv_freq")]
    if extra:
        raise TracerError(f"{origin[extra[0]]}: tensor {extra[0]!r} is not part of the block config.json describes "
                          f"(num_hidden_layers {cfg.n_layers}, biases as the family has them)")


def check_head_dim(cfg: Config, shapes: dict, tensors: dict, origin: dict) -> None:
    """A Q projection whose rows are not num_attention_heads × head_dim: the one-line error says so."""
    name = PREFIX + "layers.0.self_attn.q_proj.weight"
    if name not in tensors or name not in shapes or tuple(tensors[name].shape)[1:] != tuple(shapes[name])[1:]:
        return
    rows, want = int(tensors[name].shape[0]), cfg.n_heads * cfg.d_head
    if rows != want:
        fits = f" (head_dim {rows // cfg.n_heads} would)" if rows % cfg.n_heads == 0 else ""
        raise TracerError(f"{origin[name]}: tensor {name!r} has {rows} rows but config.json's num_attention_heads "
                          f"{cfg.n_heads} × head_dim {cfg.d_head} = {want}: head_dim does not match the weights{fits}")


# TransformerLens name (after `blocks.{l}.`) → transformers' (after `model.layers.{l}.`): the renaming, once
LAYER_NAMES = {"ln1.w": "input_layernorm.weight", "attn.W_Q": "self_attn.q_proj.weight",
               "attn.W_K": "self_attn.k_proj.weight", "attn.W_V": "self_attn.v_proj.weight",
               "attn.b_Q": "self_attn.q_proj.bias", "attn.b_K": "self_attn.k_proj.bias",
               "attn.b_V": "self_attn.v_proj.bias", "attn.W_O": "self_attn.o_proj.weight",
               "attn.b_O": "self_attn.o_proj.bias", "ln2.w": "post_attention_layernorm.weight",
               "mlp.W_gate": "mlp.gate_proj.weight", "mlp.W_in": "mlp.up_proj.weight", "mlp.W_out": "mlp.down_proj.weight"}
TOP_NAMES = {"W_E": PREFIX + "embed_tokens.weight", "ln_final.w": PREFIX + "norm.weight", "W_U": "lm_head.weight"}


def layer_names(cfg: Config, names: dict) -> dict[str, str]:
    """Per-layer TransformerLens name → transformers name, for a family's own tensors (`names`: after
    `blocks.{l}.` → after `model.layers.{l}.`): what the Qwen3, OLMo 2 and Gemma readers add."""
    return {f"blocks.{l}.{tl}": f"{PREFIX}layers.{l}.{hf}" for l in range(cfg.n_layers) for tl, hf in names.items()}


def adding(names: dict):
    """`translate` and `file_names` for a family that is the Llama block plus its own per-layer tensors
    (`names`, as `layer_names` takes them): what Qwen3 and the Gemmas share."""
    def translate_(cfg: Config, t: dict[str, np.ndarray]) -> tuple[dict, list]:
        params, fused = translate(cfg, t)
        params.update({tl: t[hf] for tl, hf in layer_names(cfg, names).items()})
        return params, fused

    def file_names_(cfg: Config) -> dict[str, str]:
        return {**file_names(cfg), **layer_names(cfg, names)}

    return translate_, file_names_


def file_names(cfg: Config) -> dict[str, str]:
    """TransformerLens name → the transformers tensor it comes from (biases only where the file has them)."""
    out = dict(TOP_NAMES)
    for l in range(cfg.n_layers):
        out.update({f"blocks.{l}.{k}": f"{PREFIX}layers.{l}.{v}" for k, v in LAYER_NAMES.items()})
    return out


def split_marked(fam, cfg: Config, storage: dict) -> dict:
    """`storage` with the parameters the family's reader cuts out of fused tensors marked (`Stored.split`)."""
    from dataclasses import replace

    split = fam.split_params(cfg) if hasattr(fam, "split_params") else set()
    return {tl: replace(s, split=True) if tl in split else s for tl, s in storage.items()}


def tokenizer_of(folder: Path):
    """The folder's own tokenizer.json (and tokenizer_config.json), as `tracer.tokenizers.tokens` reads it."""
    return get_tokenizer({"kind": "tokenizer.json", "path": str(folder)})


def read(folder: Path, raw: dict, name: str | None = None, progress=None, family=None, lazy: bool = False) -> Checkpoint:
    """A Llama / Qwen2 / Mistral folder whose config.json (already read: `raw`) names the family:
    its parameters (views where they can be), each layer's fused Q|K|V matrix, its tokenizer.
    `family`: the module of a family built on this block (its `config_of`, `hf_shapes`, `translate`,
    `file_names`; this module's by default). `progress`: as in `tracer.readers.folder.read_checked`.
    `lazy`: nothing is expanded; the Checkpoint's `lazy` is a `tracer.readers.source.Source`."""
    fam = family or sys.modules[__name__]
    where = folder / "config.json"
    cfg = fam.config_of(raw, where)
    files = weight_files(folder)
    shapes = fam.hf_shapes(cfg, raw, where)  # at most LIMITS' 1,024 layers
    check_sizes(cfg, files, where, sum(int(np.prod(s)) for s in shapes.values()))
    tensors, origin, dtypes = read_tensors(files, raw_bf16=lazy)
    getattr(fam, "check_tensors", check_tensors)(cfg, shapes, tensors, origin, folder)
    label = f"reading {name or folder.name} ({', '.join(f.name for f in files)})"
    source, params, fused = None, {}, None
    if lazy:
        source = mapped_source(cfg, tensors, origin, dtypes, shapes, fam.translate, PREFIX + "layers.{l}.",
                               fam.file_names(cfg), True, label, progress, folder)
    else:
        fused = cfg.n_layers * cfg.d_model * cfg.qkv_width  # each layer's [W_Q | W_K | W_V], one copy
        check_room(expansion_bytes(shapes, dtypes, fused), where, f"{', '.join(sorted(set(dtypes.values())))} on disk")
        params, fused = fam.translate(cfg, read_checked(tensors, origin, shapes, label, progress))
    return Checkpoint(cfg, params, tokenizer_of(folder), name or str(folder), str(folder), f"{raw['model_type']} folder",
                      raw["model_type"], split_marked(fam, cfg, stored_as(fam.file_names(cfg), dtypes)), fused_qkv=fused,
                      training=read_training(folder), chat_template=load_chat_template(folder), lazy=source)
