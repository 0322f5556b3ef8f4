"""Batched envs hand their sub-envs' ``_step`` the root observations, as TorchRL does.

A custom env that computes its next observation from ``tensordict["obs"]`` (a common
TorchRL pattern) must give the same numbers inside ``SerialEnv`` / ``ParallelEnv`` as
alone. TorchRL 0.14.1 prints ``[[0.0, 0.5, 1.0], [0.0, 0.5, 1.0]]`` for the root and
``[[0.5, 1.0, 1.5], ...]`` for the next observations of ``SerialEnv(2, ...).rollout(3)``.
"""

import pytest
import torch
from tensordict import TensorDict

from rl.core import Bounded, Composite, Unbounded
from rl.envs import CatFrames, EnvBase, ParallelEnv, SerialEnv, StepCounter, TransformedEnv


class ObsReadingEnv(EnvBase):
    """next obs = obs + action; done once obs[0] > 1.2 (no state kept in the env)."""

    def __init__(self):
        super().__init__()
        self.observation_spec = Composite(obs=Unbounded(shape=(2,)))
        self.action_spec = Bounded(-1.0, 1.0, shape=(1,))
        self.reward_spec = Unbounded(shape=(1,))

    def _reset(self, td):
        return TensorDict(obs=torch.zeros(2), done=torch.zeros(1, dtype=torch.bool))

    def _step(self, td):
        obs = td["obs"] + td["action"]
        done = obs[:1] > 1.2
        return TensorDict(obs=obs, reward=obs[:1].clone(), done=done, terminated=done.clone())

    def _set_seed(self, seed):
        pass


def half(td):
    return td.set("action", torch.full((*td.batch_size, 1), 0.5))


ROOT = [0.0, 0.5, 1.0, 0.0, 0.5, 1.0]
NEXT = [0.5, 1.0, 1.5, 0.5, 1.0, 1.5]


def _make(kind):
    if kind == "serial":
        return SerialEnv(2, ObsReadingEnv)
    if kind == "serial_lazy":
        return SerialEnv(2, ObsReadingEnv, use_buffers=False)
    if kind == "serial_transformed":
        return SerialEnv(2, lambda: TransformedEnv(ObsReadingEnv(), StepCounter()))
    return ParallelEnv(2, ObsReadingEnv, mp_start_method="fork")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["serial", "serial_lazy", "serial_transformed", "parallel"])
def test_rollout_reads_the_root_observation(kind):
    env = _make(kind)
    try:
        single = ObsReadingEnv().rollout(6, half, break_when_any_done=False)
        assert single["obs"][:, 0].tolist() == ROOT
        rollout = env.rollout(6, half, break_when_any_done=False)
        for b in range(2):
            assert rollout["obs"][b, :, 0].tolist() == ROOT
            assert rollout["next", "obs"][b, :, 0].tolist() == NEXT
        # policy-free fast rollout: random actions, each next obs = obs + action
        random = env.rollout(5, break_when_any_done=False)
        expected = random["obs"] + random["action"]
        torch.testing.assert_close(random["next", "obs"], expected)
    finally:
        env.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_step_from_a_foreign_tensordict(kind):
    env = _make(kind)
    try:
        env.reset()
        td = TensorDict(
            obs=torch.tensor([[3.0, 0.0], [-1.0, 2.0]]),
            action=torch.tensor([[0.5], [0.25]]),
            batch_size=[2],
        )
        out = env.step(td)
        torch.testing.assert_close(out["next", "obs"], torch.tensor([[3.5, 0.5], [-0.75, 2.25]]))
        # the loop carries on from the outputs it returned (no copy needed then)
        td = out["next"].clone()
        td["action"] = torch.zeros(2, 1)
        nxt = env.step(td)["next", "obs"]
        torch.testing.assert_close(nxt, torch.tensor([[3.5, 0.5], [-0.75, 2.25]]))
    finally:
        env.close()


@pytest.mark.timeout(60)
def test_observation_reshaped_outside_falls_back_to_the_last_output():
    # CatFrames outside the batched env: the caller's "obs" is (2, 6); the sub-envs read
    # the (2, 2) observation they returned last
    env = TransformedEnv(SerialEnv(2, ObsReadingEnv), CatFrames(N=3, dim=-1, in_keys=["obs"]))
    try:
        rollout = env.rollout(3, half, break_when_any_done=False)
        assert rollout["obs"].shape == (2, 3, 6)
        assert rollout["next", "obs"][0, :, -2].tolist() == [0.5, 1.0, 1.5]
    finally:
        env.close()


def _gym():
    from rl.envs import GymEnv

    return GymEnv("CartPole-v1")


@pytest.mark.parametrize(
    "batched, make, copied",
    [
        (SerialEnv, _gym, []),
        (SerialEnv, lambda: TransformedEnv(_gym(), StepCounter()), []),
        (ParallelEnv, _gym, []),
        (SerialEnv, ObsReadingEnv, ["obs"]),
    ],
    ids=["serial-gym", "serial-transformed-gym", "parallel-gym", "serial-native"],
)
def test_only_envs_that_may_read_observations_get_them_copied(batched, make, copied):
    # simulator wrappers step from the action alone: no observation copy per step
    kwargs = {"mp_start_method": "fork"} if batched is ParallelEnv else {}
    env = batched(2, make, **kwargs)
    try:
        assert env._layout.obs_in_keys == copied
    finally:
        env.close()
