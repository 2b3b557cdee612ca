"""The classroom page: one self-contained HTML file to click through a recorded generation
(`tracer trace|show|replay … --export FILE.html`).

The page follows the seed article's order as a path of steps (tokens → embedding + position →
Q/K/V → scores, mask, softmax → weighted sum → heads and W_O → residual, norm, MLP → layers →
logits, temperature, top-k → the loop and the KV cache → every position → logit lens, and the
stated values' checks), each a slide (← → on the keyboard). Clicking a token follows it; layer
and head buttons choose what the attention steps show; a temperature slider recomputes the
softmax over the recorded logits. Everything is in the file: the data as JSON, the script and
the styles inline, no fonts or anything else fetched (it works from file://).

`page_data` gathers what the page shows from the recorded arrays only (`data`, `passes`);
`html.page_html` writes the file around it (`page.css` and `core.js`, `state.js`, `steps.js`, `experts.js`, `predict.js`,
`ablate.js`, `app.js`). `compare.compare_page` writes `tracer compare A B --export FILE.html`'s page.
"""

from __future__ import annotations

import numpy as np

from ... import sections
from ...run.settings import reading_order
from ...tokenizers.tokens import show_invisible
from ..fmt import count
from ..predict import pass_through_words, unchanged_layers
from ..beams import beam_nodes
from ..speculative import spec_rounds
from ..sampling import draw_stages, sampling_notes, stage_probs
from ..storage import example_words, storage_words
from ..header import block_words, file_sampling_words, model_words, settings_words, training_line, weights_warning
from ..layer import rotation_words
from ..loop import cache_kinds, generated_words, kv_notes
from ..words import PAGE_WORDS, say
from .ablations import ablation_ids, head_ablations_data
from .data import BUDGET, VECTORS, Rows, choose, input_data, layers_data, mlp_width, r6, showing, switches_data
from .routing import add_routing
from .states import with_states
from .passes import (LOGITS_BUDGET, branch_data, check_data, name_passes, passes_data, positions_data, referenced_ids,
                     rows_data,
                     stop_words, texts_of, tokens_data)

FORMAT = "tracer-page"
VERSION = 1
BADGES = {"given": "hand-written weights", "partly given": "partly untrained weights"}


def loss_mean(step) -> float | None:
    """The prompt pass's mean loss over the rows whose next token is in the prompt (teacher forcing)."""
    loss = step.arrays.get("loss.per_position")
    if loss is None or len(loss) < 2:
        return None
    return r6(float(np.mean(np.asarray(loss)[:-1])))


def not_recorded(step, cfg) -> list[str]:
    """The hooks a full recording of this config holds and this pass does not (layer 0 standing for every layer)."""
    wanted = ["hook_embed", "logits", "sample.probs", "predict.top_token", "lens.top_token"]
    if cfg.n_layers:
        switched_off = {"ln1", "ln2"} if not (cfg.layer_norm and cfg.norm_place_kind.before) else set()
        switched_off |= {"pre", "post", "mlp_out", "mid", "ln2"} if not cfg.mlp else set()
        made = {h for _, h, _ in cfg.mlp_kind.steps} if cfg.mlp else set()  # this MLP's vectors (SwiGLU: and up)
        switched_off |= {key for key, hook, _ in VECTORS if hook.startswith("mlp.") and hook not in made}
        wanted += [f"blocks.*.{hook}" for key, hook, _ in VECTORS if key not in switched_off] + ["blocks.*.attn.hook_pattern"]
    return [n for n in wanted if n.replace("*", "0") not in step.arrays]


def layer_words(cfg) -> list[dict]:
    """Per layer, what its attention step says that the layer decides: its sliding window (None: every
    earlier key), whether it is a global layer among windowed ones, and how RoPE turns Q and K there
    (`layer.rotation_words`, the token's {L} and {t} left to fill); and its MLP's steps and width (a dense
    layer among experts has its own: `mlp`, as `switches.mlp.steps`)."""
    page_key = {hook: key for key, hook, _ in VECTORS}
    return [{"window": cfg.window_of(l), "global": cfg.windowed is not None and cfg.window_of(l) is None,
             "rope": rotation_words(cfg, l) if cfg.rotates(l) else None,
             "mlp": [[page_key[hook], name, words] for hook, name, words in cfg.mlp_of(l).steps] if cfg.mlp else [],
             "width": mlp_width(cfg, l),
             "among_experts": bool(cfg.mlp and cfg.n_experts) and not cfg.mlp_of(l).records(cfg, "hook_router_logits")}
            for l in range(cfg.n_layers)]


