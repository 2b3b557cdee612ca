"""What llama.cpp decides by rule where a `gemma2` / `gemma3` GGUF file says nothing (src/llama-model.cpp,
the architectures' load_hparams), as the config.json keys the Gemma readers (`tracer.readers.gemma2`,
`gemma3`) check: the scores' scale, which layers slide and their window, the soft-caps, Gemma 3's local
RoPE base. Core module: numpy and the standard library.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import TracerError
from .gguf_meta import layer_types_of, meta_value, soft_cap
from .llama import check_layer_count

# llama.cpp's rules for what a gemma2 / gemma3 file does not state (src/llama-model.cpp, the
# architectures' load_hparams): the period of the sliding-window layers, the window when absent,
# the soft-caps when absent, and the block count of the 27B model, whose scores are scaled differently
GEMMA_RULES = {"gemma2": {"period": 2, "window": 4096, "caps": (50.0, 30.0), "big": 46},
               "gemma3": {"period": 6, "window": 0, "caps": None, "big": 62}}
GEMMA_LOCAL_BASE = 10000.0  # Gemma 3's RoPE base on its sliding-window layers (rope_freq_base_train_swa)


def gemma_settings(meta: dict, a: str, raw: dict, d_head: int, where: Path) -> dict:
    """config.json's Gemma keys for a gemma2 / gemma3 file, decided as llama.cpp decides them.

    convert_hf_to_gguf.py writes neither query_pre_attn_scalar nor the layer types: llama.cpp scales
    the scores by 1/√key_length, except for the 27B models (46 layers of Gemma 2, 62 of Gemma 3),
    by 1/√(embedding_length / head_count) (gemma_pytorch's config); and it puts the sliding window
    on layer l when l % period < period − 1 (`llama_hparams::set_swa_pattern`: period 2 for Gemma 2,
    layers 0, 2, 4, …; 6 for Gemma 3, five local layers then one global), unless the file gives
    `{arch}.attention.sliding_window_pattern` (a period, or one true/false per layer). Gemma 2's
    window is 4096 when the file gives none, its soft-caps 50 (scores) and 30 (logits); a Gemma 3
    file without a window (or with 0) has none. Gemma 3's sliding layers turn RoPE by base 10000
    (or the file's `{arch}.rope.freq_base_swa`); its final soft-cap, if the file gives one (other than
    0, none), goes to the Gemma 3 reader, which refuses it. (Two things newer llama.cpp reads that the
    converter does not write, `sliding_window_pattern` and `rope.freq_base_swa`, are read when present.)"""
    rules = GEMMA_RULES[a]
    n_layers, d_model, n_heads = raw["num_hidden_layers"], raw["hidden_size"], raw["num_attention_heads"]
    check_layer_count(n_layers, where, f"metadata '{a}.block_count'")
    out: dict = {"query_pre_attn_scalar": d_model // n_heads if n_layers == rules["big"] and n_heads else d_head}
    key = f"{a}.attention.sliding_window"
    window = meta.get(key, rules["window"])
    if not (isinstance(window, (int, np.integer)) and not isinstance(window, bool) and window >= 0):
        raise TracerError(f"{where}: metadata {key!r} must be a whole number ≥ 0, got {window!r}")
    if window:
        out["sliding_window"] = int(window)
        out["layer_types"] = layer_types_of(meta, a, n_layers, rules["period"], where)
    else:
        out["layer_types"] = ["full_attention"] * n_layers
    if rules["caps"] is not None:
        for name, default in zip(("attn_logit_softcapping", "final_logit_softcapping"), rules["caps"]):
            out[name] = soft_cap(meta, f"{a}.{name}", default, where)
    elif meta.get(f"{a}.final_logit_softcapping") not in (None, 0):  # 0: none (llama.cpp's Gemma 3 default)
        out["final_logit_softcapping"] = soft_cap(meta, f"{a}.final_logit_softcapping", None, where)
    if a == "gemma3":
        out["rope_local_base_freq"] = meta_value(meta, f"{a}.rope.freq_base_swa", where, float, GEMMA_LOCAL_BASE)
    return out
