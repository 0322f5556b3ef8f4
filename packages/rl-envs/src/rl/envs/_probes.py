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

``SignProbe`` is the multi-agent member (not in :data:`PROBES`, which lists the
single-agent ones): every agent of the group ``"agents"`` sees its own random sign and
must answer it, so a multi-agent learner that mixes up the agents' data, or reads the
wrong group keys, shows at once.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import Bounded, Categorical, Composite, OneHot, Unbounded

from ._done import default_done_spec
from ._native._base import NativeEnv

__all__ = [
    "ActionRewardProbe",
    "ConstantRewardProbe",
    "DiscountingProbe",
    "ObservationActionRewardProbe",
    "ObservationRewardProbe",
    "PROBES",
    "SignProbe",
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


class SignProbe(NativeEnv):
    """A multi-agent probe: every agent sees a random sign and must answer it.

    Agent ``i`` observes ``s_i = ±1`` at ``("agents", "observation")`` (``[*B, n_agents,
    1]``), drawn anew at every step. Continuous actions in ``[-1, 1]`` earn ``-4 (a_i -
    s_i / 2)²`` (best 0 at ``a_i = s_i / 2``, so a policy that ignores the action bounds
    or its own observation loses); discrete actions in ``{0, 1, 2}`` (``Categorical``)
    earn 1 when ``a_i - 1 = s_i``, else 0. Rewards are per agent at ``("agents",
    "reward")``. Episodes last ``max_steps`` steps; ``done`` and ``terminated`` sit at the
    root, one per environment, as VMAS writes them (no ``truncated``).

    An episode's best return per agent is 0 (continuous) or ``max_steps`` (discrete);
    answering 0 earns -1 a step (continuous), a constant discrete answer 1/2 a step on
    average. MAPPO, IPPO and QMIX learn it in seconds (``examples/multiagent``).

    Args:
        batch_size: the number of environments stepped together (an int or ``[N]``;
            ``[]`` for one env).
        n_agents: the agents of the group ``"agents"``.
        max_steps: the length of an episode.
        continuous: one action in ``[-1, 1]`` per agent instead of three discrete ones.
        device: where the tensors live.
        run_type_checks: check actions against ``action_spec`` at every step.

    Raises:
        ValueError: if ``n_agents`` or ``max_steps`` is below 1, or if an action's shape
            differs from the action spec's.

    Examples:
        >>> import torch
        >>> from rl.envs import SignProbe
        >>> env = SignProbe(batch_size=[4], n_agents=3, max_steps=2, continuous=True)
        >>> td = env.rollout(2)
        >>> td["agents", "observation"].shape, td["next", "agents", "reward"].shape
        (torch.Size([4, 2, 3, 1]), torch.Size([4, 2, 3, 1]))
        >>> td["next", "done"][0].squeeze(-1).tolist()
        [False, True]
        >>> td = env.reset()
        >>> td["agents", "action"] = env.optimal_action(td["agents", "observation"])
        >>> env.step(td)["next", "agents", "reward"].abs().max().item()
        0.0
    """

    def __init__(
        self,
        batch_size=None,
        n_agents: int = 2,
        max_steps: int = 4,
        continuous: bool = False,
        *,
        device=None,
        run_type_checks: bool = False,
    ) -> None:
        if n_agents < 1 or max_steps < 1:
            raise ValueError(
                f"SignProbe needs n_agents >= 1 and max_steps >= 1, got n_agents={n_agents}, "
                f"max_steps={max_steps}"
            )
        super().__init__(device=device, batch_size=batch_size, run_type_checks=run_type_checks)
        b, n, dev = tuple(self.batch_size), n_agents, self.device
        self.n_agents, self.max_steps, self.continuous = n_agents, max_steps, continuous
        # VMAS's flags: done and terminated at the root, no truncated
        self.full_done_spec = default_done_spec(self.batch_size, dev)
        self.observation_spec = Composite(
            agents=Composite(
                observation=Bounded(-1.0, 1.0, (*b, n, 1), device=dev), shape=(*b, n), device=dev
            ),
            shape=b,
            device=dev,
        )
        if continuous:
            action = Bounded(-1.0, 1.0, (*b, n, 1), device=dev)
        else:
            action = Categorical(3, (*b, n), device=dev)
        self.action_spec = Composite(
            agents=Composite(action=action, shape=(*b, n), device=dev), shape=b, device=dev
        )
        self.reward_spec = Composite(
            agents=Composite(reward=Unbounded((*b, n, 1), device=dev), shape=(*b, n), device=dev),
            shape=b,
            device=dev,
        )
        self._action_shape = action.shape
        self._t = torch.zeros(b, dtype=torch.int64, device=self._tensor_device)
        self._sign = torch.ones((*b, n, 1), device=self._tensor_device)

    def optimal_action(self, observation: torch.Tensor) -> torch.Tensor:
        """The best action for the signs ``observation`` (``[*B, n_agents, 1]``): the
        continuous action ``s / 2`` (same shape) or the discrete index ``s + 1``
        (``[*B, n_agents]``)."""
        if self.continuous:
            return observation / 2
        return (observation.squeeze(-1) + 1).to(torch.int64)

    def _new_signs(self) -> torch.Tensor:
        draw = torch.randint(
            0, 2, self._sign.shape, generator=self._generator, device=self._tensor_device
        )
        return draw.to(torch.float32) * 2 - 1

    def _observe(self, reward: torch.Tensor | None = None) -> TensorDictBase:
        agents = {"observation": self._sign.clone()}
        if reward is not None:
            agents["reward"] = reward
        group = TensorDict._new_unsafe(
            agents, batch_size=(*self.batch_size, self.n_agents), device=self.device
        )
        done = (self._t >= self.max_steps).unsqueeze(-1)
        return self._make_td({"agents": group, "done": done, "terminated": done.clone()})

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        mask = self._reset_mask(tensordict)
        d = self.__dict__  # per-step state: plain dict writes, not nn.Module.__setattr__
        if mask is None:
            d["_t"] = torch.zeros_like(self._t)
            d["_sign"] = self._new_signs()
        else:  # the other environments keep their clock and the sign they were shown
            d["_t"] = self._t.masked_fill(mask, 0)
            keep = mask.reshape(*mask.shape, 1, 1)
            d["_sign"] = torch.where(keep, self._new_signs(), self._sign)
        return self._observe()

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(("agents", "action"))
        if action.shape != self._action_shape:
            raise ValueError(
                f"('agents', 'action') has shape {tuple(action.shape)}, expected "
                f"{tuple(self._action_shape)} from action_spec {self.action_spec!r}"
            )
        if self.continuous:
            reward = -4 * (action - self._sign / 2).pow(2)
        else:
            reward = ((action.unsqueeze(-1) - 1).to(torch.float32) == self._sign).to(torch.float32)
        d = self.__dict__
        d["_t"] = self._t + 1
        d["_sign"] = self._new_signs()
        return self._observe(reward)
