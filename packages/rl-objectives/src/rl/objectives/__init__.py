"""Losses of the rl library."""

__version__ = "0.1.0"
