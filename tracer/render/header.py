"""What the walkthrough's header says about the model and the run, in words the terminal, the demo
and the page share: the block (`block_words`), how it was trained (`training_line`), where the
weights came from (`weights_warning`), how the run was sampled (`settings_words`), an ablation's effect (`ablation_words`), and what training
made of the heads (`head_roles_line`). Plain functions of the config and the trace's meta: no Rich."""

from __future__ import annotations

import numpy as np

from ..run import settings as declared
from .fmt import count, layer_runs
from .words import say


def ablation_words(change: dict, tok) -> str:
    """--ablate's effect on the next token, in one sentence: "without head 1:0: p(␣G) 0.971 → 0.041; top-1 becomes ␣H"."""
    from ..tokenizers.tokens import show_token

    clean, new = change["clean"], change["changed"]
    name = lambda i: show_token(tok.token_str(int(i)))  # noqa: E731
    what = " and ".join(change.get("ablated") or ["the hooked values"])
    words = (f"without {what}: p({name(clean['top_id'])}) {clean['p_top']:.3f} → {new['p_clean_top']:.3f}; "
             + (f"top-1 stays {name(clean['top_id'])}" if new["top_id"] == clean["top_id"]
                else f"top-1 becomes {name(new['top_id'])} ({new['p_top']:.3f})"))
    return words


def scaling_words(scaling: dict) -> str:
    """RoPE's scaling in a few words: "llama3 scaling", "linear scaling × 8" (positions stretched 8 times)."""
    kind = scaling.get("rope_type")
    if kind == "linear":
        return f"linear scaling × {float(scaling['factor']):g}"
    if kind == "proportional":  # Gemma 4's full layers
        return f"proportional: {float(scaling['partial_rotary_factor']):g} of each head's pairs turn"
    if kind == "yarn":
        return (f"YaRN scaling × {float(scaling['factor']):g} from {int(scaling['original_max_position_embeddings']):,} "
                f"positions")
    return "llama3 scaling"  # Llama 3's, in config.json's keys or a GGUF's per-pair factors


def model_words(meta: dict, cfg) -> str:
    """The header's model line: "model abc: 4 layers, d_model 64, 4 heads (d_head 16), float32; learned positions, …"."""
    return say("header.model", name=str(meta.get("model", "?")), layers=layer_kinds(cfg), d_model=str(cfg.d_model),
               heads=count(cfg.n_heads, "head"), d_head=str(cfg.d_head), dtype=cfg.dtype, block=block_words(cfg))


def layer_kinds(cfg) -> str:
    """"4 layers", or, when their attention differs (Qwen3.5), each kind's count and where: "4 layers: 2 linear
    attention (…) on layers 0 and 2, 2 softmax attention with an output gate on layers 1 and 3"."""
    kinds: dict = {}
    for l in range(cfg.n_layers):
        kinds.setdefault(cfg.attention_of(l), []).append(l)
    if len(kinds) < 2:
        return count(cfg.n_layers, "layer")
    return say("kinds.layers", n=str(cfg.n_layers), kinds=", ".join(
        say("kinds.one", n=str(len(ls)), title=kind.title, where=layer_runs(ls)) for kind, ls in kinds.items()))


def settings_words(gen) -> str:
    """How the run was sampled, as the header's second line: each setting's words in the table's order
    (`tracer.run.settings.SETTINGS`), then the tokens it generated: "temperature 0 (greedy), seed 0, KV cache on,
    3 new tokens"."""
    said = [s.words(getattr(gen.settings, s.name)) for s in declared.SETTINGS if s.words is not None
            and getattr(gen.settings, s.name) is not None and not (s.needs and getattr(gen.settings, s.needs) is None)]
    return ", ".join([w for w in said if w] + [count(len(gen.generated_ids), "new token")])


def file_sampling_words(gen) -> str | None:
    """What the model's file suggests for sampling, in the header: "This file suggests temperature 0.6, top-p 0.95,
    min-p 0.05 (general.sampling.*); --sampling file uses them." (None: it suggests nothing)."""
    found = gen.meta.get("file_sampling")
    if not isinstance(found, dict):
        return None
    values = found.get("settings") or {}
    said = [s.words(values[s.name]) for s in declared.SETTINGS if s.name in values and s.words is not None
            and values[s.name] is not None]
    said = [w for w in said if w] or [say("file.defaults")]
    unused = ", ".join(f"{k.removeprefix('general.sampling.')} {v}" for k, v in (found.get("unused") or {}).items())
    used = say("file.used") if gen.settings.sampling == "file" else say("file.unused")
    return say("file.suggests", what=", ".join(said), how=used) + (say("file.other", what=unused) if unused else "")


