"""``rl.modules.models.utils``: the helper layers at TorchRL's import path.

TorchRL's docs import ``SquashDims`` from ``torchrl.modules.models.utils`` (ICML 2022
tutorial, "Models"); the layers live in :mod:`rl.modules.models` and are re-exported here
so that path carries over.
"""

from ._noisy import NoisyLazyLinear, NoisyLinear
from ._utils import SquashDims, Squeeze2dLayer, SqueezeLayer

__all__ = ["NoisyLazyLinear", "NoisyLinear", "SquashDims", "Squeeze2dLayer", "SqueezeLayer"]
