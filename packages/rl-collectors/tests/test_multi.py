"""MultiSyncCollector / MultiAsyncCollector: shapes, data, weights, frames."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from tensordict.nn import TensorDictModule

from rl.collectors import (
    Collector,
    MultiAsyncCollector,
    MultiaSyncDataCollector,
    MultiSyncCollector,
    MultiSyncDataCollector,
)
from rl.envs import EnvCreator, GymEnv, PendulumEnv, SerialEnv

sys.path.insert(0, str(Path(__file__).parent))
from _collector_helpers import (  # noqa: E402
    FakeBuffer,
    ReachEnv,
    cartpole,
    constant_policy,
    pole_policy,
)

pytestmark = pytest.mark.timeout(120)


def _pendulum_serial():
    return SerialEnv(3, EnvCreator(lambda: GymEnv("Pendulum-v1")))


def _assert_async_update(it, num_workers: int) -> None:
    """What MultiAsyncCollector guarantees after ``update_policy_weights_``: a worker
    runs a batch with one set of weights, read when it starts the batch. At the update
    each worker has at most one batch in flight (asked before it), which may come with
    the old weights; every batch a worker starts later has the new ones. So, per worker
    (told apart by its trajectory ids, ``id * num_workers + index``), at most its first
    batch after the update is stale, and no batch mixes both weights. How many batches
    each worker delivers depends on the load, so the test does not count on an order."""
    seen: dict[int, list[bool]] = {}
    for _ in range(3 * num_workers):
        batch = next(it)
        action = batch["action"]
        stale = bool(action.eq(0).all())
        assert stale or bool(action.eq(0.5).all()), "a batch mixes two sets of weights"
        workers = (batch["collector", "traj_ids"] % num_workers).unique().tolist()
        assert len(workers) == 1
        seen.setdefault(workers[0], []).append(stale)
    for worker, flags in seen.items():
        assert not any(flags[1:]), f"worker {worker} delivered {flags} (True: old weights)"


class TestShapes:
    def test_seed_tutorial_sync(self):
        collector = MultiSyncDataCollector(
            [_pendulum_serial, _pendulum_serial], None, frames_per_batch=60, total_frames=240
        )
        shapes = [tuple(batch.shape) for batch in collector]
        assert shapes == [(2, 3, 10)] * 4
        collector.shutdown()

    def test_seed_tutorial_async(self):
        collector = MultiaSyncDataCollector(
            [_pendulum_serial, _pendulum_serial], None, frames_per_batch=60, total_frames=240
        )
        batches = list(collector)
        assert [tuple(b.shape) for b in batches] == [(3, 20)] * 4
        ids = torch.cat([b["collector", "traj_ids"].reshape(-1) for b in batches])
        assert set((ids % 2).tolist()) == {0, 1}  # both workers delivered
        collector.shutdown()

    def test_cat_results_and_exact_frames(self):
        collector = MultiSyncCollector(
            [lambda: cartpole(2)] * 2, pole_policy(), frames_per_batch=40, total_frames=100,
            cat_results=-1,
        )  # fmt: skip
        sizes = [tuple(b.shape) for b in collector]
        # 100 frames: two batches of 2 workers x [2, 10], then 2 x [2, 5]
        assert sizes == [(2, 20), (2, 20), (2, 10)]
        collector.shutdown()

    def test_async_exact_frames(self):
        collector = MultiAsyncCollector(
            [lambda: cartpole(2)] * 2, None, frames_per_batch=20, total_frames=70
        )
        frames = [b.numel() for b in collector]
        assert sum(frames) == 70 and sorted(frames) == [10, 20, 20, 20]
        collector.shutdown()

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="multiple of the number of workers"):
            MultiSyncCollector([PendulumEnv] * 2, None, frames_per_batch=7)
        with pytest.raises(ValueError, match="total_frames=0 must be -1"):
            MultiSyncCollector([PendulumEnv] * 2, None, frames_per_batch=8, total_frames=0)

    def test_frames_rounded_up_to_whole_env_steps(self):
        # as TorchRL: 4 frames per worker of 3 envs -> 2 steps (6 frames), with a warning
        with pytest.warns(UserWarning, match="not a multiple of worker 0's env batch size"):
            collector = MultiSyncCollector(
                [lambda: PendulumEnv(batch_size=[3])] * 2, None, frames_per_batch=8,
                total_frames=20,
            )  # fmt: skip
        try:
            assert [b.batch_size for b in collector] == [(2, 3, 2), (2, 3, 2)]
        finally:
            collector.shutdown()
        with pytest.raises(ValueError, match="cat_results applies to MultiSyncCollector"):
            MultiAsyncCollector([PendulumEnv], None, frames_per_batch=8, cat_results=0)


class TestData:
    def test_sync_pieces_equal_single_collectors(self):
        """Worker i's piece is what a Collector over the same env and seed collects."""
        multi = MultiSyncCollector(
            [lambda: cartpole(2)] * 2, pole_policy(), frames_per_batch=40, total_frames=120
        )
        next_seed = multi.set_seed(3)
        batches = torch.cat(list(multi), -1)  # [2 workers, 2 envs, 30]
        multi.shutdown()
        seed = 3
        for worker in range(2):
            single = Collector(cartpole(2), pole_policy(), frames_per_batch=20, total_frames=60)
            seed = single.set_seed(seed)
            ref = torch.cat(list(single), -1)
            piece = batches[worker]
            for key in ref.keys(True, True):
                if key == ("collector", "traj_ids"):
                    assert torch.equal(piece[key], ref[key] * 2 + worker)
                else:
                    torch.testing.assert_close(piece[key], ref[key], msg=str(key))
        assert seed == next_seed

    def test_weights_used_from_next_batch(self):
        net = torch.nn.Linear(3, 1)
        torch.nn.init.zeros_(net.weight)
        torch.nn.init.zeros_(net.bias)
        policy = TensorDictModule(net, ["observation"], ["action"])
        for cls in (MultiSyncCollector, MultiAsyncCollector):
            net.bias.data.fill_(0.0)
            collector = cls(
                [lambda: PendulumEnv(batch_size=[2])] * 2, policy, frames_per_batch=8,
                total_frames=-1,
            )  # fmt: skip
            it = iter(collector)
            first = next(it)
            assert first["action"].eq(0).all()
            net.bias.data.fill_(0.5)  # the workers' copies do not see this...
            collector.update_policy_weights_()  # ...until it is pushed
            if cls is MultiAsyncCollector:
                _assert_async_update(it, num_workers=2)
            else:
                assert next(it)["action"].eq(0.5).all()
                collector.update_policy_weights_({"module.weight": torch.zeros(1, 3),
                                                  "module.bias": torch.full((1,), -1.0)})  # fmt: skip
                assert next(it)["action"].eq(-1.0).all()
            collector.shutdown()

    def test_resume_from_a_weights_only_checkpoint_is_exact(self, tmp_path):
        """Each worker's env state travels as plain data: a new collector loaded from the
        file collects the batches the first one would have collected next."""

        def make():
            collector = MultiSyncCollector(
                [lambda: cartpole(2)] * 2, None, frames_per_batch=40, total_frames=-1
            )
            collector.set_seed(5)
            return collector

        first = make()
        batches = iter(first)
        next(batches)
        torch.save(first.state_dict(), tmp_path / "multi.pt")
        with torch.random.fork_rng():
            expected = [next(batches) for _ in range(3)]
        first.shutdown()
        resumed = make()
        resumed.load_state_dict(torch.load(tmp_path / "multi.pt", weights_only=True))
        got = iter(resumed)
        with torch.random.fork_rng():
            got = [next(got) for _ in range(3)]
        resumed.shutdown()
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        # the episodes do depend on the env's state: a fresh collector differs
        fresh = make()
        other = next(iter(fresh))
        fresh.shutdown()
        assert (other["observation"] != expected[0]["observation"]).any()

    def test_replay_buffer_and_state_dict(self):
        buffer = FakeBuffer()
        collector = MultiSyncCollector(
            [lambda: cartpole(2)] * 2, pole_policy(), frames_per_batch=20, total_frames=40,
            replay_buffer=buffer,
        )  # fmt: skip
        assert list(collector) == [None, None]
        assert [item.batch_size for item in buffer.items] == [torch.Size([20])] * 2
        state = collector.state_dict()
        # TorchRL's layout: one "worker<i>" entry per worker
        assert state["frames"] == 40 and {"worker0", "worker1"} <= set(state)
        assert state["worker1"]["frames"] == 20
        collector.shutdown()
        assert collector.alive() == []