RUN_STEPS = {"beams": lambda gen: gen.beams,  # page steps only a run of that kind has: whether `gen` has it
             "speculative": lambda gen: isinstance(gen.meta.get("speculative"), dict)}


def steps_data(checked: bool, gen=None) -> list[list[str]]:
    """The page's path of steps (`tracer.sections`), each [id, its label on the path, its title]; the
    stated values' step last when a scenario states values (`checked`); given the run (`gen`), without the
    steps of kinds of run it is not (beam search, speculative decoding: `RUN_STEPS`)."""
    ids = [step for step, _ in sections.page_steps() if gen is None or RUN_STEPS.get(step, lambda g: True)(gen)]
    ids += [sections.CHECKS] if checked else []
    return [[step, say(f"path.{step}"), say(f"title.{step}")] for step in ids]


@showing
def page_data(gen, tokenizer, *, checks=(), title: str | None = None, about=(), token: int | None = None, layer: int = 0,
              head: int = 0, precision: int = 3, top_k: int = 10, budget: int = BUDGET,
              logits_budget: int = LOGITS_BUDGET, heads: dict | None = None) -> dict:
    """Everything the page shows, as JSON-ready values. `token`, `layer`, `head`: what it shows first
    (default: the last prompt token, layer 0, head 0). `checks`: a scenario's stated values; `title`
    and `about` (paragraphs): what the page says it shows (a scenario's title, description, notes).
    `heads`: what `tracer.run.interventions.head_ablations` ran for the prompt (None: not run; the page says so)."""
    cfg = gen.steps[0].config
    rows = Rows(gen)
    follow = rows.n_prompt - 1 if token is None or not 0 <= token < rows.n_rows else int(token)
    carried, whole = choose(cfg, rows.n_rows, follow, budget)
    passes, notes = passes_data(gen, cfg, top_k, whole, logits_budget)
    name_passes(passes, gen, tokenizer)
    for k, q in enumerate(passes):  # a sampled run's draw, in the terminal's words (render/sampling.py)
        st = gen.steps[k]
        drawn = (gen.settings.temperature != 0 or "sample.penalized" in st.arrays) and all(
            n in st.arrays for n in ("sample.scaled", "sample.probs", "sample.final", "sample.token"))
        q["sampling"] = {"stages": draw_stages(st), "notes": sampling_notes(st, tokenizer, precision)} if drawn else None
        if drawn:  # the stages as one picture the teacher steps through
            q["stages"] = stage_probs(st, tokenizer, top_k)
    positions = positions_data(rows)
    left_out = []
    ablations = head_ablations_data(heads, tokenizer, gen.meta, cfg, rows.n_prompt - 1)
    if len(carried) < rows.n_rows:
        left_out.append(f"the vectors and attention rows of {count(rows.n_rows - len(carried), 'position')} (the page "
                        f"carries {count(len(carried), 'position')}: the followed token and the last ones; "
                        f"--token chooses the followed one)")
    long = [name for name, d in (("d_model", cfg.d_model), ("d_head", cfg.d_head), ("d_mlp", cfg.d_mlp)) if d > whole]
    if long:
        left_out.append(f"the middle of vectors longer than {whole} numbers ({', '.join(long)}): the page carries the "
                        f"first and last 8 numbers and the norm")
    if any(p.get("top") and p["top"]["ids"] and len(p["top"]["ids"]) < cfg.d_vocab for p in passes):
        left_out.append(f"the token texts beyond each pass's top {top_k} of {cfg.d_vocab:,}")
    left_out += notes
    if heads is not None and not heads.get("done"):  # a model too large to knock each head out for the page
        left_out.append(ablations["words"])
    gone = not_recorded(gen.steps[0], cfg)
    if gone:
        left_out.append(f"what this trace did not record (a names filter): {', '.join(gone)}")
    meta = gen.meta
    stated = [check_data(c, gen, precision, 8) for c in checks]
    layers = with_states(layers_data(rows, cfg, carried, whole), rows, cfg, carried, whole, precision)  # a linear layer: its state
    add_routing(layers, rows, cfg, carried, whole, meta)  # a mixture of experts' routing, attention sinks' shares
    return {
        "format": FORMAT, "version": VERSION,
        "title": show_invisible(title) if title else (f"“{show_invisible(meta['prompt'])}”"
                                                      if isinstance(meta.get("prompt"), str) else None),
        "about": [show_invisible(str(a)) for a in about],
        "words": PAGE_WORDS,  # each step's sentences (render/words.py): the script fills their {slots}, never words a step itself
        "steps": steps_data(bool(stated), gen),  # the path of steps and each one's slide (the script's SLIDES[id])
        "model": {"name": show_invisible(str(meta.get("model", "?"))), **cfg.to_dict(), "block": block_words(cfg),
                  "line": show_invisible(model_words(meta, cfg)),
                  "switches": switches_data(cfg),
                  "vocab": tokenizer.name, "n_vocab": int(tokenizer.n_vocab), "end_id": tokenizer.end_id,
                  "end_ids": [int(i) for i in tokenizer.eos_ids]},
        "warning": weights_warning(meta),
        "storage": storage_words(meta),  # how the file stores the weights (None for float32)
        "storage_example": example_words(meta, "blocks.0.attn.W_Q", "W_Q of layer 0"),  # its first number, worked
        "badge": None if weights_warning(meta) is None else BADGES.get(meta.get("weights"), "untrained weights"),
        "training": training_line(meta["training"]) if isinstance(meta.get("training"), dict) else None,
        "settings": {s.name: getattr(gen.settings, s.name) for s in reading_order() if s.on_page},  # as the header says them
        "run": settings_words(gen),  # the terminal header's second line: how the run was sampled
        "file_sampling": file_sampling_words(gen),  # what the model's file suggests (general.sampling.*), or None
        "stopped": stop_words(gen), "text": show_invisible(gen.text),
        "precision": int(precision), "top_k": int(top_k),
        "n_prompt": rows.n_prompt, "n_rows": rows.n_rows,
        "tokens": tokens_data(gen, tokenizer, rows),
        "carried": carried, "whole": whole, "left_out": left_out,
        "start": {"token": follow, "layer": int(layer) if cfg.n_layers else 0, "head": int(head)},
        "inputs": input_data(rows, cfg, carried, whole),
        "layers": layers,
        "layer_words": layer_words(cfg),
        "pass_through": pass_through_words(unchanged_layers(gen.steps[0].get, cfg.n_layers), cfg.n_layers),
        "passes": passes,
        "positions": positions,
        "loss_mean": loss_mean(gen.steps[0]),
        "texts": texts_of(referenced_ids(passes, positions) | ablation_ids(ablations), tokenizer),
        "checks": stated,
        "kv_notes": kv_notes(gen), "cache_kinds": cache_kinds(cfg, rows.n_rows), "generated": show_invisible(generated_words(gen)),
        "verify_cache": meta.get("verify_cache") if isinstance(meta.get("verify_cache"), dict) else None,
        "head_ablations": ablations,
        **({"rows": many} if (many := rows_data(gen)) is not None else {}),  # several rows, or a draft's passes
        **({"beams": beam_nodes(gen, tokenizer, precision)} if gen.beams else {}),  # beam search's tree
        **({"speculative": spec} if (spec := spec_rounds(gen, tokenizer, precision)) is not None else {}),
        "branch": branch_data(gen, tokenizer, passes),  # a candidate clicked: the token forced, and the command
    }


def page(gen, tokenizer, **options) -> str:
    """The whole page as one HTML string (`page_data`'s options)."""
    from .html import page_html

    data = page_data(gen, tokenizer, **options)
    return page_html(data)
