"""Property-based tests (hypothesis): invariants that hold for every small model and prompt, and
loaders that fail only with the project's own error type whatever bytes or TOML they are given.

The invariants are checked against independent references written here: a per-head, per-query
loop for the weighted sum of values, plain sums for the residual stream, and the definition of
the causal mask. Each test keeps `max_examples` modest so the file runs in seconds.
"""

from __future__ import annotations

import json
import math
import string
import tempfile
import warnings
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tracer
from tracer import scenario as scenario_mod
from tracer.render.jsonout import dumps, replay_json
from tracer.replay import replay as run_replay
from tracer.scenario import schema as scenario_schema
from tracer.core.config import POSITIONAL, Config
from tracer.errors import TracerError
from tracer.model import Model
from tracer.tokenizers.tokens import WordTokenizer, show_invisible, show_token
from tracer.cli import app
from tracer.formats.files import load_npz, load_safetensors, load_weights_file, save_weights
from tracer.core.params import init_weights
from tracer.run.trace import Generation

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOL = 1e-12  # float64 throughout: exact up to rounding


# --------------------------------------------------------------------------------------------
# Random small models keep every invariant of the decoder


@st.composite
def small_models(draw):
    n_heads = draw(st.integers(1, 4))
    positional = draw(st.sampled_from([p for p in POSITIONAL if p != "explicit"]))
    d_head = draw(st.integers(1, 2)) * 2 if positional == "rope" else draw(st.integers(1, 4))  # RoPE turns pairs
    cfg = Config(
        d_vocab=draw(st.integers(2, 12)),
        n_ctx=draw(st.integers(1, 8)),
        d_model=draw(st.integers(1, 8)),
        n_heads=n_heads,
        d_head=d_head,
        d_mlp=draw(st.integers(1, 8)),
        n_layers=draw(st.integers(1, 3)),
        dtype="float64",
        positional=positional,
        layer_norm=draw(st.booleans()),
        norm=draw(st.sampled_from(["layer", "rms"])),
        mlp=draw(st.sampled_from([False, "gelu", "swiglu"])),
        residual=draw(st.booleans()),
        scale_scores=draw(st.booleans()),
        tied_unembed=draw(st.booleans()),
        n_kv_heads=draw(st.sampled_from([k for k in range(1, n_heads + 1) if n_heads % k == 0])),
        sliding_window=draw(st.one_of(st.none(), st.integers(1, 8))),
        rope_theta=draw(st.sampled_from([3.0, 10000.0])),
    )
    params = init_weights(cfg, draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([1.0, 25.0, 250.0]))  # 0.02 → up to 5: sharp softmaxes, big scores
    params = {k: v * scale if k.rsplit(".", 1)[-1].startswith("W") else v for k, v in params.items()}
    prompt = draw(st.lists(st.integers(0, cfg.d_vocab - 1), min_size=1, max_size=cfg.n_ctx))
    vocab = [f"t{i}" for i in range(cfg.d_vocab)]
    return Model(cfg, params, WordTokenizer(vocab), "prop"), prompt


