"""The shape of the code, as docs/architecture.md draws it: small modules, no import cycle among
tracer's modules (imports inside functions counted), and imports that go one way only: the CLI
reaches everything, loaders build models, the model runs the decoder, renderers read traces.
Also: only the CLI imports typer, only renderers import rich, only the server (`serve`) imports
starlette and uvicorn, and the core imports numpy and the
standard library (tiktoken only for tokenizing: tokens, bpe, patterns and hf_tokenizer; regex, which
tiktoken installs, only for a tokenizer.json's Split regexes: patterns; jinja2 only for chat templates: chat)."""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tracer"
MAX_LINES = 500

# Each package's (or top-level module's) layer; a module imports modules of its own layer or below, never above.
# The folder listing is the map: tracer/core, tracer/formats, tracer/tokenizers, tracer/run, tracer/readers, …
LAYERS = {
    0: ["errors", "version", "showing", "sections", "scenarios"],  # foundations (showing: who shows a trace, filled from above; sections: the walkthrough's steps; scenarios: the shipped scenario files, data only)
    1: ["core"],  # the decoder's arithmetic: config, block table, equations, parameters, recording, forward, backward
    2: ["formats"],  # files: reading, writing, GGUF and its storage types, tensors as stored
    3: ["tokenizers"],  # text to token ids and back
    4: ["run"],  # running a model: settings, generation, lens, interventions, the trace file, training
    5: ["model"],  # the Python API's model
    6: ["readers", "scenario"],  # readers of other formats: a Checkpoint (config, arrays, tokenizer), never a Model
    7: ["loaders", "replay"],  # every Model is built here
    8: ["render"],  # renderers: read a trace, never compute the model
    9: ["serve"],  # the web server of `tracer serve`: loads models, runs them, serves the page
    10: ["cli", "__init__", "__main__"],
}
TOP_LEVEL_MAX = 10  # modules directly in tracer/ (besides __init__ and __main__)
# No upward import: a trace shows itself (Generation.show, _repr_html_ in a notebook) through
# `tracer.showing`, where `tracer/__init__.py` enters the renderers (test below).
RENDER_MAY_IMPORT = {"errors", "version", "core.config", "run.settings", "core.equations", "tokenizers.tokens", "tokenizers.table", "run.checks",
                     "formats.files", "run.trace", "run.heads", "sections", "core.hooks", "run.overflow"}
THIRD_PARTY = {  # which modules may import which third-party packages (the standard library is always fine)
    "numpy": "everything but the CLI's own startup path",
    "rich": "render",
    "typer": "cli",
    "starlette": "serve",
    "uvicorn": "serve",
    "tiktoken": "tokenizers.tokens, .bpe, .patterns, .hf_tokenizer",
    "regex": "tokenizers.patterns (a tokenizer.json's Split regexes, on an engine a signal and a time limit stop)",
    "jinja2": "tokenizers.chat",
    "gguf": "no module: llama.cpp's gguf-py is the tests' reference for gguf_file and quants, never imported by tracer",
}
TOKENIZING = {"tokenizers.tokens", "tokenizers.bpe", "tokenizers.patterns", "tokenizers.hf_tokenizer"}  # may import tiktoken
SPLITTING = {"tokenizers.patterns"}  # the one module that may import regex
TEMPLATING = {"tokenizers.chat"}  # the one module that may import jinja2 (chat templates)


def within(module: str, allowed) -> bool:
    """Whether `module` is one of `allowed` or inside a package of it."""
    return any(module == a or module.startswith(a + ".") for a in allowed)


