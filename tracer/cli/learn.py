"""`tracer corpus` (the training corpus of the shipped model), `tracer train` (a small GPT-2 trained with
tracer's own backward pass) and `tracer download`."""

from __future__ import annotations

from typing import Annotated

import typer

from .app import app, echo_err, make_console


@app.command()
def corpus(
    out: Annotated[str, typer.Option("--out", "-o", help="Where to write it.")] = "corpus.txt",
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the draws: the same seed and size give the same bytes.")] = 0,
    size: Annotated[int, typer.Option("--size", min=0, help="Lines (examples).")] = 100_000,
    check: Annotated[str, typer.Option("--check", help="Write nothing; exit 0 if this file holds exactly the corpus of --seed, --size and --recipe, else 1.", show_default=False)] = None,
    recipe: Annotated[str, typer.Option("--recipe", help="Which lines teach copying: 'recall' (random words said twice, mostly in one shape, 'the X Y Z and the V W.') or 'induction' (phrases and runs of random words said again later in the line, whatever surrounds them). Default: the shipped abc's.", show_default=False)] = None,
) -> None:
    """Write the small synthetic corpus the shipped model 'abc' was trained on: letter runs, counting,
    weekdays and months, short sentences, and phrases of random words said again (to copy), one example
    a line.

    The same seed, size and recipe give the same bytes on every machine (seed 0, 100,000 lines, recipe
    'recall': the shipped model's corpus, sha256 88b28286e50d…; recipe 'induction': fa4f6d143e83…).

    Example: tracer corpus --out corpus.txt && tracer train corpus.txt --out my-model
    """
    import hashlib

    from ..run.corpus import corpus as make, first_difference
    from ..errors import TracerError
    from ..formats.files import atomic_write
    from ..formats.reading import read_small

    from ..run.corpus import RECIPES, SHIPPED_RECIPE

    recipe = SHIPPED_RECIPE if recipe is None else recipe
    if recipe not in RECIPES:
        raise TracerError(f"--recipe: {recipe!r} is not a recipe; the recipes are {', '.join(RECIPES)}")
    data = make(seed, size, recipe).encode("ascii")
    if check is not None:
        line = first_difference(read_small(check, "corpus", max(len(data), 1) * 2), data)
        if line is not None:
            echo_err(f"{check}: differs from the corpus of seed {seed}, {size:,} lines, recipe {recipe}, first at line {line:,}")
            raise typer.Exit(1)
        typer.echo(f"{check}: same bytes (sha256 {hashlib.sha256(data).hexdigest()})")
        return
    if out == "-":
        raise TracerError(f"--out: give a file name (the corpus is {len(data) / 1e6:.1f} MB)")
    atomic_write(out, lambda f: f.write(data))
    echo_err(f"wrote {out}: {size:,} lines, {len(data):,} bytes, sha256 {hashlib.sha256(data).hexdigest()}")


@app.command()
def train(
    corpus: Annotated[str, typer.Argument(help="A UTF-8 text file to learn from (`tracer corpus` writes one).")],
    out: Annotated[str, typer.Option("--out", "-o", help="Folder to write config.json, model.safetensors and training.json into (transformers' GPT-2 layout).")],
    steps: Annotated[int, typer.Option("--steps", min=1, help="Optimizer steps.")] = 1500,
    layers: Annotated[int, typer.Option("--layers", min=1, help="Blocks.")] = 4,
    d_model: Annotated[int, typer.Option("--d-model", min=1, help="Width of the residual stream.")] = 64,
    heads: Annotated[int, typer.Option("--heads", min=1, help="Attention heads per layer (must divide --d-model).")] = 4,
    context: Annotated[int, typer.Option("--context", min=2, help="Tokens per training window: the model's context.")] = 64,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Windows per step.")] = 16,
    lr: Annotated[float, typer.Option("--lr", min=0.0, help="Peak learning rate (warm-up, then a cosine decay to a tenth).")] = 3e-3,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the initial weights and of the windows drawn.")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Replace --out when it holds a model tracer train saved there before (and nothing else).")] = False,
) -> None:
    """Train a small GPT-2 on CORPUS with tracer's NumPy backward pass, and save it for `tracer trace --model`.

    AdamW with warm-up and a cosine decay, gradient clipping, the gpt2 tokenizer. The same corpus,
    options and seed give the same weights. Ctrl-C stops after the current step and saves it; a loss
    that stops being finite stops training and keeps the last good weights. Nothing is half-written.
    It trains GPT-2-shaped models only (GPT-2's block, written in transformers' GPT-2 layout); the
    backward pass itself, `Model.loss_and_grads`, also covers the Llama, Qwen2, Mistral, Qwen3, OLMo 2,
    Phi-3, Gemma 2 and Gemma 3 blocks.

    Example: tracer corpus --out corpus.txt && tracer train corpus.txt --out my-model && tracer trace --model my-model "A B C D E F"
    """
    from ..formats.files import stop_signals
    from ..formats.folders import check_output_folder
    from ..render.progress import training_progress
    from ..tokenizers.tokens import get_tokenizer
    from ..run.train import TrainSettings, not_saved_by_train, read_corpus

    settings = TrainSettings(steps=steps, layers=layers, d_model=d_model, heads=heads, context=context, batch=batch,
                             lr=lr, seed=seed)
    seen = check_output_folder(out, "--out", force, keep=(corpus,), ours=not_saved_by_train)
    text, sha = read_corpus(corpus)
    import numpy as np

    ids = np.asarray(get_tokenizer("gpt2").encode(text), dtype=np.int64)  # [n]
    asked: list = []  # Ctrl-C, SIGTERM or SIGHUP: stop after the current step (a second one stops at once)
    with stop_signals(ask=lambda: asked.append(True)), training_progress(settings) as on_step:
        result = _train(ids, settings, on_step, lambda: bool(asked))
    _save_training(result, settings, corpus, sha, ids, out, seen)


