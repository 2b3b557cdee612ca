"""Readers of weights files: one module per format or family."""
