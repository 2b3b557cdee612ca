"""The page of `tracer compare A B --export FILE.html`: both prompts' tokens (the differing ones marked),
both runs' predictions, and the activation-patching heatmap (layers × positions, the fraction of the
logit difference A's residual stream gives back to B's run), one self-contained file.

`compare_data` gathers what `tracer.run.interventions.activation_patching` measured (plain numbers) and
the sentences: `words.PAGE_WORDS`' templates, which `compare.js` fills as the trace page's script does, and the terminal's finished ones (`render.compare`: `said`); `html.compare_html` writes the file with the trace
page's styles and its shared script, `core.js`, before `compare.js`. Never runs the model.
"""

from __future__ import annotations

from ...formats.files import atomic_write
from ...tokenizers.tokens import label, show_invisible, show_token
from ..compare import answers_words, distance_words
from ..words import PAGE_WORDS
from .data import r6, showing

FORMAT = "tracer-compare"
VERSION = 1


def _tokens(ids, tok) -> list[dict]:
    return [{"label": label(p), "id": int(i), "text": show_token(tok.token_str(int(i)))} for p, i in enumerate(ids)]


def _value(x) -> float | str:  # a recovered fraction as --json prints it: the float itself, "nan" when undefined
    x = float(x)
    return x if x == x else "nan"


@showing
def compare_data(result: dict, tok, a_ids, b_ids, *, prompts=("", ""), model: str = "?", precision: int = 3) -> dict:
    """Everything the compare page shows, as JSON-ready values. `recovered[layer][position]` is carried
    exactly as `--json`'s `patch.recovered` (the page shows 2 decimals and the whole number on hover)."""
    a_top, b_top = result["answers"]
    preds = [{"ids": [int(i) for i in r["top_ids"]], "p": [r6(x) for x in r["top_p"]]} for r in result["predictions"]]
    ids = {int(i) for i in (*a_ids, *b_ids, a_top, b_top)} | {i for p in preds for i in p["ids"]}
    return {
        "format": FORMAT, "version": VERSION, "precision": int(precision),
        "title": f"compare “{show_invisible(prompts[0])}” and “{show_invisible(prompts[1])}”",
        "model": {"name": show_invisible(str(model))},
        "prompts": [show_invisible(p) for p in prompts],
        "tokens": [_tokens(a_ids, tok), _tokens(b_ids, tok)],
        "differs": [bool(d) for d in result["differs"]],
        "answers": [int(a_top), int(b_top)],
        "ld": [r6(x) for x in result["ld"]],
        "predictions": preds,
        "words": PAGE_WORDS,  # the sentences' templates (render/words.py), as the trace page's: compare.js fills them
        "said": {"answers": answers_words(result, tok), "distance": distance_words(result)},  # the terminal's, finished
        "recovered": [[_value(v) for v in row] for row in result["recovered"]],
        "distance": [[r6(v) for v in row] for row in result["distance"]],
        "texts": {str(i): show_token(tok.token_str(i)) for i in sorted(ids)},
    }


def compare_page(result: dict, tok, a_ids, b_ids, **options) -> str:
    """The whole compare page as one HTML string (`compare_data`'s options)."""
    from .html import compare_html

    return compare_html(compare_data(result, tok, a_ids, b_ids, **options))


def export_compare(path: str, result: dict, tok, a_ids, b_ids, **options) -> None:
    """Write the compare page to `path` atomically (no partial file on an error or Ctrl-C)."""
    text = compare_page(result, tok, a_ids, b_ids, **options)
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