@functools.lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    """Dotted module name (without `tracer.`) → file, for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(module: str, node: ast.ImportFrom | ast.Import, is_package: bool) -> list[str]:
    """The tracer modules (dotted, without `tracer.`) an import statement names, and third-party tops."""
    names = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            names.append(alias.name)
        return names
    if node.level == 0:
        base = node.module or ""
    else:
        pkg = module.split(".") if is_package else module.split(".")[:-1]
        if module == "__init__":
            pkg = []
        pkg = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
        base = ".".join(["tracer", *pkg] + ([node.module] if node.module else []))
    found = []
    for alias in node.names:  # `from . import fmt` imports the submodule tracer.render.fmt
        found.append(f"{base}.{alias.name}")
    mods = modules()
    if not all(f.removeprefix("tracer.") in mods for f in found):  # some name is the package's own attribute
        found.append(base)
    return found


def imports() -> dict[str, set[str]]:
    """Module → the names it imports anywhere in its file (module level and inside functions)."""
    mods = modules()
    out = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        got = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                got.update(_resolve(name, node, is_package))
        out[name] = got
    return out


def tracer_edges() -> dict[str, set[str]]:
    """Module → the tracer modules it imports (submodule names resolved to modules that exist)."""
    mods = modules()
    out = {}
    for name, names in imports().items():
        deps = set()
        for n in names:
            if n == "tracer" or not n.startswith("tracer."):
                continue
            target = n.removeprefix("tracer.")
            while target and target not in mods:  # `tracer.render.fmt.num` → `render.fmt`
                target = target.rpartition(".")[0]
            if target and target != name:
                deps.add(target)
        out[name] = deps
    return out


def layer_of(module: str) -> int:
    top = module.split(".")[0]
    for layer, names in LAYERS.items():
        if top in names:
            return layer
    raise AssertionError(f"tracer.{module} is in no layer of tests/test_architecture.py (add it, and to docs/architecture.md)")


def test_every_module_is_small():
    too_big = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not too_big, f"modules over {MAX_LINES} lines: {too_big}"


def test_every_module_has_a_layer():
    for name in modules():
        layer_of(name)


def test_the_folder_listing_is_the_layer_map():
    """At most TOP_LEVEL_MAX modules sit directly in tracer/; the rest are in the layers' packages."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(top) <= TOP_LEVEL_MAX, top
    for layer in LAYERS.values():
        for name in layer:
            assert (PACKAGE / f"{name}.py").exists() or (PACKAGE / name / "__init__.py").exists(), name


def test_no_import_cycle_counting_imports_inside_functions():
    edges = tracer_edges()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 1:
                cycle = path[path.index(d):] + [d]
                raise AssertionError("import cycle: " + " → ".join(f"tracer.{x}" for x in cycle))
            if d not in state:
                visit(d)
        path.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)


def test_imports_go_one_way():
    wrong = []
    for m, deps in tracer_edges().items():
        for d in deps:
            if layer_of(d) > layer_of(m):
                wrong.append(f"tracer.{m} (layer {layer_of(m)}) imports tracer.{d} (layer {layer_of(d)})")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_trace_hands_itself_to_the_renderers_without_importing_them():
    """`trace.py` imported `render.notebook` (layer 1 importing layer 6) for `Generation.show`
    and `_repr_html_`. Now nothing below the renderers imports them, not even inside a function: the
    renderers are entered in `tracer.showing` by the package's `__init__` (the top layer)."""
    edges = tracer_edges()
    below = [m for m in edges if layer_of(m) < layer_of("render")]
    wrong = sorted(f"tracer.{m} imports tracer.{d}" for m in below for d in edges[m] if d.split(".")[0] == "render")
    assert not wrong, "\n".join(wrong)
    assert "render.notebook" in edges["__init__"] and "showing" in edges["run.trace"]


def test_renderers_read_traces_and_never_run_the_model():
    wrong = []
    for m, deps in tracer_edges().items():
        if m.split(".")[0] != "render":
            continue
        for d in deps:
            top = d.split(".")[0]
            if top != "render" and d not in RENDER_MAY_IMPORT:
                wrong.append(f"tracer.{m} imports tracer.{d}")
    assert not wrong, "\n".join(sorted(wrong))


@pytest.mark.parametrize("package, allowed", [("typer", {"cli"}), ("rich", {"render"}), ("tiktoken", TOKENIZING),
                                              ("jinja2", TEMPLATING), ("regex", SPLITTING), ("gguf", set()), ("starlette", {"serve"}),
                                              ("uvicorn", {"serve"})])
def test_third_party_packages_stay_in_their_layer(package, allowed):
    wrong = sorted(f"tracer.{m}" for m, names in imports().items()
                   if any(n == package or n.startswith(package + ".") for n in names) and not within(m, allowed))
    assert not wrong, f"{package} is imported by {wrong}; only {sorted(allowed)} may"


def test_the_core_imports_numpy_and_the_standard_library_only():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    wrong = []
    for m, names in imports().items():
        if m.split(".")[0] in ("render", "cli", "serve"):
            continue
        for n in names:
            top = n.split(".")[0]
            if top in ("tracer", "numpy") or top in stdlib or (top == "tiktoken" and m in TOKENIZING) or (
                    top == "jinja2" and m in TEMPLATING) or (top == "regex" and m in SPLITTING):
                continue
            wrong.append(f"tracer.{m} imports {n}")
    assert not wrong, "\n".join(sorted(wrong))


def test_every_package_folder_is_installed():
    """The wheel ships the whole tracer/ folder, so a non-editable install has every package and data file
    (tests/test_install.py installs it and checks them)."""
    import tomllib

    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["packages"] == ["tracer"] and not {"only-include", "exclude", "only-packages"} & set(wheel), wheel