def _z_reference(pattern: np.ndarray, v: np.ndarray) -> np.ndarray:
    """hook_z by loops: for each head and query, the pattern-weighted sum of the value rows (of
    the key/value head the query head shares, under grouped-query attention)."""
    n_heads, n_q, n_k = pattern.shape
    group = n_heads // v.shape[1]
    z = np.zeros((n_q, n_heads, v.shape[-1]))
    for h in range(n_heads):
        for q in range(n_q):
            for k in range(n_k):
                z[q, h] += pattern[h, q, k] * v[k, h // group]
    return z


@FAST
@given(small_models())
def test_every_small_model_keeps_the_invariants(model_prompt):
    check_invariants(*model_prompt)


SWITCHES = ("layer_norm", "mlp", "residual", "scale_scores", "tied_unembed")


@pytest.mark.parametrize("positional", [p for p in POSITIONAL if p != "explicit"])
def test_every_switch_combination_keeps_the_invariants(positional):
    """All 2**5 combinations of the block's switches, deterministically (hypothesis samples them)."""
    for bits in range(2 ** len(SWITCHES)):
        flags = {name: bool(bits >> i & 1) for i, name in enumerate(SWITCHES)}
        cfg = Config(d_vocab=7, n_ctx=6, d_model=6, n_heads=3, d_head=2, d_mlp=5, n_layers=2, dtype="float64",
                     positional=positional, **flags)
        params = {k: v * 50 if k.rsplit(".", 1)[-1].startswith("W") else v for k, v in init_weights(cfg, bits).items()}
        model = Model(cfg, params, WordTokenizer([f"t{i}" for i in range(7)]), "switches")
        check_invariants(model, [3, 1, 4, 1, 5, 6])


def check_invariants(model, prompt):
    cfg = model.config
    t = model.run(prompt)
    n = len(prompt)
    for name, arr in t.items():
        assert not np.isnan(np.asarray(arr, dtype=float)).any(), name
    for l in range(cfg.n_layers):
        b = f"blocks.{l}."
        pattern = t[b + "attn.hook_pattern"]  # [head, query_pos, key_pos]
        assert pattern.shape == (cfg.n_heads, n, n)
        np.testing.assert_allclose(pattern.sum(-1), 1.0, atol=TOL)
        above = np.triu(np.ones((n, n), dtype=bool), k=1)  # later keys
        if cfg.sliding_window is not None:  # and keys the window has left behind
            above |= np.tril(np.ones((n, n), dtype=bool), k=-cfg.sliding_window)
        assert (pattern[:, above] == 0.0).all()  # exactly 0, not merely small
        assert (pattern >= 0).all()
        np.testing.assert_allclose(t[b + "attn.hook_z"], _z_reference(pattern, t[b + "attn.hook_v"]), atol=1e-9, rtol=1e-12)
        scores = t[b + "attn.hook_attn_scores"]
        assert np.isneginf(scores[:, above]).all() and np.isfinite(scores[:, ~above]).all()
        pre, attn_out, post = t[b + "hook_resid_pre"], t[b + "hook_attn_out"], t[b + "hook_resid_post"]
        mid_ref = pre + attn_out if cfg.residual else attn_out
        if cfg.mlp:
            np.testing.assert_array_equal(t[b + "hook_resid_mid"], mid_ref)
            mid = t[b + "hook_resid_mid"]
            post_ref = mid + t[b + "hook_mlp_out"] if cfg.residual else t[b + "hook_mlp_out"]
            np.testing.assert_array_equal(post, post_ref)
        else:
            np.testing.assert_array_equal(post, mid_ref)
        if l + 1 < cfg.n_layers:
            np.testing.assert_array_equal(t[f"blocks.{l + 1}.hook_resid_pre"], post)
    assert t["logits"].shape == (n, cfg.d_vocab)


@FAST
@given(small_models(), st.data())
def test_generation_raises_nothing_and_stays_in_the_vocabulary(model_prompt, data):
    model, prompt = model_prompt
    cfg = model.config
    room = cfg.n_ctx - len(prompt)
    new = data.draw(st.integers(0, room), label="max_new_tokens")
    temperature = data.draw(st.sampled_from([0.0, 0.3, 1.0, 7.5]), label="temperature")
    top_k = data.draw(st.one_of(st.none(), st.integers(1, cfg.d_vocab + 2)), label="top_k")
    top_p = data.draw(st.one_of(st.none(), st.floats(0.01, 1.0)), label="top_p")
    cache = data.draw(st.booleans(), label="cache")
    gen = model.generate(prompt, max_new_tokens=new, temperature=temperature, top_k=top_k, top_p=top_p,
                         seed=data.draw(st.integers(0, 2**63 - 1), label="seed"), cache=cache)
    assert len(gen.generated_ids) <= new
    assert all(0 <= i < cfg.d_vocab for i in gen.generated_ids)
    for step in gen.steps:
        final = step["sample.final"]
        assert abs(final.sum() - 1.0) < 1e-9 and not np.isnan(final).any()
        assert final[int(step["sample.token"])] > 0


# --------------------------------------------------------------------------------------------
# Prompts: any text is either a clear TracerError or tokens; what is shown is always printable

ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)