def block_words(cfg) -> str:
    pos = cfg.position_kind.title
    if cfg.position_kind.rotary:
        pos += f" (θ base {cfg.rope_theta:g}" + (f", {scaling_words(cfg.rope_scaling)})" if cfg.rope_scaling else ")")
    norm = cfg.norm_kind.title if cfg.layer_norm else "no layer norm"
    mlp = cfg.mlp_kind.block_words(cfg) if cfg.mlp else "no MLP"
    wide = [l for l in range(cfg.n_layers) if cfg.layer(l).d_mlp != cfg.d_mlp]  # Gemma 4's double-wide MLPs
    if wide and cfg.mlp:
        mlp += f" (d_mlp {cfg.d_mlp}, {cfg.layer(wide[0]).d_mlp} on layer{'s' * (len(wide) > 1)} {', '.join(map(str, wide))})"
    if cfg.ple_kind is not None:  # Gemma 4's third sublayer
        mlp += ", " + cfg.ple_kind.block_words(cfg)
    if cfg.layer_scalar:
        mlp += ", each layer's output × its own scalar"
    attention = cfg.attention_kind.block_words(cfg)
    if cfg.layer_norm and cfg.norm_place_kind.title:
        norm += f" ({cfg.norm_place_kind.title})"
    parts = [pos, norm, *([cfg.qk_norm_kind.title] if cfg.qk_norm_kind.on else []), *([attention] if attention else []), mlp,
             "residual" if cfg.residual else "no residual",
             ("scores ÷ √d_head" if cfg.attn_scalar is None else f"scores ÷ √{cfg.attn_scalar:g}")
             if cfg.scale_scores else "unscaled scores"]
    for where, cap in (("scores", cfg.attn_softcap), ("logits", cfg.final_softcap)):
        if cap is not None:
            parts.append(cfg.softcap_kind.title.format(where=where, cap=f"{cap:g}"))
    if cfg.embed_scale:
        parts.insert(0, f"embedding × √{cfg.d_model}")
    if cfg.kv_heads < cfg.n_heads:
        parts.append(f"{count(cfg.kv_heads, 'key/value head')} shared by {cfg.n_heads} query heads")
    if cfg.sliding_window is not None:
        where = "" if cfg.windowed is None else f" on layer{'s' if len(cfg.windowed) > 1 else ''} {', '.join(map(str, cfg.windowed))}"
        base = f" (RoPE base {cfg.rope_local_theta:g} there)" if cfg.rope_local_theta is not None else ""
        parts.append(f"sliding window {cfg.sliding_window}{where}{base}")
    return ", ".join(parts)


def training_line(info: dict) -> str:
    """One line: what `tracer train` trained the weights on, and how long (its training.json)."""
    loss = info.get("final_loss")
    sha = str(info.get("corpus_sha256", "?"))[:12]
    about = f", {info['corpus_about']}" if isinstance(info.get("corpus_about"), str) else ""
    return (f"trained by tracer {info.get('tracer_version', '?')} on {info.get('corpus', '?')} (sha256 {sha}…{about}): "
            f"{info.get('steps', '?')} steps, seed {info.get('seed', '?')}, final loss {loss if loss is not None else '?'}")


def weights_warning(meta: dict) -> str | None:
    """What the reader must know about where the weights came from, or None for trained weights."""
    if meta.get("trained"):
        return None
    how = meta.get("weights")
    if how == "given":
        return ("These weights are written by hand in the scenario, not trained: every number below is real "
                "arithmetic on them, and the predictions show what these chosen weights do, not what a trained "
                "model would say.")
    if how == "partly given":
        return ("Some weights are given by the scenario and the rest are seeded at random (untrained): every number "
                "below is real arithmetic, but the predictions are meaningless until real weights are loaded.")
    return ("These weights are untrained (seeded at random): every number below is real arithmetic, but the "
            "predictions are meaningless until real weights are loaded (--model gpt2, a GPT-2 folder, or a scenario).")


ROLE_AT_LEAST = 0.3  # a head named in the roles line puts at least this much weight where its role says


def head_roles_line(training) -> str:
    """What training made of the heads (training.json's scores, carried in the trace's meta), in words."""
    heads = training.get("heads") if isinstance(training, dict) else None
    try:
        prev, ind = np.asarray(heads["previous_token"], dtype=float), np.asarray(heads["induction"], dtype=float)
    except (TypeError, KeyError, ValueError):
        return ""
    if prev.ndim != 2 or prev.shape != ind.shape:
        return ""

    def named(scores) -> str:
        cells = sorted(zip(*np.nonzero(scores >= ROLE_AT_LEAST)), key=lambda c: -scores[c])
        return ", ".join(f"layer {l} head {h} ({scores[l, h]:.2f})" for l, h in cells)

    parts = []
    if named(prev):
        parts.append(f"previous-token heads, which look at the token just before: {named(prev)}")
    if named(ind):
        parts.append(f"induction heads, which look from a repeated token to what followed it last time (so the model "
                     f"can copy): {named(ind)}")
    if not parts:
        return ""
    on = heads.get("measured_on") if isinstance(heads.get("measured_on"), str) else "a sequence shown twice"
    return (f"What training made of the heads (measured on {on}; weight on the token the role "
            "names): " + "; ".join(parts) + ". Induction shows on a prompt that repeats itself: "
            "tracer trace \"red fox jumps. red fox\" --section heatmap --layer all.")
