"""Snippets of TorchRL 0.14's env documentation, run with ``torchrl.envs`` -> ``rl.envs``.

Each test is a docstring / tutorial example with only the import path changed
(``torchrl.data`` specs come from ``rl.core``, ``set_gym_backend("gym")`` becomes
``"gymnasium"``), asserting the output TorchRL documents for it. Printed tensordicts are
compared by their keys, shapes and dtypes (the repr differs).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.core import Bounded, Categorical, Composite
from rl.envs import (
    GymEnv,
    SerialEnv,
    StepCounter,
    TransformedEnv,
    set_gym_backend,
)
from rl.envs.utils import check_env_specs, make_composite_from_td, step_mdp, terminated_or_truncated


def _layout(td):
    return {
        (k if isinstance(k, str) else "/".join(k)): (tuple(v.shape), v.dtype)
        for k, v in td.items(include_nested=True, leaves_only=True)
    }


class TestEnvBaseDocs:
    def test_env_attributes(self):
        # EnvBase docstring
        env = GymEnv("Pendulum-v1")
        assert env.batch_size == torch.Size([])  # how many envs are run at once
        assert isinstance(env.action_spec, Bounded) and env.action_spec.shape == (1,)
        assert env.action_spec.dtype == torch.float32
        assert env.observation_spec["observation"].shape == (3,)
        assert list(env.input_spec.keys()) == ["full_action_spec", "full_state_spec"]

    def test_rollout_without_policy(self):
        # EnvBase.rollout docstring, "Using rollout without a policy"
        env = TransformedEnv(GymEnv("Pendulum-v1"), StepCounter(max_steps=20))
        rollout = env.rollout(max_steps=1000)
        assert rollout.batch_size == torch.Size([20])
        layout = _layout(rollout)
        assert layout["action"] == ((20, 1), torch.float32)
        assert layout["next/observation"] == ((20, 3), torch.float32)
        assert layout["next/step_count"] == ((20, 1), torch.int64)
        assert layout["step_count"] == ((20, 1), torch.int64)
        assert layout["next/truncated"] == ((20, 1), torch.bool)

    def test_rollout_with_more_dims(self):
        # "with envs that contain more dimensions"
        env = SerialEnv(3, lambda: TransformedEnv(GymEnv("Pendulum-v1"), StepCounter(max_steps=20)))
        rollout = env.rollout(max_steps=1000)
        assert rollout.batch_size == torch.Size([3, 20])
        assert _layout(rollout)["next/observation"] == ((3, 20, 3), torch.float32)
        assert _layout(rollout)["next/step_count"] == ((3, 20, 1), torch.int64)
        env.close()

    def test_rollout_with_a_plain_module_policy(self):
        # "Using a policy (a regular nn.Module or a TensorDictModule) is also easy"
        env = GymEnv("CartPole-v1", categorical_action_encoding=True)

        class ArgMaxModule(nn.Module):
            def forward(self, values):
                return values.argmax(-1)

        n_obs = env.observation_spec["observation"].shape[-1]
        n_act = env.action_spec.n
        # A deterministic policy
        policy = nn.Sequential(nn.Linear(n_obs, n_act), ArgMaxModule())
        out = env.rollout(max_steps=10, policy=policy)
        steps = out.batch_size[0]
        assert 1 <= steps <= 10
        assert _layout(out)["action"] == ((steps,), torch.int64)
        assert _layout(out)["next/terminated"] == ((steps, 1), torch.bool)
        # Under the hood, rollout will wrap the policy in a TensorDictModule
        # To speed things up we can do that ourselves
        policy = TensorDictModule(
            policy, in_keys=list(env.observation_spec.keys()), out_keys=["action"]
        )
        out = env.rollout(max_steps=10, policy=policy)
        assert _layout(out)["action"][1] == torch.int64

    def test_append_transform_with_a_callable(self):
        # EnvBase.append_transform docstring
        env = GymEnv("CartPole-v1")
        loc = 0.5
        scale = 1.0
        transform = lambda data: data.set("observation", (data.get("observation") - loc) / scale)  # noqa: E731
        env = env.append_transform(transform=transform)
        assert repr(env.transform[0]) == "_CallableTransform(keys=[])"
        assert type(env).__name__ == "TransformedEnv"
        td = env.reset()
        raw = env.base_env.reset()
        assert td["observation"].shape == raw["observation"].shape == (4,)
        assert bool((td["observation"] < 0).all())  # |obs| < 0.05 at reset, minus 0.5

    def test_check_env_specs(self):
        # check_env_specs docstring
        env = GymEnv("Pendulum-v1")
        check_env_specs(env)


class TestUtilsDocs:
    def test_step_mdp(self):
        # step_mdp docstring
        td = TensorDict(
            {
                "done": torch.zeros((), dtype=torch.bool),
                "reward": torch.zeros(()),
                "extra": torch.zeros(()),
                "next": TensorDict(
                    {
                        "done": torch.zeros((), dtype=torch.bool),
                        "reward": torch.zeros(()),
                        "obs": torch.zeros(()),
                    },
                    [],
                ),
                "obs": torch.zeros(()),
                "action": torch.zeros(()),
            },
            [],
        )
        assert sorted(step_mdp(td).keys()) == ["done", "extra", "obs"]
        assert sorted(step_mdp(td, exclude_done=True).keys()) == ["extra", "obs"]
        assert sorted(step_mdp(td, exclude_reward=False).keys()) == [
            "done",
            "extra",
            "obs",
            "reward",
        ]
        assert sorted(step_mdp(td, exclude_action=False).keys()) == [
            "action",
            "done",
            "extra",
            "obs",
        ]
        assert sorted(step_mdp(td, keep_other=False).keys()) == ["done", "obs"]

    def test_terminated_or_truncated(self):
        # terminated_or_truncated docstring
        spec = Composite(
            done=Categorical(2, dtype=torch.bool),
            truncated=Categorical(2, dtype=torch.bool),
            nested=Composite(
                done=Categorical(2, dtype=torch.bool),
                truncated=Categorical(2, dtype=torch.bool),
            ),
        )
        data = TensorDict(
            {"done": True, "truncated": False, "nested": {"done": False, "truncated": True}},
            batch_size=[],
        )
        terminated_or_truncated(data, spec)
        assert data["_reset"] == torch.tensor(True)
        assert data["nested", "_reset"] == torch.tensor(True)

    def test_make_composite_from_td(self):
        # make_composite_from_td docstring
        data = TensorDict(
            {
                "obs": torch.randn(3),
                "action": torch.zeros(2, dtype=torch.int),
                "next": {"obs": torch.randn(3), "reward": torch.randn(1)},
            },
            [],
        )
        spec = make_composite_from_td(data)
        assert spec["obs"].shape == (3,) and spec["action"].dtype == torch.int32
        assert spec["next", "reward"].shape == (1,)
        assert (spec.zero() == data.zero_()).all()


class TestAutoResetDocs:
    def test_auto_resetting_gym_env(self):
        # AutoResetTransform docstring (gym backend -> gymnasium)
        torch.manual_seed(0)

        class AutoResettingGymEnv(GymEnv):
            def _step(self, tensordict):
                tensordict = super()._step(tensordict)
                if tensordict["done"].any():
                    td_reset = super().reset()
                    tensordict.update(td_reset.exclude(*self.done_keys))
                return tensordict

            def _reset(self, tensordict=None):
                if tensordict is not None and "_reset" in tensordict:
                    return tensordict.copy()
                return super()._reset(tensordict)

        with set_gym_backend("gymnasium"):
            env = AutoResettingGymEnv("CartPole-v1", auto_reset=True, auto_reset_replace=True)
            env.set_seed(0)
            r = env.rollout(30, break_when_any_done=False)
        done = r["next", "done"].squeeze()
        assert r.batch_size == (30,) and bool(done.any())
        # "observation after reset are set as nan"
        assert r["next", "observation"].isnan().any(-1).tolist() == done.tolist()
        assert not r["observation"].isnan().any()