@FAST
@given(ANY_TEXT)
def test_any_prompt_text_is_tokens_or_a_clear_error(text):
    tiny = _tiny()
    try:
        ids = tiny.tokenize(text)
    except TracerError as e:
        assert str(e).startswith("prompt: ")
        assert not text.strip() or any("\ud800" <= c <= "\udfff" for c in text)
        return
    assert ids and all(0 <= i < 50257 for i in ids)
    assert tiny.tokenizer.decode(ids) == text  # nothing lost: the tokens spell the prompt
    for i in ids:
        shown = show_token(tiny.tokenizer.token_str(i))
        assert shown.isprintable(), repr(shown)


@FAST
@given(ANY_TEXT)
def test_shown_text_is_always_printable(text):
    assert show_token(text).isprintable()
    assert all(line.isprintable() for line in show_invisible(text).split("\n"))
    assert show_invisible(text).count("\n") == text.count("\n")
    if text.isprintable():
        assert show_invisible(text) == text and show_token(text) == text.replace(" ", "␣")


_TINY = []


def _tiny():
    if not _TINY:
        _TINY.append(tracer.load("tiny"))
    return _TINY[0]


# --------------------------------------------------------------------------------------------
# Loaders: random bytes and random TOML raise TracerError or nothing


def _write(data: bytes, suffix: str) -> Path:
    f = tempfile.NamedTemporaryFile(suffix=suffix, delete=False)
    f.write(data)
    f.close()
    return Path(f.name)


def _only_tracer_errors(fn, path: Path):
    try:
        fn(path)
    except TracerError:
        pass
    finally:
        path.unlink()


@pytest.fixture(scope="module")
def good_files(tmp_path_factory, make_model):
    d = tmp_path_factory.mktemp("good")
    cfg = Config(d_vocab=5, n_ctx=4, d_model=2, n_heads=1, n_layers=1, dtype="float64")
    save_weights(d / "w.npz", cfg, init_weights(cfg, 0))
    save_weights(d / "w.safetensors", cfg, init_weights(cfg, 0))
    m = make_model(cfg, ["a", "b", "c", "d", "<end>"], name="t")
    m.generate(["a", "b"], max_new_tokens=1).save(d / "trace.npz")
    return {k: (d / k).read_bytes() for k in ("w.npz", "w.safetensors", "trace.npz")}


def _mutations(draw_bytes: bytes, data) -> bytes:
    """A good file cut short, or with a few bytes overwritten: damage that gets past magic checks."""
    how = data.draw(st.sampled_from(["cut", "flip", "both"]), label="how")
    out = bytearray(draw_bytes)
    if how in ("flip", "both"):
        for _ in range(data.draw(st.integers(1, 8), label="flips")):
            i = data.draw(st.integers(0, len(out) - 1), label="at")
            out[i] = data.draw(st.integers(0, 255), label="byte")
    if how in ("cut", "both"):
        out = out[: data.draw(st.integers(0, len(out)), label="cut")]
    return bytes(out)


@FAST
@given(st.binary(max_size=300))
def test_random_bytes_to_every_loader(data):
    _only_tracer_errors(Generation.load, _write(data, ".npz"))
    _only_tracer_errors(load_npz, _write(b"PK\x03\x04" + data, ".npz"))
    _only_tracer_errors(load_weights_file, _write(data, ".npz"))
    _only_tracer_errors(load_weights_file, _write(data, ".safetensors"))
    _only_tracer_errors(load_safetensors, _write(len(data).to_bytes(8, "little") + data, ".safetensors"))
    _only_tracer_errors(scenario_mod.load_scenario, _write(data, ".toml"))


