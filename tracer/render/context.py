"""What every walkthrough section shares: the generation, the resolved view, token letters, where
each position was computed, and the stated values still to be placed (`Ctx`)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.padding import Padding

from ..core import hooks
from ..errors import TracerError
from ..tokenizers.tokens import label, show_token
from .checks import CheckBook, check_line
from .fmt import vec
from .text import eq
from .view import Resolved



class Ctx:
    """Everything the sections share: the trace, options, labels, and what was missing."""

    def __init__(self, gen, tokenizer, resolved: Resolved, width: int):
        view = resolved.view
        self.resolved = resolved  # which tokens, heads and layers are shown: decided once, in View.resolve
        self.gen = gen
        self.tok = tokenizer
        self.view = view
        self.width = width
        self.step = gen.steps[0]
        self.cfg = self.step.config
        self.n = len(self.step.tokens)
        self.ids = [int(i) for i in gen.tokens]
        self.labels = [label(i) for i in range(len(gen.tokens) + 1)]
        self.p = view.precision
        self.dims = view.dims
        self.missing: set[str] = set()
        self.book = CheckBook(view.checks)
        self.token = resolved.token
        self.layers = resolved.layers
        self.heads = resolved.heads
        self.head_chosen = resolved.head_chosen

    def get(self, name: str, step=None):
        step = self.step if step is None else step
        if name in step.arrays:
            return step.arrays[name]
        if self.records(name):
            self.missing.add(name)
        return None

    def records(self, name: str) -> bool:
        """Whether this model records `name` at all: a layer's name is its sublayer kind's own (attention
        sinks' share, a mixture of experts' routing) or the block's; a name outside the layers always."""
        layer, leaf = hooks.split(name)
        if layer is None or not 0 <= layer < self.cfg.n_layers:
            return True
        scope, _, own = leaf.partition(".")
        kind = self.cfg.attention_of(layer) if scope == "attn" else self.cfg.mlp_of(layer) if scope == "mlp" else None
        return kind is None or kind.records(self.cfg, own)

    def step_of(self, t: int) -> int:
        """The pass that computed position t: the prompt pass for the prompt, else the pass that read t."""
        if t < self.n:
            return 0
        for k, st in enumerate(self.gen.steps):
            if len(st.tokens) - 1 == t:
                return k
        raise TracerError(f"trace: no pass computed position {t}")

    def at(self, name: str, t: int, step: int | None = None):
        """The row of per-position array `name` for position t (from its own pass by default)."""
        k = self.step_of(t) if step is None else step
        st = self.gen.steps[k]
        arr = self.get(name, st)
        if arr is None:
            return None
        return arr[t - st.start]

    def att(self, name: str, h: int, t: int):
        """Head h's row of an attention array [head, query_pos, key_pos] for query t: [key_pos]."""
        st = self.gen.steps[self.step_of(t)]
        arr = self.get(name, st)
        if arr is None:
            return None
        return arr[h, t - st.start, : t + 1]

    def cached_from(self, j: int, t: int) -> int | None:
        """The pass whose K/V cache supplied key j to query t's pass, or None when t's pass computed j."""
        st = self.gen.steps[self.step_of(t)]
        return None if j >= st.start else self.step_of(j)

    def checks_at(self, name: str, t: int, head: int | None = None, attention: bool = False) -> list:
        k = self.step_of(t)
        row = t - self.gen.steps[k].start
        if attention:
            prefix = (head, row)
        else:
            prefix = (row,) if head is None else (row, head)
        return self.checks(name, prefix, k)

    def v(self, x) -> str:
        return vec(x, self.p, self.dims)

    def eq(self, desc: str, name: str, vector: str) -> RenderableType:
        return eq(self.width, desc, name, vector)

    def text(self, i: int) -> str:
        return show_token(self.tok.token_str(i))

    def checks(self, name: str, prefix: tuple, step: int | None = 0) -> list:
        got = self.book.take(name, prefix, step)
        return [Padding(check_line(c, self.p, self.dims), (0, 0, 0, 2), expand=False) for c in got]

    def shown_tokens(self) -> list[int]:
        return self.resolved.tokens

    def shown_heads(self) -> list[int]:
        return self.resolved.shown_heads
