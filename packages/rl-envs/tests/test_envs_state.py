"""EnvBase.env_state / load_env_state: an exact resume of every env kind, with nothing
pickled (the state goes through ``torch.load(weights_only=True)``) and loading that only
assigns values to the live env."""

from __future__ import annotations

import importlib.util
import io
import socket
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl.envs import (
    CartPoleEnv,
    Compose,
    GymEnv,
    GymWrapper,
    ParallelEnv,
    PendulumEnv,
    RewardSum,
    SerialEnv,
    StepCounter,
    TransformedEnv,
)


def _has(module):
    return importlib.util.find_spec(module) is not None


def _needs(module):
    return pytest.mark.skipif(not _has(module), reason=f"needs {module}")


def _dm_control():
    from rl.envs import DMControlEnv

    return DMControlEnv("cartpole", "swingup")


def _pettingzoo():
    from pettingzoo.classic import rps_v2

    from rl.envs.libs.pettingzoo import PettingZooWrapper

    return PettingZooWrapper(rps_v2.parallel_env(), use_mask=True)


def _vmas():
    from rl.envs.libs.vmas import VmasEnv

    return VmasEnv("navigation", num_envs=4, continuous_actions=True, n_agents=2)


def _through_disk(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def _continue(env, root, steps, action_seed):
    with torch.random.fork_rng():
        torch.manual_seed(action_seed)
        return env.rollout(
            steps, auto_reset=False, tensordict=root.clone(), break_when_any_done=False
        )


def _sync_vector():
    return GymWrapper(gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync"))


_KINDS = {
    "gym-cartpole": lambda: GymEnv("CartPole-v1"),
    "gym-pendulum": lambda: GymEnv("Pendulum-v1"),
    "gym-sync-vector": _sync_vector,
    "native-pendulum": PendulumEnv,
    "native-cartpole": partial(CartPoleEnv, batch_size=[4]),
    "transformed": lambda: TransformedEnv(
        GymEnv("CartPole-v1"), Compose(StepCounter(max_steps=7), RewardSum())
    ),
    "serial": lambda: SerialEnv(2, partial(GymEnv, "CartPole-v1")),
    "parallel": lambda: ParallelEnv(2, partial(GymEnv, "CartPole-v1")),
    "mujoco": pytest.param(lambda: GymEnv("HalfCheetah-v5"), marks=_needs("mujoco")),
    "dm-control": pytest.param(_dm_control, marks=_needs("dm_control")),
    "pettingzoo": pytest.param(_pettingzoo, marks=_needs("pettingzoo")),
    "vmas": pytest.param(_vmas, marks=_needs("vmas")),
}


class TestEnvStateResume:
    @pytest.mark.parametrize("make", list(_KINDS.values()), ids=list(_KINDS))
    def test_fresh_env_resumes_exactly(self, make):
        env = make()
        env.set_seed(3)
        root = env.reset()
        # a few episodes so that counters, generators and physics have moved
        root = _continue(env, root, 40, action_seed=0)[..., -1]["next"].clone()
        state = _through_disk(env.env_state())
        expected = _continue(env, root, 120, action_seed=1)
        env.close()

        resumed = make()
        resumed.set_seed(11)  # another seed: only the loaded state can make them agree
        resumed.reset()
        other = _continue(resumed, root, 120, action_seed=1)
        resumed.load_env_state(state)
        got = _continue(resumed, root, 120, action_seed=1)
        resumed.close()
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert (other != expected).any(), "the check cannot tell a restored env from a fresh one"

    def test_state_is_tensors_and_plain_data(self):
        env = GymEnv("CartPole-v1")
        env.set_seed(0)
        env.reset()
        state = env.env_state()

        def leaves(obj):
            if isinstance(obj, dict):
                for value in obj.values():
                    yield from leaves(value)
            elif isinstance(obj, list | tuple):
                for value in obj:
                    yield from leaves(value)
            else:
                yield obj

        kinds = {type(leaf) for leaf in leaves(state)}
        assert kinds <= {torch.Tensor, int, float, bool, str, type(None)}, kinds
        # the generator's state and the physics are in it
        unwrapped = env.env.unwrapped
        saved = _through_disk(state)
        draw = unwrapped.np_random.random()
        physics = unwrapped.state.copy()
        env.rand_step()
        env.load_env_state(saved)
        assert unwrapped.np_random.random() == draw
        np.testing.assert_array_equal(unwrapped.state, physics)

    def test_arrays_restored_in_place(self):
        env = _sync_vector()
        env.set_seed(0)
        env.reset()
        observations = env.env._observations  # the wrapper's zero-copy views read this array
        state = env.env_state()
        before = observations.copy()
        env.rand_step()
        assert not np.array_equal(observations, before)
        env.load_env_state(state)
        assert env.env._observations is observations
        np.testing.assert_array_equal(observations, before)


class TestEnvStateRefused:
    def test_async_vector_env_is_refused_at_save_time(self):
        env = GymWrapper(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="async"))
        try:
            with pytest.raises(TypeError, match="AsyncVectorEnv keeps the sub-envs in gymnasium's"):
                env.env_state()
        finally:
            env.close()

    def test_unsaveable_attribute_is_named(self):
        env = GymEnv("CartPole-v1")
        sock = socket.socket()
        env.env.unwrapped.link = sock
        try:
            with pytest.raises(TypeError, match=r"state\._env\.env\.env\.env\.link is a socket"):
                env.env_state()
        finally:
            sock.close()

    def test_state_of_another_env_kind(self):
        state = GymEnv("Pendulum-v1").env_state()
        with pytest.raises(ValueError, match="PendulumEnv in the saved state and a .*CartPoleEnv"):
            GymEnv("CartPole-v1").load_env_state(state)

    def test_not_a_state(self):
        with pytest.raises(ValueError, match=r"expected a dict with 'object'.*got Tensor"):
            PendulumEnv().load_env_state(torch.zeros(3, dtype=torch.uint8))

    def test_batched_env_count_mismatch(self):
        env = SerialEnv(2, partial(GymEnv, "CartPole-v1"))
        state = env.env_state()
        state["envs"].pop()
        with pytest.raises(ValueError, match="expected the states of 2 sub-envs, got 1"):
            env.load_env_state(state)

    def test_parallel_worker_refusal_reaches_the_parent(self):
        env = ParallelEnv(
            1,
            lambda: GymWrapper(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="async")),
        )
        try:
            with pytest.raises(Exception, match="AsyncVectorEnv keeps the sub-envs"):
                env.env_state()
        finally:
            env.close()

    @_needs("envpool")
    def test_envpool_is_refused_at_save_time(self):
        from rl.envs import MultiThreadedEnv

        env = MultiThreadedEnv(2, "CartPole-v1")
        try:
            with pytest.raises(
                TypeError, match="EnvPool keeps its envs' physics and random state in C"
            ):
                env.env_state()
        finally:
            env.close()
