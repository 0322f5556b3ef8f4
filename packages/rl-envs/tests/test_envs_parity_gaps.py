"""TorchRL parity of the env core, second pass: BatchSizeTransform changing the env's
batch size, NextObservationDelta inside an env, ``Transform.container``, spec locking
and the batched-env options.

Expected values and layouts were checked against TorchRL 0.14.1 on the same snippets.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from rl.core import Composite, Unbounded
from rl.envs import (
    EnvBase,
    GymEnv,
    ParallelEnv,
    PendulumEnv,
    SerialEnv,
    TransformedEnv,
    check_env_specs,
)
from rl.envs.transforms import BatchSizeTransform, NextObservationDelta, RewardSum, StepCounter


class Stateless(EnvBase):
    """TorchRL's BatchSizeTransform docstring env: random observations, any batch."""

    batch_locked = False

    def __init__(self):
        super().__init__()
        self.observation_spec = Composite(observation=Unbounded(3))
        self.reward_spec = Unbounded(1)
        self.action_spec = Unbounded(1)

    def _reset(self, tensordict, **kwargs):
        bs = tensordict.batch_size if tensordict is not None else torch.Size([])
        result = self.observation_spec.rand(bs)
        result.update(self.full_done_spec.zero(bs))
        return result

    def _step(self, tensordict):
        result = self.observation_spec.rand(tensordict.batch_size)
        result.update(self.full_done_spec.zero(tensordict.batch_size))
        result.update(self.full_reward_spec.zero(tensordict.batch_size))
        return result

    def _set_seed(self, seed):
        pass


class TestBatchSizeTransformInEnv:
    def test_expand_a_stateless_env(self):
        env = TransformedEnv(Stateless(), BatchSizeTransform(batch_size=[5]))
        assert env.batch_size == (5,)
        assert env.observation_spec["observation"].shape == (5, 3)
        assert env.reset().batch_size == (5,)
        r = env.rollout(10)
        assert r.batch_size == (5, 10) and r["next", "observation"].shape == (5, 10, 3)
        check_env_specs(env)

    def test_reset_func_with_env(self):
        def reset_func(tensordict, tensordict_reset, env):
            result = env.observation_spec.rand()
            result.update(env.full_done_spec.zero())
            return result

        t = BatchSizeTransform(batch_size=[5], reset_func=reset_func, env_kwarg=True)
        env = TransformedEnv(Stateless(), t)
        assert env.rollout(2).batch_size == (5, 2)

    def test_reshape_fn(self):
        env = TransformedEnv(
            GymEnv("CartPole-v1"), BatchSizeTransform(reshape_fn=lambda td: td.reshape(1, 1))
        )
        assert env.batch_size == (1, 1) and env.action_spec.shape == (1, 1, 2)
        r = env.rollout(4)
        assert r.batch_size[:2] == (1, 1) and r["next", "observation"].shape[-1] == 4
        assert env.base_env.batch_size == ()


class TestNextObservationDeltaInEnv:
    def test_stored_transition_keeps_the_delta_only(self):
        env = TransformedEnv(PendulumEnv(), NextObservationDelta())
        root = env.reset()
        assert "delta" not in root.keys()
        root["action"] = env.action_spec.rand()
        td, td_ = env.step_and_maybe_reset(root)
        assert td["next", "delta", "observation"].dtype == torch.float16
        assert ("next", "observation") not in td.keys(True)
        assert td_["observation"].dtype == torch.float32 and "delta" not in td_.keys()
        # a plain step keeps the full next observation (as TorchRL)
        td = env.reset()
        td["action"] = env.action_spec.rand()
        assert ("next", "observation") in env.step(td).keys(True)

    def test_rollout_and_fake_tensordict(self):
        env = TransformedEnv(PendulumEnv(), NextObservationDelta())
        r = env.rollout(5)
        assert ("next", "observation") not in r.keys(True)
        torch.testing.assert_close(
            r["next", "delta", "observation"][:-1].float(),
            r["observation"][1:] - r["observation"][:-1],
            atol=2e-3,
            rtol=0,
        )
        fake = env.fake_tensordict()
        assert ("next", "delta", "observation") in fake.keys(True)
        assert ("next", "observation") not in fake.keys(True)
        assert list(env.observation_spec.keys()) == ["observation"]
        check_env_specs(env)


def test_transform_container_is_the_env():
    env = TransformedEnv(PendulumEnv(), RewardSum())
    env.append_transform(StepCounter())
    assert env.transform[0].container is env and env.transform[1].container is env
    assert StepCounter().container is None


class TestSpecLock:
    def test_locked_by_default_setters_still_work(self):
        env = PendulumEnv()
        assert env.is_spec_locked and env.output_spec.is_locked and env.input_spec.is_locked
        with pytest.raises(RuntimeError, match="Cannot modify a locked Composite .*'foo'"):
            env.observation_spec["foo"] = Unbounded(shape=(3,))
        with pytest.raises(RuntimeError, match="locked Composite .*'baz'"):
            env.output_spec["full_observation_spec"]["baz"] = Unbounded(shape=(3,))
        # the env's setters unlock for the assignment (as TorchRL's)
        env.observation_spec = env.observation_spec.clone().set("bar", Unbounded(shape=(3,)))
        assert list(env.observation_spec.keys()) == ["observation", "bar"]
        assert env.observation_spec.is_locked

    def test_unlock_and_relock(self):
        env = PendulumEnv()
        env.set_spec_lock_(False)
        assert not env.is_spec_locked and not env.output_spec.is_locked
        env.observation_spec["foo"] = Unbounded(shape=(3,))
        env.is_spec_locked = True  # settable, as TorchRL's property
        with pytest.raises(RuntimeError, match="'foo2'"):
            env.observation_spec["foo2"] = Unbounded(shape=(3,))
        unlocked = PendulumEnv(spec_locked=False)
        assert not unlocked.is_spec_locked
        unlocked.observation_spec["foo"] = Unbounded(shape=(3,))
        assert "foo" in unlocked.observation_spec.keys()

    def test_transformed_env_specs_locked(self):
        env = TransformedEnv(PendulumEnv(), StepCounter())
        assert env.output_spec.is_locked
        with pytest.raises(RuntimeError, match="'foo'"):
            env.observation_spec["foo"] = Unbounded(shape=(3,))
        env.append_transform(RewardSum())  # recomputed specs are locked again
        assert "episode_reward" in env.observation_spec.keys() and env.output_spec.is_locked


