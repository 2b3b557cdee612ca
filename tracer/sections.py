"""The walkthrough's sections, in the article's order, written once: their names (`--section`, the
view, the renderers, the line estimate, the CLI's choices) and the words `--section`'s help gives them.

The tokens; the first layer's input (embedding + position vector) and the rest of the layer token by
token; every layer at a glance; predicting the next token; every position's prediction; the attention
heatmaps; the generation loop and the KV cache; the logit lens."""

from __future__ import annotations

# name → what --section's help says of it ("" when the name says it)
ABOUT = {
    "tokens": "",
    "embed": "the first layer's input",
    "attention": "the layer token by token",
    "layers": "",
    "predict": "",
    "positions": "every position's prediction",
    "heatmap": "",
    "loop": "generation and the KV cache",
    "lens": "",
}
SECTIONS = tuple(ABOUT)
LAYER = ("embed", "attention")  # section 2 in part or whole: the first layer's input; the layer token by token
NUMBERED = ("layers", "predict", "positions", "heatmap", "loop", "lens")  # sections 3, 4, …: after the layer(s) of section 2


def help_words() -> str:
    """The sections as --section's help lists them: 'tokens, embed (the first layer's input), …'."""
    return ", ".join(f"{name} ({about})" if about else name for name, about in ABOUT.items())
