"""Hugging Face `tokenizer.json` files of the byte-level BPE kind (GPT-2, Llama 3, Qwen2, SmolLM2, …),
giving exactly the ids `tokenizers` gives, special tokens and the post-processor's BOS included.

The steps are `tokenizers`' own: added tokens are cut out of the text (leftmost-longest, with lstrip/
rstrip; those matched on the raw text, then those matched after the normalizer); each other piece is
normalized (none or NFC), pre-tokenized (Split regexes, Digits, ByteLevel and its prefix space), written
in GPT-2's byte aliases and merged by BPE; the template adds its BOS/EOS ids. Two engines:
- `bpe`: the algorithm of `tokenizers` (models/bpe/word.rs: the pair of lowest merge index first, leftmost
  on ties; with `ignore_merges` a pre-token that is a token stays whole), cached per pre-token. Its regexes
  run on the `regex` engine (checked and time-limited by `tracer.tokenizers.patterns`), with `\\p{L}`-style classes read from tiktoken's regex engine (Unicode 16, like
  Oniguruma in `tokenizers`; Python 3.11's tables are Unicode 14) and `\\s` as Unicode White_Space.
- `tiktoken`: an Encoding of the vocabulary (rank = id) with the Split regex as `pat_str`, used only where
  tiktoken's rule (merge the pair whose concatenation has the lowest rank; a piece that is a token stays
  whole) is the file's: merges exactly as Hugging Face converts tiktoken ranks (every split of every
  token into two tokens, by the token's id, then the parts' ids: Llama 3), `ignore_merges`, one regex
  Split + ByteLevel. A list of one merge per token (GPT-2, Qwen2, anything `tokenizers` trains) is not
  that rule in general (tiktoken would merge "a"+"bc" into "abc" where only "ab c" is a merge): `bpe`.
A vocabulary may lack some byte aliases (SmolLM2's): those bytes are left out of the word, or written as
the unk token, as `tokenizers` does, and `dropped(text)` names them. The shared parts (added tokens, the
merge loop, regexes, post-processor) are in `tracer.tokenizers.bpe`; SentencePiece-style files are `sp_tokenizer`'s.
Anything else (SentencePiece-only folders, other models, normalizers, pre-tokenizers, post-processors or
decoders, BPE dropout, single_word added tokens) is refused in one line, never approximated.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from pathlib import Path

from .bpe import END_NAMES, WHITE_SPACE, BPEBase, load, merge, python_regex, read_vocab, refuse, split, two_token_splits, unicode_class  # noqa: F401
from ..errors import TracerError
from .patterns import check_shape, is_panic, rust_quiet
from ..formats.reading import inside

GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"  # ByteLevel's use_regex
# tokenizers' NFC uses Unicode 9 tables: these marks, new since, are starters to it (no reordering across
# them), and U+11935 U+11930 do not compose to U+11938. Python's NFC is run between them (checked against
# tokenizers 0.23.3 over every code point).
_NFC_APART = re.compile("([\U000007fd\U00000898-\U0000089f\U000008ca-\U000008d3\U000009fe\U00000c3c\U00000d3b-\U00000d3c"
                        "\U00000eba\U00001715\U00001abf-\U00001ace\U00001df6-\U00001dfa\U0000a82c\U00010d24-\U00010d27"
                        "\U00010eab-\U00010eac\U00010f46-\U00010f50\U00010f82-\U00010f85\U00011070\U0001133b\U0001145e"
                        "\U00011839-\U0001183a\U0001193d-\U0001193e\U00011943\U000119e0\U00011a34\U00011a47\U00011a99"
                        "\U00011d42\U00011d44-\U00011d45\U00011d97\U00016ff0-\U00016ff1\U0001e130-\U0001e136\U0001e2ae"
                        "\U0001e2ec-\U0001e2ef])|(?<=\U00011935)(?=\U00011930)")


@lru_cache(maxsize=None)
def byte_aliases() -> tuple[str, ...]:
    """GPT-2's table: byte b is written as a printable character (printable Latin-1 as itself, the rest
    as chr(256 + n) in byte order)."""
    keep = {*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    others = [b for b in range(256) if b not in keep]
    return tuple(chr(b) if b in keep else chr(256 + others.index(b)) for b in range(256))


@lru_cache(maxsize=None)
def _alias_maps() -> tuple[dict, dict]:
    """byte → alias (a str.translate table for latin-1-decoded bytes) and alias → byte."""
    return dict(enumerate(byte_aliases())), {a: b for b, a in enumerate(byte_aliases())}


def to_aliases(text: str) -> str:
    return text.encode("utf-8").decode("latin-1").translate(_alias_maps()[0])


def token_bytes(token: str) -> bytes:
    """A token's bytes as the ByteLevel decoder gives them: aliases back to bytes, or the token's own
    UTF-8 when any character is not an alias (an added token such as '<|im_start|>' is both)."""
    back = _alias_maps()[1]
    try:
        return bytes(back[c] for c in token)
    except KeyError:
        return token.encode("utf-8")


def find_tokenizer_json(folder) -> Path:
    """The folder's tokenizer.json, or a one-line refusal for a SentencePiece-only folder."""
    path = inside(folder := Path(folder), "tokenizer.json", folder)  # a link out of the folder is refused
    if path.exists() or path.is_symlink():  # a device or a folder: read_small says what it is
        return path
    if (folder / "tokenizer.model").is_file():
        refuse(folder, "only a SentencePiece tokenizer.model, no tokenizer.json")
    raise TracerError(f"tokenizer {folder}: no tokenizer.json in the folder")


