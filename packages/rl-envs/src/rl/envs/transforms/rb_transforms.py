"""Replay-buffer transforms under TorchRL's module path (``torchrl.envs.transforms.rb_transforms``)."""

from ._nstep import MultiStepTransform
from ._replay import NextStateReconstructor, PolicyAgeFilter

__all__ = ["MultiStepTransform", "NextStateReconstructor", "PolicyAgeFilter"]
