"""Policy and value modules of the rl library."""

from rl.objectives import __version__

__all__ = ["__version__"]
