"""The third hostile audit (issue 39): files and names (13, 14, 16, 17) and long prompts on real
models (18). The server's findings are in test_serve_guard.py, the chat templates' in test_chat.py.

The rule every finding broke is the README's: bad input is one line on stderr and exit 2, in
bounded time and memory; nothing tracer prints from a file or a prompt is read as markup; a file
opens no other file on its own say-so.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import tracer
from tracer.cli import app
from tracer.errors import TracerError

from .test_gguf import _ollama_store
from .test_hostile_files import one_line  # exit 2, one line naming the problem

DATA = Path(__file__).parent / "data"


# --------------------------------------------------------------------------- 14: names are text, never emoji codes or markup


@pytest.mark.parametrize("name", [":cat:", ":m:", "[bold red]x[red]", ":smile_cat:[x]"])
def test_names_from_the_store_are_printed_as_written(tmp_path, monkeypatch, runner, gguf_of_folder, name):
    """`tracer models` printed `ollama:m:ab` as `ollamaⓂab` and `:cat:.gguf` as `🐱.gguf` (Rich's emoji codes)."""
    src = gguf_of_folder(DATA / "qwen2-tiny", "qwen2")
    tag = name.strip(":[]/ ").replace(" ", "-").replace("[", "").replace("]", "").replace("/", "") or "t"
    monkeypatch.setenv("OLLAMA_MODELS", str(_ollama_store(tmp_path, src, name=("library", "m", tag))))
    lms = tmp_path / "lms" / "someone" / "repo"
    lms.mkdir(parents=True)
    (lms / f"{name}.gguf").write_bytes(src.read_bytes())
    monkeypatch.setenv("LMSTUDIO_MODELS", str(tmp_path / "lms"))
    r = runner.invoke(app, ["models"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert f"ollama:m:{tag}" in r.output and f"{name}.gguf" in r.output, r.output
    assert not {"🐱", "Ⓜ", "😸"} & set(r.output)


def test_a_model_file_named_with_emoji_codes_is_named_as_written_in_the_walkthrough(tmp_path, runner, gguf_of_folder):
    path = tmp_path / ":cat: [bold]x[red] :m:.gguf"
    path.write_bytes(gguf_of_folder(DATA / "qwen2-tiny", "qwen2").read_bytes())
    r = runner.invoke(app, ["trace", "hello", "--model", str(path), "-n", "1"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert ":cat: [bold]x[red] :m:" in r.stdout and not {"🐱", "Ⓜ"} & set(r.stdout)


def test_a_prompt_with_emoji_codes_is_shown_as_typed(runner):
    r = runner.invoke(app, ["tokens", ":cat::m:"], env={"COLUMNS": "120"})
    assert r.exit_code == 0 and "cat" in r.stdout and not {"🐱", "Ⓜ"} & set(r.stdout)


# --------------------------------------------------------------------------- 16: a manifest that is not a file says what it is


@pytest.mark.parametrize("kind, says", [("folder", "is a folder"), ("fifo", "a named pipe"), ("link", "a link to nothing"),
                                        ("device", "a character device")])
def test_an_ollama_manifest_that_is_not_a_file_is_named_as_what_it_is(tmp_path, monkeypatch, gguf_of_folder, kind, says):
    home = _ollama_store(tmp_path, gguf_of_folder(DATA / "qwen2-tiny", "qwen2"))
    manifest = home / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "latest"
    manifest.unlink()
    if kind == "folder":
        manifest.mkdir()
    elif kind == "fifo":
        os.mkfifo(manifest)
    elif kind == "link":
        manifest.symlink_to(tmp_path / "nowhere")
    else:
        manifest.symlink_to("/dev/null")
    monkeypatch.setenv("OLLAMA_MODELS", str(home))
    with pytest.raises(TracerError, match=says) as e:
        tracer.load("ollama:tiny")
    assert "no manifest" not in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(TracerError, match="no manifest"):  # one that is not there is still "no manifest"
        tracer.load("ollama:other")


def test_tracer_models_lists_a_manifest_that_is_a_fifo_as_one(tmp_path, monkeypatch, runner, gguf_of_folder):
    home = _ollama_store(tmp_path, gguf_of_folder(DATA / "qwen2-tiny", "qwen2"))
    os.mkfifo(home / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "pipe")
    monkeypatch.setenv("OLLAMA_MODELS", str(home))
    monkeypatch.setenv("LMSTUDIO_MODELS", str(tmp_path / "none"))
    r = runner.invoke(app, ["models"], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    row = next(line for line in r.stdout.splitlines() if "ollama:tiny:pipe" in line)
    assert "named pipe" in row and "ollama:tiny:latest" in r.stdout


def test_an_ollama_blob_that_is_not_a_file_is_named_as_what_it_is(tmp_path, monkeypatch, gguf_of_folder):
    home = _ollama_store(tmp_path, gguf_of_folder(DATA / "qwen2-tiny", "qwen2"))
    blob = next((home / "blobs").iterdir())
    blob.unlink()
    os.mkfifo(blob)
    monkeypatch.setenv("OLLAMA_MODELS", str(home))
    with pytest.raises(TracerError, match="a named pipe"):
        tracer.load("ollama:tiny")


# --------------------------------------------------------------------------- 17: a long control token costs little


def _with_long_token(kind: str, token: str):
    """A tokenizer whose vocabulary has `token` as a control (special added) token: a llama GGUF
    vocabulary, a gpt2 (byte-level) one, or a tokenizer.json; returns (tokenizer, the token's id, a
    reference encoder from the `tokenizers` package or None)."""
    from tracer.tokenizers.gguf_tokenizer import tokenizer_from_gguf, tokenizer_json_from_gguf
    from tracer.tokenizers.hf_tokenizer import HFTokenizer

    from .test_gguf_tokenizer import SP_GGUF, _gpt2_meta, _meta

    if kind == "tokenizer.json":
        data = json.loads((DATA / "tokenizers" / "qwen2-like.json").read_text(encoding="utf-8"))
        i = max(t["id"] for t in data["added_tokens"]) + 1
        data["added_tokens"].append({"id": i, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
                                     "normalized": False, "special": True})
        tok = HFTokenizer("long", data=data)
        ref = None
        if len(token) < 100_000:
            tokenizers = pytest.importorskip("tokenizers")
            ref = tokenizers.Tokenizer.from_str(json.dumps(data))
        return tok, i, ref
    meta = dict(_meta(SP_GGUF)) if kind == "gguf-llama" else _gpt2_meta("qwen2-like", "qwen2")
    meta["tokenizer.ggml.tokens"] = [str(t) for t in meta["tokenizer.ggml.tokens"]] + [token]
    meta["tokenizer.ggml.token_type"] = np.array(list(meta["tokenizer.ggml.token_type"]) + [3], np.int32)
    if "tokenizer.ggml.scores" in meta:
        meta["tokenizer.ggml.scores"] = np.array(list(meta["tokenizer.ggml.scores"]) + [0.0], np.float32)
    ref = None
    if len(token) < 100_000:
        tokenizers = pytest.importorskip("tokenizers")
        ref = tokenizers.Tokenizer.from_str(json.dumps(tokenizer_json_from_gguf(meta)))
    return tokenizer_from_gguf(meta, "long.gguf"), len(meta["tokenizer.ggml.tokens"]) - 1, ref


@pytest.mark.parametrize("kind", ["gguf-llama", "gguf-gpt2", "tokenizer.json"])
def test_a_long_control_token_is_matched_whole_as_tokenizers_does(kind):
    for token in ["<|" + "x" * 300 + "|>", "<" + "ab" * 1_000 + ">", "<" + "é" * 5_000 + ">"]:
        tok, i, ref = _with_long_token(kind, token)
        for text in ["A B C", f"A {token} C", f"{token}{token}", f"x{token[:-1]} {token[1:]}", f"<|{token}"]:
            got = tok.encode(text, add_special_tokens=False)
            assert got == ref.encode(text, add_special_tokens=False).ids, (kind, text[:20])
        assert tok.encode(f"A {token} C", add_special_tokens=False).count(i) == 1


@pytest.mark.parametrize("kind", ["gguf-llama", "gguf-gpt2", "tokenizer.json"])
def test_a_megabyte_control_token_costs_milliseconds_and_a_few_bytes_a_character(kind):
    """A 5 MB control token took 12.5 s and 544 MB to tokenize "A B C" (the added tokens were one regex:
    compiling it costs about 8 µs and 100 bytes a character)."""
    import time
    import tracemalloc

    n = 2_000_000
    token = "<" + "x" * n + ">"
    tracemalloc.start()
    try:
        t = time.process_time()
        tok, i, _ = _with_long_token(kind, token)
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        ids = tok.encode("A B C " + token + " D", add_special_tokens=False)
        took = time.process_time() - t
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert ids.count(i) == 1 and ids[0] != i
    assert took < 3.0, f"{took:.2f} s"  # it took 16 s for 2 MB before (tracemalloc makes both slower)
    assert peak < 8 * n, f"{peak / n:.1f} bytes a character"


def test_too_many_long_added_tokens_are_refused_with_the_numbers():
    from tracer.tokenizers.hf_tokenizer import HFTokenizer

    data = json.loads((DATA / "tokenizers" / "qwen2-like.json").read_text(encoding="utf-8"))
    first = max(t["id"] for t in data["added_tokens"]) + 1
    for k in range(300):
        data["added_tokens"].append({"id": first + k, "content": f"<{k}" + "y" * 300 + ">", "single_word": False,
                                     "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    with pytest.raises(TracerError, match=r"300 added tokens longer than 256 characters \(the longest 305\); tracer takes at most 256"):
        HFTokenizer("many", data=data)


# --------------------------------------------------------------------------- 13: a saved trace opens no file it names


@pytest.fixture(scope="module")
def folder_trace(tmp_path_factory):
    """A trace of the qwen2-tiny folder (its tokenizer read from tokenizer.json), saved, and the walkthrough
    `tracer trace` printed for it."""
    from typer.testing import CliRunner

    d = tmp_path_factory.mktemp("folder-trace")
    r = CliRunner().invoke(app, ["trace", "The quick brown fox", "--model", str(DATA / "qwen2-tiny"), "-n", "2",
                                 "--save", str(d / "t.npz"), "--no-pager"], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    return d / "t.npz", r.stdout


def _with_tokenizer(src: Path, dst: Path, spec) -> Path:
    arrays = dict(np.load(src, allow_pickle=False))
    meta = json.loads(str(arrays["meta"]))
    meta["tokenizer"] = spec
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(dst, **arrays)
    return dst


def _opened(run) -> list[str]:
    """The paths `run()` opened (Python's audit events)."""
    import sys

    seen, on = [], [True]

    def hook(event, args):
        if on[0] and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            seen.append(os.fsdecode(args[0]))

    sys.addaudithook(hook)
    try:
        run()
    finally:
        on[0] = False
    return seen


def test_a_saved_trace_holds_its_tokens_not_a_path(folder_trace, runner):
    path, printed = folder_trace
    meta = json.loads(str(np.load(path, allow_pickle=False)["meta"]))
    assert meta["tokenizer"]["kind"] == "table" and "path" not in meta["tokenizer"]
    assert str(DATA) not in json.dumps(meta["tokenizer"])
    tok = tracer.load(str(DATA / "qwen2-tiny")).tokenizer
    assert meta["tokenizer"]["tokens"] == [tok.token_str(i) for i in range(tok.n_vocab)]
    assert meta["tokenizer"]["sha256"] == tok.sha256 and meta["tokenizer"]["end_id"] == tok.end_id
    shown = _opened(lambda: runner.invoke(app, ["show", str(path), "--no-pager"], env={"COLUMNS": "100"}))
    assert not [p for p in shown if "qwen2-tiny" in p], shown  # the model's files are not read again
    r = runner.invoke(app, ["show", str(path), "--no-pager"], env={"COLUMNS": "100"})
    assert r.exit_code == 0 and r.stdout == printed


@pytest.mark.parametrize("kind", ["tokenizer.json", "gguf"])
@pytest.mark.parametrize("target", ["secret", "fifo", "folder", "missing"])
def test_show_opens_no_file_a_trace_names(folder_trace, tmp_path, runner, kind, target):
    """A trace's tokenizer spec named any path: `show` opened it and quoted its first bytes, its size and
    whether it existed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    secret = elsewhere / "secret.json"
    if target == "secret":
        secret.write_text('{"model": {"SECRET-TOKEN-1234": 1}}' + " " * 12345)
    elif target == "fifo":
        os.mkfifo(secret)
    elif target == "folder":
        secret.mkdir()
        shutil.copy(DATA / "qwen2-tiny" / "tokenizer.json", secret / "tokenizer.json")
    (tmp_path / "traces").mkdir()
    bad = _with_tokenizer(folder_trace[0], tmp_path / "traces" / "bad.npz", {"kind": kind, "path": str(secret)})
    opened = _opened(lambda: runner.invoke(app, ["show", str(bad)]))
    assert not [p for p in opened if "elsewhere" in p], opened
    err = one_line(runner.invoke(app, ["show", str(bad)]), "opens no file a trace names")
    for leak in ("SECRET", "12,3", "1234", "no such", "not a regular", "folder, not", "secret.json"):
        assert leak not in err, (leak, err)


def test_an_older_trace_whose_tokenizer_is_in_its_own_folder_still_shows(folder_trace, tmp_path, runner):
    shutil.copy(DATA / "qwen2-tiny" / "tokenizer.json", tmp_path / "tokenizer.json")
    old = _with_tokenizer(folder_trace[0], tmp_path / "old.npz", {"kind": "tokenizer.json", "path": str(tmp_path)})
    r = runner.invoke(app, ["show", str(old), "--no-pager"], env={"COLUMNS": "100"})
    assert r.exit_code == 0 and "tokenizer.json vocabulary of 1,024 tokens" in " ".join(r.stdout.split())
    dotdot = _with_tokenizer(folder_trace[0], tmp_path / "up.npz", {"kind": "tokenizer.json", "path": "../x/tokenizer.json"})
    one_line(runner.invoke(app, ["show", str(dotdot)]), "opens no file a trace names")


@pytest.mark.parametrize("name", ["tokenizer.json", "sub/tokenizer.json"])
def test_a_link_in_the_traces_folder_to_a_file_elsewhere_is_not_followed(folder_trace, tmp_path, runner, name):
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(DATA / "qwen2-tiny" / "tokenizer.json", outside / "tokenizer.json")
    here = tmp_path / "here"
    (here / "sub").mkdir(parents=True)
    (here / name).symlink_to(outside / "tokenizer.json")
    old = _with_tokenizer(folder_trace[0], here / "old.npz", {"kind": "tokenizer.json", "path": str(here / Path(name).parent)})
    opened = _opened(lambda: runner.invoke(app, ["show", str(old)]))
    assert not [p for p in opened if "outside" in p], opened
    one_line(runner.invoke(app, ["show", str(old)]), "opens no file a trace names")


@pytest.mark.parametrize("spec, says", [
    ({"kind": "table", "tokens": "abc"}, "must be a list of the tokens' texts"),
    ({"kind": "table", "tokens": [1, 2]}, "must be a list of the tokens' texts"),
    ({"kind": "table", "tokens": ["a", "b"], "end_id": 7}, "names an end token that is not one of its ids"),
    ({"kind": "table", "of": "gguf"}, "without its tokens' texts"),
])
def test_a_damaged_token_table_is_one_line(folder_trace, tmp_path, runner, spec, says):
    one_line(runner.invoke(app, ["show", str(_with_tokenizer(folder_trace[0], tmp_path / "t.npz", spec))]), says)


def test_the_api_saves_the_table_too(tmp_path):
    m = tracer.load(str(DATA / "qwen2-tiny"))
    m.run("hello world").save(tmp_path / "run.npz")
    m.generate("hello world", max_new_tokens=1).save(tmp_path / "gen.npz")
    for name in ("run.npz", "gen.npz"):
        spec = tracer.Generation.load(tmp_path / name).meta["tokenizer"]
        assert spec["kind"] == "table" and len(spec["tokens"]) == m.tokenizer.n_vocab


# --------------------------------------------------------------------------- 18: a long prompt is weighed before its first pass


def smollm2_shape(n_layers: int = 30):
    """SmolLM2-135M's shape (30 layers, d_model 576, 9 heads of 64 over 3 key/value heads, SwiGLU of 1,536,
    RoPE, RMS norm, a context of 8,192) with GPT-2's vocabulary, so that tracer's own files carry it."""
    from tracer.core.config import Config

    return Config(d_vocab=50257, n_ctx=8192, d_model=576, n_heads=9, n_kv_heads=3, d_head=64, d_mlp=1536,
                  n_layers=n_layers, positional="rope", norm="rms", mlp="swiglu", tied_unembed=True, rope_theta=100000.0)


def words(n: int, seed: int = 1) -> str:
    import random

    # the 5,000 most frequent of word_tokens.txt: the list common_words.txt held
    common = (Path(tracer.__file__).parent / "run" / "word_tokens.txt").read_text().split()[:5000]
    rng = random.Random(seed)
    return " ".join(rng.choice(common) for _ in range(n))


@pytest.mark.parametrize("n, cache", [(300, True), (700, True), (300, False)])
def test_the_estimate_is_what_a_run_holds(n, cache):
    """`footprint` against the store's own count of what it holds, and tracemalloc's peak (an upper bound
    within a factor of two of it)."""
    from tracer.core.params import init_weights
    from tracer.model import Model
    from tracer.run.footprint import footprint
    from tracer.tokenizers.tokens import get_tokenizer

    cfg = smollm2_shape(2)
    m = Model(cfg, init_weights(cfg, 0), get_tokenizer("gpt2"), "smol-shape")
    est = footprint(cfg, n, 2, cache=cache)
    held, peak = held_and_peak(m, list(np.arange(n) % 5000 + 100), cache)
    assert abs(est.recorded - held) < 0.05 * held, (est.recorded, held)
    assert 0.5 * est.total < peak < est.total, (peak, est.total)


def held_and_peak(m, ids: list[int], cache: bool) -> tuple[int, int]:
    """(bytes the store holds, tracemalloc's peak) of a generation of 2 new tokens after `ids`."""
    import tracemalloc

    tracemalloc.start()
    try:
        gen = m.generate(ids, max_new_tokens=2, cache=cache)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return sum(step.arrays.nbytes() for step in gen.steps), peak


@pytest.mark.parametrize("folder", ["gpt-oss-tiny", "qwen2-moe-tiny", "qwen3-5-tiny", "gemma4-tiny", "gemma4-moe-tiny", "olmo3-tiny"])
def test_the_estimate_is_what_a_run_of_every_kind_holds(folder):
    """Sinks, routed experts, linear attention (its state a recipe), Gemma 4's per-layer sizes and shared
    keys, sliding windows: the estimate within 5% of the store's own count, and above tracemalloc's peak."""
    from tracer.run.footprint import footprint

    m = tracer.load(str(DATA / folder))
    n = min(m.config.n_ctx - 3, 300)
    for cache in (True, False):
        est = footprint(m.config, n, 2, cache=cache)
        held, peak = held_and_peak(m, list(np.arange(n) % 50 + 3), cache)
        assert abs(est.recorded - held) < 0.05 * held, (cache, est.recorded, held)
        assert peak < est.total, (cache, peak, est.total)


def test_a_long_prompt_that_cannot_fit_is_refused_before_its_first_pass_with_the_numbers():
    from tracer.core.params import init_weights
    from tracer.model import Model
    from tracer.run.footprint import check_room, footprint
    from tracer.tokenizers.tokens import get_tokenizer

    cfg = smollm2_shape()
    small = Model(smollm2_shape(1), init_weights(smollm2_shape(1), 0), get_tokenizer("gpt2"), "smol-shape")
    small.config = cfg  # the estimate reads the config only: SmolLM2's 30 layers, without 30 layers of weights
    n = 6_000
    need = footprint(cfg, n, 1)
    assert need.attention == 30 * 9 * (n * (n + 1) // 2) * 4  # heads × positions² / 2 a layer, float32
    with pytest.raises(TracerError) as e:
        check_room(small, n, 1, room=8 * 10**9)
    said = str(e.value)
    assert said.startswith("prompt: 6,000 tokens on smol-shape: the run would record ") and "\n" not in said
    assert "30 layers × 9 heads × 6,000² / 2" in said and "8 GB is available" in said and "--truncate left" in said
    fit = int(said.split("about ")[1].split(" tokens fit")[0].replace(",", ""))
    assert footprint(cfg, fit, 1).total <= 8 * 10**9 < footprint(cfg, fit + 1, 1).total
    assert check_room(small, n, 1, truncate="left", room=8 * 10**9) == fit
    assert check_room(small, 500, 1, room=8 * 10**9) == 500


@pytest.fixture(scope="module")
def smol_file(tmp_path_factory):
    """A weights file of SmolLM2's shape (random weights, 540 MB), written once."""
    from tracer.core.params import init_weights
    from tracer.formats.files import save_weights

    path = tmp_path_factory.mktemp("smol") / "smol-shape.safetensors"
    save_weights(path, smollm2_shape(), init_weights(smollm2_shape(), 0))
    return path


@pytest.mark.slow
def test_5000_words_on_a_smollm2_shaped_model_are_refused_in_seconds(smol_file, limited):
    """It showed a blank screen, grew past 11 GB and ended after 76 s in "out of memory", exit 1."""
    r = limited("trace", words(5000), "--model", smol_file, "-n", "1", "--section", "predict", memory=3 << 30, seconds=60)
    assert r.signal is None and r.returncode == 2, (r.returncode, r.signal, r.stderr[-1000:])
    err = r.stderr.strip()
    assert err.count("\n") == 0 and err.startswith("tracer: prompt: 5,000 tokens on smol-shape.safetensors: the run "
                                                    "would record "), err
    assert "30 layers × 9 heads × 5,000² / 2" in err and "is available" in err and "--truncate left" in err
    assert r.seconds < 30


def test_truncate_keeps_what_fits_and_runs(tmp_path, runner, monkeypatch):
    """--truncate left keeps the prompt's last tokens that fit the memory available (here made 700 MB),
    says so on stderr, and runs them."""
    from tracer.core.params import init_weights
    from tracer.formats.files import save_weights
    from tracer.run import footprint
    from tracer.tokenizers.tokens import get_tokenizer

    path = tmp_path / "smol-4.safetensors"
    save_weights(path, smollm2_shape(4), init_weights(smollm2_shape(4), 0))
    monkeypatch.setattr(footprint, "available_bytes", lambda: 700 * 10**6)
    prompt = words(3000)
    r = runner.invoke(app, ["trace", prompt, "--model", str(path), "-n", "1", "--truncate", "left", "--json"])
    assert r.exit_code == 0, r.stderr
    kept = int(r.stderr.split("about ")[1].split(" fit")[0].replace(",", ""))
    ids = get_tokenizer("gpt2").encode(prompt)
    assert json.loads(r.stdout)["prompt_ids"] == ids[-kept:] and 0 < kept < len(ids)
    assert footprint.footprint(smollm2_shape(4), kept, 1, footprint_names()).total <= 0.9 * 700 * 10**6
    one_line(runner.invoke(app, ["trace", prompt, "--model", str(path), "-n", "1", "--json"]), f"about {kept:,} tokens fit")


def footprint_names():
    from tracer.run.generate import recording_plan

    return recording_plan(json=True)["names"]
