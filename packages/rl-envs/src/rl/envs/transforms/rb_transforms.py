"""Replay-buffer transforms under TorchRL's module path (``torchrl.envs.transforms.rb_transforms``)."""

from ._parity_nstep import MultiStepTransform
from ._parity_replay import NextStateReconstructor, PolicyAgeFilter

__all__ = ["MultiStepTransform", "NextStateReconstructor", "PolicyAgeFilter"]
