"""A tokenizer from a GGUF file's metadata (llama.cpp's `tokenizer.ggml.*` keys), given as plain Python
values: the ids transformers' GGUF loading gives (transformers/integrations/gguf/gguf_tokenizer_mapping.py),
with the pre-tokenizer of each `tokenizer.ggml.pre` name taken from llama.cpp (src/llama-vocab.cpp).

The metadata is turned into the tokenizer.json transformers would build, then read by tracer's own
readers: `tokenizer.ggml.model` "gpt2" is byte-level BPE (`HFTokenizer`): tokens not written in GPT-2's
byte aliases are respelled in them, merges as the file lists them, the pre-tokenizer from the `pre`
name; "llama" is SentencePiece BPE (`SPTokenizer`): Metaspace ("▁", prepend_scheme "first"), byte
fallback, fuse_unk, and merges rebuilt from the vocabulary and the scores as transformers'
`generate_merges` does when the file has none. Tokens of type 3 (control) are special added tokens,
type 4 (user-defined) plain added tokens, both matched whole before BPE; the bos/eos/unk/padding tokens
are special too. BOS/EOS are added as `add_bos_token` / `add_eos_token` say (a "llama" file without the
flag adds BOS, as llama.cpp does). A Gemma vocabulary (gemma, gemma2, gemma3) is read as transformers'
`gemma_tokenizer` reads it: tokens of two or more spaces respelled "▁▁…", merges rebuilt in the tokens'
file order (Gemma's scores do not follow its merges), GemmaTokenizer's steps (Replace(" ", "▁"), no
space prefix, its `<mask>` special); Phi-3's as its `phi3_tokenizer`: the ▁ prefix from a normalizer,
before every text. A `gemma4` vocabulary (Gemma 4's converter) as transformers reads it: GemmaTokenizer's steps on
the tokens and merges as the file gives them, no BOS added (its chat template writes one; llama.cpp adds one,
which `follow="llama.cpp"` does). Other models (t5, rwkv, …) and gemma3n are refused in one line.

Where llama.cpp and transformers part, transformers is followed by default (its ids are the reference
tracer is checked against): it knows fewer `pre` names and gives the others GPT-2's split (SmolLM2's own
tokenizer.json and llama.cpp cut digits apart first: " ½" is one token to transformers, two to them),
it sets no `ignore_merges` for Llama 3, and it always puts `▁` before a llama vocabulary's text, where
`add_space_prefix` false says not to. `follow="llama.cpp"` gives the `pre` name's own split and reads the flag.
"""

from __future__ import annotations

from .bpe import refuse, two_token_splits
from ..errors import TracerError, near
from .hf_tokenizer import byte_aliases
from .sp_tokenizer import SPACE

CONTROL, USER_DEFINED = 3, 4
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"  # Qwen2's, combining marks kept
           r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")         # with their letters
_GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
           r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _split(regex: str) -> dict:
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}


