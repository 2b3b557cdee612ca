"""Which module reads each family built on the Llama block: config.json's `model_type` → its reader
(`config_of`, `hf_shapes`, `translate`, `file_names`, `read`). The folder registry
(`tracer.readers.FOLDER_FAMILIES`) and the GGUF reader (which renames a file's tensors to the
family's) both look a family up here. Modules are imported when used: `tracer --help` stays fast.
Core module: the standard library.
"""

from __future__ import annotations

from importlib import import_module

BLOCK_FAMILIES = {"llama": "llama", "qwen2": "llama", "mistral": "llama", "qwen3": "qwen3", "olmo2": "olmo2", "phi3": "phi3",
                  "gemma3_text": "gemma3", "gemma2": "gemma2", "gpt_oss": "gpt_oss", "qwen3_moe": "moe", "olmoe": "moe",
                  "qwen2_moe": "moe", "mixtral": "mixtral", "qwen3_5_text": "qwen3_5", "smollm3": "smollm3", "olmo3": "olmo3",
                  "gemma4_text": "gemma4"}


def family_module(model_type: str):
    """The reader module of a Llama-block family."""
    return import_module(f"{__package__}.{BLOCK_FAMILIES[model_type]}")
