"""``LBForagingWrapper`` and ``LBForagingEnv``: Level-Based Foraging as a multi-agent env.

Level-Based Foraging (https://github.com/semitable/lb-foraging, paper:
https://arxiv.org/abs/2006.07869) is a cooperative grid world: agents and food items have
levels, and a food item is collected when the agents loading it next to it have levels
that sum to at least its own. It is one gymnasium env whose observation, action and
reward are per-agent tuples and whose episode ends for the whole team at once.

lbforaging is imported on first use; ``pip install "rl-envs[lbforaging]"`` installs it.
"""

from __future__ import annotations

import difflib
import importlib.util
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import Categorical, Composite, Unbounded
from rl.envs._env_base import EnvBase
from rl.envs._gym_spaces import space_leaves

from ._common import ClassProperty

__all__ = ["LBForagingEnv", "LBForagingWrapper"]

_has_lbforaging = importlib.util.find_spec("lbforaging") is not None
_INSTALL = 'pip install "rl-envs[lbforaging]"'


def _import_lbforaging() -> ModuleType:
    if not _has_lbforaging:
        raise ImportError(f"lbforaging is not installed: {_INSTALL} to use LBForagingEnv")
    import lbforaging  # registers the Foraging-* gymnasium ids

    return lbforaging


class LBForagingWrapper(EnvBase):
    """Wraps a Level-Based Foraging env (``gymnasium.make("Foraging-8x8-2p-3f-v3")``).

    The env has ``batch_size=[]`` and one group, ``"agents"`` (batch size ``[n_agents]``,
    agents ``"0"``, ``"1"``...), holding ``("agents", "observation")`` (float32
    ``[n_agents, obs_dim]``, bounded by the env's observation space),
    ``("agents", "action")`` (an index, ``Categorical(6)``, ``[n_agents]``; one-hot
    ``[n_agents, 6]`` with ``categorical_actions=False``) and ``("agents", "reward")``
    (float32 ``[n_agents, 1]``). The team's ``done`` / ``terminated`` / ``truncated``
    (``[1]``) sit at the root. lbforaging reports the end of its step budget as a
    termination; here an episode cut by the budget with food left on the field is
    ``truncated`` (a value target bootstraps through it), and collecting the last food
    is ``terminated``, at the budget's last step too.

    Args:
        env: the Level-Based Foraging gymnasium env to wrap.
        categorical_actions: actions as indices (default) rather than one-hot.
        seed: the seed of the next reset (:meth:`set_seed` sets it again).
        device: the device of the output tensors.
        batch_size: must be ``[]``.
        allow_done_after_reset: tolerate done flags right after a reset.
        run_type_checks: debug mode, check every action against ``action_spec``.

    Raises:
        TypeError: ``env`` is not a Level-Based Foraging gymnasium env.
        ValueError: a non-empty ``batch_size``.

    Examples:
        >>> import gymnasium
        >>> import lbforaging
        >>> from rl.envs import LBForagingWrapper
        >>> base = gymnasium.make("Foraging-8x8-2p-3f-v3", disable_env_checker=True)
        >>> env = LBForagingWrapper(base, seed=0)
        >>> rollout = env.rollout(3)
        >>> rollout["agents", "observation"].shape, rollout["next", "agents", "reward"].shape
        (torch.Size([3, 2, 15]), torch.Size([3, 2, 1]))
    """

    git_url = "https://github.com/semitable/lb-foraging"
    libname = "lbforaging"
    _step_reads_observations = False  # steps from the action alone

    def __init__(
        self,
        env: Any = None,
        *,
        categorical_actions: bool = True,
        seed: int | None = None,
        device=None,
        batch_size=None,
        allow_done_after_reset: bool = False,
        run_type_checks: bool = False,
    ) -> None:
        _import_lbforaging()
        from lbforaging.foraging.environment import ForagingEnv

        if not isinstance(env, gym.Env) or not isinstance(env.unwrapped, ForagingEnv):
            raise TypeError(
                "LBForagingWrapper wraps a Level-Based Foraging gymnasium env "
                f"(gymnasium.make('Foraging-8x8-2p-3f-v3')), got {type(env).__name__}"
            )
        if batch_size is not None and len(torch.Size(batch_size)):
            raise ValueError(
                f"LBForaging envs are not batched: batch_size must be [], got {list(batch_size)}"
            )
        super().__init__(
            device=device,
            batch_size=(),
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
        )
        self._env = env
        self.categorical_actions = categorical_actions
        self._seed = seed
        self._make_specs()

    @property
    def env(self) -> gym.Env:
        """The wrapped gymnasium env."""
        return self._env

    @property
    def lib(self) -> ModuleType:
        """The ``lbforaging`` module."""
        return _import_lbforaging()

    @ClassProperty
    def available_envs(cls) -> list[str]:
        """The registered ``Foraging-*`` ids (``[]`` when lbforaging is not installed)."""
        if not _has_lbforaging:
            return []
        _import_lbforaging()
        return sorted(k for k in gym.envs.registry if k.startswith("Foraging-"))

    def _make_specs(self) -> None:
        env = self._env
        n = int(env.unwrapped.n_agents)
        self.n_agents = n
        self.group_map = {"agents": [str(i) for i in range(n)]}
        dev = self.device
        (obs_leaf,) = space_leaves(env.observation_space, (), False, ("observation",))
        (act_leaf,) = space_leaves(env.action_space, (), self.categorical_actions, ("action",))
        self._obs_leaf, self._act_leaf = obs_leaf, act_leaf
        self.n_actions = int(env.action_space.spaces[0].n)
        self.full_observation_spec = Composite(
            agents=Composite(observation=obs_leaf.spec, shape=(n,)), device=dev
        )
        self.full_action_spec = Composite(
            agents=Composite(action=act_leaf.spec, shape=(n,)), device=dev
        )
        self.full_reward_spec = Composite(
            agents=Composite(reward=Unbounded(shape=(n, 1)), shape=(n,)), device=dev
        )
        flag = Categorical(2, shape=(1,), dtype=torch.bool)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), device=dev
        )

    def _set_seed(self, seed: int | None) -> None:
        """Sets the seed of the next reset (as TorchRL: the reset draws the episode)."""
        self._seed = seed

    def _observation(self, observations) -> torch.Tensor:
        return torch.as_tensor(self._obs_leaf.from_gym(observations), dtype=torch.float32)

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        seed, self._seed = self._seed, None
        observations, _ = self._env.reset(seed=seed)
        agents = TensorDict(
            observation=self._observation(observations), batch_size=(self.n_agents,)
        )
        flag = torch.zeros(1, dtype=torch.bool)
        out = TensorDict(agents=agents, done=flag, terminated=flag.clone(), truncated=flag.clone())
        return out if self.device is None else out.to(self.device)

    def _actions(self, tensordict: TensorDictBase) -> list[int]:
        key = ("agents", "action")
        value = tensordict.get(key, None)
        if value is None:
            raise KeyError(key)  # EnvBase.step names the missing key and the action spec
        spec = self.full_action_spec[key]
        if value.shape != spec.shape:
            raise ValueError(
                f"action {key!r} has shape {tuple(value.shape)}, expected {tuple(spec.shape)} "
                f"from action_spec {spec!r}"
            )
        array = value.detach().cpu().numpy()
        actions = np.asarray(array.argmax(-1) if not self.categorical_actions else array)
        if ((actions < 0) | (actions >= self.n_actions)).any():
            raise ValueError(
                f"action {key!r} must hold indices in [0, {self.n_actions}), got {actions.tolist()}"
            )
        return [int(a) for a in actions]

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = self._actions(tensordict)
        observations, rewards, terminated, truncated, _ = self._env.step(actions)
        base = self._env.unwrapped
        if terminated and base.current_step >= base._max_episode_steps and base.field.any():
            # the step budget ran out with food left: a cut, not the end of the task
            terminated, truncated = False, True
        n = self.n_agents
        agents = TensorDict(
            observation=self._observation(observations),
            reward=torch.as_tensor(np.asarray(rewards, dtype=np.float32).reshape(n, 1)),
            batch_size=(n,),
        )
        term = torch.tensor([bool(terminated)])
        trunc = torch.tensor([bool(truncated)])
        out = TensorDict(agents=agents, done=term | trunc, terminated=term, truncated=trunc)
        return out if self.device is None else out.to(self.device)

    def close(self, *, raise_if_closed: bool = True) -> None:
        if not self.is_closed:
            self._env.close()
        super().close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self._env}, batch_size={self.batch_size})"


