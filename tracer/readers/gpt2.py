"""GPT-2 folders (`model_type` "gpt2") → a `Checkpoint`, translated to TransformerLens names once; and
the writer of such a folder (`write_folder`, for `tracer train`).

A GPT-2 folder holds `config.json` and `model.safetensors` (or shards listed in
`model.safetensors.index.json`). Two key layouts exist in the wild and both load:
- transformers' `save_pretrained`: `transformer.wte.weight`, `transformer.h.0.attn.c_attn.weight`, …
  (`lm_head.weight` only when the unembedding is not tied);
- the Hub's openai-community/gpt2 file: `wte.weight`, `h.0.attn.c_attn.weight`, … plus the
  `h.{l}.attn.bias` / `h.{l}.attn.masked_bias` causal-mask buffers, which are not weights.

GPT-2's Conv1D weights are stored [in, out], so `x @ W` needs no transpose. The translation
(TransformerLens's `convert_gpt2_weights`, without the batch of copies):
    wte → W_E [d_vocab, d_model]           wpe → W_pos [n_ctx, d_model]
    ln_1 → ln1.w/b   ln_2 → ln2.w/b       ln_f → ln_final.w/b
    c_attn.weight [d_model, 3·d_model] = [ Q | K | V ], each block heads side by side
        → W_Q/W_K/W_V [head, d_model, d_head];  c_attn.bias → b_Q/b_K/b_V [head, d_head]
    attn.c_proj → W_O [head, d_head, d_model], b_O
    mlp.c_fc → W_in [d_model, d_mlp], b_in   mlp.c_proj → W_out [d_mlp, d_model], b_out
    W_U = W_E.T (tied), b_U = 0
Every translated array is a view of the memory-mapped file when it is float32 (no copy of a
1.4 GB gpt2-medium), and `c_attn` itself is handed on as the fused Q|K|V matrix the decoder reads
(`tracer.core.fast`). Core module: numpy and the standard library.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from ..core import qkv
from ..core.config import Config
from ..errors import TracerError
from ..tokenizers.tokens import get_tokenizer
from .checkpoint import Checkpoint
from .source import mapped_source
from .folder import (check_present, check_room, check_sizes, config_error, expansion_bytes, flag, number, read_checked,
                     read_tensors, read_training, stored_as, weight_files, whole)

GELU_TANH = ("gelu_new", "gelu_pytorch_tanh")  # GPT-2's tanh-approximated GELU, as the decoder computes it
MASK_BUFFERS = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")  # causal-mask buffers, not weights
LAYER_KEY = re.compile(r"^h\.(\d+)\.")


# --------------------------------------------------------------------------- config.json


def config_of(raw: dict, where: Path) -> Config:
    """A GPT-2 config.json's object (read from `where`) as a tracer `Config` (float32, the GPT-2 block)."""
    act = raw.get("activation_function", "gelu_new")
    if act not in GELU_TANH:
        raise TracerError(f"{where}: activation_function {act!r} is not supported; tracer computes GPT-2's gelu_new (tanh GELU)")
    if flag(raw, "scale_attn_by_inverse_layer_idx", where, False):
        raise TracerError(f"{where}: scale_attn_by_inverse_layer_idx is not supported (GPT-2 divides scores by sqrt(d_head) only)")
    n_embd = whole(raw, "n_embd", where)
    n_head = whole(raw, "n_head", where)
    if n_embd % n_head:
        raise TracerError(f"{where}: n_embd {n_embd} is not divisible by n_head {n_head}")
    n_inner = raw.get("n_inner")
    try:
        return Config(
            d_vocab=whole(raw, "vocab_size", where),
            n_ctx=whole(raw, "n_positions", where, raw.get("n_ctx")),
            d_model=n_embd,
            n_heads=n_head,
            n_layers=whole(raw, "n_layer", where),
            d_mlp=whole(raw, "n_inner", where) if n_inner is not None else 4 * n_embd,
            dtype="float32",
            ln_eps=number(raw, "layer_norm_epsilon", where, 1e-5),
            scale_scores=flag(raw, "scale_attn_weights", where, True),
            tied_unembed=flag(raw, "tie_word_embeddings", where, True),
        )
    except TracerError as e:
        raise config_error(e, where) from None


