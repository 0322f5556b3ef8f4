"""Preemption: ``MultiSyncCollector(preemptive_threshold=...)`` and
``Collector(interruptor=...)``."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import pytest
import torch

from rl.collectors import (
    Collector,
    Interruptor,
    MultiAsyncCollector,
    MultiCollector,
    MultiSyncCollector,
)
from rl.envs import PendulumEnv

pytestmark = pytest.mark.timeout(120)

_FORK = mp.get_context("fork")


class _WaitingEnv(PendulumEnv):
    """A Pendulum whose every step waits until ``released`` is set (the slow worker): it
    takes its first step only once the parent has told the workers to stop, so it is
    preempted after exactly that step, whatever the machine's load."""

    def __init__(self, released) -> None:
        super().__init__()
        self.released = released

    def _step(self, tensordict):
        self.released.wait(60)
        return super()._step(tensordict)


class _Watcher:
    """Sets ``released`` once ``interruptor`` says stop (a thread of the test process)."""

    def __init__(self, interruptor: Interruptor, released) -> None:
        self.done = False
        self.thread = threading.Thread(target=self._run, args=(interruptor, released))
        self.thread.start()

    def _run(self, interruptor, released) -> None:
        while not self.done:
            if interruptor.collection_stopped():
                released.set()
                return
            time.sleep(0.001)

    def stop(self) -> None:
        self.done = True
        self.thread.join()


def _first_batch(cat_results):
    """One batch of a fast worker and a waiting one, preempted at threshold 0.5."""
    released = _FORK.Event()
    collector = MultiSyncCollector(
        [PendulumEnv, lambda: _WaitingEnv(released)],
        None,
        frames_per_batch=20,
        total_frames=-1,
        preemptive_threshold=0.5,
        cat_results=cat_results,
        mp_start_method="fork",
    )
    watcher = _Watcher(collector.interruptor, released)
    try:
        batch = next(iter(collector))
    finally:
        watcher.stop()
        collector.shutdown()
    return batch


class TestPreemptiveThreshold:
    def test_slow_worker_is_preempted_stack(self):
        batch = _first_batch("stack")
        assert batch.batch_size == torch.Size([2, 10])  # the shape of an unpreempted batch
        ids = batch["collector", "traj_ids"]
        # worker 0 (fast) delivered its 10 steps: ids 0 * 2 + 0; worker 1 one step
        torch.testing.assert_close(ids[0], torch.zeros(10, dtype=torch.int64))
        torch.testing.assert_close(ids[1], torch.tensor([1] + [-1] * 9))
        mask = batch["collector", "mask"]
        assert mask.dtype == torch.bool
        torch.testing.assert_close(mask, ids != -1)
        assert mask[0].all() and mask[1].tolist() == [True] + [False] * 9
        # the missing steps are zeros; the valid ones are real Pendulum steps
        assert (batch[1, 1:]["observation"] == 0).all()
        assert (batch[1, 1:]["next", "reward"] == 0).all()
        cos, sin = batch[:, 0]["observation"][:, 0], batch[:, 0]["observation"][:, 1]
        torch.testing.assert_close(cos**2 + sin**2, torch.ones(2))
        # the fast worker's steps chain: each root is the previous step's "next"
        torch.testing.assert_close(
            batch[0, 1:]["observation"], batch[0, :-1]["next", "observation"]
        )

    def test_only_valid_frames_count_towards_total_frames(self):
        """The first batch holds 11 valid frames of 20: total_frames=20 asks for more
        batches (TorchRL counts the valid frames) until the valid ones reach it."""
        released = _FORK.Event()
        collector = MultiSyncCollector(
            [PendulumEnv, lambda: _WaitingEnv(released)],
            None,
            frames_per_batch=20,
            total_frames=20,
            preemptive_threshold=0.5,
            cat_results="stack",
            mp_start_method="fork",
        )
        watcher = _Watcher(collector.interruptor, released)
        try:
            batches = [batch.clone() for batch in collector]
        finally:
            watcher.stop()
            collector.shutdown()
        masks = [batch["collector", "mask"] for batch in batches]
        assert int(masks[0].sum()) == 11
        # more batches follow, until the valid frames reach total_frames (their size is
        # what is left); each starts with the flag down: the fast worker's rows are whole
        assert len(batches) >= 2
        assert all(mask[0].all() for mask in masks)
        valid = [int(mask.sum()) for mask in masks]
        assert sum(valid[:-1]) < 20 <= sum(valid)

    def test_slow_worker_is_preempted_cat(self):
        batch = _first_batch(-1)
        # the missing steps are dropped: the fast worker's 10 steps, then the slow one's 1
        assert batch.batch_size == torch.Size([11])
        torch.testing.assert_close(batch["collector", "traj_ids"], torch.tensor([0] * 10 + [1]))
        assert ("collector", "mask") not in batch.keys(True)

    @pytest.mark.parametrize("threshold", [None, 1.0])
    def test_no_preemption_gives_the_batches_of_before(self, threshold):
        def run(**kwargs):
            collector = MultiSyncCollector(
                [PendulumEnv, PendulumEnv], None, frames_per_batch=20, total_frames=40, **kwargs
            )
            try:
                collector.set_seed(7)
                return [batch.clone() for batch in collector], collector.interruptor
            finally:
                collector.shutdown()

        base, _ = run()
        got, interruptor = run(preemptive_threshold=threshold)
        assert interruptor is None  # nothing asked per step
        assert len(got) == len(base) == 2
        for a, b in zip(got, base):
            assert ("collector", "mask") not in a.keys(True)
            torch.testing.assert_close(a, b)

    @pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
    def test_out_of_range_is_rejected(self, bad):
        with pytest.raises(ValueError, match=r"preemptive_threshold must be between 0.0 and 1.0"):
            MultiSyncCollector(
                [PendulumEnv] * 2, None, frames_per_batch=20, preemptive_threshold=bad
            )
        with pytest.raises(ValueError, match=rf"got {bad!r}"):
            MultiAsyncCollector(
                [PendulumEnv] * 2, None, frames_per_batch=20, preemptive_threshold=bad
            )
        with pytest.raises(ValueError, match=rf"preemptive_threshold.*got {bad!r}"):
            MultiCollector(
                [PendulumEnv] * 2,
                None,
                sync=True,
                frames_per_batch=20,
                preemptive_threshold=bad,
            )

    def test_not_a_number_is_rejected(self):
        with pytest.raises(TypeError, match="preemptive_threshold must be a number.*'0.5'"):
            MultiSyncCollector(
                [PendulumEnv] * 2, None, frames_per_batch=20, preemptive_threshold="0.5"
            )