def _normalizer(spec, where) -> bool:
    """True for NFC, False for none."""
    kinds = [] if spec is None else [n.get("type") for n in spec.get("normalizers", [])] if spec.get("type") == "Sequence" else [spec.get("type")]
    if set(kinds) <= {"NFC"}:
        return bool(kinds)
    refuse(where, f"normalizer {'+'.join(map(str, kinds))} (tracer reads none or NFC)")


def _pre_tokenizer(spec, where) -> tuple[list, bool, bool, str | None]:
    """The steps (pattern, behavior) before ByteLevel, ByteLevel's use_regex and add_prefix_space, and the
    regex when the whole pre-tokenizer is one Isolated regex split (the shape tiktoken takes), else None."""
    if spec is None:
        refuse(where, "no pre-tokenizer (not a byte-level tokenizer)")
    steps = spec.get("pretokenizers") if spec.get("type") == "Sequence" else [spec]
    if not steps or steps[-1].get("type") != "ByteLevel":
        kinds = [s.get("type") for s in steps or []]
        refuse(where, f"pre-tokenizer {kinds} (tracer reads byte-level ones: ByteLevel last, after Split or Digits)")
    out, sources = [], []
    for s in steps[:-1]:
        kind = s.get("type")
        if kind == "Split":
            pat, behavior = s.get("pattern", {}), s.get("behavior")
            if s.get("invert") or behavior not in ("Isolated", "Removed"):
                refuse(where, f"Split with behavior {behavior} and invert {s.get('invert')} (only Isolated or Removed)")
            out.append((pat["Regex"] if "Regex" in pat else re.escape(pat.get("String", "")), behavior))
            check_shape(out[-1][0], where)  # before either engine sees it: both backtrack
            sources.append(pat["Regex"] if "Regex" in pat and behavior == "Isolated" else None)
        elif kind == "Digits":
            sources.append(None)
            out.append((r"\p{N}" if s.get("individual_digits") else r"\p{N}+", "Isolated"))
        else:
            refuse(where, f"pre-tokenizer {kind}")
    use_regex, prefix = bool(steps[-1].get("use_regex", True)), bool(steps[-1].get("add_prefix_space", False))
    if use_regex:
        sources.append(GPT2_SPLIT)
    # ByteLevel puts its prefix space before each piece the earlier steps made: one regex split and a
    # prefix space fit tiktoken only when ByteLevel itself splits (one prefix per piece between added tokens).
    single = sources[0] if len(sources) == 1 and not (prefix and out) else None
    return out, use_regex, prefix, single


