"""Chat templates, rendered as transformers renders them (transformers/utils/chat_template_utils.py:
`_cached_compile_jinja_template` and `render_jinja_template`; tokenization_utils_base.py `apply_chat_template`).

The environment is the same: jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks and
the loopcontrols extension; `raise_exception(message)`, `strftime_now(format)`, a `tojson` filter that is
`json.dumps` (not jinja's HTML-escaping one), `dict` and a `namespace` that refuses underscore names. The
template sees `messages` (None-valued keys dropped, reasoning copied to `reasoning_content` and `thinking`
as transformers does), `tools`, `documents`, `add_generation_prompt` and the special tokens as strings.
`apply_chat_template` then tokenizes the text without the post-processor's BOS/EOS (the template writes
them itself): `chat_ids` does the same. Templates come from a folder's `chat_template.jinja`, its
tokenizer_config.json `chat_template` (a string, or a list of {name, template} whose "default" is used),
or a GGUF's `tokenizer.chat_template`. A template that fails is one line naming its message.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from ..errors import TracerError
from ..formats.reading import inside, parse_json, read_small

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


@lru_cache(maxsize=16)
def _compiled(template: str):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    class TemplateDict:  # dict(...) without attribute access to the type
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):  # no underscore attributes: no way to CPython internals
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a namespace attribute may not start with '_' ({name!r})")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=TemplateDict(),
                       namespace=TemplateNamespace)
    return env.from_string(template)


def _plain(value):
    """Messages as plain JSON values, as transformers' `_plain_template_data` passes them."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value) if isinstance(value, tuple) else [_plain(v) for v in value]
    for kind in (str, int, float):
        if isinstance(value, kind):
            return kind(value)
    if hasattr(value, "item"):  # a numpy scalar
        return _plain(value.item())
    raise TracerError(f"chat: a message holds a {type(value).__name__}; give text, numbers, lists and tables")


def _messages(messages) -> list[dict]:
    if not isinstance(messages, (list, tuple)) or not all(isinstance(m, dict) for m in messages):
        raise TracerError("chat: messages must be a list of tables such as {'role': 'user', 'content': 'hi'}")
    out = []
    for m in messages:
        m = {k: _plain(v) for k, v in m.items() if v is not None}  # apply_chat_template drops None values
        reasoning = next((m[k] for k in _REASONING_FIELDS if m.get(k) is not None), None)
        out.append({"thinking": reasoning, **m, "reasoning_content": reasoning} if reasoning is not None else m)
    return out


def render_chat(template: str, messages, bos_token: str | None = None, eos_token: str | None = None,
                add_generation_prompt: bool = True, **special_tokens) -> str:
    """The text transformers' `apply_chat_template(messages, tokenize=False, add_generation_prompt=…)` gives.
    special_tokens: other names the template may read (unk_token, pad_token, tools, documents, …)."""
    if not isinstance(template, str) or not template:
        raise TracerError("chat template: empty or not text")
    import jinja2

    try:
        compiled = _compiled(template)
    except jinja2.TemplateSyntaxError as e:
        raise TracerError(f"chat template: line {e.lineno}: {e.message}") from None
    names = {"bos_token": bos_token, "eos_token": eos_token, "tools": None, "documents": None, **special_tokens}
    names = {k: _plain(v) for k, v in names.items() if not (v is None and k.endswith("_token"))}
    try:
        return compiled.render(messages=_messages(messages), add_generation_prompt=bool(add_generation_prompt), **names)
    except jinja2.TemplateError as e:  # raise_exception in the template, a sandbox refusal, a bad expression
        message = " ".join(str(e).split()) or type(e).__name__
        raise TracerError(f"chat template: {message}") from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError) as e:
        raise TracerError(f"chat template: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from None


def chat_ids(tokenizer, text: str) -> list[int]:
    """The ids `apply_chat_template(…, tokenize=True)` gives for rendered text: the tokenizer's ids without
    the BOS/EOS its post-processor adds (special tokens in the text, such as <|im_start|>, are matched whole)."""
    try:
        return tokenizer.encode(text, add_special_tokens=False)
    except TypeError:  # a tokenizer without post-processor tokens (tiktoken, word lists)
        return tokenizer.encode(text)


def pick_template(value, where) -> str | None:
    """A tokenizer_config.json `chat_template`: a string, or a list of {name, template} (its "default")."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                       and isinstance(t.get("template"), str) for t in value):
        named = {t["name"]: t["template"] for t in value}
        if "default" not in named:
            raise TracerError(f"{where}: chat templates {sorted(named)} and none named 'default'")
        return named["default"]
    raise TracerError(f"{where}: chat_template must be text or a list of {{name, template}} tables")


def load_chat_template(folder) -> str | None:
    """A model folder's chat template: chat_template.jinja (as transformers 5 saves it), else
    tokenizer_config.json's chat_template; None when it has neither."""
    folder = Path(folder)
    jinja = inside(folder, "chat_template.jinja", folder)  # a link out of the folder is refused
    if jinja.is_file():
        try:
            return read_small(jinja, "chat template").decode("utf-8")
        except UnicodeDecodeError:
            raise TracerError(f"{jinja}: not UTF-8 text") from None
    config = inside(folder, "tokenizer_config.json", folder)
    if not config.is_file():
        return None
    data = parse_json(read_small(config, "tokenizer config"), f"{config}: not JSON")
    return pick_template(data.get("chat_template") if isinstance(data, dict) else None, config)
