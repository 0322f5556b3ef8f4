"""Context managers that hold a network's parameters out of the gradient.

Inside the ``with`` block the parameters have ``requires_grad=False``: a loss computed
through the network trains its inputs (e.g. an actor's action) but not the network.
Under ``torch.compile`` (dynamo does not trace ``requires_grad_``), the network's
parameters are swapped for detached copies of themselves inside the block instead: the
same gradients, in one graph.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

__all__ = ["hold_out_net", "hold_out_params"]


class hold_out_net:
    """Context manager that turns off ``requires_grad`` of a network's parameters.

    Args:
        network (nn.Module): the network to freeze inside the ``with`` block.

    Examples:
        >>> import torch
        >>> from rl.objectives import hold_out_net
        >>> critic = torch.nn.Linear(2, 1)
        >>> action = torch.ones(1, 2, requires_grad=True)
        >>> with hold_out_net(critic):
        ...     critic(action).sum().backward()
        >>> critic.weight.grad is None, action.grad is not None
        (True, True)
    """

    def __init__(self, network: nn.Module) -> None:
        self.network = network
        self._params: list[torch.Tensor] = []
        self._swapped: list[tuple[nn.Module, str, torch.Tensor]] = []

    def __enter__(self):
        if torch.compiler.is_compiling():  # no requires_grad_ in a graph: detached copies
            self._swapped = [
                (module, name, param)
                for module in self.network.modules()
                for name, param in module._parameters.items()
                if param is not None and param.requires_grad
            ]
            for module, name, param in self._swapped:
                module._parameters[name] = param.detach()
            return self
        self._params = [p for p in self.network.parameters() if p.requires_grad]
        for p in self._params:
            p.requires_grad_(False)
        return self

    def __exit__(self, *exc) -> None:
        if self._swapped:
            for module, name, param in self._swapped:
                module._parameters[name] = param
            self._swapped = []
            return
        for p in self._params:
            p.requires_grad_(True)


class hold_out_params(hold_out_net):
    """Context manager that turns off ``requires_grad`` of the given parameters.

    Args:
        params (iterable of tensors): the parameters to freeze inside the ``with`` block.

    Examples:
        >>> import torch
        >>> from rl.objectives import hold_out_params
        >>> critic = torch.nn.Linear(2, 1)
        >>> with hold_out_params([critic.weight]):
        ...     critic(torch.ones(1, 2)).sum().backward()
        >>> critic.weight.grad is None, critic.bias.grad
        (True, tensor([1.]))
    """

    def __init__(self, params: Iterable[torch.Tensor]) -> None:
        self._given = list(params)
        self._params = []

    def __enter__(self):
        self._params = [p for p in self._given if p.requires_grad]
        for p in self._params:
            p.requires_grad_(False)
        return self

    def __exit__(self, *exc) -> None:
        for p in self._params:
            p.requires_grad_(True)
