"""The model's shape and the switches that choose its block (follows nanoGPT's `GPTConfig`).

One decoder runs the seed article's simplified block (explicit positions, no layer norm, no MLP,
no residual, unscaled scores), a real GPT-2 block, and the Llama / Qwen2 / Mistral block (rotary
positions, RMS norm, the gated SwiGLU MLP, grouped-query attention, a sliding window); `Config`
says which. Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from functools import cached_property

from typing import TYPE_CHECKING

from ..errors import TracerError, is_whole, near

if TYPE_CHECKING:
    from . import blocks
    from .sublayer import Sublayer

# POSITIONAL, NORMS and MLPS (the switches' values: the keys of the table of block switches,
# `tracer.core.blocks`) and TINY are made on first use (`__getattr__` below): the table holds the
# switches' functions, so it imports numpy, which `tracer --help` and the CLI's start never need.
DTYPES = ("float32", "float64")
ROPE_SCALING_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
# Fields a config's JSON leaves out at their defaults (`Config.to_dict`): switches added after trace files
# and weights files were first written, so that a file of a model that does not use one is as before.
QUIET = {"attention": "softmax", "n_experts": None, "experts_per_token": None, "router": "softmax_topk",
         "norm_topk": False, "expert_mlp": "swiglu", "swiglu_alpha": 1.702, "swiglu_limit": 7.0, "router_bias": False,
         "expert_bias": False, "shared_d_mlp": None, "dense_layers": None, "dense_d_mlp": None,
         "layer_types": None, "linear_k_heads": None, "linear_v_heads": None, "linear_d_k": None, "linear_d_v": None,
         "linear_conv": None, "rotary_dim": None, "nope_layers": None, "layer_d_head": None, "layer_kv_heads": None,
         "layer_d_mlp": None, "kv_source": None, "k_eq_v": None, "d_ple": None, "layer_scalar": False}
# The largest value of each size a config may give: far beyond any published model (GPT-3 has 96
# layers, d_model 12,288, a vocabulary of 50,257), so that a file cannot make tracer loop over a
# billion layers or size arrays from an absurd width before anything is checked against the file.
LIMITS = {"n_layers": 1_024, "n_heads": 1_024, "d_model": 131_072, "d_head": 131_072, "d_mlp": 524_288,
          "n_ctx": 1_048_576, "d_vocab": 1_048_576}


@dataclass(frozen=True)
class Config:
    d_vocab: int = 50257  # tokens in the vocabulary (GPT-2's 50,257: the article's "50,000")
    n_ctx: int = 1024  # longest sequence; rows of W_pos
    d_model: int = 768  # width of the residual stream (the article's 5, "in reality 2048")
    n_heads: int = 12  # attention heads per layer (the article's "like 12")
    d_head: int | None = None  # width of one head's Q, K, V; default d_model // n_heads
    d_mlp: int | None = None  # hidden width of the MLP; default 4 * d_model
    n_layers: int = 12  # blocks (the article's 24 is GPT-2 medium)
    dtype: str = "float32"  # float64 for hand-checkable toys, float32 for real models
    positional: str = "learned"  # learned | sinusoidal | explicit (given vectors) | none | rope (Q and K rotated)
    layer_norm: bool = True  # a norm before attention and MLP, plus the final one (GPT-2, Llama)
    mlp: bool | str = True  # the MLP after attention: "gelu" (GPT-2's, also `true`), "swiglu" (Llama's gated one), false
    residual: bool = True  # add each sublayer's output to its input
    scale_scores: bool = True  # divide Q·K by sqrt(d_head); the article does not
    tied_unembed: bool = True  # W_U is W_E transposed (GPT-2); false: W_U is its own matrix
    ln_eps: float = 1e-5  # the norm's epsilon (GPT-2's layer_norm_epsilon, Llama's rms_norm_eps)
    norm: str = "layer"  # layer (mean and variance, gain and bias: GPT-2) | rms (root mean square, gain only: Llama)
    n_kv_heads: int | None = None  # key/value heads (grouped-query attention); None: as many as query heads
    rope_theta: float = 10000.0  # RoPE's base: pair i turns by position · rope_theta^(−2i/d_head)
    rope_scaling: dict | None = field(default=None, hash=False)  # Llama 3's {"rope_type": "llama3", factor, …}
    sliding_window: int | None = None  # a query sees only its last `sliding_window` keys (Mistral); None: all
    norm_place: str = "before"  # before (GPT-2, Llama: ln1, ln2) | after (OLMo 2: ln1_post, ln2_post, on the sublayers' outputs)
    embed_scale: bool = False  # Gemma: the embedding multiplied by √d_model before layer 0
    attn_scalar: float | None = None  # Gemma's query_pre_attn_scalar: scores ÷ √attn_scalar instead of ÷ √d_head
    windowed: tuple | None = field(default=None, hash=False)  # the layers the sliding window applies to (Gemma 3); None: all
    rope_local_theta: float | None = None  # Gemma 3: RoPE's base on those local layers (rope_theta on the others)
    attn_softcap: float | None = None  # Gemma 2: scores soft-capped, cap · tanh(s / cap), before the mask; None: not
    final_softcap: float | None = None  # Gemma 2: the final logits soft-capped the same way; None: not
    qk_norm: str = "none"  # none | per_head (Qwen3: each head's Q and K normalized) | whole (OLMo 2: all of Q, all of K)
    attention: str = "softmax"  # the attention kind (`tracer.core.blocks.ATTENTIONS`): softmax | sinks (gpt-oss)
    # Routed experts (mlp = "experts", `tracer.core.experts`): read by that entry only, which checks them.
    n_experts: int | None = None  # experts per layer (gpt-oss-20b: 32; Qwen3-30B-A3B: 128); d_mlp is each one's width
    experts_per_token: int | None = None  # k: the experts each token is sent to (gpt-oss: 4; Qwen3-MoE: 8)
    router: str = "softmax_topk"  # softmax_topk (Mixtral, Qwen-MoE, OLMoE) | topk_softmax (gpt-oss: top k, then softmax)
    norm_topk: bool = False  # the k kept probabilities divided by their sum (Mixtral; Qwen3-MoE's norm_topk_prob)
    expert_mlp: str = "swiglu"  # each expert's middle: swiglu | clamped_swiglu (gpt-oss: α 1.702, limit 7)
    swiglu_alpha: float = 1.702  # gpt-oss's clamped SwiGLU: gate · sigmoid(α · gate)
    swiglu_limit: float = 7.0  # gpt-oss's clamp of the gate (from above) and of up (both sides)
    router_bias: bool = False  # the router has a bias (gpt-oss)
    expert_bias: bool = False  # the experts' products have biases (gpt-oss)
    shared_d_mlp: int | None = None  # a shared expert every token also goes through, with its sigmoid gate (Qwen2-MoE)
    dense_layers: tuple | None = field(default=None, hash=False)  # layers whose MLP is a dense SwiGLU among experts
    dense_d_mlp: int | None = None  # those layers' MLP width (Qwen-MoE's intermediate_size; d_mlp is each expert's)
    # Layers of different kinds (Qwen3.5: three linear-attention layers to one softmax layer):
    layer_types: tuple | None = field(default=None, hash=False)  # each layer's attention kind; None: `attention` everywhere
    # Linear attention (attention kind "linear_attention", `tracer.core.linear_attention`), read by that entry only:
    linear_k_heads: int | None = None  # query/key heads of the state update
    linear_v_heads: int | None = None  # value heads: one state [d_k, d_v] each
    linear_d_k: int | None = None
    linear_d_v: int | None = None
    linear_conv: int | None = None  # the short causal convolution's kernel (Qwen3.5: 4)
    rotary_dim: int | None = None  # partial rotary: the first rotary_dim numbers of each head turn (Qwen3.5: a quarter); None: all
    nope_layers: tuple | None = field(default=None, hash=False)  # layers whose Q and K are not rotated (SmolLM3's NoPE)
    # Layers of different sizes (`cfg.layer(l)`: layer l's view, `tracer.core.layer_sizes`); None: the same on every layer
    layer_d_head: tuple | None = field(default=None, hash=False)  # each layer's d_head (Gemma 4: wider on the full layers)
    layer_kv_heads: tuple | None = field(default=None, hash=False)  # each layer's key/value heads
    layer_d_mlp: tuple | None = field(default=None, hash=False)  # each layer's d_mlp (Gemma 4: double on the sharing layers)
    # Gemma 4's attention (attention kind "gemma4", `tracer.core.gemma4_attention`), read by that entry only:
    kv_source: tuple | None = field(default=None, hash=False)  # each layer's: the layer whose keys and values it attends with
    k_eq_v: tuple | None = field(default=None, hash=False)  # layers without W_V: their values are their keys' projection
    d_ple: int | None = None  # per-layer inputs (Gemma 4's PLE, `tracer.core.per_layer_input`): numbers per layer; None: none
    layer_scalar: bool = False  # each layer's output multiplied by a number of its own (Gemma 4)

    def __post_init__(self) -> None:
        from . import blocks

        POSITIONAL, NORMS, MLPS = tuple(blocks.POSITIONS), tuple(blocks.NORMS), tuple(blocks.MLPS)
        if self.d_head is None:
            object.__setattr__(self, "d_head", self.d_model // max(self.n_heads, 1))
        if self.d_mlp is None:
            object.__setattr__(self, "d_mlp", 4 * self.d_model)
        mlp = blocks.mlp_key(self.mlp) if isinstance(self.mlp, (bool, str)) else self.mlp
        if mlp is not False and mlp not in MLPS:
            raise TracerError(f"config: mlp must be one of {', '.join(MLPS)}, true, false, got {self.mlp!r}")
        object.__setattr__(self, "mlp", mlp)
        counts = ("d_vocab", "n_ctx", "d_model", "n_heads", "d_head", "d_mlp")
        for name in counts + (("n_kv_heads",) if self.n_kv_heads is not None else ()):
            value = getattr(self, name)
            if not is_whole(value, 1):
                raise TracerError(f"config: {name} must be a whole number ≥ 1, got {value!r}")
        if not is_whole(self.n_layers, 0):
            raise TracerError(f"config: n_layers must be a whole number ≥ 0, got {self.n_layers!r}")
        for name, most in LIMITS.items():
            if getattr(self, name) > most:
                raise TracerError(f"config: {name} {getattr(self, name):,} is more than tracer reads (at most {most:,}; "
                                  f"no published model comes near it)")
        if self.dtype not in DTYPES:
            raise TracerError(f"config: dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.positional not in POSITIONAL:
            raise TracerError(
                f"config: positional must be one of {', '.join(POSITIONAL)}, got {self.positional!r}"
            )
        for name in ("layer_norm", "residual", "scale_scores", "tied_unembed"):
            if not isinstance(getattr(self, name), bool):
                raise TracerError(f"config: {name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.ln_eps, (int, float)) or isinstance(self.ln_eps, bool) or not self.ln_eps > 0:
            raise TracerError(f"config: ln_eps must be a number > 0, got {self.ln_eps!r}")
        if self.attention not in blocks.ATTENTIONS:
            raise TracerError(f"config: attention must be one of {', '.join(blocks.ATTENTIONS)}, got {self.attention!r}")
        if self.layer_types is not None:
            types = self.layer_types
            if not isinstance(types, (list, tuple)) or len(types) != self.n_layers:
                raise TracerError(f"config: layer_types must name one attention kind per layer ({self.n_layers}), got "
                                  f"{types!r}"[:300])
            unknown = [t for t in types if t not in blocks.ATTENTIONS]
            if unknown:
                raise TracerError(f"config: layer_types names {unknown[0]!r}; the kinds are {', '.join(blocks.ATTENTIONS)}")
            object.__setattr__(self, "layer_types", tuple(types))
        if self.norm not in NORMS:
            raise TracerError(f"config: norm must be one of {', '.join(NORMS)}, got {self.norm!r}")
        if self.n_heads % self.kv_heads:
            raise TracerError(f"config: n_heads {self.n_heads} is not a multiple of n_kv_heads {self.kv_heads} "
                              f"(each key/value head serves the same number of query heads)")
        if not _positive(self.rope_theta):
            raise TracerError(f"config: rope_theta must be a number > 0, got {self.rope_theta!r}")
        if self.position_kind.rotary and self.d_head % 2:
            raise TracerError(f"config: rotary positions turn pairs of dimensions, so d_head must be even, got {self.d_head}")
        r = self.rotary_dim
        if r is not None and (not is_whole(r, 2) or r % 2 or r > self.d_head):
            raise TracerError(f"config: rotary_dim (partial rotary) must be an even number from 2 to d_head "
                              f"({self.d_head}), got {r!r}")
        if self.rope_scaling is not None:
            self._check_rope_scaling()
        if self.norm_place not in blocks.NORM_PLACES:
            raise TracerError(f"config: norm_place must be one of {', '.join(blocks.NORM_PLACES)}, got {self.norm_place!r}")
        if self.qk_norm not in blocks.QK_NORMS:
            raise TracerError(f"config: qk_norm must be one of {', '.join(blocks.QK_NORMS)}, got {self.qk_norm!r}")
        if self.qk_norm_kind.on and not self.position_kind.rotary:
            raise TracerError("config: a Q/K norm (qk_norm) is computed with rotary positions only (positional = rope)")
        for kind in self.sublayer_kinds:  # each sublayer kind checks the fields only it reads (routed experts' …)
            kind.check(self)
        w = self.sliding_window
        if w is not None and not is_whole(w, 1):
            raise TracerError(f"config: sliding_window must be a whole number ≥ 1 or absent, got {w!r}")
        self._check_windowed()
        nope = self.nope_layers
        if nope is not None:
            if not isinstance(nope, (list, tuple)) or not all(is_whole(l, 0) and l < self.n_layers for l in nope):
                raise TracerError(f"config: nope_layers must list layers 0–{self.n_layers - 1}, got {str(nope)[:80]}")
            object.__setattr__(self, "nope_layers", tuple(sorted(set(nope))))
        from .layer_sizes import check

        check(self, LIMITS)  # the per-layer sizes, the shared keys and values, the per-layer inputs

    def _check_windowed(self) -> None:
        if not isinstance(self.embed_scale, bool):
            raise TracerError(f"config: embed_scale must be true or false, got {self.embed_scale!r}")
        for name in ("attn_scalar", "rope_local_theta", "attn_softcap", "final_softcap"):
            if getattr(self, name) is not None and not _positive(getattr(self, name)):
                raise TracerError(f"config: {name} must be a number > 0 or absent, got {getattr(self, name)!r}")
        if self.windowed is None:
            return
        layers = self.windowed
        if not isinstance(layers, (list, tuple)) or not all(
                isinstance(l, int) and not isinstance(l, bool) and 0 <= l < self.n_layers for l in layers):
            raise TracerError(f"config: windowed must list layers 0–{self.n_layers - 1}, got {layers!r}")
        object.__setattr__(self, "windowed", tuple(sorted(set(layers))))
        if self.sliding_window is None:
            raise TracerError("config: windowed names the sliding-window layers, but sliding_window is absent")

    def layer(self, l: int) -> "Config":
        """Layer l's view: this config with the layer's own d_head, n_kv_heads and d_mlp (itself when every layer
        has the model's): what a sublayer kind is given for layer l."""
        return self._views[l] if self._views is not None else self

    @cached_property
    def _views(self) -> tuple | None:
        from .layer_sizes import views

        return views(self)

    def rotates(self, layer: int) -> bool:
        """Whether layer `layer` turns Q and K by position (rotary positions, and not a NoPE layer)."""
        return self.position_kind.rotary and not (self.nope_layers and layer in self.nope_layers)

    def is_local(self, layer: int) -> bool:
        """Whether layer `layer` uses the sliding window (and, with rope_local_theta, the local RoPE base)."""
        return self.sliding_window is not None and (self.windowed is None or layer in self.windowed)

    def window_of(self, layer: int) -> int | None:
        """The sliding window of layer `layer`, or None when it sees every earlier key."""
        return self.sliding_window if self.is_local(layer) else None

    @cached_property
    def scores_scale(self) -> float | None:
        """What Q·K is multiplied by: 1/√d_head (Gemma: 1/√query_pre_attn_scalar), or None unscaled."""
        import math

        if not self.scale_scores:
            return None
        return 1.0 / math.sqrt(self.attn_scalar if self.attn_scalar is not None else self.d_head)

    def _check_rope_scaling(self) -> None:
        rs = self.rope_scaling
        kind = rs.get("rope_type", rs.get("type")) if isinstance(rs, dict) else None
        if kind == "factors":  # a divisor per pair of dimensions (a GGUF's rope_freqs)
            factors = rs.get("factors")
            if not isinstance(factors, list) or len(factors) != self.rotary_width // 2 or not all(
                    _positive(f) and f < float("inf") for f in factors):
                raise TracerError(f"config: rope_scaling.factors must be {self.rotary_width // 2} numbers > 0 "
                                  f"(one per pair of a head's dimensions)")
            return
        if kind == "proportional":  # Gemma 4's full layers: a fraction of the pairs turn, at the whole head's frequencies
            f = rs.get("partial_rotary_factor")
            if not (_positive(f) and f <= 1 and _positive(rs.get("factor", 1.0))):
                raise TracerError(f"config: proportional RoPE needs a partial_rotary_factor in (0, 1] and a factor > 0, "
                                  f"got {f!r}, {rs.get('factor')!r}")
            return
        if kind == "linear":  # every angle divided by one factor (Gemma 3's global layers)
            if not (_positive(rs.get("factor")) and rs["factor"] < float("inf")):
                raise TracerError(f"config: rope_scaling.factor must be a number > 0, got {rs.get('factor')!r}")
            return
        if kind == "yarn":
            for key in ("factor", "original_max_position_embeddings"):
                if not (_positive(rs.get(key)) and rs[key] < float("inf")):
                    raise TracerError(f"config: rope_scaling.{key} must be a number > 0, got {rs.get(key)!r}")
            for key in ("beta_fast", "beta_slow", "attention_factor"):
                if rs.get(key) is not None and not (_positive(rs[key]) and rs[key] < float("inf")):
                    raise TracerError(f"config: rope_scaling.{key} must be a number > 0 or absent, got {rs[key]!r}")
            if not isinstance(rs.get("truncate", True), bool):
                raise TracerError(f"config: rope_scaling.truncate must be true or false, got {rs['truncate']!r}")
            return
        if kind != "llama3":
            raise TracerError(f"config: rope_scaling of type {kind!r} is not supported (tracer computes Llama 3's "
                              f"'llama3' scaling, 'linear', 'yarn', a GGUF's per-pair 'factors', or none)")
        for key in ROPE_SCALING_KEYS:
            if not _positive(rs.get(key)):
                raise TracerError(f"config: rope_scaling.{key} must be a number > 0, got {rs.get(key)!r}")
        if not rs["high_freq_factor"] > rs["low_freq_factor"]:
            raise TracerError("config: rope_scaling.high_freq_factor must be greater than low_freq_factor")

    def to_dict(self) -> dict:
        """The fields as JSON values; those of QUIET left out at their defaults (a file written for a
        model that does not use a newer switch reads as it did before the switch existed)."""
        d = asdict(self)
        for name, default in QUIET.items():
            if d[name] == default:
                del d[name]
        return d

    def __getstate__(self) -> dict:  # pickled as its fields: the entries kept below are looked up again
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "Config":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise TracerError(f"config: unknown field {unknown[0]!r}{near(unknown[0], known)}")
        return cls(**d)

    # The table's entries (and the numbers computed from the fields) are looked up once per config and
    # kept (`cached_property`: an attribute after the first read), since a decode step reads them per
    # layer; the fields are frozen, so what is kept cannot go stale.

    @cached_property
    def softcap_kind(self) -> blocks.SoftCap:
        """The soft-cap's entry in the table of block switches (used where attn_softcap / final_softcap are set)."""
        from . import blocks

        return blocks.SOFTCAP

    @cached_property
    def norm_kind(self) -> blocks.Norm:
        """The norm's entry in the table of block switches (whether or not the model has a norm)."""
        from . import blocks

        return blocks.NORMS[self.norm]

    @cached_property
    def mlp_kind(self) -> blocks.Mlp | None:
        """The MLP's entry in the table of block switches; None without an MLP."""
        from . import blocks

        return blocks.MLPS[self.mlp] if self.mlp else None

    @cached_property
    def attention_kind(self) -> "Sublayer":
        """The attention's entry in the table of block switches (`tracer.core.attention`, …)."""
        from . import blocks

        return blocks.ATTENTIONS[self.attention]

    def attention_of(self, layer: int) -> "Sublayer":
        """Layer `layer`'s attention kind (`layer_types`, else `attention` on every layer)."""
        if self.layer_types is not None:
            return self._layer_kinds[layer]
        return self.attention_kind

    @cached_property
    def _layer_kinds(self) -> tuple:
        from . import blocks

        return tuple(blocks.ATTENTIONS[t] for t in self.layer_types)

    def mlp_of(self, layer: int) -> "Sublayer | None":
        """Layer `layer`'s MLP kind; None without an MLP (a dense SwiGLU on `dense_layers` among experts)."""
        if self.dense_layers and layer in self._dense:
            from . import blocks

            return blocks.DENSE_AMONG_EXPERTS
        return self.mlp_kind

    @cached_property
    def _dense(self) -> frozenset:
        return frozenset(self.dense_layers or ())

    @cached_property
    def sublayer_kinds(self) -> tuple:
        """Every sublayer kind some layer uses, each once (the hook table's axes, `needed`)."""
        kinds = [self.attention_of(l) for l in range(self.n_layers)] + [self.mlp_of(l) for l in range(self.n_layers)]
        kinds += [self.attention_kind] + ([self.mlp_kind] if self.mlp_kind is not None else []) + [self.ple_kind]
        return tuple(dict.fromkeys(k for k in kinds if k is not None))

    @cached_property
    def ple_kind(self) -> "Sublayer | None":
        """The per-layer input's entry (a third sublayer, after the MLP: Gemma 4's PLE), None without one."""
        from . import blocks

        return blocks.PER_LAYER_INPUT if self.d_ple else None

    def kind_of(self, layer: int, scope: str) -> "Sublayer | None":
        """Layer `layer`'s kind in `scope` ("attn", "mlp", "ple"), or None."""
        return {"attn": self.attention_of, "mlp": self.mlp_of}[scope](layer) if scope != "ple" else self.ple_kind

    def hold(self, name: str):
        """How the store may hold the recorded value `name` (`blocks.{l}.attn.hook_pattern`): the
        ways its sublayer's kind declares (`Sublayer.hold`), or None (held whole)."""
        if not name.startswith("blocks."):
            return None
        layer, _, leaf = name[len("blocks."):].partition(".")
        if not (layer.isascii() and layer.isdigit() and len(layer) <= 9 and int(layer) < self.n_layers):
            return None
        scope = leaf.partition(".")[0]
        kind = self.kind_of(int(layer), scope) if scope in ("attn", "mlp", "ple") else None
        return kind.hold.get(leaf) if kind is not None else None

    @cached_property
    def position_kind(self) -> blocks.Positions:
        """The positional scheme's entry in the table of block switches."""
        from . import blocks

        return blocks.POSITIONS[self.positional]

    @cached_property
    def norm_place_kind(self) -> blocks.NormPlace:
        """Where the block's norms sit (before the sublayers, or after them: OLMo 2)."""
        from . import blocks

        return blocks.NORM_PLACES[self.norm_place]

    @cached_property
    def qk_norm_kind(self) -> blocks.QkNorm:
        """The Q/K norm's entry in the table of block switches (`none`: Q and K are not normalized)."""
        from . import blocks

        return blocks.QK_NORMS[self.qk_norm]

    @cached_property
    def has_positions(self) -> bool:
        """Whether a position vector is added to each embedding (W_pos); rotary positions add none."""
        return self.position_kind.adds

    @cached_property
    def rotary_width(self) -> int:
        """How many of each head's numbers RoPE turns: rotary_dim (partial rotary), else d_head."""
        return self.d_head if self.rotary_dim is None else self.rotary_dim

    @cached_property
    def kv_heads(self) -> int:
        """Key/value heads: n_kv_heads under grouped-query attention, else one per query head."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def qkv_width(self) -> int:
        """Columns of the fused [W_Q | W_K | W_V]: the query heads', then the key and value heads'."""
        return (self.n_heads + 2 * self.kv_heads) * self.d_head

    def _sublayers(self):
        """(layer l's view, l, kind) for every sublayer of every layer."""
        for l in range(self.n_layers):
            for kind in (self.attention_of(l), self.mlp_of(l), self.ple_kind):
                if kind is not None:
                    yield self.layer(l), l, kind

    def n_params(self) -> int:
        """Parameters the decoder multiplies by (W_U counted once even when tied), in closed form, so
        that a huge config is cheap to refuse before anything is allocated."""
        V, C, d = self.d_vocab, self.n_ctx, self.d_model
        ln = len(self.norm_kind.params) * d  # gain and bias, or the gain alone
        norms = ln * self.norm_place_kind.per_sublayer if self.layer_norm else 0
        total = V * d + (C * d if self.has_positions else 0) + V  # W_E, W_pos, b_U
        total += self.ple_kind.top_params(self) if self.ple_kind is not None else 0  # the per-layer inputs' embedding
        for view, l, kind in self._sublayers():
            total += kind.n_params(view, l) + (norms if kind.normed else 0)
        total += self.n_layers if self.layer_scalar else 0
        total += ln if self.layer_norm else 0  # ln_final
        total += d * V if not self.tied_unembed else 0  # W_U
        return total

    def active_params(self) -> int:
        """Parameters one token uses: all of them but the experts it is not routed to (`Sublayer.active_params`)."""
        return self.n_params() - sum(k.n_params(v, l) - k.active_params(v, l) for v, l, k in self._sublayers())

    def pass_bytes(self, n_new: int, n_seen: int) -> int:
        """Bytes one recorded pass holds at most (every value whole): per layer and computed position
        about 27 vectors of d_model (the residual stream, the norms, the sublayers' outputs), what each
        sublayer kind records (`Sublayer.record_bytes`: Q, K, V, the [head, query, key] arrays, the
        MLP's middle), and the logits and the draw's [d_vocab] arrays. Works on arrays of passes too."""
        values = (n_new + 4) * self.d_vocab + self.n_layers * n_new * 27 * self.d_model
        values += sum(kind.record_bytes(view, n_new, n_seen) for view, l, kind in self._sublayers())
        return values * (8 if self.dtype == "float64" else 4)

    def pass_macs(self, n_new: int, n_seen: int) -> int:
        """Multiply-adds of one pass computing `n_new` positions that attend over `n_seen` keys (or of
        arrays of passes)."""
        return n_new * self.d_model * self.d_vocab + sum(kind.macs(view, n_new, n_seen) for view, l, kind in self._sublayers())


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


# GPT-2's published shapes. The article's "24 layers … 1024 dimensions" is gpt2-medium.
GPT2_SHAPES = {
    "gpt2": dict(n_layers=12, d_model=768, n_heads=12),
    "gpt2-medium": dict(n_layers=24, d_model=1024, n_heads=16),
    "gpt2-large": dict(n_layers=36, d_model=1280, n_heads=20),
    "gpt2-xl": dict(n_layers=48, d_model=1600, n_heads=25),
    "distilgpt2": dict(n_layers=6, d_model=768, n_heads=12),
}

# The untrained model `tracer trace --model tiny` runs (`TINY`): the GPT-2 block and tokenizer, the
# article's 24 layers, and a width small enough to read every number. Its weights are seeded, untrained.
TINY_SHAPE = dict(d_model=8, n_heads=2, n_layers=24, dtype="float64")


def __getattr__(name: str):
    """TINY and the table's keys, made when first asked for (PEP 562; importlib asks for `__path__`
    and the like too, which must not import the table)."""
    if name not in ("TINY", "POSITIONAL", "NORMS", "MLPS"):
        raise AttributeError(f"module 'tracer.core.config' has no attribute {name!r}")
    from . import blocks

    made = {"TINY": lambda: Config(**TINY_SHAPE), "POSITIONAL": lambda: tuple(blocks.POSITIONS),
            "NORMS": lambda: tuple(blocks.NORMS), "MLPS": lambda: tuple(blocks.MLPS)}
    value = globals()[name] = made[name]()
    return value

# The model `tracer trace` and `tracer demo` use out of the box: tracer/models/abc, a small GPT-2
# trained by `tracer train` (tools/make_model.py rebuilds it).
DEFAULT_MODEL = "abc"
DEFAULT_PROMPT = "A B C D E F"  # the seed article's tokens; the default model continues them with G
