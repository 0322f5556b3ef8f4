"""Model-predictive path-integral planner."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import NestedKey, TensorDictBase
from torch import nn

from ._planner import MPCPlannerBase, mask_post_done_reward

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
        if top_k > num_candidates:
            raise ValueError(f"top_k={top_k} exceeds num_candidates={num_candidates}")
        self.advantage_module = advantage_module
        self.planning_horizon = planning_horizon
        self.optim_steps = optim_steps
        self.num_candidates = num_candidates
        self.top_k = top_k
        self.reward_key = self._check_reward_key(reward_key)
        self.register_buffer("temperature", torch.as_tensor(temperature))

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
            rollout.set(
                self.reward_key,
                mask_post_done_reward(
                    rollout.get(self.reward_key), self._done(rollout), time_dim=-2
                ),
            )
            self.advantage_module(rollout)
            if "advantage" not in rollout.keys():
                raise KeyError(
                    "advantage_module wrote no 'advantage' entry into the imagined rollout"
                )
            advantage = rollout.get("advantage")[..., 0, :]  # [*B, N, 1]
            top = advantage.topk(self.top_k, dim=-2).indices  # [*B, k, 1]
            weights = (self.temperature * advantage.gather(-2, top)).exp()  # [*B, k, 1]
            weights = weights.reshape(*weights.shape[:-1], *([1] * (n_act + 1)))
            idx = top.reshape(*top.shape[:-1], *([1] * (n_act + 1))).expand(
                *batch, self.top_k, self.planning_horizon, *act_shape
            )
            best = actions.gather(k_dim, idx)
            total = weights.sum(k_dim, keepdim=True)
            mean = (weights * best).sum(k_dim, keepdim=True) / total
            std = ((weights * (best - mean).pow(2)).sum(k_dim, keepdim=True) / total).sqrt()
        return mean.select(k_dim, 0).select(-(n_act + 1), 0)
