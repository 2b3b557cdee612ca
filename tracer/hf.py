"""Hugging Face GPT-2 checkpoints → a config and parameters, offline, translated to TransformerLens names once.

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
(`tracer.fast`). `tracer.load` builds the Model.

Names are looked up in the local Hugging Face cache by `tracer.hub`, never on the network. Pickled
checkpoints (`pytorch_model.bin`) are never loaded. Also here: the shared readers of weights files
(`weight_files`, `inside`, `check_sizes`, `read_tensors`) that `tracer.families` uses too, and the
writer of a GPT-2 folder (`write_folder`, for `tracer train`). Core module: numpy and the standard library.
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .config import Config
from .errors import TracerError, near
from .files import load_safetensors
from .params import first_non_finite
from .reading import inside, parse_json, read_small  # inside: every file of a model folder stays in it

GELU_TANH = ("gelu_new", "gelu_pytorch_tanh")  # GPT-2's tanh-approximated GELU, as the decoder computes it
MASK_BUFFERS = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")  # causal-mask buffers, not weights
LAYER_KEY = re.compile(r"^h\.(\d+)\.")
PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack", "model.ckpt.index")
CHECK_CHUNK = 2**22  # elements checked for NaN/inf at a time: bounded extra memory (tests make it small)


# --------------------------------------------------------------------------- config.json


def _config_value(raw: dict, key: str, where: Path, default=None, kind=int):
    value = raw.get(key, default)
    if value is None:
        raise TracerError(f"{where}: missing {key!r} (a GPT-2 config.json has n_layer, n_head, n_embd, n_positions, vocab_size)")
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise TracerError(f"{where}: {key!r} must be a whole number ≥ 1, got {value!r}")
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise TracerError(f"{where}: {key!r} must be a number > 0, got {value!r}")
    if kind is bool and not isinstance(value, bool):  # the string "false" is not false
        raise TracerError(f"{where}: {key!r} must be true or false, got {value!r}")
    return value


def config_json(folder: Path) -> dict:
    """The folder's config.json as a JSON object (a regular file inside the folder, bounded in size and depth)."""
    where = inside(folder, "config.json", folder)  # a link out of the folder is refused, its values never quoted
    if not where.exists():
        raise TracerError(f"{folder}: no config.json (a Hugging Face folder holds config.json and model.safetensors)")
    raw = parse_json(read_small(where), f"{where}: not valid JSON")
    if not isinstance(raw, dict):
        raise TracerError(f"{where}: not a JSON object")
    return raw


def read_config(folder: Path) -> Config:
    """A GPT-2 `config.json` as a tracer `Config` (float32, the GPT-2 block)."""
    where = folder / "config.json"
    raw = config_json(folder)
    model_type = raw.get("model_type", "gpt2")
    if model_type != "gpt2":
        raise TracerError(f"{where}: model_type is {model_type!r}; tracer loads gpt2, llama, qwen2 and mistral checkpoints")
    act = raw.get("activation_function", "gelu_new")
    if act not in GELU_TANH:
        raise TracerError(f"{where}: activation_function {act!r} is not supported; tracer computes GPT-2's gelu_new (tanh GELU)")
    if _config_value(raw, "scale_attn_by_inverse_layer_idx", where, False, kind=bool):
        raise TracerError(f"{where}: scale_attn_by_inverse_layer_idx is not supported (GPT-2 divides scores by sqrt(d_head) only)")
    n_embd = _config_value(raw, "n_embd", where)
    n_head = _config_value(raw, "n_head", where)
    if n_embd % n_head:
        raise TracerError(f"{where}: n_embd {n_embd} is not divisible by n_head {n_head}")
    n_inner = raw.get("n_inner")
    try:
        return Config(
            d_vocab=_config_value(raw, "vocab_size", where),
            n_ctx=_config_value(raw, "n_positions", where, raw.get("n_ctx")),
            d_model=n_embd,
            n_heads=n_head,
            n_layers=_config_value(raw, "n_layer", where),
            d_mlp=_config_value(raw, "n_inner", where) if n_inner is not None else 4 * n_embd,
            dtype="float32",
            ln_eps=float(_config_value(raw, "layer_norm_epsilon", where, 1e-5, kind=float)),
            scale_scores=_config_value(raw, "scale_attn_weights", where, True, kind=bool),
            tied_unembed=_config_value(raw, "tie_word_embeddings", where, True, kind=bool),
        )
    except TracerError as e:  # Config's own errors lack the file; _config_value's already name it
        raise TracerError(str(e) if str(e).startswith(f"{where}:") else f"{where}: {str(e).removeprefix('config: ')}") from None


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


# --------------------------------------------------------------------------- the weights files


