"""MultiAction's step root, dynamic chunk specs; Exclude/Select of done and reward entries;
specs set before EnvBase.__init__; batched envs with non-tensor entries."""

from __future__ import annotations

import pytest
import torch
from tensordict import NonTensorData, TensorDict

from rl.core import Composite, NonTensor, Unbounded
from rl.envs import EnvBase, ParallelEnv, SerialEnv, check_env_specs
from rl.envs._done import default_done_spec
from rl.envs.transforms import (
    Compose,
    ExcludeTransform,
    MultiAction,
    SelectTransform,
    StepCounter,
    TransformedEnv,
)


class CounterEnv(EnvBase):
    """Observation = number of steps taken; reward 1 per step; done after ``limit`` steps."""

    def __init__(self, limit=100):
        super().__init__()
        self.limit = limit
        self.observation_spec = Composite(observation=Unbounded(shape=(1,)))
        self.action_spec = Unbounded(shape=(1,))
        self.reward_spec = Unbounded(shape=(1,))
        self.full_done_spec = default_done_spec(())
        self.count = 0

    def _reset(self, tensordict):
        self.count = 0
        return self.full_done_spec.zero().update({"observation": torch.zeros(1)})

    def _step(self, tensordict):
        self.count += 1
        done = torch.tensor([self.count >= self.limit])
        return TensorDict(
            observation=torch.tensor([float(self.count)]),
            reward=torch.ones(1),
            done=done,
            terminated=done.clone(),
        )

    def _set_seed(self, seed):
        pass


class TestMultiActionStepRoot:
    def test_transforms_before_it_count_the_inner_steps(self):
        # TorchRL: the transforms' _step read the root MultiAction's inv returns, so a
        # StepCounter below MultiAction counts every executed action
        env = TransformedEnv(
            CounterEnv(),
            Compose(
                StepCounter(step_count_key="inner"),
                MultiAction(),
                StepCounter(step_count_key="outer"),
            ),
        )

        def policy(td):
            td["action"] = torch.ones(3, 1)
            return td

        r = env.rollout(4, policy)
        assert r["inner"].squeeze(-1).tolist() == [0, 3, 6, 9]
        assert r["outer"].squeeze(-1).tolist() == [0, 1, 2, 3]
        assert r["next", "observation"].squeeze(-1).tolist() == [3.0, 6.0, 9.0, 12.0]

    def test_chunk_dim_is_dynamic(self):
        env = TransformedEnv(CounterEnv(), MultiAction())
        assert env.action_spec.shape == torch.Size([-1, 1])
        assert env.reward_spec.shape == torch.Size([-1, 1])
        check_env_specs(env)  # a -1 dim matches the chunk length of the rollout

    def test_missing_chunk_names_the_vla_way_out(self):
        env = TransformedEnv(CounterEnv(), MultiAction.from_vla())
        with pytest.raises(KeyError, match=r"MultiAction.from_vla\(\)"):
            env.step(env.reset())


class ManyKeysEnv(CounterEnv):
    def __init__(self):
        super().__init__()
        self.observation_spec = Composite(
            observation=Unbounded(shape=(1,)), extra=Unbounded(shape=(2,))
        )

    def _reset(self, tensordict):
        return super()._reset(tensordict).update({"extra": torch.zeros(2)})

    def _step(self, tensordict):
        return super()._step(tensordict).update({"extra": torch.ones(2)})


class TestExcludeSelectDoneReward:
    def test_exclude_done(self):
        env = TransformedEnv(ManyKeysEnv(), ExcludeTransform("extra", "done"))
        assert env.done_keys == ["terminated"]
        r = env.rollout(3)
        assert "done" not in r["next"].keys() and "extra" not in r["next"].keys()
        check_env_specs(env)

    def test_exclude_reward(self):
        env = TransformedEnv(ManyKeysEnv(), ExcludeTransform("reward"))
        assert env.reward_keys == []
        assert "reward" not in env.rollout(2)["next"].keys()

    def test_select_without_keep_rewards(self):
        env = TransformedEnv(ManyKeysEnv(), SelectTransform("observation", keep_rewards=False))
        assert env.reward_keys == []
        env = TransformedEnv(
            ManyKeysEnv(), SelectTransform("observation", "reward", keep_rewards=False)
        )
        assert env.reward_keys == ["reward"]
        check_env_specs(env)

    def test_select_without_keep_dones(self):
        env = TransformedEnv(
            ManyKeysEnv(), SelectTransform("observation", "done", keep_dones=False)
        )
        assert env.done_keys == ["done"]
        env = TransformedEnv(ManyKeysEnv(), SelectTransform("observation"))
        assert sorted(env.done_keys) == ["done", "terminated"]