def hf_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """Every tensor a GPT-2 file must hold for `cfg`, by its name without `transformer.`."""
    V, P, E, M = cfg.d_vocab, cfg.n_ctx, cfg.d_model, cfg.d_mlp
    shapes: dict[str, tuple[int, ...]] = {"wte.weight": (V, E), "wpe.weight": (P, E)}
    for l in range(cfg.n_layers):
        h = f"h.{l}."
        shapes.update({
            h + "ln_1.weight": (E,), h + "ln_1.bias": (E,),
            h + "attn.c_attn.weight": (E, 3 * E), h + "attn.c_attn.bias": (3 * E,),
            h + "attn.c_proj.weight": (E, E), h + "attn.c_proj.bias": (E,),
            h + "ln_2.weight": (E,), h + "ln_2.bias": (E,),
            h + "mlp.c_fc.weight": (E, M), h + "mlp.c_fc.bias": (M,),
            h + "mlp.c_proj.weight": (M, E), h + "mlp.c_proj.bias": (E,),
        })
    shapes["ln_f.weight"] = (E,)
    shapes["ln_f.bias"] = (E,)
    if not cfg.tied_unembed:
        shapes["lm_head.weight"] = (V, E)
    return shapes


def strip_prefix(tensors: dict, *per_name: dict):
    """Names without transformers' `transformer.` prefix (the Hub's layout has none), in every map given."""
    if not any(k.startswith("transformer.") for k in tensors):
        return (tensors, *per_name)
    return tuple({k.removeprefix("transformer."): v for k, v in d.items()} for d in (tensors, *per_name))


def check_names(cfg: Config, tensors: dict, origin: dict, folder: Path) -> None:
    """Every tensor present with config.json's shape; no layer beyond n_layer."""
    check_present(hf_shapes(cfg), tensors, origin, folder, ignore=MASK_BUFFERS.match)
    for name in tensors:
        m = LAYER_KEY.match(name)
        if m and int(m.group(1)) >= cfg.n_layers:
            raise TracerError(
                f"{origin[name]}: tensor {name!r} is in layer {m.group(1)} but config.json says n_layer {cfg.n_layers}"
            )


# --------------------------------------------------------------------------- translation


def split_qkv(c_attn_w: np.ndarray, c_attn_b: np.ndarray, n_heads: int):
    """c_attn [d_model, 3·d_model] = [Q | K | V] → W_Q, W_K, W_V [head, d_model, d_head] (views)."""
    return list(qkv.split_qkv_weights(c_attn_w, n_heads)), list(qkv.split_qkv(c_attn_b, n_heads))  # [head, d_model, d_head], [head, d_head] each


# TransformerLens name (after `blocks.{l}.`) → GPT-2's (after `h.{l}.`): the layer's renaming, once
LAYER_NAMES = {"ln1.w": "ln_1.weight", "ln1.b": "ln_1.bias", "attn.W_Q": "attn.c_attn.weight",
               "attn.W_K": "attn.c_attn.weight", "attn.W_V": "attn.c_attn.weight", "attn.b_Q": "attn.c_attn.bias",
               "attn.b_K": "attn.c_attn.bias", "attn.b_V": "attn.c_attn.bias", "attn.W_O": "attn.c_proj.weight",
               "attn.b_O": "attn.c_proj.bias", "ln2.w": "ln_2.weight", "ln2.b": "ln_2.bias", "mlp.W_in": "mlp.c_fc.weight",
               "mlp.b_in": "mlp.c_fc.bias", "mlp.W_out": "mlp.c_proj.weight", "mlp.b_out": "mlp.c_proj.bias"}
TOP_NAMES = {"W_E": "wte.weight", "W_pos": "wpe.weight", "ln_final.w": "ln_f.weight", "ln_final.b": "ln_f.bias",
             "W_U": "lm_head.weight"}


def file_names(cfg: Config) -> dict[str, str]:
    """TransformerLens name → the GPT-2 tensor it comes from."""
    out = {k: v for k, v in TOP_NAMES.items() if k != "W_U" or not cfg.tied_unembed}
    for l in range(cfg.n_layers):
        out.update({f"blocks.{l}.{k}": f"h.{l}.{v}" for k, v in LAYER_NAMES.items()})
    return out


