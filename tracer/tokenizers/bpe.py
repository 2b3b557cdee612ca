"""What every BPE tokenizer.json reader of tracer shares, written as `tokenizers` (huggingface/tokenizers,
tokenizers/src) does it: the added tokens cut out of the text first (tokenizer/added_vocabulary.rs:
leftmost-longest, lstrip/rstrip, those matched on the raw text, then those matched after the normalizer),
the BPE merge loop (models/bpe/word.rs: the pair of lowest merge rank first, leftmost on ties), the
post-processor's BOS/EOS, the Split regexes (`tracer.tokenizers.patterns`), the end token, and every id checked.

`BPEBase` holds the parts; `hf_tokenizer.HFTokenizer` (byte-level) and `sp_tokenizer.SPTokenizer`
(SentencePiece-style, `▁` and byte fallback) add their normalizer, pre-tokenizer and symbols.
"""

from __future__ import annotations

import heapq
import re
from pathlib import Path

from ..errors import TracerError, is_whole
from .patterns import python_regex, refuse, split, unicode_class  # noqa: F401  (the Split regexes: tracer.tokenizers.patterns)
from ..formats.reading import inside, parse_json, read_small

END_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<|im_end|>", "<|eot_id|>")  # when the folder does not say
# Unicode White_Space: what \s means in Oniguruma and Rust's regex (Python's \s adds U+001C–U+001F).
WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


LONG_ADDED = 256  # characters: an added token longer than this is found with str.find, not compiled into a regex
MAX_LONG_ADDED = 256  # such tokens a vocabulary may have (each costs one scan of a text it encodes); none has any
MAX_ID = 2**31 - 1  # tokenizers' ids are u32, tiktoken's ranks fit an i32; a model's d_vocab is far below


def token_id(v, where, what: str) -> int:
    """An id from the file: a whole number (not true, not 5.0, not "5") in 0..MAX_ID. Whether the model has
    a row for it is the model's check (`n_vocab` ≤ d_vocab), so every id the tokenizer gives is below d_vocab."""
    if not is_whole(v):
        raise TracerError(f"tokenizer {where}: {what} has the id {repr(v)[:40]}, not a whole number")
    if not 0 <= v <= MAX_ID:
        shown = f"{v:,}" if abs(v) < 10**30 else ("-" if v < 0 else "") + "beyond 10³⁰"
        raise TracerError(f"tokenizer {where}: {what} has the id {shown}, outside 0..{MAX_ID:,}")
    return v


def read_vocab(items, where) -> dict[str, int]:
    """A model's vocab table: every id a token id (`token_id`) and no id given to two tokens."""
    if not isinstance(items, dict):
        raise TracerError(f"tokenizer {where}: the model's vocab is not a table of tokens and ids")
    vocab, owner = {}, {}
    for t, v in items.items():
        i = token_id(v, where, f"the vocabulary's token {str(t)[:40]!r}")
        if i in owner:
            raise TracerError(f"tokenizer {where}: the vocabulary's tokens {owner[i][:40]!r} and {str(t)[:40]!r} "
                              f"both have the id {i:,}")
        vocab[str(t)], owner[i] = i, str(t)
    return vocab


def _longest_prefixes(tokens) -> dict:
    """Each token → the longest other token it starts with (None for none). In sorted order the tokens a
    token starts with are on the stack (each one a prefix of the next): time linear in the tokens' length."""
    parent, stack = {}, []
    for t in sorted(tokens):
        while stack and not t.startswith(stack[-1]):
            stack.pop()
        parent[t] = stack[-1] if stack else None
        stack.append(t)
    return parent


def two_token_splits(tokens):
    """(token, [k, …]): every k at which token[:k] and token[k:] are both tokens, ascending, for each token
    (str or bytes) with at least one. The obvious test of every k hashes O(n²) characters for a token of n
    (a 1.6 MB token took 11 minutes); this follows each token's chains of prefix and suffix tokens instead,
    which are at most as long as the number of distinct token lengths."""
    tokens = set(tokens)
    prefix = _longest_prefixes(tokens)
    suffix = _longest_prefixes({t[::-1] for t in tokens})
    for t in tokens:
        cuts, p = set(), prefix[t]
        while p is not None:
            cuts.add(len(p))
            p = prefix[p]
        if not cuts:
            continue
        found, s = [], suffix[t[::-1]]
        while s is not None:
            if len(t) - len(s) in cuts:
                found.append(len(t) - len(s))
            s = suffix[s]
        if found:
            yield t, found


