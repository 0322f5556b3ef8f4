"""Compiled core of the rl library."""

from rl.cpp import _C

__version__ = "0.1.0"

__all__ = ["_C"]
