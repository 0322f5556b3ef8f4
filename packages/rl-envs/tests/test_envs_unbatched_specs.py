"""EnvBase's *_spec_unbatched views: the spec of one env of the batch, set from one env's spec."""

from __future__ import annotations

import pytest
import torch

from rl.core import Bounded, Categorical, Composite, Unbounded
from rl.envs import EnvBase, PendulumEnv


class UnbatchedSpecsEnv(EnvBase):
    """Declares its specs for a single env; they are expanded to the batch."""

    def __init__(self, batch_size=(3, 2)):
        super().__init__(batch_size=batch_size)
        self.observation_spec_unbatched = Composite(
            observation=Unbounded(shape=(4,)),
            group=Composite(obs=Bounded(0.0, 1.0, shape=(2, 5)), shape=(2,)),
        )
        self.action_spec_unbatched = Categorical(n=3, shape=())
        self.reward_spec_unbatched = Composite(
            reward=Unbounded(shape=(1,)), group=Composite(gift=Unbounded(shape=(2, 1)), shape=(2,))
        )

    def _reset(self, tensordict):
        return self.full_observation_spec.zero().update(self.full_done_spec.zero())

    def _step(self, tensordict):
        out = self.full_observation_spec.zero().update(self.full_done_spec.zero())
        return out.update(self.full_reward_spec.zero())

    def _set_seed(self, seed):
        pass


class TestUnbatchedSpecs:
    def test_setters_expand_to_the_batch(self):
        env = UnbatchedSpecsEnv()
        assert env.observation_spec["observation"].shape == torch.Size([3, 2, 4])
        assert env.observation_spec["group", "obs"].shape == torch.Size([3, 2, 2, 5])
        assert env.action_spec.shape == torch.Size([3, 2])
        assert env.full_reward_spec["group", "gift"].shape == torch.Size([3, 2, 2, 1])
        assert sorted(map(str, env.reward_keys)) == sorted(map(str, ["reward", ("group", "gift")]))

    def test_getters_drop_the_batch(self):
        env = UnbatchedSpecsEnv()
        assert env.observation_spec_unbatched["observation"].shape == torch.Size([4])
        assert env.full_observation_spec_unbatched.shape == torch.Size([])
        assert env.action_spec_unbatched == Categorical(n=3, shape=())
        assert env.full_action_spec_unbatched["action"].shape == torch.Size([])
        assert env.reward_spec_unbatched["group", "gift"].shape == torch.Size([2, 1])
        assert env.full_done_spec_unbatched["done"].shape == torch.Size([1])
        assert env.done_spec_unbatched.shape == torch.Size([]) or isinstance(
            env.done_spec_unbatched, Composite
        )
        assert env.full_state_spec_unbatched.shape == torch.Size([])
        assert env.output_spec_unbatched.shape == torch.Size([])
        assert env.input_spec_unbatched["full_action_spec", "action"].shape == torch.Size([])

    def test_unbatched_env_views_are_the_specs(self):
        env = PendulumEnv()
        assert env.action_spec_unbatched == env.action_spec
        assert env.observation_spec_unbatched == env.observation_spec

    def test_rollout(self):
        env = UnbatchedSpecsEnv(batch_size=(2,))
        r = env.rollout(3)
        assert r["next", "group", "gift"].shape == torch.Size([2, 3, 2, 1])

    def test_leaf_setter_checks_nothing_more(self):
        env = UnbatchedSpecsEnv(batch_size=(2,))
        env.action_spec_unbatched = Bounded(-1.0, 1.0, shape=(3,))
        assert env.action_spec.shape == torch.Size([2, 3])
        with pytest.raises(ValueError, match="action_spec must have leading dims"):
            env.action_spec = Bounded(-1.0, 1.0, shape=(3,))