class LBForagingEnv(LBForagingWrapper):
    """A Level-Based Foraging env by id: ``LBForagingEnv("Foraging-8x8-2p-3f-v3")``.

    Args:
        env_name: a registered ``Foraging-*`` id (``Foraging-<size>x<size>-<n>p-<f>f-v3``,
            see :attr:`available_envs`).
        categorical_actions, seed, device, batch_size, allow_done_after_reset,
        run_type_checks: as in :class:`LBForagingWrapper`.
        **kwargs: passed to ``gymnasium.make`` (its env checker is off: lbforaging's
            per-agent rewards are a list, which the checker rejects).

    Raises:
        ValueError: ``env_name`` is not a registered ``Foraging-*`` id.

    Examples:
        >>> from rl.envs import LBForagingEnv, check_env_specs
        >>> env = LBForagingEnv("Foraging-8x8-2p-3f-v3")
        >>> check_env_specs(env, seed=0)
        >>> env.full_action_spec["agents", "action"].shape
        torch.Size([2])
    """

    def __init__(
        self,
        env_name: str,
        *,
        categorical_actions: bool = True,
        seed: int | None = None,
        device=None,
        batch_size=None,
        allow_done_after_reset: bool = False,
        run_type_checks: bool = False,
        **kwargs,
    ) -> None:
        _import_lbforaging()
        names = self.available_envs
        if env_name not in names:
            close = difflib.get_close_matches(str(env_name), names, n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ValueError(
                f"env_name {env_name!r} is not a registered Level-Based Foraging id{hint}"
            )
        self.env_name = env_name
        kwargs.setdefault("disable_env_checker", True)
        super().__init__(
            gym.make(env_name, **kwargs),
            categorical_actions=categorical_actions,
            seed=seed,
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            run_type_checks=run_type_checks,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self.env_name}, batch_size={self.batch_size})"