class SpecsFirstEnv(EnvBase):
    """Sets its specs before calling ``super().__init__()`` (TorchRL's mock envs do)."""

    def __init__(self):
        self.observation_spec = Composite(count=Unbounded((1,), dtype=torch.int32))
        self.full_action_spec = Composite(action=Unbounded((1,), dtype=torch.int32))
        self.reward_spec = Composite(reward=Unbounded((1,)))
        super().__init__()

    def _reset(self, tensordict):
        return self.full_done_spec.zero().update({"count": torch.zeros(1, dtype=torch.int32)})

    def _step(self, tensordict):
        out = self.full_done_spec.zero()
        return out.update(
            {"count": tensordict["count"] + tensordict["action"], "reward": torch.ones(1)}
        )

    def _set_seed(self, seed):
        pass


class TestSpecsBeforeInit:
    def test_specs_set_before_init_are_kept(self):
        env = SpecsFirstEnv()
        assert env.batch_size == torch.Size([]) and env.device is None
        assert env.observation_spec["count"].dtype == torch.int32
        assert set(env.done_keys) == {"done", "terminated"}  # completed as usual
        r = env.rollout(3, lambda td: td.set("action", torch.ones(1, dtype=torch.int32)))
        assert r["next", "count"].squeeze(-1).tolist() == [1, 2, 3]


class StringObsEnv(CounterEnv):
    def __init__(self, limit=100):
        super().__init__(limit)
        self.observation_spec["text"] = NonTensor(shape=(), example_data="0")

    def _reset(self, tensordict):
        return super()._reset(tensordict).set("text", NonTensorData("0"))

    def _step(self, tensordict):
        out = super()._step(tensordict)
        return out.set("text", NonTensorData(str(self.count)))


class TestBatchedNonTensor:
    def test_serial_env_stacks_non_tensor_entries(self):
        env = SerialEnv(2, StringObsEnv)
        td = env.reset()
        td["action"] = torch.zeros(2, 1)
        out = env.step(td)
        assert out["next", "text"] == ["1", "1"]
        env.close()

    def test_parallel_env_names_the_entry(self):
        with pytest.raises(ValueError, match="ParallelEnv cannot hold the non-tensor entry 'text'"):
            ParallelEnv(2, StringObsEnv)


class TestSuccessRewardSpec:
    def test_reward_spec_alone_falls_back_to_the_reward_leaf(self):
        from rl.envs.transforms import SuccessReward

        spec = Composite(reward=Unbounded(shape=(4, 1)), shape=(4,))
        out = SuccessReward(scale=-3.0).transform_reward_spec(spec)
        assert out["reward"].shape == torch.Size([4, 1])
        assert out["reward"].space.low.max().item() == -3.0
        assert out["reward"].space.high.min().item() == 0.0

    def test_reward_spec_alone_without_a_shape(self):
        from rl.envs.transforms import SuccessReward

        with pytest.raises(RuntimeError, match="SuccessReward could not infer the reward shape"):
            SuccessReward().transform_reward_spec(Composite(shape=()))

    def test_in_an_env_the_success_entry_sizes_it(self):
        from rl.envs.transforms import SuccessReward

        env = TransformedEnv(CounterEnv(), SuccessReward(success_key="done", scale=2.0))
        spec = env.transform[0].transform_reward_spec(Composite(shape=()))
        assert spec["reward"].shape == torch.Size([1])


class EmptyGroupEnv(CounterEnv):
    def __init__(self):
        super().__init__()
        self.observation_spec["group"] = Composite(inner=Composite())


class TestBatchedEmptySpecs:
    @pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
    def test_refused_with_the_way_out(self, cls):
        with pytest.raises(
            RuntimeError, match=f"The environment passed to {cls.__name__} has empty specs in"
        ):
            cls(2, EmptyGroupEnv)


class ScalarActionEnv(CounterEnv):
    def __init__(self):
        super().__init__()
        from rl.core import Bounded

        self.action_spec = Bounded(-1.0, 1.0, shape=())


class TestActionDiscretizerScalar:
    @pytest.mark.parametrize("categorical", [True, False])
    def test_one_count_tensor_keeps_the_scalar_shape(self, categorical):
        from rl.envs.transforms import ActionDiscretizer

        t = ActionDiscretizer(
            num_intervals=torch.tensor([5]), categorical=categorical, out_action_key="choice"
        )
        env = TransformedEnv(ScalarActionEnv(), t)
        check_env_specs(env)
        choice = torch.tensor(4) if categorical else torch.nn.functional.one_hot(torch.tensor(4), 5)
        out = env.transform.inv(TensorDict(choice=choice))
        # choice i of n=5 over [-1, 1], MEDIAN: -1 + 2 * (i + 0.5) / 5
        torch.testing.assert_close(out["action"], torch.tensor(0.8))