def merge(sym: list[int], merges: dict) -> tuple[int, ...]:
    """BPE of one word's symbols as tokenizers' Word::merge_all does it: merges maps a pair of ids to
    (rank, new id); the pair of lowest rank is merged first, the leftmost on ties."""
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


def load(path: Path) -> tuple[dict, str]:
    """A tokenizer.json's table and the file's sha256."""
    import hashlib

    raw = read_small(path, "tokenizer file")  # a regular file, bounded in size
    data = parse_json(raw, f"tokenizer {path}: not a JSON file")  # and in depth
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise TracerError(f"tokenizer {path}: not a tokenizer.json (no 'model' table)")
    return data, hashlib.sha256(raw).hexdigest()


def post(spec, where) -> tuple[list[int], list[int]]:
    """The ids the post-processor puts before and after the sequence (ByteLevel and TemplateProcessing)."""
    if spec is None:
        return [], []
    kind = spec.get("type")
    if kind == "ByteLevel":
        return [], []
    if kind == "Sequence":
        before, after = [], []
        for p in spec.get("processors", []):
            b, a = post(p, where)
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
            if not isinstance(ids, list):
                raise TracerError(f"tokenizer {where}: the template's special token {name!r} has no list of ids")
            (after if seen else before).extend(token_id(i, where, f"the template's special token {str(name)[:40]!r}")
                                               for i in ids)
        else:
            refuse(where, f"template item {item}")
    return before, after


class _Runs:
    """The runs of White_Space in a text, so that stripping around an added token costs a look-up, not a copy
    of the text before or after it (which made a prompt with many lstrip/rstrip tokens quadratic)."""

    _FIND = re.compile(f"[{re.escape(WHITE_SPACE)}]+")

    def __init__(self, text: str):
        import bisect

        self._bisect = bisect.bisect_right
        found = [(m.start(), m.end()) for m in self._FIND.finditer(text)]
        self._starts, self._ends = [a for a, _ in found], [b for _, b in found]

    def start(self, k: int) -> int:
        """Where the run of white space that ends at k starts (k when none does)."""
        j = self._bisect(self._starts, k - 1) - 1
        return self._starts[j] if j >= 0 and self._starts[j] < k <= self._ends[j] else k

    def end(self, k: int) -> int:
        """Where the run of white space that starts at or contains k ends (k when none does)."""
        j = self._bisect(self._starts, k) - 1
        return self._ends[j] if j >= 0 and self._starts[j] <= k < self._ends[j] else k


