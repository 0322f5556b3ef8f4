"""Gymnasium vector envs in every autoreset mode give the transitions of a SerialEnv."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from gymnasium.vector import AutoresetMode
from tensordict.nn import TensorDictModule  # noqa: E402

from rl.collectors import Collector
from rl.envs import GymWrapper, SerialEnv


def _cart_policy():
    # push towards the centre: episodes end by termination and by truncation
    return TensorDictModule(
        lambda obs: (obs[..., 0] < 0).long(), in_keys=["observation"], out_keys=["action"]
    )


N, SEED, STEPS = 3, 7, 60


def _vector(mode: AutoresetMode) -> GymWrapper:
    vec = gym.make_vec(
        "CartPole-v1",
        num_envs=N,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode},
        max_episode_steps=30,  # truncations as well as terminations
    )
    env = GymWrapper(vec, categorical_action_encoding=True)
    env.set_seed(SEED)  # sub-env i is seeded SEED + i at the first reset
    return env


def _serial() -> SerialEnv:
    def make():
        return GymWrapper(
            gym.make("CartPole-v1", max_episode_steps=30), categorical_action_encoding=True
        )

    env = SerialEnv(N, make)
    for i, sub in enumerate(env.envs):
        sub.set_seed(SEED + i)
    return env


@pytest.mark.parametrize(
    "mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]
)
def test_autoreset_modes_match_serial_env(mode):
    batches = {}
    for name, env in (("vector", _vector(mode)), ("serial", _serial())):
        collector = Collector(env, _cart_policy(), frames_per_batch=N * 20, total_frames=N * STEPS)
        batches[name] = torch.cat(list(collector), -1)
        collector.shutdown()
    vec, ser = batches["vector"], batches["serial"]
    assert vec.batch_size == ser.batch_size == (N, STEPS)
    assert set(vec.keys(True, True)) == set(ser.keys(True, True))
    for key in ser.keys(True, True):
        torch.testing.assert_close(vec[key], ser[key], msg=f"{mode}: {key}")
    terminated, truncated = ser["next", "terminated"], ser["next", "truncated"]
    # both kinds of episode end were crossed, and truncation is kept apart
    assert (terminated & ~truncated).any() and (truncated & ~terminated).any()
    # no transition across an episode boundary: after a done the next step starts afresh
    # (observation near zero, as CartPole resets to U(-0.05, 0.05)), and every reward is 1
    done = ser["next", "done"].squeeze(-1)
    starts = torch.zeros_like(done)
    starts[:, 1:] = done[:, :-1]
    assert (vec["observation"][starts].abs() <= 0.05).all()
    assert (vec["next", "reward"] == 1).all()
    # trajectory ids change exactly after each done
    ids = vec["collector", "traj_ids"]
    assert torch.equal(ids[:, 1:] != ids[:, :-1], done[:, :-1])
