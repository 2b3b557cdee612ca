"""Every reader, fed mutated real files, each case a process of its own under a memory and a time limit.

The readers: a trace `.npz` (`tracer show`), tracer's weights files (`.npz`, `.safetensors`), a
Hugging Face GPT-2 folder (config.json, model.safetensors or shards and their index), a Llama /
Qwen2 / Mistral folder (config.json, model.safetensors, tokenizer.json, tokenizer_config.json), and
a scenario's TOML with its `file =` weights (`tracer replay`). Each starts from a good file and changes one thing
an attacker or an unlucky user would: a metadata value made absurd (10⁹, −1, true, "false", a
string of escape sequences, a list nested 40 deep), a key renamed, an array of another kind or
shape, NaN and ∞ in the numbers, an entry renamed (`steps.-1.…`), bytes flipped or cut. Whatever
the change, the run must end as tracer promises (`check_outcome`): a correct result (exit 0) or one
line on stderr (exit 2), under 1 GiB of address space and within its time, no traceback, no exit 1,
and no escape sequence from the file on stdout or stderr. The cases are drawn from a seeded
generator, so a failure names a case that can be run again (`FUZZ_SEED`, `-k`).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.core.config import Config
from tracer.formats.files import save_weights
from tracer.core.params import init_weights

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("FUZZ_SEED", "17"))
CASES = 32  # per reader: 128 cases, about 20 s of CPU
ESCAPES = "\x1b]52;c;aGk=\x07\x1b[2J\x9b31m\u202e\x00[/x][bold red]"  # escape sequences, and Rich markup
HUB = Path(__file__).parent / "data" / "gpt2-tiny" / "hub"
TWO_HEADS = Path(tracer.__file__).parent / "scenarios" / "two_heads.toml"


def nested(depth: int):
    v: list = []
    for _ in range(depth):
        v = [v]
    return v


SIZES = [10**9, 2**31, 10**6, 65_536, 1_025, 4_096]
HOSTILE_VALUES = [10**9, -1, 0, 2**63, 1e308, -1e308, True, False, None, "false", "1", ESCAPES, [], {},
                  nested(40), [1, 2, 3], 0.5, "nan", {ESCAPES: ESCAPES}]


# --------------------------------------------------------------------------------------------
# Mutations


def json_paths(v, path=()):
    """Every place in a JSON value: (path to it, …)."""
    yield path
    if isinstance(v, dict):
        for k, x in v.items():
            yield from json_paths(x, path + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v[:8]):
            yield from json_paths(x, path + (i,))


def mutate_json(value, rng: random.Random):
    """`value` with one place changed: a hostile value put there, a key renamed with escapes, or removed."""
    value = json.loads(json.dumps(value))
    paths = [p for p in json_paths(value) if p]
    if not paths:
        return rng.choice(HOSTILE_VALUES)
    path = rng.choice(paths)
    parent = value
    for k in path[:-1]:
        parent = parent[k]
    last, how = path[-1], rng.random()
    if isinstance(parent, dict) and how < 0.15:
        parent[ESCAPES + str(last)] = parent.pop(last)
    elif isinstance(parent, dict) and how < 0.25:
        del parent[last]
    elif type(parent[last]) is int and how < 0.6:  # a size: what a file declares to cost gigabytes or hours
        parent[last] = rng.choice(SIZES)
    else:
        parent[last] = rng.choice(HOSTILE_VALUES)
    return value


def mutate_array(a: np.ndarray, rng: random.Random) -> np.ndarray:
    """Another kind, another shape, or NaN, ∞ and huge numbers among the values."""
    how = rng.randrange(6)
    if how == 0:
        return a.astype(rng.choice(["bool", "complex64", "int8", "float16", "uint64", "<U3"]))
    if how == 1:
        return a.T.copy() if a.ndim > 1 else a[:-1].copy()
    if how == 2:
        return a.reshape(1, *a.shape)
    if how == 3:
        return np.zeros((0,) + a.shape[1:], a.dtype)
    out = np.array(a, dtype=a.dtype if a.dtype.kind == "f" else np.float64)
    flat = out.reshape(-1)
    if flat.size:
        for _ in range(rng.randint(1, 3)):
            flat[rng.randrange(flat.size)] = rng.choice([np.nan, np.inf, -np.inf, 1e300 if out.dtype == np.float64 else 3e38])
    return out


def mutate_name(name: str, rng: random.Random) -> str:
    return rng.choice(["steps.-1." + name, "steps.99." + name, "steps.0." + name, "blocks.5000.attn.hook_q",
                       ESCAPES + name, name + ".x", "steps.1", "meta.npy"])


def mutate_bytes(raw: bytes, rng: random.Random) -> bytes:
    out = bytearray(raw)
    if rng.random() < 0.5:
        for _ in range(rng.randint(1, 16)):
            out[rng.randrange(len(out))] = rng.randrange(256)
    else:
        out = out[: rng.randrange(len(out))]
    return bytes(out)


TELLING = ("hook_pattern", "hook_attn_scores", "sample.probs", "sample.final", "logits", "tokens", "W_E", "W_pos",
           "lens.positions", "lens.top_token", "predict.top_prob", "hook_scale")


def mutate_npz(src: Path, dst: Path, rng: random.Random, meta_key: str) -> str:
    """A mutated copy of an `.npz` (its JSON entry `meta_key`, an array, a name, or its bytes);
    returns what was changed, for the failure message."""
    arrays = dict(np.load(src, allow_pickle=False))
    how = rng.randrange(4)
    if how == 0:
        meta = json.loads(str(arrays[meta_key]))
        if meta_key == "__meta__" and rng.random() < 0.7:  # the stored config is JSON inside the JSON
            meta["config"] = json.dumps(mutate_json(json.loads(meta["config"]), rng))
        elif meta_key == "meta" and rng.random() < 0.6:  # what sizes everything else: the config, the passes
            key = rng.choice(["config", "steps", "version", "prompt_ids"])
            meta[key] = mutate_json({key: meta[key]}, rng).get(key, rng.choice(HOSTILE_VALUES))
        else:
            meta = mutate_json(meta, rng)
        arrays[meta_key] = np.array(json.dumps(meta))
        what = f"{meta_key}: {json.dumps(meta)[:300]}"
    elif how == 1:
        names = [k for k in arrays if k != meta_key]
        telling = [k for k in names if k.endswith(TELLING)]  # what the renderers compute with
        name = rng.choice(telling if telling and rng.random() < 0.6 else names)
        arrays[name] = mutate_array(arrays[name], rng)
        what = f"{name}: {arrays[name].dtype} {arrays[name].shape}"
    elif how == 2:
        name = rng.choice([k for k in arrays if k != meta_key])
        new = mutate_name(name, rng)
        arrays[new] = arrays.pop(name)
        what = f"renamed {name} to {new!r}"
    if how < 3:
        np.savez(dst, **arrays)
        return what
    dst.write_bytes(mutate_bytes(src.read_bytes(), rng))
    return "bytes"


def mutate_safetensors(src: Path, dst: Path, rng: random.Random) -> str:
    """A mutated copy of a safetensors file: its JSON header (shapes, offsets, dtypes, the stored
    config) changed, or its bytes."""
    raw = src.read_bytes()
    if rng.random() < 0.3:
        dst.write_bytes(mutate_bytes(raw, rng))
        return "bytes"
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.get("__metadata__", {})
    if "config" in meta and rng.random() < 0.4:
        meta["config"] = json.dumps(mutate_json(json.loads(meta["config"]), rng))
    else:
        header = mutate_json(header, rng)
    body = json.dumps(header).encode()
    dst.write_bytes(struct.pack("<Q", len(body)) + body + raw[8 + n :])
    return f"header {body[:300]!r}"


# --------------------------------------------------------------------------------------------
# Good files


@pytest.fixture(scope="module")
def good(tmp_path_factory, word_model, gpt2_config) -> dict:
    d = tmp_path_factory.mktemp("fuzz_good")
    word_model(seed=1).generate(["w1", "w2", "w3"], max_new_tokens=2).save(d / "trace.npz")
    cfg = gpt2_config(n_layers=1)
    params = init_weights(cfg, 0)
    save_weights(d / "w.npz", cfg, params)
    save_weights(d / "w.safetensors", cfg, params)
    small = Config(d_vocab=5, n_ctx=8, d_model=4, n_heads=2, n_layers=1, dtype="float64")
    save_weights(d / "scn.npz", small, init_weights(small, 3))
    (d / "scn.toml").write_text('title = "a scenario with its weights in a file"\n[tokenizer]\n'
                                'vocab = ["a", "b", "c", "d", "<end>"]\n[weights]\nfile = "scn.npz"\n'
                                '[prompt]\ntokens = ["a", "b", "c"]\n[generate]\nmax_new_tokens = 2\n'
                                '[[expect]]\nname = "blocks.0.attn.hook_pattern"\nindex = [0, 1, "0:2"]\n'
                                'value = [0.5, 0.5]\n')
    return {k: d / k for k in ("trace.npz", "w.npz", "w.safetensors", "scn.npz", "scn.toml")}


def hf_copy(folder: Path, shard_in_two=None) -> None:
    """The committed GPT-2 fixture, whole or split into two shards with their index (`shard_in_two`)."""
    folder.mkdir()
    shutil.copy(HUB / "config.json", folder / "config.json")
    if shard_in_two is None:
        shutil.copy(HUB / "model.safetensors", folder / "model.safetensors")
    else:
        shard_in_two(HUB / "model.safetensors", folder)


def cases(reader: str) -> list:
    return [pytest.param(i, id=f"{reader}-{i}") for i in range(CASES)]


def rng_for(reader: str, i: int) -> random.Random:
    return random.Random(f"{SEED}-{reader}-{i}")


# --------------------------------------------------------------------------------------------
# The readers


@pytest.mark.parametrize("i", cases("trace"))
def test_trace_files(good, tmp_path, limited, check_outcome, i):
    rng = rng_for("trace", i)
    path = tmp_path / "t.npz"
    what = mutate_npz(good["trace.npz"], path, rng, "meta")
    r = limited("show", path, "--full", "--layer", "all")
    check_outcome(r)
    assert r.returncode == 2 or "tracer · model" in r.stdout, what


@pytest.mark.parametrize("i", cases("weights"))
def test_tracer_weights_files(good, tmp_path, limited, check_outcome, i):
    rng = rng_for("weights", i)
    if i % 2:
        path = tmp_path / "w.safetensors"
        what = mutate_safetensors(good["w.safetensors"], path, rng)
    else:
        path = tmp_path / "w.npz"
        what = mutate_npz(good["w.npz"], path, rng, "__meta__")
    r = limited("trace", "hi there", "--model", path, "-n", "1")
    check_outcome(r)
    assert r.returncode == 2 or "tracer · model" in r.stdout, what


@pytest.mark.parametrize("i", cases("hf"))
def test_hugging_face_folders(tmp_path, limited, check_outcome, shard_in_two, i):
    rng = rng_for("hf", i)
    folder = tmp_path / "m"
    sharded = i % 2 == 1
    hf_copy(folder, shard_in_two if sharded else None)
    part = rng.choice(["config.json", "weights", "index.json"] if sharded else ["config.json", "weights"])
    if part == "config.json":
        cfg = mutate_json(json.loads((folder / "config.json").read_text()), rng)
        (folder / "config.json").write_text(json.dumps(cfg))
        what = json.dumps(cfg)[:300]
    elif part == "index.json":
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        name = rng.choice(sorted(index["weight_map"]))
        index["weight_map"][name] = rng.choice(["../model-00001-of-00002.safetensors", "/etc/passwd", ESCAPES,
                                                "missing.safetensors", 7, None, "config.json",
                                                str(folder / "model-00002-of-00002.safetensors")])
        if rng.random() < 0.3:
            index = mutate_json(index, rng)
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        what = json.dumps(index)[:300]
    else:
        shard = rng.choice(sorted(folder.glob("*.safetensors")))
        what = mutate_safetensors(shard, shard, rng)
    r = limited("trace", "hi", "--model", folder, "-n", "1")
    check_outcome(r)
    assert r.returncode == 2 or "tracer · model" in r.stdout, what


FAMILIES = Path(__file__).parent / "data"


@pytest.mark.parametrize("i", cases("family"))
def test_llama_qwen2_mistral_folders_and_their_tokenizer_json(tmp_path, limited, check_outcome, i):
    """A Llama / Qwen2 / Mistral folder with one of config.json, model.safetensors or tokenizer.json
    (and tokenizer_config.json) changed."""
    rng = rng_for("family", i)
    name = ["llama-tiny", "qwen2-tiny", "mistral-tiny", "llama-tiny-bf16"][i % 4]
    folder = tmp_path / name
    shutil.copytree(FAMILIES / name, folder, ignore=shutil.ignore_patterns("reference.npz"))
    part = rng.choice(["config.json", "weights", "tokenizer.json", "tokenizer.json", "tokenizer_config.json"])
    if part == "weights":
        what = mutate_safetensors(folder / "model.safetensors", folder / "model.safetensors", rng)
    elif part == "tokenizer_config.json":
        value = mutate_json({"eos_token": {"content": "<|end_of_text|>"}, "bos_token": "<s>"}, rng)
        (folder / part).write_text(json.dumps(value))
        what = json.dumps(value)[:300]
    elif rng.random() < 0.2:
        raw = (folder / part).read_bytes()
        (folder / part).write_bytes(mutate_bytes(raw, rng))
        what = f"{part}: bytes changed"
    else:
        value = mutate_json(json.loads((folder / part).read_text(encoding="utf-8")), rng)
        (folder / part).write_text(json.dumps(value))
        what = f"{part}: " + json.dumps(value)[:300]
    r = limited("trace", "The quick fox", "--model", folder, "-n", "1")
    check_outcome(r)
    assert r.returncode == 2 or "tracer · model" in r.stdout, what


NESTED = [r"(a+)+b", r"(a|aa)*c", r"(?:\s*)+\S", r"((\p{L})+)+!", r"(?:\p{L}+\p{N}?)*x", r"([^\s]+\s?)+\p{N}",
          r"a{4294967296}", r"(?:a{2,}){2,}", r"\p{L}*\p{L}*\p{L}*(?=\d)|\s+|.", r"(?:(?:a|b)*)+" + "c" * 600,
          "(" * 300 + "a" + ")" * 300, r"\p{L", r"(a)\1"]
BAD_IDS = [-1, 10**9, 2**31, 2**63, -(2**63), 1.5, 5.0, True, False, None, "5", [], 10**40]


def mutate_tokenizer_json(data: dict, rng: random.Random) -> str:
    """One change an attacker would make to a tokenizer.json: a Split regex that backtracks (nested
    quantifiers, a huge repetition count, 300 groups deep), one very long token, an id out of range
    or of the wrong kind (vocabulary, added token, template, two tokens sharing one), or added tokens
    that strip white space."""
    model, how = data["model"], rng.randrange(4)
    vocab = model.setdefault("vocab", {})
    if how == 0:
        pattern = rng.choice(NESTED)
        split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
        pre = data.get("pre_tokenizer") or {}
        steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
        if steps and steps[0].get("type") == "Split":
            steps[0]["pattern"] = {"Regex": pattern}
        else:
            data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split] + ([pre] if pre else [])}
        return f"regex {pattern[:80]!r}"
    if how == 1:
        n = rng.choice([10**5, 4 * 10**5, 10**6])
        ids = list(vocab.values()) + [t.get("id", 0) for t in data.get("added_tokens", [])]
        vocab[rng.choice("aĠ▁") * n] = max([i for i in ids if isinstance(i, int)] + [0]) + 1
        return f"a token of {n:,} characters"
    if how == 2:
        bad = rng.choice(BAD_IDS + ["duplicate"])
        where = rng.choice(["vocab", "added", "template"])
        if bad == "duplicate":
            where, bad = "vocab", rng.choice(list(vocab.values()))
        if where == "vocab" or not data.get("added_tokens"):
            vocab[rng.choice(list(vocab))] = bad
        elif where == "added":
            rng.choice(data["added_tokens"])["id"] = bad
        else:
            name = data["added_tokens"][0]["content"]
            data["post_processor"] = {"type": "TemplateProcessing", "pair": [],
                                      "single": [{"SpecialToken": {"id": name, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                                      "special_tokens": {name: {"id": name, "ids": [bad], "tokens": [name]}}}
        return f"{where} id {bad!r}"
    for t in data.get("added_tokens", []):
        t.update(lstrip=True, rstrip=True)
    return "every added token strips white space"


@pytest.mark.parametrize("i", cases("tokenizer")[:16])
def test_tokenizer_json_with_hostile_regexes_long_tokens_and_ids(tmp_path, limited, check_outcome, i):
    """A Llama / Qwen2 / Mistral folder whose tokenizer.json has a backtracking regex, a long token, an id out
    of range or of the wrong kind, or stripping added tokens, run on a prompt made to backtrack."""
    rng = rng_for("tokenizer", i)
    name = ["llama-tiny", "qwen2-tiny", "mistral-tiny"][i % 3]
    folder = tmp_path / name
    shutil.copytree(FAMILIES / name, folder, ignore=shutil.ignore_patterns("reference.npz"))
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    what = mutate_tokenizer_json(data, rng)
    (folder / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    r = limited("trace", "a" * 40 + " " * 20 + "<|endoftext|> x", "--model", folder, "-n", "1")
    check_outcome(r)
    assert r.returncode == 2 or "tracer · model" in r.stdout, what


NUMBER = re.compile(r"(?<![\w.\"])-?\d+(\.\d+)?([eE][+-]?\d+)?(?![\w.\"])")
STRING = re.compile(r'"[^"\n]*"')


def mutate_toml(text: str, rng: random.Random) -> str:
    """One change to a scenario's text: a number made absurd, a string or key made of escapes, a
    line dropped or doubled, a list nested too deep, a list of 40,000 lines or a header that never
    closes (the scanner was quadratic), the weights file pointed elsewhere."""
    lines = text.splitlines()
    how = rng.randrange(9)
    if how == 0:
        spots = list(NUMBER.finditer(text))
        m = rng.choice(spots)
        new = rng.choice(["1000000000", "-1", "0", "1e400", "1e200", "99999999999999999999", "nan", "inf", "1048577",
                          "0.5", "true"])
        return text[: m.start()] + new + text[m.end() :]
    if how == 1:
        m = rng.choice(list(STRING.finditer(text)))
        return text[: m.start()] + json.dumps(ESCAPES) + text[m.end() :]
    if how == 2:
        tables = [i for i, line in enumerate(lines) if line.startswith("[")]
        at = rng.choice(tables) + 1
        return "\n".join(lines[:at] + [f"{json.dumps(ESCAPES)} = 1"] + lines[at:]) + "\n"
    if how == 3:
        del lines[rng.randrange(len(lines))]
        return "\n".join(lines) + "\n"
    if how == 4:
        i = rng.randrange(len(lines))
        return "\n".join(lines[: i + 1] + [lines[i]] + lines[i + 1 :]) + "\n"
    if how == 5:
        return text + "\n[weights.deep]\nx = " + "[" * 60 + "]" * 60 + "\n"
    if how == 6:
        return text + "\n[weights.long]\nx = [\n" + "  1.0,\n" * 40_000 + "]\n"
    if how == 7:
        return text + "\n[" + " " * 100_000 + "\n"
    return text.replace('file = "scn.npz"', "file = " + json.dumps(rng.choice(
        ["/dev/zero", "../scn.npz", "scn.toml", "nosuch.npz", ESCAPES, "x" * 300 + ".npz", "/proc/self/mem"])))


@pytest.mark.parametrize("i", cases("scenario"))
def test_scenarios_and_their_weights_files(good, tmp_path, limited, check_outcome, i):
    rng = rng_for("scenario", i)
    base = good["scn.toml"].read_text() if i % 2 else TWO_HEADS.read_text()
    shutil.copy(good["scn.npz"], tmp_path / "scn.npz")
    what = "text"
    if i % 2 and rng.random() < 0.5:  # the weights file itself
        what = mutate_npz(good["scn.npz"], tmp_path / "scn.npz", rng, "__meta__")
    else:
        base = mutate_toml(base, rng)
    path = tmp_path / "s.toml"
    path.write_text(base)
    r = limited("replay", path, "--full", "--layer", "all")
    check_outcome(r)
    assert r.returncode == 2 or "tracer · model" in r.stdout, (what, base[-500:])


def _gguf_mutated(src: Path, dst: Path, rng: random.Random) -> str:
    """A GGUF file with one thing changed: a metadata value made hostile (through the gguf package's
    writer, so the file is well formed and only the value lies), a tensor's declared dims, type or
    offset patched in place, or bytes flipped or cut."""
    gguf = pytest.importorskip("gguf")
    raw = src.read_bytes()
    how = rng.random()
    if how < 0.4:
        reader = gguf.GGUFReader(str(src))
        keys = [k for k in reader.fields if not k.startswith("GGUF.")]
        key = rng.choice(keys)
        field = reader.fields[key]
        part = field.parts[field.data[0]] if field.data else None
        if part is not None and part.dtype.kind in "iuf" and part.size == 1:  # a number: write a hostile one in place
            start = int(sum(p.nbytes for p in field.parts[: field.data[0]]) + field.offset)
            value = rng.choice([0, 1, 2**31 - 1, 2**32 - 1, 10**9, 7])
            buf = bytearray(raw)
            buf[start : start + part.nbytes] = np.array([value], dtype=part.dtype).astype(part.dtype).tobytes()
            dst.write_bytes(bytes(buf))
            return f"{key} = {value}"
        dst.write_bytes(mutate_bytes(raw, rng))
        return f"bytes ({key} not a number)"
    if how < 0.7:  # a tensor info: dims, type or offset, patched in place
        reader = gguf.GGUFReader(str(src))
        t = rng.choice(reader.tensors)
        field = reader.fields.get(t.name) if t.name in reader.fields else None
        buf = bytearray(raw)
        name_bytes = t.name.encode()
        at = raw.find(name_bytes)  # the tensor info follows its name
        if at < 0 or field is not None:
            dst.write_bytes(mutate_bytes(raw, rng))
            return "bytes"
        pos = at + len(name_bytes)
        n_dims = struct.unpack_from("<I", raw, pos)[0]
        which = rng.choice(["dim", "type", "offset"])
        if which == "dim":
            struct.pack_into("<Q", buf, pos + 4 + 8 * rng.randrange(n_dims), rng.choice([0, 10**9, 2**40, 3]))
        elif which == "type":
            struct.pack_into("<I", buf, pos + 4 + 8 * n_dims, rng.choice([2, 8, 16, 39, 99, 2**31]))
        else:
            struct.pack_into("<Q", buf, pos + 8 + 8 * n_dims, rng.choice([0, 1, 2**40, len(raw)]))
        dst.write_bytes(bytes(buf))
        return f"{t.name}: {which}"
    dst.write_bytes(mutate_bytes(raw, rng))
    return "bytes"


@pytest.mark.parametrize("i", cases("gguf"))
def test_gguf_files(tmp_path, limited, check_outcome, gguf_of_folder, i):
    """A GGUF model (qwen2-tiny written by the gguf package, F32 or Q8_0) with a metadata value, a
    tensor's dims, type or offset, or its bytes changed."""
    rng = rng_for("gguf", i)
    src = gguf_of_folder(FAMILIES / "qwen2-tiny", "qwen2", "Q8_0" if i % 2 else "F32")
    path = tmp_path / "m.gguf"
    what = _gguf_mutated(src, path, rng)
    r = limited("trace", "hi", "--model", path, "-n", "1")
    check_outcome(r)
    assert r.returncode == 2 or "tracer · model" in r.stdout, what


