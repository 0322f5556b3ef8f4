import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.core import Bounded, Composite, Unbounded
from rl.envs import ModelBasedEnvBase, PendulumEnv, check_env_specs


class LinearModelEnv(ModelBasedEnvBase):
    """x' = x + a, reward = -|x'|."""

    def __init__(self, batch_size=()):
        model = TensorDictModule(
            lambda x, a: (x + a, -(x + a).abs()), in_keys=["x", "action"], out_keys=["x", "reward"]
        )
        super().__init__(model, batch_size=batch_size)
        bs = self.batch_size
        self.observation_spec = Composite(x=Unbounded((*bs, 1)), shape=bs)
        self.action_spec = Bounded(-1.0, 1.0, (*bs, 1))
        self.reward_spec = Unbounded((*bs, 1))

    def _reset(self, tensordict):
        return TensorDict(x=torch.ones(*self.batch_size, 1), batch_size=self.batch_size)


class TestModelBasedEnvBase:
    def test_rollout_follows_model(self):
        env = LinearModelEnv()
        check_env_specs(env)
        td = env.rollout(3, policy=lambda td: td.set("action", torch.full((1,), -0.25)))
        torch.testing.assert_close(td["next", "x"].squeeze(-1), torch.tensor([0.75, 0.5, 0.25]))
        torch.testing.assert_close(
            td["next", "reward"].squeeze(-1), -torch.tensor([0.75, 0.5, 0.25])
        )
        assert not td["next", "done"].any()

    def test_not_batch_locked_takes_extra_dims(self):
        env = LinearModelEnv()
        assert not env.batch_locked
        start = TensorDict(x=torch.arange(6.0).reshape(2, 3, 1), batch_size=[2, 3])
        td = env.rollout(4, auto_reset=False, tensordict=start, break_when_any_done=False)
        assert td.batch_size == (2, 3, 4)
        torch.testing.assert_close(td["next", "x"][..., -1, :], start["x"] + td["action"].sum(-2))

    def test_batch_locked_read_only(self):
        # TorchRL 0.14.1: EnvBase.batch_locked refuses assignment, model-based envs too
        env = LinearModelEnv()
        with pytest.raises(RuntimeError, match="batch_locked is a read-only property"):
            env.batch_locked = True
        assert not env.batch_locked

    def test_step_keeps_declared_keys_only(self):
        env = LinearModelEnv()
        td = env.reset().set("action", torch.zeros(1)).set("extra", torch.zeros(2))
        out = env.step(td)
        assert set(out["next"].keys()) == {"x", "reward", "done", "terminated"}

    def test_params_are_passed_to_the_model(self):
        calls = []

        class Model(torch.nn.Module):
            def forward(self, td, params=None, buffers=None):
                calls.append(params)
                return td.set("x", td["x"] + td["action"]).set("reward", torch.zeros(1))

        env = LinearModelEnv()
        env.world_model = Model()
        env.world_model_params = ["p"]
        env.step(env.reset().set("action", torch.zeros(1)))
        assert calls == [["p"]]

    def test_set_specs_from_env(self):
        env = LinearModelEnv()
        env.set_specs_from_env(PendulumEnv())
        assert env.observation_spec["observation"].shape == (3,)
        assert env.action_spec.shape == (1,)

    def test_set_seed_warns(self):
        with pytest.warns(UserWarning, match="Set seed"):
            LinearModelEnv().set_seed(0)

    def test_abstract_reset(self):
        class NoReset(ModelBasedEnvBase):
            pass

        with pytest.raises(TypeError):
            NoReset(TensorDictModule(torch.nn.Identity(), in_keys=["x"], out_keys=["x"]))
