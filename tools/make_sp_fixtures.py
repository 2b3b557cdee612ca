"""Build the SentencePiece-style fixtures of `tests/data/tokenizers/sentencepiece/` with the real libraries.

    .venv/bin/pip install sentencepiece "transformers>=5" protobuf tokenizers gguf && .venv/bin/python tools/make_sp_fixtures.py

A small BPE model is trained by the `sentencepiece` trainer (byte_fallback, 600 pieces, one thread,
so the model comes out byte for byte the same) on a fixed text made here, then written three ways:

- sp-bpe.model: the sentencepiece model itself (for tests that compare with `sentencepiece`).
- sp-llama.json: the tokenizer.json transformers 5 makes of it (`LlamaTokenizer` from tokenizer.model:
  BPE with byte_fallback and fuse_unk, Metaspace pre-tokenizer with prepend_scheme "first", decoder
  Replace + ByteFallback + Fuse + Strip, TemplateProcessing "<s> $A"), as Llama 2 / TinyLlama / Mistral
  7B v0.1 folders converted by transformers 5 have it.
- sp-legacy.json: the same vocabulary in the older shape the Hub's Llama 2 / TinyLlama / Mistral files
  have (normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer), with two extra added tokens
  (`<|user|>` special, `<think>` not).
- sp-llama.gguf: the vocabulary as llama.cpp's converter writes a `llama` tokenizer into a GGUF (tokens,
  scores, token types, bos 1, eos 2, unk 0, add_bos_token, add_space_prefix, a chat template), no tensors.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizers" / "sentencepiece"
WORDS = """the of and to in is that it was for on are as with his they at be this from have or by one had not but
what all were when we there can an your which their said if do will each about how up out them then she many some
so these would other into has more her two like him see time could no make than first been its who now people my
made over did down only way find use may water long little very after words called just where most know get
transformer attention token layer embedding softmax logits residual query key value head matrix vector decoder
café naïve résumé über straße déjà niño señor Привет мир ελληνικά 日本語 の テキスト 中文 한국어""".split()
CODE = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }\n", "\tindented\tline\n",
        "x = {\"key\": [1, 2, 3]}  # comment\n", "    four spaces    and more\n", "numbers 3.14159 2024 1000000\n"]
TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token + '[INST] ' + m['content'] + ' [/INST]' }}"
            "{% else %}{{ ' ' + m['content'] + eos_token }}{% endif %}{% endfor %}")


def corpus() -> list[str]:
    rng = random.Random(0)
    lines = []
    for _ in range(3000):
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        if rng.random() < 0.3:
            line += f" {rng.randint(0, 10 ** rng.randint(1, 6))}"
        lines.append(line[0].upper() + line[1:] + rng.choice([".", "!", "?", ","]))
        if rng.random() < 0.1:
            lines.append(rng.choice(CODE))
    return lines


def train() -> bytes:
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus()), model_writer=model, model_type="bpe",
                                   vocab_size=600, byte_fallback=True, character_coverage=0.9995, num_threads=1,
                                   split_digits=True, allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
                                   normalization_rule_name="identity", minloglevel=2, user_defined_symbols=["<sep>"])
    return model.getvalue()


def converted(model: bytes) -> dict:
    from transformers import LlamaTokenizer

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "tokenizer.model").write_bytes(model)
        tok = LlamaTokenizer.from_pretrained(d)
        data = json.loads(tok.backend_tokenizer.to_str())
    # a bare tokenizer.model says nothing of BOS; Llama 2's folders add <s>, as transformers writes it
    data["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                       {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                       {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    return data


def legacy(data: dict) -> dict:
    data = json.loads(json.dumps(data))
    data["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                              {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    data["pre_tokenizer"] = None
    n = len(data["model"]["vocab"])
    for i, (content, special) in enumerate([("<|user|>", True), ("<think>", False)]):
        data["added_tokens"].append({"id": n + i, "content": content, "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": special})
    return data


def gguf_file(model: bytes, path: Path) -> None:
    import gguf
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model)
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):  # as llama.cpp's convert_hf_to_gguf.py reads a tokenizer.model
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(gguf.TokenType.UNKNOWN if sp.is_unknown(i) else gguf.TokenType.CONTROL if sp.is_control(i)
                     else gguf.TokenType.UNUSED if sp.is_unused(i) else gguf.TokenType.BYTE if sp.is_byte(i)
                     else gguf.TokenType.USER_DEFINED if sp.id_to_piece(i) == "<sep>" else gguf.TokenType.NORMAL)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.add_chat_template(TEMPLATE)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    model = train()
    data = converted(model)
    made = {"sp-bpe.model": model,
            "sp-llama.json": (json.dumps(data, ensure_ascii=False, indent=1) + "\n").encode("utf-8"),
            "sp-legacy.json": (json.dumps(legacy(data), ensure_ascii=False, indent=1) + "\n").encode("utf-8")}
    for name, raw in made.items():
        (OUT / name).write_bytes(raw)
    gguf_file(model, OUT / "sp-llama.gguf")
    for name in (*made, "sp-llama.gguf"):
        raw = (OUT / name).read_bytes()
        print(f"{name}: {len(raw):,} bytes, sha256 {hashlib.sha256(raw).hexdigest()[:16]}")
    if len(model) > 100_000:
        sys.exit("the model is over 100 KB")


if __name__ == "__main__":
    main()
