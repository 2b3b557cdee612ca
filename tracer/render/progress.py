"""Progress bars on stderr, for work long enough to need one and only on a terminal: a multi-token
generation of a large model, and reading a large weights file. They draw through `SafeConsole`, and
a label (which names the model's files) is text, not Rich markup: a file name cannot style, break
or drive the terminal."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from .text import safe_console

PROGRESS_PARAMS = 50_000_000  # models larger than this get a progress bar for multi-token runs
BIG_FILE = 100 * 2**20  # files larger than this get a progress bar while they are read


def wants_progress(n_params: int, max_new_tokens: int, stream=None) -> bool:
    """A bar only for multi-token runs of large models (`n_params` parameters), on a terminal."""
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return bool(max_new_tokens > 1 and n_params > PROGRESS_PARAMS and isatty and isatty())


@contextmanager
def generation_progress(n_params: int, max_new_tokens: int, description: str = "generating", stream=None, force: bool = False):
    """Yields an `on_step(done, total)` callback drawing a Rich progress bar on stderr, or None (a model
    of `n_params` parameters: see `wants_progress`)."""
    if not (force or wants_progress(n_params, max_new_tokens, stream)):
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = safe_console(file=stream if stream is not None else sys.stderr)
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(description, total=max(max_new_tokens, 1))

        def on_step(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield on_step


LONG_PASS_MACS = 20_000_000_000  # a pass of more multiply-adds than this gets a bar of its layers (seconds of work)


@contextmanager
def pass_progress(n_layers: int, macs: int, n_prompt: int, stream=None):
    """Yields an `on_layer()` callback drawing the prompt's pass (`n_prompt` tokens, `macs` multiply-adds,
    `Config.pass_macs`) layer by layer on stderr, for a pass long enough to need it, on a terminal; else
    None. (`Model.generate(on_layer=…)` calls it before each layer.)"""
    stream = stream if stream is not None else sys.stderr
    if not (macs > LONG_PASS_MACS and getattr(stream, "isatty", lambda: False)()):
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=safe_console(file=stream), transient=True) as bar:
        task = bar.add_task(f"the prompt's pass ({n_prompt:,} tokens): layers", total=n_layers)
        seen = [0]

        def on_layer() -> None:
            seen[0] += 1
            if seen[0] <= n_layers:
                bar.update(task, completed=seen[0] - 1)
            elif seen[0] == n_layers + 1:
                bar.update(task, completed=n_layers, description="predictions and the logit lens")

        yield on_layer


@contextmanager
def reading_progress(total_bytes: int, label: str, stream=None):
    """Yields an `advance(n_bytes)` callback drawing a bar for big files on a terminal (else a no-op)."""
    stream = stream if stream is not None else sys.stderr
    if not (total_bytes > BIG_FILE and getattr(stream, "isatty", lambda: False)()):
        yield lambda n: None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=safe_console(file=stream), transient=True) as bar:
        task = bar.add_task(label, total=total_bytes)
        yield lambda n: bar.advance(task, n)


BARS = "▁▂▃▄▅▆▇█"


def sparkline(values, width: int = 60) -> str:
    """The values as one line of bars (lowest ▁, highest █), averaged down to `width` characters."""
    if not values:
        return ""
    n = len(values)
    width = max(1, min(width, n))
    means = [sum(values[i * n // width : (i + 1) * n // width]) / max((i + 1) * n // width - i * n // width, 1)
             for i in range(width)]
    lo, hi = min(means), max(means)
    span = hi - lo or 1.0
    return "".join(BARS[min(int((m - lo) / span * len(BARS)), len(BARS) - 1)] for m in means)


@contextmanager
def training_progress(settings, stream=None):
    """Yields an `on_step(Progress)` callback: a bar with the loss and tokens/s on a terminal, else a
    line every twentieth of the steps."""
    stream = stream if stream is not None else sys.stderr
    total = settings.steps
    if not getattr(stream, "isatty", lambda: False)():
        every = max(total // 20, 1)

        def on_line(p) -> None:
            if p.step % every == 0 or p.step == total or p.step == 1:
                print(f"step {p.step:,}/{total:,}  loss {p.loss:.3f}  lr {p.lr:.2e}  {p.tokens_per_s:,.0f} tokens/s",
                      file=stream, flush=True)

        yield on_line
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=safe_console(file=stream), transient=False) as bar:
        task = bar.add_task("train", total=total, info="")

        def on_step(p) -> None:
            bar.update(task, completed=p.step, info=f"loss {p.loss:.3f}  {p.tokens_per_s:,.0f} tok/s")

        yield on_step


class LayerStop(KeyboardInterrupt):
    """Ctrl-C, honoured between two layers of a streamed pass (nothing is half-expanded or half-written)."""

    signum = 2


@contextmanager
def layers_progress(layers, show: bool = True, stream=None):
    """While it is open, the layers of a streamed model (`tracer.core.streamed.Layers`, which call
    `on_expand(layer, expanding)`; None for a model expanded once: nothing happens) draw a bar on stderr
    of the layers each pass expands (on a terminal, when `show`), and Ctrl-C stops the pass before the
    next layer: the first press is kept until the layer being computed is done (a second one stops at once)."""
    if layers is None:
        yield
        return
    import signal
    import threading

    stream = stream if stream is not None else sys.stderr
    pressed: list[int] = []
    old = None

    def on_sigint(signum, frame):
        pressed.append(signum)
        if len(pressed) > 1:
            raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        old = signal.signal(signal.SIGINT, on_sigint)  # an ignored Ctrl-C (nohup …, a job run with &) stays ignored
    bar = None
    try:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        draw = show and getattr(stream, "isatty", lambda: False)()
        progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=safe_console(file=stream), transient=True, disable=not draw)
        with progress:
            bar = progress.add_task("expanding layers", total=len(layers))
            passes = [0]

            def on_expand(l: int, expanding: bool) -> None:
                if pressed:
                    echo = f"stopped before layer {l} of pass {max(passes[0], 1)} (Ctrl-C): nothing was written"
                    raise LayerStop(echo)
                if l == 0:
                    passes[0] += 1
                what = "expanding" if expanding else "using the expanded"
                progress.update(bar, completed=l, description=f"pass {passes[0]}: {what} layer {l + 1} of {len(layers)}")

            layers.on_expand = on_expand
            try:
                yield
            finally:
                layers.on_expand = None
            if pressed:  # pressed after the last expansion: stop now, before anything is shown or written
                raise LayerStop("interrupted")
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