_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
_DIGITS_THEN_GPT2 = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, _BYTE_LEVEL]}
_LLAMA3_NAMES = ("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "dbrx", "smaug-bpe")
_QWEN2_NAMES = ("qwen2", "deepseek-r1-qwen", "megrez")
_GPT4O_NAMES = ("gpt-4o", "llama4")
# llama.cpp's `pre` names → the pre-tokenizer of the model's own tokenizer.json, and ignore_merges
PRE_TOKENIZERS = {
    **dict.fromkeys(("default", "gpt-2", "gpt2", "mpt", "olmo", "jais"), (_BYTE_LEVEL, False)),
    **dict.fromkeys(_LLAMA3_NAMES, (_split(_LLAMA3), True)),
    **dict.fromkeys(_QWEN2_NAMES + ("stablelm2",), (_split(_QWEN2), False)),
    **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"), (_DIGITS_THEN_GPT2, False)),
    **dict.fromkeys(_GPT4O_NAMES, (_split(_GPT4O), False)),
    "tekken": (_split(_TEKKEN), False),
    "qwen35": (_split(_QWEN35), False),
}
# transformers' table (GGUF_PRE_TOKENIZER_SPLITS) for the same names: the others get GPT-2's ByteLevel
# split, and ignore_merges is never set
TRANSFORMERS_PRE = {**dict.fromkeys(_LLAMA3_NAMES, _split(_LLAMA3)), **dict.fromkeys(_QWEN2_NAMES, _split(_QWEN2)),
                    **dict.fromkeys(_GPT4O_NAMES, _split(_GPT4O)), "tekken": _split(_TEKKEN),
                    "qwen35": _split(_QWEN35)}  # (not in transformers' table, which reads no qwen35 file: its Qwen3.5 split)
NFC_FIRST = ("qwen35",)  # `pre` names whose model's tokenizer.json puts text in NFC first (Qwen3_5Tokenizer)
GEMMA = ("gemma", "gemma2", "gemma3")  # transformers' gemma_tokenizer: respelled spaces, merges in file order
PHI3 = ("phi3",)  # transformers' phi3_tokenizer: the space prefix from a normalizer, no pre-tokenizer
_REBUILT = ("gemma3n",)  # transformers builds it another way again
GEMMA4 = "gemma4"  # tokenizer.ggml.model of Gemma 4: GemmaTokenizer's steps on the file's tokens and merges


def _get(meta: dict, key: str, default=None):
    value = meta.get(key, default)
    return value.tolist() if hasattr(value, "tolist") else value


def generate_merges(tokens: list[str], vocab: dict[str, int], scores) -> list[tuple[str, str]]:
    """transformers' `generate_merges(vocab, vocab_scores)`: every split of every token into two tokens,
    by the parts' ids, then all of them by score (highest first), then the parts' lengths, stably."""
    merges, score_of = [], dict(zip(tokens, scores))
    cuts = dict(two_token_splits(score_of))  # each token's splits, in time linear in the tokens' length
    for piece, score in score_of.items():
        local = [(piece[:k], piece[k:], score) for k in cuts.get(piece, ())]
        merges.extend(sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]])))
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(a, b) for a, b, _ in merges]


