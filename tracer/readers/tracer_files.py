"""tracer's own sources of weights as checkpoints: a weights file (`tracer.formats.files.save_weights`) and a
scenario (`tracer.scenario`). Core module: numpy and the standard library.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TracerError
from ..core.params import init_weights, param_shapes
from ..tokenizers.tokens import get_tokenizer
from .checkpoint import Checkpoint, Stored


def weights_file(path: Path, seed: int = 0) -> Checkpoint:
    """A weights file written by tracer: its config and every parameter, each array's shape checked
    against the config before any array is read."""
    from ..formats.files import load_weights_file, weights_header

    head = weights_header(path)
    cfg = head.config
    if cfg is None:
        raise TracerError(f"{path}: holds no tracer config; load a Hugging Face folder or a scenario instead")
    shapes = param_shapes(cfg)
    arrays, _ = load_weights_file(path, shapes)
    missing = [k for k in shapes if k not in arrays]
    if missing:  # a weights file is the whole model; a scenario may seed what it leaves out
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise TracerError(f"{path}: parameter {missing[0]!r}{more} is missing; its config needs it")
    fmt = path.suffix.lstrip(".")
    storage = {k: Stored(str(head.dtypes[k]), k, fmt) for k in arrays if k in head.dtypes}
    return Checkpoint(cfg, init_weights(cfg, seed, arrays, where=str(path)), get_tokenizer("gpt2"), path.name,
                      str(path), "tracer weights", "tracer", storage, trained=False, seed=seed)


def scenario_checkpoint(scn) -> Checkpoint:
    """The model a scenario describes (`tracer.scenario.Scenario`)."""
    return Checkpoint(scn.config, scn.params, scn.tokenizer, scn.name, str(scn.path) if scn.path else None,
                      "scenario", "scenario", trained=False, seed=scn.seed)
