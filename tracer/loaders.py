"""`tracer.load(name_or_path)`: every way a `Model` is built, in one place.

Understood: "abc" (the default: a small GPT-2 trained by `tracer train`, shipped in
`tracer/models/abc`), "tiny" (an untrained 24-layer model), a scenario name or `.toml` file, a weights file
(`.npz` / `.safetensors` written by tracer), a folder holding a Hugging Face GPT-2, Llama, Qwen2
or Mistral (`config.json` + `model.safetensors`), or such a name found in the local Hugging Face
cache. The readers (`tracer.hf`, `tracer.families`, `tracer.scenario`, `tracer.files`) give a config and arrays; this
module turns them into a `Model`, so that nothing below it needs to know what a Model is.
"""

from __future__ import annotations

from pathlib import Path

from .config import DEFAULT_MODEL, GPT2_SHAPES, TINY
from .errors import TracerError, near
from .fast import layout
from .files import PICKLED_SUFFIXES
from .model import Model
from .params import init_weights, param_shapes
from .settings import check_seed
from .tokens import get_tokenizer

SHIPPED = Path(__file__).resolve().parent / "models"  # trained models that come with tracer, one folder each
BUILTIN = {
    "abc": "the default: a 4-layer GPT-2 (d_model 64, 4 heads) trained by `tracer train` on tools/make_corpus.py's corpus",
    "tiny": "the GPT-2 block and tokenizer, 24 layers, d_model 8, 2 heads, seeded untrained weights",
}


def tiny(seed: int = 0) -> Model:
    return Model(TINY, init_weights(TINY, seed), get_tokenizer("gpt2"), "tiny", seed)


def load(name_or_path: str = DEFAULT_MODEL, seed: int = 0, progress=None) -> Model:
    """A model by name or path; see the module docstring for what is understood. `seed`: the seed of
    weights not given (the untrained models'). `progress`: see `tracer.hf.read_folder`."""
    name = str(name_or_path)
    seed = check_seed(seed)
    if name == "tiny":
        return tiny(seed)
    if name in BUILTIN:
        return hf_model(SHIPPED / name, name=name)
    if not name.strip() or "\x00" in name:
        raise TracerError(f"model {name!r}: not a model name or path; try {DEFAULT_MODEL!r} (the default), 'tiny' or 'gpt2'")
    try:
        return _load_path(name, Path(name).expanduser(), seed, progress)
    except OSError as e:  # a name too long for a path, a folder we may not read, …
        raise TracerError(f"model {name[:80]!r}: cannot read it ({e.strerror or e})") from None


def _load_path(name: str, path: Path, seed: int, progress) -> Model:
    from . import scenario

    if path.suffix == ".toml":
        return scenario_model(scenario.load_scenario(path))
    if path.is_dir():
        return hf_model(path, progress=progress)
    if path.suffix in (".npz", ".safetensors") + PICKLED_SUFFIXES:
        return weights_file_model(path, seed)
    from .hub import cached_folder, hub_repos, is_repo_id

    if name in GPT2_SHAPES or name.startswith(("openai-community/", "distilbert/")):
        return hf_model(cached_folder(name), name=hub_repos(name)[0], progress=progress)
    found = scenario.find_scenario(name)
    if found is not None:
        return scenario_model(scenario.load_scenario(found))
    if is_repo_id(name) and not path.exists():  # HuggingFaceTB/SmolLM2-135M: from the local Hugging Face cache
        return hf_model(cached_folder(name), name=name, progress=progress)
    if path.exists():
        raise TracerError(f"{path}: not a model (expected a folder with config.json, a .toml scenario or a weights file)")
    known = list(BUILTIN) + list(GPT2_SHAPES)
    try:
        scenarios = list(scenario.shipped())
    except OSError:
        scenarios = []
    raise TracerError(f"model {name!r}: not found{near(name, known + scenarios)}; known names: {', '.join(known)}, "
                      f"a scenario ({', '.join(scenarios) or 'a .toml file'}), or a path")


def weights_file_model(path: Path, seed: int = 0) -> Model:
    """A weights file written by tracer (`tracer.files.save_weights`): its config and every parameter,
    each array's shape checked against the config before any array is read."""
    from .files import load_weights_file, weights_header

    cfg = weights_header(path).config
    if cfg is None:
        raise TracerError(f"{path}: holds no tracer config; load a Hugging Face folder or a scenario instead")
    shapes = param_shapes(cfg)
    arrays, _ = load_weights_file(path, shapes)
    missing = [k for k in shapes if k not in arrays]
    if missing:  # a weights file is the whole model; a scenario may seed what it leaves out
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise TracerError(f"{path}: parameter {missing[0]!r}{more} is missing; its config needs it")
    return Model(cfg, init_weights(cfg, seed, arrays, where=str(path)), get_tokenizer("gpt2"), path.name, seed)


def hf_model(folder, name: str | None = None, progress=None) -> Model:
    """A Hugging Face folder (config.json + model.safetensors): a GPT-2 (either key layout, GPT-2's
    tokenizer) or a Llama / Qwen2 / Mistral (the folder's own tokenizer.json)."""
    from . import families, hf

    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise TracerError(f"{folder}: not a folder")
    family = families.model_type(folder) in families.FAMILIES
    cfg, params, W_qkv, where, training = (families if family else hf).read_folder(folder, name, progress)
    tokenizer = get_tokenizer({"kind": "tokenizer.json", "path": str(folder)} if family else "gpt2")
    return Model(cfg, params, tokenizer, name or str(folder), trained=True,
                 weights=layout(cfg, params, W_qkv=W_qkv), source=where, training=training)


def scenario_model(scn) -> Model:
    """The model a scenario describes (`tracer.scenario.Scenario`)."""
    return Model(scn.config, scn.params, scn.tokenizer, name=scn.name, seed=scn.seed,
                 source=str(scn.path) if scn.path else None)