def _added(tokens, types, vocab, named: list[int], byte_level: bool, where) -> list[dict]:
    """The added tokens transformers makes: control tokens (spelled in byte aliases, for byte-level),
    user-defined ones found in the vocabulary, and the named bos/eos/unk/padding tokens."""
    alphabet = set(byte_aliases())
    out, seen = [], set()

    def add(i: int, special: bool):
        content = tokens[i]
        if content in seen:
            return
        if vocab.get(content) is None:
            raise TracerError(f"tokenizer {where}: the special token {content!r} (id {i}) is not in the vocabulary as spelled")
        seen.add(content)
        out.append({"id": vocab[content], "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                    "normalized": False, "special": special})

    for i, (t, kind) in enumerate(zip(tokens, types)):
        if kind == CONTROL and (not byte_level or set(t) <= alphabet):
            add(i, True)
    for i in named:
        add(i, True)
    for i, (t, kind) in enumerate(zip(tokens, types)):
        if kind == USER_DEFINED and t in vocab:
            add(i, False)
    return out


def _template(bos: str | None, eos: str | None, vocab: dict) -> dict:
    single = ([{"SpecialToken": {"id": bos, "type_id": 0}}] if bos else []) + [{"Sequence": {"id": "A", "type_id": 0}}]
    single += [{"SpecialToken": {"id": eos, "type_id": 0}}] if eos else []
    return {"type": "TemplateProcessing", "single": single, "pair": single,
            "special_tokens": {t: {"id": t, "ids": [vocab[t]], "tokens": [t]} for t in (bos, eos) if t}}


def tokenizer_json_from_gguf(meta: dict, where: str = "gguf", follow: str = "transformers") -> dict:
    """The tokenizer.json table transformers builds from this GGUF metadata (follow="llama.cpp": with the
    pre-tokenizer and ignore_merges llama.cpp gives the `pre` name)."""
    if follow not in ("transformers", "llama.cpp"):
        raise TracerError(f"tokenizer {where}: follow must be 'transformers' or 'llama.cpp', got {follow!r}")
    if not isinstance(meta, dict):
        raise TracerError(f"tokenizer {where}: the GGUF metadata must be a table, got {type(meta).__name__}")
    try:
        return _tokenizer_json(meta, where, follow)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # values of the wrong kind
        raise TracerError(f"tokenizer {where}: GGUF tokenizer metadata tracer cannot read "
                          f"({type(e).__name__}: {str(e)[:120]})") from None


def _tokenizer_json(meta: dict, where: str, follow: str) -> dict:
    model = _get(meta, "tokenizer.ggml.model")
    tokens = _get(meta, "tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise TracerError(f"tokenizer {where}: tokenizer.ggml.tokens is not a list of strings")
    types = _get(meta, "tokenizer.ggml.token_type") or [1] * len(tokens)
    if len(types) != len(tokens):
        raise TracerError(f"tokenizer {where}: {len(types)} token types for {len(tokens)} tokens")
    if not all(isinstance(k, int) and not isinstance(k, bool) for k in types):
        raise TracerError(f"tokenizer {where}: tokenizer.ggml.token_type is not a list of whole numbers")
    arch = _get(meta, "general.architecture")
    if model not in ("gpt2", "llama", GEMMA4):
        refuse(where, f"tokenizer.ggml.model {model!r} (tracer reads gpt2, llama and gemma4)")
    if model == "llama" and arch in _REBUILT:
        refuse(where, f"a {arch} vocabulary (transformers rebuilds its tokens and merges)")
    ids = {k: _get(meta, f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "unknown", "padding")}
    for k, i in ids.items():
        if i is not None and not (isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(tokens)):
            raise TracerError(f"tokenizer {where}: tokenizer.ggml.{k}_token_id {i!r} is not a token id")
    merges = _get(meta, "tokenizer.ggml.merges")
    if merges is not None:
        pairs = [m.split(" ") if isinstance(m, str) else [] for m in merges]
        if any(len(p) != 2 for p in pairs):
            raise TracerError(f"tokenizer {where}: a merge is not two tokens separated by one space")
        merges = pairs
    add_bos = _get(meta, "tokenizer.ggml.add_bos_token", model == "llama")
    if model == GEMMA4 and follow == "transformers":  # its chat template writes <bos> itself: transformers adds none
        add_bos = False
    add_eos = _get(meta, "tokenizer.ggml.add_eos_token", False)
    if model == "gpt2":
        alias = byte_aliases()
        alphabet = set(alias)
        spelled = [t if set(t) <= alphabet else "".join(alias[b] for b in t.encode("utf-8")) for t in tokens]
        pre = _get(meta, "tokenizer.ggml.pre", "default")
        if pre not in PRE_TOKENIZERS:
            raise TracerError(f"tokenizer {where}: tokenizer.ggml.pre {pre!r} is not a pre-tokenizer tracer knows"
                              f"{near(str(pre), PRE_TOKENIZERS)}; known: {', '.join(sorted(PRE_TOKENIZERS))}")
        pre_tokenizer, ignore_merges = PRE_TOKENIZERS[pre]
        if follow == "transformers":
            pre_tokenizer, ignore_merges = TRANSFORMERS_PRE.get(pre, _BYTE_LEVEL), False
        if merges is None:
            refuse(where, "a gpt2 vocabulary without tokenizer.ggml.merges")
        model_table = {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False, "byte_fallback": False,
                       "ignore_merges": ignore_merges, "vocab": {t: i for i, t in enumerate(spelled)}, "merges": merges}
        nfc = follow == "transformers" and pre in NFC_FIRST  # the model's own tokenizer.json normalizes; llama.cpp does not
        data = {"normalizer": {"type": "NFC"} if nfc else None, "pre_tokenizer": pre_tokenizer,
                "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}}
    else:
        gemma = arch in GEMMA or model == GEMMA4
        # Gemma files store a token of two or more spaces as spaces; its tokenizer looks them up as "▁▁" (Gemma 4's
        # converter writes the tokens as tokenizer.json spells them)
        spelled = [SPACE * len(t) if arch in GEMMA and " " in t and not t.strip() else t for t in tokens]
        vocab = {t: i for i, t in enumerate(spelled)}
        if merges is None:
            scores = _get(meta, "tokenizer.ggml.scores")
            if gemma:  # Gemma's scores do not follow its merge order; the file's order of the tokens does
                scores = [-i for i in range(len(spelled))]
            if scores is None or len(scores) != len(tokens):
                raise TracerError(f"tokenizer {where}: a llama vocabulary needs tokenizer.ggml.scores (one per token) or merges")
            merges = generate_merges(spelled, vocab, scores)
        unk = "<unk>" if gemma and "<unk>" in vocab else None  # GemmaTokenizer gives BPE its unk token
        if model == GEMMA4 and ids["unknown"] is not None:
            unk = spelled[ids["unknown"]]
        model_table = {"type": "BPE", "dropout": None, "unk_token": unk, "fuse_unk": True, "byte_fallback": True,
                       "ignore_merges": False, "vocab": vocab, "merges": merges}
        data = _sentencepiece_steps(meta, GEMMA[0] if model == GEMMA4 else arch, follow)
    vocab = model_table["vocab"]
    named = [i for i in ids.values() if i is not None]
    if (arch in GEMMA or model == GEMMA4) and "<mask>" in vocab:  # GemmaTokenizer's own special tokens: its mask token too
        named.append(vocab["<mask>"])
    # user-defined tokens as the file spells them (transformers keeps those its vocabulary holds)
    added = _added(tokens if arch in GEMMA else spelled, types, vocab, named, model == "gpt2", where)
    bos = spelled[ids["bos"]] if add_bos and ids["bos"] is not None else None
    eos = spelled[ids["eos"]] if add_eos and ids["eos"] is not None else None
    return {**data, "model": model_table, "added_tokens": added, "post_processor": _template(bos, eos, vocab),
            "truncation": None, "padding": None}


_FUSED = [{"type": "Replace", "pattern": {"String": SPACE}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}]


def _sentencepiece_steps(meta: dict, arch, follow: str) -> dict:
    """The normalizer, pre-tokenizer and decoder of a `llama` vocabulary, as transformers builds them:
    LlamaTokenizer's Metaspace ("first"), Phi-3's Prepend("▁") + Replace(" ", "▁") with no
    pre-tokenizer, GemmaTokenizer's Replace(" ", "▁") with no prefix (and its Split on spaces, which
    finds none left)."""
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
    strip = {"type": "Strip", "content": " ", "start": 1, "stop": 0}
    if arch in GEMMA:
        return {"normalizer": replace, "decoder": {"type": "Sequence", "decoders": _FUSED},
                "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                                  "invert": False}}
    if arch in PHI3:
        return {"normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SPACE}, replace]},
                "pre_tokenizer": None, "decoder": {"type": "Sequence", "decoders": _FUSED + [strip]}}
    # transformers does not read add_space_prefix (always "first"); llama.cpp leaves the space out when false
    space = "never" if follow == "llama.cpp" and _get(meta, "tokenizer.ggml.add_space_prefix") is False else "first"
    return {"normalizer": None, "decoder": {"type": "Sequence", "decoders": _FUSED + [strip]},
            "pre_tokenizer": {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": space, "split": False}}


def tokenizer_from_gguf(meta: dict, path: str | None = None, sha256: str | None = None, follow: str = "transformers"):
    """The Tokenizer a GGUF's metadata describes (`HFTokenizer` or `SPTokenizer`), with `chat_template`,
    `bos_token`, `eos_token` (strings or None) and `add_bos` set from the file; its end token is the eos id.
    path and sha256 name the file in messages and in `spec()`. follow: "transformers" (its ids) or
    "llama.cpp" (the `pre` name's own split: differs on digits for smollm, starcoder, …)."""
    from pathlib import Path

    from .hf_tokenizer import HFTokenizer
    from .sp_tokenizer import SPTokenizer

    where = Path(path).name if path else "gguf"
    data = tokenizer_json_from_gguf(meta, where, follow)
    eos_id = _get(meta, "tokenizer.ggml.eos_token_id")
    tok = (HFTokenizer(where, data=data, end=eos_id) if data["decoder"]["type"] == "ByteLevel"
           else SPTokenizer(where, data=data, end=eos_id))
    tokens, bos_id = _get(meta, "tokenizer.ggml.tokens"), _get(meta, "tokenizer.ggml.bos_token_id")
    tok.bos_token = tokens[bos_id] if bos_id is not None else None  # as the file spells them: what templates get
    tok.eos_token = tokens[eos_id] if eos_id is not None else None
    tok.add_bos = bool(data["post_processor"]["single"][0].get("SpecialToken"))
    template = _get(meta, "tokenizer.chat_template")
    tok.chat_template = template if isinstance(template, str) else None
    tok.path, tok.sha256 = (str(Path(path).resolve()) if path else None), sha256
    tok.source = {"kind": "gguf", "path": tok.path, "sha256": sha256, "follow": follow}  # what spec() gives
    return tok