def translate(cfg: Config, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """GPT-2 names (no `transformer.` prefix) → TransformerLens names, as views where possible."""
    H, dh, dm = cfg.n_heads, cfg.d_head, cfg.d_model
    params = {"W_E": t["wte.weight"], "W_pos": t["wpe.weight"]}
    for l in range(cfg.n_layers):
        h, b = f"h.{l}.", f"blocks.{l}."
        params[b + "ln1.w"] = t[h + "ln_1.weight"]
        params[b + "ln1.b"] = t[h + "ln_1.bias"]
        (W_Q, W_K, W_V), (b_Q, b_K, b_V) = split_qkv(t[h + "attn.c_attn.weight"], t[h + "attn.c_attn.bias"], H)
        params.update({b + "attn.W_Q": W_Q, b + "attn.W_K": W_K, b + "attn.W_V": W_V,
                       b + "attn.b_Q": b_Q, b + "attn.b_K": b_K, b + "attn.b_V": b_V})
        params[b + "attn.W_O"] = t[h + "attn.c_proj.weight"].reshape(H, dh, dm)  # [head, d_head, d_model]
        params[b + "attn.b_O"] = t[h + "attn.c_proj.bias"]
        params[b + "ln2.w"] = t[h + "ln_2.weight"]
        params[b + "ln2.b"] = t[h + "ln_2.bias"]
        params[b + "mlp.W_in"] = t[h + "mlp.c_fc.weight"]  # [d_model, d_mlp]
        params[b + "mlp.b_in"] = t[h + "mlp.c_fc.bias"]
        params[b + "mlp.W_out"] = t[h + "mlp.c_proj.weight"]  # [d_mlp, d_model]
        params[b + "mlp.b_out"] = t[h + "mlp.c_proj.bias"]
    params["ln_final.w"] = t["ln_f.weight"]
    params["ln_final.b"] = t["ln_f.bias"]
    if not cfg.tied_unembed:
        params["W_U"] = t["lm_head.weight"].T  # [d_model, d_vocab]
    params["b_U"] = np.zeros(cfg.d_vocab, dtype=np.float32)  # GPT-2 has no unembedding bias
    return params


def translate_fused(cfg: Config, t: dict[str, np.ndarray]) -> tuple[dict, list]:
    """`translate`, and each layer's c_attn as the fused Q|K|V matrix the decoder reads (no copy)."""
    return translate(cfg, t), [t[f"h.{l}.attn.c_attn.weight"] for l in range(cfg.n_layers)]


def read(folder: Path, raw: dict, name: str | None = None, progress=None, lazy: bool = False) -> Checkpoint:
    """A GPT-2 folder whose config.json (already read: `raw`) says gpt2, either key layout: its
    parameters are views of the mapped file, each layer's c_attn is the fused Q|K|V matrix the
    decoder reads (so it is not copied), and training.json says how `tracer train` made it.
    `progress(total_bytes, label)`: see `tracer.readers.folder.read_checked`. `lazy`: nothing is
    expanded; the Checkpoint's `lazy` is a `tracer.readers.source.Source`."""
    where = folder / "config.json"
    cfg = config_of(raw, where)
    files = weight_files(folder)
    check_sizes(cfg, files, where, cfg.n_params() - cfg.d_vocab)  # every parameter but b_U is stored
    tensors, origin, dtypes = strip_prefix(*read_tensors(files, raw_bf16=lazy))
    check_names(cfg, tensors, origin, folder)
    label = f"reading {name or folder.name} ({', '.join(f.name for f in files)})"
    source, params, W_qkv = None, {}, None
    if lazy:
        source = mapped_source(cfg, tensors, origin, dtypes, hf_shapes(cfg), translate_fused, "h.{l}.", file_names(cfg),
                               False, label, progress, folder)
    else:
        check_room(expansion_bytes(hf_shapes(cfg), dtypes), where, f"{', '.join(sorted(set(dtypes.values())))} on disk")
        params, W_qkv = translate_fused(cfg, read_checked(tensors, origin, hf_shapes(cfg), label, progress))
    return Checkpoint(cfg, params, get_tokenizer("gpt2"), name or str(folder), str(folder), "gpt2 folder",
                      "gpt2", stored_as(file_names(cfg), dtypes), fused_qkv=W_qkv, training=read_training(folder),
                      lazy=source)


# --------------------------------------------------------------------------- writing a GPT-2 folder


def gpt2_tensors(cfg: Config, params: dict) -> dict[str, np.ndarray]:
    """TransformerLens names → transformers' GPT-2 layout (`transformer.h.0.attn.c_attn.weight`, …):
    the inverse of `translate`. Refuses what GPT-2 cannot hold."""
    fits = (cfg.positional == "learned" and cfg.layer_norm and cfg.mlp and cfg.residual and cfg.scale_scores
            and cfg.n_heads * cfg.d_head == cfg.d_model)
    if not fits:
        raise TracerError("only a GPT-2 block (learned positions, layer norm, MLP, residual, scaled scores, "
                          "n_heads × d_head = d_model) saves in GPT-2's layout")
    if np.any(params["b_U"] != 0):
        raise TracerError("GPT-2 has no unembedding bias, and b_U is not zero")
    H, dh, dm = cfg.n_heads, cfg.d_head, cfg.d_model
    t = {"transformer.wte.weight": params["W_E"], "transformer.wpe.weight": params["W_pos"]}
    for l in range(cfg.n_layers):
        b, h = f"blocks.{l}.", f"transformer.h.{l}."
        a = b + "attn."
        t[h + "ln_1.weight"], t[h + "ln_1.bias"] = params[b + "ln1.w"], params[b + "ln1.b"]
        t[h + "attn.c_attn.weight"] = qkv.fuse_qkv_weights(*(params[a + f"W_{m}"] for m in "QKV"))  # [d_model, 3·d_model]
        t[h + "attn.c_attn.bias"] = qkv.fuse_qkv(*(params[a + f"b_{m}"] for m in "QKV"))
        t[h + "attn.c_proj.weight"] = params[a + "W_O"].reshape(H * dh, dm)
        t[h + "attn.c_proj.bias"] = params[a + "b_O"]
        t[h + "ln_2.weight"], t[h + "ln_2.bias"] = params[b + "ln2.w"], params[b + "ln2.b"]
        t[h + "mlp.c_fc.weight"], t[h + "mlp.c_fc.bias"] = params[b + "mlp.W_in"], params[b + "mlp.b_in"]
        t[h + "mlp.c_proj.weight"], t[h + "mlp.c_proj.bias"] = params[b + "mlp.W_out"], params[b + "mlp.b_out"]
    t["transformer.ln_f.weight"], t["transformer.ln_f.bias"] = params["ln_final.w"], params["ln_final.b"]
    if not cfg.tied_unembed:
        t["lm_head.weight"] = params["W_U"].T  # [d_vocab, d_model]
    return t


def gpt2_config(cfg: Config) -> dict:
    """config.json for transformers' GPT2LMHeadModel."""
    return {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.0,
        "bos_token_id": 50256, "embd_pdrop": 0.0, "eos_token_id": 50256, "initializer_range": 0.02,
        "layer_norm_epsilon": cfg.ln_eps, "model_type": "gpt2", "n_embd": cfg.d_model, "n_head": cfg.n_heads,
        "n_inner": None if cfg.d_mlp == 4 * cfg.d_model else cfg.d_mlp, "n_layer": cfg.n_layers,
        "n_positions": cfg.n_ctx, "resid_pdrop": 0.0, "scale_attn_weights": True,
        "tie_word_embeddings": cfg.tied_unembed, "vocab_size": cfg.d_vocab,
    }


def write_folder(folder, cfg: Config, params: dict, dtype: str = "float32", extra: dict | None = None) -> None:
    """config.json and model.safetensors in transformers' GPT-2 layout (`from_pretrained` reads them),
    each written atomically, and `extra` files (name → a dict, written as JSON, or the file's text) beside them."""
    from ..formats.files import atomic_write, save_safetensors

    folder = Path(folder)
    tensors = {k: np.ascontiguousarray(v, dtype=dtype) for k, v in gpt2_tensors(cfg, params).items()}
    save_safetensors(folder / "model.safetensors", tensors, {"format": "pt"})
    for name, data in {"config.json": gpt2_config(cfg), **(extra or {})}.items():
        text = data if isinstance(data, str) else json.dumps(data, indent=2, sort_keys=True) + "\n"
        atomic_write(folder / name, lambda f, t=text: f.write(t.encode("utf-8")))