def weight_files(folder: Path) -> list[Path]:
    """model.safetensors, or the shards its index lists; a clear error for pickled-only folders.
    Every file must be inside the folder (see `inside`)."""
    single = folder / "model.safetensors"
    if single.exists() or single.is_symlink():
        return [inside(folder, "model.safetensors", single)]
    index = folder / "model.safetensors.index.json"
    if index.exists():
        raw = parse_json(read_small(inside(folder, index.name, index)), f"{index}: not a readable safetensors index")
        weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise TracerError(f"{index}: not a readable safetensors index (no \"weight_map\" of tensor names to files)")
        shards = []
        for name in weight_map.values():
            if not isinstance(name, str) or not name:
                raise TracerError(f"{index}: not a readable safetensors index (a shard is named {name!r})")
            if name not in shards:
                shards.append(name)
        return [inside(folder, name, index) for name in sorted(shards)]
    pickled = [f for f in PICKLED if (folder / f).exists()]
    if pickled:
        raise TracerError(
            f"{folder}: holds only {pickled[0]}; pickled checkpoints are never loaded; tracer needs model.safetensors "
            f"(huggingface-cli download openai-community/gpt2 config.json model.safetensors, for example)"
        )
    raise TracerError(f"{folder}: no model.safetensors (a Hugging Face GPT-2 folder holds config.json and model.safetensors)")


def check_sizes(cfg: Config, files: list[Path], where: Path, stored: int | None = None) -> None:
    """Refuse a config.json that declares more parameters than the weights files can hold (at 2 bytes
    each, float16's size), before any layer's names or shapes are built from it. `stored`: how many
    numbers the file must hold, when not GPT-2's count (every parameter but b_U)."""
    count = cfg.n_params() - cfg.d_vocab if stored is None else stored  # b_U is not stored
    need = count * 2
    try:
        have = sum(f.stat().st_size for f in files)
    except OSError:
        return  # a missing shard is reported by name when it is read
    if need > have:
        raise TracerError(f"{where}: describes {count:,} parameters (at least {need:,} bytes), "
                          f"but {', '.join(f.name for f in files)} hold{'s' if len(files) == 1 else ''} {have:,} bytes; "
                          f"config.json does not match the weights")


def read_tensors(files: list[Path]) -> tuple[dict[str, np.ndarray], dict[str, Path]]:
    """Every tensor of the files, memory-mapped, and the file each came from."""
    tensors: dict[str, np.ndarray] = {}
    origin: dict[str, Path] = {}
    for f in files:
        arrays, _ = load_safetensors(f)  # checks the header, offsets and truncation
        for k, v in arrays.items():
            tensors[k] = v
            origin[k] = f
    return tensors, origin


def strip_prefix(tensors: dict[str, np.ndarray], origin: dict[str, Path]):
    """Names without transformers' `transformer.` prefix (the Hub's layout has none)."""
    if not any(k.startswith("transformer.") for k in tensors):
        return tensors, origin
    p = "transformer."
    return ({k.removeprefix(p): v for k, v in tensors.items()}, {k.removeprefix(p): v for k, v in origin.items()})


def check_names(cfg: Config, tensors: dict, origin: dict, folder: Path) -> None:
    """Every tensor present with config.json's shape; no layer beyond n_layer."""
    files = ", ".join(sorted({p.name for p in origin.values()})) or "model.safetensors"
    for name, shape in hf_shapes(cfg).items():
        if name not in tensors:
            hint = near(name, [k for k in tensors if not MASK_BUFFERS.match(k)])
            raise TracerError(f"{folder / files}: missing tensor {name!r}{hint}")
        got = tuple(tensors[name].shape)
        if got != shape:
            raise TracerError(
                f"{origin[name]}: tensor {name!r} has shape {list(got)} but config.json implies {list(shape)}"
            )
    for name in tensors:
        m = LAYER_KEY.match(name)
        if m and int(m.group(1)) >= cfg.n_layers:
            raise TracerError(
                f"{origin[name]}: tensor {name!r} is in layer {m.group(1)} but config.json says n_layer {cfg.n_layers}"
            )


def as_float32(name: str, arr: np.ndarray, where: Path) -> np.ndarray:
    """The array as float32: the memory-mapped view itself when it already is (no copy)."""
    if arr.dtype.kind != "f":
        raise TracerError(f"{where}: tensor {name!r} has dtype {arr.dtype}, expected floating point weights")
    arr = arr.view(np.ndarray)  # a plain array over the same mapped bytes, not an np.memmap
    return arr if arr.dtype == np.float32 else arr.astype(np.float32)


