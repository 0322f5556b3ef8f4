"""Batched environments: ``SerialEnv``, ``ParallelEnv`` and ``EnvCreator``."""

from ._creator import EnvCreator
from ._parallel import ParallelEnv
from ._serial import SerialEnv

__all__ = ["EnvCreator", "ParallelEnv", "SerialEnv"]
