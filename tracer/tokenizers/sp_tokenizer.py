"""Hugging Face `tokenizer.json` files of the SentencePiece kind (Llama 2, Mistral 7B v0.1, TinyLlama, Gemma,
and what transformers makes of a `tokenizer.model` or of a GGUF `llama` vocabulary), giving exactly the
ids `tokenizers` gives.

A space is written `▁` (U+2581) and the text is not split into words: BPE runs over each whole piece
between added tokens. Two shapes carry that out, both read here:
- the normalizer Prepend("▁") + Replace(" ", "▁") and no pre-tokenizer (the Hub's Llama 2, TinyLlama and
  Mistral files): every piece between added tokens gets its `▁`;
- the pre-tokenizer Metaspace (transformers 5's `LlamaTokenizer`, GGUF conversions): spaces become `▁`
  and, with prepend_scheme "first", only the piece that starts the text gets one ("always": every piece;
  "never": none); split true cuts before each `▁`.
BPE is `tokenizers`' (models/bpe/model.rs merge_word): a character the vocabulary lacks becomes its UTF-8
bytes as `<0x41>` pieces (byte_fallback), or the unk token (fused when fuse_unk); merges then run on the
ids. Decoding follows the decoder chain: Replace("▁", " "), ByteFallback (a run of byte pieces that is
not UTF-8 gives one U+FFFD per byte), Fuse, Strip, or the Metaspace decoder. Anything else is refused.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from .bpe import BPEBase, merge, read_vocab, refuse
from ..errors import TracerError

SPACE = "\u2581"
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def is_sentencepiece_style(data: dict) -> bool:
    """A tokenizer.json with no ByteLevel decoder or pre-tokenizer step: SentencePiece-style (▁, byte fallback)."""
    pre = data.get("pre_tokenizer") or {}
    steps = (pre.get("pretokenizers") or []) if pre.get("type") == "Sequence" else [pre]
    byte_level = any(isinstance(s, dict) and s.get("type") == "ByteLevel" for s in steps)
    return not byte_level and (data.get("decoder") or {}).get("type") != "ByteLevel"


def _steps(spec, kinds: str) -> list[dict]:
    if spec is None:
        return []
    return list(spec.get(kinds, [])) if spec.get("type") == "Sequence" else [spec]


class SPTokenizer(BPEBase):
    """A SentencePiece-style BPE tokenizer.json with the interface of `tracer.tokenizers.tokens.Tokenizer`.

    end: the end token's text or id (by default the folder's tokenizer_config.json eos_token, else
    `</s>`-like names); data: the tokenizer.json's table itself, with `path` only a name for messages.
    """

    def __init__(self, path, end: str | int | None = None, data: dict | None = None,
                 loaded: tuple[dict, str] | None = None):
        try:
            self._read(path, end, data, loaded)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # a file of the wrong shape
            raise TracerError(f"tokenizer {path}: not a tokenizer.json tracer can read "
                              f"({type(e).__name__}: {str(e)[:120]})") from None

    def _read(self, path, end, data, loaded) -> None:
        if data is None:
            path = Path(path)
            path = path / "tokenizer.json" if path.is_dir() else path
        data, config = self._open(path, data, loaded)
        where = str(path)
        model = data["model"]
        if model.get("type", "BPE") != "BPE":
            refuse(where, f"model type {model.get('type')} (tracer reads BPE)")
        for k in ("continuing_subword_prefix", "end_of_word_suffix"):
            if model.get(k):
                refuse(where, f"BPE {k} {model[k]!r}")
        self.vocab: dict[str, int] = read_vocab(model.get("vocab", {}), where)
        self.byte_fallback, self.fuse_unk = bool(model.get("byte_fallback")), bool(model.get("fuse_unk"))
        self.ignore_merges = bool(model.get("ignore_merges", False))
        unk = model.get("unk_token")
        if unk is not None and unk not in self.vocab:
            raise TracerError(f"tokenizer {where}: the unk_token {unk!r} is not in the vocabulary")
        self.unk_id = self.vocab[unk] if unk is not None else None
        self._bytes = [self.vocab.get(f"<0x{b:02X}>") for b in range(256)]
        self._normalizers = self._read_normalizer(data.get("normalizer"), where)
        self._read_pre_tokenizer(data.get("pre_tokenizer"), where)
        self._decoders = self._read_decoder(data.get("decoder"), where)
        self.read_merges(model.get("merges", []), where)
        self._common(data, where, end, config)
        self._bpe_cached = lru_cache(maxsize=1 << 12)(self._bpe)

    @staticmethod
    def _read_normalizer(spec, where) -> list[tuple]:
        out = []
        for n in _steps(spec, "normalizers"):
            kind = n.get("type")
            if kind == "Prepend":
                out.append(("prepend", str(n["prepend"])))
            elif kind == "Replace" and "String" in n.get("pattern", {}):
                out.append(("replace", str(n["pattern"]["String"]), str(n["content"])))
            else:
                refuse(where, f"normalizer {kind} (tracer reads Prepend and Replace of a string here)")
        return out

    def _read_pre_tokenizer(self, spec, where) -> None:
        self.metaspace, self.prepend_scheme, self.split, self.split_after = None, "never", False, None
        if spec is None:
            return
        if spec.get("type") == "Split":  # GemmaTokenizer's: after each space, the space kept with the piece before
            pattern = spec.get("pattern") or {}
            if ("String" not in pattern or spec.get("behavior") != "MergedWithPrevious" or spec.get("invert")
                    or not pattern["String"]):
                refuse(where, "a Split pre-tokenizer other than on a string, merged with the piece before")
            self.split_after = str(pattern["String"])
            return
        if spec.get("type") != "Metaspace":
            refuse(where, f"pre-tokenizer {spec.get('type')} (tracer reads Metaspace, Split or none here)")
        self.metaspace = str(spec.get("replacement", SPACE))
        scheme = spec.get("prepend_scheme") or ("always" if spec.get("add_prefix_space", True) else "never")
        if scheme not in ("always", "first", "never"):
            refuse(where, f"Metaspace prepend_scheme {scheme!r}")
        self.prepend_scheme, self.split = scheme, bool(spec.get("split", True))

    @staticmethod
    def _read_decoder(spec, where) -> list[tuple]:
        out = []
        for d in _steps(spec, "decoders"):
            kind = d.get("type")
            if kind == "Replace" and "String" in d.get("pattern", {}):
                out.append(("replace", str(d["pattern"]["String"]), str(d["content"])))
            elif kind in ("ByteFallback", "Fuse"):
                out.append((kind.lower(),))
            elif kind == "Strip":
                out.append(("strip", str(d["content"]), int(d.get("start", 0)), int(d.get("stop", 0))))
            elif kind == "Metaspace":
                scheme = d.get("prepend_scheme") or ("always" if d.get("add_prefix_space", True) else "never")
                out.append(("metaspace", str(d.get("replacement", SPACE)), scheme != "never"))
            else:
                refuse(where, f"decoder {kind} (tracer reads Replace, ByteFallback, Fuse, Strip, Metaspace)")
        return out

    def _normalize(self, text: str) -> str:
        for step in self._normalizers:
            if step[0] == "prepend":
                text = step[1] + text if text else text
            else:
                text = text.replace(step[1], step[2])
        return text

    def _encode_piece(self, piece: str, first: bool = False) -> list[int]:
        words = [piece] if self.split_after is None else merged_with_previous(piece, self.split_after)
        if self.metaspace is not None:
            rep = self.metaspace
            word = piece.replace(" ", rep)
            if not word.startswith(rep) and (self.prepend_scheme == "always" or (self.prepend_scheme == "first" and first)):
                word = rep + word
            # split: cut before each replacement character (MergedWithNext)
            words = re.findall(f"[^{re.escape(rep)}]+|{re.escape(rep)}[^{re.escape(rep)}]*", word) if self.split else [word]
        out = []
        for w in words:
            out.extend(self._bpe_cached(w))
        return out

    def _bpe(self, word: str) -> tuple[int, ...]:
        """tokenizers' BPE::merge_word, then the merges."""
        if self.ignore_merges and word in self.vocab:
            return (self.vocab[word],)
        sym, unk = [], None  # unk: the pending unk symbol, added before the next known character
        for c in word:
            i = self.vocab.get(c)
            if i is not None:
                if unk is not None:
                    sym.append(unk)
                    unk = None
                sym.append(i)
                continue
            if self.byte_fallback:
                pieces = [self._bytes[b] for b in c.encode("utf-8")]
                if None not in pieces:
                    sym.extend(pieces)  # as in tokenizers, a pending unk is not added first
                    continue
            if self.unk_id is not None:
                if unk is not None and not self.fuse_unk:
                    sym.append(unk)
                unk = self.unk_id
        if unk is not None:
            sym.append(unk)
        return merge(sym, self.merges)

    def dropped(self, text: str) -> list[int]:
        """Bytes `tokenizers` leaves out of the ids: none where byte fallback covers every byte; else the
        bytes of characters with no token, no byte pieces and no unk token."""
        if self.unk_id is not None or (self.byte_fallback and None not in self._bytes):
            return []
        seen = {}
        for piece, _ in self.pieces(text):
            for c in piece:
                if c not in self.vocab and not (self.byte_fallback and None not in [self._bytes[b] for b in c.encode()]):
                    seen.update(dict.fromkeys(c.encode("utf-8")))
        return list(seen)

    def token_bytes(self, i: int) -> bytes:
        """A token's bytes: `<0x41>` is the byte 0x41, `▁` a space."""
        t = self.id_to_token.get(int(i), "")
        m = _BYTE_PIECE.fullmatch(t)
        return bytes([int(m.group(1), 16)]) if m else t.replace(SPACE, " ").encode("utf-8")

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """`tokenizers`' decode: the decoder chain over the tokens of the known ids."""
        tokens = [self.id_to_token[int(i)] for i in ids
                  if int(i) in self.id_to_token and not (skip_special_tokens and int(i) in self.special)]
        for step in self._decoders:
            kind = step[0]
            if kind == "replace":
                tokens = [t.replace(step[1], step[2]) for t in tokens]
            elif kind == "fuse":
                tokens = ["".join(tokens)]
            elif kind == "strip":
                tokens = [_strip(t, *step[1:]) for t in tokens]
            elif kind == "metaspace":
                tokens = [t.replace(step[1], " ") for t in tokens]
                if tokens and step[2] and tokens[0].startswith(" "):
                    tokens[0] = tokens[0][1:]
            else:
                tokens = _byte_fallback(tokens)
        return "".join(tokens)


