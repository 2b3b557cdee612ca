"""The Python API's model: `Model.run(prompt)` → `Trace`, `Model.generate(prompt, …)` → `Generation`.

As small as TransformerLens's `run_with_cache`:

    import tracer
    model = tracer.load("tiny")                 # the embedded, untrained 24-layer model
    trace = model.run("A B C")                   # every intermediate, by hook name
    trace["blocks.0.attn.hook_pattern"]          # [head, query_pos, key_pos]
    gen = model.generate("A B C", max_new_tokens=3)

A `Model` is a config, its parameters (TransformerLens names), their fast layout and a
tokenizer; `tracer.load` builds one from a name or a path. Core module: imports numpy only.
"""

from __future__ import annotations

import numpy as np

from .core.backward import attribution, loss_and_grads
from .core.config import Config
from .core.decoder import forward, hook_names
from .errors import TracerError, ValueRefused
from .core.fast import Weights, layout
from .run.generate import check_run, generate
from .core.params import Params, param_shapes
from .core.record import Hooks, Recorder
from .run.settings import GenerationSettings, SettingError
from .tokenizers.tokens import Prompt, Tokenizer, encode_prompt
from .run.trace import Generation, Trace
from .version import __version__



LOAD = None  # how a model is loaded by name (`tracer.loaders.load`, which sits above and enters itself here): a draft's


def check_prompt_kind(prompt_or_ids) -> None:
    """A TracerError for what is neither a prompt string nor a sequence of ids or words: bytes (whose
    bytes would be read as token ids: b"A B" → 65, 32, 66), None, a number, a table."""
    if isinstance(prompt_or_ids, (bytes, bytearray, memoryview)):
        raise TracerError("prompt: bytes; give a str (decode it first, e.g. b.decode('utf-8')) or a list of token ids")
    if isinstance(prompt_or_ids, str):
        return
    if isinstance(prompt_or_ids, (dict, set, frozenset)) or not hasattr(prompt_or_ids, "__iter__") or \
            (isinstance(prompt_or_ids, np.ndarray) and prompt_or_ids.ndim != 1):
        raise TracerError(f"prompt: expected a string or a list of token ids, got {type(prompt_or_ids).__name__}")