class BPEBase:
    """The added tokens, post-processor, end token and the encode loop of a BPE tokenizer.json.

    A subclass sets `vocab`, reads its own model parts in `_model(data, where)`, and gives
    `_normalize(text)`, `_encode_piece(piece, first)` (first: the piece starts the text) and `token_bytes(i)`.
    """

    path: Path | None = None
    sha256: str | None = None
    source: dict | None = None  # spec() of a tokenizer built from elsewhere (a GGUF's metadata)

    def _open(self, path: Path | None, data: dict | None, loaded) -> tuple[dict, Path | None]:
        """The tokenizer.json table (read from `path` unless `data` is given, or `loaded`: its table
        and sha256 read already) and its folder's tokenizer_config.json (None for a table given)."""
        if data is not None:
            self.name = str(path)
            return data, None
        self.path = path.resolve()
        data, self.sha256 = loaded or load(path)
        self.name = f"{path.parent.name}/{path.name}"
        return data, inside(path.parent, "tokenizer_config.json", path.parent)  # a link out of the folder is refused

    def _common(self, data: dict, where: str, end, config: Path | None) -> None:
        """Everything but the model: call after `vocab` and the normalizer are set."""
        if data.get("model", {}).get("dropout") not in (None, 0, 0.0):
            refuse(where, f"BPE dropout {data['model']['dropout']} (random merges)")
        for key in ("truncation", "padding"):
            if data.get(key) is not None:
                refuse(where, f"'{key}' is set (it changes the ids)")
        self.added: dict[int, dict] = {}
        for t in data.get("added_tokens", []):
            if t.get("single_word"):
                refuse(where, f"added token {t['content']!r} has single_word")
            self.added[token_id(t["id"], where, f"the added token {str(t.get('content'))[:40]!r}")] = t
        self.special = {i for i, t in self.added.items() if t.get("special")}
        self._added_texts = [self._added(normalized) for normalized in (False, True)]  # checked now, compiled when first used
        self._compiled = None
        self.before, self.after = post(data.get("post_processor"), where)
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.id_to_token.update({i: t["content"] for i, t in self.added.items()})
        for i in self.before + self.after:  # the model reads every id; one that names no token is no row of it
            if i not in self.id_to_token:
                raise TracerError(f"tokenizer {where}: the post-processor's template adds the id {i:,}, "
                                  f"which no token of the vocabulary has")
        self.n_vocab = max(self.id_to_token) + 1
        self.end_id = self._end(end, where, config)

    def read_merges(self, items, where) -> list:
        """merges as {(id a, id b): (rank, new id)}; returns them in file order as ((a, b), new)."""
        self.merges: dict[tuple[int, int], tuple[int, int]] = {}
        listed = []
        for rank, m in enumerate(items):
            a, b = m.split(" ") if isinstance(m, str) else m
            try:
                pair, new = (self.vocab[a], self.vocab[b]), self.vocab[a + b]
            except KeyError:
                raise TracerError(f"tokenizer {where}: merge {a!r} {b!r} names a token not in the vocabulary") from None
            self.merges[pair] = (rank, new)  # a repeated pair keeps its last rank, as in tokenizers
            listed.append((pair, new))
        return listed

    def _added(self, normalized: bool):
        """The added tokens of one kind (matched on the raw text, or after the normalizer): (those of at most
        LONG_ADDED characters, longest first; text → id; the longer ones, longest first), or None; too many
        long ones are refused here, when the tokenizer is read."""
        tokens = {}
        for i, t in self.added.items():
            if bool(t.get("normalized", True)) == normalized and t["content"]:
                text = self._normalize(t["content"]) if normalized else t["content"]
                tokens[text] = i  # two tokens with the same text: the last id, as a trie built in order would keep
        if not tokens:
            return None
        longs = sorted((t for t in tokens if len(t) > LONG_ADDED), key=len, reverse=True)
        if len(longs) > MAX_LONG_ADDED:
            raise TracerError(f"tokenizer {self.name}: {len(longs):,} added tokens longer than {LONG_ADDED:,} characters "
                              f"(the longest {len(longs[0]):,}); tracer takes at most {MAX_LONG_ADDED:,} such tokens")
        short = sorted((t for t in tokens if len(t) <= LONG_ADDED), key=len, reverse=True)  # leftmost-longest
        return short, tokens, longs

    @property
    def _matchers(self) -> list:
        """The two kinds' matchers, compiled the first time a text is encoded: the short added tokens as one
        regex alternation (compiling costs about 8 µs and 100 bytes per character, seconds for a vocabulary
        of 200,000 control tokens, which a run of ids alone never needs), the long ones found with str.find."""
        if self._compiled is None:
            self._compiled = [None if a is None else
                              ((re.compile("|".join(map(re.escape, a[0]))) if a[0] else None), a[1], a[2])
                              for a in self._added_texts]
        return self._compiled

    def _matches(self, text: str, matcher):
        """(start, stop, token) of every added token in `text`, leftmost first and the longest there, none
        overlapping (tokenizers' AddedVocabulary). A long token's next place is looked for again only once
        the scan has passed it: each costs one pass over the text."""
        pattern, _, longs = matcher
        pos, ahead = 0, {t: text.find(t) for t in longs}
        while True:
            m = pattern.search(text, pos) if pattern is not None else None
            best = (m.start(), -len(m.group()), m.group()) if m else None
            for t in longs:
                if 0 <= ahead[t] < pos:
                    ahead[t] = text.find(t, pos)
                if ahead[t] >= 0 and (best is None or (ahead[t], -len(t)) < best[:2]):
                    best = (ahead[t], -len(t), t)
            if best is None:
                return
            start, minus, found = best
            yield start, start - minus, found
            pos = start - minus

    def _cut(self, text: str, matcher) -> list[tuple[str, int | None, int]]:
        """AddedVocabulary.find_matches: the added tokens in the text and the pieces between them, with
        each piece's start in the text."""
        out, offset, runs = [], 0, None
        for start, stop, found in (self._matches(text, matcher) if matcher else ()):
            i = matcher[1][found]
            t = self.added[i]
            if t.get("lstrip") or t.get("rstrip"):
                runs = runs or _Runs(text)  # the whitespace runs, found once: each strip is then a look-up
            if t.get("lstrip"):
                start = max(runs.start(start), offset)
            if t.get("rstrip"):
                stop = runs.end(stop)
            if offset < start:
                out.append((text[offset:start], None, offset))
            out.append((text[start:stop], i, start))
            offset = stop
        return [p for p in out + [(text[offset:], None, offset)] if p[0]]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The ids `tokenizers` gives: `Tokenizer.encode(text, add_special_tokens).ids` (by default with
        the post-processor's BOS/EOS; special tokens in the text are matched either way)."""
        if not text.isascii() and re.search("[\ud800-\udfff]", text):
            raise TracerError("prompt: not valid UTF-8 text (a lone surrogate, an undecodable byte)")
        ids = list(self.before) if add_special_tokens else []
        for raw, i, at in self._cut(text, self._matchers[0]):
            if i is not None:
                ids.append(i)
                continue
            for piece, j, at2 in self._cut(self._normalize(raw), self._matchers[1]):
                ids.extend([j] if j is not None else self._encode_piece(piece, at == 0 and at2 == 0))
        return ids + self.after if add_special_tokens else ids

    def pieces(self, text: str) -> list[tuple[str, bool]]:
        """The text between added tokens, normalized, as the model part reads it: (piece, first)."""
        return [(piece, at == 0 and at2 == 0) for raw, i, at in self._cut(text, self._matchers[0]) if i is None
                for piece, j, at2 in self._cut(self._normalize(raw), self._matchers[1]) if j is None]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        raise NotImplementedError

    def token_str(self, i: int) -> str:
        """The token's text; bytes that are part of a character show as \\xf0\\x9f."""
        if int(i) not in self.id_to_token:
            return f"<unassigned id {int(i)}>"
        return self.token_bytes(i).decode("utf-8", errors="backslashreplace")

    @property
    def special_tokens(self) -> dict[str, int]:
        """The special added tokens' text → id (`<|im_start|>`, `</s>`, …): a chat template's markers."""
        return {self.added[i]["content"]: i for i in sorted(self.special)}

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """The ids at which generation stops: the end token, and `<|im_end|>` / `<|eot_id|>` / `<end_of_turn>`
        / `<|end|>` where the vocabulary has them as special tokens (a chat's turn ends there)."""
        turn_ends = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>") + END_NAMES
        found = [self.special_tokens[t] for t in turn_ends if t in self.special_tokens]
        return tuple(dict.fromkeys(([self.end_id] if self.end_id is not None else []) + found))

    def _end(self, end, where, config: Path | None) -> int | None:
        if end is None:
            # tokenizer_config.json, when there is one: its eos_token names the end token
            eos = parse_json(read_small(config, "tokenizer config"), f"{config}: not JSON") if config and config.exists() else {}
            eos = eos.get("eos_token") if isinstance(eos, dict) else None
            end = eos.get("content") if isinstance(eos, dict) else eos
            specials = {self.added[i]["content"] for i in self.special}
            end = end if end is not None else next((n for n in END_NAMES if n in specials), None)
        ids = [end] if isinstance(end, int) and end in self.id_to_token else [i for i, t in self.id_to_token.items() if t == end]
        if end is not None and not ids:
            raise TracerError(f"tokenizer {where}: end token {end!r} is not in the vocabulary")
        return max(ids, key=lambda i: i in self.added) if ids else None

    def spec(self) -> dict:
        if self.source is not None:
            return dict(self.source)
        end = self.id_to_token.get(self.end_id) if self.end_id is not None else None
        return {"kind": "tokenizer.json", "path": str(self.path), "sha256": self.sha256, "end": end}
