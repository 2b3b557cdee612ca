"""Ollama's own older GGUF blobs, read as llama.cpp's current code reads them: through Ollama's compat layer.

Since Ollama runs its models on llama.cpp (llama-server, May 2026), the blobs its own converter wrote
before are translated in memory as they are opened (ollama/ollama llama/compat/llama-ollama-compat.cpp,
`translate_metadata`), so that llama.cpp's loader accepts them. tracer makes the same translation for the
architectures it reads, on a view of the file (new dictionaries of metadata and tensors; the mapped
file is untouched), and says once what it did (`Checkpoint.notes`):

    gemma3    a blob with one of Ollama's marks (gemma3.mm.tokens_per_image, v.* or mm.* tensors, the
              nested rope.local/global.freq_base, tokenizer.ggml.add_padding/unknown_token, or no
              layer_norm_rms_epsilon): rope.global.freq_base → rope.freq_base and rope.local.freq_base →
              rope.freq_base_swa; ε 1e-6, bases 1e6 and 1e4 and Gemma's chat template where absent; the
              linear ×8 RoPE scaling of the 4B, 12B and 27B models (context_length 131072 or more) that
              the blobs dropped; the tokenizer's entries beyond token_embd's rows (the image tokens)
              dropped; the vision tower (v.*, mm.*) left unread; the final_logit_softcapping 30 the 2025
              converter wrote for the 1B and 270M models dropped (Gemma 3 has none: transformers computes
              none, Ollama's engine ignored it, llama.cpp's sliding-window Gemma 3 graph applies none).
    gptoss    → gpt-oss: every gptoss.* key copied to gpt-oss.*, expert_feed_forward_length from
              ffn_gate_exps, rope.scaling.type yarn, the pre-tokenizer gpt-4o; tensors attn_out →
              attn_output, attn_sinks → attn_sinks.weight, ffn_norm → post_attention_norm.
    olmo3     → olmo2 (llama.cpp's olmo2 loader reads OLMo 3): every olmo3.* key copied to olmo2.*.
    llama     (an Ollama blob only: the fix would change a llama.cpp file) Llama 3's tokenizer gap: no
              (or "default") pre-tokenizer, or <|end_of_text|> as the end token → llama-bpe and <|eot_id|>.

A blob that needs a fix neither llama.cpp nor tracer makes is refused by name: EmbeddingGemma under
`gemma3` (dense.0.weight: llama.cpp reads it as gemma-embedding, bidirectional); a Mixtral blob of 2024
whose ffn_up_exps holds w2 (down) and ffn_down_exps w3 (up); and `rope.scaling.attn_factor` other than 1,
which llama.cpp multiplies every rotated Q and K by. (A phi3 blob's rope_factors_long/short, written for
every Phi-3, are refused as they are for any file: empty ones, a dimension of 0, by the GGUF reader, as
llama.cpp refuses their shape; long and short factors as the longrope scaling tracer does not compute.) Every other architecture (qwen2, qwen3,
olmo2, phi3, gemma2, qwen3moe, qwen2moe, olmoe) is read as it is: Ollama's converter wrote llama.cpp's
keys for it, or its library took llama.cpp's file. An Ollama blob that lacks a key its architecture
needs is refused in one line naming the keys. Core module: numpy and the standard library.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..errors import TracerError

BLOB = re.compile(r"sha256-[0-9a-f]{64}")  # a file of Ollama's blob folder
NEEDED = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count", "context_length",
          "attention.layer_norm_rms_epsilon")  # what tracer's GGUF reader needs of every architecture
GGML_ORG = {18: " (ggml-org/gemma-3-270m-it-GGUF)", 26: " (ggml-org/gemma-3-1b-it-GGUF)"}  # by block count
# Gemma's turns as llama.cpp gets them when the blob has no template (the compat layer's: no system role)
GEMMA3_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}")


class _View:
    """The translated view of one file: metadata, its types, tensors, and what was done to them."""

    def __init__(self, f, where: Path, arch: str):
        self.meta, self.types, self.tensors = dict(f.metadata), dict(f.types), dict(f.tensors)
        self.where, self.arch, self.arch_to, self.done = where, arch, arch, []  # arch_to: the name llama.cpp reads

    def refuse(self, why: str) -> TracerError:
        return TracerError(f"{self.where}: this Ollama blob of {self.arch} {why}")

    def set(self, key: str, value, kind: str) -> None:
        self.meta[key] = float(np.float32(value)) if kind == "FLOAT32" else value  # as llama.cpp keeps it
        self.types[key] = kind

    def inject(self, key: str, value, kind: str, said: str) -> None:
        """The compat layer's inject_*_if_missing, and `said` in the note (once)."""
        if key not in self.meta:
            self.set(key, value, kind)
            self.done += [said] if said not in self.done else []

    def copy(self, src: str, dst: str) -> bool:
        """The compat layer's copy_kv: `src`'s value under `dst` too, unless `dst` is there already."""
        if src in self.meta and dst not in self.meta:
            self.meta[dst], self.types[dst] = self.meta[src], self.types.get(src, "")
            return True
        return False

    def copy_prefix(self, old: str, new: str) -> None:
        moved = sum(self.copy(k, new + k[len(old):]) for k in list(self.meta) if k.startswith(old))
        self.meta["general.architecture"] = self.arch_to = new.rstrip(".")
        self.done.append(f"architecture {old.rstrip('.')} read as {self.arch_to} ({moved} keys copied)")

    def rename(self, needle: str, to: str) -> None:
        """The compat layer's rename_tensors_containing: the first `needle` in each tensor name replaced."""
        renamed = {n: n.replace(needle, to, 1) for n in self.tensors if needle in n}
        for old, new in renamed.items():
            if new in self.tensors and new not in renamed:
                raise self.refuse(f"holds both {old!r} and {new!r}; the second is what the first is renamed to")
        self.tensors = {renamed.get(n, n): (replace(t, name=renamed[n]) if n in renamed else t)
                        for n, t in self.tensors.items()}
        if renamed:
            self.done.append(f"{len(renamed)} tensors *{needle}* renamed *{to}*")

    def hide(self, prefixes: tuple[str, ...], what: str) -> None:
        """The compat layer's add_skip_prefix: tensors llama.cpp's text loader does not claim."""
        hidden = [n for n in self.tensors if n.startswith(prefixes)]
        for n in hidden:
            del self.tensors[n]
        if hidden:
            self.done.append(f"{len(hidden)} tensors of {what} ({', '.join(p + '*' for p in prefixes)}) not read")


