"""Plain ``nn.Module`` policies in ``rollout``: wrapped in a ``TensorDictModule`` as TorchRL does."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from tensordict import is_tensor_collection
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn

if TYPE_CHECKING:
    from ._common import EnvBase

__all__ = ["compatible_policy"]


def compatible_policy(env: EnvBase, policy: Any) -> Any:
    """``policy``, or a ``TensorDictModule`` around it when it is a module on tensors.

    A ``nn.Module`` that is not a ``TensorDictModuleBase`` and whose ``forward`` does not
    take a tensordict (one argument named ``tensordict`` / ``td`` or annotated as one)
    reads the observation entries and writes the action entries, as in TorchRL's
    ``rollout`` (e.g. ``nn.Sequential(nn.Linear(n_obs, n_act), ...)``). Functions and
    other callables are called with the tensordict, unchanged.
    """
    if not isinstance(policy, nn.Module) or isinstance(policy, TensorDictModuleBase):
        return policy
    try:
        params = inspect.signature(policy.forward).parameters
    except (TypeError, ValueError):
        return policy
    names = list(params)
    if set(names) in ({"tensordict"}, {"td"}) or (
        len(names) == 1 and is_tensor_collection(params[names[0]].annotation)
    ):
        return policy
    in_keys = list(env.observation_spec.keys(True, True))
    return TensorDictModule(policy, in_keys=in_keys, out_keys=list(env.action_keys))
