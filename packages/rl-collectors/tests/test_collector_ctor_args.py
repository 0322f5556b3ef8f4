"""TorchRL's constructor arguments: compact_obs, no_cuda_sync, BaseCollector's hooks, and
the multiprocess collectors' collector_class, init_fn, update_at_each_batch."""

from __future__ import annotations

import functools
import os

import pytest
import torch
from tensordict.nn import TensorDictModule

from rl.collectors import BaseCollector, Collector, MultiAsyncCollector, MultiSyncCollector
from rl.envs import PendulumEnv, StepCounter


def _env():
    return PendulumEnv().append_transform(StepCounter())


def _collect(**kwargs):
    env = _env()
    env.set_seed(0)
    torch.manual_seed(0)
    collector = Collector(env, None, frames_per_batch=5, total_frames=10, **kwargs)
    batches = [b.clone() for b in collector]
    collector.shutdown()
    return torch.cat(batches, -1)


class TestCompactObs:
    def test_next_observations_dropped_rest_unchanged(self):
        full = _collect()
        compact = _collect(compact_obs=True)
        assert set(compact["next"].keys()) == {"reward", "done", "terminated", "truncated"}
        kept = full.exclude(("next", "observation"), ("next", "step_count"))
        assert (compact == kept).all()
        # the next observation is the following root's (no episode ends in 10 steps)
        torch.testing.assert_close(full["next", "observation"][:-1], compact["observation"][1:])

    def test_no_cuda_sync_collects_the_same_data(self):
        assert (_collect(no_cuda_sync=True) == _collect()).all()

    def test_multi_workers_take_compact_obs(self):
        collector = MultiSyncCollector(
            [_env, _env], None, frames_per_batch=8, total_frames=8, compact_obs=True
        )
        try:
            (batch,) = list(collector)
        finally:
            collector.shutdown()
        assert set(batch["next"].keys()) == {"reward", "done", "terminated", "truncated"}


class TestBaseCollectorHooks:
    def test_init_sets_the_hooks(self):
        class Mine(BaseCollector):
            def _produce(self):
                return None

            def _close(self):
                pass

        pre, post = (lambda: None), (lambda td: None)
        mine = Mine(pre_collect_hook=pre, post_collect_hook=post)
        assert mine.pre_collect_hook is pre and mine.post_collect_hook is post
        assert Mine().pre_collect_hook is None


class Marked(Collector):
    """Writes a "marked" entry into every batch it collects."""

    def rollout(self, steps=None):
        out = super().rollout(steps)
        out.set("marked", torch.full(out.batch_size, 7))
        return out


def _touch(directory):
    with open(os.path.join(directory, f"worker-{os.getpid()}"), "w") as f:
        f.write("ok")


class TestMultiArgs:
    def test_collector_class_runs_in_the_workers(self):
        collector = MultiSyncCollector(
            [PendulumEnv, PendulumEnv], None, frames_per_batch=8, total_frames=8,
            collector_class=Marked,
        )  # fmt: skip
        try:
            (batch,) = list(collector)
        finally:
            collector.shutdown()
        assert (batch["marked"] == 7).all()

    def test_collector_class_must_be_a_collector(self):
        with pytest.raises(TypeError, match="collector_class must be Collector"):
            MultiSyncCollector(
                [PendulumEnv], None, frames_per_batch=8, collector_class=MultiSyncCollector
            )

    def test_init_fn_runs_in_each_worker(self, tmp_path):
        collector = MultiAsyncCollector(
            [PendulumEnv, PendulumEnv], None, frames_per_batch=4, total_frames=8,
            init_fn=functools.partial(_touch, str(tmp_path)), worker_idx=3,
        )  # fmt: skip
        try:
            list(collector)
        finally:
            collector.shutdown()
        assert collector.worker_idx == 3
        files = sorted(p.name for p in tmp_path.iterdir())
        assert len(files) == 2 and str(os.getpid()) not in "".join(files)

    @pytest.mark.parametrize("update", [True, False])
    def test_update_at_each_batch(self, update):
        net = torch.nn.Linear(3, 1)
        with torch.no_grad():
            net.weight.zero_()
            net.bias.fill_(0.5)
        policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
        collector = MultiSyncCollector(
            [PendulumEnv], policy, frames_per_batch=4, total_frames=8,
            update_at_each_batch=update,
        )  # fmt: skip
        try:
            it = iter(collector)
            first = next(it)
            with torch.no_grad():
                net.bias.fill_(1.0)  # in place, no update_policy_weights_() call
            second = next(it)
        finally:
            collector.shutdown()
        assert (first["action"] == 0.5).all()
        assert (second["action"] == (1.0 if update else 0.5)).all()


def test_distributed_sync_collector_spells_out_its_arguments():
    import inspect

    from rl.collectors.distributed import DistributedCollector, DistributedSyncCollector

    params = inspect.signature(DistributedSyncCollector).parameters
    assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in params.values())
    parent = inspect.signature(DistributedCollector).parameters
    # every argument of DistributedCollector but sync, with the same default
    assert set(parent) - set(params) == {"sync"}
    for name, param in params.items():
        if name != "update_interval":  # the sync collector pushes weights every batch
            assert param.default == parent[name].default, name
    assert params["update_interval"].default == 1
    with pytest.raises(TypeError, match="sync"):
        DistributedSyncCollector(PendulumEnv, None, frames_per_batch=8, sync=True)
