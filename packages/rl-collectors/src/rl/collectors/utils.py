"""Collector utilities (``rl.collectors.utils``, as ``torchrl.collectors.utils``)."""

from ._utils import split_trajectories

__all__ = ["split_trajectories"]
