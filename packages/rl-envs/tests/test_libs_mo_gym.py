"""MOGymEnv / MOGymWrapper: vector rewards (spec ``[n_objectives]``), values against
MO-Gymnasium driven directly, frame skip, vector envs, seeding, errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl.core import Bounded
from rl.envs import GymWrapper, SerialEnv, check_env_specs

mo_gym = pytest.importorskip("mo_gymnasium")

from rl.envs.libs.gym import MOGymEnv, MOGymWrapper  # noqa: E402

pytestmark = [
    pytest.mark.mo_gymnasium,
    pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning"),
]


def _direct(name, seed, actions):
    """Observations and reward vectors of ``name`` driven with mo_gymnasium alone, seeded
    as ``env.set_seed(seed); env.reset()`` does (gymnasium's second reset of ``seed``)."""
    env = mo_gym.make(name)
    env.reset(seed=seed)
    obs, _ = env.reset()
    observations, rewards = [obs], []
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        observations.append(obs)
        rewards.append(reward)
        if terminated or truncated:
            break
    return np.asarray(observations), np.asarray(rewards)


class TestMOGymSpecs:
    def test_reward_spec_from_reward_space(self):
        env = MOGymEnv("deep-sea-treasure-v0")
        space = mo_gym.make("deep-sea-treasure-v0").unwrapped.reward_space
        spec = env.reward_spec
        assert isinstance(spec, Bounded) and spec.shape == (2,) and spec.dtype == torch.float32
        torch.testing.assert_close(spec.space.low, torch.as_tensor(space.low))
        torch.testing.assert_close(spec.space.high, torch.as_tensor(space.high))
        assert env.rand_step()["next", "reward"].shape == (2,)

    @pytest.mark.parametrize(
        "name", ["deep-sea-treasure-v0", "mo-mountaincarcontinuous-v0", "minecart-v0"]
    )
    def test_check_env_specs(self, name):
        check_env_specs(MOGymEnv(name), seed=0)

    def test_wrapper(self):
        env = MOGymWrapper(mo_gym.make("minecart-v0"))
        assert env.reward_spec.shape == (3,)
        check_env_specs(env, seed=0)

    def test_plain_gym_wrapper_reads_reward_space(self):
        # GymWrapper itself honours a declared reward_space, as TorchRL's does
        env = GymWrapper(mo_gym.make("deep-sea-treasure-v0"))
        assert env.reward_spec.shape == (2,)

    def test_available_envs_and_lib(self):
        names = MOGymEnv.available_envs
        assert "deep-sea-treasure-v0" in names and "minecart-v0" in names
        assert "CartPole-v1" not in names
        assert MOGymEnv("deep-sea-treasure-v0").lib is mo_gym

    def test_lazy_names(self):
        import rl.envs

        assert rl.envs.MOGymEnv is MOGymEnv and "MOGymWrapper" in rl.envs.__all__


class TestMOGymValues:
    @pytest.mark.parametrize("name", ["deep-sea-treasure-v0", "minecart-v0"])
    def test_matches_mo_gymnasium(self, name):
        n_actions = mo_gym.make(name).action_space.n
        actions = [t % n_actions for t in range(12)]
        observations, rewards = _direct(name, 3, actions)
        env = MOGymEnv(name, categorical_action_encoding=True)
        env.set_seed(3)
        td = env.reset()
        torch.testing.assert_close(
            td["observation"], torch.as_tensor(observations[0]).to(td["observation"].dtype)
        )
        for t in range(len(rewards)):
            td["action"] = torch.tensor(actions[t])
            td = env.step(td)["next"]
            torch.testing.assert_close(td["reward"], torch.as_tensor(rewards[t]))
            torch.testing.assert_close(
                td["observation"],
                torch.as_tensor(observations[t + 1]).to(td["observation"].dtype),
            )

    def test_same_seed_same_rollout(self):
        env = MOGymEnv("minecart-v0")
        out = []
        for _ in range(2):
            torch.manual_seed(0)
            env.set_seed(5)
            out.append(env.rollout(20))
        torch.testing.assert_close(out[0]["next", "reward"], out[1]["next", "reward"])
        torch.testing.assert_close(out[0]["next", "observation"], out[1]["next", "observation"])

    def test_frame_skip_sums_reward_vectors(self):
        actions = [1, 1, 1, 1, 1, 1]  # deep-sea-treasure: down, -1 time penalty per step
        _, rewards = _direct("deep-sea-treasure-v0", 0, actions)
        env = MOGymEnv("deep-sea-treasure-v0", frame_skip=3, categorical_action_encoding=True)
        env.set_seed(0)
        td = env.reset()
        td["action"] = torch.tensor(1)
        td = env.step(td)["next"]
        torch.testing.assert_close(td["reward"], torch.as_tensor(rewards[:3].sum(0)))
        # the spec's bounds are those of a sum of 1 to 3 rewards
        torch.testing.assert_close(env.reward_spec.space.low, torch.tensor([0.0, -3.0]))
        torch.testing.assert_close(env.reward_spec.space.high, torch.tensor([71.1, -1.0]))
        check_env_specs(env, seed=0)

    @pytest.mark.parametrize("mode", ["sync", "async"])
    def test_vector_env(self, mode):
        env = MOGymEnv("mo-mountaincarcontinuous-v0", num_envs=3, vectorization_mode=mode)
        try:
            assert env.batch_size == (3,) and env.reward_spec.shape == (3, 2)
            rollout = env.rollout(4)
            assert rollout["next", "reward"].shape == (3, 4, 2)
            check_env_specs(env, seed=0)
        finally:
            env.close()

    def test_vector_env_matches_single_envs(self):
        env = MOGymEnv("deep-sea-treasure-v0", num_envs=2, categorical_action_encoding=True)
        td = env.reset()
        td["action"] = torch.tensor([1, 3])
        rewards = env.step(td)["next", "reward"]
        for i, action in enumerate([1, 3]):
            single = mo_gym.make("deep-sea-treasure-v0")
            single.reset()
            expected = single.step(action)[1]
            torch.testing.assert_close(rewards[i], torch.as_tensor(expected))

    def test_serial_env(self):
        env = SerialEnv(2, lambda: MOGymEnv("deep-sea-treasure-v0"))
        rollout = env.rollout(3, break_when_any_done=False)
        assert rollout["next", "reward"].shape == (2, 3, 2)


class TestMOGymErrors:
    def test_wrapper_refuses_scalar_reward_env(self):
        with pytest.raises(
            TypeError, match="MOGymWrapper wraps an MO-Gymnasium env.*no reward_space"
        ):
            MOGymWrapper(gym.make("CartPole-v1"))

    def test_unknown_name(self):
        with pytest.raises(gym.error.Error, match="not-an-env"):
            MOGymEnv("not-an-env-v0")

    def test_bad_action_shape(self):
        env = MOGymEnv("deep-sea-treasure-v0")
        td = env.reset()
        td["action"] = torch.zeros(3, dtype=torch.int64)
        with pytest.raises(ValueError, match=r"action.*shape \(3,\), expected \(4,\)"):
            env.step(td)


def test_docstring_examples():
    import doctest
    import importlib

    result = doctest.testmod(
        importlib.import_module("rl.envs.libs.mo_gym"), optionflags=doctest.ELLIPSIS
    )
    assert result.attempted > 0 and result.failed == 0
