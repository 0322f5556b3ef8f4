"""``pause()``: holding the background collection of ``start()`` (TorchRL's
``MultiCollector.pause``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch

from rl.collectors import AsyncCollector, Collector, MultiAsyncCollector, MultiSyncCollector

sys.path.insert(0, str(Path(__file__).parent))
from _collector_helpers import (  # noqa: E402
    FakeBuffer,
    ReachEnv,
    constant_policy,
    live_processes,
)

pytestmark = pytest.mark.timeout(120)

_CLASSES = ["sync", "async", "single-async"]


def _walk():
    """An episode that never ends: the observation counts the steps taken."""
    return ReachEnv(goal=1e9)


class SlowFailingWalk(ReachEnv):
    """A never-ending walk whose steps take 50 ms and whose 6th step raises."""

    def __init__(self):
        super().__init__(goal=1e9)
        self.count = 0

    def _step(self, tensordict):
        self.count += 1
        time.sleep(0.05)
        if self.count >= 6:
            raise ValueError(f"simulator exploded at step {self.count}")
        return super()._step(tensordict)


def _collector(kind: str, buffer, env_fn=_walk, frames_per_batch: int = 8, **kwargs):
    if kind == "single-async":
        return AsyncCollector(
            env_fn, constant_policy(1.0), frames_per_batch=frames_per_batch,
            replay_buffer=buffer, **kwargs,
        )  # fmt: skip
    cls = MultiSyncCollector if kind == "sync" else MultiAsyncCollector
    return cls(
        [env_fn, env_fn], constant_policy(1.0), frames_per_batch=frames_per_batch,
        replay_buffer=buffer, **kwargs,
    )  # fmt: skip


def _wait_for(predicate, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _walks(buffer: FakeBuffer) -> dict[int, list[float]]:
    """Each trajectory's observations, in the order they reached the buffer."""
    walks: dict[int, list[float]] = {}
    for item in buffer.items:
        ids = item["collector", "traj_ids"].reshape(-1).tolist()
        obs = item["observation"].reshape(-1).tolist()
        for traj, value in zip(ids, obs):
            walks.setdefault(traj, []).append(value)
    return walks


