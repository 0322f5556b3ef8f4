"""Probe environments: tiny envs that each isolate one thing a learner can get wrong.

After Andy Jones, "Debugging RL, without the agonizing pain" (2021,
https://andyljones.com/posts/rl-debugging.html). Each probe trains in seconds and has a
known answer, so a broken bootstrap, discount, sign or action scaling shows at once:

============================== ======== ============= =================================
probe                          steps    observation   what a learner must get right
============================== ======== ============= =================================
``ConstantRewardProbe``        1        0             the value learns the constant 1
``ObservationRewardProbe``     1        ±1            the value depends on the obs
``DiscountingProbe``           2        0 then 1      the value discounts: V(s0) = γ
``ActionRewardProbe``          1        0             the policy picks the better action
``ObservationActionRewardProbe`` 1      ±1            policy and value use the obs
============================== ======== ============= =================================

Every probe comes in a discrete version (two actions, one-hot by default like
``GymEnv("CartPole-v1")``) and a continuous one (``continuous=True``: one action in
``[-2, 2]``, so a policy that forgets to rescale a ``tanh`` to the action spec cannot
reach the best action ``±1.5``). Each probe says what a learner should converge to with
:meth:`expected_value` and :meth:`optimal_action`.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from rl.core import Bounded, Categorical, Composite, OneHot, Unbounded

from ._native._base import NativeEnv

__all__ = [
    "ActionRewardProbe",
    "ConstantRewardProbe",
    "DiscountingProbe",
    "ObservationActionRewardProbe",
    "ObservationRewardProbe",
    "PROBES",
]

_ACTION_HIGH = 2.0
_TARGET = 0.75 * _ACTION_HIGH  # the best continuous action (times the observation sign)


class _Probe(NativeEnv):
    """Shared plumbing: batched one-float observations, episode clock, action decoding."""

    #: number of steps of an episode
    horizon: int = 1
    #: whether the observation is a random sign (else it is the step index)
    random_sign: bool = False

    def __init__(
        self,
        batch_size=None,
        device=None,
        continuous: bool = False,
        categorical_action_encoding: bool = False,
        run_type_checks: bool = False,
    ) -> None:
        super().__init__(device=device, batch_size=batch_size, run_type_checks=run_type_checks)
        bs = self.batch_size
        self.continuous = continuous
        self.categorical_action_encoding = categorical_action_encoding
        self.observation_spec = Composite(
            observation=Bounded(-1.0, 1.0, shape=(*bs, 1), device=self.device),
            shape=bs,
            device=self.device,
        )
        if continuous:
            self.action_spec = Bounded(
                -_ACTION_HIGH, _ACTION_HIGH, shape=(*bs, 1), device=self.device
            )
        elif categorical_action_encoding:
            self.action_spec = Categorical(2, shape=bs, device=self.device)
        else:
            self.action_spec = OneHot(2, shape=(*bs, 2), dtype=torch.int64, device=self.device)
        self._action_shape = self.action_spec.shape
        self.reward_spec = Unbounded(shape=(*bs, 1), device=self.device)
        dev = self._tensor_device
        self._obs = torch.zeros((*bs, 1), dtype=torch.float32, device=dev)
        self._t = torch.zeros(bs, dtype=torch.int64, device=dev)

    # ---------------------------------------------------------------- what to learn
    def expected_value(self, observation: torch.Tensor, gamma: float = 0.99) -> torch.Tensor:
        """The value of the optimal policy at ``observation`` (``[*B, 1]`` -> ``[*B, 1]``).

        Every probe defines it; ``_Probe`` itself is an abstract base.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define expected_value()")

    def optimal_action(self, observation: torch.Tensor) -> torch.Tensor:
        """The best action at ``observation``: an action index ``[*B]`` (discrete) or a
        continuous action ``[*B, 1]``; probes whose reward ignores the action return
        ``None``."""
        return None

    # ------------------------------------------------------------------- env hooks
    def _new_observation(self, t: torch.Tensor) -> torch.Tensor:
        if self.random_sign:
            coin = torch.rand(self._obs.shape, generator=self._generator, device=self._obs.device)
            return torch.where(coin < 0.5, -1.0, 1.0)
        return (t > 0).to(torch.float32).unsqueeze(-1).expand_as(self._obs).clone()

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        mask = self._reset_mask(tensordict)
        zeros = torch.zeros_like(self._t)
        new = self._new_observation(zeros)
        d = self.__dict__  # per-step state: plain dict writes, not nn.Module.__setattr__
        if mask is None:
            d["_obs"], d["_t"] = new, zeros
        else:
            d["_obs"] = torch.where(mask.unsqueeze(-1), new, d["_obs"])
            d["_t"] = d["_t"].masked_fill(mask, 0)
        return self._make_td({"observation": d["_obs"].clone(), **self._zero_flags()})

    def _action_value(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The action as ``[*B]``: an index in {0, 1}, or the continuous value."""
        action = tensordict["action"]
        if action.shape != self._action_shape:
            self._raise_action_shape(action)
        if self.continuous:
            return action.to(torch.float32).squeeze(-1)
        if self.categorical_action_encoding:
            return action.to(torch.float32)
        return action[..., 1].to(torch.float32)

    def _reward(self, action: torch.Tensor) -> torch.Tensor:
        """The reward of this step for the decoded ``action`` (``[*B]``); each probe's own."""
        raise NotImplementedError(f"{type(self).__name__} does not define _reward()")

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = self._action_value(tensordict)
        reward = self._reward(action).to(torch.float32).unsqueeze(-1)
        d = self.__dict__  # per-step state: plain dict writes, not nn.Module.__setattr__
        d["_t"] = t = d["_t"] + 1
        terminated = t >= self.horizon
        if self.horizon > 1:
            d["_obs"] = self._new_observation(t)
        truncated = torch.zeros_like(terminated)
        return self._make_td(
            {
                "observation": d["_obs"].clone(),
                "reward": reward,
                **self._flags(terminated, truncated),
            }
        )

    def _action_reward(self, action: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
        """+1 for the better action (index ``sign > 0``), -1 for the other; continuous:
        ``1 - (a - 1.5·sign)²``, so the best action is ``1.5·sign``."""
        if self.continuous:
            return 1.0 - (action - _TARGET * sign) ** 2
        better = (sign > 0).to(action.dtype)
        return torch.where(action == better, 1.0, -1.0)

    def _best_action(self, sign: torch.Tensor) -> torch.Tensor:
        if self.continuous:
            return (_TARGET * sign).to(torch.float32)
        return (sign.squeeze(-1) > 0).to(torch.int64)


class ConstantRewardProbe(_Probe):
    """One step, observation 0, reward +1: the value must learn the constant 1.

    A value that does not reach 1 has a broken loss or optimiser.

    Args:
        batch_size: ``[]`` for one env, ``[N]`` for N stepped together.
        device: where the tensors live.
        continuous: one action in ``[-2, 2]`` instead of two discrete actions.
        categorical_action_encoding: integer discrete actions instead of one-hot ones.
        run_type_checks: check actions against ``action_spec`` at every step.

    Examples:
        >>> from rl.envs import ConstantRewardProbe
        >>> env = ConstantRewardProbe(batch_size=[4])
        >>> td = env.rollout(1)
        >>> td["next", "reward"].squeeze(-1).tolist(), td["next", "terminated"].all().item()
        ([[1.0], [1.0], [1.0], [1.0]], True)
    """

    def _reward(self, action):
        return torch.ones_like(self._obs.squeeze(-1))

    def expected_value(self, observation, gamma=0.99):
        return torch.ones_like(observation)


class ObservationRewardProbe(_Probe):
    """One step, observation ±1 at random, reward = the observation.

    The value must learn ``V(obs) = obs``; a value that stays near 0 ignores its input.
    Same arguments as :class:`ConstantRewardProbe`.
    """

    random_sign = True

    def _reward(self, action):
        return self._obs.squeeze(-1)

    def expected_value(self, observation, gamma=0.99):
        return observation.clone()


class DiscountingProbe(_Probe):
    """Two steps, observation 0 then 1, reward +1 at the second step only.

    The value must learn ``V(0) = γ`` and ``V(1) = 1``: a wrong discount or a bootstrap
    that crosses the termination shows here. Same arguments as
    :class:`ConstantRewardProbe`.
    """

    horizon = 2

    def _reward(self, action):
        return (self._t == self.horizon - 1).to(torch.float32)

    def expected_value(self, observation, gamma=0.99):
        return torch.where(observation > 0, 1.0, gamma).to(observation.dtype)


class ActionRewardProbe(_Probe):
    """One step, observation 0; discrete: action 1 gives +1 and action 0 gives -1;
    continuous: reward ``1 - (a - 1.5)²``.

    The policy must learn to take action 1 (continuous: 1.5, which a policy that does
    not rescale its ``tanh`` to ``[-2, 2]`` cannot reach); the value must reach the best
    reward (1). Same arguments as :class:`ConstantRewardProbe`.
    """

    def _reward(self, action):
        return self._action_reward(action, torch.ones_like(action))

    def expected_value(self, observation, gamma=0.99):
        return torch.ones_like(observation)

    def optimal_action(self, observation):
        return self._best_action(torch.ones_like(observation))


class ObservationActionRewardProbe(_Probe):
    """One step, observation ±1 at random; discrete: the action must match the sign
    (action 1 for +1, action 0 for -1) for +1, else -1; continuous: reward
    ``1 - (a - 1.5·obs)²``.

    Policy and value must both use the observation. Same arguments as
    :class:`ConstantRewardProbe`.
    """

    random_sign = True

    def _reward(self, action):
        return self._action_reward(action, self._obs.squeeze(-1))

    def expected_value(self, observation, gamma=0.99):
        return torch.ones_like(observation)

    def optimal_action(self, observation):
        return self._best_action(observation)


#: every probe class, in the order a debugging session would try them
PROBES = (
    ConstantRewardProbe,
    ObservationRewardProbe,
    DiscountingProbe,
    ActionRewardProbe,
    ObservationActionRewardProbe,
)
