"""How the weights are stored in their file, in words: the header's line, and one number worked from
its block's bytes where the walkthrough first multiplies by it.

Reads the trace's meta only: `storage` (parameter → storage type, as the reader found it) and
`storage_examples` (storage type → one element de-quantized step by step, `tracer.formats.quants`
via the GGUF reader): the renderer never opens the file. The words are the same for the terminal,
the demo and the page (`storage_words`, `example_words`).
"""

from __future__ import annotations

from .fmt import num

FLOAT_WORDS = {
    "F32": "float32 (4 bytes a number), used as it is",
    "F16": "float16 (2 bytes a number: 10 bits of fraction), widened to float32 exactly",
    "BF16": "bfloat16 (2 bytes a number: float32's top half, 7 bits of fraction), widened to float32 exactly",
    "F64": "float64, narrowed to float32",
}


def storage_summary(meta: dict) -> dict[str, int]:
    """Storage type → how many parameters are stored as it, most first."""
    counts: dict[str, int] = {}
    for dtype in (meta.get("storage") or {}).values():
        counts[str(dtype)] = counts.get(str(dtype), 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def storage_words(meta: dict) -> str | None:
    """One sentence for the header: what the file stores the weights as, or None when tracer made them."""
    counts = storage_summary(meta)
    if not counts or set(counts) <= {"F32", "float32", "float64"}:  # as the decoder computes: nothing to say
        return None
    parts = ", ".join(f"{k} ({v} parameter{'s' if v != 1 else ''})" for k, v in counts.items())
    quantized = any(k not in FLOAT_WORDS and not k.startswith("float") for k in counts)
    how = ("each block of numbers is de-quantized to float32 when the model is read, so every number below is "
           "the stored value exactly as the file encodes it" if quantized else "widened to float32 (exactly) when read")
    return f"weights stored as {parts}; {how}"


def split_words(meta: dict, param: str) -> list[str]:
    """Where `param` (blocks.{l}.attn.W_Q, …) was cut from a tensor it shares with others (the trace's
    meta `split_from`): "W_Q, W_K and W_V of layer 0 come from one matrix in the file, …", or []."""
    split = meta.get("split_from") or {}
    tensor = split.get(param)
    if not isinstance(tensor, str):
        return []
    layer, _, _ = param.partition(".attn.") if ".attn." in param else param.partition(".mlp.")
    names = [k.rsplit(".", 1)[-1] for k, v in split.items() if v == tensor and k.startswith(layer + ".")]
    shown = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
    where = f" of layer {layer.split('.')[1]}" if layer.startswith("blocks.") else ""
    return [f"{shown}{where} come from one matrix in the file, {tensor} (stored fused): split once, "
            f"when the model was read, not at each step"]


def expansion_words(meta: dict) -> str | None:
    """One sentence for the header: how the weights became float32 — once, or layer by layer within a
    memory budget (`tracer.core.expansion`'s summary) — or None when nothing was expanded (float32 files)."""
    info = meta.get("expansion")
    if not isinstance(info, dict) or not info.get("text"):
        return None
    if info.get("mode") == "layer by layer":
        blocks = " and the unembedding in row blocks" if info.get("unembedding") == "row blocks" else ""
        return (f"{info['text']}: each pass expands the layers it reaches{blocks}, keeping what fits the budget "
                f"(the numbers are those of the model expanded whole)")
    return info["text"] if info.get("expanded_bytes") else None


def example_words(meta: dict, param: str, called: str | None = None) -> list[str]:
    """How `param` (`called` in the words: "W_Q of layer 0") is stored and, worked from its block's
    bytes, the first of its numbers (the walkthrough's first multiplication by it), or [] when the
    trace has no such example."""
    stored = (meta.get("storage") or {}).get(param)
    if stored is None:
        return []
    ex = (meta.get("storage_examples") or {}).get(stored)
    lines = []
    called = called or param
    if stored in FLOAT_WORDS:
        lines.append(f"{called} is stored as {FLOAT_WORDS[stored]}")
    elif ex is not None and ex.get("words"):
        lines.append(f"{called} is stored as {stored}: {ex['words']}")
    if ex is not None and ex.get("param") == param and "value" in ex:
        parts = ", ".join(f"{k} = {_value(v)}" for k, v in (ex.get("parts") or {}).items())
        where = f"{ex.get('tensor', param)}[{', '.join(str(i) for i in ex.get('index', [0, 0]))}]"
        lines.append(f"its first number, {where}, from its block's bytes: {parts} → {ex.get('formula', 'w')} = "
                     f"{_value(ex['value'])}")
    return lines + split_words(meta, param)


def _value(v) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return num(v, 6) if abs(v) >= 1e-4 or v == 0 else f"{v:.3e}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)