@FAST
@given(st.data())
def test_damaged_good_files(good_files, data):
    _only_tracer_errors(Generation.load, _write(_mutations(good_files["trace.npz"], data), ".npz"))
    _only_tracer_errors(load_weights_file, _write(_mutations(good_files["w.npz"], data), ".npz"))
    _only_tracer_errors(load_weights_file, _write(_mutations(good_files["w.safetensors"], data), ".safetensors"))


@st.composite
def safetensors_headers(draw):
    """A syntactically valid safetensors file whose JSON header says anything at all."""
    anything = st.recursive(
        st.none() | st.booleans() | st.integers(-3, 40) | st.floats(allow_nan=False) | st.text(max_size=4),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
        max_leaves=8,
    )
    entry = st.fixed_dictionaries({}, optional={
        "dtype": st.sampled_from(["F64", "F32", "I64", "BF16", "U8", "X9"]) | anything,
        "shape": st.lists(st.integers(-2, 5), max_size=3) | anything,
        "data_offsets": st.lists(st.integers(-4, 64), min_size=0, max_size=3) | anything,
    })
    header = draw(st.dictionaries(st.sampled_from(["W_E", "b_U", "__metadata__", "x"]), entry | anything, max_size=3))
    raw = json.dumps(header).encode()
    body = draw(st.binary(max_size=64))
    return len(raw).to_bytes(8, "little") + raw + body


@FAST
@given(safetensors_headers())
def test_safetensors_any_header(data):
    _only_tracer_errors(load_safetensors, _write(data, ".safetensors"))
    _only_tracer_errors(load_weights_file, _write(data, ".safetensors"))


# --------------------------------------------------------------------------------------------
# Random TOML documents for the scenario loader

KEYS = {
    "model": ["d_model", "n_heads", "d_head", "d_mlp", "n_layers", "n_ctx", "d_vocab", "positional", "layer_norm",
              "mlp", "residual", "scale_scores", "tied_unembed", "dtype", "seed", "ln_eps"],
    "tokenizer": ["vocab", "encoding", "end"],
    "weights": ["W_E", "W_pos", "W_U", "b_U", "blocks.0.attn.W_Q", "blocks.*.attn.W_O", "file"],
    "prompt": ["tokens", "text"],
    "generate": ["max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop", "cache"],
    "expect": ["name", "index", "value", "label", "tolerance", "step", "reduce"],
}
SMALL_INT = st.integers(-2, 5)
SCALAR = (SMALL_INT | st.booleans() | st.floats(-3, 3) | st.sampled_from([math.nan, math.inf, -math.inf])
          | st.sampled_from(["A", "B", "<end>", "gpt2", "learned", "none", "float64", "logits", "0:2", "sum"])
          | st.text(string.printable, max_size=6))
VALUE = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=4), max_leaves=12)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON's string escapes are TOML basic-string escapes
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


SENSIBLE = {  # values a scenario author would write, so that many documents get past the syntax
    "vocab": st.just(["A", "B", "C", "<end>"]), "encoding": st.sampled_from(["gpt2", "gpt9"]),
    "end": st.sampled_from(["<end>", "Q"]), "tokens": st.lists(st.sampled_from(["A", "B", "C", "Z"]), max_size=4),
    "text": st.sampled_from(["A B", "hello", ""]), "positional": st.sampled_from(["learned", "none", "sinusoidal", "x"]),
    "dtype": st.sampled_from(["float64", "float32", "int8"]), "name": st.sampled_from(
        ["logits", "blocks.0.attn.hook_pattern", "sample.token", "generated", "tokens", "blocks.9.hook_z"]),
    "index": st.lists(st.integers(-1, 3) | st.just("0:2"), max_size=3), "reduce": st.sampled_from(["sum", "argmax", "x"]),
    "W_E": st.just([[0.5, -1.0]] * 4), "b_U": st.lists(st.floats(allow_nan=True), min_size=4, max_size=4),
}


