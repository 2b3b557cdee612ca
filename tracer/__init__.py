"""tracer: every number of a transformer decoder's autoregressive generation, in the terminal.

The Python API (see README): `tracer.load(name_or_path)` → `Model`; `model.run(prompt)` →
`Trace` (hook name → array); `model.generate(prompt, max_new_tokens=…)` → `Generation`.
"""

from .config import Config
from .errors import TracerError
from .model import Model, __version__, load
from .trace import Generation, Trace

__all__ = ["Config", "Generation", "Model", "Trace", "TracerError", "load", "__version__"]
