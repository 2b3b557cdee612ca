"""Scenario files: a hand-writable TOML that fixes a model, its weights, a prompt and the generation
settings, and states values that a replay checks (`tracer replay FILE.toml`).

  - `source`: the file's text: where each key is, the digits each value was written with;
  - `schema`: the tables read and checked into a `Scenario` (config, weights, tokenizer, prompt,
    settings), everything without weights checked before the weights are allocated;
  - `expect`: the stated values (`[[expect]]`), and checking them against a recorded generation;
  - `shipped`: the scenarios that come with tracer.
The format is documented key by key in `docs/scenarios.md`. Every problem with a file is one
`TracerError` line naming the file (and the line, where it can be found), the key path and what
was expected; a check that fails is not an error (the disagreement is what a replay shows).
"""

from .expect import Expect, check_all, check_expect
from .schema import Scenario, load_scenario
from .shipped import find_scenario, resolve, shipped, summaries
from .source import written_tolerance

__all__ = ["Expect", "Scenario", "check_all", "check_expect", "find_scenario", "load_scenario", "resolve", "shipped",
           "summaries", "written_tolerance"]
