"""Blocks of every storage type tracer reads, for the tests: random bytes with sane scales (`random_blocks`),
and a float32 matrix stored as a type (`stored_as`): by the gguf package's own `quantize` where it can
make the type (Q8_0, Q4_0/1, Q5_0/1, TQ1_0, TQ2_0, MXFP4), random blocks scaled to the matrix's size
where it cannot (the K-quants, the i-quants, IQ4_NL/IQ4_XS, NVFP4); F16 and BF16 by gguf too. And a
Llama folder whose rows are whole 256-number super-blocks (`wide_llama`), to write in those types.

Random bytes are a fair test of a de-quantizer (every index, sign and field is read), except where
they make a scale that is no number: a float16 scale there is drawn from N(0, `spread`) instead (some
negative), IQ1_M's float16 scale, whose four parts sit in the top bits of four uint16, likewise, an
E8M0 scale (MXFP4) is drawn from `E8M0_SANE` (255 is NaN) and a UE4M3 one (NVFP4) from small bytes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

# Where each type keeps its float16 scales (byte offsets in a block)
SCALES_AT = {"Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q2_K": [80, 82], "Q3_K": [108],
             "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "IQ2_XXS": [0], "IQ2_XS": [0], "IQ2_S": [0], "IQ3_XXS": [0],
             "IQ3_S": [0], "IQ1_S": [0], "IQ4_NL": [0], "IQ4_XS": [0], "TQ1_0": [52], "TQ2_0": [64]}
E8M0_SANE = (112, 124)  # E8M0 bytes drawn from here: 2^(e − 128) from 2^-16 to 2^-4
UE4M3_SANE = (1, 24)  # UE4M3 bytes drawn from here: subnormals and the two least exponents (≈ 0.001 to 0.015)
GGUF_QUANTIZES = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "TQ1_0", "TQ2_0", "MXFP4"}  # gguf.quants.quantize makes these


def sizes(type_name: str) -> tuple[int, int]:
    """(numbers, bytes) per block, as tracer's table has them."""
    from tracer.formats.quants import TYPES

    return TYPES[type_name].block, TYPES[type_name].nbytes


def random_blocks(type_name: str, n_blocks: int, seed=0, spread: float = 0.01) -> np.ndarray:
    """(n_blocks, bytes per block) uint8: random bytes, with sane scales (see the module's docstring)."""
    rng = np.random.default_rng(seed)
    block, nbytes = sizes(type_name)
    raw = rng.integers(0, 256, (n_blocks, nbytes), dtype=np.uint8)
    for at in SCALES_AT.get(type_name, []):
        raw[:, at:at + 2] = rng.normal(0, spread, (n_blocks, 1)).astype(np.float16).view(np.uint8)
    if type_name == "IQ1_M":  # d's four nibbles go to the top four bits of the four uint16 at bytes 48-55
        d = rng.normal(0, spread, n_blocks).astype(np.float16).view(np.uint16)
        sc = raw[:, 48:56].copy().view(np.uint16)
        for k in range(4):
            sc[:, k] = (sc[:, k] & 0x0FFF) | (((d >> 4 * k) & 15) << 12)
        raw[:, 48:56] = sc.view(np.uint8)
    if type_name == "MXFP4":
        raw[:, 0] = rng.integers(*E8M0_SANE, n_blocks)
    if type_name == "NVFP4":
        raw[:, :4] = rng.integers(*UE4M3_SANE, (n_blocks, 4))
    return raw


