"""Chat templates (tracer.tokenizers.chat): the text and ids transformers' `apply_chat_template` gives.

tests/data/tokenizers/chat/tokenizer_config.json holds a ChatML template (Qwen2.5's shape: a default system
prompt, tools through `tojson`, `namespace`, `raise_exception`, `strftime_now`, reasoning) as a list of
named templates, used with the qwen2-like tokenizer.json. The GGUF cases use the committed
sentencepiece/sp-llama.gguf and SmolLM2-135M-Instruct (the `smollm2_gguf` fixture).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tracer.tokenizers.chat import chat_ids, load_chat_template, pick_template, render_chat
from tracer.errors import TracerError
from tracer.tokenizers.hf_tokenizer import HFTokenizer

DATA = Path(__file__).parent / "data" / "tokenizers"
CHATS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "Hi! 😀"}, {"role": "user", "content": "again\n\n  "}],
    [{"role": "user", "content": "typed <|im_start|>system\nmarkers<|im_end|> and <tool_call>{}</tool_call>"}],
    [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "reasoning_content": "think"}, {"role": "user", "content": "z"}],
    [{"role": "user", "content": "tool?"}, {"role": "tool", "content": "{\"a\": \"<b>&\"}"}, {"role": "user", "content": "ok", "name": None}],
    [{"role": "user", "content": "日本語 café"}],
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & 'then'",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The qwen2-like tokenizer.json with the chat fixture's tokenizer_config.json."""
    d = tmp_path_factory.mktemp("chat")
    shutil.copy(DATA / "qwen2-like.json", d / "tokenizer.json")
    shutil.copy(DATA / "chat" / "tokenizer_config.json", d / "tokenizer_config.json")
    return d


def _transformers(folder: Path, gguf: str | None = None):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(folder), **({"gguf_file": gguf} if gguf else {}))


def _compare(tok, ref, template, bos, eos, chats=CHATS, **extra):
    for chat in chats:
        for prompt in (True, False):
            text = render_chat(template, chat, bos, eos, add_generation_prompt=prompt, **extra)
            assert text == ref.apply_chat_template(chat, tokenize=False, add_generation_prompt=prompt, **extra), chat
            ids = ref.apply_chat_template(chat, tokenize=True, add_generation_prompt=prompt, return_dict=False, **extra)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            assert chat_ids(tok, text) == list(ids), chat


def test_a_tokenizer_config_template_equals_transformers(folder):
    tok = HFTokenizer(folder)
    template = load_chat_template(folder)
    assert template.startswith("{%- if tools %}")  # the list's "default"
    assert tok.id_to_token[tok.end_id] == "<|im_end|>" and tok.end_id in tok.eos_ids
    ref = _transformers(folder)
    _compare(tok, ref, template, None, "<|im_end|>", pad_token="<|endoftext|>")
    _compare(tok, ref, template, None, "<|im_end|>", chats=CHATS[:2], tools=TOOLS, pad_token="<|endoftext|>")
    text = render_chat(template, CHATS[3], eos_token="<|im_end|>")
    assert chat_ids(tok, text).count(tok.special_tokens["<|im_start|>"]) == 4  # typed markers are control tokens too


def test_chat_template_jinja_file_comes_first(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "from config"}))
    assert load_chat_template(tmp_path) == "from config"
    (tmp_path / "chat_template.jinja").write_text("from jinja {{ messages[0].content }}")
    assert load_chat_template(tmp_path) == "from jinja {{ messages[0].content }}"
    assert load_chat_template(tmp_path / "nothing") is None
    assert pick_template([{"name": "default", "template": "a"}, {"name": "tool_use", "template": "b"}], "x") == "a"
    with pytest.raises(TracerError, match="none named 'default'"):
        pick_template([{"name": "tool_use", "template": "b"}], "x")
    with pytest.raises(TracerError, match="must be text or a list"):
        pick_template(3, "x")


def test_the_environment_is_transformers():
    assert render_chat("{{ x | tojson }}", [], x={"a": "<b>&é"}) == '{"a": "<b>&é"}'  # json.dumps, no HTML escapes
    assert render_chat("{{ strftime_now('%Y') | length }}", []) == "4"
    assert render_chat("  {% if true %}\n  yes\n{% endif %}\n", []) == "  yes\n"  # trim_blocks, lstrip_blocks
    assert render_chat("{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.role }}{% endfor %}",
                       CHATS[2]) == "user"  # loopcontrols
    assert render_chat("{{ messages[0] | length }}", [{"role": "user", "content": "x", "name": None}]) == "2"
    assert render_chat("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}", [], "<s>", "</s>") == "<s>|</s>|True"


BAD = {
    "raise_exception": ("{{ raise_exception('Conversation roles must alternate user/assistant') }}",
                        "chat template: Conversation roles must alternate user/assistant"),
    "syntax": ("{% for m in messages %}{{ m }", "chat template: line 1: "),
    "sandbox": ("{{ namespace(_secret=1) }}", "chat template: a namespace attribute may not start with '_'"),
    "unsafe attribute": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "chat template: "),
    "bad key": ("{{ messages[5]['content'] + 1 }}", "chat template: "),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_a_failing_template_is_one_line(case):
    template, message = BAD[case]
    with pytest.raises(TracerError, match="^" + message.replace("(", "\\(")) as e:
        render_chat(template, CHATS[0])
    assert "\n" not in str(e.value)


def test_a_gguf_llama_template_equals_transformers():
    gguf = pytest.importorskip("gguf")
    from tracer.tokenizers.gguf_tokenizer import tokenizer_from_gguf

    path = DATA / "sentencepiece" / "sp-llama.gguf"
    reader = gguf.GGUFReader(str(path))
    meta = {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    tok = tokenizer_from_gguf(meta, str(path))
    chats = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                                  {"role": "user", "content": "c </s> <s>"}]]
    _compare(tok, _transformers(path.parent, path.name), tok.chat_template, tok.bos_token, tok.eos_token, chats=chats)


@pytest.mark.slow
def test_smollm2_template_equals_transformers(smollm2_gguf):
    SMOLLM2 = str(smollm2_gguf)
    gguf = pytest.importorskip("gguf")
    from tracer.tokenizers.gguf_tokenizer import tokenizer_from_gguf

    reader = gguf.GGUFReader(SMOLLM2)
    meta = {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    tok = tokenizer_from_gguf(meta, SMOLLM2)
    assert tok.bos_token == "<|im_start|>" and tok.eos_token == "<|im_end|>" and tok.eos_ids[0] == 2
    path = Path(SMOLLM2)
    _compare(tok, _transformers(path.parent, path.name), tok.chat_template, tok.bos_token, tok.eos_token,
             unk_token="<|endoftext|>", pad_token="<|im_end|>")
