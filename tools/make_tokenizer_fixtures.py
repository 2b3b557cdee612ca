"""Build the tokenizer.json fixtures of `tests/data/tokenizers/` with the `tokenizers` library.

    .venv/bin/pip install tokenizers && .venv/bin/python tools/make_tokenizer_fixtures.py

Each file has the structure of one family's tokenizer.json, with a small vocabulary trained by
`tokenizers` itself on a fixed text made here (seeded, so the files come out byte for byte the same):

- llama3-like.json (1,024 ids): Llama 3 / 3.2. Vocabulary as tiktoken ranks (the 256 bytes in byte
  order, then the trained merges' tokens in order), and the merges Hugging Face writes when it converts
  tiktoken ranks (every split of a token into two tokens, ordered by the token's rank, then the parts'
  ranks); `ignore_merges`; Split on Llama 3's regex (digits in groups of 3) + ByteLevel without regex;
  no normalizer; 256 special tokens after the vocabulary (<|begin_of_text|> … <|eot_id|>, reserved
  ones); post-processor ByteLevel + TemplateProcessing that puts <|begin_of_text|> first.
- qwen2-like.json (1,024 ids): Qwen2 / Qwen2.5. NFC; Split on Qwen2's regex (single digits) + ByteLevel
  without regex; one merge per token as `tokenizers` trains them; `ignore_merges` false; special tokens
  <|endoftext|>, <|im_start|>, <|im_end|> and non-special <tool_call>, </tool_call> (Qwen2.5 style);
  post-processor ByteLevel (no BOS).
- gpt2-like.json (512 ids): GPT-2 / plain ByteLevel with its regex, no prefix space; <|endoftext|> is the
  last id, both in the vocabulary and an added special token; merges written as "a b" strings.
- mistral-like.json (768 ids): the added-token cases. <unk> <s> </s> at ids 0–2; NFC; Digits (one
  digit a piece) + ByteLevel with add_prefix_space and its regex; [INST] and [/INST]; <mask> with
  lstrip; [SEP] with rstrip; a non-special normalized added token "Café" (so "Cafe" + U+0301 in the
  text matches it after NFC); TemplateProcessing "<s> $A".
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizers"
LLAMA3_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
QWEN2_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
                  "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>",
                  "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
LLAMA3_SPECIAL += [f"<|reserved_special_token_{i}|>" for i in range(3, 3 + 256 - len(LLAMA3_SPECIAL))]

WORDS = """the of and to in is that it was for on are as with his they at be this from have or by one had not
but what all were when we there can an your which their said if do will each about how up out them then she
many some so these would other into has more her two like him see time could no make than first been its who
now people my made over did down only way find use may water long little very after words called just where
most know get through back much before go good new write our used me man too any day same right look think
also around another came come work three word must because does part even place well such here take why
things help put years different away again off went old number great tell men say small every found still
between name should home big give air line set own under read last never us left end along while might next
sound below saw something thought both few those always looked show large often together asked house don't
world going want school important until form food keep children feet land side without boy once animals life
enough took sometimes four head above kind began almost live page got earth need far hand high year mother
light parts country father let night following picture being study second eyes soon times story boys since
white days ever paper hard near sentence better best across during today others however sure means knew it's
try told young miles sun ways thing whole hear example heard several change answer room sea against top turned
learn point city play toward five using himself usually transformer attention token tokens layer layers
embedding softmax logits residual normalization query key value head heads matrix vector decoder model
weights bias gradient rotary position grouped kvcache sliding window vocabulary merge merges byte bytes
café naïve résumé über straße façade déjà coöperate niño señor mañana garçon crème brûlée
Привет мир как дела ελληνικά γλώσσα 日本語 の テキスト 中文 文本 한국어 텍스트 العربية עברית हिन्दी""".split()
CODE = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }\n",
        "if __name__ == \"__main__\":\n\tmain()\n", "x = {\"key\": [1, 2, 3], 'other': None}\n",
        "    # indented comment\n", "print(f\"{value:.3f}\")\n", "SELECT * FROM t WHERE id = 42;\n",
        "<div class=\"x\">text</div>\n", "a += b; c -= d; e *= f; g /= h;\n", "return [y for y in xs if y]\n"]
EXTRAS = ["I'm", "you're", "we've", "they'll", "he'd", "it's", "DON'T", "emoji 😀 🎉 👍🏽 👩‍💻 🇫🇷",
          "numbers 3.14159 2024 1000000 12,345 0x1F", "tabs\tand\nnewlines\r\n", "  leading and trailing  ",
          "ALL CAPS TEXT", "mixedCaseWords andSnake_case"]


def corpus() -> list[str]:
    rng = random.Random(0)
    lines = []
    for _ in range(2500):
        n = rng.randint(3, 14)
        words = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words.insert(rng.randrange(n), str(rng.randint(0, 10 ** rng.randint(1, 7))))
        line = " ".join(words)
        line = line[0].upper() + line[1:] + rng.choice([".", "!", "?", ",", ";", ":", " ..."])
        lines.append(line)
        if rng.random() < 0.15:
            lines.append(rng.choice(CODE))
        if rng.random() < 0.1:
            lines.append(rng.choice(EXTRAS))
    return lines


def trained(pre_tokenizer, vocab_size: int, normalizer=None, special=()) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    if tok.get_vocab_size() != vocab_size:
        sys.exit(f"trained {tok.get_vocab_size()} tokens, wanted {vocab_size}: make the corpus larger")
    tok.decoder = decoders.ByteLevel()
    return tok


def llama3_like() -> Tokenizer:
    split = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    base = json.loads(trained(split, 768).to_str())["model"]
    alias = pre_tokenizers.ByteLevel.alphabet()  # the 256 aliases, in no particular order
    back = {a: b for a, b in zip(sorted(alias, key=_alias_byte), range(256))}
    ranks = {bytes([b]): b for b in range(256)}  # tiktoken's ranks: the bytes, then each merge's token
    for m in base["merges"]:
        a, b = m.split(" ") if isinstance(m, str) else m
        ranks.setdefault(bytes(back[c] for c in a + b), len(ranks))
    text = {t: "".join(_alias(b) for b in t) for t in ranks}
    merges = []  # transformers' TikTokenConverter: every split of every token, by rank, then parts' ranks
    for t, rank in ranks.items():
        local = [(t[:k], t[k:]) for k in range(1, len(t)) if t[:k] in ranks and t[k:] in ranks]
        merges += sorted(local, key=lambda p: (ranks[p[0]], ranks[p[1]]))
    merges.sort(key=lambda p: ranks[p[0] + p[1]])
    tok = Tokenizer(models.BPE(vocab={text[t]: r for t, r in ranks.items()},
                               merges=[(text[a], text[b]) for a, b in merges], ignore_merges=True))
    tok.pre_tokenizer = split
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in LLAMA3_SPECIAL])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def _alias_byte(a: str) -> int:
    return next(b for b in range(256) if _alias(b) == a)


def _alias(b: int) -> str:
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    if b in keep:
        return chr(b)
    return chr(256 + [x for x in range(256) if x not in keep].index(b))


def qwen2_like() -> Tokenizer:
    split = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = trained(split, 1024 - 5, normalizers.NFC())
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in ("<tool_call>", "</tool_call>")])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def gpt2_like() -> str:
    tok = trained(pre_tokenizers.ByteLevel(add_prefix_space=False), 511)
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    data = json.loads(tok.to_str())
    data["model"]["vocab"]["<|endoftext|>"] = 511  # as in GPT-2's file: in the vocabulary too
    data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]  # the older "a b" form
    return json.dumps(data, ensure_ascii=False, indent=2)


def mistral_like() -> Tokenizer:
    pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                   pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    tok = trained(pre, 768 - 5, normalizers.NFC(), special=("<unk>", "<s>", "</s>"))
    tok.add_special_tokens([AddedToken("[INST]", special=True, normalized=False),
                            AddedToken("[/INST]", special=True, normalized=False),
                            AddedToken("<mask>", special=True, normalized=False, lstrip=True),
                            AddedToken("[SEP]", special=True, normalized=False, rstrip=True)])
    tok.add_tokens([AddedToken("Café", special=False, normalized=True)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B:1", special_tokens=[("<s>", 1)])
    return tok


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    made = {"llama3-like.json": llama3_like().to_str(pretty=True), "qwen2-like.json": qwen2_like().to_str(pretty=True),
            "gpt2-like.json": gpt2_like(), "mistral-like.json": mistral_like().to_str(pretty=True)}
    for name, text in made.items():
        raw = (text + "\n").encode("utf-8")
        (OUT / name).write_bytes(raw)
        tok = Tokenizer.from_file(str(OUT / name))
        print(f"{name}: {tok.get_vocab_size(with_added_tokens=True)} ids, {len(raw):,} bytes, "
              f"sha256 {hashlib.sha256(raw).hexdigest()[:16]}")


if __name__ == "__main__":
    main()