@st.composite
def valid_ish_documents(draw):
    """A small valid scenario, then up to three random edits (a value replaced, a key added or dropped)."""
    d_model, n_heads = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    doc = {
        "model": {"d_model": d_model, "n_heads": n_heads, "d_head": draw(st.integers(1, 2)),
                  "n_layers": draw(st.integers(1, 2)), "n_ctx": draw(st.integers(4, 8)), "dtype": "float64",
                  **{k: draw(st.booleans()) for k in draw(st.lists(st.sampled_from(
                      ["layer_norm", "mlp", "residual", "scale_scores", "tied_unembed"]), unique=True))}},
        "tokenizer": {"vocab": ["A", "B", "C", "<end>"]},
        "prompt": {"tokens": draw(st.lists(st.sampled_from(["A", "B", "C"]), min_size=1, max_size=3))},
        "generate": {"max_new_tokens": draw(st.integers(0, 2)), "temperature": draw(st.sampled_from([0, 0.5])),
                     "seed": draw(st.integers(0, 9))},
        "expect": [{"name": draw(SENSIBLE["name"]), "index": draw(SENSIBLE["index"]),
                    "value": draw(st.floats(-1, 1) | st.lists(st.floats(-1, 1), max_size=3))}
                   for _ in range(draw(st.integers(0, 2)))],
    }
    for _ in range(draw(st.integers(0, 3))):
        table = draw(st.sampled_from(sorted(KEYS)))
        how = draw(st.sampled_from(["set", "drop", "drop_table"]))
        target = doc.setdefault(table, [] if table == "expect" else {})
        if table == "expect":
            target = target[0] if target else (target.append({}) or target[0])
        if how == "drop_table":
            doc.pop(table, None)
        elif how == "drop" and target:
            target.pop(draw(st.sampled_from(sorted(target))))
        else:
            key = draw(st.sampled_from(KEYS[table]) | st.text(string.ascii_lowercase, min_size=1, max_size=4))
            target[key] = draw(SENSIBLE[key] | VALUE if key in SENSIBLE else VALUE)
    lines = []
    for table, body in doc.items():
        for entry in body if isinstance(body, list) else [body]:
            lines.append(f"[[{table}]]" if table == "expect" else f"[{table}]")
            lines += [f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"


@st.composite
def random_documents(draw):
    """A TOML document of the scenario's tables with random known (and some unknown) keys."""
    lines = []
    if draw(st.booleans()):
        lines.append(f"title = {toml_value(draw(st.text(max_size=8)))}")
    for table, keys in KEYS.items():
        if draw(st.integers(0, 4)) == 0:
            continue
        key_st = st.sampled_from(keys) | st.text(string.ascii_lowercase + "_", min_size=1, max_size=6)
        chosen = draw(st.lists(key_st, max_size=5, unique=True))
        body = {k: draw(SENSIBLE[k] | VALUE if k in SENSIBLE else VALUE) for k in chosen}
        if table == "model":  # keep sizes small so a valid document never allocates much
            for k in ("d_model", "n_layers", "n_ctx", "d_mlp", "d_head", "n_heads"):
                body.setdefault(k, draw(st.integers(1, 3)))
        lines.append(f"[[{table}]]" if table == "expect" else f"[{table}]")
        lines += [f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}" for k, v in body.items()]
    if draw(st.integers(0, 5)) == 0:
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(["[model", "x = ", "= 1", "[[expect]", "a = [1,"])))
    return "\n".join(lines) + "\n"


toml_documents = st.one_of(valid_ish_documents(), random_documents())


def _load_and_replay(path: Path) -> None:
    done = run_replay(scenario_mod.load_scenario(path))
    json.loads(dumps(replay_json(done)))  # `replay --json` is valid JSON


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(toml_documents)
def test_random_toml_scenarios_raise_only_tracer_errors(doc):
    with mock.patch.object(scenario_schema, "MAX_WEIGHT_BYTES", 4_000_000):  # a random vocabulary of 50,257 is fine
        _only_tracer_errors(_load_and_replay, _write(doc.encode(), ".toml"))