class HFTokenizer(BPEBase):
    """A byte-level BPE tokenizer.json, with the interface of `tracer.tokenizers.tokens.Tokenizer`.

    engine: "auto" (tiktoken where its rule is this tokenizer's, else bpe), "bpe" or "tiktoken"
    (an error where it does not fit). end: the end token's text or id; by default the folder's
    tokenizer_config.json eos_token, else the first of END_NAMES among the special tokens.
    data: the tokenizer.json's table itself (made elsewhere, e.g. from a GGUF's metadata), with
    `path` then only a name for messages.

    A vocabulary may lack some of the 256 byte aliases (SmolLM2 has none for 0xC0, 0xC1, 0xF5–0xFF and
    six control characters): `tokenizers` then leaves those bytes out of the word before merging (or
    writes the model's unk_token for them), and so does this class; `dropped(text)` names them.
    """

    def __init__(self, path, engine: str = "auto", end: str | int | None = None, data: dict | None = None,
                 loaded: tuple[dict, str] | None = None):
        try:
            self._read(path, engine, end, data, loaded)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # a file of the wrong shape
            raise TracerError(f"tokenizer {path}: not a tokenizer.json tracer can read "
                              f"({type(e).__name__}: {str(e)[:120]})") from None

    def _read(self, path, engine: str, end, data, loaded) -> None:
        if data is None:
            path = find_tokenizer_json(path) if Path(path).is_dir() else Path(path)
        data, config = self._open(path, data, loaded)
        where = str(path)
        model = data["model"]
        problems = [f"model type {model.get('type')} (tracer reads BPE)"] if model.get("type", "BPE") != "BPE" else []
        problems += [f"BPE {k} {model[k]!r}" for k in ("continuing_subword_prefix", "end_of_word_suffix") if model.get(k)]
        if problems:
            refuse(where, problems[0])
        self.vocab: dict[str, int] = read_vocab(model.get("vocab", {}), where)
        missing = [b for b, a in enumerate(byte_aliases()) if a not in self.vocab]
        self.missing_bytes = frozenset(missing)
        if len(missing) == 256:
            refuse(where, "the vocabulary has none of the 256 byte aliases (not a byte-level BPE)")
        if missing and model.get("byte_fallback"):
            refuse(where, "byte_fallback in a byte-level vocabulary that lacks byte aliases")
        unk = model.get("unk_token")
        if unk is not None and unk not in self.vocab:
            raise TracerError(f"tokenizer {where}: the unk_token {unk!r} is not in the vocabulary")
        self.unk_id, self.fuse_unk = (self.vocab[unk] if unk is not None else None), bool(model.get("fuse_unk"))
        self.nfc = _normalizer(data.get("normalizer"), where)
        self._step_sources, self.use_regex, self.prefix_space, single = _pre_tokenizer(data.get("pre_tokenizer"), where)
        self._steps = None  # compiled by _compile, on first use under tiktoken
        if (data.get("decoder") or {}).get("type") != "ByteLevel":
            refuse(where, f"decoder {(data.get('decoder') or {}).get('type')} (byte-level tokenizers decode with ByteLevel)")
        self.ignore_merges = bool(model.get("ignore_merges", False))
        self._merge_list = self.read_merges(model.get("merges", []), where)
        self._symbols = {a: self.vocab.get(a) for a in byte_aliases()}  # None: a byte the vocabulary lacks
        self._common(data, where, end, config)
        self._bpe_cached = lru_cache(maxsize=1 << 16)(self._bpe)
        self.engine, self.enc = "bpe", None
        if engine not in ("auto", "bpe", "tiktoken"):
            raise TracerError(f"tokenizer engine {engine!r}: expected auto, bpe or tiktoken")
        if engine != "bpe":
            why = self._tiktoken_misfit(single)
            self.enc = self._tiktoken(single) if why is None else None
            if self.enc is None and engine == "tiktoken":
                raise TracerError(f"tokenizer {where}: the tiktoken engine does not fit: {why or 'tiktoken rejects its regex'}")
            self.engine = "bpe" if self.enc is None else "tiktoken"
        if self.enc is None:
            self._compile()  # a regex Python's re cannot take is refused now, not at the first prompt

    def _compile(self) -> None:
        self._steps = [(python_regex(p, self.path or self.name), b) for p, b in self._step_sources]
        self._gpt2_split = python_regex(GPT2_SPLIT, self.path or self.name)

    def _normalize(self, text: str) -> str:
        if not self.nfc:
            return text
        return "".join(unicodedata.normalize("NFC", p) for p in _NFC_APART.split(text) if p)

    def _encode_piece(self, piece: str, first: bool = False) -> list[int]:
        return self._encode_tiktoken(piece) if self.enc is not None else self._encode_bpe(piece)

    def dropped(self, text: str) -> list[int]:
        """The bytes of the text that the vocabulary cannot spell and `tokenizers` drops (or writes as the
        unk token), in order of first appearance: what a CLI should say once on stderr."""
        if not self.missing_bytes:
            return []
        seen = {}
        for piece, _ in self.pieces(text):
            for b in (" " + piece if self.prefix_space else piece).encode("utf-8"):
                if b in self.missing_bytes:
                    seen[b] = None
        return list(seen)

    def _encode_bpe(self, piece: str) -> list[int]:
        if self._steps is None:
            self._compile()
        words = [piece]
        for pattern, behavior in self._steps:
            words = [w for word in words for w in split(word, pattern, behavior, self.name)]
        if self.prefix_space:
            words = [w if w.startswith(" ") else " " + w for w in words]
        if self.use_regex:
            words = [w for word in words for w in split(word, self._gpt2_split, "Isolated", self.name)]
        out = []
        for w in words:
            out.extend(self._bpe_cached(to_aliases(w)))
        return out

    def _bpe(self, word: str) -> tuple[int, ...]:
        """BPE of one pre-token (in byte aliases) as tokenizers' BPE::merge_word and Word::merge_all do it."""
        if self.ignore_merges and word in self.vocab:
            return (self.vocab[word],)
        if not self.missing_bytes:
            return merge([self.vocab[c] for c in word], self.merges)
        sym, unk = [], False  # a byte the vocabulary lacks: left out, or the unk id (fused when fuse_unk)
        for c in word:
            i = self._symbols[c]
            if i is not None:
                sym.append(i)
            elif self.unk_id is not None and not (self.fuse_unk and unk):
                sym.append(self.unk_id)
            unk = i is None and self.unk_id is not None
        return merge(sym, self.merges)

    def _tiktoken_misfit(self, single: str | None) -> str | None:
        """Why tiktoken's rule is not this tokenizer's (None when it is)."""
        if single is None:
            return "the pre-tokenizer is not one regex split followed by ByteLevel"
        if not self.ignore_merges:
            return "ignore_merges is false (tiktoken returns a piece that is a token whole)"
        if self.missing_bytes:
            return "the vocabulary lacks byte aliases (tiktoken needs every byte)"
        back = _alias_maps()[1]
        tokens = {}  # token bytes → id, every vocabulary entry written in byte aliases
        for t, i in self.vocab.items():
            if all(c in back for c in t):
                tokens[bytes(back[c] for c in t)] = i
        by_id = {i: b for b, i in tokens.items()}
        rules, last, last_key = {}, -1, None
        for (a, b), new in self._merge_list:
            if new not in by_id or a not in by_id or b not in by_id:
                return "a merge names a token that is not byte-level"
            if new != last:
                if new in rules or new < last:
                    return "the merges are not in the order of their tokens' ids"
                last, last_key = new, None
                rules[new] = 0
            if last_key is not None and (a, b) <= last_key:
                return "a token's merges are not ordered by their parts' ids"
            last_key = (a, b)
            rules[new] += 1
        splits = {tokens[t]: len(ks) for t, ks in two_token_splits(tokens)}
        for t, i in tokens.items():
            if splits.get(i, 0) != rules.get(i, 0):
                return (f"token {t[:40]!r} has {splits.get(i, 0)} splits into two tokens but {rules.get(i, 0)} merges "
                        f"(not every split is a merge, as in a converted tiktoken vocabulary)")
        self._tiktoken_ranks = tokens
        return None

    def _tiktoken(self, pattern: str):  # the Encoding, or None
        import tiktoken

        try:
            with rust_quiet():
                enc = tiktoken.Encoding(f"tracer-{(self.sha256 or self.name)[:12]}", pat_str=pattern,
                                        mergeable_ranks=self._tiktoken_ranks, special_tokens={})
        except BaseException as e:  # a regex tiktoken's engine does not take (an error, or a PyO3 panic): bpe runs it
            if not is_panic(e) and not isinstance(e, Exception):
                raise
            return None
        self._lengths = {i: len(b) for b, i in self._tiktoken_ranks.items()}
        return enc

    def _encode_tiktoken(self, piece: str) -> list[int]:
        if self.prefix_space and not piece.startswith(" "):
            piece = " " + piece
        try:
            with rust_quiet():
                ids = self.enc.encode_ordinary(piece)
        except BaseException as e:  # fancy-regex's backtracking limit is a PyO3 panic (a BaseException)
            if not is_panic(e):
                raise
            return self._encode_bpe(piece)  # the same ids, on the engine whose time limit says it in one line
        if sum(self._lengths[i] for i in ids) != len(piece.encode("utf-8")):
            return self._encode_bpe(piece)  # the regex left text unmatched: tokenizers keeps it as a piece
        return ids

    def token_bytes(self, i: int) -> bytes:
        return token_bytes(self.id_to_token.get(int(i), ""))

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """`tokenizers`' decode: the ByteLevel decoder over the known ids (unknown ids are skipped)."""
        keep = [int(i) for i in ids if not (skip_special_tokens and int(i) in self.special)]
        return b"".join(self.token_bytes(i) for i in keep).decode("utf-8", errors="replace")
