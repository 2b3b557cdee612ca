"""Tokenizers from GGUF metadata (tracer.tokenizers.gguf_tokenizer): the ids transformers' GGUF loading gives.

GGUF files are read here with the `gguf` package (tracer's own reader is elsewhere; the function takes
plain values) and written with its GGUFWriter: the committed sentencepiece/sp-llama.gguf (a `llama`
vocabulary from a trained sentencepiece model), variants of it, and `gpt2` vocabularies made from the
byte-level fixtures. The real SmolLM2-135M-Instruct GGUF comes from the `smollm2_gguf` fixture.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracer.errors import TracerError
from tracer.tokenizers.gguf_tokenizer import PRE_TOKENIZERS, tokenizer_from_gguf, tokenizer_json_from_gguf

from .conftest import add_gguf_value

DATA = Path(__file__).parent / "data" / "tokenizers"
SP_GGUF = DATA / "sentencepiece" / "sp-llama.gguf"
TEXTS = [
    "", " ", "   ", "\n", "\t", "\r\n", "hello world", "Hello, World!", "  leading", "trailing  ", "a \n b",
    "line\n\nparagraph\n\n\n", "\t\tindented\n\t", "x" + " " * 20 + "y", "café Cafe\u0301 naïve", "ß ﬁ İstanbul",
    "😀", "👩‍💻 coder", "🇫🇷 flags", "日本語のテキスト", "한국어", "Привет, мир!", "العربية", "zero\u200bwidth\u200d",
    "a\x04b\x06c\x13\x14\x16\x1d", "\x00\x07\x7f", "1", "12", "123", "1234567", "3.14159", "x=-1e-10", " 42 ", "٣٤٥ ½",
    "def f(x):\n    return x * 2\n", "I'm you're DON'T", "<s>hi</s> <unk>", "<|im_start|>user\nhi<|im_end|>\n",
    "<|endoftext|> after", "<sep>x<sep>", "[INST] hi [/INST]", "<|begin_of_text|>x<|eot_id|>", "a" * 500, "😀" * 50,
]

# Surrogates cannot be text; code points this Python's Unicode database (14.0 on Python 3.11) does not
# assign are not compared: tokenizers' Rust tables are newer (a Unicode 16 digit such as U+11DE0 is a
# digit to tokenizers' Digits step and unknown to Python), and tracer's classes come from this Python.
UNCOMPARED = ("Cs", "Cn")


def _meta(path) -> dict:
    """The tokenizer metadata as plain values, as tracer's loader hands it over."""
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(str(path))
    out = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.") or key == "general.architecture":
            value = field.contents()
            out[key] = np.array(value, np.float32 if key.endswith("scores") else np.int32) if key.endswith(("scores", "token_type")) else value
    return out


