"""Layers that differ from one another in size or in where their keys and values come from, read off a
`tracer.core.config.Config`: each layer's view (`cfg.layer(l)`: the config with that layer's own d_head,
n_kv_heads and d_mlp), the checks of the per-layer fields, and the rotary width of each kind of layer.

Gemma 4 is the model that needs them: its full-attention layers have wider heads and fewer key/value heads
than its sliding-window ones (`layer_d_head`, `layer_kv_heads`), the layers that reuse an earlier layer's
keys and values (`kv_source`) have a double-wide MLP (`layer_d_mlp`), and a full layer may have no W_V
(`k_eq_v`). A sublayer kind is given the view of its layer and computes its shapes from it, as it does for
a model whose layers are all alike (then the view is the config itself). Core module: numpy only.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import TracerError, is_whole

SIZES = {"layer_d_head": "d_head", "layer_kv_heads": "n_kv_heads", "layer_d_mlp": "d_mlp"}  # per-layer field → the field it sets


def _layers_list(cfg, name: str, value, whole: bool = True) -> tuple:
    """One whole number per layer (≥ 1), as a tuple, or a one-line error naming the field."""
    if not isinstance(value, (list, tuple)) or len(value) != cfg.n_layers or not all(is_whole(v, 1 if whole else 0)
                                                                                  for v in value):
        raise TracerError(f"config: {name} must give one whole number per layer ({cfg.n_layers}), got {str(value)[:80]}")
    return tuple(value)


def check(cfg, limits: dict) -> None:
    """The per-layer fields as tuples, each consistent with the rest of the config (sizes within `limits`,
    `tracer.core.config.LIMITS`), or a TracerError."""
    for name, field in SIZES.items():
        value = getattr(cfg, name)
        if value is None:
            continue
        value = _layers_list(cfg, name, value)
        most = limits.get(field, limits["n_heads"])
        if max(value, default=0) > most:
            raise TracerError(f"config: {name} {max(value):,} is more than tracer reads (at most {most:,})")
        object.__setattr__(cfg, name, value)
    for l in range(cfg.n_layers):
        heads = cfg.layer_kv_heads[l] if cfg.layer_kv_heads else cfg.kv_heads
        if cfg.n_heads % heads:
            raise TracerError(f"config: layer {l}'s {heads} key/value heads do not divide its {cfg.n_heads} query heads")
        dh = cfg.layer_d_head[l] if cfg.layer_d_head else cfg.d_head
        if cfg.rotates(l) and (dh % 2 or (cfg.rotary_dim or 0) > dh):
            raise TracerError(f"config: layer {l}'s d_head {dh} cannot be turned by rotary positions (an even width "
                              f"of at least rotary_dim is needed)")
    if cfg.layer_d_head and cfg.position_kind.rotary:
        for local in (False, True):  # RoPE's angles are computed once for each kind of layer: one width each
            widths = {cfg.layer_d_head[l] for l in range(cfg.n_layers) if cfg.is_local(l) == local and cfg.rotates(l)}
            if len(widths) > 1:
                raise TracerError(f"config: the {'sliding-window' if local else 'full'} layers' heads must have one "
                                  f"width (rotary positions turn them by one set of angles), got {sorted(widths)}")
    _check_sharing(cfg)
    if cfg.d_ple is not None and not is_whole(cfg.d_ple, 1):
        raise TracerError(f"config: d_ple (the per-layer inputs' width) must be a whole number ≥ 1 or absent, got {cfg.d_ple!r}")
    if not isinstance(cfg.layer_scalar, bool):
        raise TracerError(f"config: layer_scalar must be true or false, got {cfg.layer_scalar!r}")


def _check_sharing(cfg) -> None:
    """`kv_source`: each layer itself or an earlier layer of its kind that computes its own keys and values (the
    same window, head size and key/value heads); `k_eq_v`: layers that compute their own."""
    source = cfg.kv_source
    if source is not None:
        source = _layers_list(cfg, "kv_source", source, whole=False)
        object.__setattr__(cfg, "kv_source", source)
        for l, s in enumerate(source):
            if s == l:
                continue
            if s > l or source[s] != s:
                raise TracerError(f"config: kv_source: layer {l} would attend with layer {s}'s keys and values, but "
                                  f"{'that layer comes later' if s > l else f'layer {s} has none of its own'}")
            a, b = _sizes(cfg, l), _sizes(cfg, s)
            if a[:2] != b[:2] or cfg.window_of(l) != cfg.window_of(s) or cfg.is_local(l) != cfg.is_local(s):
                raise TracerError(f"config: kv_source: layer {l} cannot attend with layer {s}'s keys and values: their "
                                  f"heads or windows differ")
    eq = cfg.k_eq_v
    if eq is not None:
        if not isinstance(eq, (list, tuple)) or not all(is_whole(l, 0) and l < cfg.n_layers for l in eq):
            raise TracerError(f"config: k_eq_v must list layers 0–{cfg.n_layers - 1}, got {str(eq)[:80]}")
        object.__setattr__(cfg, "k_eq_v", tuple(sorted(set(eq))))


def _sizes(cfg, l: int) -> tuple[int, int, int]:
    """Layer l's (d_head, key/value heads, d_mlp)."""
    return (cfg.layer_d_head[l] if cfg.layer_d_head else cfg.d_head,
            cfg.layer_kv_heads[l] if cfg.layer_kv_heads else cfg.kv_heads,
            cfg.layer_d_mlp[l] if cfg.layer_d_mlp else cfg.d_mlp)


def views(cfg) -> tuple | None:
    """Each layer's view of `cfg` (layers of one size share one), or None when every layer has the model's sizes."""
    if not any(getattr(cfg, name) for name in SIZES):
        return None
    made: dict = {}
    out = []
    for l in range(cfg.n_layers):
        dh, kv, f = _sizes(cfg, l)
        if (dh, kv, f) == (cfg.d_head, cfg.kv_heads, cfg.d_mlp):
            out.append(cfg)
            continue
        if (dh, kv, f) not in made:
            view = replace(cfg, d_head=dh, n_kv_heads=None if kv == cfg.n_heads else kv, d_mlp=f)
            made[(dh, kv, f)] = view
        out.append(made[(dh, kv, f)])
    views_ = tuple(out)
    for view in made.values():
        view.__dict__["_views"] = views_  # a view's own layers are the model's (`cached_property` keeps it here)
    return views_


def rope_width(cfg, local: bool) -> int:
    """How many of each head's numbers RoPE turns on the sliding-window layers (`local`) or on the others."""
    first = next((l for l in range(cfg.n_layers) if cfg.is_local(l) == local and cfg.rotates(l)), None)
    return cfg.layer(first).rotary_width if first is not None else cfg.rotary_width


def kv_source_of(cfg, l: int) -> int:
    """The layer whose keys and values layer l attends with (l itself unless it shares an earlier layer's)."""
    return cfg.kv_source[l] if cfg.kv_source is not None else l