def _number(v) -> bool:
    """A number (a bool is none)."""
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _ollama_gemma3(v: _View) -> bool:
    """detect_ollama_gemma3: a gemma3 file with one of the marks of Ollama's converter."""
    m = v.meta
    return ("gemma3.mm.tokens_per_image" in m or any(n.startswith(("v.", "mm.")) for n in v.tensors)
            or "gemma3.rope.global.freq_base" in m or "gemma3.rope.local.freq_base" in m
            or "tokenizer.ggml.add_padding_token" in m or "tokenizer.ggml.add_unknown_token" in m
            or "gemma3.attention.layer_norm_rms_epsilon" not in m)


def _gemma3(v: _View, blob: bool) -> None:
    if not _ollama_gemma3(v):
        return
    if "dense.0.weight" in v.tensors:
        raise v.refuse("is EmbeddingGemma (dense.0.weight): llama.cpp reads it as gemma-embedding, an embedding "
                       "model whose attention sees both ways; tracer traces causal decoders")
    cap = v.meta.get("gemma3.final_logit_softcapping")
    if cap == 30 and "gemma3.rope.global.freq_base" in v.meta:  # the converter of 2025 wrote cmp.Or(cap, 30)
        del v.meta["gemma3.final_logit_softcapping"]
        v.done.append("the final_logit_softcapping 30 its converter wrote dropped (Gemma 3 has no soft-cap; Ollama's "
                      "engine and llama.cpp's sliding-window Gemma 3 graph ignore it)")
    for old, new in (("global.freq_base", "freq_base"), ("local.freq_base", "freq_base_swa")):
        if v.copy(f"gemma3.rope.{old}", f"gemma3.rope.{new}"):
            v.done.append(f"rope.{old} read as rope.{new}")
    v.inject("gemma3.attention.layer_norm_rms_epsilon", 1e-6, "FLOAT32", "ε 1e-6 supplied")
    v.inject("gemma3.rope.freq_base", 1e6, "FLOAT32", "RoPE base 1000000 supplied")
    v.inject("gemma3.rope.freq_base_swa", 1e4, "FLOAT32", "the sliding layers' RoPE base 10000 supplied")
    v.inject("tokenizer.chat_template", GEMMA3_TEMPLATE, "STRING", "Gemma's chat template supplied")
    context = v.meta.get("gemma3.context_length")
    if _number(context) and context >= 131072:  # the 4B, 12B and 27B models: 16k trained, stretched ×8
        said = "the 4B+ models' linear RoPE scaling ×8 restored"
        v.inject("gemma3.rope.scaling.type", "linear", "STRING", said)
        v.inject("gemma3.rope.scaling.factor", 8.0, "FLOAT32", said)
    embed = v.tensors.get("token_embd.weight")
    if embed is not None and len(embed.shape) == 2:  # Ollama left the image tokens in the tokenizer
        rows, tokens = embed.shape[0], v.meta.get("tokenizer.ggml.tokens")
        if isinstance(tokens, (list, np.ndarray)) and len(tokens) > rows:
            for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
                if isinstance(v.meta.get(key), (list, np.ndarray)) and len(v.meta[key]) > rows:
                    v.meta[key] = v.meta[key][:rows]
            v.done.append(f"{len(tokens) - rows} tokenizer entries beyond token_embd's {rows} rows dropped")
    v.hide(("v.", "mm."), "the vision tower")


