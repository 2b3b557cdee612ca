"""A saved trace's tokenizer: the text of every token, written into the trace itself.

A trace of a model read from a tokenizer.json or a GGUF file used to name that file by its path, and
`tracer show` opened whatever path a trace file named (and its errors quoted that file's first
bytes, its size, whether it existed). A trace now holds what it needs to show its tokens: every
token's text as the run's tokenizer showed it (`TableTokenizer`), with the file's name and sha256 for
the reader; `tracer show` opens no file a trace names. A trace saved by an older tracer that names a
path is read only when that path lies inside the trace's own folder, and an error about it never
quotes the file. Tokenizers named by what they are (a shipped encoding, a word list) are kept as they
are. Core module: the standard library.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TracerError
from .tokens import Tokenizer, get_tokenizer

BY_PATH = ("tokenizer.json", "gguf")  # the kinds of spec that name a file


class TableTokenizer(Tokenizer):
    """Every token's text (`tokens[id]`), as a saved trace holds it: it shows tokens, it does not tokenize."""

    def __init__(self, tokens, name: str = "table", end_id=None, eos_ids=(), source: dict | None = None):
        if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
            raise TracerError("tokenizer: a trace's token table must be a list of the tokens' texts")
        ids = [end_id, *eos_ids] if isinstance(eos_ids, (list, tuple)) else None
        if ids is None or not all(i is None or (type(i) is int and 0 <= i < len(tokens)) for i in ids):
            raise TracerError("tokenizer: a trace's token table names an end token that is not one of its ids")
        self.tokens, self.n_vocab, self.end_id = tokens, len(tokens), end_id
        self.name = str(name)[:200]
        self._eos = tuple(i for i in eos_ids if i is not None)
        self.source = dict(source or {})

    def encode(self, text: str) -> list[int]:
        raise TracerError(f"tokenizer {self.name}: a saved trace holds its tokens' texts, not the tokenizer; "
                          f"load the model to tokenize new text")

    def decode(self, ids) -> str:
        return "".join(self.token_str(i) for i in ids)

    def token_str(self, i: int) -> str:
        i = int(i)
        return self.tokens[i] if 0 <= i < self.n_vocab else f"<unassigned id {i}>"

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return self._eos

    def spec(self) -> dict:
        return {"kind": "table", **self.source, "name": self.name, "end_id": self.end_id, "eos_ids": list(self._eos),
                "tokens": self.tokens}


def saved_spec(spec, tokenizer=None):
    """What a trace file records of its tokenizer: a spec that names a file becomes the token table of
    `tokenizer` (the one the run used), with the file's kind, name and sha256 but not its path; without
    the tokenizer, only those (a trace that cannot show its candidates' texts, and opens nothing)."""
    if not isinstance(spec, dict) or spec.get("kind") not in BY_PATH:
        return spec
    source = {"of": spec["kind"], "sha256": spec.get("sha256")}
    if tokenizer is None:
        return {"kind": "table", **source, "name": Path(str(spec.get("path", ""))).name}
    n = tokenizer.n_vocab
    tokens = [tokenizer.token_str(i) for i in range(n)]
    end = tokenizer.end_id if tokenizer.end_id is not None and 0 <= tokenizer.end_id < n else None
    return TableTokenizer(tokens, getattr(tokenizer, "name", "table"), end, tuple(i for i in tokenizer.eos_ids if 0 <= i < n),
                          source).spec()


def trace_tokenizer(spec, folder: Path | None = None) -> Tokenizer:
    """The tokenizer to show a trace whose metadata says `spec`: a shipped encoding or a word list as they
    are, a token table; a path (older traces) only inside `folder`, the trace's own folder."""
    if isinstance(spec, dict) and spec.get("kind") == "table":
        if "tokens" not in spec:
            raise TracerError(f"tokenizer: the trace names its tokenizer ({str(spec.get('of', 'a file'))[:40]}) without "
                              f"its tokens' texts; run the model again with --save")
        eos = spec.get("eos_ids", [])
        return TableTokenizer(spec["tokens"], spec.get("name", "table"), spec.get("end_id"), eos if isinstance(eos, list) else None,
                              {k: spec[k] for k in ("of", "sha256") if isinstance(spec.get(k), str)})
    if not isinstance(spec, dict) or spec.get("kind") not in BY_PATH:
        return get_tokenizer(spec)
    path, here = spec.get("path"), None
    try:  # the file itself, every link followed, a regular file inside the trace's folder
        if folder is not None and isinstance(path, str) and path:
            target = Path(folder, path)
            target = target / "tokenizer.json" if spec["kind"] == "tokenizer.json" and target.is_dir() else target
            real = target.resolve()
            here = real if real.is_relative_to(Path(folder).resolve()) and real.is_file() else None
    except (OSError, RuntimeError, ValueError):
        here = None
    if here is None:
        raise TracerError("tokenizer: the trace names it by a path outside the trace's own folder (a trace saved by an "
                          "older tracer); tracer opens no file a trace names: run the model again with --save")
    try:
        return get_tokenizer({**spec, "path": str(here)})
    except TracerError:
        raise TracerError(f"tokenizer: the {spec['kind']} the trace names in its folder is not one tracer can read") from None