def stored_as(a: np.ndarray, type_name: str, seed: int | str = 0) -> np.ndarray:
    """A float32 matrix `a` (rows of whole blocks) stored as `type_name`, as rows of bytes (what
    GGUFWriter.add_tensor takes with raw_dtype): gguf's quantization where it makes the type, else
    random blocks whose scales give numbers about as large as `a`'s."""
    import zlib

    import gguf

    seed = zlib.crc32(seed.encode()) if isinstance(seed, str) else seed  # a tensor's name: its own blocks
    block, _ = sizes(type_name)
    if type_name in GGUF_QUANTIZES or block == 1:
        return gguf.quants.quantize(a, gguf.GGMLQuantizationType[type_name])
    probe = random_blocks(type_name, 64, seed, spread=1.0)
    typical = float(np.sqrt(np.mean(gguf.quants.dequantize(probe, gguf.GGMLQuantizationType[type_name]) ** 2)))
    spread = float(np.sqrt(np.mean(a.astype(np.float64) ** 2))) / typical if type_name not in ("MXFP4", "NVFP4") else 1
    return random_blocks(type_name, a.size // block, seed, spread=spread).reshape(a.shape[0], -1)


def wide_llama(folder: Path, layers: int = 2) -> Path:
    """A Llama folder (config.json, model.safetensors, tokenizer.json) of llama-tiny's kind made four times
    wider, d_model and d_mlp 256 (a 256-number super-block is a whole row), without its RoPE scaling (the
    naive reference's plain RoPE), random weights, llama-tiny's tokenizer."""
    from safetensors.numpy import save_file

    tiny = Path(__file__).parent / "data" / "llama-tiny"
    cfg = json.loads((tiny / "config.json").read_text())
    d, H, KV, dh, V = 256, cfg["num_attention_heads"], cfg["num_key_value_heads"], 64, cfg["vocab_size"]
    cfg.update(hidden_size=d, intermediate_size=d, head_dim=dh, num_hidden_layers=layers,
               rope_parameters={"rope_theta": 500000.0, "rope_type": "default"})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    shutil.copy(tiny / "tokenizer.json", folder)
    layer = {"input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,), "self_attn.q_proj.weight": (H * dh, d),
             "self_attn.k_proj.weight": (KV * dh, d), "self_attn.v_proj.weight": (KV * dh, d),
             "self_attn.o_proj.weight": (d, H * dh), "mlp.gate_proj.weight": (d, d), "mlp.up_proj.weight": (d, d),
             "mlp.down_proj.weight": (d, d)}
    shapes = {"model.embed_tokens.weight": (V, d), "model.norm.weight": (d,),
              **{f"model.layers.{l}.{k}": s for l in range(layers) for k, s in layer.items()}}
    rng = np.random.default_rng(0)
    save_file({k: (1 + rng.normal(0, 0.1, s) if len(s) == 1 else rng.normal(0, 0.05, s)).astype(np.float32)
               for k, s in shapes.items()}, str(folder / "model.safetensors"))
    return folder


def quantize_q6_k(a: np.ndarray) -> np.ndarray:
    """A float32 matrix whose rows are whole 256-number super-blocks stored as Q6_K (the gguf package makes no
    K-quant), as rows of bytes: per super-block a float16 d, per 16 numbers an int8 scale sc, per number a 6-bit
    q in −32…31, read back as d·sc·q (ggml's block_q6_K: ql holds the low 4 bits, qh the high 2, in ggml's
    order of 32-number quarters). Each scale from its 16 numbers' largest magnitude (not ggml's search for the
    best one: coarser, but within d·sc/2 of every number, which is all the tests ask)."""
    rows, cols = a.shape
    x = a.astype(np.float32).reshape(-1, 2, 128)  # [super-block, half, number]
    sub = np.abs(x.reshape(len(x), 16, 16)).max(axis=-1) / 31  # [super-block, 16]: each scale's ideal size
    d = (sub.max(axis=-1) / 127).astype(np.float16)  # [super-block]
    df = d.astype(np.float32)[:, None]
    sc = np.where(df > 0, np.round(sub / np.where(df > 0, df, 1)), 0).clip(-128, 127).astype(np.int8)  # [super-block, 16]
    step = (df * sc.astype(np.float32)).reshape(len(x), 2, 8).repeat(16, axis=-1)  # [super-block, half, number]
    q = np.where(step > 0, np.round(x / np.where(step > 0, step, 1)), 0).clip(-32, 31).astype(np.int16) + 32
    quarter = q.reshape(len(x), 2, 4, 32)  # number j of a half = 32·quarter + l
    ql = np.concatenate([(quarter[:, :, 0] & 15) | ((quarter[:, :, 2] & 15) << 4),
                         (quarter[:, :, 1] & 15) | ((quarter[:, :, 3] & 15) << 4)], axis=-1)  # [super-block, half, 64]
    qh = sum((quarter[:, :, k] >> 4) << (2 * k) for k in range(4))  # [super-block, half, 32]
    out = np.concatenate([ql.reshape(len(x), 128).astype(np.uint8), qh.reshape(len(x), 64).astype(np.uint8),
                          sc.view(np.uint8), d.reshape(-1, 1).view(np.uint8)], axis=1)  # [super-block, 210]
    return out.reshape(rows, cols // 256 * 210)
