"""MeanActionSelector: runs a belief-space (mean, covariance) policy on a plain env."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from rl.core import Composite, Unbounded

from ._base import Transform, _missing_key_error
from ._spec_utils import NestedKey, normalize_key

__all__ = ["MeanActionSelector"]


def _sub(key: NestedKey, name: str) -> tuple:
    return (*key, name) if isinstance(key, tuple) else (key, name)


class MeanActionSelector(Transform):
    """Lets a Gaussian belief policy (PILCO-style moment matching) act in a standard env.

    Such a policy reads a state belief ``(("observation", "mean"), ("observation",
    "var"))`` and writes an action distribution ``(("action", "mean"), ...)``. Forward,
    the observation ``[*B, D]`` becomes the deterministic belief: its ``"mean"`` and a
    zero covariance ``"var"`` ``[*B, D, D]``. Inverse, ``("action", "mean")`` is given
    to the env as its ``"action"``.

    Args:
        observation_key (NestedKey): the env's observation. Defaults to
            ``"observation"``.
        action_key (NestedKey): the env's action. Defaults to ``"action"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = MeanActionSelector()
        >>> td = t(TensorDict(observation=torch.ones(3)))
        >>> td["observation", "mean"], td["observation", "var"].shape
        (tensor([1., 1., 1.]), torch.Size([3, 3]))
        >>> t.inv(TensorDict({("action", "mean"): torch.tensor([0.5])}))["action"]
        tensor([0.5000])
    """

    def __init__(
        self, observation_key: NestedKey = "observation", action_key: NestedKey = "action"
    ) -> None:
        observation_key = normalize_key(observation_key)
        action_key = normalize_key(action_key)
        super().__init__()
        self._observation_key = observation_key
        self._action_key = action_key

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        obs = next_tensordict.get(self._observation_key, None)
        if obs is None:
            if self.missing_tolerance:
                return next_tensordict
            raise _missing_key_error(self, self._observation_key, next_tensordict)
        if isinstance(obs, TensorDictBase):  # already a belief
            return next_tensordict
        next_tensordict.del_(self._observation_key)
        next_tensordict.set(_sub(self._observation_key, "mean"), obs)
        var = obs.new_zeros((*obs.shape, obs.shape[-1]))
        next_tensordict.set(_sub(self._observation_key, "var"), var)
        return next_tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        mean = tensordict.get(_sub(self._action_key, "mean"), None)
        if mean is not None:
            tensordict.set(self._action_key, mean)
        return tensordict

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        spec = observation_spec[self._observation_key]
        size = spec.shape[-1]
        observation_spec[self._observation_key] = Composite(
            mean=spec.clone(),
            var=Unbounded(
                shape=torch.Size((*spec.shape, size)), dtype=spec.dtype, device=spec.device
            ),
            shape=spec.shape,
        )
        return observation_spec
