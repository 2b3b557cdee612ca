"""Models bigger than memory (issue 23): weights kept as stored, expanded layer by layer under a budget.

The reference is tracer's own fully expanded run of the same file (the reading there was before
layers streamed, itself checked against transformers and the gguf package elsewhere): a tiny
budget forces every layer to be expanded when a pass reaches it, and every recorded number must
be bit for bit the same (np.array_equal), for each family, float16/bfloat16 safetensors and GGUF
storage types, a single pass and generation with the KV cache.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import tracer
import tracer.core.fast
from tracer.errors import TracerError
from tracer.core.memory import Size, parse_size

DATA = Path(__file__).parent / "data"
FOLDERS = ["llama-tiny", "llama-tiny-bf16", "qwen2-tiny", "mistral-tiny", "qwen3-tiny", "olmo2-tiny", "phi3-tiny",
           "gemma2-tiny", "gemma3-tiny", "qwen3-5-tiny", "smollm3-tiny", "olmo3-tiny"]
PROMPT = [1, 5, 9, 2, 7]


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Unembedding blocks of 64 KB (256 rows at d_model 64), so that a 1,024-token vocabulary is cut in
    four: the same blocks in both runs, which is what makes them equal."""
    monkeypatch.setattr(tracer.core.fast, "UNEMBED_BLOCK_BYTES", 2**16)


def one_layer_budget(path) -> tuple:
    """The model expanded whole, and the same file under a budget of one layer (streamed)."""
    whole = tracer.load(str(path))
    per = whole.expansion["layer_bytes"]  # its largest layer (Qwen3.5's are of two kinds): less than two
    streamed = tracer.load(str(path), memory=max(per, 1))
    return whole, streamed


def assert_same_arrays(a, b) -> None:
    assert set(a.arrays) == set(b.arrays)
    for k in a.arrays:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), k


def assert_same_generation(whole, streamed, **settings) -> None:
    ga, gb = whole.generate(PROMPT, max_new_tokens=3, **settings), streamed.generate(PROMPT, max_new_tokens=3, **settings)
    assert ga.generated_ids == gb.generated_ids
    assert len(ga.steps) == len(gb.steps)
    for sa, sb in zip(ga.steps, gb.steps):
        assert_same_arrays(sa, sb)


@pytest.mark.parametrize("name", FOLDERS)
def test_a_folder_run_layer_by_layer_gives_exactly_the_expanded_numbers(name):
    whole, streamed = one_layer_budget(DATA / name)
    assert not whole.streamed and streamed.streamed
    assert streamed.expansion["mode"] == "layer by layer"
    # a float32 file's unembedding is a view of the file (nothing to expand); a bfloat16 one's is streamed
    assert streamed.expansion["unembedding"] == ("row blocks" if "bf16" in name else "expanded")
    assert_same_arrays(whole.run(PROMPT), streamed.run(PROMPT))
    assert streamed.weights.layers.expansions == whole.config.n_layers
    assert_same_generation(whole, streamed)  # with the KV cache
    assert streamed.weights.layers.expansions == whole.config.n_layers * 4  # the run, then 3 passes: each re-expands


def test_generation_without_the_kv_cache_is_the_same_too():
    whole, streamed = one_layer_budget(DATA / "qwen2-tiny")
    assert_same_generation(whole, streamed, cache=False)