@FAST
@given(st.data())
def test_damaged_shipped_scenarios(data):
    shipped = sorted(scenario_mod.shipped().values())
    assume(shipped)
    path = data.draw(st.sampled_from(shipped), label="scenario")
    text = path.read_text()
    lines = text.splitlines()
    i = data.draw(st.integers(0, len(lines) - 1), label="line")
    how = data.draw(st.sampled_from(["drop", "dup", "garble", "number"]), label="how")
    if how == "drop":
        del lines[i]
    elif how == "dup":
        lines.insert(i, lines[i])
    elif how == "garble":
        j = data.draw(st.integers(0, max(len(lines[i]) - 1, 0)), label="at")
        lines[i] = lines[i][:j] + data.draw(st.sampled_from(["]", "[", '"', "=", "nan", "1e999", "-1", ","])) + lines[i][j:]
    else:
        lines[i] = lines[i].replace("1", data.draw(st.sampled_from(["-1", "0", "9", "1.5", "nan"])), 1)
    with mock.patch.object(scenario_schema, "MAX_WEIGHT_BYTES", 40_000_000):  # gpt2-medium's shape: refused as too large
        _only_tracer_errors(_load_and_replay, _write("\n".join(lines).encode(), ".toml"))


# --------------------------------------------------------------------------------------------
# A trace file that loads but was tampered with: `tracer show` exits 0 or 2, never 1

ODD = st.sampled_from([None, -1, 0, 1, 3, 99999, 2.5, "x", [], {}, [1, 2], True, {"kind": "words", "vocab": ["a"]}])


@pytest.fixture(scope="module")
def gpt2_trace(tmp_path_factory, gpt2_weights):
    d = tmp_path_factory.mktemp("trace")
    gpt2_weights(d / "w.npz", 0)
    tracer.load(str(d / "w.npz")).generate("hello there you", max_new_tokens=2, temperature=1.0, seed=1).save(d / "g.npz")
    return dict(np.load(d / "g.npz", allow_pickle=False))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_tampered_traces_show_or_refuse(gpt2_trace, tmp_path, runner, data):
    arrays = dict(gpt2_trace)
    meta = json.loads(str(arrays.pop("meta")))
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        how = data.draw(st.sampled_from(["meta", "nested", "array", "config"]), label="how")
        if how == "meta" and meta:
            key = data.draw(st.sampled_from(sorted(meta)), label="key")
            if data.draw(st.booleans(), label="drop"):
                meta.pop(key)
            else:
                meta[key] = data.draw(ODD, label="value")
        elif how == "nested":
            v = meta.get(data.draw(st.sampled_from(["steps", "prompt_ids", "generated_ids", "token_strs", "settings"])))
            if isinstance(v, list) and v:
                v[data.draw(st.integers(0, len(v) - 1))] = data.draw(ODD)
            elif isinstance(v, dict) and v:
                v[data.draw(st.sampled_from(sorted(v)))] = data.draw(ODD)
        elif how == "array":
            name = data.draw(st.sampled_from(sorted(arrays)), label="array")
            a = arrays[name]
            with np.errstate(invalid="ignore"):  # -inf scores cast to int
                as_int = a.astype(np.int64) * 7
            arrays[name] = data.draw(st.sampled_from(
                [a.ravel(), a.reshape(-1)[:1], np.zeros(()), a.T, np.full(a.shape, np.nan), as_int]), label="damage")
        elif how == "config" and isinstance(meta.get("config"), dict) and meta["config"]:
            meta["config"][data.draw(st.sampled_from(sorted(meta["config"])))] = data.draw(ODD | st.just("none"))
    path = tmp_path / f"t{abs(hash(repr(meta))) % 10**8}.npz"
    np.savez(path, **arrays, meta=np.array(json.dumps(meta)))
    r = runner.invoke(app, ["show", str(path)])
    assert r.exit_code in (0, 2), r.stderr
    assert "Traceback" not in r.stdout + r.stderr and "internal error" not in r.stderr
    if r.exit_code == 2:
        assert r.stderr.startswith("tracer: ") and len(r.stderr.strip().splitlines()) == 1


