"""Shared fixtures and mock environments of the rl-envs tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
sys.path.insert(0, str(Path(__file__).parent))  # the tests' helper modules (_engine_helpers)

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from gymnasium import spaces  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from rl.core import Bounded, Composite, Unbounded  # noqa: E402
from rl.envs import EnvBase  # noqa: E402
from rl.envs._done import default_done_spec  # noqa: E402


class CountingEnv(EnvBase):
    """N counters: obs is the count, the action (in [0, 1]) is added to it.

    Sub-env ``i`` terminates when its count reaches ``limits[i]`` (one increment per
    step with action 1); ``truncate_at`` truncates instead after that many steps.
    Deterministic, so partial resets and auto-resets can be checked exactly.
    """

    def __init__(self, limits=(3,), truncate_at=None, batch_size=None):
        if batch_size is None:
            batch_size = (len(limits),)
        super().__init__(batch_size=batch_size)
        bs = self.batch_size
        self.limits = torch.tensor(limits, dtype=torch.float32).reshape(*bs, 1)
        self.truncate_at = truncate_at
        self.observation_spec = Composite(observation=Unbounded(shape=(*bs, 1)), shape=bs)
        self.action_spec = Bounded(0.0, 1.0, shape=(*bs, 1))
        self.reward_spec = Unbounded(shape=(*bs, 1))
        self.full_done_spec = default_done_spec(bs, truncated=True)  # it truncates
        self.count = torch.zeros(*bs, 1)
        self.steps = torch.zeros(*bs, 1, dtype=torch.int64)
        self.resets = torch.zeros(*bs, 1, dtype=torch.int64)
        self.seed = None

    def _reset(self, tensordict):
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            mask = torch.ones(*self.batch_size, 1, dtype=torch.bool)
        self.count = torch.where(mask, 0.0, self.count)
        self.steps = torch.where(mask, 0, self.steps)
        self.resets = self.resets + mask.long()
        flag = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return TensorDict(
            observation=self.count.clone(),
            done=flag,
            terminated=flag.clone(),
            truncated=flag.clone(),
            batch_size=self.batch_size,
        )

    def _step(self, tensordict):
        self.count = self.count + tensordict["action"]
        self.steps = self.steps + 1
        terminated = self.count >= self.limits
        if self.truncate_at is None:
            truncated = torch.zeros_like(terminated)
        else:
            truncated = (self.steps >= self.truncate_at) & ~terminated
        return TensorDict(
            observation=self.count.clone(),
            reward=self.count.clone(),
            done=terminated | truncated,
            terminated=terminated,
            truncated=truncated,
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        self.seed = seed


class AllSpacesEnv(gym.Env):
    """A gym env whose observation and action spaces use every supported space type."""

    def __init__(self, episode_length: int = 5):
        self.observation_space = spaces.Dict(
            {
                "box": spaces.Box(-1.0, 1.0, (2,), np.float32),
                "discrete": spaces.Discrete(4, start=1),
                "multi_discrete": spaces.MultiDiscrete([2, 3]),
                "multi_binary": spaces.MultiBinary(3),
                "tuple": spaces.Tuple((spaces.Box(0.0, 5.0, (1,), np.float64), spaces.Discrete(2))),
                "nested": spaces.Dict({"inner": spaces.Box(-np.inf, np.inf, (2,), np.float32)}),
            }
        )
        self.action_space = spaces.MultiDiscrete([3, 2])
        self.episode_length = episode_length
        self.t = 0
        self.last_action = None

    def _obs(self):
        return self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.last_action = action
        self.t += 1
        return self._obs(), float(action.sum()), False, self.t >= self.episode_length, {}


class _Ale:
    """Atari's ``ale.lives()``, read from the env's ``lives`` counter."""

    def __init__(self, env):
        self.env = env

    def lives(self):
        return self.env.lives


class LivesEnv(gym.Env):
    """A gym env with lives (EndOfLifeTransform's input): starts with 3, loses one every
    ``every`` steps, terminates when none is left; the observation is the step index.

    The counter is ``unwrapped.lives``; with ``ale=True`` also ``unwrapped.ale.lives()``
    (the transform's default ``eol_attribute``, Atari's layout).
    """

    observation_space = spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, every: int = 2, ale: bool = False):
        self.every = every
        self.t, self.lives = 0, 3
        if ale:
            self.ale = _Ale(self)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.lives = 0, 3
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t % self.every == 0:
            self.lives -= 1
        return np.full(1, self.t, np.float32), 1.0, self.lives == 0, False, {}


@pytest.fixture
def counting_env():
    return CountingEnv(limits=(2, 3, 5))


@pytest.fixture
def counting_env_cls():
    return CountingEnv


@pytest.fixture
def all_spaces_env_cls():
    return AllSpacesEnv


@pytest.fixture
def lives_env_cls():
    return LivesEnv