def _write(path: Path, meta: dict) -> Path:
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), meta.get("general.architecture", "llama"))
    for key, value in meta.items():
        if key != "general.architecture":
            add_gguf_value(w, key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _transformers(path: Path):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def _same(tok, ref, texts=TEXTS):
    wrong = [(s, tok.encode(s), ref(s)["input_ids"]) for s in texts if tok.encode(s) != ref(s)["input_ids"]]
    assert not wrong, f"{len(wrong)} of {len(texts)} differ; first: {wrong[0]}"


def _with_tokenizers(meta: dict, follow: str = "transformers"):
    """tokenizers itself running the tokenizer.json tracer builds (no torch needed)."""
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_str(json.dumps(tokenizer_json_from_gguf(meta, follow=follow)))


def test_llama_vocabulary_equals_tokenizers_and_transformers():
    meta = _meta(SP_GGUF)
    tok = tokenizer_from_gguf(meta, str(SP_GGUF))
    ref = _with_tokenizers(meta)
    assert all(tok.encode(s) == ref.encode(s).ids for s in TEXTS)
    assert type(tok).__name__ == "SPTokenizer" and tok.add_bos and tok.encode("hi")[0] == 1
    assert tok.end_id == 2 and tok.bos_token == "<s>" and tok.eos_token == "</s>" and "[INST]" in tok.chat_template
    assert tok.spec() == {"kind": "gguf", "path": str(SP_GGUF.resolve()), "sha256": None, "follow": "transformers"}
    _same(tok, _transformers(SP_GGUF))


def _spaces_and_mask(meta: dict) -> dict:
    """The sentencepiece fixture with what Gemma's files have: tokens of two and three spaces stored as
    spaces (one of them user-defined), GemmaTokenizer's own special tokens (`<mask>`, `<bos>`, …), and
    scores that do not follow the merge order."""
    more = ["  ", "   ", "<mask>", "\u2581\u2581x", "<bos>", "<eos>", "<pad>"]
    tokens = [str(x) for x in meta["tokenizer.ggml.tokens"]] + more
    types = [int(x) for x in meta["tokenizer.ggml.token_type"]] + [1, 4, 1, 1, 1, 1, 1]
    scores = [float(x) for x in meta["tokenizer.ggml.scores"]][::-1] + [0.0] * len(more)
    return {**meta, "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types, "tokenizer.ggml.scores": scores}


@pytest.mark.parametrize("arch", ["gemma3", "gemma2", "phi3"])
def test_gemma_and_phi3_vocabularies_equal_tokenizers_and_transformers(tmp_path, arch):
    """transformers rebuilds these two kinds its own way (gguf_tokenizer_mapping.py): Gemma with its
    space tokens respelled "▁▁", merges in the tokens' file order and no space prefix; Phi-3 with the
    prefix from a normalizer. tracer's ids equal tokenizers' (running tracer's table) and
    transformers' (building its own) for every text, and the decoded text too."""
    meta = _spaces_and_mask({**_meta(SP_GGUF), "general.architecture": arch})
    path = _write(tmp_path / f"{arch}.gguf", meta)
    tok = tokenizer_from_gguf(_meta(path), str(path))
    texts = TEXTS + ["two  spaces", "x  ", "   three", "<mask> and <unk>", "\u2581\u2581x"]
    ref = _with_tokenizers(_meta(path))
    assert [tok.encode(s) for s in texts] == [ref.encode(s).ids for s in texts]
    hf = _transformers(path)
    _same(tok, hf, texts)
    assert [tok.decode(tok.encode(s)) for s in texts] == [hf.decode(hf(s)["input_ids"]) for s in texts]
    llama = tokenizer_from_gguf({**_meta(path), "general.architecture": "llama"})  # Metaspace, "first"
    # Gemma puts no ▁ before the text; Phi-3 puts one before it always, even when it starts with a space
    assert (tok.encode("hi") == llama.encode("hi")) == (arch == "phi3")
    assert (tok.encode(" hi") == llama.encode(" hi")) == (arch != "phi3")


def test_gemma4_vocabulary_equals_tokenizers_and_transformers(tmp_path, gguf_of_folder):
    """Tokenizer model `gemma4` (llama.cpp's Gemma4Model.set_vocab, written from tests/data/gemma4-tiny): transformers
    builds GemmaTokenizer on the file's tokens and merges and adds no BOS; tracer's ids equal tokenizers' (running
    tracer's table) and transformers' for every text, and the decoded text too. (The file holds only the tokenizer:
    transformers cannot read a gemma4 file's per-layer feed_forward_length.)"""
    full = _meta(gguf_of_folder(Path(__file__).parent / "data" / "gemma4-tiny", ""))
    path = _write(tmp_path / "gemma4.gguf", full)
    meta = _meta(path)
    tok = tokenizer_from_gguf(meta, str(path))
    texts = TEXTS + ["two  spaces", "x  ", "   three", "<mask> and <unk>", "\u2581\u2581x"]
    ref = _with_tokenizers(meta)
    assert [tok.encode(s) for s in texts] == [ref.encode(s).ids for s in texts]
    hf = _transformers(path)
    # transformers' one difference, its own: GemmaTokenizer adds its default "<mask>" (which this vocabulary, unlike
    # Gemma 4's, lacks) past the vocabulary, an id the model has no row for
    assert hf("<mask>")["input_ids"][0] >= len(meta["tokenizer.ggml.tokens"])
    texts = [s for s in texts if "<mask>" not in s]
    _same(tok, hf, texts)
    assert [tok.decode(tok.encode(s)) for s in texts] == [hf.decode(hf(s)["input_ids"]) for s in texts]
    assert not tok.add_bos and tokenizer_from_gguf(meta, follow="llama.cpp").add_bos


LLAMA_VARIANTS = {
    "no bos": {"tokenizer.ggml.add_bos_token": False},
    "eos too": {"tokenizer.ggml.add_eos_token": True},
    "bos flag missing": {"tokenizer.ggml.add_bos_token": None},
    "merges in the file": "merges",
    "no space prefix": {"tokenizer.ggml.add_space_prefix": False},  # transformers does not read it: Metaspace "first"
}


@pytest.mark.parametrize("case", LLAMA_VARIANTS, ids=list(LLAMA_VARIANTS))
def test_llama_variants_equal_transformers(tmp_path, case):
    meta = _meta(SP_GGUF)
    if LLAMA_VARIANTS[case] == "merges":
        made = tokenizer_json_from_gguf(meta)
        meta["tokenizer.ggml.merges"] = [f"{a} {b}" for a, b in made["model"]["merges"][::-1]]  # an order of its own
    else:
        meta.update(LLAMA_VARIANTS[case])
        meta = {k: v for k, v in meta.items() if v is not None}
    path = _write(tmp_path / "v.gguf", meta)
    tok = tokenizer_from_gguf(_meta(path), str(path))
    ref = _with_tokenizers(_meta(path))
    assert all(tok.encode(s) == ref.encode(s).ids for s in TEXTS)
    _same(tok, _transformers(path))
    own = tokenizer_from_gguf(_meta(path), str(path), follow="llama.cpp")
    assert (own.encode("hi") == tok.encode("hi")) == (case != "no space prefix")


def _gpt2_meta(name: str, pre: str) -> dict:
    """A gpt2 GGUF vocabulary from a byte-level fixture, as llama.cpp's converter writes one."""
    data = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    by_id = {i: t for t, i in data["model"]["vocab"].items()}
    added = {t["id"]: t for t in data["added_tokens"]}
    by_id.update({i: t["content"] for i, t in added.items()})
    tokens = [by_id[i] for i in range(len(by_id))]
    types = [(3 if added[i]["special"] else 4) if i in added else 1 for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    specials = [i for i in added if added[i]["special"]]
    return {"general.architecture": "llama", "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": np.array(types, np.int32),
            "tokenizer.ggml.merges": merges, "tokenizer.ggml.bos_token_id": specials[0],
            "tokenizer.ggml.eos_token_id": specials[-1], "tokenizer.ggml.add_bos_token": name == "llama3-like"}


GPT2_CASES = [("qwen2-like", "qwen2"), ("gpt2-like", "gpt-2"), ("qwen2-like", "smollm"), ("gpt2-like", "starcoder"),
              ("llama3-like", "llama-bpe"), ("mistral-like", "default")]


@pytest.mark.parametrize("name, pre", GPT2_CASES, ids=[f"{n}-{p}" for n, p in GPT2_CASES])
def test_gpt2_vocabularies_equal_transformers(tmp_path, name, pre):
    """One known difference, transformers' own: GPT2Tokenizer adds its default `<|endoftext|>` past the
    end of a vocabulary that lacks it (an id the model has no row for); tracer reads that text as text.
    With follow="llama.cpp", names whose own split cuts digits apart first (smollm, starcoder, …) differ
    from transformers only on text with digits."""
    meta = _gpt2_meta(name, pre)
    tok, own = tokenizer_from_gguf(meta, f"{name}.gguf"), tokenizer_from_gguf(meta, f"{name}.gguf", follow="llama.cpp")
    ref, ref_own = _with_tokenizers(meta), _with_tokenizers(meta, "llama.cpp")
    assert all(tok.encode(s) == ref.encode(s).ids and own.encode(s) == ref_own.encode(s).ids for s in TEXTS)
    texts = [s for s in TEXTS if not ("<|endoftext|>" in s and "<|endoftext|>" not in meta["tokenizer.ggml.tokens"])]
    hf = _transformers(_write(tmp_path / f"{name}.gguf", meta))
    _same(tok, hf, texts)
    differ = [s for s in texts if own.encode(s) != hf(s)["input_ids"]]
    assert all(any(c.isnumeric() for c in s) for s in differ), differ
    assert bool(differ) == (name == "gpt2-like" and pre == "starcoder")  # the one vocabulary here that merges digits


def test_what_cannot_be_reproduced_is_refused_in_one_line():
    meta = _gpt2_meta("qwen2-like", "qwen2")
    with pytest.raises(TracerError, match=r"tokenizer.ggml.pre 'qwen-2' is not a pre-tokenizer tracer knows \(did you mean 'qwen2' or 'qwen35'\?\); known: ") as e:
        tokenizer_from_gguf({**meta, "tokenizer.ggml.pre": "qwen-2"})
    assert all(name in str(e.value) for name in PRE_TOKENIZERS) and "\n" not in str(e.value)
    with pytest.raises(TracerError, match="tokenizer.ggml.model 't5'"):
        tokenizer_from_gguf({**meta, "tokenizer.ggml.model": "t5"})
    with pytest.raises(TracerError, match="a gemma3n vocabulary"):
        tokenizer_from_gguf({**meta, "tokenizer.ggml.model": "llama", "general.architecture": "gemma3n"})
    with pytest.raises(TracerError, match="without tokenizer.ggml.merges"):
        tokenizer_from_gguf({k: v for k, v in meta.items() if k != "tokenizer.ggml.merges"})
    with pytest.raises(TracerError, match="eos_token_id 99999 is not a token id"):
        tokenizer_from_gguf({**meta, "tokenizer.ggml.eos_token_id": 99999})
    with pytest.raises(TracerError, match="not a list of strings"):
        tokenizer_from_gguf({**meta, "tokenizer.ggml.tokens": None})
    hostile = [{"tokenizer.ggml.merges": [1, 2]}, {"tokenizer.ggml.merges": ["a b c"]}, {"tokenizer.ggml.merges": 5},
               {"tokenizer.ggml.token_type": [1, 2]}, {"tokenizer.ggml.bos_token_id": True}, {"tokenizer.ggml.bos_token_id": -1},
               {"tokenizer.ggml.tokens": ["a", 3]}, {"tokenizer.ggml.merges": ["Ġ zzz"]}, {"tokenizer.ggml.model": None},
               {"tokenizer.ggml.pre": ["qwen2"]}, {"tokenizer.ggml.token_type": None, "tokenizer.ggml.tokens": [""]}]
    for change in hostile:
        with pytest.raises(TracerError) as e:
            tokenizer_from_gguf({**meta, **change})
        assert "\n" not in str(e.value) and str(e.value).startswith("tokenizer "), change
    with pytest.raises(TracerError, match="must be a table"):
        tokenizer_from_gguf([1, 2])


@pytest.fixture(scope="module")
def smollm2_tok(smollm2_gguf):
    meta = _meta(str(smollm2_gguf))
    return meta, tokenizer_from_gguf(meta, str(smollm2_gguf))


@pytest.mark.slow
def test_smollm2_equals_tokenizers_and_transformers(smollm2_tok, smollm2_gguf):
    SMOLLM2 = str(smollm2_gguf)
    meta, tok = smollm2_tok
    assert type(tok).__name__ == "HFTokenizer" and not tok.add_bos and tok.end_id == 2
    # six control characters, bytes no UTF-8 has, and 0xF1, 0xF2: the lead bytes of planes 4–11 (U+40000–U+BFFFF)
    assert tok.missing_bytes == frozenset([0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, *range(0xF5, 0x100)])
    assert tok.dropped("a\x04b\x1d \U00050000") == [0x04, 0x1D, 0xF1] and tok.eos_ids[0] == 2
    ref = _with_tokenizers(meta)
    assert all(tok.encode(s) == ref.encode(s).ids for s in TEXTS)
    own = tokenizer_from_gguf(meta, SMOLLM2, follow="llama.cpp")  # SmolLM2's own tokenizer.json: digits apart
    assert own.encode("٣ ½") != tok.encode("٣ ½") and own.encode("hello world") == tok.encode("hello world")
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    _same(tok, _transformers(Path(SMOLLM2)), TEXTS + [readme[:20000], "x\U00050000y \U00090001\x04z"])  # (skips without it)


def test_stop_ids_and_specs_across_tokenizers():
    from tracer.tokenizers.tokens import get_tokenizer

    gpt2 = get_tokenizer("gpt2")
    assert gpt2.eos_ids == (50256,) and gpt2.special_tokens == {"<|endoftext|>": 50256} and gpt2.dropped("x") == []
    words = get_tokenizer({"kind": "words", "vocab": ["a", "<end>"]})
    assert words.eos_ids == (1,) and words.special_tokens == {}
    tok = tokenizer_from_gguf(_gpt2_meta("qwen2-like", "qwen2"), "q.gguf")
    assert tok.end_id == tok.special_tokens["<|im_end|>"]  # the file's eos id, then the document end
    assert tok.eos_ids == (tok.end_id, tok.special_tokens["<|endoftext|>"])
    with pytest.raises(TracerError, match="q.gguf: no such GGUF file"):  # a spec is rebuilt from its file's header
        get_tokenizer(tok.spec())


_BUILT = {}


@settings(max_examples=120, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("aé \t\n12<s></s>▁😀日\x04")) | st.characters(blacklist_categories=UNCOMPARED),
               max_size=30), st.sampled_from(["llama", "qwen2"]))
def test_random_text_equals_tokenizers_on_the_built_tokenizer_json(text, which):
    if which not in _BUILT:
        meta = _meta(SP_GGUF) if which == "llama" else _gpt2_meta("qwen2-like", "qwen2")
        _BUILT[which] = tokenizer_from_gguf(meta), _with_tokenizers(meta)
    tok, ref = _BUILT[which]
    assert tok.encode(text) == ref.encode(text).ids
