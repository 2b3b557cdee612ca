"""Hugging Face `tokenizer.json` files of the byte-level BPE kind (GPT-2, Llama 3, Qwen2, SmolLM2, …),
giving exactly the ids `tokenizers` gives, special tokens and the post-processor's BOS included.

The steps are `tokenizers`' own: added tokens are cut out of the text (leftmost-longest, with lstrip/
rstrip; those matched on the raw text, then those matched after the normalizer); each other piece is
normalized (none or NFC), pre-tokenized (Split regexes, Digits, ByteLevel and its prefix space), written
in GPT-2's byte aliases and merged by BPE; the template adds its BOS/EOS ids. Two engines:
- `bpe`: the algorithm of `tokenizers` (models/bpe/word.rs: the pair of lowest merge index first, leftmost
  on ties; with `ignore_merges` a pre-token that is a token stays whole), cached per pre-token. Its regexes
  run in Python's `re`, with `\\p{L}`-style classes read from tiktoken's regex engine (Unicode 16, like
  Oniguruma in `tokenizers`; Python 3.11's tables are Unicode 14) and `\\s` as Unicode White_Space.
- `tiktoken`: an Encoding of the vocabulary (rank = id) with the Split regex as `pat_str`, used only where
  tiktoken's rule (merge the pair whose concatenation has the lowest rank; a piece that is a token stays
  whole) is the file's: merges exactly as Hugging Face converts tiktoken ranks (every split of every
  token into two tokens, by the token's id, then the parts' ids: Llama 3), `ignore_merges`, one regex
  Split + ByteLevel. A list of one merge per token (GPT-2, Qwen2, anything `tokenizers` trains) is not
  that rule in general (tiktoken would merge "a"+"bc" into "abc" where only "ab c" is a merge): `bpe`.
Anything else (SentencePiece-only folders, other models, normalizers, pre-tokenizers, post-processors or
decoders, BPE dropout, single_word added tokens) is refused in one line, never approximated.
"""

from __future__ import annotations

import hashlib
import heapq
import re
import unicodedata
from functools import lru_cache
from pathlib import Path

from .errors import TracerError
from .reading import inside, parse_json, read_small

GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"  # ByteLevel's use_regex
END_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<|im_end|>", "<|eot_id|>")  # when the folder does not say
# Unicode White_Space: what \s means in Oniguruma and Rust's regex (Python's \s adds U+001C–U+001F).
WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
_WS_CLASS = "\\t\\n\\x0b\\x0c\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
# tokenizers' NFC uses Unicode 9 tables: these marks, new since, are starters to it (no reordering across
# them), and U+11935 U+11930 do not compose to U+11938. Python's NFC is run between them (checked against
# tokenizers 0.23.3 over every code point).
_NFC_APART = re.compile("([\U000007fd\U00000898-\U0000089f\U000008ca-\U000008d3\U000009fe\U00000c3c\U00000d3b-\U00000d3c"
                        "\U00000eba\U00001715\U00001abf-\U00001ace\U00001df6-\U00001dfa\U0000a82c\U00010d24-\U00010d27"
                        "\U00010eab-\U00010eac\U00010f46-\U00010f50\U00010f82-\U00010f85\U00011070\U0001133b\U0001145e"
                        "\U00011839-\U0001183a\U0001193d-\U0001193e\U00011943\U000119e0\U00011a34\U00011a47\U00011a99"
                        "\U00011d42\U00011d44-\U00011d45\U00011d97\U00016ff0-\U00016ff1\U0001e130-\U0001e136\U0001e2ae"
                        "\U0001e2ec-\U0001e2ef])|(?<=\U00011935)(?=\U00011930)")


def refuse(where, why: str):
    raise TracerError(f"tokenizer {where}: tracer cannot reproduce this tokenizer exactly: {why}; "
                      f"refusing rather than approximating")


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


