"""rl.modules.models: plain ``nn.Module`` networks (MLP, ConvNet, noisy layers, ...)."""

from ._mlp import MLP
from ._noisy import NoisyLazyLinear, NoisyLinear, reset_noise
from ._utils import SquashDims, Squeeze2dLayer, SqueezeLayer

__all__ = [
    "MLP",
    "NoisyLazyLinear",
    "NoisyLinear",
    "SquashDims",
    "Squeeze2dLayer",
    "SqueezeLayer",
    "reset_noise",
]
