"""How the weights are stored in their file, in words: the header's line, and one number worked from
its block's bytes where the walkthrough first multiplies by it.

Reads the trace's meta only: `storage` (parameter → storage type, as the reader found it),
`storage_bytes` (parameter → its tensor's bytes in the file, for GGUF files) and `storage_examples`
(storage type → one element de-quantized step by step, `tracer.formats.quant_explain` via the GGUF
reader): the renderer never opens the file. The words are the same for the terminal, the demo and
the page (`storage_words`, `example_words`). A lookup type's example comes as steps (an index into a
table, a grid row and its signs, an E8M0 scale, a ternary digit: `tracer.formats.lookup_explain`),
each worded by `STEP_WORDS`.
"""

from __future__ import annotations

from .fmt import num, size

FLOAT_WORDS = {
    "F32": "float32 (4 bytes a number), used as it is",
    "F16": "float16 (2 bytes a number: 10 bits of fraction), widened to float32 exactly",
    "BF16": "bfloat16 (2 bytes a number: float32's top half, 7 bits of fraction), widened to float32 exactly",
    "F64": "float64, narrowed to float32",
}


# A lookup type's steps, from its block's bytes to the float (`tracer.formats.lookup_explain` gives the slots)
STEP_WORDS = {
    "scale": "{name} = {value} (float16)",
    "sub_scale": "sub-block {sub_block}'s {bits}-bit scale {name} = {s}, so {formula} = {value}",
    "e8m0": "the E8M0 scale byte e = {e} is 2^(e − 127) = 2^{power} = {scale}, halved to {half} because the table "
            "holds the E2M1 values doubled",
    "ue4m3": "sub-block {sub_block}'s UE4M3 scale byte {e} (4 exponent bits, 3 mantissa bits) is {scale}, halved to "
             "{half} because the table holds the E2M1 values doubled",
    "lookup": "the {bits}-bit index {q} selects {table}[{q}] = {entry} from the {size}-entry {kind} table",
    "e2m1": "the 4-bit code {q} is the E2M1 float {e2m1} (a sign bit, 2 exponent bits, 1 mantissa bit): "
            "{table}[{q}] = {entry}",
    "grid": "the {bits}-bit index {row} selects row {row} of {grid} ({size} rows of {width}): {values}; its number "
            "{column} is {entry}",
    "ksigns": "the 7-bit sign index {index} gives ksigns_iq2xs[{index}] = {byte} (bit 7 makes the count of ones "
              "even); its bit {column} is {bit}, so {signed}",
    "signs": "the sign byte {byte}: its bit {column} is {bit}, so {signed}",
    "delta": "bit {bit} of {at} gives the shift delta = {delta}",
    "trit": "byte {byte} = {stored} holds five base-3 digits; digit {place}, ((byte·3^{place}) mod 256)·3 >> 8, is {digit}",
    "bits2": "byte {byte} = {stored}: bits {low}-{high} are the digit {digit}",
    "result": "w = {formula} = {factors} = {value}",
}
ROLES = ("embedding", "attention", "MLP", "experts", "norms", "unembedding", "other")


def role(param: str) -> str:
    """What a parameter is part of, for the header's storage line: embedding, attention, MLP, experts,
    norms, unembedding (or other)."""
    parts = param.split(".")
    if any(p.startswith("ln") or p.endswith("norm") for p in parts):
        return "norms"
    if param in ("W_E", "W_pos"):
        return "embedding"
    if param in ("W_U", "b_U"):
        return "unembedding"
    if "expert" in param:
        return "experts"
    return "attention" if ".attn." in param else "MLP" if ".mlp." in param else "other"


def step_words(kind: str, slots: dict) -> str | None:
    """One step of a number's way from its block's bytes (`STEP_WORDS`), its numbers formatted (None:
    slots that do not fit the step, as a damaged saved trace may hold)."""
    try:
        shown = {k: _short(v) for k, v in slots.items()}
        if kind in ("ksigns", "signs"):
            shown["byte"] = f"0b{int(slots['byte']):08b}"
        if kind == "result":
            shown["factors"] = "·".join(_short(f) for f in slots["factors"])
        return STEP_WORDS[kind].format(**shown)
    except (KeyError, ValueError, TypeError, AttributeError, IndexError):
        return None


