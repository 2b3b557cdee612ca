"""GGUF files (llama.cpp, Ollama's blobs, LM Studio, GPT4All) → a `Checkpoint`: a family's reader, renamed.

A GGUF file holds its own config as metadata (`llama.block_count`, `llama.embedding_length`, …),
its tokenizer (`tokenizer.ggml.*`), its chat template, and tensors under llama.cpp's names, stored
as F32/F16/BF16 or in quantized blocks (`tracer.formats.quants`). Nothing here is a second
decoder: the metadata becomes the config.json object the family's reader already checks
(`tracer.readers.llama.config_of`), llama.cpp's tensor names become transformers' (`TENSOR_NAMES`),
and the family's `translate` gives TransformerLens names:

    token_embd → model.embed_tokens           output_norm → model.norm      output → lm_head (absent: tied)
    blk.{l}.attn_norm → input_layernorm       blk.{l}.ffn_norm → post_attention_layernorm
    blk.{l}.attn_q / attn_k / attn_v / attn_output → self_attn.q_proj / k_proj / v_proj / o_proj (+ .bias)
    blk.{l}.ffn_gate / ffn_up / ffn_down → mlp.gate_proj / up_proj / down_proj
    blk.{l}.attn_q_norm / attn_k_norm → self_attn.q_norm / k_norm (Qwen3, OLMo 2)
    Phi-3: blk.{l}.attn_qkv → self_attn.qkv_proj, blk.{l}.ffn_up → mlp.gate_up_proj (gate and up, fused)
    OLMo 2: blk.{l}.post_attention_norm / post_ffw_norm → post_attention_layernorm / post_feedforward_layernorm

A tensor's GGUF dims are [ne0 = inputs, ne1 = outputs], so its numpy shape is transformers'
[out, in]. llama.cpp's converter writes the `llama` (and `smollm3`) architecture's Q and K rows permuted, so that
its rotary pairs are neighbours ((x0, x1), (x2, x3), …); tracer rotates transformers' halves
((x_i, x_{i + d_head/2})), so the rows are put back (`unpermute`, the inverse of
convert_hf_to_gguf.py's `LlamaModel.permute`), and tracer's Q and K equal the original checkpoint's.
Every other architecture here is written unpermuted: convert_hf_to_gguf.py's Qwen2Model, Qwen3Model,
Olmo2Model, Phi3MiniModel, Gemma2Model and Gemma3Model do not override the tensors' rows (llama.cpp
rotates those architectures' halves as transformers does, LLAMA_ROPE_TYPE_NEOX). (OLMo 1's OlmoModel
does permute, like Llama's; it is not read here.)

Gemma 2 and Gemma 3 (architectures `gemma2`, `gemma3`): the converter stores every `*norm.weight`
with the 1 of Gemma's (1 + w) gain already added (llama.cpp then multiplies by the stored number);
tracer's `gemma_rms` norm multiplies by (1 + w) as transformers does, so the reader takes the 1 off
again (`NORM_SHIFTED`), and tracer's gains equal the folder's. llama.cpp's names for Gemma's four
norms: attn_norm (before attention), post_attention_norm (after it), ffn_norm (before the MLP),
post_ffw_norm (after it). What llama.cpp decides by rules the file does not state is in
`gguf_gemma.gemma_settings`.

SmolLM3 (`smollm3`): a `llama` file under another name, whose every 4th layer leaves rotary out; no key
says so, llama.cpp's loader sets the step itself (`NOPE_STEP`). Qwen3.5 (`qwen35`): its linear-attention
layers' keys, names and stored forms (tiled value heads, −exp(A_log), 1 + w norms) are `gguf_qwen35`'s.
`olmo2` files with a sliding window are OLMo 3's (`gguf_olmo3`).

Gemma 4 (architecture `gemma4`): its metadata gives sizes per layer and per layer type, read by
`tracer.readers.gguf_gemma4` into a gemma4_text config.json (and its rope_freqs into proportional RoPE);
its norms are stored as w, as Gemma 4 multiplies by w.

Sliding windows: Phi-3's `sliding_window` applies to every layer, as transformers applies it (0, which
the converter writes for a config without one, Phi-4's, is none; llama.cpp itself currently turns
Phi's window off, llama.cpp#13676, so on prompts longer than the window its numbers differ from
transformers' and tracer's). An `olmo2` file with a window is OLMo 3's: the window is on the layers
llama.cpp's pattern 4 (or the file's `sliding_window_pattern`) picks, YaRN (if any) on the others.

Every tensor is de-quantized once, at load, into float32 (the file stays memory-mapped), or, read
`lazy`, kept as its blocks and de-quantized layer by layer (`tracer.readers.source`, `tracer.core.streamed`).
Core module: numpy and the standard library.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import TracerError
from .checkpoint import Checkpoint, Stored
from .llama import check_layer_count, split_marked
from .families import family_module
from .folder import check_finite, check_room, expansion_bytes, no_progress
from .gguf_experts import Family as ExpertsFamily, config_json as experts_config, is_experts
from .gguf_gemma import GEMMA_RULES, gemma_settings
from .gguf_meta import layer_types_of, meta_value as _meta
from .ollama_compat import translate as translate_ollama
from .gguf_gemma4 import LAYER as GEMMA4_LAYER, TOP as GEMMA4_TOP, config_json as gemma4_config, with_rope

# GGUF architecture → (transformers' model_type it renames to, whether llama.cpp permuted Q and K)
ARCHITECTURES = {"llama": ("llama", True), "qwen2": ("qwen2", False), "qwen3": ("qwen3", False),
                 "olmo2": ("olmo2", False), "phi3": ("phi3", False), "gemma2": ("gemma2", False),
                 "gemma3": ("gemma3_text", False), "gpt-oss": ("gpt_oss", False), "qwen3moe": ("qwen3_moe", False),
                 "qwen2moe": ("qwen2_moe", False), "olmoe": ("olmoe", False),  # (a llama file with experts: mixtral)
                 "smollm3": ("smollm3", True), "qwen35": ("qwen3_5_text", False), "gemma4": ("gemma4_text", False)}
NORM_SHIFTED = ("gemma2", "gemma3")  # architectures whose *norm.weight tensors hold 1 + w
NOPE_STEP = 4  # llama.cpp's SmolLM3 leaves rotary out of every 4th layer (n_no_rope_layer_step): no key says so
# Architectures whose differences live in their own module (imported when read): `config_json(meta, tensors,
# raw, where)` → raw, and where needed LAYER (more llama.cpp → transformers names), `fix(cfg, g, hf, where)`
# (a stored form undone), `Family(fam)` (shapes as stored), `ignored(raw, g)`, `shape_keys(meta, g)`, PARTIAL_ROTARY
ARCH_MODULES = {"qwen35": "gguf_qwen35", "olmo2": "gguf_olmo3"}

TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
       "output.weight": "lm_head.weight", **GEMMA4_TOP}
LAYER = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
         "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
         "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
         "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
         "attn_v.bias": "self_attn.v_proj.bias", "attn_output.bias": "self_attn.o_proj.bias",
         "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
         "ffn_down.weight": "mlp.down_proj.weight",
         "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight"}


# An architecture whose llama.cpp names differ from LAYER's: OLMo 2's post_attention_layernorm is the
# norm of attention's output (llama.cpp's post_attention_norm), not the norm before the MLP (ffn_norm)
ARCH_LAYER = {"olmo2": {"post_attention_norm.weight": "post_attention_layernorm.weight",
                        "post_ffw_norm.weight": "post_feedforward_layernorm.weight"},
              "phi3": {"attn_qkv.weight": "self_attn.qkv_proj.weight", "ffn_up.weight": "mlp.gate_up_proj.weight"}}
GEMMA_LAYER = {"post_attention_norm.weight": "post_attention_layernorm.weight",  # Gemma's four norms: ffn_norm is
               "ffn_norm.weight": "pre_feedforward_layernorm.weight",            # the one before the MLP
               "post_ffw_norm.weight": "post_feedforward_layernorm.weight"}
ARCH_LAYER.update({"gemma2": GEMMA_LAYER, "gemma3": GEMMA_LAYER, "gemma4": GEMMA4_LAYER,
                   "gpt-oss": {"post_attention_norm.weight": "post_attention_layernorm.weight"}})  # its norm before the MLP


def arch_module(arch: str):
    """The module of an architecture's own differences (`ARCH_MODULES`), or None."""
    from importlib import import_module

    return import_module(f"{__package__}.{ARCH_MODULES[arch]}") if arch in ARCH_MODULES else None