class TestPause:
    @pytest.mark.parametrize("kind", _CLASSES)
    def test_nothing_runs_while_paused_and_collection_resumes(self, kind):
        buffer = FakeBuffer()
        collector = _collector(kind, buffer)
        try:
            collector.start()
            _wait_for(lambda: len(buffer.items) >= 3)
            with collector.pause():
                count = len(buffer.items)
                # every frame the workers collected is in the buffer: each worker's env
                # stands where the last observation written for it ends
                positions = collector.get_distant_attr("env.position")
                assert len(positions) == collector.num_workers
                walks = _walks(buffer)
                assert sorted(float(p.item()) for p in positions) == sorted(
                    w[-1] + 1.0 for w in walks.values()
                )
                state = collector.state_dict()  # the workers answer: they are idle
                assert state["frames"] == len(buffer)
                time.sleep(0.5)
                assert len(buffer.items) == count
                assert collector.get_distant_attr("env.position") == positions
            _wait_for(lambda: len(buffer.items) >= count + 3)
            assert collector.is_running()
        finally:
            collector.async_shutdown(timeout=10)
        # no step was collected and thrown away around the pause: each worker's walk
        # is 0, 1, 2, ... without a gap or a repeat
        walks = _walks(buffer)
        assert len(walks) == collector.num_workers
        for walk in walks.values():
            assert walk == [float(i) for i in range(len(walk))]

    @pytest.mark.parametrize("kind", ["sync", "async"])
    def test_pauses_repeatedly(self, kind):
        buffer = FakeBuffer()
        collector = _collector(kind, buffer)
        try:
            collector.start()
            for _ in range(3):
                count = len(buffer.items)
                _wait_for(lambda c=count: len(buffer.items) > c)
                with collector.pause():
                    held = len(buffer.items)
                    time.sleep(0.1)
                    assert len(buffer.items) == held
        finally:
            collector.async_shutdown(timeout=10)
        frames = sum(item.numel() for item in buffer.items)
        assert frames == len(buffer) and frames % 8 == 0

    def test_an_error_in_the_block_resumes_and_propagates(self):
        buffer = FakeBuffer()
        collector = _collector("async", buffer)
        try:
            collector.start()
            _wait_for(lambda: len(buffer.items) >= 1)
            with pytest.raises(KeyError, match="inside"), collector.pause():
                count = len(buffer.items)
                raise KeyError("inside")
            _wait_for(lambda: len(buffer.items) > count)
            with collector.pause():  # paused again: the state went back to running
                pass
        finally:
            collector.async_shutdown(timeout=10)

    @pytest.mark.parametrize("kind", ["sync", "async"])
    def test_shutdown_inside_the_block_does_not_hang(self, kind):
        buffer = FakeBuffer()
        collector = _collector(kind, buffer)
        pids = collector.worker_pids
        collector.start()
        _wait_for(lambda: len(buffer.items) >= 1)
        with collector.pause():
            collector.async_shutdown(timeout=10)
        assert not collector.is_running()
        assert collector.closed
        _wait_for(lambda: not live_processes(pids))

    def test_misuse_is_refused(self):
        buffer = FakeBuffer()
        collector = _collector("async", buffer)
        try:
            with pytest.raises(RuntimeError, match=r"not collecting in the background: call start"):
                with collector.pause():
                    pass
            collector.start()
            with collector.pause():
                with pytest.raises(RuntimeError, match="MultiAsyncCollector is already paused"):
                    with collector.pause():
                        pass
            collector.async_shutdown(timeout=10, close_env=False)
            with pytest.raises(RuntimeError, match="call start"):
                with collector.pause():
                    pass
        finally:
            collector.shutdown()

    @pytest.mark.parametrize("kind", ["sync", "async"])
    def test_workers_are_asked_only_while_paused(self, kind):
        """The background thread reads the workers' pipes: asking them from another
        thread (state_dict, set_seed, get_distant_attr, ...) waits for pause()."""
        buffer = FakeBuffer()
        collector = _collector(kind, buffer)
        try:
            collector.start()
            _wait_for(lambda: len(buffer.items) >= 1)
            name = type(collector).__name__
            for ask in (
                collector.state_dict,
                lambda: collector.set_seed(1),
                lambda: collector.get_distant_attr("worker_idx"),
                collector.reset,
            ):
                with pytest.raises(RuntimeError, match=f"{name} is collecting in the background"):
                    ask()
            assert collector.stats()["workers"] == 2  # this process's counts: no asking
            with collector.pause():
                assert collector.get_distant_attr("worker_idx") == [0, 1]
            count = len(buffer.items)
            _wait_for(lambda: len(buffer.items) > count)  # still collecting
        finally:
            collector.async_shutdown(timeout=10)

    def test_finished_collection_cannot_be_paused(self):
        buffer = FakeBuffer()
        collector = _collector("sync", buffer, total_frames=16)
        try:
            collector.start()
            _wait_for(lambda: not collector.is_running())
            assert len(buffer) == 16
            with pytest.raises(RuntimeError, match="call start"):
                with collector.pause():
                    pass
        finally:
            collector.shutdown()

    def test_collector_has_no_pause(self):
        # as TorchRL: only the multiprocess collectors pause
        collector = Collector(_walk(), constant_policy(1.0), frames_per_batch=4, replay_buffer=[])
        try:
            with pytest.raises(
                NotImplementedError, match="pause\\(\\) is not implemented for Collector"
            ):
                with collector.pause():
                    pass
        finally:
            collector.shutdown()

    def test_failure_while_pausing_is_raised(self):
        buffer = FakeBuffer()
        collector = _collector("single-async", buffer, env_fn=SlowFailingWalk, frames_per_batch=4)
        try:
            collector.start()
            with pytest.raises(RuntimeError, match="background collection failed") as info:
                with collector.pause():
                    pass
            assert "simulator exploded at step 6" in str(info.value.__cause__)
            assert not collector.is_running()
        finally:
            collector.shutdown()

    @pytest.mark.parametrize("kind", ["sync", "async"])
    def test_trajectories_written_around_a_pause_are_whole(self, kind):
        buffer = FakeBuffer()
        # episodes of 3 steps (goal 3, action 1): every write holds whole ones
        collector = _collector(kind, buffer, env_fn=lambda: ReachEnv(goal=3.0), trajs_per_batch=2)
        try:
            collector.start()
            _wait_for(lambda: len(buffer.items) >= 2)
            with collector.pause():
                count = len(buffer.items)
                time.sleep(0.2)
                assert len(buffer.items) == count
            _wait_for(lambda: len(buffer.items) > count)
        finally:
            collector.async_shutdown(timeout=10)
        for item in buffer.items:
            obs = item["observation"].reshape(-1, 3)
            torch.testing.assert_close(obs, torch.tensor([[0.0, 1.0, 2.0]]).expand_as(obs))
