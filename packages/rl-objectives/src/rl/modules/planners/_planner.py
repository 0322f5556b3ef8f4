"""The base class of model-predictive-control planners."""

from __future__ import annotations

import abc
from typing import Any

import torch
from tensordict import NestedKey, TensorDictBase, unravel_key
from tensordict.nn import TensorDictModuleBase

__all__ = ["MPCPlannerBase"]


class ActionSequence:
    """A policy that writes ``actions[..., t, :]`` at its ``t``-th call (one imagined rollout)."""

    def __init__(self, actions: torch.Tensor, action_key: NestedKey = "action") -> None:
        self.actions = actions
        self.action_key = action_key
        self.step = 0

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.step >= self.actions.shape[-2]:
            raise ValueError(
                f"the precomputed action sequence has {self.actions.shape[-2]} steps, "
                f"the rollout asked for step {self.step + 1}"
            )
        tensordict.set(self.action_key, self.actions[..., self.step, :])
        self.step += 1
        return tensordict


def mask_post_done_reward(
    reward: torch.Tensor, done: torch.Tensor | None, time_dim: int
) -> torch.Tensor:
    """Zeroes the rewards after the first ``done`` along ``time_dim`` (the done step keeps its reward).

    Args:
        reward: rewards ``[*B, T, 1]`` (time at ``time_dim``).
        done: done flags of the same shape, or ``None`` (nothing masked).
        time_dim: the time dimension.

    Returns:
        the masked rewards, same shape as ``reward``.
    """
    if done is None:
        return reward
    done = done.expand_as(reward).to(torch.int64)
    after = done.cumsum(time_dim) > done
    return torch.where(after, torch.zeros_like(reward), reward)


