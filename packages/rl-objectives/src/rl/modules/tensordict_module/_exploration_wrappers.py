"""TorchRL's older exploration wrappers: a policy followed by an exploration module.

``EGreedyWrapper(policy, ...)`` is ``TensorDictSequential(policy, EGreedyModule(...))``
with a ``step`` that anneals the exploration module; the spec defaults to the policy's.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from tensordict.utils import NestedKey
from torch import nn

from rl.core import Composite, TensorSpec

from ._exploration import AdditiveGaussianModule, EGreedyModule, OrnsteinUhlenbeckProcessModule

__all__ = ["AdditiveGaussianWrapper", "EGreedyWrapper", "OrnsteinUhlenbeckProcessWrapper"]


def _policy_action_spec(policy: nn.Module, action_key: NestedKey) -> TensorSpec | None:
    spec = getattr(policy, "spec", None)
    if isinstance(spec, Composite):
        return spec.get(action_key, None)
    return spec


class _ExplorationWrapper(TensorDictSequential):
    """``policy`` followed by an exploration module; ``step`` anneals the module."""

    def step(self, frames: int = 1) -> None:
        """Anneals the exploration module (see its ``step``)."""
        self.module[-1].step(frames)

    @property
    def td_module(self) -> nn.Module:
        """The wrapped policy."""
        return self.module[0]


class EGreedyWrapper(_ExplorationWrapper):
    """``policy`` followed by an :class:`EGreedyModule` (TorchRL's older wrapper form).

    Args:
        policy: the policy writing ``action_key``.

    Keyword Args:
        eps_init, eps_end, annealing_num_steps, action_key, action_mask_key: as in
            :class:`EGreedyModule`.
        spec: the action spec (default: the policy's spec of ``action_key``).

    Examples:
        >>> import torch
        >>> from rl.core import Categorical
        >>> from rl.modules import EGreedyWrapper, QValueActor
        >>> policy = EGreedyWrapper(QValueActor(torch.nn.Linear(4, 3), spec=Categorical(3)))
        >>> type(policy.module[-1]).__name__
        'EGreedyModule'
    """

    def __init__(
        self,
        policy: TensorDictModuleBase,
        *,
        eps_init: float = 1.0,
        eps_end: float = 0.1,
        annealing_num_steps: int = 1000,
        action_key: NestedKey = "action",
        action_mask_key: NestedKey | None = None,
        spec: TensorSpec | None = None,
    ):
        if spec is None:
            spec = _policy_action_spec(policy, action_key)
        explore = EGreedyModule(
            spec,
            eps_init,
            eps_end,
            annealing_num_steps,
            action_key=action_key,
            action_mask_key=action_mask_key,
        )
        super().__init__(policy, explore)


class AdditiveGaussianWrapper(_ExplorationWrapper):
    """``policy`` followed by an :class:`AdditiveGaussianModule` (TorchRL's older wrapper form).

    Args:
        policy: the policy writing ``action_key``.

    Keyword Args:
        sigma_init, sigma_end, annealing_num_steps, mean, std, action_key, safe, device: as
            in :class:`AdditiveGaussianModule`.
        spec: the action spec (default: the policy's spec of ``action_key``).
    """

    def __init__(
        self,
        policy: TensorDictModuleBase,
        *,
        sigma_init: float = 1.0,
        sigma_end: float = 0.1,
        annealing_num_steps: int = 1000,
        mean: float = 0.0,
        std: float = 1.0,
        action_key: NestedKey = "action",
        spec: TensorSpec | None = None,
        safe: bool = True,
        device: torch.device | None = None,
    ):
        if spec is None:
            spec = _policy_action_spec(policy, action_key)
        explore = AdditiveGaussianModule(
            spec,
            sigma_init,
            sigma_end,
            annealing_num_steps,
            mean,
            std,
            action_key=action_key,
            safe=safe,
            device=device,
        )
        super().__init__(policy, explore)


class OrnsteinUhlenbeckProcessWrapper(_ExplorationWrapper):
    """``policy`` followed by an :class:`OrnsteinUhlenbeckProcessModule` (older wrapper form).

    Args:
        policy: the policy writing ``action_key``.

    Keyword Args:
        eps_init, eps_end, annealing_num_steps, theta, mu, sigma, dt, x0, sigma_min,
            n_steps_annealing, action_key, is_init_key, safe, device: as in
            :class:`OrnsteinUhlenbeckProcessModule`.
        spec: the action spec (default: the policy's spec of ``action_key``).
        key: the older name of ``action_key`` (deprecated; a ``DeprecationWarning``).

    Raises:
        ValueError: when ``key`` and a different non-default ``action_key`` are both given.
    """

    def __init__(
        self,
        policy: TensorDictModuleBase,
        *,
        eps_init: float = 1.0,
        eps_end: float = 0.1,
        annealing_num_steps: int = 1000,
        theta: float = 0.15,
        mu: float = 0.0,
        sigma: float = 0.2,
        dt: float = 0.01,
        x0: torch.Tensor | np.ndarray | float | None = None,
        sigma_min: float | None = None,
        n_steps_annealing: int = 1000,
        action_key: NestedKey = "action",
        is_init_key: NestedKey = "is_init",
        spec: TensorSpec | None = None,
        safe: bool = True,
        key: NestedKey | None = None,
        device: torch.device | None = None,
    ):
        if key is not None:
            if action_key not in ("action", key):
                raise ValueError(
                    f"got key={key!r} and action_key={action_key!r}: key is the older name of "
                    "action_key, pass action_key only"
                )
            warnings.warn(
                "OrnsteinUhlenbeckProcessWrapper(key=...) is deprecated: use action_key",
                DeprecationWarning,
                stacklevel=2,
            )
            action_key = key
        if spec is None:
            spec = _policy_action_spec(policy, action_key)
        explore = OrnsteinUhlenbeckProcessModule(
            spec,
            eps_init,
            eps_end,
            annealing_num_steps,
            theta,
            mu,
            sigma,
            dt,
            x0,
            sigma_min,
            n_steps_annealing,
            action_key=action_key,
            is_init_key=is_init_key,
            safe=safe,
            device=device,
        )
        super().__init__(policy, explore)