LOOKUP_TYPES = ["MXFP4", "IQ4_NL", "IQ4_XS", "NVFP4", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M",
                "TQ1_0", "TQ2_0"]


def _blocks_mutated(src: Path, dst: Path, rng: random.Random) -> str:
    """A GGUF file with hostile blocks in one of its quantized tensors: a run of blocks all 0xff or all 0,
    a block's first bytes (its scale, in most types) NaN, ∞ or the largest float16 (or an E8M0 of 255,
    0xff), or random bytes over a few blocks."""
    gguf = pytest.importorskip("gguf")
    raw = bytearray(src.read_bytes())
    t = rng.choice([t for t in gguf.GGUFReader(str(src)).tensors if t.tensor_type.name != "F32"])
    _, nbytes = gguf.GGML_QUANT_SIZES[t.tensor_type]
    first = rng.randrange(int(t.n_bytes) // nbytes)
    at = int(t.data_offset) + first * nbytes
    how = rng.choice(["ones", "zeros", "nan", "inf", "max", "random"])
    count = rng.randint(1, 8)
    end = min(at + count * nbytes, int(t.data_offset) + int(t.n_bytes))
    if how in ("ones", "zeros"):
        raw[at:end] = bytes([255 if how == "ones" else 0]) * (end - at)
    elif how == "random":
        raw[at:end] = bytes(rng.randrange(256) for _ in range(end - at))
    else:
        raw[at:at + 2] = {"nan": b"\xff\x7f", "inf": b"\x00\x7c", "max": b"\xff\x7b"}[how]
    dst.write_bytes(bytes(raw))
    return f"{t.name} ({t.tensor_type.name}): {how} from block {first}"


@pytest.mark.parametrize("i", cases("gguf_blocks"))
def test_gguf_blocks_of_the_lookup_types(tmp_path_factory, tmp_path, limited, check_outcome, gguf_of_folder, i):
    """A GGUF model in one of the lookup types, a wide Llama written by the gguf package, with
    hostile blocks (`_blocks_mutated`): read whole or layer by layer, a correct run or one line."""
    from .quant_blocks import wide_llama

    rng = rng_for("gguf_blocks", i)
    type_name = LOOKUP_TYPES[i % len(LOOKUP_TYPES)]
    folder = tmp_path_factory.getbasetemp() / "wide-llama"
    if not (folder / "model.safetensors").exists():
        wide_llama(folder)
    path = tmp_path / "m.gguf"
    what = _blocks_mutated(gguf_of_folder(folder, "llama-bpe", type_name), path, rng)
    r = limited("trace", "hi", "--model", path, "-n", "1", *(["--memory", "2MB"] if i % 3 == 0 else []))
    check_outcome(r)
    assert r.returncode == 2 or "tracer · model" in r.stdout, what
    if r.returncode == 2:
        assert "tensor '" in r.stderr or "tokenizer" in r.stderr, (what, r.stderr)


# --------------------------------------------------------------------------------------------
# Chat templates: a model's program, bounded in time, memory and depth (issue 39)

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
BIG = ["10**9", "2**31", "2e9", "1e18", "100000", "999999", "10**6 + 1", "(2**31) | int", "1e9 | int", "-1"]


def hostile_template(rng: random.Random) -> str:
    """A ChatML template with one hostile piece put before its output: a loop, a repeat, a width, an
    indent, a format, a recursion, a doubling, a join or a lorem ipsum of a size drawn from BIG."""
    n, m = rng.choice(BIG), rng.choice(BIG)
    piece = rng.choice([
        f"{{% for i in range({n}) %}}{{% for j in range({m}) %}}{{% endfor %}}{{% endfor %}}",
        f"{{{{ 'x' * {n} }}}}", f"{{{{ ['x'] * {n} }}}}", f"{{{{ 'ab' | center({n}) }}}}", f"{{{{ 'ab'.ljust({n}) }}}}",
        f"{{{{ messages | tojson(indent={n}) }}}}", f"{{{{ '{{:>{{w}}}}'.format('x', w={n}) }}}}",
        f"{{{{ '{{:>{n if n.isdigit() else 2000000000}}}'.format('x') }}}}",
        f"{{{{ '%{n if n.isdigit() else 2000000000}s' % 'x' }}}}", f"{{{{ '%s' | format('x' * {n}) }}}}",
        f"{{{{ lipsum({n}) }}}}", f"{{{{ ('a\\n' * 1000) | indent({n}) }}}}", f"{{{{ 10 ** {n} }}}}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% for m in [messages] recursive %}{{ loop([m]) }}{% endfor %}",
        "{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        "{% set ns = namespace(s=[1]) %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
        f"{{% set a = ['x' * 1000] * 1000 %}}{{{{ ([a] * {n}) | join(',') }}}}",
        f"{{{{ ('y' * 1000).join(['x'] * {n}) }}}}", f"{{{{ ('x' * 1000).replace('', 'y' * {n}) }}}}",
        f"{{% for b in [1] | batch({n}, 'x') %}}{{{{ b }}}}{{% endfor %}}", f"{{{{ strftime_now('%{n}Y') }}}}",
        f"{{% for i in range({n}) %}}{{{{ messages }}}}{{% endfor %}}", "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
    ])
    return piece + CHATML if rng.random() < 0.5 else CHATML.replace("{{ m.content }}", "{{ m.content }}" + piece)


@pytest.mark.parametrize("i", cases("template"))
def test_chat_templates(tmp_path, limited, check_outcome, i):
    """A Qwen2 folder whose chat_template.jinja is hostile: bounded in time, memory and depth, refused in one
    line naming the template's file (exit 2), or rendered (exit 0); never exit 1, never past the limits."""
    rng = rng_for("template", i)
    folder = tmp_path / "m"
    shutil.copytree(FAMILIES / "qwen2-tiny", folder, ignore=shutil.ignore_patterns("reference.npz"))
    template = hostile_template(rng)
    (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    r = limited("trace", "hi", "--model", folder, "--chat", "-n", "1", seconds=30)
    check_outcome(r)
    assert r.returncode == 2 or "tracer · model" in r.stdout, template[:300]
    if r.returncode == 2:  # the template's bound, or what it rendered was longer than the model's context
        assert "chat_template.jinja" in r.stderr or "context of 128 tokens" in r.stderr, (template[:300], r.stderr)


# --------------------------------------------------------------------------------------------
# tracer serve's connections: what a hostile client sends, one seeded case per connection (issue 39)

GARBAGE = [b"", b"\x00\xff\xfe", b"GET", b"GET / HT", b"GET / HTTP/1.1\r\n", b"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1\r\n",
           b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\nX: " + b"b" * 70_000 + b"\r\n\r\n",
           b"BREW /pot HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"\r\n\r\n\r\n",
           b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
           b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"]


def hostile_connection(rng: random.Random) -> tuple[bytes, str]:
    """What one connection sends and how it ends ("close", "idle", "half": shuts its writing side)."""
    how = rng.randrange(5)
    if how == 0:
        data = rng.choice(GARBAGE)
    elif how == 1:
        data = bytes(rng.randrange(256) for _ in range(rng.choice([1, 10, 1000])))
    elif how == 2:  # a body that lies about its length, or a header that lies about its type
        body = json.dumps({"prompt": rng.choice(["A B", ESCAPES, "x" * 3000])}).encode()
        length = rng.choice([len(body), len(body) + 1000, 0, 10**12, -1])
        kind = rng.choice(["application/json", "text/plain", "", "application/json; charset=utf-7"])
        data = (f"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {kind}\r\nContent-Length: {length}\r\n"
                f"X-Forwarded-For: {rng.choice(['1.2.3.4', ESCAPES, '::1'])}\r\n\r\n").encode("utf-8", "replace") + body
    elif how == 3:  # many requests on one connection, the last cut short
        one = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        data = one * rng.randint(1, 20) + one[: rng.randrange(len(one))]
    else:
        data = mutate_bytes(b"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 16\r\n\r\n{\"prompt\": \"A\"}", rng)
    return data, rng.choice(["close", "idle", "half"])


@pytest.fixture(scope="module")
def fuzzed_server():
    from .conftest import ServeProcess

    proc, url = ServeProcess.start("--model", "abc", "--workers", "1", "--queue", "2", "--per-client", "0")
    held: list = []
    yield url, held
    for s in held:
        s.close()
    code, err = ServeProcess.stop(proc)
    assert code == 0 and "Traceback" not in err and "Exception" not in err, err


@pytest.mark.parametrize("i", cases("connection"))
def test_server_connections(fuzzed_server, i):
    """Whatever one connection sends, the server answers the next client at once: an HTTP answer or a
    closed connection to the hostile one, and JSON for every route of its own."""
    import socket

    import httpx

    url, held = fuzzed_server
    rng = rng_for("connection", i)
    data, ending = hostile_connection(rng)
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    try:
        s.sendall(data)
    except OSError:
        pass  # the server may have refused it already
    if ending == "half":
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    if ending == "close":
        s.close()
    else:
        held.append(s)  # left open, as a hostile client leaves it: the server's deadlines close it
    started = __import__("time").monotonic()
    r = httpx.get(url + "/api/health", timeout=10)
    assert r.status_code == 200 and r.json()["status"] == "ok" and __import__("time").monotonic() - started < 5
    r = httpx.post(url + "/api/trace", content=b"{", headers={"Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"
