"""The multiprocess collectors' policy version, stats, remote helpers and profiling."""

import json

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.collectors import MultiAsyncCollector, MultiSyncCollector
from rl.envs import PendulumEnv


def linear_policy():
    return TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_policy_version_follows_updates(cls):
    collector = cls(
        [PendulumEnv, PendulumEnv], linear_policy(), frames_per_batch=8, total_frames=-1,
        track_policy_version=True,
    )  # fmt: skip
    try:
        it = iter(collector)
        assert (next(it)["next", "policy_version"] == 0).all()
        collector.update_policy_weights_()
        collector.update_policy_weights_()
        assert collector.policy_version == 2
        # an asynchronous batch already running may still carry the old version, and a
        # worker that read the weights between the two updates carries version 1
        versions = [set(next(it)["policy_version"].unique().tolist()) for _ in range(4)]
        assert versions[-1] == {2}
        assert all(v <= {0, 1, 2} for v in versions)
        assert collector.stats()["policy_version"] == 2
    finally:
        collector.shutdown()


def test_stats_and_remote_helpers():
    collector = MultiSyncCollector(
        [PendulumEnv, PendulumEnv], linear_policy(), frames_per_batch=8, total_frames=16
    )
    try:
        with pytest.raises(ValueError, match="workers must be one of"):
            collector.stats(workers="bogus")
        for _ in collector:
            pass
        stats = collector.stats(workers="both")
        assert stats["frames"] == 16 and stats["batches"] == 2 and stats["completed"]
        assert stats["workers"] == stats["workers_alive"] == 2
        assert stats["worker_0/frames"] == stats["worker_1/frames"] == 8
        assert "frames" not in collector.stats(workers="per_worker")
        json.dumps(stats)
        assert collector.get_distant_attr("worker_idx") == [0, 1]
        assert collector.map_fn(
            "get_distant_attr", list_of_args=[("worker_idx",), ("frames_per_batch",)]
        ) == [0, 4]
        with pytest.raises(ValueError, match="Expected 2 argument entries"):
            collector.map_fn("get_distant_attr", list_of_args=[("worker_idx",)])
    finally:
        collector.shutdown()


def test_profile_one_worker(tmp_path):
    collector = MultiSyncCollector(
        [PendulumEnv, PendulumEnv], linear_policy(), frames_per_batch=8, total_frames=40
    )
    try:
        collector.enable_profile(
            workers=[1], num_rollouts=3, warmup_rollouts=1, activities=["cpu"],
            with_stack=False, save_path=str(tmp_path / "trace_{worker_idx}.json"),
        )  # fmt: skip
        assert collector.profile_config.workers == [1]
        for _ in collector:
            pass
        assert json.loads((tmp_path / "trace_1.json").read_text())["traceEvents"]
        assert not (tmp_path / "trace_0.json").exists()
        collector.disable_profile()
        assert collector.profile_config is None
    finally:
        collector.shutdown()


def test_track_policy_version_must_be_a_bool():
    with pytest.raises(TypeError, match="must be a bool"):
        MultiSyncCollector([PendulumEnv], None, frames_per_batch=4, track_policy_version=object())


def test_policy_factory_workers_take_pushed_weights():
    collector = MultiSyncCollector(
        [PendulumEnv, PendulumEnv], policy_factory=linear_policy, frames_per_batch=8,
        total_frames=-1,
    )  # fmt: skip
    try:
        it = iter(collector)
        next(it)
        # every worker acts with the same weights (the ones shared from here)
        w0, w1 = collector.get_distant_attr("policy.module.weight")
        torch.testing.assert_close(w0, w1, rtol=0, atol=0)
        with pytest.raises(RuntimeError, match="pass the weights"):
            collector.update_policy_weights_()
        zeros = TensorDict.from_module(linear_policy()).data.clone().zero_()
        collector.update_policy_weights_(zeros)
        assert (next(it)["action"] == 0).all()
    finally:
        collector.shutdown()


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"reset_when_done": False}, ValueError, "reset_when_done is deprecated"),
        ({"policy_factory": linear_policy, "policy": None}, None, None),
        ({"policy_factory": linear_policy}, TypeError, "policy_factory cannot be used"),
    ],
)
def test_constructor_checks(kwargs, exc, match):
    kwargs = {"policy": linear_policy(), **kwargs}
    if exc is None:
        MultiSyncCollector([PendulumEnv], frames_per_batch=4, **kwargs).shutdown()
        return
    with pytest.raises(exc, match=match):
        MultiSyncCollector([PendulumEnv], frames_per_batch=4, **kwargs)


def test_a_failing_remote_call_raises_and_the_workers_go_on():
    collector = MultiSyncCollector(
        [PendulumEnv, PendulumEnv], linear_policy(), frames_per_batch=8, total_frames=24
    )
    try:
        batches = iter(collector)
        first = next(batches)
        with pytest.raises(AttributeError, match=r"nope.*worker 0; the workers keep running"):
            collector.get_distant_attr("nope")
        with pytest.raises(AttributeError, match="worker 0"):
            collector.map_fn("no_such_method", list_of_args=[(), ()])
        assert collector.get_distant_attr("worker_idx") == [0, 1]  # still answering
        rest = list(batches)
        assert first.numel() + sum(b.numel() for b in rest) == 24
    finally:
        collector.shutdown()
