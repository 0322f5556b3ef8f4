"""Collector progress and introspection: stats(), the policy version, profiling, the
remote helpers (worker_idx, get_distant_attr, map_fn), fake_tensordict, return_same_td."""

import json

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.collectors import (
    BaseCollector,
    Collector,
    MultiSyncCollector,
    ProfileConfig,
    RandomPolicy,
)
from rl.envs import InitTracker, PendulumEnv, TransformedEnv


def linear_policy():
    torch.manual_seed(0)
    return TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])


def pendulum_collector(**kwargs):
    kwargs.setdefault("frames_per_batch", 8)
    kwargs.setdefault("total_frames", 24)
    return Collector(PendulumEnv, kwargs.pop("policy", linear_policy()), **kwargs)


class TestStats:
    def test_counts_frames_and_batches(self):
        collector = pendulum_collector()
        try:
            stats = collector.stats()
            assert stats == {
                "frames": 0,
                "batches": 0,
                "total_frames": 24,
                "completed": False,
                "requested_frames_per_batch": 8,
            }
            seen = [(collector.stats()["frames"], collector.stats()["batches"]) for _ in collector]
            assert seen == [(8, 1), (16, 2), (24, 3)]
            assert collector.stats()["completed"] is True
            assert json.loads(json.dumps(collector.stats()))["frames"] == 24
        finally:
            collector.shutdown()

    def test_endless_collector_has_no_total(self):
        collector = pendulum_collector(total_frames=-1)
        try:
            assert "total_frames" not in collector.stats()
            assert "completed" not in collector.stats()
        finally:
            collector.shutdown()


class TestPolicyVersion:
    def test_bumps_once_per_update(self):
        collector = pendulum_collector(total_frames=-1, track_policy_version=True)
        try:
            it = iter(collector)
            first = next(it)
            assert first["policy_version"].dtype == torch.int64
            assert first["next", "policy_version"].shape == first.batch_size
            assert (first["next", "policy_version"] == 0).all()
            assert (next(it)["next", "policy_version"] == 0).all()
            collector.update_policy_weights_()
            assert (next(it)["next", "policy_version"] == 1).all()
            collector.update_policy_weights_()
            collector.update_policy_weights_()
            assert (next(it)["policy_version"] == 3).all()
            assert collector.policy_version == collector.get_policy_version() == 3
            assert collector.stats()["policy_version"] == 3
        finally:
            collector.shutdown()

    def test_restored_from_state_dict(self):
        collector = pendulum_collector(track_policy_version=True)
        collector.update_policy_weights_()
        collector.update_policy_weights_()
        state = collector.state_dict()
        collector.shutdown()
        restored = pendulum_collector(track_policy_version=True)
        try:
            restored.load_state_dict(state)
            assert restored.policy_version == 2
            restored.update_policy_weights_()
            assert restored.policy_version == 3
        finally:
            restored.shutdown()

    def test_off_by_default(self):
        collector = pendulum_collector()
        try:
            assert collector.policy_version is None
            assert "policy_version" not in next(iter(collector)).keys()
            assert "policy_version" not in collector.stats()
        finally:
            collector.shutdown()

    def test_custom_tracker(self):
        class Tracker:
            version = 10

            def increment_version(self):
                self.version += 5

        collector = pendulum_collector(track_policy_version=Tracker())
        try:
            collector.update_policy_weights_()
            assert (next(iter(collector))["policy_version"] == 15).all()
        finally:
            collector.shutdown()

    def test_bad_tracker(self):
        with pytest.raises(TypeError, match="track_policy_version must be a bool"):
            pendulum_collector(track_policy_version="yes")


class TestProfile:
    def test_config_checks(self):
        with pytest.raises(ValueError, match=r"num_rollouts \(2\) must be greater"):
            ProfileConfig(num_rollouts=2, warmup_rollouts=2)
        with pytest.raises(ValueError, match="warmup_rollouts must be >= 0"):
            ProfileConfig(num_rollouts=5, warmup_rollouts=-1)
        config = ProfileConfig(save_path="t/w{worker_idx}.json", activities=["cpu", "tpu"])
        assert str(config.get_save_path(3)) == "t/w3.json"
        assert str(ProfileConfig().get_save_path(1)) == "collector_profile_1.json"
        assert config.get_activities() == [torch.profiler.ProfilerActivity.CPU]

    def test_trace_written_and_hook_restored(self, tmp_path):
        seen = []
        collector = pendulum_collector(total_frames=40, post_collect_hook=seen.append)
        try:
            collector.enable_profile(
                num_rollouts=3,
                warmup_rollouts=1,
                save_path=str(tmp_path / "trace_{worker_idx}.json"),
                activities=["cpu"],
                with_stack=False,
            )
            assert collector.profile_config.num_rollouts == 3
            assert collector.post_collect_hook is not seen.append
            batches = sum(1 for _ in collector)
            assert batches > 3 and len(seen) == batches  # the user's hook ran at every batch
            trace = json.loads((tmp_path / "trace_0.json").read_text())
            assert trace["traceEvents"]
            collector.disable_profile()
            assert collector.profile_config is None
            assert collector.post_collect_hook == seen.append
        finally:
            collector.shutdown()

    def test_refused_after_iteration(self):
        collector = pendulum_collector()
        try:
            next(iter(collector))
            with pytest.raises(RuntimeError, match="Cannot enable profiling after iteration"):
                collector.enable_profile()
        finally:
            collector.shutdown()


