"""A spec with a ``-1`` dim (a shape that changes at each step): rollouts stack lazily."""

import torch
from tensordict import LazyStackedTensorDict, TensorDict

from rl.core import Bounded, Composite, Unbounded
from rl.envs import EnvBase, GymEnv


class GrowingEnv(EnvBase):
    """Observation ``[count + 1, 2]`` filled with ``count``; done after 4 steps."""

    def __init__(self):
        super().__init__(batch_size=())
        self.observation_spec = Composite(observation=Unbounded(shape=(-1, 2)))
        self.action_spec = Bounded(low=-1, high=1, shape=(1,))
        self.reward_spec = Unbounded((1,))
        self.count = 0

    def _reset(self, tensordict=None):
        self.count = 0
        return TensorDict(observation=torch.zeros(1, 2)).update(self.full_done_spec.zero())

    def _step(self, tensordict):
        self.count += 1
        done = self.full_done_spec.zero() | (self.count >= 4)
        obs = torch.full((self.count + 1, 2), float(self.count))
        return TensorDict(observation=obs, reward=torch.zeros(1)).update(done)

    def _set_seed(self, seed):
        return seed


class TestDynamicSpecs:
    def test_declared(self):
        assert GrowingEnv()._has_dynamic_specs()
        assert not GymEnv("Pendulum-v1")._has_dynamic_specs()

    def test_rollout(self):
        data = GrowingEnv().rollout(10)
        assert isinstance(data, LazyStackedTensorDict)
        assert data.batch_size == (4,)
        for t in range(4):
            assert data[t]["observation"].shape == (t + 1, 2)
            assert torch.all(data[t]["next", "observation"] == t + 1)
        torch.testing.assert_close(
            data["next", "done"].squeeze(-1), torch.tensor([0, 0, 0, 1]).bool()
        )
        # without stopping at done: the env is reset and the shapes start again
        data = GrowingEnv().rollout(6, break_when_any_done=False)
        assert [data[t]["observation"].shape[0] for t in range(6)] == [1, 2, 3, 4, 1, 2]
