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
import re
import sys
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from ..errors import TracerError
from ..formats.reading import inside, parse_json, read_small
from .bounds import DEPTH_MAX, SECONDS, Budget, TemplateBound, budget, run_bounded

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
TEMPLATE_MOST = 1_000_000  # characters of a template (Llama 3.1's tool-calling one has about 5,000)


class ChatTemplate(str):
    """A chat template's text that knows where it came from (`source`: a file, a GGUF key), for messages."""

    def __new__(cls, text: str, source: str):
        made = super().__new__(cls, text)
        made.source = source
        return made


# The filters whose arguments say how large their result is: (parameter names) → the result's size, about.
_SIZES = {
    "center": lambda a: max(len(str(a.get("value", ""))), _int(a.get("width", 80))),
    "indent": lambda a: len(str(a.get("s", ""))) + (str(a.get("s", "")).count("\n") + 1) *
    (len(a["width"]) if isinstance(a.get("width"), str) else _int(a.get("width", 4))),
    "wordwrap": lambda a: len(str(a.get("s", ""))) * (1 + len(str(a.get("wrapstring") or "\n"))),
    "batch": lambda a: _int(a.get("linecount", 1)),
    "slice": lambda a: _int(a.get("slices", 1)),
    "replace": lambda a: _replaced(str(a.get("s", "")), str(a.get("old", "")), str(a.get("new", ""))),
    "join": lambda a: len(str(a.get("d", ""))) * len(a["value"]) if isinstance(a.get("value"), (list, tuple, str)) else 0,
    "truncate": lambda a: len(str(a.get("end", "..."))),
}


PASSED = ("environment", "env", "context", "eval_ctx")  # what jinja passes a filter first (async variants hide it)


def _int(v) -> int:
    return v if isinstance(v, int) else int(v) if isinstance(v, float) and v == v and abs(v) < 1e18 else 0


def _replaced(s: str, old: str, new: str) -> int:
    return len(s) + (len(s) + 1 if not old else s.count(old)) * len(new)


def _bounded_filter(name: str, fn):
    """A jinja filter that weighs its input as text and sizes its result before it is made (`_SIZES`)."""
    import functools
    import inspect

    size = _SIZES.get(name)
    try:
        sig = inspect.signature(fn) if size is not None else None
    except (TypeError, ValueError):
        sig = None
    skip = 1 if getattr(fn, "jinja_pass_arg", None) is not None else 0  # the context or environment first
    given = skip if sig is not None and next(iter(sig.parameters), "") not in PASSED else 0  # args[given:] bind to sig

    @functools.wraps(fn)
    def bounded(*args, **kwargs):
        b = budget()
        if len(args) > skip and not isinstance(args[skip], str):
            b.shown(args[skip], f"the value given to the filter {name}")
        if name == "format" and len(args) > skip:
            b.percent(str(args[skip]), args[skip + 1:] or kwargs)
        if sig is not None:
            try:
                b.size(size(sig.bind(*args[given:], **kwargs).arguments), f"the filter {name}'s result")
            except TypeError:
                pass  # the filter itself says what is wrong with its arguments
        return b.made_value(fn(*args, **kwargs))

    return bounded


def _bounded_join(pieces) -> str:
    """`x ~ y` and the text of a block or macro: each piece weighed as text, the whole within the bound."""
    b, out, n = budget(), [], 0
    for p in pieces:
        if not isinstance(p, str):
            b.shown(p, "a value joined as text")
            p = str(p)
        n += len(p)
        b.size(n, "a joined text")
        out.append(p)
    return b.made_value("".join(out))


def _before_call(b, obj, args, kwargs):
    """Size what a call of a str method would make, before it makes it; returns the arguments to call with."""
    host, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "")
    if not isinstance(host, str):
        return args
    if name in ("center", "ljust", "rjust", "zfill") and args:
        b.size(max(len(host), _int(args[0])), f"str.{name}({args[0]!r:.20})")
    elif name == "expandtabs":
        b.size(len(host) + host.count("\t") * _int(args[0] if args else kwargs.get("tabsize", 8)), "str.expandtabs")
    elif name == "replace" and len(args) >= 2:
        b.size(_replaced(host, str(args[0]), str(args[1])), "str.replace")
    elif name == "join" and args:
        items = args[0] if isinstance(args[0], (list, tuple)) else list(args[0])
        b.size(len(host) * len(items) + b.shown(items, "the values joined"), "str.join")
        args = (items, *args[1:])
    elif name == "translate" and args and isinstance(args[0], dict):
        widest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        b.size(len(host) * widest, "str.translate")
    return args