@lru_cache(maxsize=None)
def unicode_class(name: str) -> str:
    """The body of a [...] class matching what \\p{name} matches in Rust's regex (tiktoken's engine)."""
    if not re.fullmatch(r"[A-Za-z_]{1,40}", name):
        raise TracerError(f"unicode class {name!r}: not a property name")
    import numpy as np
    import tiktoken

    enc = tiktoken.Encoding(f"tracer-class-{name}", pat_str=r"\p{%s}+" % name,
                            mergeable_ranks={bytes([b]): b for b in range(256)}, special_tokens={})
    every = np.r_[0:0xD800, 0xE000:0x110000].astype("<u4").tobytes().decode("utf-32-le")  # all but surrogates
    got = enc.decode_bytes(enc.encode_ordinary(every)).decode("utf-8").encode("utf-32-le")
    points = np.frombuffer(got, "<u4").astype(np.int64)  # in order: the text was
    cut = np.flatnonzero(np.diff(points) != 1) + 1
    runs = zip(points[np.r_[0, cut]], points[np.r_[cut - 1, len(points) - 1]]) if len(points) else ()
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in runs)


def python_regex(pattern: str, where) -> re.Pattern:
    """An Oniguruma pattern of a tokenizer.json Split as a Python re pattern with the same matches."""
    out, i, depth = [], 0, 0  # depth > 0 inside a [...] class

    def cls(name: str, negated: bool, inside: bool) -> str:
        body = {"s": _WS_CLASS, "d": unicode_class("Nd")}.get(name) or (
            unicode_class("L") + unicode_class("M") + unicode_class("Nd") + unicode_class("Pc") if name == "w"
            else unicode_class(name))
        if inside and negated:
            refuse(where, f"the regex {pattern!r} negates a class inside [...]")
        return body if inside else f"[{'^' if negated else ''}{body}]"

    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            e = pattern[i + 1]
            if e in "pP" and i + 2 < len(pattern) and pattern[i + 2] == "{":
                end = pattern.index("}", i)
                out.append(cls(pattern[i + 3 : end], e == "P", depth > 0))
                i = end + 1
                continue
            if e in "sSdDwW":
                out.append(cls(e.lower(), e.isupper(), depth > 0))
            elif e.isascii() and e.isalnum() and e not in "nrtfvaxu":
                refuse(where, f"the regex {pattern!r} uses \\{e}, which tracer does not translate")
            else:
                out.append(c + e)
            i += 2
            continue
        if depth == 0 and c in "^$":
            refuse(where, f"the regex {pattern!r} uses the anchor {c!r}")
        if c == "[":
            depth += 1
        elif c == "]" and depth:
            depth -= 1
        out.append(c)
        i += 1
    try:
        compiled = re.compile("".join(out))
    except (re.error, ValueError) as e:
        refuse(where, f"the regex {pattern!r} does not translate to Python ({e})")
    if compiled.match(""):
        refuse(where, f"the regex {pattern!r} can match empty text")
    return compiled


def _split(text: str, pattern: re.Pattern, behavior: str) -> list[str]:
    """`tokenizers`' NormalizedString.split: the matches (unless Removed) and the text between them, no empty piece."""
    pieces, prev = [], 0
    for m in pattern.finditer(text):
        pieces += [text[prev : m.start()], m.group() if behavior == "Isolated" else ""]
        prev = m.end()
    pieces.append(text[prev:])
    return [p for p in pieces if p]


def find_tokenizer_json(folder) -> Path:
    """The folder's tokenizer.json, or a one-line refusal for a SentencePiece-only folder."""
    path = inside(folder := Path(folder), "tokenizer.json", folder)  # a link out of the folder is refused
    if path.exists() or path.is_symlink():  # a device or a folder: read_small says what it is
        return path
    if (folder / "tokenizer.model").is_file():
        refuse(folder, "only a SentencePiece tokenizer.model, no tokenizer.json")
    raise TracerError(f"tokenizer {folder}: no tokenizer.json in the folder")


def _load(path: Path) -> tuple[dict, str]:
    raw = read_small(path, "tokenizer file")  # a regular file, bounded in size
    data = parse_json(raw, f"tokenizer {path}: not a JSON file")  # and in depth
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise TracerError(f"tokenizer {path}: not a tokenizer.json (no 'model' table)")
    return data, hashlib.sha256(raw).hexdigest()


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


