"""AsyncCollector: one collector in one worker process (TorchRL's AsyncCollector)."""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rl.collectors import AsyncCollector, Collector, MultiAsyncCollector
from rl.envs import SerialEnv

sys.path.insert(0, str(Path(__file__).parent))
from _collector_helpers import ReachEnv, children_of, constant_policy, live_processes  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _reach():
    return ReachEnv(goal=3.0)


class TestAsyncCollector:
    def test_is_a_one_worker_multi_async_collector(self):
        collector = AsyncCollector(_reach, constant_policy(1.0), frames_per_batch=4)
        try:
            assert isinstance(collector, MultiAsyncCollector)
            assert collector.num_workers == 1
            assert collector.preemptive_threshold == 1.0
            assert len(collector.worker_pids) == 1
        finally:
            collector.shutdown()

    def test_signature_is_torchrl(self):
        params = inspect.signature(AsyncCollector).parameters
        assert list(params)[:4] == ["create_env_fn", "policy", "policy_factory", "frames_per_batch"]
        assert params["total_frames"].default == -1
        assert params["preemptive_threshold"].default is None
        assert params["num_sub_threads"].default == 1

    def test_batches_match_plain_collector(self):
        policy = constant_policy(0.7)
        plain = Collector(_reach(), policy, frames_per_batch=8, total_frames=24)
        expected = [batch.clone() for batch in plain]
        plain.shutdown()
        collector = AsyncCollector(_reach, policy, frames_per_batch=8, total_frames=24)
        try:
            got = list(collector)
        finally:
            collector.shutdown()
        assert len(got) == len(expected) == 3
        for batch, ref in zip(got, expected, strict=True):
            assert batch.batch_size == ref.batch_size == torch.Size([8])
            assert set(batch.keys(True, True)) == set(ref.keys(True, True))
            for key in ref.keys(True, True):
                torch.testing.assert_close(batch[key], ref[key], msg=f"key {key}")
        # the walk of a constant 0.7 ends every 5 steps (ceil(3 / 0.7))
        flat = torch.cat(got)
        assert flat["next", "done"].squeeze(-1).nonzero().squeeze(-1).tolist() == [4, 9, 14, 19]

    def test_update_policy_weights_reaches_worker(self):
        policy = constant_policy(0.5)
        collector = AsyncCollector(_reach, policy, frames_per_batch=6)
        try:
            it = iter(collector)
            first = next(it)
            assert torch.all(first["action"] == 0.5)
            with torch.no_grad():
                policy.module.bias.fill_(1.5)
            collector.update_policy_weights_()
            # the worker may have started its next batch with the old weights already:
            # the one after it acts with the new ones
            next(it)
            assert torch.all(next(it)["action"] == 1.5)
            weights = TensorDict.from_module(constant_policy(0.25)).data
            collector.update_policy_weights_(weights)
            next(it)
            assert torch.all(next(it)["action"] == 0.25)
        finally:
            collector.shutdown()

    def test_set_seed_mid_run_replays_with_new_trajectory_ids(self):
        """``set_seed`` between two batches drops the batch the worker collected ahead,
        re-seeds and resets its env (as TorchRL): the next batch replays the first one. Its
        trajectories are new ones, so their ids are new too (TorchRL shifts the running
        ids back to start at 0 instead, reusing the ids of the first batch's
        trajectories; rl keeps every trajectory's id unique)."""
        collector = AsyncCollector(
            lambda: SerialEnv(2, lambda: ReachEnv(goal=3.0)),
            constant_policy(1.0),
            frames_per_batch=10,
            total_frames=-1,
        )
        try:
            collector.set_seed(100)
            it = iter(collector)
            first = next(it)
            collector.set_seed(100)
            second = next(it)
        finally:
            collector.shutdown()
        key = ("collector", "traj_ids")
        for name in first.keys(True, True):
            if name != key:
                torch.testing.assert_close(second[name], first[name], msg=str(name))
        # 2 envs x 5 steps of 3-step episodes: ids [[0, 0, 0, 2, 2], [1, 1, 1, 3, 3]]
        assert first[key].tolist() == [[0, 0, 0, 2, 2], [1, 1, 1, 3, 3]]
        # the batch collected ahead (and dropped) started trajectories 4 to 7; the
        # reset ended those running, so the replay starts at id 8
        assert (second[key] - first[key]).unique().tolist() == [8]

    def test_shutdown_leaves_no_process(self):
        collector = AsyncCollector(_reach, constant_policy(1.0), frames_per_batch=4)
        pids = collector.worker_pids
        assert live_processes(pids) == pids
        next(iter(collector))  # a batch in flight while shutting down
        collector.shutdown()
        assert live_processes(pids) == []
        assert not set(pids) & set(children_of(os.getpid()))
        collector.shutdown()  # idempotent

    def test_state_dict_round_trip(self):
        policy = constant_policy(0.7)
        collector = AsyncCollector(_reach, policy, frames_per_batch=8, total_frames=32)
        try:
            it = iter(collector)
            next(it), next(it)
            state = collector.state_dict()
        finally:
            collector.shutdown()
        assert state["frames"] == 16 and state["exact"] is False
        assert "worker0" in state
        restored = AsyncCollector(_reach, constant_policy(0.0), frames_per_batch=8, total_frames=32)
        try:
            restored.load_state_dict(state)
            assert restored.state_dict()["frames"] == 16
            rest = list(restored)  # the 16 frames left
            assert [batch.numel() for batch in rest] == [8, 8]
            # the worker's policy weights came back with its state
            assert all(torch.all(batch["action"] == 0.7) for batch in rest)
        finally:
            restored.shutdown()

    def test_create_env_kwargs(self):
        collector = AsyncCollector(
            ReachEnv, constant_policy(1.0), frames_per_batch=4, create_env_kwargs={"goal": 2.0}
        )
        try:
            batch = next(iter(collector))
        finally:
            collector.shutdown()
        assert batch["next", "done"].squeeze(-1).tolist() == [False, True, False, True]

    def test_bad_arguments(self):
        with pytest.raises(TypeError, match="one env factory, got a list of 2"):
            AsyncCollector([_reach, _reach], None, frames_per_batch=4)
        with pytest.raises(TypeError, match="no num_workers argument"):
            AsyncCollector(_reach, None, frames_per_batch=4, num_workers=2)
        with pytest.raises(ValueError, match="between 0.0 and 1.0, got 1.5"):
            AsyncCollector(_reach, None, frames_per_batch=4, preemptive_threshold=1.5)
        with pytest.raises(ValueError, match="create_env_kwargs has 2 entries"):
            AsyncCollector(_reach, None, frames_per_batch=4, create_env_kwargs=[{}, {}])
