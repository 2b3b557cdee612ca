"""SentencePiece-style tokenizer.json files (tracer.tokenizers.sp_tokenizer): the ids `tokenizers` gives, on awkward text.

The fixtures in tests/data/tokenizers/sentencepiece/ come from tools/make_sp_fixtures.py: a BPE model
trained by the real `sentencepiece` trainer (byte_fallback), converted to tokenizer.json by transformers
(Metaspace) and in the Hub's older Llama 2 shape (Prepend + Replace normalizer). Variants made here cover
Gemma's shape (Replace only), prepend_scheme always/never, Metaspace split, an unk token without byte
fallback, and the Metaspace decoder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracer.errors import TracerError
from tracer.tokenizers.sp_tokenizer import SPTokenizer
from tracer.tokenizers.tokens import get_tokenizer

DATA = Path(__file__).parent / "data" / "tokenizers" / "sentencepiece"
FIXTURES = [DATA / "sp-llama.json", DATA / "sp-legacy.json"]
NAMES = [p.stem for p in FIXTURES]

AWKWARD = [
    "", " ", "  ", "   ", "\n", "\t", "\r\n", " \n \n ", "hello world", "Hello, World!", "  leading", "trailing  ",
    "multiple    spaces    here", "a \n b", "line\n\nparagraph\n\n\n", "\t\tindented\n\t", "x" + " " * 40 + "y",
    "café Café Cafe\u0301 naïve résumé", "Ångström ß ǅ ﬁ İstanbul", "\u0301 a combining mark first",
    "😀", "😀😀😀", "👍🏽 thumbs", "👩‍💻 coder 👨‍👩‍👧‍👦", "🇫🇷🇯🇵 flags", "1️⃣ #️⃣",
    "日本語のテキスト", "中文文本，标点。", "한국어 텍스트", "Привет, мир!", "ελληνικά", "العربية עברית", "हिन्दी",
    "zero\u200bwidth\u200cjoiner\u200d here\ufeff", "a\u00a0b\u3000c\u2028d", "\x00\x07\x7f\x1b[31m",
    "1", "12", "123", "12345678901234567890", "3.14159 2.71828", "1,000,000", "x=-1e-10", "٣٤٥ ⅷ ² ½",
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }", "~/.config/$USER/*.json",
    "I'm you're DON'T", "▁ already ▁▁ metaspace▁", "<0x41> <0xFF>", "\u2581hi",
    "<s>hello</s>", "<s> hello </s>", "hi<s>", "<unk> <s> </s>", "[INST] hello [/INST] answer", "<sep>x<sep> <sep>",
    "<|user|>\nhi <think>hmm</think>", "<s", "< s>", "<<s>>",
    "Supercalifragilisticexpialidocious" * 6, "a" * 2000, "ab " * 300, "😀" * 100, "1" * 300,
]

# Surrogates cannot be text; code points this Python's Unicode database (14.0 on Python 3.11) does not
# assign are not compared: tokenizers' Rust tables are newer (a Unicode 16 digit such as U+11DE0 is a
# digit to tokenizers' Digits step and unknown to Python), and tracer's classes come from this Python.
UNCOMPARED = ("Cs", "Cn")


def _reference(path):
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_file(str(path))


def _variant(tmp_path, change, base: str = "sp-llama") -> Path:
    data = json.loads((DATA / f"{base}.json").read_text(encoding="utf-8"))
    change(data)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _same(tok, ref, texts=AWKWARD):
    wrong = [(s, tok.encode(s), ref.encode(s).ids) for s in texts if tok.encode(s) != ref.encode(s).ids]
    assert not wrong, f"{len(wrong)} of {len(texts)} differ; first: {wrong[0]}"


@pytest.mark.parametrize("path", FIXTURES, ids=NAMES)
def test_ids_equal_tokenizers_on_awkward_text(path):
    _same(SPTokenizer(path), _reference(path))


@pytest.mark.parametrize("path", FIXTURES, ids=NAMES)
def test_decode_equals_tokenizers(path):
    tok, ref = SPTokenizer(path), _reference(path)
    for s in AWKWARD:
        ids = ref.encode(s).ids
        for skip in (False, True):
            assert tok.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip), (s, skip)
    some = list(range(0, tok.n_vocab, 3))  # byte pieces that are not UTF-8 among them
    assert tok.decode(some) == ref.decode(some, skip_special_tokens=False)
    assert tok.decode([4 + 0xE6, 4 + 0x97]) == ref.decode([4 + 0xE6, 4 + 0x97])  # half a character: U+FFFD per byte


def test_ids_equal_sentencepiece_itself():
    """The trained model's own ids, in the legacy shape, which always prepends `▁` as sentencepiece's
    add_dummy_prefix does (Metaspace's does not before text that starts with a space: "  x" differs).
    sentencepiece adds no BOS; the tokenizer.json's template does."""
    spm = pytest.importorskip("sentencepiece")
    sp = spm.SentencePieceProcessor(model_file=str(DATA / "sp-bpe.model"))
    tok = SPTokenizer(DATA / "sp-legacy.json")
    plain = [s for s in AWKWARD if "<" not in s and s.strip() and "\u2581" not in s]
    wrong = [(s, tok.encode(s)[1:], sp.encode(s)) for s in plain if tok.encode(s)[1:] != sp.encode(s)]
    assert not wrong, f"{len(wrong)} differ; first: {wrong[0]}"


VARIANTS = {
    "gemma replace only": lambda d: d.update(normalizer={"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
                                             pre_tokenizer=None),
    "always": lambda d: d["pre_tokenizer"].update(prepend_scheme="always"),
    "never": lambda d: d["pre_tokenizer"].update(prepend_scheme="never"),
    "split": lambda d: d["pre_tokenizer"].update(split=True),
    "old metaspace": lambda d: d.update(pre_tokenizer={"type": "Metaspace", "replacement": "▁", "add_prefix_space": True}),
    "unk no fallback": lambda d: d["model"].update(byte_fallback=False, unk_token="<unk>", fuse_unk=False),
    "unk fused": lambda d: d["model"].update(byte_fallback=False, unk_token="<unk>", fuse_unk=True),
    "fallback and unk": lambda d: [d["model"]["vocab"].pop(f"<0x{b:02X}>") for b in (0x9F, 0x80)] and d["model"].update(unk_token="<unk>"),
    "ignore merges": lambda d: d["model"].update(ignore_merges=True),
    "metaspace decoder": lambda d: d.update(decoder={"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}),
    "normalized added": lambda d: d["added_tokens"][3].update(normalized=True),
    "lstrip rstrip": lambda d: d["added_tokens"][3].update(lstrip=True, rstrip=True),
}


@pytest.mark.parametrize("case", VARIANTS, ids=list(VARIANTS))
def test_variants_equal_tokenizers(tmp_path, case):
    path = _variant(tmp_path, VARIANTS[case])
    tok, ref = SPTokenizer(path), _reference(path)
    _same(tok, ref)
    ids = [i for s in AWKWARD for i in ref.encode(s).ids]
    assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=False)


REFUSED = {
    "unigram": (lambda d: d["model"].update(type="Unigram"), "model type Unigram"),
    "nfkc": (lambda d: d.update(normalizer={"type": "NFKC"}), "normalizer NFKC"),
    "whitespace": (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "pre-tokenizer Whitespace"),
    "wordpiece decoder": (lambda d: d.update(decoder={"type": "WordPiece"}), "decoder WordPiece"),
    "dropout": (lambda d: d["model"].update(dropout=0.1), "dropout"),
    "single word": (lambda d: d["added_tokens"][0].update(single_word=True), "single_word"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_what_cannot_be_reproduced_is_a_one_line_refusal(tmp_path, case):
    change, why = REFUSED[case]
    with pytest.raises(TracerError, match=why) as e:
        SPTokenizer(_variant(tmp_path, change))
    assert "tracer cannot reproduce this tokenizer exactly" in str(e.value) and "\n" not in str(e.value)


def test_get_tokenizer_picks_the_class_from_the_file(tmp_path):
    for path in FIXTURES:
        tok = get_tokenizer({"kind": "tokenizer.json", "path": str(path)})
        assert isinstance(tok, SPTokenizer) and tok.encode("hi")[0] == 1
        assert tok.id_to_token[tok.end_id] == "</s>"
        again = get_tokenizer(tok.spec())
        assert again.encode("Hello 123") == tok.encode("Hello 123")
    (tmp_path / "tokenizer.json").write_bytes(FIXTURES[0].read_bytes())
    tok = get_tokenizer({"kind": "tokenizer.json", "path": str(tmp_path)})  # a folder
    assert isinstance(tok, SPTokenizer)
    byte_level = get_tokenizer({"kind": "tokenizer.json", "path": str(DATA.parent / "qwen2-like.json")})
    assert type(byte_level).__name__ == "HFTokenizer"
    data = json.loads((DATA.parent / "qwen2-like.json").read_text(encoding="utf-8"))
    data["decoder"] = None  # still byte-level by its pre-tokenizer: the byte-level reader says what is wrong
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(TracerError, match="decoder None \\(byte-level tokenizers decode with ByteLevel\\)"):
        get_tokenizer({"kind": "tokenizer.json", "path": str(tmp_path)})


def test_token_str_and_interface():
    tok = SPTokenizer(FIXTURES[0])
    ids = tok.encode(" hi 😀")
    assert [tok.token_str(i) for i in ids][0] == "<s>"
    assert "\\xf0" in "".join(tok.token_str(i) for i in ids)  # the emoji's byte pieces
    assert tok.token_bytes(tok.vocab["<0x41>"]) == b"A" and tok.token_bytes(tok.vocab["▁the"]) == b" the"
    assert tok.dropped("anything \x00 😀") == []
    assert tok.special_tokens == {"<unk>": 0, "<s>": 1, "</s>": 2} and tok.eos_ids == (2,)


_CACHE = {}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from(list("aAbé e\u0301 \t\n\r0123456789'.,-_<>/s😀👩\u200d日\u00a0▁")) | st.characters(blacklist_categories=UNCOMPARED),
               max_size=40), st.sampled_from(FIXTURES))
def test_random_text_equals_tokenizers(text, path):
    if path not in _CACHE:
        _CACHE[path] = SPTokenizer(path), _reference(path)
    tok, ref = _CACHE[path]
    assert tok.encode(text) == ref.encode(text).ids


def test_split_merged_with_previous_equals_tokenizers():
    """GemmaTokenizer's pre-tokenizer, Split(" ", MergedWithPrevious), as tokenizers cuts: every string
    of a's, b's and spaces up to length 7, and a longer delimiter."""
    import itertools

    tokenizers = pytest.importorskip("tokenizers")
    from tracer.tokenizers.sp_tokenizer import merged_with_previous

    for delim in (" ", "ab"):
        pt = tokenizers.pre_tokenizers.Split(delim, behavior="merged_with_previous")
        for n in range(8):
            for t in map("".join, itertools.product("ab ", repeat=n)):
                assert merged_with_previous(t, delim) == [p for p, _ in pt.pre_tokenize_str(t)], (t, delim)
