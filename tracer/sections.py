"""The article's steps, written once: one `Section` per step of the walkthrough, in the article's order.
Everything that shows the steps reads this list: the terminal's sections and their numbers
(`render.walkthrough`), `--section`'s choices and help (`cli.app`, `render.view`), the line estimate
(`render.estimate`), the page's path of steps (sent with its data: `render.page`), the demo's screens
(`render.demo.screens`), and the steps a recorded name may belong to (`tracer.core.hooks.STEPS`: what
the page's steps and the demo's screens show), which place a scenario's stated values.

The tokens; the first layer's input (embedding + position vector) and the rest of the layer token by
token; every layer at a glance; predicting the next token; every position's prediction; the attention
heatmaps; the generation loop and the KV cache; the logit lens.

What draws a step sits above this module and enters itself here by the step's name, as its module
loads (as `tracer.showing` is filled from above): the terminal's renderer (`@renders`), its line
estimate (`@estimates`), a demo screen's maker (`@screen`); the page's slides enter themselves in the
script's `SLIDES` by their step's id (`page/steps.js`, `page/predict.js`), and the page's path labels
and titles are words (`path.{id}`, `title.{id}` in `render/words.py`). This module imports nothing:
the CLI reads `--section`'s choices without loading numpy or the renderers."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Section:
    """One step of the article: its name (`--section`'s choice), the words `--section`'s help gives it,
    and what shows it besides the terminal: the page's steps and the demo's screens, each with the
    recorded names' steps (`tracer.core.hooks`) whose stated values it shows."""

    name: str
    about: str = ""  # what --section's help says of it ("" when the name says it)
    page: dict[str, tuple[str, ...]] = field(default_factory=dict)  # the page's steps (their ids) → the recorded steps each shows
    demo: dict[str, tuple[str, ...]] = field(default_factory=dict)  # the demo's screens → the recorded steps each shows (of layer 0 or outside the layers)
    joins: bool = False  # shown with the section before it, under its number, by its renderer
    page_after: str = ""  # the section whose page steps this one's follow on the page, when the page tells it sooner


SECTIONS: tuple[Section, ...] = (
    Section("tokens", page={"tokens": ("tokens",)}, demo={"tokens": ("tokens",)}),
    Section("embed", "the first layer's input", page={"embed": ("embed", "position", "input")},
            demo={"embedding": ("embed",), "position": ("position", "rotation", "input")}),
    Section("attention", "the layer token by token", joins=True,  # section 2 with embed: token by token, a layer at a time
            page={"qkv": ("rotation", "qkv"), "scores": ("scores", "softmax"), "sum": ("sum",), "heads": ("heads",),
                  "mlp": ("mlp",)},
            demo={"state": (), "qkv": ("qkv",), "scores": ("scores",), "softmax": ("softmax",), "weighted_sum": ("sum",),
                  "multihead": ("heads", "mlp"), "experts": ()}),  # state: a linear layer's screen; experts: a routed MLP's
    Section("layers", page={"layers": ()}, demo={"layers": (), "copying": ()}),  # the demo's layers screen: every later layer's values
    Section("predict", page={"predict": ("unembed", "sample", "chosen")},
            demo={"unembed": ("unembed",), "temperature": ("sample",), "draw": (), "chosen": ("chosen",)}),
    Section("positions", "every position's prediction", page={"positions": ("positions",)}),
    Section("heatmap"),  # the page draws the patterns in its scores step
    Section("loop", "generation and the KV cache; beam search; speculative decoding",
            page={"loop": ("loop",), "beams": ("beams",), "speculative": ("verify",)},
            demo={"append": (), "cache": (), "beams": (), "speculative": ("verify",)},
            page_after="predict"),  # the demo's append screen takes the values no screen shows (the loop, the lens, …)
    Section("lens", page={"lens": ("lens",)}),
)
CHECKS = "checks"  # the page's last step when a scenario states values: each one, checked (the terminal's last lines)


def names() -> tuple[str, ...]:
    """The sections' names in the article's order: `--section`'s choices."""
    return tuple(s.name for s in SECTIONS)


def help_words() -> str:
    """The sections as --section's help lists them: 'tokens, embed (the first layer's input), …'."""
    return ", ".join(f"{s.name} ({s.about})" if s.about else s.name for s in SECTIONS)


def numbered() -> list[tuple[int, tuple[str, ...]]]:
    """The terminal's numbered sections: (number, the names it shows), a joining section under the number
    of the one before (section 2: the first layer's input, then the layer token by token)."""
    out: list[tuple[int, tuple[str, ...]]] = []
    for s in SECTIONS:
        if s.joins and out:
            out[-1] = (out[-1][0], out[-1][1] + (s.name,))
        else:
            out.append((len(out) + 1, (s.name,)))
    return out


def page_steps() -> list[tuple[str, tuple[str, ...]]]:
    """The page's steps in the page's order, (id, the recorded steps it shows): each section's in the
    list's order, a section with `page_after` right after the one it names (the page shows the loop
    right after the prediction)."""
    out: list[tuple[str, tuple[str, ...]]] = []

    def add(s: Section) -> None:
        out.extend(s.page.items())
        for later in SECTIONS:
            if later.page_after == s.name:
                add(later)

    for s in SECTIONS:
        if not s.page_after:
            add(s)
    return out


def demo_screens() -> list[tuple[str, tuple[str, ...]]]:
    """The demo's screens in order, (name, the recorded steps whose stated values it shows)."""
    return [item for s in SECTIONS for item in s.demo.items()]


def recorded_steps() -> tuple[str, ...]:
    """The steps a recorded name may belong to (`tracer.core.hooks.STEPS`): what the page's steps and the
    demo's screens show, in the article's order."""
    out: dict[str, None] = {}
    for s in SECTIONS:
        for shows in (*s.page.values(), *s.demo.values()):
            out.update(dict.fromkeys(shows))
    return tuple(out)


# What draws each step, entered by the modules that draw it (above this one) as they load.
_DRAWN: dict[str, dict[str, object]] = {"terminal": {}, "lines": {}, "screen": {}}


def _entering(kind: str, name: str, known, what: object = None):
    if name not in known:
        raise ValueError(f"{name!r} is not one of {sorted(known)} (tracer/sections.py)")

    def enter(fn):
        _DRAWN[kind][name] = fn if what is None else (fn, what)
        return fn
    return enter


def renders(name: str):
    """Enter the decorated function as the terminal's section `name` (and the sections that join it):
    `(ctx, number) → a renderable` (`render.walkthrough`)."""
    return _entering("terminal", name, [names_[0] for _, names_ in numbered()])


def estimates(name: str):
    """Enter the decorated function as the lines section `name` (and those that join it) will print:
    `(resolved view) → lines` (`render.estimate`)."""
    return _entering("lines", name, [names_[0] for _, names_ in numbered()])


def screen(name: str, layers: bool = False):
    """Enter the decorated function as the demo's screen `name`: `(demo) → Step, or None when this run has
    nothing for it`; `layers`: a screen of a layer's numbers, left out for a model without layers."""
    return _entering("screen", name, [n for n, _ in demo_screens()], layers)


def drawn(kind: str, name: str):
    """What was entered to draw `name`: the terminal's renderer ("terminal"), its estimate ("lines"), or a
    demo screen's (maker, layers) ("screen"); a LookupError naming the step when nothing was."""
    try:
        return _DRAWN[kind][name]
    except KeyError:
        raise LookupError(f"nothing draws {kind} {name!r}: its module enters it with tracer.sections") from None