@lru_cache(maxsize=16)
def _compiled(template: str):
    import jinja2
    import jinja2.ext
    from jinja2.runtime import Macro, Markup  # markupsafe's, as jinja hands it on
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEscapeFormatter, SandboxedFormatter
    from jinja2.utils import generate_lorem_ipsum

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        b = budget()
        wide = len(indent) if isinstance(indent, str) else _int(indent) if indent is not None else 0
        b.size(b.shown(x, "the value given to tojson") * (1 + wide), f"tojson with indent {wide:,}")
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        if not isinstance(format, str) or len(format) > 1_000 or re.search(r"%[-_0^#]*\d{4,}", format):
            raise TemplateBound("strftime_now: a format longer than 1,000 characters or with a width over 999")
        return datetime.now().strftime(format)

    def bounded_range(*args):
        made = range(*args)
        budget().count(len(made), "a range")
        return made

    def lipsum(n=5, html=True, min=20, max=100):
        budget().count(_int(n) * _int(max), "lorem ipsum's words")
        return generate_lorem_ipsum(n, html, min, max)

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

    class BoundedFormatter(SandboxedFormatter):
        def format_field(self, value, format_spec):
            budget().spec(format_spec, value)
            return budget().made_value(super().format_field(value, format_spec))

    class BoundedEscapeFormatter(SandboxedEscapeFormatter, BoundedFormatter):
        pass

    class BoundedMacro(Macro):  # macros calling macros: at most DEPTH_MAX deep
        def _invoke(self, arguments, autoescape):
            b = budget()
            b.depth += 1
            try:
                if b.depth > DEPTH_MAX:
                    raise TemplateBound(f"macros call macros more than {DEPTH_MAX} deep (the macro {self.name})")
                return super()._invoke(arguments, autoescape)
            finally:
                b.depth -= 1

    class Environment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**", "%", "+"])

        def call_binop(self, context, operator, left, right):
            b = budget()
            if operator == "*":
                b.repeat(left, right)
            elif operator == "**":
                b.power(left, right)
            elif operator == "%" and isinstance(left, str):
                b.percent(left, right)
            elif operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                b.size(len(left) + len(right), "a sum")
            return b.made_value(super().call_binop(context, operator, left, right))

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805  (jinja's own signature)
            b = budget()
            args = _before_call(b, __obj, args, kwargs)
            return b.made_value(super().call(__context, __obj, *args, **kwargs))

        def wrap_str_format(self, value):  # str.format / format_map, as jinja's sandbox does, with the spec sized
            wrapped = super().wrap_str_format(value)
            if wrapped is None:
                return None
            host, is_map = value.__self__, value.__name__ == "format_map"
            formatter = (BoundedEscapeFormatter(self, escape=host.escape) if isinstance(host, Markup)
                         else BoundedFormatter(self))

            def bounded(*args, **kwargs):
                if is_map:
                    if kwargs or len(args) != 1:
                        raise TypeError("format_map() takes exactly one argument")
                    args, kwargs = (), args[0]
                return type(host)(formatter.vformat(host, args, kwargs))

            return bounded

    env = Environment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols],
                      finalize=lambda v: v if isinstance(v, str) else (budget().shown(v), v)[1])
    env.filters = {name: _bounded_filter(name, fn) for name, fn in env.filters.items()}
    env.filters["tojson"] = tojson
    env.concat = _bounded_join
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=TemplateDict(),
                       namespace=TemplateNamespace, range=bounded_range, lipsum=lipsum)
    compiled = env.from_string(template)
    code = compiled.root_render_func.__globals__  # the compiled module's names: its macros, its `~`
    code.update(Macro=BoundedMacro, str_join=_bounded_join, markup_join=lambda seq: Markup(_bounded_join(seq)))
    return compiled


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
                add_generation_prompt: bool = True, source: str | None = None, seconds: float = SECONDS,
                should_stop=None, **special_tokens) -> str:
    """The text transformers' `apply_chat_template(messages, tokenize=False, add_generation_prompt=…)` gives.
    special_tokens: other names the template may read (unk_token, pad_token, tools, documents, …).
    Bounded (`tracer.tokenizers.bounds`): at most `seconds` (and stopped when `should_stop()` turns true),
    values and text within `Budget`, macros DEPTH_MAX deep; a bound hit is one line naming `source` (by
    default the template's own, a `ChatTemplate`'s)."""
    if not isinstance(template, str) or not template:
        raise TracerError("chat template: empty or not text")
    import jinja2

    where = source or getattr(template, "source", None)
    where = f"chat template ({where})" if where else "chat template"
    if len(template) > TEMPLATE_MOST:  # compiling costs far more than its size: real templates are a few KB
        raise TracerError(f"{where}: {len(template):,} characters; tracer renders templates of at most {TEMPLATE_MOST:,}")
    names = {"bos_token": bos_token, "eos_token": eos_token, "tools": None, "documents": None, **special_tokens}
    names = {k: _plain(v) for k, v in names.items() if not (v is None and k.endswith("_token"))}
    messages = _messages(messages)
    room = Budget.for_input(messages, names)  # longer messages may make longer text

    def render() -> str:
        pieces, n = [], 0
        for piece in _compiled(str(template)).generate(messages=messages, add_generation_prompt=bool(add_generation_prompt),
                                                       **names):
            n += len(piece)
            room.size(n, "the rendered text")
            pieces.append(piece)
        return "".join(pieces)

    try:
        return run_bounded(render, room, seconds, should_stop)
    except jinja2.TemplateSyntaxError as e:
        raise TracerError(f"{where}: line {e.lineno}: {e.message}") from None
    except TemplateBound as e:
        raise TracerError(f"{where}: {e}") from None
    except RecursionError:
        raise TracerError(f"{where}: calls itself deeper than Python's limit ({sys.getrecursionlimit():,} calls)") from None
    except MemoryError:
        raise TracerError(f"{where}: ran out of memory") from None
    except jinja2.TemplateError as e:  # raise_exception in the template, a sandbox refusal, a bad expression
        message = " ".join(str(e).split()) or type(e).__name__
        raise TracerError(f"{where}: {message}") from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, ArithmeticError) as e:
        raise TracerError(f"{where}: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from None


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
            return ChatTemplate(read_small(jinja, "chat template").decode("utf-8"), str(jinja))
        except UnicodeDecodeError:
            raise TracerError(f"{jinja}: not UTF-8 text") from None
    config = inside(folder, "tokenizer_config.json", folder)
    if not config.is_file():
        return None
    data = parse_json(read_small(config, "tokenizer config"), f"{config}: not JSON")
    template = pick_template(data.get("chat_template") if isinstance(data, dict) else None, config)
    return ChatTemplate(template, f"{config}'s chat_template") if template is not None else None