class Model:
    def __init__(self, config: Config, params: Params, tokenizer: Tokenizer, name: str = "custom",
                 seed: int | None = None, trained: bool = False, weights: Weights | None = None,
                 source: str | None = None, training: dict | None = None, storage: dict | None = None,
                 chat_template: str | None = None, notes: tuple = (), storage_examples: dict | None = None,
                 expansion: dict | None = None, sampling: tuple = ({}, {})):
        if tokenizer.n_vocab > config.d_vocab:
            raise TracerError(
                f"model {name}: the tokenizer has {tokenizer.n_vocab} tokens but the model only {config.d_vocab}"
            )
        self.config = config
        self.params = params  # name → array, TransformerLens's names
        self.tokenizer = tokenizer
        self.name = name
        self.seed = seed  # the seed its weights were drawn with, where they were drawn
        self.trained = trained
        self.training = training  # how `tracer train` made these weights (its training.json), if it did
        self.source = source
        self.storage = dict(storage or {})  # TransformerLens name → how its file stores it (`readers.Stored`)
        self.chat_template = chat_template  # the model's chat template (jinja), when it ships one
        self.notes = tuple(notes)  # what its reader noticed that the user should read once
        self.storage_examples = dict(storage_examples or {})  # storage type → one number worked from its bytes
        self._hook_names: list[str] | None = None  # every name forward records, found when a hook is first given
        self.weights = weights if weights is not None else layout(config, params)  # what the decoder reads
        self.expansion = expansion  # how a read model's weights became float32 (`tracer.core.expansion`), if it was read
        # the sampling settings its file suggests (a GGUF's general.sampling.*, `sampling="file"` uses them), by setting
        # name, and its suggestions of samplers tracer does not have, by key
        self.sampling, self.sampling_unused = dict(sampling[0]), dict(sampling[1])

    @property
    def streamed(self) -> bool:
        """Whether its layers are expanded layer by layer as passes reach them (`tracer.core.streamed`)."""
        return not isinstance(self.weights.layers, list)

    def _whole(self, what: str) -> None:
        if self.streamed:
            raise ValueRefused(f"{what} needs every weight expanded at once; this model runs layer by layer "
                               f"({self.expansion['text'] if self.expansion else 'streamed'}): a larger memory budget "
                               f"expands it whole", "memory")

    def meta(self) -> dict:
        meta = {"model": self.name, "tokenizer": self.tokenizer.spec(), "seed": self.seed,
                "trained": self.trained, "tracer_version": __version__}
        if self.storage:  # each parameter's storage type in its file (F32, BF16, Q4_1, …)
            meta["storage"] = {k: s.dtype for k, s in self.storage.items()}
            sizes = {k: s.nbytes for k, s in self.storage.items() if getattr(s, "nbytes", 0)}
            if sizes:  # each parameter's tensor's bytes in the file: the header's storage line by role
                meta["storage_bytes"] = sizes
            shapes = param_shapes(self.config)  # how many numbers each holds: the header counts numbers, not tensors
            meta["storage_numbers"] = {k: int(np.prod(shapes[k])) for k in self.storage if k in shapes}
            split = {k: s.tensor for k, s in self.storage.items() if getattr(s, "split", False)}
            if split:  # parameters the reader cut out of a fused tensor (Phi-3): the walkthrough says where
                meta["split_from"] = split
        if self.storage_examples:
            meta["storage_examples"] = self.storage_examples
        if self.expansion:  # expanded once, or layer by layer within a budget
            meta["expansion"] = dict(self.expansion)
        if self.sampling or self.sampling_unused:  # what the file suggests (the header says it)
            meta["file_sampling"] = {"settings": dict(self.sampling), "unused": dict(self.sampling_unused)}
        if self.training:  # what a trace's header says instead of "untrained" (without the loss curve)
            meta["training"] = {k: v for k, v in self.training.items() if k != "losses"}
        return meta

    def tokenize(self, prompt_or_ids, truncate: str | None = None, room: int = 0) -> list[int]:
        """Token ids for a prompt string, a list of words (word-list vocabularies) or a list of ids.

        A prompt longer than the context (less `room` positions kept free for new tokens) is an
        error, or with `truncate="left"` keeps its last tokens, with `"right"` its first.
        """
        return list(self.prompt(prompt_or_ids, truncate, room).ids)

    def prompt(self, prompt_or_ids, truncate: str | None = None, room: int = 0, chat: bool = False) -> Prompt:
        """The prompt as a `Prompt` (ids, the text, the truncation note), checked against the context
        with `room` positions left free; a Prompt is returned as it is. `chat=True`: the prompt is a
        user message (or a list of messages) put through the model's chat template (`chat_prompt`),
        tokenized as `apply_chat_template` tokenizes it."""
        if isinstance(prompt_or_ids, Prompt):
            return prompt_or_ids
        if chat:
            from dataclasses import replace

            text = self.chat_prompt(prompt_or_ids)
            ids = self.chat_ids(prompt_or_ids)
            return replace(encode_prompt(self.tokenizer, ids, self.config.n_ctx, self.config.d_vocab, truncate, room),
                           text=text)
        check_prompt_kind(prompt_or_ids)
        return encode_prompt(self.tokenizer, prompt_or_ids, self.config.n_ctx, self.config.d_vocab, truncate, room)

    def chat_prompt(self, messages, add_generation_prompt: bool = True) -> str:
        """The model's chat template applied to `messages` ([{"role": "user", "content": "…"}, …], or
        one user message as a string), rendered as transformers' `apply_chat_template` renders it
        (`tracer.tokenizers.chat`). The text holds the template's special tokens (`<|im_start|>`), which
        tokenize as the single tokens they are."""
        from .tokenizers.chat import render_chat

        if self.chat_template is None:
            raise TracerError(f"model {self.name}: has no chat template (it is not an instruct/chat model, or its "
                              f"files do not ship tokenizer.chat_template / tokenizer_config.json's chat_template)")
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        tok = self.tokenizer
        return render_chat(self.chat_template, messages, bos_token=getattr(tok, "bos_token", None) or "",
                           eos_token=getattr(tok, "eos_token", None) or "", add_generation_prompt=add_generation_prompt,
                           source=getattr(self.chat_template, "source", None) or f"of the model {self.name}")

    def chat_ids(self, messages, add_generation_prompt: bool = True) -> list[int]:
        """The ids of `chat_prompt(messages)`: what `apply_chat_template(messages, add_generation_prompt=True)` gives."""
        from .tokenizers.chat import chat_ids

        return chat_ids(self.tokenizer, self.chat_prompt(messages, add_generation_prompt))

    def hooks(self, hooks: dict | None) -> Hooks | None:
        """`{hook name or glob: fn}` checked against the names this model records (`tracer.core.record.Hooks`)."""
        if hooks is None:
            return None
        if self._hook_names is None:
            self._hook_names = hook_names(self.config)
        return Hooks(hooks, self._hook_names)

    def run(self, prompt_or_ids, names=None, truncate: str | None = None, chat: bool = False,
            hooks: dict | None = None) -> Trace:
        """One recorded forward pass. `names`: globs of hook names to keep (None: everything).
        `chat`: the prompt goes through the model's chat template first (see `prompt`). `hooks`:
        {name or glob: fn(value)} returning the value to use instead (TransformerLens's `run_with_hooks`;
        `fn` gets the hook point's name too when it asks for it: `tracer.core.record.name_passing`); the
        trace records the replaced values and `meta["hooked"]` names them."""
        prompt = self.prompt(prompt_or_ids, truncate, chat=chat)
        hooked = self.hooks(hooks)
        rec = Recorder(names, self.config, hooks=hooked)
        with np.errstate(all="ignore"):  # overflow is recorded where it arises (∞, NaN), not warned about
            forward(self.config, self.weights, prompt.ids, rec)
        meta = {**self.meta(), **prompt.meta(), **({"hooked": list(hooked.changed)} if hooked is not None else {})}
        return Trace(rec.store, np.asarray(prompt.ids, dtype=np.int64), self.config,
                     [self.tokenizer.token_str(t) for t in prompt.ids], meta, 0, tokenizer=self.tokenizer)

    def generate(self, prompt_or_ids, names=None, on_step=None, truncate: str | None = None, lens: bool | None = None,
                 settings: GenerationSettings | None = None, chat: bool = False, hooks: dict | None = None,
                 on_layer=None, **given) -> Generation:
        """Generate up to `max_new_tokens` tokens; every pass and sampling draw is recorded.

        The generation settings are keywords named as `tracer.run.settings.SETTINGS` names them
        (`max_new_tokens=1`, `temperature=0.0`, `top_k`, `top_p`, `seed=0`, `cache=True`, `stop`, …),
        or `settings`, a `GenerationSettings` (keywords given with it replace its values).
        `prompt_or_ids` may be a `Prompt` (`Model.prompt`): then it is not tokenized again. `chat=True`
        puts the prompt through the model's chat template (generation stops at its end token). `hooks`:
        as in `run`, applied in every pass (the KV cache holds the keys and values they gave). With
        `truncate`, a prompt too long for the context keeps its last (`"left"`) or first
        (`"right"`) tokens, leaving room for the new ones; `gen.meta["truncated"]` says how many.
        `on_layer()`: called before every layer of every pass and before the logit lens's chunks (what it
        raises ends the run there: a deadline); `on_step(done, total)` after each pass.
        """
        settings = GenerationSettings(**given) if settings is None else settings.replace(**given)
        if settings.sampling == "file":  # the file's suggestions, where nothing was asked for
            if not self.sampling:
                raise SettingError("sampling", f"file: the model {self.name}'s file suggests no sampling settings "
                                               f"(a GGUF file's general.sampling.* keys)")
            settings = settings.suggested(self.sampling)
        check_run(self, settings)
        draft = self.draft_model(settings.draft) if settings.draft is not None else None
        prompt = self.prompt(prompt_or_ids, truncate, settings.max_new_tokens, chat=chat)
        gen = generate(self, list(prompt.ids), settings, names, on_step, lens, self.hooks(hooks), draft=draft,
                       on_layer=on_layer)
        for meta in [gen.meta] + [s.meta for s in gen.passes]:
            meta.update(prompt.meta())
        return gen

    def draft_model(self, draft: str) -> "Model":
        """The model that proposes tokens in speculative decoding (`draft=`): `layer:L`, this model's own first L + 1
        layers, then its final norm and unembedding (the logit lens after layer L, sharing these weights); else a
        model name or path, loaded, whose vocabulary must be this model's. Made once per name."""
        from .run.settings import draft_layer
        from .run.speculative import check_draft, first_layers

        made = self.__dict__.setdefault("_drafts", {})
        if draft in made:
            return made[draft]
        L = draft_layer(draft)
        if L is not None:
            n = self.config.n_layers
            if not 0 <= L < n:
                raise SettingError("draft", f"{draft}: layer {L} is not one of this model's layers 0–{n - 1}")
            self._whole(f"self-speculation (--draft {draft})")
            from dataclasses import replace

            made[draft] = Model(first_layers(self.config, L + 1), self.params, self.tokenizer,
                                name=f"{self.name}, layers 0–{L} + logit lens", seed=self.seed, trained=self.trained,
                                weights=replace(self.weights, layers=self.weights.layers[: L + 1]), source=self.source)
        else:
            other = LOAD(draft)
            check_draft(self, other, draft)
            made[draft] = other
        return made[draft]

    def attribute(self, prompt_or_ids, target: int | None = None) -> dict:
        """Which input position mattered to the next token: gradient × input at each prompt position for
        the last position's logit of `target` (default: the most likely next token), from tracer's own
        backward pass (`tracer.core.backward.attribution`). {"target_id", "per_position"}."""
        self._whole("attribution (the backward pass)")
        ids = np.asarray(self.prompt(prompt_or_ids).ids, dtype=np.int64)
        if target is None:
            target = int(np.argmax(self.run(ids.tolist(), names=["logits"])["logits"][-1]))
        if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or not 0 <= int(target) < self.config.d_vocab:
            raise TracerError(f"attribute: target must be a token id in 0–{self.config.d_vocab - 1}, got {target!r}")
        per, _, _ = attribution(self.config, self.weights, ids, int(target))
        return {"target_id": int(target), "per_position": [float(v) for v in per]}

    def loss_and_grads(self, prompt_or_ids) -> tuple[float, dict]:
        """The mean next-token cross-entropy of the prompt (position i predicts token i + 1, as
        transformers' `GPT2LMHeadModel(ids, labels=ids).loss`) and every parameter's gradient, by
        TransformerLens name (`tracer.core.backward`)."""
        self._whole("loss_and_grads (the backward pass)")
        ids = np.asarray(self.prompt(prompt_or_ids).ids, dtype=np.int64)
        return loss_and_grads(self.config, self.weights, ids)

    def __repr__(self) -> str:
        c = self.config
        return (f"Model({self.name!r}: {c.n_layers} layers, d_model {c.d_model}, {c.n_heads} heads, "
                f"vocab {c.d_vocab}, {self.tokenizer.name} tokenizer)")
