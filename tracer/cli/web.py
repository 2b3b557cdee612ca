"""The command that serves the classroom page: `serve`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .app import MemoryOpt, app


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on: 127.0.0.1 (this machine only, the default); 0.0.0.0 lets the room's network in (anyone on it can use the server).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=0, max=65535, help="Port to listen on (0: any free one; the address printed says which).")] = 8000,
    model: Annotated[Optional[list[str]], typer.Option("--model", "-m", help="A model to serve (repeatable; any --model of `tracer trace`): loaded once, at start; the first is the page's default. Default: abc. The shipped abc and tiny are always served.")] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", "-w", min=1, max=64, help="Traces that run at once (threads sharing the loaded models). Default: the CPU count, at most 4.")] = None,
    queue: Annotated[int, typer.Option("--queue", min=0, max=1024, help="Requests that may wait for a worker; beyond that the server answers 503 with Retry-After.")] = 16,
    per_client: Annotated[int, typer.Option("--per-client", min=0, max=1024, help="Requests one address may have running or waiting; beyond that it gets 429 with Retry-After (0: no such limit, e.g. when every student comes through one proxy).")] = 2,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", min=0, max=1024, help="The most new tokens one request may ask for.")] = 16,
    seconds: Annotated[float, typer.Option("--seconds", min=0.1, max=3600, help="The longest one trace may run; a longer one is cut and answered 422.")] = 10.0,
    lesson: Annotated[Optional[str], typer.Option("--lesson", help="Lead a class through a lesson file (tracer lesson new writes one): its model and settings pinned, every page opening on its starter prompt; prints the join address, its QR code and the teacher's address with a secret (once). Each student's page follows the teacher's step and choices on their own prompt.")] = None,
    followers: Annotated[int, typer.Option("--followers", min=1, max=2000, help="With --lesson: student pages that may follow at once (beyond: 503 with Retry-After), at most 8 from one address (none with --per-client 0). Each is sent at most 5 events a second, the latest state only: nothing queues for a slow page or one that left. About 25 kB of memory per page.")] = 100,
    memory: MemoryOpt = None,
    trusted_proxy: Annotated[Optional[str], typer.Option("--trusted-proxy", help="The reverse proxy this server sits behind (an address or a network, comma-separated): only its X-Forwarded-For names the client for --per-client. Default: none; every client is its connection's own address.")] = None,
) -> None:
    """Serve the classroom page: type a prompt in a browser and see every step (many students at once).

    Example: tracer serve --host 0.0.0.0 --model abc --model tiny   (students open the address it prints)
    Example: tracer serve --host 0.0.0.0 --lesson lesson.toml   (a class that follows the teacher)
    """
    import dataclasses
    import functools

    from ..errors import TracerError
    from ..loaders import load
    from ..scenario.lesson import load_lesson
    from ..serve.limits import Limits
    from ..serve.run import serve as run

    led = load_lesson(lesson) if lesson is not None else None
    if led is not None and model and model != [led.model]:
        raise TracerError(f"--model: the lesson {lesson} pins its model ({led.model}); give --lesson alone")

    limits = dataclasses.replace(Limits(), max_new_tokens=max_new_tokens, seconds=seconds, per_client=per_client,
                                 context=max(Limits().context, Limits().prompt_tokens + max_new_tokens))
    run(model or ["abc"], host, port, workers, queue, limits, load=functools.partial(load, memory=memory),  # each model its own budget
        say=lambda line: typer.echo(line), lesson=led, followers=followers, trusted_proxy=trusted_proxy)
