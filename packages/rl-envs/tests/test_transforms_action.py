"""Action-side transforms: ActionMask and ActionDiscretizer."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.core import (
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)
from rl.envs import EnvBase, PendulumEnv, check_env_specs
from rl.envs._done import default_done_spec
from rl.envs.transforms import (
    FORWARD_NOT_IMPLEMENTED,
    ActionDiscretizer,
    ActionMask,
    Compose,
    StepCounter,
    TransformedEnv,
)


class MaskedEnv(EnvBase):
    """n choices; action ``a`` is forbidden once taken (until reset); reward = a."""

    def __init__(self, n=4, batch_size=()):
        super().__init__(batch_size=batch_size)
        bs = self.batch_size
        self.n = n
        self.observation_spec = Composite(
            action_mask=Categorical(2, shape=(*bs, n), dtype=torch.bool), shape=bs
        )
        self.action_spec = Categorical(n, shape=bs)
        self.reward_spec = Unbounded(shape=(*bs, 1))
        self.full_done_spec = default_done_spec(bs, truncated=True)  # it truncates
        self.mask = torch.ones(*bs, n, dtype=torch.bool)

    def _reset(self, tensordict):
        self.mask = torch.ones(*self.batch_size, self.n, dtype=torch.bool)
        flag = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return TensorDict(
            action_mask=self.mask.clone(),
            done=flag,
            terminated=flag.clone(),
            truncated=flag.clone(),
            batch_size=self.batch_size,
        )

    def _step(self, tensordict):
        action = tensordict["action"]
        if not self.mask.gather(-1, action.unsqueeze(-1)).all():
            raise RuntimeError(f"illegal action {action}")
        self.mask = self.mask.scatter(-1, action.unsqueeze(-1), False)
        done = ~self.mask.any(-1, keepdim=True)
        return TensorDict(
            action_mask=self.mask.clone(),
            reward=action.float().unsqueeze(-1),
            done=done.clone(),
            terminated=done,
            truncated=torch.zeros_like(done),
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


class GrowingMaskEnv(MaskedEnv):
    """After t steps, actions 0..t are allowed (an illegal action raises)."""

    def _reset(self, tensordict):
        out = super()._reset(tensordict)
        self.mask = torch.zeros_like(self.mask)
        self.mask[..., 0] = True
        out["action_mask"] = self.mask.clone()
        return out

    def _step(self, tensordict):
        action = tensordict["action"]
        if not self.mask.gather(-1, action.unsqueeze(-1)).all():
            raise RuntimeError(f"illegal action {action} for mask {self.mask}")
        t = int(self.mask.sum(-1).reshape(-1)[0])
        self.mask[..., : t + 1] = True
        done = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return TensorDict(
            action_mask=self.mask.clone(),
            reward=action.float().unsqueeze(-1),
            done=done,
            terminated=done.clone(),
            truncated=done.clone(),
            batch_size=self.batch_size,
        )


class TestActionMask:
    @pytest.mark.parametrize("batch_size", [(), (3,)])
    def test_check_env_specs_and_random_rollout(self, batch_size):
        env = TransformedEnv(GrowingMaskEnv(n=4, batch_size=batch_size), ActionMask())
        check_env_specs(env)  # 3 steps: the final mask allows every action
        torch.manual_seed(0)
        r = env.rollout(8)
        taken = r["action"].reshape(-1, 8) if batch_size else r["action"].reshape(1, 8)
        # step t draws from {0..t}: never an illegal action, and later steps use the wider mask
        assert (taken <= torch.arange(8).clamp_max(3)).all()
        assert taken[:, 3:].max() > 0

    def test_random_actions_follow_the_mask(self):
        env = TransformedEnv(MaskedEnv(n=4), ActionMask())
        for _ in range(5):
            taken = []
            td = env.reset()
            for _ in range(4):
                td = env.rand_action(td)
                taken.append(int(td["action"]))
                td = env.step(td)["next"].clone()
            assert sorted(taken) == [0, 1, 2, 3]  # never an illegal action
            assert bool(td["done"])

    def test_rollout_with_random_policy(self):
        env = TransformedEnv(MaskedEnv(n=5, batch_size=[3]), Compose(StepCounter(), ActionMask()))
        r = env.rollout(5, policy=env.rand_action)
        assert r.batch_size == torch.Size([3, 5])
        assert sorted(r["action"][0].tolist()) == [0, 1, 2, 3, 4]

    def test_on_data_raises(self):
        # TorchRL's: the mask lives in the env's spec, so data alone cannot be transformed
        t = ActionMask()
        td = TensorDict(
            action=torch.tensor([2]), action_mask=torch.ones(1, 3, dtype=torch.bool), batch_size=[1]
        )
        with pytest.raises(
            RuntimeError,
            match=r"class .*ActionMask'> cannot be executed without a parent environment",
        ):
            t(td)
        assert FORWARD_NOT_IMPLEMENTED.format(type(t)) in str(
            pytest.raises(RuntimeError, t, td).value
        )
        with pytest.raises(RuntimeError, match="parent cannot be None"):
            t._call(TensorDict())

    def test_needs_discrete_spec(self):
        env = TransformedEnv(PendulumEnv(), ActionMask())
        with pytest.raises(
            ValueError, match="The action spec must be one of .*Got Bounded instead"
        ):
            env.rollout(2)

    @pytest.mark.parametrize("key", [1, None])
    def test_keys_must_be_nested_keys(self, key):
        with pytest.raises(ValueError, match="The action key must be a nested key"):
            ActionMask(action_key=key)
        with pytest.raises(ValueError, match="The mask key must be a nested key"):
            ActionMask(mask_key=key)

    def test_check_env_specs_with_a_shrinking_mask(self):
        # the spec's mask at the end forbids the actions taken earlier: check_env_specs
        # checks each step's action against the spec's domain, not today's mask
        env = TransformedEnv(MaskedEnv(n=4), ActionMask())
        check_env_specs(env)
        assert env.action_spec.mask is not None and not env.action_spec.mask.all()


class TestActionDiscretizer:
    @pytest.mark.parametrize(
        "sampling, expected",
        [("median", [-1.6, 0.0, 1.6]), ("low", [-2.0, -0.4, 1.2]), ("high", [-1.2, 0.4, 2.0])],
    )
    def test_values(self, sampling, expected):
        env = TransformedEnv(PendulumEnv(), ActionDiscretizer(5, sampling=sampling))
        _ = env.action_spec  # specs give the bounds
        td = TensorDict(action=torch.tensor([[0], [2], [4]]), batch_size=[3])
        out = env.transform.inv(td)
        torch.testing.assert_close(out["action"].squeeze(-1), torch.tensor(expected))
        assert td["action"].dtype == torch.int64  # the outer action is untouched

    def test_specs_and_rollout(self):
        env = TransformedEnv(PendulumEnv(batch_size=[2]), ActionDiscretizer(7))
        spec = env.action_spec
        assert isinstance(spec, MultiCategorical) and spec.shape == torch.Size([2, 1])
        assert spec.nvec.reshape(-1).tolist() == [7, 7]
        r = env.rollout(5)
        assert r["action"].dtype == torch.int64 and r["action"].max() < 7
        check_env_specs(env)

    def test_one_hot_and_out_key(self):
        env = TransformedEnv(
            PendulumEnv(), ActionDiscretizer(4, out_action_key="choice", categorical=False)
        )
        spec = env.full_action_spec["choice"]
        assert isinstance(spec, MultiOneHot) and spec.shape == torch.Size([4])
        assert "action" not in env.full_action_spec.keys()
        # the continuous action moved to the state spec: the transform writes it
        assert isinstance(env.full_state_spec["action"], Bounded)
        r = env.rollout(3)
        assert r["action"].dtype == torch.float32 and r["choice"].dtype == torch.bool
        check_env_specs(env)

    def test_sampling_strategy_enum(self):
        S = ActionDiscretizer.SamplingStrategy
        assert [S.MEDIAN, S.LOW, S.HIGH, S.RANDOM] == [0, 1, 2, 3]
        assert ActionDiscretizer(3).sampling is S.MEDIAN
        assert ActionDiscretizer(3, sampling="high").sampling is S.HIGH
        t = ActionDiscretizer(4, sampling=S.LOW, low=0.0, high=4.0)
        out = t.inv(TensorDict(action=torch.tensor([0, 3]), batch_size=[2]))["action"]
        torch.testing.assert_close(out, torch.tensor([0.0, 3.0]))

    def test_per_dim_counts(self):
        # two dims over [0, 1]: 2 and 4 intervals; medians (i + 0.5) / n
        t = ActionDiscretizer(torch.tensor([2, 4]), low=torch.zeros(2), high=torch.ones(2))
        out = t.inv(TensorDict(action=torch.tensor([[1, 3], [0, 0]]), batch_size=[2]))
        torch.testing.assert_close(out["action"], torch.tensor([[0.75, 0.875], [0.25, 0.125]]))
        one_hot = ActionDiscretizer(
            torch.tensor([2, 4]), categorical=False, low=torch.zeros(2), high=torch.ones(2)
        )
        a = torch.tensor([[False, True, False, False, False, True]])
        out = one_hot.inv(TensorDict(action=a, batch_size=[1]))["action"]
        torch.testing.assert_close(out, torch.tensor([[0.75, 0.875]]))

    def test_scalar_action(self):
        class ScalarEnv(PendulumEnv):
            def __init__(self):
                super().__init__()
                self.action_spec = Bounded(-2.0, 2.0, shape=())

            def _step(self, td):
                return super()._step(td.set("action", td["action"].unsqueeze(-1)))

        env = TransformedEnv(ScalarEnv(), ActionDiscretizer(5, categorical=False))
        spec = env.action_spec
        assert isinstance(spec, OneHot) and spec.shape == torch.Size([5])
        env = TransformedEnv(ScalarEnv(), ActionDiscretizer(5))
        assert isinstance(env.action_spec, Categorical) and env.action_spec.shape == ()
        out = env.transform.inv(TensorDict(action=torch.tensor(4)))["action"]
        torch.testing.assert_close(out, torch.tensor(1.6))

    def test_random_sampling_within_interval(self):
        t = ActionDiscretizer(4, sampling="random", low=0.0, high=4.0)
        out = t.inv(TensorDict(action=torch.full((1000, 1), 2), batch_size=[1000]))["action"]
        assert (out >= 2.0).all() and (out <= 3.0).all() and out.std() > 0.1

    def test_errors(self):
        with pytest.raises(ValueError, match="num_intervals must be an int >= 2"):
            ActionDiscretizer(1)
        with pytest.raises(ValueError, match="sampling must be"):
            ActionDiscretizer(3, sampling="mid")
        with pytest.raises(RuntimeError, match="Cannot execute transform ActionDiscretizer"):
            ActionDiscretizer(3).inv(TensorDict(action=torch.tensor([1])))
        with pytest.raises(TypeError, match="needs a Bounded action spec"):
            TransformedEnv(MaskedEnv(), ActionDiscretizer(3))
