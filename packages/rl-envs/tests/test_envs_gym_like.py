"""GymLikeEnv and the info-dict readers (default_info_dict_reader, GymWrapper's info)."""

from __future__ import annotations

import doctest

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

import rl.envs._gym_like as gym_like_module
from rl.core import Bounded, Composite, Unbounded
from rl.envs import (
    GymLikeEnv,
    GymWrapper,
    ParallelEnv,
    check_env_specs,
    default_info_dict_reader,
)


class _InfoEnv(gym.Env):
    """Counts steps; its info holds the count (and half of it); reset info is empty."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.n += 1
        obs = np.full(2, self.n, np.float32)
        info = {"count": self.n, "half": np.float64(self.n / 2), "_private": 1}
        return obs, float(action), self.n >= 3, False, info


class _Walk:
    """A simulator with gym's API that is not a gymnasium env."""

    def reset(self):
        self.x = 0.0
        return {"state": np.array([self.x])}, {"start": 1}

    def step(self, action):
        self.x += float(action[0])
        return {"state": np.array([self.x])}, -abs(self.x), self.x >= 3, False, {"dist": self.x}


class _WalkEnv(GymLikeEnv):
    def __init__(self, frame_skip=1):
        super().__init__()
        self._env = _Walk()
        self.wrapper_frame_skip = frame_skip
        self.observation_spec = Composite(observation=Unbounded((1,), dtype=torch.float64))
        self.action_spec = Bounded(-1.0, 1.0, shape=(1,))

    def _output_transform(self, out):
        obs, reward, terminated, truncated, info = out
        return obs, reward, terminated, truncated, None, info

    def _reset_output_transform(self, out):
        return out

    def _set_seed(self, seed):
        pass


class TestDefaultInfoDictReader:
    @pytest.mark.parametrize(
        "spec",
        [
            Composite(x=Unbounded((), dtype=torch.float64), shape=()),
            {"x": Unbounded((), dtype=torch.float64)},
            [Unbounded((), dtype=torch.float64)],
        ],
    )
    def test_spec_forms_convert_and_fill(self, spec):
        reader = default_info_dict_reader(["x"], spec=spec)
        td = reader({"x": 1.5, "y": 3}, TensorDict())
        assert td["x"].dtype == torch.float64 and td["x"].item() == 1.5
        assert "y" not in td.keys()
        assert reader({}, TensorDict())["x"].item() == 0.0  # missing: the spec's zero
        assert reader.info_spec["x"].dtype == torch.float64

    def test_lazy_keys_and_reset(self):
        reader = default_info_dict_reader()
        td = reader({"a": np.int64(2), "_mask": True, "b": np.ones(3)}, TensorDict())
        assert reader.keys == ["a", "b"] and set(td.keys()) == {"a", "b"}
        assert reader.info_spec["b"].shape == (3,) and reader.info_spec["a"].dtype == torch.int64
        reader.reset()
        assert reader.keys is None and reader.info_spec is None
        assert default_info_dict_reader(ignore_private=False)({"_m": 1}, TensorDict())["_m"] == 1

    def test_errors(self):
        with pytest.raises(ValueError, match="must match the keys one to one"):
            default_info_dict_reader(["a", "b"], spec=[Unbounded(())])
        reader = default_info_dict_reader(["a"])
        reader._info_spec = None  # (a reader whose specs are unknown)
        with pytest.raises(KeyError, match="info key 'a' is not in the info dict"):
            reader({"b": 1}, TensorDict())


class TestGymLikeEnv:
    def test_rollout_matches_hand_loop(self):
        env = _WalkEnv().set_info_dict_reader(default_info_dict_reader(["dist"]))
        td = env.rollout(5, actions=[torch.tensor([0.5]), torch.tensor([1.0])] * 3)
        x, xs, rewards = 0.0, [], []
        for a in [0.5, 1.0, 0.5, 1.0]:  # stops once x >= 3
            x += a
            xs.append(x)
            rewards.append(-abs(x))
        assert td["next", "observation"].squeeze(-1).tolist() == xs  # "state" renamed
        assert td["next", "reward"].squeeze(-1).tolist() == rewards
        assert td["next", "dist"].tolist() == xs
        assert td["next", "terminated"].squeeze(-1).tolist() == [False, False, False, True]
        assert td["dist"][0].item() == 0.0  # not in the reset info: zero
        check_env_specs(env)

    def test_frame_skip_sums_and_stops_at_done(self):
        env = _WalkEnv(frame_skip=2)
        td = env.step(env.reset().set("action", torch.tensor([1.0])))
        assert td["next", "observation"].item() == 2.0
        assert td["next", "reward"].item() == -1.0 - 2.0
        td = env.step(env.step_mdp(td).set("action", torch.tensor([1.0])))
        assert td["next", "observation"].item() == 3.0  # the second repeat did not run
        assert td["next", "done"].item()

    def test_partial_reset_refused(self):
        env = _WalkEnv()
        with pytest.raises(RuntimeError, match="partial '_reset' mask"):
            env._reset(TensorDict(_reset=torch.tensor([False])))


class TestGymWrapperInfo:
    def test_info_entries_follow_the_steps(self):
        env = GymWrapper(_InfoEnv())
        assert env.set_info_dict_reader() is env
        assert set(env.observation_spec.keys()) == {"observation", "count", "half"}
        assert env.observation_spec["half"].dtype == torch.float64
        td = env.rollout(3)
        assert td["next", "count"].tolist() == [1, 2, 3]
        assert td["next", "half"].tolist() == [0.5, 1.0, 1.5]
        assert td["count"].tolist() == [0, 1, 2]  # reset info lacks it: zero
        check_env_specs(env)

    def test_vector_env(self):
        vec = gym.vector.SyncVectorEnv([_InfoEnv, _InfoEnv])
        env = GymWrapper(vec)
        env.set_info_dict_reader(default_info_dict_reader(["count"]))
        assert env.observation_spec["count"].shape == (2,)
        td = env.rollout(2, break_when_any_done=False)
        assert td["next", "count"].tolist() == [[1.0, 2.0], [1.0, 2.0]]

    def test_in_parallel_workers(self):
        def make():
            return GymWrapper(_InfoEnv()).set_info_dict_reader(
                default_info_dict_reader(["count"], spec=[Unbounded((), dtype=torch.int64)])
            )

        env = ParallelEnv(2, make)
        try:
            td = env.rollout(3)
            assert td["next", "count"].tolist() == [[1, 2, 3], [1, 2, 3]]
        finally:
            env.close()

    def test_auto_register(self):
        env = GymWrapper(_InfoEnv()).auto_register_info_dict()
        assert {"count", "half"} <= set(env.observation_spec.keys())
        with pytest.raises(RuntimeError, match="already has an info-dict reader"):
            env.auto_register_info_dict()


def test_docstring_examples():
    result = doctest.testmod(gym_like_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
