"""Cross-entropy-method planner."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import NestedKey, TensorDictBase

from ._planner import MPCPlannerBase

__all__ = ["CEMPlanner"]


class CEMPlanner(MPCPlannerBase):
    """Plans with the cross-entropy method (Botev et al. 2013, https://doi.org/10.1016/B978-0-444-53859-8.00003-5).

    For ``optim_steps`` rounds: draw ``num_candidates`` action sequences of length
    ``planning_horizon`` from a Gaussian (zero mean, unit std at first), roll them out
    in ``env``, and refit the Gaussian's mean and std to the ``top_k`` sequences with the
    highest summed reward. Returns the mean's first action.

    Args:
        env: the env to plan in (not batch-locked).
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
        >>> from rl.modules import CEMPlanner
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
        >>> env = PointEnv()
        >>> planner = CEMPlanner(env, planning_horizon=3, optim_steps=3, num_candidates=64, top_k=8)
        >>> bool(planner(env.reset())["action"] < 0)
        True
    """

    def __init__(
        self,
        env: Any,
        planning_horizon: int,
        optim_steps: int,
        num_candidates: int,
        top_k: int,
        reward_key: NestedKey = ("next", "reward"),
        action_key: NestedKey = "action",
    ) -> None:
        super().__init__(env=env, action_key=action_key)
        self._set_search(planning_horizon, optim_steps, num_candidates, top_k, reward_key)

    def planning(self, tensordict: TensorDictBase) -> torch.Tensor:
        return self._search(tensordict, self._returns, _refit)

    def _returns(self, rollout: TensorDictBase) -> torch.Tensor:
        return self._masked_reward(rollout).sum(-2)  # [*B, N, 1]


def _refit(best: torch.Tensor, top_scores: torch.Tensor, k_dim: int) -> tuple:
    """The Gaussian of the ``top_k`` sequences."""
    return best.mean(k_dim, keepdim=True), best.std(k_dim, keepdim=True)
