"""A scenario replayed: its model built, its generation run and recorded, its stated values checked.

`replay("article")` is what `tracer replay article` computes before anything is shown; a ✗ is a
stated value that disagrees with the computation, which is what a replay is for, not an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from .loaders import scenario_model
from .model import Model
from .scenario import Scenario, check_all, load_scenario, resolve
from .run.trace import Generation


@dataclass
class Replay:
    scenario: Scenario
    model: Model
    gen: Generation
    checks: list  # [tracer.run.checks.Check], in the file's order


def run_scenario(scn: Scenario, model: Model | None = None, on_step=None) -> Generation:
    """The scenario's generation, every pass recorded (its meta says how the weights were made)."""
    model = model if model is not None else scenario_model(scn)
    gen = model.generate(scn.prompt, settings=scn.settings, on_step=on_step)
    for meta in [gen.meta] + [s.meta for s in gen.passes]:
        meta["weights"] = scn.weights
        meta["scenario"] = scn.name
    return gen


def replay(scenario, on_step=None) -> Replay:
    """Load a scenario (a path, or a shipped name), run it and check it."""
    scn = scenario if isinstance(scenario, Scenario) else load_scenario(resolve(str(scenario)))
    model = scenario_model(scn)
    gen = run_scenario(scn, model, on_step)
    return Replay(scn, model, gen, check_all(scn.expects, gen, model.tokenizer))
