"""Model-predictive path-integral planner."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import NestedKey, TensorDictBase
from torch import nn

from ._planner import MPCPlannerBase

__all__ = ["MPPIPlanner"]


class MPPIPlanner(MPCPlannerBase):
    """Plans with model-predictive path integral control (Williams et al. 2015, https://arxiv.org/abs/1509.01149).

    As :class:`CEMPlanner`, but candidates are scored by ``advantage_module`` (e.g. a
    TD(lambda) estimator with a value network) at the first step of each imagined
    rollout, and the Gaussian is refit to the ``top_k`` candidates weighted by
    ``exp(temperature * advantage)``.

    Args:
        env: the env to plan in (not batch-locked).
        advantage_module: writes ``"advantage"`` into an imagined rollout ``[*B, N, H]``.
        temperature: the weights' inverse temperature.
        planning_horizon: length ``H`` of the imagined rollouts.
        optim_steps: number of refits.
        num_candidates: sequences drawn per refit.
        top_k: sequences kept to refit the Gaussian.
        reward_key: the reward entry of the rollouts.
        action_key: where to write the action.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.core import Bounded, Composite, Unbounded
        >>> from rl.envs import ModelBasedEnvBase
        >>> class PointEnv(ModelBasedEnvBase):  # x' = x + a, reward -|x'|
        ...     def __init__(self):
        ...         super().__init__(TensorDictModule(
        ...             lambda x, a: (x + a, -(x + a).abs()),
        ...             in_keys=["x", "action"], out_keys=["x", "reward"]))
        ...         self.observation_spec = Composite(x=Unbounded((1,)))
        ...         self.action_spec = Bounded(-1.0, 1.0, (1,))
        ...         self.reward_spec = Unbounded((1,))
        ...     def _reset(self, td):
        ...         return TensorDict(x=torch.ones(1))
        >>> from rl.modules import MPPIPlanner
        >>> class ReturnToGo(torch.nn.Module):
        ...     def forward(self, td):
        ...         td["advantage"] = td["next", "reward"].flip(-2).cumsum(-2).flip(-2)
        ...         return td
        >>> env = PointEnv()
        >>> planner = MPPIPlanner(env, ReturnToGo(), temperature=1.0, planning_horizon=3,
        ...                       optim_steps=3, num_candidates=64, top_k=8)
        >>> bool(planner(env.reset())["action"] < 0)
        True
    """

    def __init__(
        self,
        env: Any,
        advantage_module: nn.Module,
        temperature: float,
        planning_horizon: int,
        optim_steps: int,
        num_candidates: int,
        top_k: int,
        reward_key: NestedKey = ("next", "reward"),
        action_key: NestedKey = "action",
    ) -> None:
        super().__init__(env=env, action_key=action_key)
        self._set_search(planning_horizon, optim_steps, num_candidates, top_k, reward_key)
        self.advantage_module = advantage_module
        self.register_buffer("temperature", torch.as_tensor(temperature))

    def planning(self, tensordict: TensorDictBase) -> torch.Tensor:
        return self._search(tensordict, self._advantage, self._refit)

    def _advantage(self, rollout: TensorDictBase) -> torch.Tensor:
        rollout.set(self.reward_key, self._masked_reward(rollout))
        self.advantage_module(rollout)
        if "advantage" not in rollout.keys():
            raise KeyError("advantage_module wrote no 'advantage' entry into the imagined rollout")
        return rollout.get("advantage")[..., 0, :]  # [*B, N, 1]

    def _refit(self, best: torch.Tensor, top_scores: torch.Tensor, k_dim: int) -> tuple:
        """The Gaussian of the ``top_k`` sequences weighted by ``exp(temperature * A)``."""
        n_act = len(self.action_spec.shape)
        weights = (self.temperature * top_scores).exp()  # [*B, k, 1]
        weights = weights.reshape(*weights.shape[:-1], *([1] * (n_act + 1)))
        total = weights.sum(k_dim, keepdim=True)
        mean = (weights * best).sum(k_dim, keepdim=True) / total
        std = ((weights * (best - mean).pow(2)).sum(k_dim, keepdim=True) / total).sqrt()
        return mean, std
