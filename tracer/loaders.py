"""`tracer.load(name_or_path)`: every way a `Model` is built, in one place.

Understood: "abc" (the default: a small GPT-2 trained by `tracer train`, shipped in
`tracer/models/abc`), "tiny" (an untrained 24-layer model), a scenario name or `.toml` file, a weights file
(`.npz` / `.safetensors` written by tracer), a GGUF file (llama.cpp, Ollama, LM Studio), a folder
holding a Hugging Face GPT-2, Llama, Qwen2 or Mistral (`config.json` + `model.safetensors`), or such
a name found in the local Hugging Face cache. Every reader (`tracer.readers`) gives a `Checkpoint`;
`model_of` turns it into a `Model`, so that nothing below this module needs to know what a Model is.
"""

from __future__ import annotations

from pathlib import Path

from .core.config import DEFAULT_MODEL, GPT2_SHAPES, TINY
from .errors import TracerError, ValueRefused, near
from .core.fast import layout
from .model import Model
from .core.params import init_weights
from .run.settings import check_seed
from .tokenizers.tokens import get_tokenizer

SHIPPED = Path(__file__).resolve().parent / "models"  # trained models that come with tracer, one folder each
BUILTIN = {
    "abc": "the default: a 4-layer GPT-2 (d_model 64, 4 heads) trained by `tracer train` on `tracer corpus`'s corpus",
    "tiny": "the GPT-2 block and tokenizer, 24 layers, d_model 8, 2 heads, seeded untrained weights",
}


def tiny(seed: int = 0) -> Model:
    return Model(TINY, init_weights(TINY, seed), get_tokenizer("gpt2"), "tiny", seed)


def load(name_or_path: str = DEFAULT_MODEL, seed: int = 0, progress=None, memory=None) -> Model:
    """A model by name or path; see the module docstring for what is understood. `seed`: the seed of
    weights not given (the untrained models'). `progress`: see `tracer.readers.folder.read_checked`.
    `memory`: the budget for weights expanded to float32, in bytes or as a size ("6GB", "500MB");
    default: half the memory available (`tracer.core.memory.default_budget`). A Hugging Face folder or a
    GGUF file that needs more is expanded layer by layer as passes reach each layer (`tracer.core.streamed`)."""
    name = str(name_or_path)
    seed = check_seed(seed)
    budget = memory_budget(memory)
    if name == "tiny":
        return tiny(seed)
    if name in BUILTIN:
        return hf_model(SHIPPED / name, name=name, memory=budget)
    if not name.strip() or "\x00" in name:
        raise TracerError(f"model {name!r}: not a model name or path; try {DEFAULT_MODEL!r} (the default), 'tiny' or 'gpt2'")
    try:
        return _load_path(name, Path(name).expanduser(), seed, progress, budget)
    except OSError as e:  # a name too long for a path, a folder we may not read, …
        raise TracerError(f"model {name[:80]!r}: cannot read it ({e.strerror or e})") from None


def memory_budget(memory) -> int | None:
    """`memory` (a `Size`, a size such as '6GB', or a number of bytes) as bytes (None stays None: the
    default budget, worked out when a model needs it)."""
    from .core.memory import Size, parse_size

    if memory is None:
        return None
    if isinstance(memory, str):
        memory = parse_size(memory)
    if isinstance(memory, Size):
        return memory.bytes
    if isinstance(memory, bool) or not isinstance(memory, (int, float)) or not 0 < memory < 2**62:
        raise ValueRefused(f"a memory budget of {memory!r}: expected a number of bytes > 0 or a size such as '6GB'",
                           "memory")
    return int(memory)


def _load_path(name: str, path: Path, seed: int, progress, budget: int | None = None) -> Model:
    from . import scenario
    from .readers import read_path
    from .readers.places import lmstudio_file, ollama_blob

    if name.startswith("ollama:"):  # Ollama's blobs are GGUF files, found through its manifests
        return model_of(read_path(ollama_blob(name.removeprefix("ollama:")), name, seed, progress, lazy=True), budget)
    if path.suffix.lower() == ".gguf" and not path.exists():  # LM Studio's folders, by file name
        path = lmstudio_file(name) or path
    found_here = read_path(path, None, seed, progress, lazy=True)  # a folder, a .gguf, a .toml, a weights file
    if found_here is not None:
        return model_of(found_here, budget)
    from .readers.hub import cached_folder, hub_repos, is_repo_id

    if name in GPT2_SHAPES or name.startswith(("openai-community/", "distilbert/")):
        return hf_model(cached_folder(name), name=hub_repos(name)[0], progress=progress, memory=budget)
    found = scenario.find_scenario(name)
    if found is not None:
        return scenario_model(scenario.load_scenario(found))
    if is_repo_id(name) and not path.exists():  # HuggingFaceTB/SmolLM2-135M: from the local Hugging Face cache
        return hf_model(cached_folder(name), name=name, progress=progress, memory=budget)
    if path.exists():
        raise TracerError(f"{path}: not a model (expected a folder with config.json, a .gguf file, a .toml scenario "
                          f"or a weights file)")
    known = list(BUILTIN) + list(GPT2_SHAPES)
    try:
        scenarios = list(scenario.shipped())
    except OSError:
        scenarios = []
    from .readers.inventory import near_model

    raise TracerError(f"model {name!r}: not found{near_model(name) or near(name, known + scenarios)}; known names: {', '.join(known)}, "
                      f"a scenario ({', '.join(scenarios) or 'a .toml file'}), ollama:NAME[:TAG], or a path "
                      f"(`tracer models` lists what this machine has)")


def model_of(ck, memory: int | None = None) -> Model:
    """The `Model` of a `tracer.readers.Checkpoint`: its weights laid out for the products once
    (with the reader's fused Q|K|V matrices where it holds them: no copy). A lazy checkpoint (its
    `lazy` source) is expanded whole when it fits the budget `memory` (bytes; None: the default),
    else layer by layer (`tracer.core.expansion.streamed_weights`)."""
    params, fused, weights, expansion = ck.params, ck.fused_qkv, None, None
    if ck.lazy is not None:
        from .core.expansion import expand

        params, fused, weights, expansion = expand(ck.lazy, memory)
    if weights is None and fused is not None:
        weights = layout(ck.config, params, W_qkv=fused)
    return Model(ck.config, params, ck.tokenizer, ck.name, seed=ck.seed, trained=ck.trained, weights=weights,
                 source=ck.source, training=ck.training, storage=ck.storage, chat_template=ck.chat_template,
                 notes=ck.notes, storage_examples=ck.examples, expansion=expansion,
                 sampling=(ck.sampling, ck.sampling_unused))


def hf_model(folder, name: str | None = None, progress=None, memory: int | None = None) -> Model:
    """A Hugging Face folder (config.json + model.safetensors) of any family `tracer.readers` knows."""
    from .readers import read_folder

    return model_of(read_folder(folder, name, progress, lazy=True), memory)


def scenario_model(scn) -> Model:
    """The model a scenario describes (`tracer.scenario.Scenario`)."""
    from .readers.tracer_files import scenario_checkpoint

    return model_of(scenario_checkpoint(scn))


from . import model as _model  # noqa: E402

_model.LOAD = load  # a draft model named by `Model.generate(draft=…)` is loaded as any model is
