"""OLMo 3 GGUF files: llama.cpp has no `olmo3` architecture; convert_hf_to_gguf.py writes Olmo3ForCausalLM with
Olmo2Model, as an `olmo2` file with a sliding window. Such a file is read as the OLMo 3 folder reader reads
its config.json (`tracer.readers.olmo3`), with what llama.cpp's olmo2 graph computes (src/models/olmo2.cpp):

  - the window on the layers `olmo2.attention.sliding_window_pattern` marks (a period, or one true/false per
    layer; 4 when absent: three sliding layers, then a full one);
  - the full layers' RoPE scaling (YaRN in the released models), the sliding layers' plain RoPE (llama.cpp
    ropes them with freq_scale 1, ext_factor 0, attn_factor 1);
  - both kinds of layer turned by `rope.freq_base`: the graph ropes the sliding layers with the context's one
    base, not `rope.freq_base_swa` (which its loader reads). transformers turns them by the sliding layers'
    own rope_theta; the released models give both the same base. A file whose bases differ is read as
    llama.cpp computes it, and the model's notes say so;
  - YaRN's attention factor 1 + 0.1·ln(factor), which ggml's rope multiplies cos and sin by: llama.cpp's olmo2
    loader does not read `rope.scaling.yarn_attn_factor`, so that factor is never the file's. It is
    transformers' own default (1.2079 for factor 8, the released models' attention_factor); a file that
    gives another is read as llama.cpp computes it, and the notes say so.

An `olmo2` file without a window is OLMo 2's, read as before. Core module: the standard library.
"""

from __future__ import annotations

import math
from pathlib import Path

from .gguf_meta import meta_value

A = "olmo2."


def config_json(meta: dict, tensors: dict, raw: dict, where: Path) -> dict:
    """An olmo2 file with a window as OLMo 3's config.json (`raw`: the keys read already, its layer types
    among them); without one, `raw` as it is."""
    if "sliding_window" not in raw:
        return raw
    theta = raw["rope_theta"]
    scaling = raw.get("rope_scaling")
    full = {**scaling, "rope_theta": theta} if scaling else {"rope_type": "default", "rope_theta": theta}
    out = {k: v for k, v in raw.items() if k not in ("rope_scaling", "rope_theta")}
    out.update(model_type="olmo3", rope_parameters={"full_attention": full,
                                                     "sliding_attention": {"rope_type": "default", "rope_theta": theta}})
    notes = []
    swa = meta_value(meta, A + "rope.freq_base_swa", where, float, theta)
    if not math.isclose(swa, theta, rel_tol=1e-6):
        notes.append(f"{where.name}: the sliding layers turn by rope.freq_base {theta:g}, as llama.cpp's olmo2 graph "
                     f"does, not by rope.freq_base_swa {swa:g} (transformers would use {swa:g})")
    if scaling and scaling.get("rope_type") == "yarn":
        given = meta_value(meta, A + "rope.scaling.yarn_attn_factor", where, float, 0.0)
        default = 1 + 0.1 * math.log(scaling["factor"])
        if given and not math.isclose(given, default, rel_tol=1e-6):
            notes.append(f"{where.name}: YaRN's attention factor is {default:.6g} (1 + 0.1·ln {scaling['factor']:g}), as "
                         f"llama.cpp computes it, not the file's rope.scaling.yarn_attn_factor {given:g}, which its "
                         f"olmo2 loader does not read (transformers would use {given:g})")
    if notes:
        out["_notes"] = notes
    return out