# What reads weights from a file: only the readers (and the modules that define the formats).
WEIGHT_READERS = {"formats.files.load_safetensors", "formats.files.load_weights_file", "formats.gguf_file.open_gguf"}
MAY_READ_WEIGHTS = {"formats", "readers", "scenario", "tokenizers.tokens"}  # tokens: a GGUF's tokenizer, header only


def test_the_readers_registry_is_the_only_path_from_a_weights_file_to_a_model():
    wrong = []
    for m, names in imports().items():
        if within(m, MAY_READ_WEIGHTS):
            continue
        for n in names:
            if n.removeprefix("tracer.") in WEIGHT_READERS:
                wrong.append(f"tracer.{m} imports {n}")
    assert not wrong, "\n".join(sorted(wrong)) + "\n(go through tracer.readers.read_path / read_folder)"
    loaders = (PACKAGE / "loaders.py").read_text()
    assert "read_path(" in loaders and "model_of(" in loaders


# --------------------------------------------------------------------------- the table of block switches

SWITCH_FIELDS = {"norm", "mlp", "positional", "qk_norm", "norm_place", "attention"}  # Config's switches; their values are tracer.core.blocks' keys
# The table's own module, and the readers, which build a config from what a file says it is.
# The sublayer kinds' own modules (each a block entry: `tracer.core.sublayer.Sublayer`) are the table too.
KIND_MODULES = {"core.blocks", "core.sublayer", "core.attention", "core.mlps", "core.experts", "core.linear_attention",
                "core.linear_backward", "core.delta_rule"}
MAY_COMPARE_SWITCHES = KIND_MODULES | {"scenario", "readers"}
JS_COMPARISON = r"""CFG\.(mlp|norm|positional|qk_norm|norm_place|attention)\s*(===?|!==?|\])|\[\s*CFG\.(mlp|norm|positional|qk_norm|norm_place|attention)\s*\]"""


def _switch_values() -> set[str]:
    from tracer.core.blocks import ATTENTIONS, MLPS, NORM_PLACES, NORMS, POSITIONS, QK_NORMS

    return set(NORMS) | set(MLPS) | set(POSITIONS) | set(QK_NORMS) | set(NORM_PLACES) | set(ATTENTIONS)


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _is_switch(node: ast.AST) -> bool:
    """`cfg.norm`, `self.positional`, `config.mlp`, …"""
    return isinstance(node, ast.Attribute) and node.attr in SWITCH_FIELDS


def switch_comparisons(tree: ast.AST, values: set[str]) -> list[int]:
    """Lines where a switch is compared with one of its values, or picks from a dict literal."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_switch(o) for o in operands) and any(_strings(o) & values for o in operands):
                found.append(node.lineno)
            elif any(_strings(o) & (values - {"layer", "none", "explicit"}) for o in operands):  # "rope" == x, x in ("gelu", …)
                found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict) and _is_switch(node.slice):
            found.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and isinstance(node.func.value, ast.Dict) and node.args and _is_switch(node.args[0])):
            found.append(node.lineno)
    return found


def test_switch_values_are_compared_only_in_the_table_and_the_readers():
    """`cfg.mlp == "swiglu"` and its kin live in tracer.core.blocks (and the readers that build a config);
    every other module reads the entry (`cfg.norm_kind`, `cfg.mlp_kind`, `cfg.position_kind`)."""
    import re

    values = _switch_values()
    wrong = []
    for name, path in modules().items():
        if within(name, MAY_COMPARE_SWITCHES):
            continue
        for line in switch_comparisons(ast.parse(path.read_text(encoding="utf-8")), values):
            wrong.append(f"tracer/{path.relative_to(PACKAGE)}:{line}")
    for path in sorted(PACKAGE.rglob("*.js")):
        for i, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if re.search(JS_COMPARISON, text):
                wrong.append(f"tracer/{path.relative_to(PACKAGE)}:{i}")
    assert not wrong, "switch values compared outside tracer.core.blocks and the readers:\n" + "\n".join(wrong)


def test_the_switch_check_finds_a_comparison():
    values = _switch_values()
    for src in ('cfg.mlp == "swiglu"', 'x = {"gelu": 1}.get(cfg.mlp)', 'y = {"rms": 1}[self.norm]',
                'cfg.positional in ("none", "rope")', '"rope" != kind'):
        assert switch_comparisons(ast.parse(src), values), src
    assert not switch_comparisons(ast.parse('c in ("layer", "heads")'), values)


def test_the_package_metadata_is_current():
    """The license as an SPDX expression with its file (PEP 639), and the version read from the one place it is
    written."""
    import tomllib

    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert doc["project"]["license"] == "MIT" and doc["project"]["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert doc["project"]["dynamic"] == ["version"] and doc["tool"]["hatch"]["version"]["path"] == "tracer/version.py"


def test_no_merge_conflict_is_left_in_a_file():
    """A merge's conflict markers once reached docs/architecture.md in a commit."""
    marker = re.compile(r"^(<{7} |>{7} |={7}$)", re.M)
    left = [str(p.relative_to(ROOT)) for suffix in ("py", "md", "js", "css", "toml", "txt", "html")
            for p in ROOT.rglob(f"*.{suffix}") if not {".venv", ".git", "node_modules"} & set(p.parts)
            and marker.search(p.read_text(encoding="utf-8", errors="replace"))]
    assert not left, left


