"""The one value every reader returns: a `Checkpoint` (what a model file holds, in tracer's terms).

Whatever the source — a Hugging Face folder of one family or another, a GGUF file, a tracer weights
file, a scenario — a reader gives the config (`tracer.core.config.Config`), the parameters under
TransformerLens's names, the tokenizer, how each parameter is stored in the file (`Stored`), where it
came from and how it was trained. `tracer.loaders` turns a Checkpoint into a `Model`; nothing in a
reader knows what a Model is. Core module: the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.config import Config
from ..tokenizers.tokens import Tokenizer


@dataclass(frozen=True)
class Stored:
    """How one parameter is kept in its file: the storage type ("F32", "BF16", "Q4_1", …), the
    tensor's name in the file, the file's format ("safetensors", "gguf", "npz", "toml"), and whether
    the reader cut it out of a fused tensor (Phi-3's qkv_proj, gate_up_proj), and the tensor's bytes."""

    dtype: str  # the storage type as the file names it
    tensor: str  # the tensor's name in the file (a GGUF or transformers name), "" for a value tracer made
    format: str  # safetensors | gguf | npz | toml | seeded
    split: bool = False  # cut by the reader, once, out of a tensor the file stores fused with others (Phi-3)
    nbytes: int = 0  # the tensor's bytes in the file (GGUF files; 0: not counted)


@dataclass(frozen=True)
class Checkpoint:
    config: Config
    params: dict  # TransformerLens name → array (views of the mapped file where they can be)
    tokenizer: Tokenizer
    name: str  # what the user called it (gpt2-medium, HuggingFaceTB/SmolLM2-135M, the folder, …)
    source: str | None = None  # the path it was read from (None: built in)
    format: str = ""  # "gpt2 folder", "llama folder", "gguf", "tracer weights", "scenario", "built in"
    family: str = ""  # model_type / GGUF architecture: gpt2, llama, qwen2, mistral, …
    storage: dict = field(default_factory=dict)  # TransformerLens name → Stored (absent: made by tracer)
    fused_qkv: list | None = None  # each layer's [W_Q | W_K | W_V] when the reader holds it already (no copy)
    trained: bool = True
    seed: int | None = None  # the seed of weights tracer drew (None: every weight read)
    training: dict | None = None  # training.json, when `tracer train` made the weights
    chat_template: str | None = None  # the model's chat template (jinja), when it ships one
    notes: tuple = ()  # what the reader noticed and the user should read once (dropped bytes, …)
    examples: dict = field(default_factory=dict)  # storage type → one number worked from its block's bytes
    lazy: object = None  # a lazy read's `tracer.readers.source.Source` (then `params` is empty: nothing expanded yet)
    sampling: dict = field(default_factory=dict)  # the settings its file suggests (a GGUF's general.sampling.*), by name
    sampling_unused: dict = field(default_factory=dict)  # its suggestions of samplers tracer does not have, by key

    def storage_summary(self) -> dict[str, int]:
        """Storage type → how many parameters are stored as it (a dictionary in file order)."""
        out: dict[str, int] = {}
        for s in self.storage.values():
            out[s.dtype] = out.get(s.dtype, 0) + 1
        return out