def _post(spec, where) -> tuple[list[int], list[int]]:
    """The ids the post-processor puts before and after the sequence (ByteLevel and TemplateProcessing)."""
    if spec is None:
        return [], []
    kind = spec.get("type")
    if kind == "ByteLevel":
        return [], []
    if kind == "Sequence":
        before, after = [], []
        for p in spec.get("processors", []):
            b, a = _post(p, where)
            before, after = b + before, after + a  # each processor wraps what the ones before it made
        return before, after
    if kind != "TemplateProcessing":
        refuse(where, f"post-processor {kind}")
    before, after, seen = [], [], False
    for item in spec.get("single", []):
        if (item.get("Sequence") or {}).get("id") == "A" and not seen:
            seen = True
        elif "SpecialToken" in item:
            name = item["SpecialToken"]["id"]
            ids = spec.get("special_tokens", {}).get(name, {}).get("ids")
            if not ids:
                raise TracerError(f"tokenizer {where}: the template's special token {name!r} has no ids")
            (after if seen else before).extend(int(i) for i in ids)
        else:
            refuse(where, f"template item {item}")
    return before, after


class HFTokenizer:
    """A byte-level BPE tokenizer.json, with the interface of `tracer.tokens.Tokenizer`.

    engine: "auto" (tiktoken where its rule is this tokenizer's, else bpe), "bpe" or "tiktoken"
    (an error where it does not fit). end: the end token's text or id; by default the folder's
    tokenizer_config.json eos_token, else the first of END_NAMES among the special tokens.
    """

    def __init__(self, path, engine: str = "auto", end: str | int | None = None):
        try:
            self._read(path, engine, end)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # a file of the wrong shape
            raise TracerError(f"tokenizer {path}: not a tokenizer.json tracer can read "
                              f"({type(e).__name__}: {str(e)[:120]})") from None

    def _read(self, path, engine: str, end) -> None:
        path = find_tokenizer_json(path) if Path(path).is_dir() else Path(path)
        self.path = path.resolve()
        data, self.sha256 = _load(path)
        where = str(path)
        model = data["model"]
        problems = [f"model type {model.get('type')} (tracer reads BPE)"] if model.get("type", "BPE") != "BPE" else []
        problems += [f"'{key}' is set (it changes the ids)" for key in ("truncation", "padding") if data.get(key) is not None]
        problems += [f"BPE dropout {model['dropout']} (random merges)"] if model.get("dropout") not in (None, 0, 0.0) else []
        problems += [f"BPE {k} {model[k]!r}" for k in ("continuing_subword_prefix", "end_of_word_suffix") if model.get(k)]
        if problems:
            refuse(where, problems[0])
        self.vocab: dict[str, int] = {str(k): int(v) for k, v in model.get("vocab", {}).items()}
        missing = [a for a in byte_aliases() if a not in self.vocab]
        if missing:
            refuse(where, f"the vocabulary lacks {len(missing)} of the 256 byte aliases (not a byte-level BPE)")
        self.nfc = _normalizer(data.get("normalizer"), where)
        self._step_sources, self.use_regex, self.prefix_space, single = _pre_tokenizer(data.get("pre_tokenizer"), where)
        self._steps = None  # compiled by _compile, on first use under tiktoken
        if (data.get("decoder") or {}).get("type") != "ByteLevel":
            refuse(where, f"decoder {(data.get('decoder') or {}).get('type')} (byte-level tokenizers decode with ByteLevel)")
        self.ignore_merges = bool(model.get("ignore_merges", False))
        self.merges: dict[tuple[int, int], tuple[int, int]] = {}
        self._merge_list = []
        for rank, m in enumerate(model.get("merges", [])):
            a, b = m.split(" ") if isinstance(m, str) else m
            try:
                pair, new = (self.vocab[a], self.vocab[b]), self.vocab[a + b]
            except KeyError:
                raise TracerError(f"tokenizer {where}: merge {a!r} {b!r} names a token not in the vocabulary") from None
            self.merges[pair] = (rank, new)  # a repeated pair keeps its last rank, as in tokenizers
            self._merge_list.append((pair, new))
        self.added: dict[int, dict] = {}
        for t in data.get("added_tokens", []):
            if t.get("single_word"):
                refuse(where, f"added token {t['content']!r} has single_word")
            self.added[int(t["id"])] = t
        self.special = {i for i, t in self.added.items() if t.get("special")}
        self._matchers = [self._matcher(normalized) for normalized in (False, True)]
        self.before, self.after = _post(data.get("post_processor"), where)
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.id_to_token.update({i: t["content"] for i, t in self.added.items()})
        self.n_vocab = max(self.id_to_token) + 1
        self.name = f"{path.parent.name}/{path.name}"
        self.end_id = self._end(end, path)
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
        self._steps = [(python_regex(p, self.path), b) for p, b in self._step_sources]
        self._gpt2_split = python_regex(GPT2_SPLIT, self.path)


    def _matcher(self, normalized: bool):
        tokens = {}
        for i, t in self.added.items():
            if bool(t.get("normalized", True)) == normalized and t["content"]:
                text = self._normalize(t["content"]) if normalized else t["content"]
                tokens[text] = i  # two tokens with the same text: the last id, as a trie built in order would keep
        alternation = "|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True))  # leftmost-longest
        return (re.compile(alternation), tokens) if tokens else None

    def _normalize(self, text: str) -> str:
        if not self.nfc:
            return text
        return "".join(unicodedata.normalize("NFC", p) for p in _NFC_APART.split(text) if p)

    def _cut(self, text: str, matcher) -> list[tuple[str, int | None]]:
        """AddedVocabulary.find_matches: the added tokens in the text and the pieces between them."""
        pattern, ids = matcher or (re.compile("(?!)"), {})
        out, offset = [], 0
        for m in pattern.finditer(text):
            start, stop, i = m.start(), m.end(), ids[m.group()]
            t = self.added[i]
            if t.get("lstrip"):
                start = max(len(text[:start].rstrip(WHITE_SPACE)), offset)
            if t.get("rstrip"):
                stop += len(text[stop:]) - len(text[stop:].lstrip(WHITE_SPACE))
            if offset < start:
                out.append((text[offset:start], None))
            out.append((text[start:stop], i))
            offset = stop
        return [(s, i) for s, i in out + [(text[offset:], None)] if s]


    def encode(self, text: str) -> list[int]:
        """The ids `tokenizers` gives: `Tokenizer.encode(text).ids` (special tokens added)."""
        if not text.isascii() and re.search("[\ud800-\udfff]", text):
            raise TracerError("prompt: not valid UTF-8 text (a lone surrogate, an undecodable byte)")
        ids = list(self.before)
        for raw, i in self._cut(text, self._matchers[0]):
            if i is not None:
                ids.append(i)
                continue
            for piece, j in self._cut(self._normalize(raw), self._matchers[1]):
                if j is not None:
                    ids.append(j)
                elif self.enc is not None:
                    ids.extend(self._encode_tiktoken(piece))
                else:
                    ids.extend(self._encode_bpe(piece))
        return ids + self.after

    def _encode_bpe(self, piece: str) -> list[int]:
        if self._steps is None:
            self._compile()
        words = [piece]
        for pattern, behavior in self._steps:
            words = [w for word in words for w in _split(word, pattern, behavior)]
        if self.prefix_space:
            words = [w if w.startswith(" ") else " " + w for w in words]
        if self.use_regex:
            words = [w for word in words for w in _split(word, self._gpt2_split, "Isolated")]
        out = []
        for w in words:
            out.extend(self._bpe_cached(to_aliases(w)))
        return out

    def _bpe(self, word: str) -> tuple[int, ...]:
        """BPE of one pre-token (in byte aliases) as tokenizers' Word::merge_all does it."""
        vocab, merges = self.vocab, self.merges
        if self.ignore_merges and word in vocab:
            return (vocab[word],)
        sym = [vocab[c] for c in word]
        n = len(sym)
        alive, nxt, prv = [True] * n, list(range(1, n + 1)), list(range(-1, n - 1))
        heap = [(merges[p][0], i, merges[p][1]) for i, p in enumerate(zip(sym, sym[1:])) if p in merges]
        heapq.heapify(heap)
        while heap:
            _, i, new = heapq.heappop(heap)
            j = nxt[i] if alive[i] else n
            if j >= n or merges.get((sym[i], sym[j]), (0, None))[1] != new:
                continue  # a merged-away symbol, the last one, or a pair that changed since it was queued
            sym[i], alive[j] = new, False
            nxt[i] = nxt[j]
            if nxt[j] < n:
                prv[nxt[j]] = i
            if prv[i] >= 0 and (sym[prv[i]], new) in merges:
                rank, made = merges[(sym[prv[i]], new)]
                heapq.heappush(heap, (rank, prv[i], made))
            if nxt[i] < n and (new, sym[nxt[i]]) in merges:
                rank, made = merges[(new, sym[nxt[i]])]
                heapq.heappush(heap, (rank, i, made))
        return tuple(s for s, a in zip(sym, alive) if a)


    def _tiktoken_misfit(self, single: str | None) -> str | None:
        """Why tiktoken's rule is not this tokenizer's (None when it is)."""
        if single is None:
            return "the pre-tokenizer is not one regex split followed by ByteLevel"
        if not self.ignore_merges:
            return "ignore_merges is false (tiktoken returns a piece that is a token whole)"
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
        for t, i in tokens.items():
            splits = sum(1 for k in range(1, len(t)) if t[:k] in tokens and t[k:] in tokens)
            if splits != rules.get(i, 0):
                return (f"token {t!r} has {splits} splits into two tokens but {rules.get(i, 0)} merges "
                        f"(not every split is a merge, as in a converted tiktoken vocabulary)")
        self._tiktoken_ranks = tokens
        return None

    def _tiktoken(self, pattern: str):  # the Encoding, or None
        import tiktoken

        try:
            enc = tiktoken.Encoding(f"tracer-{self.sha256[:12]}", pat_str=pattern,
                                    mergeable_ranks=self._tiktoken_ranks, special_tokens={})
        except Exception:  # a regex tiktoken's engine does not take: the bpe engine runs it
            return None
        self._lengths = {i: len(b) for b, i in self._tiktoken_ranks.items()}
        return enc

    def _encode_tiktoken(self, piece: str) -> list[int]:
        if self.prefix_space and not piece.startswith(" "):
            piece = " " + piece
        ids = self.enc.encode_ordinary(piece)
        if sum(self._lengths[i] for i in ids) != len(piece.encode("utf-8")):
            return self._encode_bpe(piece)  # the regex left text unmatched: tokenizers keeps it as a piece
        return ids


    def token_bytes(self, i: int) -> bytes:
        return token_bytes(self.id_to_token.get(int(i), ""))

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """`tokenizers`' decode: the ByteLevel decoder over the known ids (unknown ids are skipped)."""
        keep = [int(i) for i in ids if not (skip_special_tokens and int(i) in self.special)]
        return b"".join(self.token_bytes(i) for i in keep).decode("utf-8", errors="replace")

    def token_str(self, i: int) -> str:
        """The token's text; bytes that are part of a character show as \\xf0\\x9f."""
        if int(i) not in self.id_to_token:
            return f"<unassigned id {int(i)}>"
        return self.token_bytes(i).decode("utf-8", errors="backslashreplace")

    def _end(self, end, path: Path) -> int | None:
        if end is None:
            config = inside(path.parent, "tokenizer_config.json", path.parent)  # optional: its eos_token names the end token
            eos = parse_json(read_small(config, "tokenizer config"), f"{config}: not JSON") if config.exists() else {}
            eos = eos.get("eos_token") if isinstance(eos, dict) else None
            end = eos.get("content") if isinstance(eos, dict) else eos
            specials = {self.added[i]["content"] for i in self.special}
            end = end if end is not None else next((n for n in END_NAMES if n in specials), None)
        ids = [end] if isinstance(end, int) and end in self.id_to_token else [i for i, t in self.id_to_token.items() if t == end]
        if end is not None and not ids:
            raise TracerError(f"tokenizer {path}: end token {end!r} is not in the vocabulary")
        return max(ids, key=lambda i: i in self.added) if ids else None

    def spec(self) -> dict:
        end = self.id_to_token.get(self.end_id) if self.end_id is not None else None
        return {"kind": "tokenizer.json", "path": str(self.path), "sha256": self.sha256, "end": end}
