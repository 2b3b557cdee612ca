"""A checkpoint's weights as its files store them, and how to expand them: all at once (what reading
always did) or one layer at a time (`tracer.core.streamed`, for a model bigger than its memory budget).

A reader that is asked for it (`lazy=True`) checks the file as always but expands nothing: it
gives a `Source` — each tensor as a `tracer.formats.stored.Stored` under the family's file names, and the
family's `translate` (file names → TransformerLens names, each layer's fused Q|K|V). `expand_all`
runs the reading that was (every tensor expanded, then `translate`). `layer(l)` gives layer l's
parameters alone, by the same `translate` run on layer l's tensors renamed as layer 0 of a
one-layer model (so every family's renaming is reused as it is, and the arrays come out in the
same layouts as in a whole read: the same numbers, bit for bit). Core module: numpy and the
standard library.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from ..core.memory import gb
from ..core.qkv import qkv_columns
from ..formats.stored import ExpertStack


@contextmanager
def _no_progress(total_bytes: int, label: str):
    yield lambda n: None


class _Seen:
    """`cfg` with another number of layers, for a family's `translate` run on one layer (or none): `layer`, when
    given, is the model's layer seen as layer 0, with its own entries of the per-layer fields (its kind of
    attention in `layer_types`, whether it is in `dense_layers`, `windowed`, `nope_layers`)."""

    LISTS = ("layer_types",)  # one entry per layer
    SETS = ("dense_layers", "windowed", "nope_layers")  # the layers that have something

    def __init__(self, cfg, n_layers: int, layer: int | None = None):
        self._cfg, self.n_layers = cfg, n_layers
        for name in self.LISTS + self.SETS if layer is not None else ():
            given = getattr(cfg, name, None)
            if given is not None:
                setattr(self, name, (given[layer],) if name in self.LISTS else ((0,) if layer in given else ()))

    def __getattr__(self, name):
        return getattr(self._cfg, name)


def _root(a: np.ndarray) -> np.ndarray:
    """The array that owns a view's memory (itself when it owns it; a mapped file's buffer for its views)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _placeholder(shape) -> np.ndarray:
    """Zeros of `shape` that take no memory (a stride-0 view): a tensor translate passes along untouched."""
    return np.broadcast_to(np.float32(0), tuple(shape))


