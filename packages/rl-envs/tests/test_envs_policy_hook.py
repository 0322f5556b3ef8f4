"""``EnvBase(..., policy=...)``: the env transforms a recurrent policy needs, appended at
construction (TorchRL's env post-init hook)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rl.core import Unbounded
from rl.envs import InitTracker, PendulumEnv, TensorDictPrimer, TransformedEnv
from rl.envs.utils import append_policy_transforms, missing_policy_transforms


class Recurrent(nn.Module):
    """Stands for a recurrent module (rl.modules.GRUModule): it says the state it needs."""

    def make_tensordict_primer(self):
        return TensorDictPrimer(hidden=Unbounded(shape=(4,)), default_value=0.5)


def _keys(env):
    return set(env.full_observation_spec.keys(True, True))


class TestPolicyHook:
    def test_recurrent_policy_gets_init_tracker_and_primer(self):
        env = PendulumEnv(policy=nn.Sequential(Recurrent()))
        assert isinstance(env, TransformedEnv)
        assert {"is_init", "hidden"} <= _keys(env)
        td = env.reset()
        assert bool(td["is_init"].all())
        torch.testing.assert_close(td["hidden"], torch.full((4,), 0.5))

    def test_plain_policy_and_no_policy_leave_the_env_alone(self):
        assert type(PendulumEnv(policy=nn.Linear(3, 1))) is PendulumEnv
        assert type(PendulumEnv(policy=lambda td: td)) is PendulumEnv
        assert type(PendulumEnv()) is PendulumEnv

    def test_idempotent(self):
        policy = nn.Sequential(Recurrent())
        env = PendulumEnv(policy=policy)
        assert missing_policy_transforms(env, policy) == []
        again = append_policy_transforms(env, policy)
        assert again is env
        inits = [k for k in again.full_observation_spec.keys(True, True) if k == "is_init"]
        assert inits == ["is_init"]

    def test_existing_init_tracker_is_kept(self):
        env = TransformedEnv(PendulumEnv(), InitTracker())
        missing = missing_policy_transforms(env, nn.Sequential(Recurrent()))
        assert [type(t).__name__ for t in missing] == ["TensorDictPrimer"]


class TestRandomPolicy:
    def test_spec_is_copied_and_lazy_spec_comes_from_the_env(self):
        from rl.envs import RandomPolicy

        env = PendulumEnv()
        spec = env.action_spec
        policy = RandomPolicy(spec)
        assert policy.action_spec is not spec and policy.action_spec == spec
        lazy = RandomPolicy()
        assert lazy.action_spec is None
        with pytest.raises(RuntimeError, match="action_spec is not set"):
            lazy(env.reset())
        lazy.set_action_spec_from_env(env)
        assert lazy.action_spec == env.full_action_spec
        action = lazy(env.reset())["action"]
        assert action.shape == (1,) and bool(((action >= -2) & (action <= 2)).all())
        lazy.set_action_spec_from_env(PendulumEnv(batch_size=[2]))  # already set: kept
        assert lazy.action_spec == env.full_action_spec
