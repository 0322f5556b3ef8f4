"""Forward hooks that turn a plain network's action values into a greedy action.

Register one on an ``nn.Module`` (``module.register_forward_hook(hook)``): the module
then returns ``(action, action_value, chosen_action_value)`` (``(action, action_value)``
for the distributional hook) instead of the action values alone, so a plain network
wrapped in an :class:`~rl.modules.Actor` acts greedily. The selection is the one of
:class:`~rl.modules.QValueModule` / :class:`~rl.modules.DistributionalQValueModule`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict.utils import NestedKey
from torch import nn

from rl.core import TensorSpec

from ._common import _ACTION_SPACE_MAP
from ._qvalue import DistributionalQValueModule, QValueModule

__all__ = ["DistributionalQValueHook", "QValueHook"]

_NAMES = sorted(k for k in _ACTION_SPACE_MAP if isinstance(k, str))


def _check_action_space(cls: str, action_space) -> str:
    if isinstance(action_space, TensorSpec):
        raise TypeError(
            f"{cls} takes the action space as a string (one of {_NAMES}), got the spec "
            f"{type(action_space).__name__}"
        )
    if action_space not in _NAMES:
        raise ValueError(
            f"{cls}: action_space was not specified/not compatible: got {action_space!r}, "
            f"expected one of {_NAMES}"
        )
    return action_space


def _kwarg_name(key: NestedKey) -> str:
    # tensordict's dispatch names a nested key's keyword by joining its parts with "_"
    return "_".join(key) if isinstance(key, tuple) else key


class QValueHook:
    """Forward hook that returns the greedy action of the values a module outputs.

    Args:
        action_space (str): ``"one_hot"``, ``"mult_one_hot"``, ``"binary"`` or
            ``"categorical"`` (dashes accepted, as in :class:`~rl.modules.QValueModule`).
        var_nums (int, optional): cardinality of each component for
            ``"mult_one_hot"``.
        action_value_key (NestedKey, optional): name of the action values (default
            ``"action_value"``).
        action_mask_key (NestedKey, optional): key of a mask of the allowed actions
            (default: no mask).
        out_keys (list of NestedKey, optional): names of the outputs (default
            ``["action", "action_value", "chosen_action_value"]``).

    Called as ``hook(net, observation, values)`` (the forward-hook signature), it returns
    ``(action, values, chosen_action_value)``: for values ``[*B, n]``, the action
    (``[*B, n]`` one-hot or ``[*B]`` index), the values unchanged and the value of the
    chosen action ``[*B, 1]``.

    Raises:
        ValueError: an unknown ``action_space``.
        TypeError: a spec passed as ``action_space``.

    Examples:
        >>> import torch
        >>> from rl.modules import QValueHook
        >>> net = torch.nn.Linear(4, 3)
        >>> handle = net.register_forward_hook(QValueHook("categorical"))
        >>> action, values, chosen = net(torch.randn(5, 4))
        >>> action.shape, values.shape, chosen.shape
        (torch.Size([5]), torch.Size([5, 3]), torch.Size([5, 1]))
        >>> bool((values.gather(-1, action[:, None]) == chosen).all())
        True
    """

    def __init__(
        self,
        action_space: str,
        var_nums: int | None = None,
        action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        action_space = _check_action_space(type(self).__name__, action_space)
        self.qvalue_model = QValueModule(
            action_space=action_space,
            var_nums=var_nums,
            action_value_key=action_value_key,
            action_mask_key=action_mask_key,
            out_keys=out_keys,
        )
        self.action_value_key = _kwarg_name(self.qvalue_model.in_keys[0])

    def __call__(
        self, net: nn.Module | None, observation, values: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        return self.qvalue_model(**{self.action_value_key: values})


class DistributionalQValueHook(QValueHook):
    """Forward hook that returns the greedy action of a distributional value network.

    The module outputs log-probabilities ``[*B, atoms, n]`` over the ``support`` atoms;
    the action maximises the expected value ``sum(exp(logp) * support)`` (Bellemare et
    al. 2017, https://arxiv.org/abs/1707.06887).

    Args:
        action_space (str): as :class:`QValueHook`.
        support (torch.Tensor): the atoms' values ``[atoms]``.
        var_nums, action_value_key, action_mask_key: as :class:`QValueHook`.
        out_keys (list of NestedKey, optional): default ``["action", "action_value"]``.

    Called as ``hook(net, observation, values)``, it returns ``(action, values)``.

    Raises:
        ValueError: an unknown ``action_space``.
        TypeError: a spec passed as ``action_space``.

    Examples:
        >>> import torch
        >>> from rl.modules import DistributionalQValueHook
        >>> support = torch.tensor([-1.0, 0.0, 1.0])
        >>> hook = DistributionalQValueHook("categorical", support=support)
        >>> logp = torch.randn(5, 3, 2).log_softmax(-2)
        >>> action, values = hook(None, None, logp)
        >>> expected = (logp.exp() * support[:, None]).sum(-2).argmax(-1)
        >>> bool((action == expected).all())
        True
    """

    def __init__(
        self,
        action_space: str,
        support: torch.Tensor,
        var_nums: int | None = None,
        action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        action_space = _check_action_space(type(self).__name__, action_space)
        self.qvalue_model = DistributionalQValueModule(
            action_space=action_space,
            support=support,
            var_nums=var_nums,
            action_value_key=action_value_key,
            action_mask_key=action_mask_key,
            out_keys=out_keys,
        )
        self.action_value_key = _kwarg_name(self.qvalue_model.in_keys[0])
