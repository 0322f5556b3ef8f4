"""rl.envs."""

__version__ = "0.1.0"