class TestCollectorInterruptor:
    def test_stopped_interruptor_ends_each_batch_after_one_step(self):
        interruptor = Interruptor()
        interruptor.stop_collection()
        torch.manual_seed(0)
        collector = Collector(
            PendulumEnv(), None, frames_per_batch=5, total_frames=10, interruptor=interruptor
        )
        batches = [batch.clone() for batch in collector]
        assert len(batches) == 2  # the frames counted are the batch's size, as TorchRL's
        for batch in batches:
            assert batch.batch_size == torch.Size([5])
            assert batch.names == ["time"]
            torch.testing.assert_close(batch["collector", "traj_ids"], torch.tensor([0] + [-1] * 4))
            assert (batch[1:]["observation"] == 0).all()
        # the second batch goes on from the one step the first took
        torch.testing.assert_close(
            batches[1][0]["observation"], batches[0][0]["next", "observation"]
        )

    def test_replay_buffer_gets_only_the_steps_taken(self):
        """A preempted batch's missing steps (traj id -1, zeros) are not extended into
        the replay buffer: it holds the one step of each batch, as collected."""
        from rl.data import LazyTensorStorage, ReplayBuffer

        interruptor = Interruptor()
        interruptor.stop_collection()
        buffer = ReplayBuffer(storage=LazyTensorStorage(20))
        torch.manual_seed(0)
        collector = Collector(
            PendulumEnv(),
            None,
            frames_per_batch=5,
            total_frames=10,
            interruptor=interruptor,
            replay_buffer=buffer,
        )
        assert [batch for batch in collector] == [None, None]
        assert len(buffer) == 2
        stored = buffer[:2]
        assert stored["collector", "traj_ids"].tolist() == [0, 0]
        assert (stored["observation"].abs().sum(-1) > 0).all()
        torch.testing.assert_close(stored[1]["observation"], stored[0]["next", "observation"])

    def test_running_interruptor_changes_nothing(self):
        def run(interruptor):
            torch.manual_seed(3)
            env = PendulumEnv()
            env.set_seed(3)
            collector = Collector(
                env, None, frames_per_batch=6, total_frames=12, interruptor=interruptor
            )
            return [batch.clone() for batch in collector]

        for a, b in zip(run(Interruptor()), run(None), strict=True):
            torch.testing.assert_close(a, b)


def _stop(interruptor: Interruptor) -> None:
    interruptor.stop_collection()


class TestInterruptor:
    def test_flag_is_shared_with_a_child_process(self):
        interruptor = Interruptor(_FORK)
        assert not interruptor.collection_stopped()
        proc = _FORK.Process(target=_stop, args=(interruptor,))
        proc.start()
        proc.join(30)
        assert proc.exitcode == 0
        assert interruptor.collection_stopped()
        interruptor.start_collection()
        assert not interruptor.collection_stopped()
