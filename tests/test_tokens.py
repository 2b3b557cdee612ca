"""Tokenizers: GPT-2's BPE built offline and checked, word lists, letter labels."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from tracer.tokenizers import tokens as tk
from tracer.errors import TracerError
from tracer.tokenizers.tokens import WordTokenizer, _gpt2_files, get_tokenizer, gpt2_mergeable_ranks, label, show_token

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
    import tracer.tokenizers.tokens as tk

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(tk.Path, "home", staticmethod(no_home))
    assert tk.ranks_cache_path() is None
    assert len(tk.gpt2_mergeable_ranks()) == 50256


# ----------------------------------------------------------------------------------------- the ranks cache


@pytest.fixture(scope="module")
def built_ranks():
    return tk._build_gpt2_ranks(tk._gpt2_files())


def test_cache_constant_is_the_hash_of_the_ranks_built_from_the_checked_files(built_ranks):
    blob = tk._ranks_blob(built_ranks)
    assert hashlib.sha256(blob).hexdigest() == tk.GPT2_RANKS_CACHE_SHA256
    assert len(built_ranks) == 50256 and built_ranks[b"!"] == 0 and built_ranks[b" the"] == 262


def test_ranks_are_cached_then_read_back_equal(tmp_path, monkeypatch, built_ranks):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = tk.ranks_cache_path()
    assert path == tmp_path / "tracer" / "gpt2-ranks.bin" and not path.exists()
    assert tk.gpt2_mergeable_ranks() == built_ranks  # built, then written
    assert path.exists()
    assert tk._read_ranks_cache(path) == built_ranks  # what the next process reads
    assert tk.gpt2_mergeable_ranks() == built_ranks


def test_a_damaged_cache_is_rebuilt_not_trusted(tmp_path, monkeypatch, built_ranks):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = tk.ranks_cache_path()
    path.parent.mkdir(parents=True)
    good = tk._ranks_blob(built_ranks)
    swapped = bytearray(good)
    i = good.index(b" the")  # a token's bytes changed: same length, wrong content
    swapped[i + 1] = ord("T")
    for bad in (bytes(swapped), good[:-10], b"", b"not a cache"):
        path.write_bytes(bad)
        assert tk._read_ranks_cache(path) is None
        assert tk.gpt2_mergeable_ranks() == built_ranks
        assert path.read_bytes() == good  # rewritten


def test_an_unwritable_cache_folder_falls_back_to_building(tmp_path, monkeypatch, built_ranks):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert tk.gpt2_mergeable_ranks() == built_ranks
    assert not list(tmp_path.glob("**/*.tmp"))


def test_the_tokenizer_built_from_the_cache_encodes_as_gpt2(tmp_path, monkeypatch):
    import tiktoken

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    tk.gpt2_mergeable_ranks()  # fills the cache
    enc = tiktoken.Encoding(name="gpt2-cached", pat_str=tk.GPT2_PATTERN, mergeable_ranks=tk.gpt2_mergeable_ranks(),
                            special_tokens={tk.ENDOFTEXT: 50256}, explicit_n_vocab=50257)
    # "Hello world" is [15496, 995] in GPT-2 (ids from OpenAI's encoder.json)
    assert enc.encode("Hello world") == [15496, 995]
    assert enc.encode(" the") == [262]
