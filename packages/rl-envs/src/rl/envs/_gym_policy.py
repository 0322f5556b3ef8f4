"""Policy-driven actions for the gym rollout fast path.

The fast path's loops ask for the gym action of step ``t`` by indexing
(``actions[t]``). :class:`PolicyActions` answers by running the policy on a root
tensordict whose observation entries are views of the rollout's own ``"next"`` buffers
(row ``t - 1``: zero-copy), patched with the reset observations where an episode
restarted, and records what the policy wrote. The recorded data are those of the generic
loop (``EnvBase.rollout`` over ``_step``): same keys, same values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector.utils import iterate
from tensordict import TensorDictBase

if TYPE_CHECKING:
    from ._gym import GymWrapper

__all__ = ["PolicyActions", "PerEnvActions", "UseGenericLoop"]


class UseGenericLoop(Exception):
    """Raised at step 0 when the policy does something only the generic loop handles."""

    def __init__(self, tensordict: TensorDictBase) -> None:
        super().__init__("the policy wrote a 'next' entry")
        self.tensordict = tensordict


class PolicyActions:
    """``actions[t]``: runs ``policy`` on the root of step ``t`` and returns its gym action.

    Args:
        env: the wrapped gym env.
        policy: reads the root tensordict, writes the action (and possibly more keys).
        tensordict: the reset root tensordict (observations and done flags).
        next_obs: the time-first ``"next"`` observation buffers, one per leaf.
        overrides: the loop's ``(t, index, arrays)`` list of reset observations.
        max_steps: the rollout length.
        step_outputs: the time-first ``reward``, ``terminated`` and ``truncated`` buffers
            (row ``t`` is written by step ``t``), for subclasses that read them.
    """

    def __init__(
        self,
        env: GymWrapper,
        policy: Callable[[TensorDictBase], TensorDictBase],
        tensordict: TensorDictBase,
        next_obs: list[torch.Tensor],
        overrides: list,
        max_steps: int,
        step_outputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        self.env = env
        self.policy = policy
        self.td = tensordict
        self.max_steps = max_steps
        self.obs = [(key, buf) for (key, _), buf in zip(env._obs_np_dtypes, next_obs)]
        self.overrides = overrides
        self.step_outputs = step_outputs
        self.done_keys = env.done_keys
        zeros = torch.zeros((len(self.done_keys), *env.batch_size, 1), dtype=torch.bool)
        self.zero_flags = list(zip(self.done_keys, zeros.unbind(0)))
        self.seen_overrides = 0
        self.extras: list = []  # (key, time-first buffer) of what the policy writes
        self.root_overrides: list = []  # (t, key, value): root entries the policy replaced

    def __len__(self) -> int:
        return self.max_steps

    def _take_resets(self, t: int) -> list:
        """The base loop's resets recorded at step ``t`` (consumed)."""
        patches = []
        while self.seen_overrides < len(self.overrides):
            item = self.overrides[self.seen_overrides]
            if item[0] != t:
                break
            patches.append(item)
            self.seen_overrides += 1
        return patches

    def _obs_before(self, t: int, patches: list):
        """``(key, value)`` of the observations step ``t`` acts on: the next ones of step
        ``t - 1`` (zero-copy views), copied with the rows of ``patches`` (resets) replaced."""
        for i, (key, buf) in enumerate(self.obs):
            value = buf[t - 1]
            if patches:
                value = value.clone()
                for _, index, arrays in patches:
                    value[index] = torch.from_numpy(np.asarray(arrays[i]))
            yield key, value

    def _root_obs(self, t: int) -> None:
        td = self.td
        for key, value in self._obs_before(t, self._take_resets(t)):
            td.set(key, value)
        if t == 1:
            for key, flag in self.zero_flags:
                td.set(key, flag)

    def __getitem__(self, t: int):
        td = self.td
        if t > 0:
            self._root_obs(t)
        provided = [(key, td[key]) for key, _ in self.obs]
        provided += [(key, td[key]) for key in self.done_keys]
        out = self.policy(td)
        if out is not None:
            td = self.td = out
        if t == 0:
            self._discover(td, provided)
        for key, buf in self.extras:
            buf[t] = td[key]
        for key, value in provided:
            current = td[key]
            if current is not value:
                self.root_overrides.append((t, key, current.clone()))
        return self.env._action_from_td(td)

    def _discover(self, td: TensorDictBase, provided: list) -> None:
        if "next" in td.keys():
            raise UseGenericLoop(td)
        self.env._raise_missing_action(td)
        known = {key for key, _ in provided}
        for key in td.keys(True, True):
            if key in known or key == "_reset":
                continue
            value = td[key]
            buf = torch.empty((self.max_steps, *value.shape), dtype=value.dtype)
            self.extras.append((key, buf))


class PerEnvActions:
    """``actions[t]`` as a list with one gym action per sub-env of a vector env."""

    def __init__(self, env: GymWrapper, actions) -> None:
        self.actions = actions
        self.space = env._env.action_space
        self.discrete = isinstance(env._env.single_action_space, spaces.Discrete)

    def __len__(self) -> int:
        return len(self.actions)

    def __getitem__(self, t: int) -> list:
        action = self.actions[t]
        if self.discrete:
            return np.asarray(action).tolist()
        return list(iterate(self.space, action))