def tensor_names(n_layers: int, arch: str = "llama") -> dict[str, str]:
    """transformers' tensor name → llama.cpp's, for a model of `n_layers` layers of architecture `arch`
    (a mixture of experts' stacked tensors under tracer's names for them, `gguf_experts.LAYER`)."""
    from .gguf_experts import LAYER as EXPERTS_LAYER

    layer = {hf: g for g, hf in LAYER.items()}
    layer.update({hf: g for g, hf in EXPERTS_LAYER.items()})
    layer.update({hf: g for g, hf in {**ARCH_LAYER.get(arch, {}), **getattr(arch_module(arch), "LAYER", {})}.items()})
    out = {hf: g for g, hf in TOP.items()}
    for l in range(n_layers):
        out.update({f"model.layers.{l}.{hf}": f"blk.{l}.{g}" for hf, g in layer.items()})
    return out


def config_json_of(meta: dict, tensors: dict, where: Path) -> dict:
    """The GGUF metadata as the config.json object transformers would write for the same model."""
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise TracerError(f"{where}: GGUF architecture {arch!r} is not supported; tracer reads "
                          f"{', '.join(ARCHITECTURES)} (more families come through the same table)")
    a = str(arch)
    if a == "gemma4":  # its sizes per layer and per layer type: `tracer.readers.gguf_gemma4`
        return gemma4_config(meta, tensors, where, lambda key, kind, default: _meta(meta, key, where, kind, default))
    n_heads = _meta(meta, f"{a}.attention.head_count", where)
    d_model = _meta(meta, f"{a}.embedding_length", where)
    tokens = meta.get("tokenizer.ggml.tokens")
    raw = {
        "model_type": ARCHITECTURES[a][0],
        "num_hidden_layers": _meta(meta, f"{a}.block_count", where),
        "hidden_size": d_model,
        "intermediate_size": _meta(meta, f"{a}.feed_forward_length", where),
        "num_attention_heads": n_heads,
        "num_key_value_heads": _meta(meta, f"{a}.attention.head_count_kv", where, default=n_heads),
        "max_position_embeddings": _meta(meta, f"{a}.context_length", where),
        "rms_norm_eps": _meta(meta, f"{a}.attention.layer_norm_rms_epsilon", where, float),
        "rope_theta": _meta(meta, f"{a}.rope.freq_base", where, float, 10000.0),
        "vocab_size": _meta(meta, f"{a}.vocab_size", where, default=len(tokens) if tokens is not None else None),
        "tie_word_embeddings": "output.weight" not in tensors,
    }
    head_dim = meta.get(f"{a}.attention.key_length")
    if head_dim is not None:
        raw["head_dim"] = _meta(meta, f"{a}.attention.key_length", where)
    rope_dims = meta.get(f"{a}.rope.dimension_count")
    d_head = raw.get("head_dim", d_model // n_heads if n_heads else 0)
    mod = arch_module(a)
    partial = hasattr(mod, "PARTIAL_ROTARY")  # (its module checks the rotated width)
    if rope_dims is not None and _meta(meta, f"{a}.rope.dimension_count", where) != d_head and not partial:
        raise TracerError(f"{where}: rotary positions turn {rope_dims} of each head's {d_head} dimensions; tracer "
                          f"rotates all of them (partial rotary is not supported)")
    window = meta.get(f"{a}.attention.sliding_window")
    if window is not None and a not in GEMMA_RULES:  # Phi-3's, on every layer (0: none, Phi-4's); OLMo 3's, on some
        window = _meta(meta, f"{a}.attention.sliding_window", where)
        if window:
            raw["sliding_window"] = window
        if window and a == "olmo2":
            raw["layer_types"] = layer_types_of(meta, a, raw["num_hidden_layers"], 4, where)
    if "rope_factors_long.weight" in tensors or "rope_factors_short.weight" in tensors:
        raise TracerError(f"{where}: RoPE scaling 'longrope' (Phi-3's rope_factors_long/short) is not supported; "
                          f"tracer computes plain rotary positions")
    scaling = meta.get(f"{a}.rope.scaling.type", "none")
    if scaling == "linear":  # one factor for every angle (Gemma 3's global layers), as config.json's 'linear'
        raw["rope_scaling"] = {"rope_type": "linear", "factor": _meta(meta, f"{a}.rope.scaling.factor", where, float)}
    elif scaling == "yarn":  # llama.cpp rounds the correction range outwards (ggml_rope_yarn_corr_dims): truncate
        raw["rope_scaling"] = {"rope_type": "yarn", "factor": _meta(meta, f"{a}.rope.scaling.factor", where, float),
                               "original_max_position_embeddings": _meta(  # absent: the training context, as llama.cpp
                                   meta, f"{a}.rope.scaling.original_context_length", where, float,
                                   meta.get(f"{a}.context_length")),
                               "beta_fast": _meta(meta, f"{a}.rope.scaling.yarn_beta_fast", where, float, 32.0),
                               "beta_slow": _meta(meta, f"{a}.rope.scaling.yarn_beta_slow", where, float, 1.0),
                               "truncate": True}
    elif scaling not in ("none", None):  # Llama 3's scaling comes as the rope_freqs tensor instead (see read)
        raise TracerError(f"{where}: RoPE scaling {scaling!r} is not supported in GGUF files; tracer computes plain "
                          f"rotary positions, 'linear' scaling and Llama 3's per-pair factors (rope_freqs)")
    if a in ("qwen2", "qwen3"):
        raw["use_sliding_window"] = False
    if a == "smollm3":
        raw["no_rope_layer_interval"] = NOPE_STEP
    if a in GEMMA_RULES:
        raw.update(gemma_settings(meta, a, raw, d_head, where))
    if is_experts(meta, a):
        raw = experts_config(meta, tensors, a, raw, lambda key, kind, default: _meta(meta, key, where, kind, default), where)
    return mod.config_json(meta, tensors, raw, where) if mod is not None else raw


ROPE_FREQS = "rope_freqs.weight"  # Llama 3's scaling as llama.cpp keeps it: a divisor per pair of dimensions


def with_rope_factors(f, cfg, where: Path):
    """`cfg` with the file's rope_freqs (convert_hf_to_gguf.py writes Llama 3.1's scaling as one
    divisor per pair of a head's dimensions; llama.cpp turns pair i by position · θ_i / factor_i)."""
    from dataclasses import replace

    info = f.tensors.get(ROPE_FREQS)
    if info is None:
        return cfg
    if tuple(info.shape) != (cfg.d_head // 2,):
        raise TracerError(f"{where}: tensor {ROPE_FREQS!r} has shape {list(info.shape)}; rotary positions need "
                          f"{cfg.d_head // 2} factors (one per pair of a head's {cfg.d_head} dimensions)")
    factors = [float(x) for x in f.dequantize(ROPE_FREQS)]
    try:
        return replace(cfg, rope_scaling={"rope_type": "factors", "factors": factors})
    except TracerError as e:
        raise TracerError(f"{where}: tensor {ROPE_FREQS!r}: {str(e).removeprefix('config: ')}") from None


def unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:  # [heads·d_head, d_model] → same
    """llama.cpp's Q/K rows (each head's rotary pairs side by side) back in transformers' order
    (each head's first halves, then its second halves): convert_hf_to_gguf.py's `permute`, undone."""
    rows = w.shape[0]
    half = rows // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def read(path: Path, name: str | None = None, progress=None, lazy: bool = False) -> Checkpoint:
    """A GGUF file of an architecture in ARCHITECTURES: its metadata checked into a config, every
    tensor checked against it and de-quantized (driving `progress(total_bytes, label)`); `lazy`:
    none de-quantized, the Checkpoint's `lazy` source keeps them as blocks (`tracer.readers.source`)."""
    from ..formats.gguf_file import open_gguf

    path = Path(path).expanduser()
    f = open_gguf(path)
    compat = translate_ollama(f, path, name, ARCHITECTURES)  # Ollama's older blobs, as llama.cpp reads them (readers.ollama_compat)
    raw = config_json_of(f.metadata, f.tensors, path)
    arch = str(f.metadata["general.architecture"])
    if arch == "gemma4":  # its rope_freqs: proportional RoPE on the full layers
        raw = with_rope(f, raw, path)
    fam, mod = family_module(raw["model_type"]), arch_module(arch)  # the family's reader: its config, shapes, names
    check_layer_count(int(raw["num_hidden_layers"]), path, "metadata 'block_count'")
    gguf_of = tensor_names(int(raw["num_hidden_layers"]), arch)
    if is_experts(f.metadata, arch):  # the experts as the file stacks them
        fam = ExpertsFamily(fam, gguf_of)
    if hasattr(mod, "Family"):  # tensors stored in another shape than the folder's
        fam = mod.Family(fam)
    cfg = fam.config_of(raw, path)
    shapes = fam.hf_shapes(cfg, raw, path)
    wanted = {gguf_of[hf]: (hf, shape) for hf, shape in shapes.items()}
    for g, (hf, shape) in wanted.items():
        info = f.tensors.get(g)
        if info is None:
            raise TracerError(f"{path}: missing tensor {g!r} (the {raw['model_type']} block needs it)"
                              f"{mod.shape_keys(f.metadata, g, missing=True) if hasattr(mod, 'shape_keys') else ''}")
        if tuple(info.shape) != tuple(shape):
            raise TracerError(f"{path}: tensor {g!r} has shape {list(info.shape)} but the metadata implies {list(shape)}"
                              f"{mod.shape_keys(f.metadata, g) if hasattr(mod, 'shape_keys') else ''}")
    cfg = with_rope_factors(f, cfg, path) if arch != "gemma4" else cfg
    ignored = getattr(mod, "ignored", lambda raw, g: False)  # (Qwen3.5's multi-token-prediction blocks)
    extra = [g for g in f.tensors if g not in wanted and g != ROPE_FREQS and not ignored(raw, g)]
    if extra:
        raise TracerError(f"{path}: tensor {extra[0]!r} is not part of the {raw['model_type']} block the metadata "
                          f"describes (block_count {cfg.n_layers})")
    kinds = sorted({f.tensors[g].type_name for g in wanted})
    fixes = {g: fix_of(arch, cfg, g, hf, path) for g, (hf, _) in wanted.items()}
    notes = (*compat, *raw.get("_notes", ()))
    if lazy:
        from .source import gguf_source

        source = gguf_source(cfg, f, {g: hf for g, (hf, _) in wanted.items()}, fixes, fam,
                             f"reading {name or path.name} (GGUF)", progress)
        return _checkpoint(cfg, f, fam, gguf_of, {}, None, path, name, source, notes)
    check_room(expansion_bytes({g: f.tensors[g].shape for g in wanted}, {g: f.tensors[g].type_name for g in wanted},
                               cfg.n_layers * cfg.d_model * cfg.qkv_width), path, f"{', '.join(kinds)} in the file")
    t: dict[str, np.ndarray] = {}
    total = sum(f.tensors[g].nbytes for g in wanted)
    with (progress or no_progress)(total, f"reading {name or path.name} (GGUF)") as advance:
        for g, (hf, _) in wanted.items():
            arr = f.dequantize(g)  # float32 [out, in] (or [n])
            check_finite(g, arr, path)
            t[hf] = fixes[g](arr) if fixes[g] else arr
            advance(f.tensors[g].nbytes)
    params, fused = fam.translate(cfg, t)
    return _checkpoint(cfg, f, fam, gguf_of, params, fused, path, name, notes=notes)


def fix_of(arch: str, cfg, g: str, hf: str, where: Path | None = None):
    """What is done to GGUF tensor `g` (transformers' `hf`) as it is expanded, eagerly or layer by layer,
    or None: Gemma's stored 1 + w back to w (tracer's gemma_rms adds the 1 itself); the Q/K rows llama.cpp
    permuted for `llama` and `smollm3` put back; an architecture module's own (`ARCH_MODULES`: `fix`)."""
    mod = arch_module(arch)
    if hasattr(mod, "fix"):
        return mod.fix(cfg, g, hf, where)
    if arch in NORM_SHIFTED and g.endswith("norm.weight"):
        return lambda a: a - np.float32(1)
    if ARCHITECTURES[arch][1] and hf.endswith(("q_proj.weight", "k_proj.weight")):
        d_head = cfg.d_head

        def put_back(a: np.ndarray) -> np.ndarray:  # [heads·d_head, d_model], or whole heads' rows of it
            return unpermute(a, a.shape[0] // d_head)

        put_back.period = d_head  # head by head: rows of whole heads are put back alone (`Stored.rows`)
        return put_back
    return None


def _checkpoint(cfg, f, fam, gguf_of: dict, params: dict, fused, path: Path, name, source=None, notes=()) -> Checkpoint:
    """The Checkpoint of an open GGUF file, its parameters read (or, lazily, `source`)."""
    storage = split_marked(fam, cfg, {tl: Stored(f.tensors[gguf_of[hf]].type_name, gguf_of[hf], "gguf",
                                                 nbytes=f.tensors[gguf_of[hf]].nbytes)
                                      for tl, hf in fam.file_names(cfg).items() if hf in gguf_of and gguf_of[hf] in f.tensors})
    from ..tokenizers.chat import ChatTemplate
    from ..tokenizers.gguf_tokenizer import tokenizer_from_gguf
    from .gguf_sampling import file_sampling

    tokenizer = tokenizer_from_gguf(f.metadata, path=str(path))
    template = f.metadata.get("tokenizer.chat_template")
    template = ChatTemplate(template, f"{path.name}'s tokenizer.chat_template") if isinstance(template, str) else None
    sampling, unused = file_sampling(f.metadata, f.types, str(path))  # general.sampling.*, checked
    return Checkpoint(cfg, params, tokenizer, name or path.name, str(path), "gguf", str(f.metadata["general.architecture"]),
                      storage, fused_qkv=fused, chat_template=template,
                      examples=storage_examples(f, storage), lazy=source, notes=tuple(notes), sampling=sampling,
                      sampling_unused=unused)


EXAMPLE_PARTS = ("d", "m", "dmin", "sub_block", "sc", "scale", "min", "q", "q_low", "q_high_bit", "bits")


def storage_examples(f, storage: dict) -> dict:
    """For each storage type, the first number the walkthrough multiplies by that is stored in it,
    worked from its block's bytes (`GGUFFile.explain`): W_Q of layer 0 first, then the others in
    order. Plain JSON values, for the trace's meta."""
    from ..formats.quants import TYPES

    out: dict = {}
    order = sorted(storage, key=lambda k: (k != "blocks.0.attn.W_Q", list(storage).index(k)))
    for tl in order:
        s = storage[tl]
        if s.dtype in out or s.dtype not in TYPES:
            continue
        ex = f.explain(s.tensor, 0)
        parts = {k: _plain(ex[k]) for k in EXAMPLE_PARTS if k in ex}
        out[s.dtype] = {"param": tl, "tensor": s.tensor, "index": [0] * len(f.tensors[s.tensor].shape),
                        "words": TYPES[s.dtype].description, "formula": str(ex.get("formula", "")),
                        "parts": parts, "value": float(ex["value"]), "where": {k: str(v) for k, v in ex.get("where", {}).items()}}
        if "steps" in ex:  # a lookup type's steps (`tracer.formats.lookup_explain`), worded by tracer.render.storage
            out[s.dtype]["steps"] = [[str(k), {n: _plain(v) for n, v in slots.items()}] for k, slots in ex["steps"]]
    return out


def _plain(v):
    """A JSON value: numpy scalars as Python numbers, sequences as lists."""
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_plain(x) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    return str(v)