@pytest.mark.parametrize("quant", ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
@pytest.mark.parametrize("name, pre", [("llama-tiny", "llama-bpe"), ("qwen2-tiny", "qwen2")])
def test_a_gguf_file_run_layer_by_layer_gives_exactly_the_expanded_numbers(gguf_of_folder, name, pre, quant):
    """llama-tiny: Q and K rows permuted by llama.cpp's writer (put back as each layer is expanded);
    qwen2-tiny: Q/K/V biases, untied unembedding (output.weight streamed in row blocks)."""
    gguf = pytest.importorskip("gguf")
    try:
        path = gguf_of_folder(DATA / name, pre, quant)
    except (NotImplementedError, ValueError, AttributeError) as e:  # a type this gguf package cannot quantize
        pytest.skip(f"gguf {getattr(gguf, '__version__', '?')} cannot write {quant}: {e}")
    whole, streamed = one_layer_budget(path)
    assert streamed.streamed and streamed.expansion["unembedding"] == "row blocks"
    assert_same_arrays(whole.run(PROMPT), streamed.run(PROMPT))
    assert_same_generation(whole, streamed)


@pytest.mark.parametrize("name, pre", [("qwen3-tiny", "qwen2"), ("olmo2-tiny", "qwen2"), ("phi3-tiny", "llama-bpe"),
                                       ("gemma2-tiny", "default"), ("gemma3-tiny", "default")])
def test_the_other_families_gguf_files_layer_by_layer_too(gguf_of_folder, name, pre):
    """Their tensors as llama.cpp's converter writes them: Phi-3's fused attn_qkv and ffn_up cut per layer,
    Gemma's norms stored as 1 + w (the 1 taken off as each layer is expanded, as when read whole)."""
    pytest.importorskip("gguf")
    whole, streamed = one_layer_budget(gguf_of_folder(DATA / name, pre, "Q8_0"))
    assert streamed.streamed
    assert_same_arrays(whole.run(PROMPT), streamed.run(PROMPT))
    assert_same_generation(whole, streamed)


def test_a_gpt2_folder_of_float16_runs_layer_by_layer_with_the_same_numbers(tmp_path):
    """GPT-2's block (learned positions, layer norm with biases, c_attn handed on as the fused Q|K|V)."""
    from tracer.readers.gpt2 import write_folder

    m = tracer.load("tiny")  # 24 layers, d_model 8
    folder = tmp_path / "gpt2-f16"
    folder.mkdir()
    write_folder(folder, m.config, m.params, dtype="float16")
    whole, streamed = one_layer_budget(folder)
    assert streamed.streamed and whole.config.n_layers == 24
    assert_same_arrays(whole.run(PROMPT), streamed.run(PROMPT))
    assert_same_generation(whole, streamed)


def test_layers_that_fit_stay_expanded_and_the_least_recently_used_goes_first():
    per = tracer.load(str(DATA / "qwen2-tiny")).expansion["expanded_bytes"] // 3  # 3 layers (float32: only Q|K|V copied)
    two = tracer.load(str(DATA / "qwen2-tiny"), memory=2 * per + per // 2)  # room for two layers, not three
    layers = two.weights.layers
    two.run(PROMPT)
    assert layers.expansions == 3 and list(layers.held) == [1, 2] and layers.held_bytes <= layers.budget
    layers[1]  # used: layer 2 is now the least recently used
    layers[0]
    assert list(layers.held) == [1, 0] and layers.expansions == 4


def test_a_streamed_pass_holds_one_expanded_layer_at_a_time_and_its_trace_keeps_none():
    """Layer l is let go before layer l + 1 is expanded (nothing keeps it, not the decoder's loop), and the
    recorded pass keeps no layer alive: each head's result, a recipe of W_O, expands that W_O alone again
    when it is read (the same numbers), without expanding its layer or evicting the one held."""
    import weakref

    whole, streamed = one_layer_budget(DATA / "llama-tiny-bf16")
    layers, n = streamed.weights.layers, streamed.config.n_layers
    built, build = [], layers.build

    def alive() -> list:  # the layers expanded so far whose Layer or W_O is still alive
        return [i for i, layer, W_O in built if layer() is not None or W_O() is not None]

    def watched(l):
        assert alive() == [], f"layer {l} expanded while another is alive"
        layer, params = build(l)
        built.append((l, weakref.ref(layer), weakref.ref(params[f"blocks.{l}.attn.W_O"])))
        return layer, params

    layers.build = watched
    trace = streamed.run(PROMPT)
    assert alive() == [n - 1] == list(layers.held)  # the one the budget holds
    assert np.array_equal(trace["blocks.0.attn.hook_result"], whole.run(PROMPT)["blocks.0.attn.hook_result"])
    assert layers.expansions == n and list(layers.held) == [n - 1]


def test_q_k_v_are_expanded_into_the_fused_matrix_a_few_heads_at_a_time(gguf_of_folder, monkeypatch):
    """llama-tiny as a Q8_0 GGUF file (Q and K rows permuted by llama.cpp's writer, put back head by head):
    a streamed layer's W_Q, W_K and W_V are views of its fused Q|K|V, filled a block of rows at a time,
    equal to the whole read's; every tensor's pages in the file are given back once it is expanded."""
    pytest.importorskip("gguf")
    import tracer.formats.stored

    monkeypatch.setattr(tracer.formats.stored, "FILL_BLOCK_BYTES", 2**10)  # 4 rows of 64 numbers: rounded to a head, 16
    path = gguf_of_folder(DATA / "llama-tiny", "llama-bpe", "Q8_0")
    given = tracer.formats.stored.GIVEN_BACK
    streamed = tracer.load(str(path), memory=150_000)  # one layer (147.5 KB), not two
    trace = streamed.run(PROMPT)
    whole_reads = []
    expand = tracer.formats.stored.Stored.expand
    monkeypatch.setattr(tracer.formats.stored.Stored, "expand", lambda s: whole_reads.append(s.name) or expand(s))
    layer, params = streamed.weights.layers.build(0)
    assert sorted(whole_reads) == sorted(f"blk.0.{n}.weight" for n in ("attn_norm", "attn_output", "ffn_norm", "ffn_gate",
                                                                     "ffn_up", "ffn_down"))  # not attn_q, _k, _v
    for m in "QKV":
        assert np.shares_memory(params[f"blocks.0.attn.W_{m}"], layer.attn.qkv.W)
    whole = tracer.load(str(path))
    assert np.array_equal(layer.attn.qkv.W, whole.weights.layers[0].attn.qkv.W)
    assert_same_arrays(whole.run(PROMPT), trace)
    from tracer.formats.gguf_file import open_gguf

    f = open_gguf(path)
    quantized = sum(t.nbytes for t in f.tensors.values() if t.type_name != "F32")
    assert tracer.formats.stored.GIVEN_BACK - given >= quantized  # whole pages around each: at least its bytes


def mapped_rss(path) -> int:
    """Resident bytes of this process's maps of `path`, as the kernel counts them (/proc/self/smaps)."""
    total, mine, path = 0, False, str(Path(path).resolve())
    for line in Path("/proc/self/smaps").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and "-" in parts[0] and not parts[0].endswith(":"):  # a map's first line
            mine = line.endswith(path)
        elif mine and parts[0] == "Rss:":
            total += int(parts[1]) * 1024
    return total


def test_an_expanded_tensors_pages_in_the_file_stop_counting_in_resident_memory(tmp_path):
    """A 2.2 MB Q8_0 tensor expanded whole, then in rows: its float32 numbers are the gguf package's, and
    the kernel counts at most a few fault-around windows of the file resident afterwards (64 KB each, the
    pages mapped beside a faulted one, outside the rows read), not 2.2 MB."""
    gguf = pytest.importorskip("gguf")
    if not Path("/proc/self/smaps").exists():
        pytest.skip("no /proc/self/smaps here")
    from tracer.formats.gguf_file import open_gguf
    from tracer.formats.stored import Quantized

    rng = np.random.default_rng(3)
    rows, cols = 1024, 2048
    raw = rng.integers(0, 256, (rows * cols // 32, 34), dtype=np.uint8)
    raw[:, 0:2] = rng.normal(0, 0.01, (len(raw), 1)).astype(np.float16).view(np.uint8)
    w = gguf.GGUFWriter(str(tmp_path / "t.gguf"), "llama")
    w.add_tensor("m", raw.reshape(rows, -1), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    s = Quantized(open_gguf(tmp_path / "t.gguf"), "m")
    np.asarray(s.f.raw("m")).sum()  # every page read, as an expansion reads them
    assert mapped_rss(tmp_path / "t.gguf") >= raw.nbytes
    whole = s.expand()
    assert np.array_equal(whole, gguf.quants.dequantize(raw.reshape(rows, -1), gguf.GGMLQuantizationType.Q8_0))
    assert mapped_rss(tmp_path / "t.gguf") <= 2**18
    assert np.array_equal(s.rows(100, 900), whole[100:900])
    assert mapped_rss(tmp_path / "t.gguf") <= 2**18


def test_a_model_that_fits_is_expanded_once_and_never_again():
    m = tracer.load(str(DATA / "llama-tiny-bf16"), memory="1GB")
    assert not m.streamed and m.expansion["mode"] == "once"
    assert m.expansion["text"] == "expanded once: 558.3 KB"
    assert isinstance(m.weights.layers, list)  # the decoder reads arrays: no per-pass or per-token cost


def test_the_embedding_reads_only_the_rows_of_the_tokens():
    _, streamed = one_layer_budget(DATA / "llama-tiny-bf16")
    stored = streamed.weights.W_E.stored
    asked = []
    rows = stored.rows
    stored.expand = lambda: pytest.fail("the whole embedding was expanded")
    stored.rows = lambda lo, hi: asked.append((lo, hi)) or rows(lo, hi)
    streamed.weights.unembed.W.stored = type("Rows", (), {"rows": staticmethod(rows), "shape": stored.shape})()
    streamed.run(PROMPT)
    assert sorted(asked) == [(t, t + 1) for t in sorted(set(streamed.tokenize(PROMPT)))]


def test_a_budget_smaller_than_one_layer_is_refused_with_what_one_layer_needs(runner):
    """The core names the values (the budget, one layer's size, the file); the CLI adds the flag."""
    says = (r"a memory budget of 10 KB is below one layer's 148 KB expanded to float32 \(\S*llama-tiny-bf16: BF16 in "
            r"the file; the whole model needs 558.3 KB\); 148 KB or more runs it layer by layer")
    with pytest.raises(TracerError, match=f"^{says}$"):
        tracer.load(str(DATA / "llama-tiny-bf16"), memory=10_000)
    from tracer.cli import app

    r = runner.invoke(app, ["trace", "A B", "--model", str(DATA / "llama-tiny-bf16"), "--memory", "10KB"])
    assert r.exit_code == 2 and r.stdout == "", r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(f"tracer: --memory: {says}", lines[0]), lines


def test_the_walkthrough_and_json_say_how_the_model_ran(runner):
    import json

    from tracer.cli import app

    r = runner.invoke(app, ["trace", "A B", "--model", str(DATA / "llama-tiny-bf16"), "--memory", "160KB", "--json",
                            "-n", "1"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)["expansion"]
    assert info["text"] == "expanded layer by layer: 2 layers × 148 KB, budget 160 KB"
    assert info["mode"] == "layer by layer" and info["layers"] == 2 and info["budget"] == 160_000
    r = runner.invoke(app, ["trace", "A B", "--model", str(DATA / "llama-tiny-bf16"), "--memory", "160KB", "-n", "0",
                            "--section", "tokens", "--no-pager"])
    assert r.exit_code == 0, r.output
    assert "expanded layer by layer: 2 layers × 148 KB, budget 160 KB" in " ".join(r.stdout.split())


def test_the_backward_pass_of_a_streamed_model_is_refused_in_one_line():
    _, streamed = one_layer_budget(DATA / "llama-tiny-bf16")
    with pytest.raises(TracerError, match="needs every weight expanded at once"):
        streamed.attribute(PROMPT)


@pytest.mark.parametrize("text, size", [("6GB", 6 * 10**9), ("500MB", 500 * 10**6), ("1.5GiB", 3 * 2**29),
                                        ("2e9", 2 * 10**9), ("100", 100), (" 64 kb ", 64_000), ("1_000MB", 10**9)])
def test_memory_sizes_parse_to_bytes(text, size):
    assert parse_size(text) == Size(size, text)
    assert tracer.load("tiny", memory=text) is not None and tracer.load("tiny", memory=parse_size(text)) is not None


@pytest.mark.parametrize("text", ["", "GB", "-1GB", "6XB", "0", "0GB", "nan", "inf", "1e400GB", "6 G B",
                                  "١٠GB", "１GB", "1.٥GB", "1e١GB", "²GB", "10\u2009GB"])
def test_bad_memory_sizes_are_one_line(text, runner):
    """Bad sizes, and digits that are not ASCII (as --layer, --token, --head and typer's numbers refuse
    them): the core names the value, the CLI adds the flag, before anything is loaded."""
    with pytest.raises(TracerError, match=re.escape(repr(text))) as e:
        parse_size(text)
    assert getattr(e.value, "option", None) == "memory"
    with pytest.raises(TracerError, match=re.escape(repr(text))):
        tracer.load("tiny", memory=text)
    from tracer.cli import app

    r = runner.invoke(app, ["trace", "A B", "--memory", text])
    assert r.exit_code == 2 and r.stderr == f"tracer: --memory: {e.value}\n", r.output


@pytest.fixture(params=["default", "ignored"])
def sigint(request):
    """Ctrl-C's handler during a test: Python's default, or ignored (pytest run with nohup or as a job with &);
    the handler in place before is put back after."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler if request.param == "default" else signal.SIG_IGN)
    try:
        yield request.param
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_streamed_pass_draws_its_layers_and_ctrl_c_stops_it_before_the_next_layer(terminal, sigint):
    """Ctrl-C during a streamed pass stops it before the next layer, and the handler in place before the run
    is put back (the test expected Python's default one, and failed when pytest ran with Ctrl-C ignored); a
    process that ignores Ctrl-C (nohup, a job run with &) is left ignoring it: the pass runs to its end."""
    import os
    import signal

    from tracer.render.progress import LayerStop, layers_progress

    in_place = signal.getsignal(signal.SIGINT)
    _, streamed = one_layer_budget(DATA / "qwen2-tiny")
    seen = []
    with layers_progress(streamed.weights.layers, True, stream=terminal):
        hook = streamed.weights.layers.on_expand
        streamed.weights.layers.on_expand = lambda l, expanding: seen.append((l, expanding)) or hook(l, expanding)
        streamed.run(PROMPT)
    assert seen == [(0, True), (1, True), (2, True)] and streamed.weights.layers.on_expand is None
    before = streamed.weights.layers.expansions
    if sigint == "ignored":
        with layers_progress(streamed.weights.layers, True, stream=terminal):
            os.kill(os.getpid(), signal.SIGINT)  # ignored: nothing happens
            got = streamed.run(PROMPT)
        assert streamed.weights.layers.expansions == before + 3 and got["logits"].shape[0] == len(PROMPT)
    else:
        with pytest.raises(LayerStop, match=r"stopped before layer 0 of pass 1 \(Ctrl-C\): nothing was written"):
            with layers_progress(streamed.weights.layers, True, stream=terminal):
                os.kill(os.getpid(), signal.SIGINT)  # kept until the next layer
                streamed.run(PROMPT)
        assert streamed.weights.layers.expansions == before  # stopped before expanding anything
    assert signal.getsignal(signal.SIGINT) is in_place


def test_the_demo_runs_a_streamed_model_under_the_layers_bar(monkeypatch):
    """`tracer demo --memory …` on a model that does not fit: its run draws the layers' bar (and Ctrl-C
    stops between layers) as `tracer trace` does, before the first screen."""
    import tracer.render.progress as progress
    from tracer.cli.teach import _demo_run

    real, entered = progress.layers_progress, []

    def spy(layers, show=True, stream=None):
        entered.append(layers is not None)
        return real(layers, show, stream)

    monkeypatch.setattr(progress, "layers_progress", spy)
    whole, _ = one_layer_budget(DATA / "qwen2-tiny")
    per = whole.expansion["expanded_bytes"] // whole.config.n_layers
    d = _demo_run(None, "hello there", str(DATA / "qwen2-tiny"), memory=per)
    assert entered == [True] and d.gen.generated_ids


def test_the_kv_cache_view_says_a_streamed_model_expands_its_layers_again(render_text):
    from tracer.render.loop import kv_cache_view

    _, streamed = one_layer_budget(DATA / "qwen2-tiny")
    gen = streamed.generate(PROMPT, max_new_tokens=2)
    text = " ".join(render_text(kv_cache_view(gen, streamed.tokenizer, None)).split())
    assert "expanded layer by layer: 3 layers × 32.8 KB, budget 32.8 KB, so each pass expands again" in text


@pytest.mark.parametrize("kind", ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                                  "Q6_K"])
def test_rows_of_a_stored_gguf_tensor_are_its_expansion_rows(tmp_path, kind):
    """What the embedding's lookup and the unembedding's blocks read: rows lo..hi de-quantized alone equal
    those rows of the whole tensor (and the gguf package's de-quantization of it)."""
    gguf = pytest.importorskip("gguf")
    from tracer.formats import quants
    from tracer.formats.gguf_file import open_gguf
    from tracer.formats.stored import Quantized

    rng = np.random.default_rng(7)
    t = quants.TYPES[kind]
    rows, cols = 6, 512
    raw = rng.integers(0, 256, (rows * cols // t.block, t.nbytes), dtype=np.uint8)
    scales = {"Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}.get(kind, [0] if t.block > 1 else [])
    for at in scales:
        raw[:, at:at + 2] = rng.normal(0, 0.01, (len(raw), 1)).astype(np.float16).view(np.uint8)
    if kind == "F16":
        raw = rng.normal(0, 1, rows * cols).astype(np.float16).view(np.uint8).reshape(-1, 2)
    if kind == "BF16":  # the top halves of float32s
        raw = (rng.normal(0, 1, rows * cols).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        raw = raw.view(np.uint8).reshape(-1, 2)
    if kind == "Q4_1" or kind == "Q5_1":
        raw[:, 2:4] = rng.normal(0, 0.01, (len(raw), 1)).astype(np.float16).view(np.uint8)
    w = gguf.GGUFWriter(str(tmp_path / "t.gguf"), "llama")
    w.add_tensor("m", raw.reshape(rows, -1), raw_dtype=getattr(gguf.GGMLQuantizationType, kind))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    s = Quantized(open_gguf(tmp_path / "t.gguf"), "m")
    whole = s.expand()
    assert whole.shape == (rows, cols)
    ref = gguf.quants.dequantize(raw.reshape(rows, -1), getattr(gguf.GGMLQuantizationType, kind))
    assert np.array_equal(whole, ref, equal_nan=True)
    for lo, hi in ((0, 1), (2, 5), (5, 6)):
        assert np.array_equal(s.rows(lo, hi), whole[lo:hi], equal_nan=True)


@pytest.mark.parametrize("args", [["tokens", "A B", "--model", "abc"], ["compare", "A B", "A C"], ["demo", "--prompt", "A B"],
                                  ["serve", "--port", "0"]])
def test_every_command_that_loads_a_model_takes_memory_and_refuses_a_bad_size_first(args, runner):
    from tracer.cli import app

    r = runner.invoke(app, [*args, "--memory", "lots"])
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert r.stderr.strip() == ("tracer: --memory: 'lots' is not a size such as 6GB, 500MB or 1.5GiB (ASCII digits, "
                                "then a unit)")


def test_tokens_and_compare_run_a_streamed_model(runner):
    from tracer.cli import app

    folder = str(DATA / "llama-tiny-bf16")
    r = runner.invoke(app, ["compare", "1 2 3", "1 2 4", "--model", folder, "--memory", "160KB", "--json"])
    assert r.exit_code == 0, r.output
    whole = runner.invoke(app, ["compare", "1 2 3", "1 2 4", "--model", folder, "--json"])
    assert r.stdout == whole.stdout
    r = runner.invoke(app, ["tokens", "1 2 3", "--model", folder, "--memory", "160KB"])
    assert r.exit_code == 0 and "49" in r.stdout, r.output
