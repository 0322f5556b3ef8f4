"""Cross-entropy-method planner."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import NestedKey, TensorDictBase

from ._planner import MPCPlannerBase, mask_post_done_reward

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
        if top_k > num_candidates:
            raise ValueError(f"top_k={top_k} exceeds num_candidates={num_candidates}")
        self.planning_horizon = planning_horizon
        self.optim_steps = optim_steps
        self.num_candidates = num_candidates
        self.top_k = top_k
        self.reward_key = self._check_reward_key(reward_key)

    def planning(self, tensordict: TensorDictBase) -> torch.Tensor:
        batch = tensordict.batch_size
        act_shape = self.action_spec.shape
        n_act = len(act_shape)
        k_dim = -(n_act + 2)  # candidates' dim in [*B, N, H, *A]
        start = tensordict.unsqueeze(-1).expand(*batch, self.num_candidates).to_tensordict()
        dtype = self.action_spec.dtype
        mean = torch.zeros(
            *batch, 1, self.planning_horizon, *act_shape, device=tensordict.device, dtype=dtype
        )
        std = torch.ones_like(mean)
        for _ in range(self.optim_steps):
            noise = torch.randn(
                *batch,
                self.num_candidates,
                self.planning_horizon,
                *act_shape,
                device=mean.device,
                dtype=dtype,
            )
            actions = self.action_spec.project(mean + std * noise)
            rollout = self.imagine(start.clone(), actions)
            reward = mask_post_done_reward(
                rollout.get(self.reward_key), self._done(rollout), time_dim=-2
            )
            returns = reward.sum(-2)  # [*B, N, 1]
            top = returns.topk(self.top_k, dim=-2).indices  # [*B, k, 1]
            idx = top.reshape(*top.shape[:-1], *([1] * (n_act + 1))).expand(
                *batch, self.top_k, self.planning_horizon, *act_shape
            )
            best = actions.gather(k_dim, idx)
            mean = best.mean(k_dim, keepdim=True)
            std = best.std(k_dim, keepdim=True)
        return mean.select(k_dim, 0).select(-(n_act + 1), 0)
