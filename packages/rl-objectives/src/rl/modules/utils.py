"""``rl.modules.utils``: the scale mappings and module helpers at TorchRL's import path.

``torchrl.modules.utils`` gathers the functions that turn a network output into a positive
scale (``mappings("biased_softplus_1.0")``, the ``biased_softplus`` module and its inverse
``inv_softplus``), which TorchRL takes from tensordict, and the helpers that list the
environment transforms a module needs. They are the same objects here: the mappings are
tensordict's (what :class:`~tensordict.nn.NormalParamExtractor` uses), the helpers are
:func:`rl.modules.get_primers_from_module` and
:func:`rl.modules.get_env_transforms_from_module`. ``OrderedDict`` is
:class:`collections.OrderedDict`, which TorchRL re-exports from this module too.

Examples:
    >>> import torch
    >>> from rl.modules.utils import biased_softplus, inv_softplus, mappings
    >>> biased_softplus(1.0)(torch.zeros(2))
    tensor([1., 1.])
    >>> mappings("biased_softplus_1.0_0.1")(torch.zeros(1))
    tensor([1.])
    >>> round(inv_softplus(1.0), 4)
    0.5413
"""

from collections import OrderedDict

from tensordict.nn.utils import biased_softplus, inv_softplus, mappings

from .tensordict_module import get_env_transforms_from_module, get_primers_from_module

__all__ = [
    "OrderedDict",
    "biased_softplus",
    "get_env_transforms_from_module",
    "get_primers_from_module",
    "inv_softplus",
    "mappings",
]
