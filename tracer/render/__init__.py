"""Renderers: they take a recorded trace and return Rich renderables; they never recompute the model."""