def _gptoss(v: _View, blob: bool) -> None:
    v.copy_prefix("gptoss.", "gpt-oss.")
    gate = v.tensors.get("blk.0.ffn_gate_exps.weight")
    if gate is not None and len(gate.dims) > 1:  # {d_model, expert d_mlp, experts}
        v.inject("gpt-oss.expert_feed_forward_length", int(gate.dims[1]), "UINT32",
                 "expert_feed_forward_length read from ffn_gate_exps")
    v.inject("gpt-oss.rope.scaling.type", "yarn", "STRING", "rope.scaling.type yarn supplied")
    if v.meta.get("tokenizer.ggml.pre") != "gpt-4o":
        v.set("tokenizer.ggml.pre", "gpt-4o", "STRING")
        v.done.append("pre-tokenizer gpt-4o")
    for needle, to in ((".attn_out", ".attn_output"), (".attn_sinks", ".attn_sinks.weight"),
                       (".ffn_norm", ".post_attention_norm")):
        v.rename(needle, to)


def _olmo3(v: _View, blob: bool) -> None:
    v.copy_prefix("olmo3.", "olmo2.")


def _token(meta: dict, i: int):
    """Token `i` of the vocabulary, or None."""
    tokens = meta.get("tokenizer.ggml.tokens")
    return tokens[i] if isinstance(tokens, list) and i < len(tokens) else None


