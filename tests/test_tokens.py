"""Tokenizers: GPT-2's BPE built offline and checked, word lists, letter labels."""

from __future__ import annotations

import shutil

import pytest

from tracer.errors import TracerError
from tracer.tokens import WordTokenizer, _gpt2_files, get_tokenizer, gpt2_mergeable_ranks, label, show_token

ARTICLE = "You are a business consultant, please analyze the impact of rising oil prices on the automotive industry."


def test_article_sentence_is_19_gpt2_tokens():
    tok = get_tokenizer("gpt2")
    assert tok.encode(ARTICLE) == [1639, 389, 257, 1597, 17028, 11, 3387, 16602, 262, 2928, 286, 7396, 3056, 4536,
                                   319, 262, 29393, 2831, 13]
    assert tok.n_vocab == 50257 and tok.end_id == 50256
    assert tok.decode(tok.encode(ARTICLE)) == ARTICLE


def test_gpt2_text_of_single_tokens():
    tok = get_tokenizer("gpt2")
    assert tok.token_str(389) == " are"
    assert show_token(tok.token_str(389)) == "␣are"
    assert tok.encode("<|endoftext|>") != [50256]  # typed text never becomes the control token


def test_damaged_gpt2_file_is_a_clear_error(tmp_path):
    files = _gpt2_files()
    copies = {}
    for name, path in files.items():
        copies[name] = tmp_path / name
        shutil.copy(path, copies[name])
    with open(copies["vocab.bpe"], "ab") as f:
        f.write(b"x y\n")
    with pytest.raises(TracerError, match=r"vocab.bpe has sha256 .* expected 1ce16647"):
        gpt2_mergeable_ranks(copies)


def test_cl100k_base_is_available_offline():
    tok = get_tokenizer("cl100k_base")
    assert tok.n_vocab > 100_000
    assert tok.decode(tok.encode("hello world")) == "hello world"


def test_unknown_encoding_suggests_a_near_name():
    with pytest.raises(TracerError, match="did you mean 'gpt2'"):
        get_tokenizer("gpt3")


def test_labels_follow_the_article_then_spreadsheet_columns():
    assert [label(i) for i in range(6)] == ["A", "B", "C", "D", "E", "F"]
    assert label(25) == "Z" and label(26) == "AA" and label(27) == "AB" and label(26 + 26 * 26) == "AAA"


def test_word_tokenizer():
    tok = WordTokenizer(["A", "B", "C", "<end>"])
    assert tok.encode("A C B") == [0, 2, 1]
    assert tok.end_id == 3
    assert tok.decode([0, 1]) == "A B"
    with pytest.raises(TracerError, match="'D' is not in the vocabulary"):
        tok.encode("A D")
    with pytest.raises(TracerError, match="appears twice"):
        WordTokenizer(["A", "A"])


def test_without_a_home_folder_the_ranks_are_built_not_cached(monkeypatch):
    import tracer.tokens as tk

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(tk.Path, "home", staticmethod(no_home))
    assert tk.ranks_cache_path() is None
    assert len(tk.gpt2_mergeable_ranks()) == 50256