class TestReset:
    @pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
    def test_reset_restarts_the_marked_workers(self, cls):
        collector = cls(
            [lambda: ReachEnv(goal=100.0)] * 2, constant_policy(1.0), frames_per_batch=8,
            total_frames=-1,
        )  # fmt: skip
        try:
            it = iter(collector)
            next(it)
            collector.reset([False, True])
            if cls is MultiSyncCollector:  # 4 steps each; the reset comes with the next batch
                positions = [p.item() for p in collector.get_distant_attr("env.position")]
                assert positions == [4.0, 4.0]
            batch = next(it)
            ids = batch["collector", "traj_ids"]
            obs = batch["observation"]
            if cls is MultiSyncCollector:  # [2 workers, 4 steps]
                assert obs[1].squeeze(-1).tolist() == [0.0, 1.0, 2.0, 3.0]
                assert obs[0].squeeze(-1).tolist() == [4.0, 5.0, 6.0, 7.0]
                assert ids[0].unique().tolist() == [0]  # still its first trajectory
                assert ids[1].unique().tolist() == [3]  # worker 1's second: 1 * 2 + 1
            else:
                # worker 0 goes on from where it stood (8 steps, or 16 with a batch
                # collected ahead and dropped), worker 1 starts again at 0
                worker = int(ids[0]) % 2
                assert obs[0].item() in ((8.0, 16.0) if worker == 0 else (0.0,))
        finally:
            collector.shutdown()

    def test_reset_checks_reset_idx(self):
        collector = MultiSyncCollector([PendulumEnv] * 2, None, frames_per_batch=8)
        try:
            with pytest.raises(
                ValueError, match=r"reset_idx has 3 entries, expected one per worker \(2\)"
            ):
                collector.reset([True, False, True])
        finally:
            collector.shutdown()