# --------------------------------------------------------------------------- block entries own their sublayers

# What only a sublayer kind may know: its classes, its weights' fields, its recorded names and parameters.
KIND_WORDS = re.compile(r"\b(SoftmaxAttention|DenseMlp|AttentionWeights|MlpWeights|LayerKV|qkv|W_O|W_Q|W_K|W_V|W_in|"
                        r"W_out|W_gate|mlp_in|mlp_out|mlp_gate|hook_q|hook_k|hook_v|hook_z|hook_pattern|hook_attn_scores|"
                        r"hook_dots|hook_pre|hook_post|hook_rot_q|hook_rot_k|q_norm|k_norm|split_heads|causal_softmax)\b")
GENERIC_CORE = ("core/decoder.py", "core/backward.py", "core/fast.py", "core/store.py", "core/streamed.py",
                "core/expansion.py", "core/params.py")


def _code(path: Path) -> str:
    """A module's code without its docstrings and comments (they may name kinds as examples)."""
    import io
    import tokenize

    out = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and tok.string.startswith(('"""', "'''"))):
            continue
        out.append(tok.string)
    return " ".join(out)


@pytest.mark.parametrize("module", GENERIC_CORE)
def test_the_decoder_backward_layout_and_store_name_no_sublayer_kind(module):
    """The decoder (two residual lines), the backward pass, the fast layout, the store, the streamed
    layers and the parameters call each sublayer's entry and name no attention or MLP kind, none of a
    kind's weights and none of its recorded names: a new kind is an entry, not a branch here."""
    from tracer.core.blocks import ATTENTIONS, MLPS

    code = _code(PACKAGE / module)
    assert not KIND_WORDS.findall(code), sorted(set(KIND_WORDS.findall(code)))
    named = sorted(v for v in set(ATTENTIONS) | set(MLPS) if re.search(rf"[\"']{re.escape(v)}[\"']", code))
    assert not named, named


def test_the_kind_check_finds_a_kind():
    assert KIND_WORDS.findall("w.attn.qkv(x) + acts[p + 'mlp.hook_post']") == ["qkv", "hook_post"]
    assert not KIND_WORDS.findall("kind.run(cfg, w, x, rec, span)")


def test_no_module_outside_the_table_branches_on_a_sublayer_kind():
    """No `isinstance(…, SoftmaxAttention)` or `kind.key == "softmax"` outside the kinds' own modules:
    what differs between kinds is read from the entry, never decided by its name."""
    wrong = []
    kinds = {"SoftmaxAttention", "DenseMlp", "Sublayer", "AttentionWeights", "MlpWeights"}
    for name, path in modules().items():
        if within(name, KIND_MODULES):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
                    and len(node.args) == 2 and {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} & kinds):
                wrong.append(f"tracer/{path.relative_to(PACKAGE)}:{node.lineno}")
            if isinstance(node, ast.Compare) and any(isinstance(o, ast.Attribute) and o.attr == "key"
                                                     for o in [node.left, *node.comparators]):
                wrong.append(f"tracer/{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not wrong, wrong


def test_the_architecture_map_lists_every_module_once():
    """docs/architecture.md's module map is the folder tree, one line per module: every module of tracer/ is in
    it once, and it names no module that does not exist."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    tree = text.split("## The module map", 1)[1].split("```text\n", 1)[1].split("\n```", 1)[0].split("\n")
    listed, folders = [], []
    for line in tree[1:]:  # after `tracer/`
        depth, name = (len(line) - len(line.lstrip())) // 2, line.split()[0]
        folders[depth - 1:] = [name] if name.endswith("/") else []
        if name.endswith(".py"):
            listed.append("".join(folders[: depth - 1]) + name)
    actual = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
    assert sorted(listed) == sorted(set(listed)), [n for n in listed if listed.count(n) > 1]
    implied = {f"{p.parent}/__init__.py" for p in map(Path, listed) if str(p.parent) != "."}  # a folder's line
    assert sorted(set(listed) | implied) == actual, (sorted(set(actual) - set(listed) - implied), sorted(set(listed) - set(actual)))
