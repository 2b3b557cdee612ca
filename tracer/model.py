"""The Python API: `tracer.load(name_or_path)` → `Model`; `model.run(prompt)` → `Trace`.

As small as TransformerLens's `run_with_cache`:

    import tracer
    model = tracer.load("tiny")                 # the embedded, untrained 24-layer model
    trace = model.run("A B C")                   # every intermediate, by hook name
    trace["blocks.0.attn.hook_pattern"]          # [head, query_pos, key_pos]
    gen = model.generate("A B C", max_new_tokens=3)

`load` understands: "tiny" (the default embedded model), a scenario name or `.toml` file, a
weights file (`.npz` / `.safetensors` written by tracer), a folder holding a Hugging Face GPT-2
(`config.json` + `model.safetensors`), or a GPT-2 name found in the local Hugging Face cache.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .config import GPT2_SHAPES, TINY, Config
from .decoder import Fused, forward, fuse
from .errors import TracerError, near
from .record import Recorder
from .tokens import Tokenizer, check_prompt, get_tokenizer
from .trace import Generation, Trace
from .weights import Params, init_weights, load_weights_file

__version__ = "0.1.0"

BUILTIN = {"tiny": "the embedded model: GPT-2 block and tokenizer, 24 layers, d_model 8, 2 heads, seeded untrained weights"}


class Model:
    def __init__(self, config: Config, params: Params, tokenizer: Tokenizer, name: str = "custom",
                 seed: int | None = None, trained: bool = False, fused: Fused | None = None, source: str | None = None):
        if tokenizer.n_vocab > config.d_vocab:
            raise TracerError(
                f"model {name}: the tokenizer has {tokenizer.n_vocab} tokens but the model only {config.d_vocab}"
            )
        self.config = config
        self.params = params
        self.tokenizer = tokenizer
        self.name = name
        self.seed = seed
        self.trained = trained
        self.source = source
        self.fused = fused if fused is not None else fuse(config, params)

    def meta(self) -> dict:
        return {"model": self.name, "tokenizer": self.tokenizer.spec(), "seed": self.seed,
                "trained": self.trained, "tracer_version": __version__}

    def tokenize(self, prompt_or_ids, truncate: str | None = None, room: int = 0) -> list[int]:
        """Token ids for a prompt string, a list of words (word-list vocabularies) or a list of ids.

        A prompt longer than the context (less `room` positions kept free for new tokens) is an
        error, or with `truncate="left"` keeps its last tokens, with `"right"` its first.
        """
        ids, _ = self._tokenize(prompt_or_ids, truncate, room)
        return ids

    def _tokenize(self, prompt_or_ids, truncate: str | None, room: int) -> tuple[list[int], dict | None]:
        if truncate not in (None, "left", "right"):
            raise TracerError(f"truncate must be 'left' (keep the end) or 'right' (keep the start), got {truncate!r}")
        if isinstance(prompt_or_ids, str):
            ids = self.tokenizer.encode(check_prompt(prompt_or_ids))
        else:
            items = list(prompt_or_ids)
            if items and all(isinstance(t, str) for t in items) and hasattr(self.tokenizer, "ids"):
                ids = self.tokenizer.ids(items)
            else:
                ids = []
                for t in items:
                    if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
                        raise TracerError(f"prompt: token ids must be whole numbers, got {t!r}")
                    if not 0 <= int(t) < self.config.d_vocab:
                        raise TracerError(f"prompt: token id {t} is outside the vocabulary 0..{self.config.d_vocab - 1}")
                    ids.append(int(t))
        if not ids:
            raise TracerError("prompt: empty; give at least one token")
        n_ctx = self.config.n_ctx
        fits = n_ctx - room  # prompt tokens that leave room for the new ones
        if len(ids) <= fits:
            return ids, None
        if fits < 1:
            raise TracerError(f"max-new-tokens {room} leaves no room for the prompt in the model's context of {n_ctx:,}")
        if truncate is None:
            if len(ids) > n_ctx:
                raise TracerError(
                    f"prompt: {len(ids):,} tokens, longer than the model's context of {n_ctx:,} tokens; shorten it, "
                    f"or truncate it (--truncate left keeps its end, --truncate right its start)"
                )
            raise TracerError(
                f"max-new-tokens {room:,} overflows the context: the prompt has {len(ids):,} tokens and the model reads "
                f"at most {n_ctx:,} (so at most {n_ctx - len(ids):,} new tokens, or --truncate left|right)"
            )
        kept = ids[-fits:] if truncate == "left" else ids[:fits]
        note = {"side": truncate, "prompt_tokens": len(ids), "kept": fits, "dropped": len(ids) - fits}
        return kept, note

    def run(self, prompt_or_ids, names=None, truncate: str | None = None) -> Trace:
        """One recorded forward pass. `names`: globs of hook names to keep (None: everything)."""
        ids, note = self._tokenize(prompt_or_ids, truncate, 0)
        rec = Recorder(names)
        forward(self.config, self.params, ids, rec, fused=self.fused)
        meta = self.meta()
        if isinstance(prompt_or_ids, str):
            meta["prompt"] = prompt_or_ids
        if note:
            meta["truncated"] = note
        return Trace(rec.store, np.asarray(ids, dtype=np.int64), self.config,
                     [self.tokenizer.token_str(t) for t in ids], meta, 0)

    def generate(self, prompt_or_ids, max_new_tokens: int = 1, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int = 0, cache: bool = True, stop=None, names=None,
                 on_step=None, truncate: str | None = None, lens: bool | None = None) -> Generation:
        """Generate up to `max_new_tokens` tokens; every pass and sampling draw is recorded.

        With `truncate`, a prompt too long for the context keeps its last (`"left"`) or first
        (`"right"`) tokens, leaving room for the new ones; `gen.meta["truncated"]` says how many.
        """
        from .generate import generate

        check_seed(seed)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
            raise TracerError(f"max-new-tokens must be a whole number ≥ 0, got {max_new_tokens!r}")
        ids, note = self._tokenize(prompt_or_ids, truncate, int(max_new_tokens) if truncate else 0)
        gen = generate(self, ids, max_new_tokens, temperature, top_k, top_p, seed, cache, stop, names, on_step, lens)
        extra = {}
        if isinstance(prompt_or_ids, str):
            extra["prompt"] = prompt_or_ids
        if note:
            extra["truncated"] = note
        gen.meta.update(extra)
        for s in gen.steps:
            s.meta.update(extra)
        return gen

    def __repr__(self) -> str:
        c = self.config
        return (f"Model({self.name!r}: {c.n_layers} layers, d_model {c.d_model}, {c.n_heads} heads, "
                f"vocab {c.d_vocab}, {self.tokenizer.name} tokenizer)")


def check_seed(seed) -> int:
    """Seeds are whole numbers ≥ 0 (numpy's generators take no negative seed)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TracerError(f"seed must be a whole number ≥ 0, got {seed!r}")
    return int(seed)


def tiny(seed: int = 0) -> Model:
    return Model(TINY, init_weights(TINY, seed), get_tokenizer("gpt2"), "tiny", seed)


def load(name_or_path: str = "tiny", seed: int = 0) -> Model:
    """A model by name or path; see the module docstring for what is understood."""
    name = str(name_or_path)
    check_seed(seed)
    if name == "tiny":
        return tiny(seed)
    if not name.strip() or "\x00" in name:
        raise TracerError(f"model {name!r}: not a model name or path; try 'tiny' (the default) or 'gpt2'")
    try:
        return _load_path(name, Path(name).expanduser(), seed)
    except OSError as e:  # a name too long for a path, a folder we may not read, …
        raise TracerError(f"model {name[:80]!r}: cannot read it ({e.strerror or e})") from None


def _load_path(name: str, path: Path, seed: int) -> Model:
    if path.suffix == ".toml":
        from .scenario import load_scenario

        return load_scenario(path).model
    if path.is_dir():
        from .hf import load_hf_dir

        return load_hf_dir(path)
    if path.suffix in (".npz", ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl"):
        arrays, cfg = load_weights_file(path)
        if cfg is None:
            raise TracerError(f"{path}: holds no tracer config; load a Hugging Face folder or a scenario instead")
        from .weights import param_shapes

        missing = [k for k in param_shapes(cfg) if k not in arrays]
        if missing:  # a weights file is the whole model; a scenario may seed what it leaves out
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise TracerError(f"{path}: parameter {missing[0]!r}{more} is missing; its config needs it")
        return Model(cfg, init_weights(cfg, seed, arrays, where=str(path)), get_tokenizer("gpt2"), path.name, seed)
    if name in GPT2_SHAPES or name.startswith(("openai-community/", "distilbert/")):
        from .hf import load_hf_name

        return load_hf_name(name)
    try:
        from .scenario import find_scenario, load_scenario

        found = find_scenario(name)
    except ImportError:
        found = None
    if found is not None:
        return load_scenario(found).model
    if path.exists():
        raise TracerError(f"{path}: not a model (expected a folder with config.json, a .toml scenario or a weights file)")
    known = list(BUILTIN) + list(GPT2_SHAPES)
    try:
        from .scenario import shipped

        scenarios = list(shipped())
    except (ImportError, OSError):
        scenarios = []
    raise TracerError(f"model {name!r}: not found{near(name, known + scenarios)}; known names: {', '.join(known)}, "
                      f"a scenario ({', '.join(scenarios) or 'a .toml file'}), or a path")
