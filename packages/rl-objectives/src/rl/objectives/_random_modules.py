"""The registry of random module classes (what ``torch.vmap`` must draw per member for)."""

from __future__ import annotations

from torch import nn
from torch.nn.modules.dropout import _DropoutNd

__all__ = ["add_random_module"]

#: module classes whose forward draws random numbers (TorchRL's ``RANDOM_MODULE_LIST``)
RANDOM_MODULE_LIST: tuple[type[nn.Module], ...] = (_DropoutNd,)


def add_random_module(module: type[nn.Module]) -> None:
    """Declares a module class random, for losses that vmap their networks.

    ``torch.vmap`` refuses random calls unless told how to draw them
    (``randomness="different"``). A loss that runs a network over an ensemble with vmap
    checks whether the network holds an instance of a class listed here (dropout layers
    by default) to choose that mode; register your own noisy layers with this function.
    Registering a class twice has no further effect.

    Args:
        module: the ``nn.Module`` subclass (the class, not an instance).

    Raises:
        TypeError: ``module`` is not an ``nn.Module`` subclass.

    Examples:
        >>> import torch
        >>> from rl.objectives import add_random_module
        >>> class NoisyLayer(torch.nn.Module):
        ...     def forward(self, x):
        ...         return x + torch.randn_like(x)
        >>> add_random_module(NoisyLayer)
        >>> from rl.objectives._random_modules import vmap_randomness
        >>> vmap_randomness(torch.nn.Sequential(torch.nn.Linear(2, 2), NoisyLayer()))
        'different'
    """
    global RANDOM_MODULE_LIST
    if not (isinstance(module, type) and issubclass(module, nn.Module)):
        raise TypeError(
            "add_random_module takes an nn.Module subclass (the class itself), got "
            f"{module!r} of type {type(module).__name__}"
        )
    if module not in RANDOM_MODULE_LIST:
        RANDOM_MODULE_LIST = (*RANDOM_MODULE_LIST, module)


def vmap_randomness(*modules: nn.Module) -> str:
    """``"different"`` when one of ``modules`` holds a registered random module, else
    ``"error"`` (TorchRL's default ``LossModule.vmap_randomness``)."""
    for module in modules:
        for sub in module.modules():
            if isinstance(sub, RANDOM_MODULE_LIST):
                return "different"
    return "error"
