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


# --------------------------------------------------------------------------- bounds (issue 39, finding 7)

HOSTILE = {  # a template that hung, ran out of memory or ended in "internal error" → the words of its one line
    "range of a million": ("{% for i in range(10**6) %}{% endfor %}", "a range of 1,000,000"),
    "nested loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "ran for more than"),
    "lipsum": ("{{ lipsum(10**8) }}", "lorem ipsum"),
    "repeat": ("{{ 'x' * 10**10 }}", "10,000,000,000"),
    "list repeat": ("{{ ([1, 2] * 10**9) | length }}", "2,000,000,000"),
    "center filter": ("{{ 'x' | center(2e9) }}", "2,000,000,000"),
    "center method": ("{{ 'x'.center(2000000000) }}", "2,000,000,000"),
    "tojson indent": ("{{ messages | tojson(indent=10**9) }}", "tojson with indent 1,000,000,000"),
    "format width": ("{{ '{:>2000000000}'.format('x') }}", "2,000,000,000"),
    "format nested width": ("{{ '{:>{w}}'.format('x', w=3 * 10**9) }}", "3,000,000,000"),
    "format_map": ("{{ '{x:>2000000000}'.format_map({'x': 1}) }}", "2,000,000,000"),
    "percent": ("{{ '%2000000000s' % 'x' }}", "2,000,000,000"),
    "percent star": ("{{ '%*s' % (10**9, 'x') }}", "'*' width"),
    "format filter": ("{{ '%2000000000s' | format('x') }}", "2,000,000,000"),
    "recursive macro": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "more than 64 deep (the macro f)"),
    "recursive loop": ("{% for m in [messages] recursive %}{{ loop([m]) }}{% endfor %}", "deeper than Python's limit"),
    "doubling": ("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "1,048,576"),
    "doubling list": ("{% set ns = namespace(s=[1]) %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "1,048,576"),
    "shared rows shown": ("{% set a = ['x' * 1000] * 1000 %}{{ [a] * 1000 }}", "shown as text"),
    "join": ("{{ ('y' * 100000).join(['x'] * 100000) }}", "str.join"),
    "replace": ("{{ ('x' * 100000).replace('', 'y' * 1000) }}", "str.replace"),
    "indent": ("{{ ('a\n' * 1000) | indent(10**7) }}", "the filter indent"),
    "batch": ("{% for b in [1] | batch(10**9, 'x') %}{{ b }}{% endfor %}", "the filter batch"),
    "slice": ("{% for b in [1] | slice(10**9) %}{% endfor %}", "the filter slice"),
    "power": ("{{ 2 ** 10000000 }}", "a power of about 20,000,000 bits"),
    "strftime width": ("{{ strftime_now('%100000Y') }}", "strftime_now"),
    "output": ("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", "the rendered text"),
    "made in all": ("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
                    "in all"),
    "float overflow": ("{{ 10.0 ** 400 }}", "OverflowError"),
    "deep parentheses": ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "chat template"),
}


@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_a_template_is_bounded_in_time_memory_and_depth(case):
    import time
    import tracemalloc

    template, says = HOSTILE[case]
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(TracerError, match="^chat template: ") as e:
            render_chat(template, CHATS[0])
        took, peak = time.monotonic() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert took < 8, f"{took:.1f} s"  # 2 s of template time, tracemalloc's slowness on top
    assert peak < 400 * 2**20, f"{peak / 2**20:.0f} MB"  # the bound is 1,000,000 characters a value, 32,000,000 in all


def test_a_template_of_megabytes_is_refused_before_it_is_compiled():
    with pytest.raises(TracerError, match=r"^chat template: 2,000,016 characters; tracer renders templates of at most 1,000,000$"):
        render_chat("{{ 'x' }}" + " " * 2_000_000 + "{{ 1 }}", CHATS[0])


def test_the_bounds_grow_with_the_messages_and_real_templates_fit():
    long = [{"role": "user", "content": "word " * 400_000}]  # 2,000,000 characters: the text bound follows
    text = render_chat("{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}\n{% endfor %}", long)
    assert len(text) == len("<|user|>") + 2_000_000 - 1 + 1
    assert render_chat("{{ range(100000) | list | length }}{{ ('x' * 1000000) | length }}", CHATS[0]) == "1000001000000"


def test_the_template_source_is_named(tmp_path):
    from tracer.tokenizers.chat import ChatTemplate

    (tmp_path / "chat_template.jinja").write_text("{% for i in range(10**7) %}{% endfor %}")
    template = load_chat_template(tmp_path)
    with pytest.raises(TracerError, match=r"^chat template \(.*chat_template\.jinja\): a range of 10,000,000"):
        render_chat(template, CHATS[0])
    (tmp_path / "chat_template.jinja").unlink()
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ 'x' * 10**10 }}"}))
    with pytest.raises(TracerError, match=r"^chat template \(.*tokenizer_config\.json's chat_template\): "):
        render_chat(load_chat_template(tmp_path), CHATS[0])
    with pytest.raises(TracerError, match=r"^chat template \(model.gguf's tokenizer.chat_template\): "):
        render_chat(ChatTemplate("{{ 'x' * 10**10 }}", "model.gguf's tokenizer.chat_template"), CHATS[0])


def test_a_running_template_stops_when_told(tmp_path):
    """A server stopping ends a template's render at once, whatever it is doing (`bounds.stop_all`)."""
    import threading
    import time

    from tracer.tokenizers import bounds

    box = {}

    def render():
        try:
            render_chat("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", CHATS[0],
                        seconds=60)
        except TracerError as e:
            box["error"] = str(e)

    t = threading.Thread(target=render)
    t.start()
    until = time.monotonic() + 10
    while not bounds._RUNNING and time.monotonic() < until:
        time.sleep(0.01)
    time.sleep(0.2)
    started = time.monotonic()
    assert bounds.stop_all() == 1
    t.join(timeout=5)
    assert not t.is_alive() and time.monotonic() - started < 2
    assert box["error"] == "chat template: stopped: the program is stopping"
    assert not bounds._RUNNING


@pytest.mark.slow
@pytest.mark.parametrize("template", ["{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                                      "{{ 'x' * 10**10 }}", "{{ lipsum(10**8) }}", "{{ messages | tojson(indent=10**9) }}",
                                      "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{{ '%2000000000s' | format('x') }}"])
def test_a_hostile_template_is_one_line_and_exit_2_on_the_cli(tmp_path, limited, template):
    folder = tmp_path / "m"
    shutil.copytree(Path(__file__).parent / "data" / "qwen2-tiny", folder, ignore=shutil.ignore_patterns("reference.npz"))
    (folder / "chat_template.jinja").write_text(template)
    r = limited("trace", "hi", "--model", folder, "--chat", "-n", "1", memory=1 << 30, seconds=30)
    assert r.signal is None and r.returncode == 2, (r.returncode, r.signal, r.stderr[-1000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracer: chat template (") and "chat_template.jinja" in lines[0], lines
