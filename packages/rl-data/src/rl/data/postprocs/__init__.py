"""Post-processing of collected batches before they enter a replay buffer."""

from rl.data.postprocs._densify import DensifyReward
from rl.data.postprocs._multistep import MultiStep

__all__ = ["DensifyReward", "MultiStep"]