class MPCPlannerBase(TensorDictModuleBase, metaclass=abc.ABCMeta):
    """Model predictive control: plans an action by imagined rollouts in ``env``.

    Reads the env's observations from the input tensordict, calls :meth:`planning`
    and writes the projected action under ``action_key``. Imagined rollouts run the
    full horizon; rewards after a candidate's first ``done`` do not count.

    Args:
        env: the env to plan in (a :class:`~rl.envs.ModelBasedEnvBase` or any env that
            is not batch-locked: it must take tensordicts with extra leading dims).
        action_key: where to write the action.

    Raises:
        ValueError: when ``env`` is batch-locked or declares no reward.

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
        >>> from rl.modules import MPCPlannerBase
        >>> class StandStill(MPCPlannerBase):  # the simplest planner: always 0
        ...     def planning(self, td):
        ...         return torch.zeros(*td.batch_size, 1)
        >>> StandStill(PointEnv())(TensorDict(x=torch.ones(1)))["action"]
        tensor([0.])
    """

    def __init__(self, env: Any, action_key: NestedKey = "action") -> None:
        if env.batch_locked:
            raise ValueError(
                "Environment is batch_locked. MPCPlanners need an environment that accepts "
                "batched inputs with any batch size"
            )
        super().__init__()
        self.env = env
        self.action_key = unravel_key(action_key)
        self.action_spec = env.action_spec
        self.in_keys = list(env.observation_spec.keys(True, True))
        self.out_keys = [self.action_key]

    def _check_reward_key(self, reward_key: NestedKey) -> NestedKey:
        reward_key = unravel_key(reward_key)
        declared = [unravel_key(("next", k)) for k in self.env.full_reward_spec.keys(True, True)]
        if reward_key not in declared:
            raise ValueError(
                f"reward_key {reward_key!r} is not among the rewards the env declares "
                f"({declared or 'no reward spec'}); a planner needs a reward to rank candidates"
            )
        return reward_key

    def _check_input(self, tensordict: TensorDictBase) -> None:
        keys = set(tensordict.keys(True, True))
        for key in self.in_keys:
            if unravel_key(key) not in keys:
                raise KeyError(
                    f"{type(self).__name__} needs {key!r} in its input; got keys {sorted(map(str, keys))}"
                )
            spec_shape = self.env.observation_spec[key].shape
            value_shape = tensordict.get(key).shape
            tail = spec_shape[len(self.env.batch_size) :]
            if tuple(value_shape[len(value_shape) - len(tail) :]) != tuple(tail):
                raise ValueError(
                    f"{key!r} has shape {tuple(value_shape)}, expected trailing shape {tuple(tail)} "
                    f"from observation_spec {spec_shape}"
                )

    def _done(self, rollout: TensorDictBase) -> torch.Tensor | None:
        done = None
        for key in self.env.done_keys:
            key = unravel_key(key)
            last = key if isinstance(key, str) else key[-1]
            if last != "done":
                continue
            flag = rollout.get(unravel_key(("next", key)), None)
            if flag is not None:
                done = flag if done is None else done | flag
        return done

    def _set_search(
        self,
        planning_horizon: int,
        optim_steps: int,
        num_candidates: int,
        top_k: int,
        reward_key: NestedKey,
    ) -> None:
        """Stores (and checks) the arguments of a sampling planner (CEM, MPPI)."""
        if top_k > num_candidates:
            raise ValueError(f"top_k={top_k} exceeds num_candidates={num_candidates}")
        self.planning_horizon = planning_horizon
        self.optim_steps = optim_steps
        self.num_candidates = num_candidates
        self.top_k = top_k
        self.reward_key = self._check_reward_key(reward_key)

    def _masked_reward(self, rollout: TensorDictBase) -> torch.Tensor:
        """The rollout's rewards, zero after each candidate's first ``done``."""
        return mask_post_done_reward(rollout.get(self.reward_key), self._done(rollout), -2)

    def _search(self, tensordict: TensorDictBase, score, refit) -> torch.Tensor:
        """The sampling loop of CEM and MPPI: ``optim_steps`` times, draw
        ``num_candidates`` action sequences from a Gaussian (zero mean, unit std at first),
        roll them out, keep the ``top_k`` of ``score(rollout) -> [*B, N, 1]`` and refit
        the Gaussian with ``refit(best [*B, k, H, *A], top_scores [*B, k, 1], k_dim) ->
        (mean, std)``. Returns the mean's first action."""
        batch = tensordict.batch_size
        act_shape = self.action_spec.shape
        n_act = len(act_shape)
        k_dim = -(n_act + 2)  # candidates' dim in [*B, N, H, *A]
        start = tensordict.unsqueeze(-1).expand(*batch, self.num_candidates).to_tensordict()
        dtype = self.action_spec.dtype
        horizon = self.planning_horizon
        mean = torch.zeros(*batch, 1, horizon, *act_shape, device=tensordict.device, dtype=dtype)
        std = torch.ones_like(mean)
        for _ in range(self.optim_steps):
            noise = torch.randn(
                *batch, self.num_candidates, horizon, *act_shape, device=mean.device, dtype=dtype
            )
            actions = self.action_spec.project(mean + std * noise)
            scores = score(self.imagine(start.clone(), actions))  # [*B, N, 1]
            top_scores, top = scores.topk(self.top_k, dim=-2)  # [*B, k, 1]
            idx = top.reshape(*top.shape[:-1], *([1] * (n_act + 1))).expand(
                *batch, self.top_k, horizon, *act_shape
            )
            mean, std = refit(actions.gather(k_dim, idx), top_scores, k_dim)
        return mean.select(k_dim, 0).select(-(n_act + 1), 0)

    def imagine(self, tensordict: TensorDictBase, actions: torch.Tensor) -> TensorDictBase:
        """Rolls ``actions`` ``[*B, N, H, *A]`` out from ``tensordict`` expanded to ``[*B, N]``."""
        return self.env.rollout(
            max_steps=actions.shape[-1 - len(self.action_spec.shape)],
            policy=ActionSequence(actions, self.action_key),
            auto_reset=False,
            tensordict=tensordict,
            break_when_any_done=False,
        )

    @abc.abstractmethod
    def planning(self, tensordict: TensorDictBase) -> torch.Tensor:
        """Returns the planned action ``[*B, *action_shape]`` for the states in ``tensordict``."""
        raise NotImplementedError

    def forward(
        self, tensordict: TensorDictBase, tensordict_out: TensorDictBase | None = None, **kwargs
    ) -> TensorDictBase:
        if "params" in kwargs or "vmap" in kwargs:
            raise ValueError("MPCPlannerBase does not currently support functional programming.")
        self._check_input(tensordict)
        action = self.action_spec.project(self.planning(tensordict))
        if tensordict_out is None:
            tensordict_out = tensordict
        tensordict_out.set(self.action_key, action)
        return tensordict_out
