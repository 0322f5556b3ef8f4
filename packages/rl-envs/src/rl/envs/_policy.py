"""Plain ``nn.Module`` policies in ``rollout``: wrapped in a ``TensorDictModule`` as TorchRL does."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch
from tensordict import is_tensor_collection
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn

if TYPE_CHECKING:
    from ._env_base import EnvBase

__all__ = ["ActionsPolicy", "compatible_policy", "device_casting_policy"]


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


class ActionsPolicy:
    """Writes ``actions[t]`` at the ``t``-th call (``rollout(actions=...)``)."""

    def __init__(self, actions: Any, action_key: Any) -> None:
        self._actions = iter(actions)
        self._key = action_key

    def __call__(self, tensordict):
        try:
            action = next(self._actions)
        except StopIteration:
            raise ValueError("rollout(actions=...) has fewer actions than max_steps") from None
        if is_tensor_collection(action):
            tensordict.update(action)
        else:
            tensordict.set(self._key, torch.as_tensor(action))
        return tensordict


def device_casting_policy(env: EnvBase, policy: Any) -> Any:
    """``rollout(auto_cast_to_device=True)``: run ``policy`` on its parameters' device."""
    params = getattr(policy, "parameters", None)
    first = next(iter(params()), None) if params is not None else None
    if first is None or env.device is None or first.device == env.device:
        return policy
    device, env_device = first.device, env.device

    def cast(tensordict):
        out = policy(tensordict.to(device))
        return (tensordict if out is None else out).to(env_device)

    return cast