def check_finite(name: str, arr: np.ndarray, where: Path, advance=None) -> None:
    """A TracerError naming the tensor if it holds NaN or inf; reads it in bounded chunks.

    This is the one pass over the file's bytes, so it drives the progress bar (`advance(n_elements)`)."""
    bad = first_non_finite(arr, advance, CHECK_CHUNK)
    if bad is not None:
        raise TracerError(f"{where}: tensor {name!r} holds NaN or infinite values (first at index {bad})")


@contextmanager
def _no_progress(total_bytes: int, label: str):
    yield lambda n: None


def read_checked(tensors: dict, origin: dict, names, label: str, progress=None) -> dict[str, np.ndarray]:
    """The tensors `names` as float32 (views of the mapped file when it is float32; bfloat16 and
    float16 converted), each checked for NaN and inf in the one read of the file's bytes, which
    drives `progress(total_bytes, label)` (see `read_folder`)."""
    total = sum(tensors[k].nbytes for k in names)
    out: dict[str, np.ndarray] = {}
    with (progress or _no_progress)(total, label) as advance:
        for k in names:
            arr = as_float32(k, tensors[k], origin[k])  # [...] a view when the file is float32
            check_finite(k, arr, origin[k], lambda n, size=tensors[k].itemsize: advance(n * size))
            out[k] = arr
    return out


# --------------------------------------------------------------------------- translation


def split_qkv(c_attn_w: np.ndarray, c_attn_b: np.ndarray, n_heads: int):
    """c_attn [d_model, 3·d_model] = [Q | K | V] → W_Q, W_K, W_V [head, d_model, d_head] (views)."""
    d_model = c_attn_w.shape[0]
    W = c_attn_w.reshape(d_model, 3, n_heads, -1)  # [d_model, qkv, head, d_head]
    b = c_attn_b.reshape(3, n_heads, -1)  # [qkv, head, d_head]
    Ws = [W[:, i].transpose(1, 0, 2) for i in range(3)]  # [head, d_model, d_head] each
    return Ws, [b[i] for i in range(3)]  # [head, d_head] each


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


def read_folder(path, name: str | None = None, progress=None):
    """A GPT-2 folder with config.json and model.safetensors (either key layout): its config, its
    parameters (TransformerLens names, views of the mapped file), each layer's c_attn (the fused
    Q|K|V matrix the decoder reads, so it is not copied), the folder's path, and how it was trained
    when `tracer train` made it (training.json; else None).

    `progress(total_bytes, label)`: a context manager giving `advance(n_bytes)`, called as the
    tensors are checked (the one read of the file's bytes); the CLI passes a progress bar."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise TracerError(f"{folder}: not a folder")
    cfg = read_config(folder)
    files = weight_files(folder)
    check_sizes(cfg, files, folder / "config.json")
    tensors, origin = strip_prefix(*read_tensors(files))
    check_names(cfg, tensors, origin, folder)
    t = read_checked(tensors, origin, hf_shapes(cfg), f"reading {name or folder.name} ({', '.join(f.name for f in files)})",
                     progress)
    W_qkv = [t[f"h.{l}.attn.c_attn.weight"] for l in range(cfg.n_layers)]  # [d_model, 3·d_model] per layer
    return cfg, translate(cfg, t), W_qkv, str(folder), read_training(folder)


def read_training(folder: Path) -> dict | None:
    """How the weights were trained, when `tracer train` made them (training.json), else None."""
    where = inside(folder, "training.json", folder)
    if not where.exists():
        return None
    info = parse_json(read_small(where), f"{where}: not readable JSON")
    if not isinstance(info, dict) or info.get("format") != "tracer-training":
        raise TracerError(f"{where}: not a tracer training record (no \"format\": \"tracer-training\")")
    return info


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
        t[h + "attn.c_attn.weight"] = np.concatenate(
            [params[a + f"W_{m}"].transpose(1, 0, 2).reshape(dm, H * dh) for m in "QKV"], axis=1)  # [d_model, 3·d_model]
        t[h + "attn.c_attn.bias"] = np.concatenate([params[a + f"b_{m}"].reshape(-1) for m in "QKV"])
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
    from .files import atomic_write, save_safetensors

    folder = Path(folder)
    tensors = {k: np.ascontiguousarray(v, dtype=dtype) for k, v in gpt2_tensors(cfg, params).items()}
    save_safetensors(folder / "model.safetensors", tensors, {"format": "pt"})
    for name, data in {"config.json": gpt2_config(cfg), **(extra or {})}.items():
        text = data if isinstance(data, str) else json.dumps(data, indent=2, sort_keys=True) + "\n"
        atomic_write(folder / name, lambda f, t=text: f.write(t.encode("utf-8")))