def _train(ids, settings, on_step, stopping):
    from ..run.train import train as run

    return run(ids, settings, on_step=on_step, should_stop=stopping)


def _save_training(result, settings, corpus: str, sha: str, ids, out: str, seen=None) -> None:
    """Write the trained model (when a step completed), say how training went, and exit as it ended."""
    from pathlib import Path

    from ..errors import TracerError
    from ..formats.folders import atomic_folder
    from ..readers.gpt2 import write_folder
    from ..render.progress import sparkline
    from ..run.train import head_roles, record_json, training_record
    from ..version import __version__

    import numpy as np

    done = len(result.losses)
    if done and not all(np.isfinite(a).all() for a in result.params.values()):
        raise TracerError(f"training stopped at step {done}: its weights are not finite (NaN or ∞); nothing was "
                          "saved (a model already in --out is as it was); try a smaller --lr")
    if done:
        heads = head_roles(result, ids)
        record = training_record(result, settings, Path(corpus).name, sha, len(ids), __version__, heads)
        atomic_folder(out, lambda tmp: write_folder(tmp, result.config, result.params,
                                                    extra={"training.json": record_json(record)}), seen)
        first, last = result.losses[0], record["final_loss"]
        echo_err(f"{done:,} steps in {result.seconds:.0f} s: loss {first:.3f} → {last:.3f} (mean of the last 20)")
        line = sparkline(result.losses)
        if line:
            echo_err(f"loss per step: {line}")
        echo_err(_strongest_heads(heads))
        echo_err(f"saved {out}; try: tracer trace --model {out} \"A B C D E F\"")
    if result.stopped == "interrupted":
        echo_err("interrupted: " + (f"saved the weights of step {done}" if done else "no step completed, nothing saved"))
        raise typer.Exit(130)
    if result.stopped == "not finite":
        kept = f"the weights of step {done} are saved in {out}" if done else "nothing was saved"
        raise TracerError(f"training stopped at step {done + 1}: the loss, a gradient or a weight is not finite (NaN or ∞); "
                          f"{kept}; try a smaller --lr")


def _strongest_heads(heads: dict) -> str:
    """'strongest previous-token head 0.2 (0.81); strongest induction head 1.3 (0.64)' (layer.head, score)."""
    import numpy as np

    parts = []
    for kind in ("previous_token", "induction"):
        s = np.asarray(heads[kind])  # [layer, head]
        l, h = np.unravel_index(int(np.argmax(s)), s.shape)
        parts.append(f"strongest {kind.replace('_', '-')} head {l}.{h} ({s[l, h]:.2f})")
    return "; ".join(parts) + " (layer.head, mean weight on the expected key)"


@app.command()
def download(
    name: Annotated[str, typer.Argument(help="gpt2, gpt2-medium, gpt2-large, gpt2-xl, distilgpt2, or a Hugging Face repo id of a Llama, Qwen2 or Mistral model (HuggingFaceTB/SmolLM2-135M, Qwen/Qwen2.5-0.5B, meta-llama/Llama-3.2-1B).")],
) -> None:
    """Fetch a model's config.json, model.safetensors (or its shards) and tokenizer.json into the Hugging Face cache (the only command that uses the network; needs the optional package huggingface_hub: `pip install huggingface_hub`).

    Example: tracer download HuggingFaceTB/SmolLM2-135M && tracer trace "Hello" --model HuggingFaceTB/SmolLM2-135M
    """
    from ..errors import TracerError
    from ..readers.hub import download as fetch_files, hub_repos
    from ..loaders import hf_model
    from ..render.progress import reading_progress

    short = hub_repos(name)[0]
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise TracerError(f"download: needs the optional package huggingface_hub: pip install huggingface_hub, then run "
                          f"this again (or put the files of {hub_repos(name)[1][0]} in a folder and pass --model FOLDER)") from None
    folder = fetch_files(name, hf_hub_download)
    m = hf_model(folder, name=short, progress=reading_progress)  # reads every tensor once: checks the files are whole
    typer.echo(f"{short}: {m.config.n_layers} layers, d_model {m.config.d_model}, {m.config.n_heads} heads, in {folder}")
    typer.echo(f'try: tracer trace --model {short} "The capital of France is"')


@app.command()
def models() -> None:
    """List the models tracer can open on this machine: shipped ones, scenarios, the Hugging Face
    cache, Ollama ($OLLAMA_MODELS or ~/.ollama/models) and LM Studio (~/.lmstudio/models), with
    family, size and storage type. Only headers are read.

    Example: tracer models
    """
    from ..loaders import BUILTIN, SHIPPED
    from ..readers.inventory import models_here
    from ..render.summary import models_table

    make_console().print(models_table(models_here(BUILTIN, SHIPPED)))