def merged_with_previous(text: str, delimiter: str) -> list[str]:
    """tokenizers' Split(delimiter, MergedWithPrevious): each delimiter joins the piece before it;
    one at the start, or right after another, is a piece of its own. "a b  c" → "a ", "b ", " ", "c"."""
    out, previous_match, at = [], False, 0
    while at < len(text):
        found = text.find(delimiter, at)
        end = len(text) if found < 0 else found
        if end > at:
            out.append(text[at:end])
            previous_match = False
        if found < 0:
            break
        if out and not previous_match:
            out[-1] += delimiter
        else:
            out.append(delimiter)
        previous_match, at = True, found + len(delimiter)
    return out


def _strip(token: str, content: str, start: int, stop: int) -> str:
    """tokenizers' Strip decoder: up to `start` leading and `stop` trailing `content` characters off."""
    a = 0
    while a < min(start, len(token)) and token[a] == content:
        a += 1
    b = len(token)
    while len(token) - b < stop and b > a and token[b - 1] == content:
        b -= 1
    return token[a:b]


def _byte_fallback(tokens: list[str]) -> list[str]:
    """tokenizers' ByteFallback decoder: runs of `<0x..>` pieces as UTF-8, or one U+FFFD per byte."""
    out, run = [], []

    def flush():
        if run:
            try:
                out.append(bytes(run).decode("utf-8"))
            except UnicodeDecodeError:
                out.extend("\ufffd" for _ in run)
            run.clear()

    for t in tokens:
        m = _BYTE_PIECE.fullmatch(t) if len(t) == 6 else None
        if m:
            run.append(int(m.group(1), 16))
        else:
            flush()
            out.append(t)
    flush()
    return out
