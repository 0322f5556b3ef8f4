"""Envs whose observation shape changes from step to step (a ``-1`` dim in the spec)."""

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from rl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from rl.core import Binary, Bounded, Composite, Unbounded
from rl.envs import EnvBase, RandomPolicy


class GrowingEnv(EnvBase):
    """Observation ``[3, count + 1, 2]`` filled with ``count``; done after 5 steps."""

    def __init__(self):
        super().__init__(batch_size=())
        self.observation_spec = Composite(observation=Unbounded(shape=(3, -1, 2)))
        self.action_spec = Bounded(low=-1, high=1, shape=(2,))
        self.full_done_spec = Composite(
            done=Binary(1, shape=(1,), dtype=torch.bool),
            terminated=Binary(1, shape=(1,), dtype=torch.bool),
            truncated=Binary(1, shape=(1,), dtype=torch.bool),
        )
        self.reward_spec = Unbounded((1,))
        self.count = 0

    def _obs(self):
        return torch.full((3, self.count + 1, 2), float(self.count))

    def _reset(self, tensordict=None):
        self.count = 0
        return TensorDict({"observation": self._obs()}).update(self.full_done_spec.zero())

    def _step(self, tensordict):
        self.count += 1
        done = self.full_done_spec.zero() | (self.count >= 5)
        return (
            TensorDict({"observation": self._obs()})
            .update(done)
            .update(self.full_reward_spec.zero())
        )

    def _set_seed(self, seed):
        return seed


def check_steps(data, offset=0):
    """Step ``t`` observes ``[3, c + 1, 2]`` filled with ``c = (t + offset) % 5``."""
    for t in range(data.batch_size[-1]):
        count = (t + offset) % 5
        obs = data[..., t]["observation"]
        assert obs.shape[-3:] == (3, count + 1, 2)
        assert torch.all(obs == count)
        assert torch.all(data[..., t]["next", "observation"] == count + 1)


class TestDynamicSpecs:
    def test_rollout_stacks_lazily(self):
        data = GrowingEnv().rollout(7)
        assert isinstance(data, LazyStackedTensorDict)
        assert data.batch_size == (5,)  # stops at the first done, as TorchRL
        check_steps(data)

    def test_collector(self):
        env = GrowingEnv()
        collector = Collector(
            env, RandomPolicy(env.action_spec), frames_per_batch=12, total_frames=24
        )
        batches = list(collector)
        assert [b.batch_size for b in batches] == [(12,), (12,)]
        for i, data in enumerate(batches):
            assert isinstance(data, LazyStackedTensorDict) and data.names[-1] == "time"
            check_steps(data, offset=12 * i)
            expected = (torch.arange(12) + 12 * i) // 5
            assert torch.equal(data["collector", "traj_ids"], expected)

    @pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
    def test_multiprocess(self, cls):
        policy = RandomPolicy(GrowingEnv().action_spec)
        collector = cls([GrowingEnv], policy, frames_per_batch=10, total_frames=20)
        try:
            for i, data in enumerate(collector):
                assert isinstance(data, LazyStackedTensorDict) and data.names[-1] == "time"
                check_steps(data, offset=10 * i)
        finally:
            collector.shutdown()