class TestBatchedOptions:
    def test_share_individual_td(self):
        env = SerialEnv(2, PendulumEnv, share_individual_td=True)
        td = env.reset()
        assert isinstance(td, LazyStackedTensorDict) and len(td.tensordicts) == 2
        td["action"] = torch.zeros(2, 1)
        assert isinstance(env.step(td)["next"], LazyStackedTensorDict)
        assert not isinstance(SerialEnv(2, PendulumEnv).reset(), LazyStackedTensorDict)

    def test_pin_memory_needs_cuda(self):
        if torch.cuda.is_available():
            td = SerialEnv(2, PendulumEnv, pin_memory=True).reset()
            assert td["observation"].is_pinned()
        else:
            with pytest.raises(ValueError, match=r"pin_memory=True\) .*CUDA is not available"):
                SerialEnv(2, PendulumEnv, pin_memory=True)

    def test_num_threads_sets_this_process(self):
        before = torch.get_num_threads()
        try:
            SerialEnv(2, PendulumEnv, num_threads=1)
            assert torch.get_num_threads() == 1
        finally:
            torch.set_num_threads(before)

    def test_options_without_effect_warn(self):
        with pytest.warns(UserWarning, match=r"SerialEnv ignores .*num_sub_threads=2"):
            SerialEnv(2, PendulumEnv, num_sub_threads=2)
        with pytest.warns(UserWarning, match=r"ignores .*memmap=True: the buffers are shared"):
            SerialEnv(2, PendulumEnv, memmap=True)
        with pytest.warns(UserWarning, match=r"ParallelEnv ignores .*shared_memory=False"):
            ParallelEnv(2, PendulumEnv, shared_memory=False)
        with pytest.raises(ValueError, match="shutdown_timeout must be a number of seconds"):
            ParallelEnv(2, PendulumEnv, shutdown_timeout=-1)

    @pytest.mark.timeout(60)
    @pytest.mark.parametrize("daemon", [False, True])
    def test_daemon_flag_of_workers(self, daemon):
        env = ParallelEnv(2, PendulumEnv, mp_start_method="fork", daemon=daemon)
        try:
            env.start()
            assert [p.daemon for p in env._pool.procs] == [daemon, daemon]
            assert env.rollout(2).batch_size == (2, 2)
        finally:
            env.close()
        assert env.worker_pids == []

    def test_update_kwargs(self):
        env = SerialEnv(2, PendulumEnv, create_env_kwargs={"run_type_checks": False})
        env.update_kwargs({"run_type_checks": True})
        assert [kw["run_type_checks"] for kw in env.create_env_kwargs] == [True, True]
        env.close()
        env.reset()  # the new sub-envs are built with the updated arguments
        assert [e.run_type_checks for e in env.envs] == [True, True]
        env.update_kwargs([{"run_type_checks": False}, {}])
        assert [kw["run_type_checks"] for kw in env.create_env_kwargs] == [False, True]
        with pytest.raises(ValueError, match="update_kwargs got 3 dicts, expected one per worker"):
            env.update_kwargs([{}, {}, {}])


@pytest.mark.parametrize("batched", [False, True])
def test_step_and_maybe_reset_keeps_the_action_in_the_next_root(batched):
    # TorchRL's step_and_maybe_reset moves the root with exclude_action=False
    env = SerialEnv(2, PendulumEnv) if batched else TransformedEnv(PendulumEnv(), StepCounter())
    td = env.rand_action(env.reset())
    _, root_next = env.step_and_maybe_reset(td)
    assert sorted(root_next.keys()) == sorted(
        ["action", "done", "observation", "terminated", "truncated"]
        + ([] if batched else ["step_count"])
    )
    torch.testing.assert_close(root_next["action"], td["action"])


def test_exclude_transform_inverse():
    from rl.envs.transforms import ExcludeTransform

    td = TensorDict(a=torch.zeros(1), b=torch.zeros(1))
    t = ExcludeTransform("b", inverse=True)
    assert sorted(t(td.clone()).keys()) == ["a", "b"] and sorted(t.inv(td.clone()).keys()) == ["a"]
    seen = []

    class Spy(PendulumEnv):
        def _step(self, tensordict):
            seen.append(sorted(tensordict.keys()))
            return super()._step(tensordict)

    env = TransformedEnv(Spy(), ExcludeTransform("observation", inverse=True))
    assert list(env.observation_spec.keys()) == ["observation"]  # specs unchanged
    r = env.rollout(2)
    assert "observation" in r.keys() and all("observation" not in keys for keys in seen)


def test_cat_tensors_unsqueeze_if_oor():
    from rl.envs.transforms import CatTensors

    # TorchRL 0.14.1's docstring example: the entries lack dim -2, they get one at 0
    t = CatTensors(in_keys=["key1", "key2"], dim=-2, unsqueeze_if_oor=True)
    td = t(TensorDict(key1=torch.zeros(1), key2=torch.ones(1)))
    assert td["observation_vector"].tolist() == [[0.0], [1.0]]
    assert sorted(td.keys()) == ["observation_vector"]
