#!/usr/bin/env python
"""Write `tracer/run/word_tokens.txt`: every lower-case word token of GPT-2's vocabulary, most frequent first.

    python tools/make_words.py            # rewrite the file
    python tools/make_words.py --check    # exit 1 if the file is not what this makes

A GPT-2 token id is the rank of the merge that made it, so low ids are frequent pieces of text. The
list takes, in id order, every token that is a space and 3-10 lower-case ASCII letters (" garden",
" teacher"; a few are pieces of longer words, " con", " pro"), one a line: 17,534 tokens, of which
the first 5,000 are `tracer.run.corpus.common_words()`. `tracer corpus` draws the words of its
`induction` lines from it (phrases and runs of random words said again, which the shipped model can
only predict by copying from the context; the rarer tokens so that copying works on any word, not
only on the ones it knows well), so the corpus stays standard-library only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tracer" / "run" / "word_tokens.txt"


def words() -> str:
    sys.path.insert(0, str(ROOT))
    from tracer.tokenizers.tokens import get_tokenizer

    enc = get_tokenizer("gpt2").enc
    found = []
    for i in range(256, enc.n_vocab):
        piece = enc.decode_single_token_bytes(i)
        if re.fullmatch(rb" [a-z]{3,10}", piece):
            found.append(piece[1:].decode("ascii"))
    return "".join(w + "\n" for w in found)


def main() -> int:
    text = words()
    if "--check" in sys.argv[1:]:
        same = OUT.read_text(encoding="ascii") == text
        print(f"{OUT}: " + ("as made" if same else "differs from what tools/make_words.py makes"))
        return 0 if same else 1
    OUT.write_text(text, encoding="ascii")
    print(f"wrote {OUT}: {len(text.split()):,} words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
