"""tracer's version, written once: the package metadata (pyproject.toml) and `tracer.__version__` read it."""

__version__ = "0.1.0"