def storage_summary(meta: dict) -> dict[str, int]:
    """Storage type → how many parameters are stored as it, most first."""
    counts: dict[str, int] = {}
    for dtype in (meta.get("storage") or {}).values():
        counts[str(dtype)] = counts.get(str(dtype), 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def numbers_by_type(storage: dict, numbers: dict) -> dict[str, int]:
    """Storage type → how many numbers (weights) it holds, most first."""
    out: dict[str, int] = {}
    for param, dtype in storage.items():
        out[str(dtype)] = out.get(str(dtype), 0) + int(numbers.get(param, 0))
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def storage_words(meta: dict) -> str | None:
    """One sentence for the header: what the file stores the weights as, or None when tracer made them."""
    counts = storage_summary(meta)
    if not counts or set(counts) <= {"F32", "float32", "float64"}:  # as the decoder computes: nothing to say
        return None
    sizes = meta.get("storage_bytes")
    if isinstance(sizes, dict) and sizes and isinstance(meta.get("storage"), dict):
        parts = ", ".join(by_role(meta["storage"], sizes, meta.get("split_from") or {}))
    elif isinstance(meta.get("storage_numbers"), dict) and meta["storage_numbers"]:
        parts = ", ".join(f"{k} ({n:,} numbers)" for k, n in numbers_by_type(meta["storage"], meta["storage_numbers"]).items())
    else:  # a trace saved before the numbers were counted: its tensors
        parts = ", ".join(f"{k} ({v} weight tensor{'s' if v != 1 else ''})" for k, v in counts.items())
    quantized = any(k not in FLOAT_WORDS and not k.startswith("float") for k in counts)
    how = ("each block of numbers is de-quantized to float32 when the model is read, so every number below is "
           "the stored value exactly as the file encodes it" if quantized else "widened to float32 (exactly) when read")
    return f"weights stored as {parts}; {how}"


def by_role(storage: dict, sizes: dict, split: dict) -> list[str]:
    """"attention IQ4_NL (3.41 MB)", "MLP IQ3_S (10.1 MB) and Q4_K (2.05 MB)", …: each role's storage
    types by their bytes in the file, most first (a tensor cut into several parameters counted once)."""
    held: dict[str, dict[str, int]] = {}
    seen: set = set()
    for param, dtype in storage.items():
        tensor = split.get(param)
        if tensor is not None and tensor in seen:
            continue
        seen.add(tensor)
        kinds = held.setdefault(role(param), {})
        nbytes = sizes.get(param, 0)
        kinds[str(dtype)] = kinds.get(str(dtype), 0) + (int(nbytes) if isinstance(nbytes, (int, float)) else 0)
    out = []
    for r in ROLES:
        kinds = sorted((held.get(r) or {}).items(), key=lambda kv: -kv[1])
        if kinds:
            each = [f"{k} ({size(v)})" for k, v in kinds]
            out.append(f"{r} " + (", ".join(each[:-1]) + f" and {each[-1]}" if len(each) > 1 else each[0]))
    return out


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
        where = f"{ex.get('tensor', param)}[{', '.join(str(i) for i in ex.get('index', [0, 0]))}]"
        steps = [step_words(*s) for s in ex.get("steps") or [] if isinstance(s, (list, tuple)) and len(s) == 2
                 and s[0] in STEP_WORDS]
        if steps and None not in steps:  # a lookup type: the table, the grid row, the scale byte or the digit, in turn
            lines.append(f"its first number, {where}, from its block's bytes: " + "; ".join(steps))
        else:
            parts = ", ".join(f"{k} = {_value(v)}" for k, v in (ex.get("parts") or {}).items())
            lines.append(f"its first number, {where}, from its block's bytes: {parts} → {ex.get('formula', 'w')} = "
                         f"{_value(ex['value'])}")
    return lines + split_words(meta, param)


def _short(v) -> str:
    """A number in its few exact digits when it has them (−1.125, 0.0078125, 12), else as `_value` shows it."""
    if isinstance(v, float) and v == v and abs(v) != float("inf"):
        for digits in (4, 7):
            if float(f"{v:.{digits}g}") == v:
                return f"{v:.{digits}g}"
    return _value(v)


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