class TestRemoteHelpers:
    def test_worker_idx_and_map_fn(self):
        collector = pendulum_collector(worker_idx=5)
        try:
            assert collector.worker_idx == 5
            assert collector.get_distant_attr("worker_idx") == 5
            assert collector.get_distant_attr("env.batch_size") == torch.Size([])
            assert collector.map_fn(
                "get_distant_attr", list_of_args=[("worker_idx",), ("frames_per_batch",)]
            ) == [5, 8]
            assert collector.cascade_execute("stats")["frames"] == 0
            with pytest.raises(ValueError, match="same length"):
                collector.map_fn("stats", list_of_args=[()], list_of_kwargs=[{}, {}])
            with pytest.raises(ValueError, match="not callable"):
                collector.cascade_execute("frames_per_batch", 1)
        finally:
            collector.shutdown()

    def test_item_paths(self):
        collector = pendulum_collector()
        try:
            collector.table = {"a": [10, 20]}
            assert collector.get_distant_attr("table['a'][1]") == 20
        finally:
            collector.shutdown()

    def test_base_collector_alias(self):
        assert issubclass(Collector, BaseCollector)
        assert issubclass(MultiSyncCollector, BaseCollector)
        with pytest.raises(RuntimeError, match="No weight updater"):
            BaseCollector._maybe_fallback_update(object(), TensorDict())


class TestFakeTensordict:
    def test_matches_a_real_batch(self):
        def make_env():
            return TransformedEnv(PendulumEnv(), InitTracker())

        collector = Collector(
            make_env, linear_policy(), frames_per_batch=12, total_frames=12,
            track_policy_version=True,
        )  # fmt: skip
        try:
            fake = collector.fake_tensordict()
            real = next(iter(collector))
            assert fake.batch_size == real.batch_size == torch.Size([12])
            assert sorted(map(str, fake.keys(True, True))) == sorted(
                map(str, real.keys(True, True))
            )
            for key, value in fake.items(True, True):
                assert value.dtype == real.get(key).dtype, key
                assert not value.any(), key
        finally:
            collector.shutdown()

    def test_set_truncated_marks_last_step(self):
        collector = pendulum_collector(set_truncated=True)
        try:
            fake = collector.fake_tensordict()
            assert fake["next", "truncated"][:, 0].tolist() == [False] * 7 + [True]
            assert fake["next", "done"][-1].item()
        finally:
            collector.shutdown()


class TestReturnSameTd:
    def test_one_tensordict_overwritten(self):
        collector = pendulum_collector(return_same_td=True)
        try:
            it = iter(collector)
            first = next(it)
            obs = first["observation"].clone()
            second = next(it)
            assert second is first
            assert not torch.equal(second["observation"], obs)
        finally:
            collector.shutdown()

    def test_default_gives_fresh_batches(self):
        collector = pendulum_collector()
        try:
            it = iter(collector)
            assert next(it) is not next(it)
        finally:
            collector.shutdown()

    def test_refused_with_a_replay_buffer(self):
        with pytest.raises(TypeError, match="return_same_td must be False"):
            pendulum_collector(return_same_td=True, replay_buffer=[])


class TestConstructorOptions:
    def test_reset_when_done_false_refused(self):
        with pytest.raises(ValueError, match="reset_when_done is deprecated"):
            pendulum_collector(reset_when_done=False)

    def test_policy_factory(self):
        collector = pendulum_collector(policy=None, policy_factory=linear_policy)
        try:
            assert isinstance(collector.policy, TensorDictModule)
            expected = linear_policy()(next(iter(collector)).exclude("action"))["action"]
        finally:
            collector.shutdown()
        assert expected.shape == (8, 1)
        with pytest.raises(TypeError, match="policy_factory cannot be used with policy"):
            pendulum_collector(policy_factory=linear_policy)

    def test_random_policy_takes_the_env_spec(self):
        class LazyRandom:
            action_spec = None

            def set_action_spec_from_env(self, env):
                self.action_spec = env.full_action_spec

            def __call__(self, td):
                return td.update(self.action_spec.rand())

        policy = LazyRandom()
        collector = Collector(PendulumEnv(), policy, frames_per_batch=4, total_frames=4)
        try:
            assert policy.action_spec is not None
            batch = next(iter(collector))
            assert batch["action"].shape == (4, 1)
            assert (batch["action"].abs() <= 2.0).all()
        finally:
            collector.shutdown()

    def test_random_policy_exported(self):
        from rl.envs import RandomPolicy as EnvsRandomPolicy

        assert RandomPolicy is EnvsRandomPolicy
