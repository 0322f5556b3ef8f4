"""LBForagingEnv / LBForagingWrapper: the agents group, values against lbforaging driven
directly, seeding, termination vs truncation, errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl.core import Bounded, Categorical, OneHot
from rl.envs import SerialEnv, check_env_specs

pytest.importorskip("lbforaging")

from rl.envs.libs.lbforaging import LBForagingEnv, LBForagingWrapper  # noqa: E402

pytestmark = pytest.mark.lbforaging

NAME = "Foraging-8x8-2p-3f-v3"


def _actions(n_steps, n_agents, seed=0):
    return np.random.default_rng(seed).integers(0, 6, size=(n_steps, n_agents)).tolist()


def _direct(name, seed, actions, **kwargs):
    env = gym.make(name, disable_env_checker=True, **kwargs)
    obs, _ = env.reset(seed=seed)
    observations, rewards, flags = [np.stack(obs)], [], []
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        observations.append(np.stack(obs))
        rewards.append(reward)
        flags.append((terminated, truncated))
        if terminated or truncated:
            break
    return observations, rewards, flags


class TestLBForagingSpecs:
    def test_specs(self):
        env = LBForagingEnv(NAME)
        assert env.group_map == {"agents": ["0", "1"]}
        obs = env.observation_spec["agents", "observation"]
        assert isinstance(obs, Bounded) and obs.shape == (2, 15) and obs.dtype == torch.float32
        action = env.full_action_spec["agents", "action"]
        assert isinstance(action, Categorical) and action.shape == (2,) and action.n == 6
        assert env.full_reward_spec["agents", "reward"].shape == (2, 1)
        assert set(env.full_done_spec.keys()) == {"done", "terminated", "truncated"}
        assert env.full_done_spec["done"].shape == (1,)

    def test_one_hot_actions(self):
        env = LBForagingEnv(NAME, categorical_actions=False)
        action = env.full_action_spec["agents", "action"]
        assert isinstance(action, OneHot) and action.shape == (2, 6)
        check_env_specs(env, seed=0)

    @pytest.mark.parametrize("name", [NAME, "Foraging-5x5-3p-2f-coop-v3"])
    def test_check_env_specs(self, name):
        check_env_specs(LBForagingEnv(name), seed=0)

    def test_wrapper_and_available_envs(self):
        import lbforaging  # noqa: F401

        env = LBForagingWrapper(gym.make(NAME, disable_env_checker=True))
        assert env.rollout(3)["agents", "observation"].shape == (3, 2, 15)
        assert NAME in LBForagingEnv.available_envs

    def test_serial_env(self):
        env = SerialEnv(2, lambda: LBForagingEnv(NAME))
        rollout = env.rollout(4, break_when_any_done=False)
        assert rollout["next", "agents", "reward"].shape == (2, 4, 2, 1)


class TestLBForagingValues:
    @pytest.mark.parametrize("seed", [0, 11])
    def test_matches_lbforaging(self, seed):
        actions = _actions(30, 2, seed)
        observations, rewards, flags = _direct(NAME, seed, actions)
        env = LBForagingEnv(NAME, seed=seed)
        td = env.reset()
        torch.testing.assert_close(td["agents", "observation"], torch.as_tensor(observations[0]))
        for t in range(len(rewards)):
            td["agents", "action"] = torch.tensor(actions[t])
            td = env.step(td)["next"]
            torch.testing.assert_close(
                td["agents", "observation"], torch.as_tensor(observations[t + 1])
            )
            expected = torch.tensor(rewards[t], dtype=torch.float32).reshape(2, 1)
            torch.testing.assert_close(td["agents", "reward"], expected)
            assert bool(td["done"]) == any(flags[t])

    def test_set_seed_seeds_the_next_reset(self):
        # lbforaging's reset(seed) of a used env also depends on the previous episode, so
        # each episode here starts from a fresh env, as its direct counterpart
        firsts = []
        for _ in range(2):
            env = LBForagingEnv(NAME)
            env.set_seed(4)
            firsts.append(env.reset()["agents", "observation"])
        torch.testing.assert_close(firsts[0], firsts[1])
        obs, _ = gym.make(NAME, disable_env_checker=True).reset(seed=4)
        torch.testing.assert_close(firsts[0], torch.as_tensor(np.stack(obs)))

    def test_same_seed_same_rollout(self):
        out = []
        for _ in range(2):
            env = LBForagingEnv(NAME)
            torch.manual_seed(1)
            env.set_seed(2)
            out.append(env.rollout(25, break_when_any_done=False))
        torch.testing.assert_close(out[0]["next", "agents"], out[1]["next", "agents"])

    def test_step_budget_is_a_truncation(self):
        # 3 steps of NONE never collect food: lbforaging says terminated, here truncated
        def short_episodes():
            env = gym.make(NAME, disable_env_checker=True)
            env.unwrapped._max_episode_steps = 3  # lbforaging's own step budget
            return env

        env = LBForagingWrapper(short_episodes(), seed=0)
        td = env.reset()
        for _ in range(3):
            assert not td["done"].item()
            td["agents", "action"] = torch.zeros(2, dtype=torch.int64)
            td = env.step(td)["next"]
        assert td["truncated"].item() and td["done"].item() and not td["terminated"].item()
        direct = short_episodes()
        direct.reset(seed=0)
        flags = [direct.step([0, 0])[2:4] for _ in range(3)]
        assert flags == [(False, False), (False, False), (True, False)]  # lbforaging's view

    def test_collecting_all_food_is_a_termination(self):
        env = LBForagingEnv("Foraging-5x5-2p-1f-v3", seed=1)
        torch.manual_seed(0)
        rollout = env.rollout(400, break_when_any_done=False)
        done = rollout["next", "done"].squeeze(-1)
        terminated = rollout["next", "terminated"].squeeze(-1)
        truncated = rollout["next", "truncated"].squeeze(-1)
        assert torch.equal(done, terminated | truncated)
        assert not (terminated & truncated).any()
        assert terminated.any()
        # food is collected (a positive team reward) exactly at each termination here
        team = rollout["next", "agents", "reward"].sum((-2, -1))
        assert (team[terminated] > 0).all()


class TestLBForagingErrors:
    def test_not_lbforaging(self):
        with pytest.raises(
            TypeError, match="wraps a Level-Based Foraging gymnasium env.*got TimeLimit"
        ):
            LBForagingWrapper(gym.make("CartPole-v1"))

    def test_batch_size(self):
        with pytest.raises(ValueError, match=r"batch_size must be \[\], got \[2\]"):
            LBForagingEnv(NAME, batch_size=[2])

    def test_unknown_name(self):
        with pytest.raises(
            ValueError, match="'Foraging-8x8-2p-3f-v2' is not a registered.*did you mean"
        ):
            LBForagingEnv("Foraging-8x8-2p-3f-v2")

    def test_bad_action_value(self):
        env = LBForagingEnv(NAME)
        td = env.reset()
        td["agents", "action"] = torch.tensor([0, 6])
        with pytest.raises(ValueError, match=r"must hold indices in \[0, 6\), got \[0, 6\]"):
            env.step(td)

    def test_bad_action_shape(self):
        env = LBForagingEnv(NAME)
        td = env.reset()
        td["agents", "action"] = torch.zeros(2, 6, dtype=torch.int64)  # one-hot, not indices
        with pytest.raises(ValueError, match=r"has shape \(2, 6\), expected \(2,\)"):
            env.step(td)


def test_docstring_examples():
    import doctest
    import importlib

    result = doctest.testmod(
        importlib.import_module("rl.envs.libs.lbforaging"), optionflags=doctest.ELLIPSIS
    )
    assert result.attempted > 0 and result.failed == 0