@FAST
@given(text=ANY_TEXT)
def test_tokens_command_on_any_text(runner, text):
    """Any argument: a token table (exit 0) or one clear line (exit 2); what prints holds no control codes."""
    r = runner.invoke(app, ["tokens", "--", text])  # "--": a prompt may start with "-"
    assert r.exit_code in (0, 2), r.stderr
    if r.exit_code == 2:
        assert r.stderr.startswith("tracer: prompt: ") and len(r.stderr.strip().splitlines()) == 1
    assert all(line.isprintable() for line in r.stdout.split("\n"))


OPTION_VALUES = {
    "--max-new-tokens": ["-1", "0", "1", "2", "40", "1.5", "x", "99999999999999999999"],
    "--temperature": ["0", "-1", "0.7", "1e-320", "1e308", "nan", "inf", "-0.0", "x"],
    "--top-k": ["0", "1", "3", "-2", "50258", "99999999999999999999"],
    "--top-p": ["0", "0.5", "1", "1.0000001", "-0.1", "nan", "1e-300"],
    "--seed": ["0", "-1", "7", "18446744073709551616", "x"],
    "--token": ["A", "B", "Z", "0", "1", "99", "-1", "?", "AA", ""],
    "--layer": ["0", "1", "all", "ALL", "-1", "2", "x", ""],
    "--head": ["0", "1", "all", "2", "-1", " 1 "],
    "--dims": ["0", "1", "3", "-5", "1000000"],
    "--precision": ["0", "3", "12", "13", "-1"],
    "--truncate": ["left", "right", "middle", ""],
    "--stop": ["", "the", "\x00"],
}


@pytest.fixture(scope="module")
def small_weights(tmp_path_factory, gpt2_weights):
    return gpt2_weights(tmp_path_factory.mktemp("w") / "w.npz", 0, n_ctx=8)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(options=st.dictionaries(st.sampled_from(sorted(OPTION_VALUES)), st.none(), min_size=1, max_size=5), data=st.data(),
       prompt=st.sampled_from(["hi", "hi there you", "a b c d e f g h i j", "👋", "\x1b[2J"]),
       flags=st.lists(st.sampled_from(["--no-cache", "--verify-cache", "--full", "--json"]), unique=True, max_size=2))
def test_any_trace_options_succeed_or_refuse(small_weights, runner, options, data, prompt, flags):
    args = ["trace", prompt, "--model", str(small_weights), *flags]
    for option in options:
        args += [option, data.draw(st.sampled_from(OPTION_VALUES[option]), label=option)]
    with warnings.catch_warnings():  # numpy's RuntimeWarnings would print on stderr: make them fail instead
        warnings.simplefilter("error", RuntimeWarning)
        r = runner.invoke(app, args)
    assert r.exit_code in (0, 2), (args, r.stderr)
    assert "Traceback" not in r.stdout + r.stderr and "internal error" not in r.stderr, (args, r.stderr)
    assert "\x1b" not in r.stdout


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=valid_ish_documents())
def test_replay_command_on_valid_ish_scenarios(runner, doc):
    """The whole command, rendering included (full view, every layer): exit 0 or 2, never a bug."""
    path = _write(doc.encode(), ".toml")
    try:
        with mock.patch.object(scenario_schema, "MAX_WEIGHT_BYTES", 4_000_000):
            r = runner.invoke(app, ["replay", str(path), "--full", "--layer", "all"])
    finally:
        path.unlink()
    assert r.exit_code in (0, 2), r.stderr
    assert "internal error" not in r.stderr and "\x1b" not in r.stdout