def _llama(v: _View, blob: bool) -> None:
    """handle_llama3_metadata (an Ollama blob only), and Ollama's Mixtral of 2024, refused."""
    up, gate = v.tensors.get("blk.0.ffn_up_exps.weight"), v.tensors.get("blk.0.ffn_gate_exps.weight")
    if up is not None and gate is not None and len(up.dims) == len(gate.dims) == 3 and gate.dims[0] != gate.dims[1] \
            and tuple(up.dims[:2]) == (gate.dims[1], gate.dims[0]):
        raise v.refuse("(a Mixtral) stores each expert's w2 (the down projection) as ffn_up_exps and w3 (up) as "
                       "ffn_down_exps, as Ollama's converter of 2024 did; llama.cpp refuses their shapes, and so does tracer")
    m = v.meta
    if not blob or _token(m, 128009) != "<|eot_id|>":
        return
    pre, eos = m.get("tokenizer.ggml.pre"), m.get("tokenizer.ggml.eos_token_id")
    template = m.get("tokenizer.chat_template") if isinstance(m.get("tokenizer.chat_template"), str) else ""
    markers = _token(m, 128006) == "<|start_header_id|>" or "<|start_header_id|>" in template or "<|eot_id|>" in template
    default_pre = pre is None or pre in ("", "default")
    if not (markers and (default_pre or eos == 128001)):
        return
    if default_pre:
        v.set("tokenizer.ggml.pre", "llama-bpe", "STRING")
        v.done.append("Llama 3's pre-tokenizer llama-bpe supplied")
    if not isinstance(eos, int) or eos == 128001:
        v.set("tokenizer.ggml.eos_token_id", 128009, "UINT32")
        v.done.append("the end token <|eot_id|> (128009) supplied")
    if m.get("tokenizer.ggml.eot_token_id") in (None, 128001):
        v.set("tokenizer.ggml.eot_token_id", 128009, "UINT32")
    v.set("tokenizer.ggml.eos_token_ids", np.array([128009], np.int32), "ARRAY[INT32]")


HANDLERS = {"gemma3": _gemma3, "gptoss": _gptoss, "olmo3": _olmo3, "llama": _llama}


def translate(f, where: Path, name: str | None = None, known=()) -> tuple[str, ...]:
    """`f` (an open `GGUFFile`) given the metadata and tensors llama.cpp reads after Ollama's compat layer
    (new dictionaries: the file and its map are untouched). Returns the note saying what was done (none
    for a file that needs nothing); refuses, in one line, a blob that needs a fix no one makes. `name`:
    what the user asked for (`ollama:…` marks an Ollama blob, as does a blob folder's sha256-… file name);
    `known`: the architectures the caller reads, whose needed keys an Ollama blob must have."""
    arch = f.metadata.get("general.architecture")
    if not isinstance(arch, str):
        return ()
    blob = (name or "").startswith("ollama:") or bool(BLOB.fullmatch(Path(where).name))
    v = _View(f, Path(where), arch)
    if arch in HANDLERS:
        HANDLERS[arch](v, blob)
    if blob and v.arch_to in known:
        _check(v)
    if not v.done:
        return ()
    f.metadata, f.types, f.tensors = v.meta, v.types, v.tensors
    return (f"{name or Path(where).name}: an Ollama blob of {arch}, read as llama.cpp reads it through Ollama's compat layer: "
            + "; ".join(v.done),)


def _check(v: _View) -> None:
    """An Ollama blob of an architecture tracer reads: the keys every one needs there, and no YaRN factor
    tracer does not apply (llama.cpp multiplies each rotated Q and K by rope.scaling.attn_factor)."""
    a, old = v.arch_to, v.arch
    lacks = [f"{old}.{k}" for k in NEEDED if f"{a}.{k}" not in v.meta]
    if lacks:
        raise v.refuse(f"lacks {', '.join(repr(k) for k in lacks)}, which every {a} model needs: the blob is damaged or "
                       f"not a whole model (ollama pull it again)")
    factor = v.meta.get(f"{a}.rope.scaling.attn_factor")
    if factor is not None and not (_number(factor) and float(factor) == 1.0):
        raise v.refuse(f"has rope.scaling.attn_factor {factor!r}: llama.cpp multiplies every rotated Q and K by it, "
                       f"which tracer does not compute")