class Source:
    """`stored`: file tensor name → Stored (in reading order); `translate(cfg, t)` → (params, fused
    list or None); `layer_prefix`: the file names' per-layer prefix ("model.layers.{l}.", "h.{l}.");
    `names`: TransformerLens name → file name (`file_names`); `fused_copy`: translate builds each
    layer's fused Q|K|V as a new matrix (the Llama block) rather than handing on the file's."""

    def __init__(self, cfg, stored: dict, translate, layer_prefix: str, names: dict, fused_copy: bool,
                 label: str = "", progress=None, where=None):
        self.where = where if where is not None else (label.removeprefix("reading ") or "the model")
        self.cfg, self.stored, self.translate, self.prefix = cfg, stored, translate, layer_prefix
        self.names, self.fused_copy, self.label, self.progress = dict(names), fused_copy, label, progress
        self.layer_names: list[list[str]] = [[] for _ in range(cfg.n_layers)]
        self.top_names: list[str] = []
        for name in stored:
            l = self._layer_of(name)
            (self.layer_names[l] if l is not None else self.top_names).append(name)
        self.views: dict = {}  # TransformerLens name → how it views one expanded tensor (`param`)
        E = getattr(cfg, "n_experts", None)  # a mixture of experts' stacked tensors: [expert, rows, cols]
        self.stacks = {n for n, s in stored.items() if E and len(s.shape) == 3 and s.shape[0] == E}
        self.lazy_experts = False  # streamed: each stack expands one expert at a time, as passes route to it
        self.embed_name = self.names.get("W_E")
        self.unembed_name = None if cfg.tied_unembed else self.names.get("W_U")

    def _layer_of(self, name: str):
        head, _, _ = self.prefix.partition("{l}")
        if not name.startswith(head):
            return None
        rest = name[len(head):]
        digits = rest.split(".", 1)[0]
        return int(digits) if digits.isdigit() and int(digits) < self.cfg.n_layers else None

    # ------------------------------------------------------------------ sizes

    def layer_bytes(self, l: int, streamed: bool = False) -> int:
        """The float32 bytes layer l holds once expanded (its fused Q|K|V counted once); `streamed`: with
        its experts expanded only as a one-token pass routes to them (k of each stack at a time)."""
        qkv = ("q_proj", "k_proj", "v_proj", "qkv_proj")
        k = min(getattr(self.cfg, "experts_per_token", None) or 0, getattr(self.cfg, "n_experts", None) or 0)
        total = sum(self.stored[n].expanded_bytes * (k / self.stored[n].shape[0] if streamed and n in self.stacks else 1)
                    for n in self.layer_names[l] if not (self.fused_copy and any(q in n for q in qkv)))
        total = int(total)
        if self.fused_copy:
            total += 4 * self.cfg.d_model * self.cfg.qkv_width
        return total

    def max_layer_bytes(self, streamed: bool = False) -> int:
        return max((self.layer_bytes(l, streamed) for l in range(self.cfg.n_layers)), default=0)

    def top_bytes(self) -> int:
        """The float32 bytes of what is around the layers (the embedding, the unembedding, the final norm)."""
        return sum(self.stored[n].expanded_bytes for n in self.top_names)

    def unembed_bytes(self) -> int:
        """The float32 bytes of the unembedding expanded whole (W_E's when tied; 0: a float32 view of the file)."""
        name = self.unembed_name or self.embed_name
        return self.stored[name].expanded_bytes if name in self.stored else 0

    def total_bytes(self) -> int:
        """The float32 bytes the whole model holds expanded (what reading it whole allocates)."""
        return sum(self.layer_bytes(l) for l in range(self.cfg.n_layers)) + self.top_bytes()

    def describe(self) -> str:
        """The storage types, in words: 'Q4_0, F32 in the file'."""
        return ", ".join(sorted({s.dtype for s in self.stored.values()}))

    # ------------------------------------------------------------------ expanding

    def expand_all(self) -> tuple[dict, list | None]:
        """Every tensor expanded, then translated: the reading there was before layers streamed."""
        t: dict[str, np.ndarray] = {}
        total = sum(self._stored_bytes(s) for s in self.stored.values())
        with (self.progress or _no_progress)(total, self.label) as advance:
            for name, s in self.stored.items():
                t[name] = s.expand()
                advance(self._stored_bytes(s))
        return self.translate(self.cfg, t)

    @staticmethod
    def _stored_bytes(s) -> int:
        f = getattr(s, "f", None)
        if f is not None:
            return f.info(s.name).nbytes
        return int(s.arr.nbytes)

    def layer(self, l: int) -> tuple[dict, np.ndarray | None]:
        """Layer l's parameters by TransformerLens name (`blocks.{l}.…`) and its fused Q|K|V (None: none).
        Separate Q, K and V tensors are expanded straight into the fused matrix's columns, a block of
        rows at a time (`Stored.expand_into`): the family's translate finds them fused already."""
        here, first = self.prefix.format(l=l), self.prefix.format(l=0)
        t = self._fused_in_place(l, here, first)
        lazy = self.stacks if self.lazy_experts else set()
        expanded = {n: self.stored[n].expand() for n in self.layer_names[l] if first + n[len(here):] not in t
                    and n not in lazy}
        t.update({first + n[len(here):]: ExpertStack(self.stored[n]) for n in self.layer_names[l] if n in lazy})
        t.update({first + n[len(here):]: a for n, a in expanded.items()})
        t.update({n: _placeholder(self.stored[n].shape) for n in self.top_names})
        params, fused = self.translate(_Seen(self.cfg, 1, l), t)
        mine = {f"blocks.{l}." + k[len("blocks.0."):]: v for k, v in params.items() if k.startswith("blocks.0.")}
        self._note_views(mine, expanded)
        return mine, (fused[0] if fused else None)

    def prefetch(self, l: int) -> int:
        """Layer l's stored bytes (its experts excepted when they expand as routed; l = n_layers: the
        unembedding's) asked to be read ahead from the file (`Stored.prefetch`). Bytes asked for."""
        if l >= self.cfg.n_layers:
            name = self.unembed_name or self.embed_name
            return self.stored[name].prefetch() if name in self.stored and l == self.cfg.n_layers else 0
        lazy = self.stacks if self.lazy_experts else set()
        return sum(self.stored[n].prefetch() for n in self.layer_names[l] if n not in lazy)

    def param(self, l: int, name: str) -> np.ndarray:
        """One parameter of layer l (`blocks.{l}.attn.W_O`), for a recorded recipe that reads a weight
        of a layer no longer held: when translate made it as a view of one tensor, that tensor alone
        expanded again and seen through the same view (the same numbers); else the whole layer."""
        view = self.views.get(name)
        if view is None:
            return self.layer(l)[0][name]
        file, offset, shape, strides, dtype = view
        owner = _root(self.stored[file].expand())  # laid out as the first expansion's (the same code made it)
        return np.ndarray(shape, dtype, buffer=owner, offset=offset, strides=strides)

    def _note_views(self, params: dict, expanded: dict) -> None:
        """Which parameters are views of one expanded tensor (file name → the array `expand` gave),
        and where in the memory it owns: (file, byte offset, shape, strides, dtype) in `views`."""
        roots = {n: _root(a) for n, a in expanded.items()}
        shared = {id(r) for r in roots.values() if sum(x is r for x in roots.values()) > 1}
        owners = {id(r): n for n, r in roots.items() if r.flags.owndata and id(r) not in shared}  # not a mapped file
        for k, v in params.items():
            if not isinstance(v, np.ndarray):  # an expert stack: expanded an expert at a time, never whole
                continue
            root = _root(v)
            file = owners.get(id(root))
            if file is not None and root.flags.c_contiguous:
                at = v.__array_interface__["data"][0] - root.__array_interface__["data"][0]
                self.views[k] = (file, at, v.shape, v.strides, v.dtype)

    def _fused_in_place(self, l: int, here: str, first: str) -> dict:
        """Layer l's Q, K and V tensors (as layer 0's names) as the column blocks of one [d_model,
        (head + 2·kv_head)·d_head] matrix they were expanded into, seen as [rows, d_model]; {} when the
        family does not fuse three tensors of [rows, d_model] (GPT-2's c_attn, Phi-3's qkv_proj)."""
        cfg = self.cfg
        files = [self.names.get(f"blocks.{l}.attn.W_{m}") for m in "QKV"]
        if not self.fused_copy or len(set(files)) < 3 or any(f not in self.layer_names[l] for f in files):
            return {}
        cols = qkv_columns(cfg.n_heads, cfg.kv_heads, cfg.d_head)
        if any(self.stored[f].shape != (c.stop - c.start, cfg.d_model) for f, c in zip(files, cols)):
            return {}
        # [d_model, (head + 2·kv_head)·d_head] in Fortran order, as concatenating the transposed tensors
        # lays it out in a whole read (the same layout: the same products, bit for bit)
        W = np.empty((cfg.qkv_width, cfg.d_model), dtype=np.float32).T
        t = {}
        for f, c in zip(files, cols):
            part = W[:, c].T  # [rows, d_model]: rows of W's memory, one tensor's
            self.stored[f].expand_into(part)
            t[first + f[len(here):]] = part
        return t

    def top(self, expand: set) -> dict:
        """The parameters around the layers; of the embedding and unembedding only those in `expand`
        ("W_E", "W_U") are expanded (the others are left out: they are read in rows)."""
        big = {self.embed_name: "W_E", self.unembed_name: "W_U"}
        t = {}
        for n in self.top_names:
            role = big.get(n)
            t[n] = self.stored[n].expand() if role is None or role in expand else _placeholder(self.stored[n].shape)
        params, _ = self.translate(_Seen(self.cfg, 0), t)
        return {k: v for k, v in params.items() if not (k in ("W_E", "W_U") and k not in expand)}

    def summary(self, streamed: bool, budget: int) -> dict:
        """How the model runs, for a trace's meta: expanded once, or layer by layer within `budget`."""
        n, per = self.cfg.n_layers, self.max_layer_bytes(streamed)
        if streamed:
            text = f"expanded layer by layer: {n} layers × {gb(per)}, budget {gb(budget)}"
            if self.lazy_experts:
                text += f"; each layer's experts only as tokens are routed to them"
        else:
            text = f"expanded once: {gb(self.total_bytes())}"
        return {"mode": "layer by layer" if streamed else "once", "layers": n, "layer_bytes": per,
                "expanded_bytes": self.total_bytes(), "budget": budget, "text": text}


def gguf_source(cfg, f, hf_of: dict, fixes: dict, fam, label: str, progress=None) -> Source:
    """A lazy read of a GGUF file (`f`, a `tracer.formats.gguf_file.GGUFFile`): each tensor its blocks, under
    transformers' name (`hf_of`: GGUF name → it); `fixes[g]` (or None) what is done to tensor g as it
    is expanded (`readers.gguf.fix_of`: llama's permuted Q/K rows put back, Gemma's 1 + w norms)."""
    from ..formats.stored import Quantized

    stored = {hf: Quantized(f, g, fixes.get(g)) for g, hf in hf_of.items()}
    return Source(cfg, stored, fam.translate, "model.layers.{l}.", fam.file_names(cfg), True, label, progress, f.path)


def mapped_source(cfg, tensors: dict, origin: dict, dtypes: dict, names, translate, prefix: str,
                  file_names: dict, fused_copy: bool, label: str, progress=None, where=None):
    """A lazy read's `tracer.readers.source.Source`: the tensors `names`, mapped as they are stored."""
    from ..formats.stored import Mapped

    stored = {k: Mapped(k, origin[k], tensors[k], dtypes[k]) for k in names}
    return Source(cfg, stored, translate, prefix, file_names, fused_copy, label, progress, where)
