"""torch.distributed collectors on a local gloo process group (loopback, free ports)."""

from __future__ import annotations

import functools
import gc
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.collectors import Collector
from rl.collectors.distributed import DistributedDataCollector, DistributedSyncDataCollector
from rl.collectors.distributed._common import (
    TRAJ_ID_STRIDE,
    check_frames,
    frames_per_step,
    per_worker,
    policy_weights,
    unique_traj_ids,
)
from rl.envs import CartPoleEnv

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from _collector_helpers import CompilingEnv, busy_compile_pool, live_processes  # noqa: E402

pytestmark = pytest.mark.timeout(90)

cartpole = functools.partial(CartPoleEnv, categorical_action_encoding=True)
cartpole3 = functools.partial(CartPoleEnv, batch_size=[3], categorical_action_encoding=True)


class FailingCartPole(CartPoleEnv):
    """A CartPole whose ``_step`` raises (:meth:`fault`) at its ``fail_at``-th step."""

    def __init__(self, fail_at: int = 15):
        super().__init__(categorical_action_encoding=True)
        self.fail_at, self.count = fail_at, 0

    def _step(self, tensordict):
        self.count += 1
        if self.count >= self.fail_at:
            self.fault()
        return super()._step(tensordict)

    def fault(self):
        raise ValueError(f"simulator exploded at step {self.count}")


class HangingCartPole(FailingCartPole):
    """A CartPole whose ``_step`` blocks for ever (as a deadlock) at its ``fail_at``-th step."""

    def fault(self):
        threading.Event().wait()


class Marked(nn.Module):
    """Pushes towards the side the pole leans to and writes its weight ``w`` as
    ``"marker"``: the batches tell which weights collected them."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))

    def forward(self, obs):
        return (obs[..., 2] > 0).long(), self.w.expand(obs.shape[:-1]).unsqueeze(-1).clone()


def marked_policy():
    return TensorDictModule(Marked(), in_keys=["observation"], out_keys=["action", "marker"])


def _wait_gone(pids, seconds=5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while live_processes(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return live_processes(pids)


@pytest.fixture
def make():
    """Builds collectors and checks that each one leaves no worker or process group."""
    made = []

    def build(cls=DistributedDataCollector, *args, **kwargs):
        collector = cls(*args, **kwargs)
        made.append(collector)
        return collector

    yield build
    for collector in made:
        pids = collector.worker_pids
        collector.shutdown()
        assert _wait_gone(pids) == []
    assert not dist.is_initialized()


def _markers(batch) -> set[float]:
    return set(batch["marker"].flatten().tolist())


class TestDistributedCollector:
    def test_async_exact_frames_same_structure_as_local(self, make):
        collector = make(
            DistributedDataCollector, [cartpole, cartpole], marked_policy(),
            frames_per_batch=20, total_frames=110,
            postproc=lambda td: td.set("seen_by_postproc", torch.ones(td.shape)),
        )  # fmt: skip
        batches = list(collector)
        assert sorted(b.numel() for b in batches) == [10] + [20] * 5  # in arrival order
        assert collector._frames == 110 and len(collector) == 6
        local = Collector(cartpole(), marked_policy(), frames_per_batch=20).next()
        batch = batches[0]
        assert batch.batch_size == local.batch_size
        keys = sorted(local.keys(True, True), key=str)
        assert sorted(batch.exclude("seen_by_postproc").keys(True, True), key=str) == keys
        for key in keys:
            assert (batch[key].dtype, batch[key].shape) == (local[key].dtype, local[key].shape)
        # a batch is one worker's; ids are unique across workers (id * 2 + worker index)
        owners = [set((b["collector", "traj_ids"] % 2).tolist()) for b in batches]
        assert all(len(o) == 1 for o in owners) and set.union(*owners) == {0, 1}

    def test_sync_stacks_one_piece_per_worker(self, make):
        collector = make(
            DistributedDataCollector, cartpole3, None, num_workers=2, sync=True,
            frames_per_batch=36, total_frames=108,
        )  # fmt: skip
        shapes = [tuple(b.shape) for b in collector]
        assert shapes == [(2, 3, 6)] * 3
        assert collector.frames_per_step == {1: 3, 2: 3}

    def test_matches_a_local_collector(self, make):
        collector = make(DistributedDataCollector, cartpole, marked_policy(), frames_per_batch=30,
                         total_frames=90)  # fmt: skip
        local = Collector(cartpole(), marked_policy(), frames_per_batch=30, total_frames=90)
        assert collector.set_seed(7) == local.set_seed(7)
        for remote_batch, local_batch in zip(collector, local, strict=True):
            torch.testing.assert_close(remote_batch.to_dict(), local_batch.to_dict())

    def test_inner_multiprocess_collector(self, make):
        collector = make(
            DistributedDataCollector, cartpole, None, collector_class="sync",
            num_workers_per_collector=2, frames_per_batch=20, total_frames=40,
        )  # fmt: skip
        assert [tuple(b.shape) for b in collector] == [(2, 10), (2, 10)]


class TestWeights:
    def test_sync_batches_after_update_use_new_weights(self, make):
        policy = marked_policy()
        collector = make(DistributedDataCollector, [cartpole, cartpole], policy, sync=True,
                         frames_per_batch=20, total_frames=-1)  # fmt: skip
        assert _markers(collector.next()) == {0.0}
        policy.module.w.data.fill_(1.0)
        assert _markers(collector.next()) == {0.0}  # not sent yet
        collector.update_policy_weights_()
        assert _markers(collector.next()) == {1.0}
        collector.update_policy_weights_({"module.w": torch.tensor(2.0)})  # a state dict
        assert _markers(collector.next()) == {2.0}
        collector.update_policy_weights_(TensorDict(module=TensorDict(w=torch.tensor(3.0))),
                                         worker_ids=[2])  # fmt: skip
        batch = collector.next()
        assert (_markers(batch[0]), _markers(batch[1])) == ({2.0}, {3.0})

    def test_async_batches_after_update_use_new_weights(self, make):
        policy = marked_policy()
        collector = make(DistributedDataCollector, [cartpole, cartpole], policy,
                         frames_per_batch=20, total_frames=-1)  # fmt: skip
        it = iter(collector)

        def owner(batch) -> int:  # the worker index of a batch (ids are id * 2 + index)
            (index,) = set((batch["collector", "traj_ids"] % 2).tolist())
            return index

        first = next(it)
        assert _markers(first) == {0.0}
        policy.module.w.data.fill_(1.0)
        collector.update_policy_weights_()
        after: dict[int, list] = {0: [], 1: []}
        for _ in range(6):
            batch = next(it)
            after[owner(batch)].append(_markers(batch))
        # a batch runs with one set of weights; the worker whose batch we had is released
        # after the update: all its next batches are new; the other one had a batch in
        # flight (old weights): only that one may be old
        released, other = owner(first), 1 - owner(first)
        assert all(m == {1.0} for m in after[released])
        assert all(m == {1.0} for m in after[other][1:])
        assert after[other][:1] in ([{0.0}], [])  # requested before the update

    def test_update_after_each_batch(self, make):
        policy = marked_policy()
        collector = make(DistributedDataCollector, cartpole, policy, frames_per_batch=10,
                         total_frames=50, update_after_each_batch=True)  # fmt: skip
        seen = []
        for i, batch in enumerate(collector):
            seen.append(_markers(batch))
            policy.module.w.data.fill_(float(i + 1))  # what the next batch must use
        assert seen == [{0.0}, {1.0}, {2.0}, {3.0}, {4.0}]

    def test_max_weight_update_interval(self, make):
        policy = marked_policy()
        collector = make(DistributedDataCollector, [cartpole, cartpole], policy, sync=True,
                         frames_per_batch=20, total_frames=100,
                         max_weight_update_interval=1)  # fmt: skip
        seen = []
        for i, batch in enumerate(collector):
            seen.append(_markers(batch))
            policy.module.w.data.fill_(float(i + 1))
        # a worker gets the weights once it collected more than 1 batch with old ones
        assert seen == [{0.0}, {0.0}, {2.0}, {2.0}, {4.0}]

    def test_policy_factory_gets_weights_from_update(self, make):
        collector = make(DistributedDataCollector, cartpole, policy_factory=marked_policy,
                         frames_per_batch=10, total_frames=-1)  # fmt: skip
        assert _markers(collector.next()) == {0.0}
        collector.update_policy_weights_()  # no policy here: nothing to send
        assert _markers(collector.next()) == {0.0}
        learner_policy = marked_policy()
        learner_policy.module.w.data.fill_(5.0)
        collector.update_policy_weights_(learner_policy)
        assert _markers(collector.next()) == {5.0}

    @pytest.mark.parametrize("interval", [1, 2])
    def test_sync_collector_pushes_every_update_interval(self, make, interval):
        policy = marked_policy()
        collector = make(DistributedSyncDataCollector, [cartpole, cartpole], policy,
                         frames_per_batch=20, total_frames=100, update_interval=interval)  # fmt: skip
        seen = []
        for i, batch in enumerate(collector):
            seen.append(_markers(batch))
            policy.module.w.data.fill_(float(i + 1))
        expected = {1: [0, 1, 2, 3, 4], 2: [0, 0, 2, 2, 4]}[interval]
        assert seen == [{float(v)} for v in expected]


class TestFailures:
    @pytest.mark.parametrize("sync", [False, True])
    def test_killed_worker_is_reported_within_seconds(self, make, sync):
        collector = make(DistributedDataCollector, [cartpole, cartpole], None, sync=sync,
                         frames_per_batch=20, total_frames=-1)  # fmt: skip
        pids = collector.worker_pids
        it = iter(collector)
        next(it)
        os.kill(pids[0], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"worker rank 1 \(pid \d+\) died during collect "
                           r"with exit code -9 \(killed by SIGKILL\)"):  # fmt: skip
            for _ in range(1000):
                next(it)
        assert time.monotonic() - start < 10
        assert _wait_gone(pids) == []
        assert not dist.is_initialized()
        with pytest.raises(RuntimeError, match="shut down"):
            collector.next()

    def test_hung_worker_is_reported_within_the_timeout(self, make):
        # a worker that deadlocks (alive, silent) fails the learner's recv after `timeout`
        collector = make(DistributedDataCollector, [HangingCartPole, cartpole], None,
                         sync=True, frames_per_batch=20, total_frames=-1, timeout=5.0)  # fmt: skip
        pids = collector.worker_pids
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"lost worker rank 1 during collect: it died or "
                           r"hung longer than timeout=5.0 s \(.*Timed out"):  # fmt: skip
            for _ in range(100):
                collector.next()
        assert 5.0 <= time.monotonic() - start < 60  # the timeout, not pytest's
        assert _wait_gone(pids) == []
        assert not dist.is_initialized()

    def test_forked_worker_compiles_after_the_parent_compiled(self, make):
        # a forked worker inherits the parent's inductor compile pool without its threads;
        # unless it forgets that pool, its first compile job waits for ever (here: the
        # worker hangs in its first batch until the timeout)
        with busy_compile_pool():
            collector = make(DistributedDataCollector, [CompilingEnv], None,
                             mp_start_method="fork", frames_per_batch=10, total_frames=20,
                             timeout=20.0)  # fmt: skip
            assert [batch.numel() for batch in collector] == [10, 10]

    def test_worker_exception_is_raised_with_traceback(self, make):
        collector = make(DistributedDataCollector, [cartpole, FailingCartPole], None,
                         frames_per_batch=10, total_frames=-1)  # fmt: skip
        with pytest.raises(RuntimeError, match=r"(?s)worker rank 2 raised during collect.*"
                           r"Traceback.*ValueError: simulator exploded at step 15"):  # fmt: skip
            for _ in range(100):
                collector.next()
        assert not dist.is_initialized()

    def test_start_up_error_is_the_local_error(self, make):
        # the distributed collectors keep exact batches: a batch that is not whole env
        # steps is refused (the local Collector rounds it up, as TorchRL)
        with pytest.raises(ValueError, match=r"frames_per_batch=10 gives 10 frames per batch of "
                           r"worker rank 1, not a multiple of its env batch size \(3 frames"):  # fmt: skip
            make(DistributedDataCollector, cartpole3, None, frames_per_batch=10, total_frames=30)
        with pytest.raises(ValueError, match=r"total_frames=100 cannot be collected exactly: it "
                           r"must be a multiple of the frames per step \(2 workers x 3\)"):  # fmt: skip
            make(DistributedDataCollector, cartpole3, None, num_workers=2, sync=True,
                 frames_per_batch=12, total_frames=100)  # fmt: skip
        assert not dist.is_initialized()

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"launcher": "submitit"}, ValueError, "launcher='submitit' is not supported"),
            ({"launcher": "ssh"}, ValueError, r"launcher must be one of \('mp', 'torchrun'\)"),
            ({"slurm_kwargs": {"timeout_min": 5}}, ValueError, "slurm_kwargs configures submitit"),
            ({"backend": "mpi"}, ValueError, r"backend must be one of \('gloo', 'nccl'\)"),
            ({"sync": True, "frames_per_batch": 21}, ValueError, "must be a multiple of the number"),
            ({"update_after_each_batch": True, "max_weight_update_interval": 2}, ValueError,
             "conflict"),
            ({"weight_sync_schemes": {}}, ValueError, "weight_sync_schemes is not supported"),
            ({"collector_class": "bogus"}, ValueError, "collector_class must be"),
            ({"collector_class": dict}, ValueError, "collector_class must be a subclass of an rl "
             "collector or one of"),
            ({"frames_per_batch": 2.5}, TypeError, "frames_per_batch must be an int"),
            ({"num_workers": 3}, ValueError, "num_workers=3 but create_env_fn has 2 entries"),
        ],
    )  # fmt: skip
    def test_bad_arguments(self, kwargs, error, match):
        args = {"frames_per_batch": 20, "total_frames": 40, **kwargs}
        with pytest.raises(error, match=match):
            DistributedDataCollector([cartpole, cartpole], None, **args)
        assert not dist.is_initialized()

    def test_one_process_group_per_process(self, make):
        make(DistributedDataCollector, cartpole, None, frames_per_batch=10)
        with pytest.raises(RuntimeError, match="a torch.distributed process group already exists"):
            DistributedDataCollector(cartpole, None, frames_per_batch=10)

    def test_shutdown_is_clean_and_idempotent(self, make):
        collector = make(DistributedDataCollector, [cartpole, cartpole], None,
                         frames_per_batch=20, total_frames=-1)  # fmt: skip
        pids = collector.worker_pids
        it = iter(collector)
        next(it)  # the other worker is collecting when we shut down
        collector.shutdown()
        collector.shutdown()
        assert _wait_gone(pids) == [] and not dist.is_initialized()
        with pytest.raises(RuntimeError, match="shut down"):
            collector.update_policy_weights_()
        with pytest.raises(NotImplementedError, match="has no state_dict"):
            collector.state_dict()
        with pytest.raises(NotImplementedError, match="has no load_state_dict: .* new collector"):
            collector.load_state_dict({})

    def test_garbage_collection_stops_the_workers(self):
        collector = DistributedDataCollector([cartpole, cartpole], None, frames_per_batch=10)
        pids = collector.worker_pids
        collector.next()
        del collector
        gc.collect()
        assert _wait_gone(pids) == [] and not dist.is_initialized()


class TestCommon:
    """The pieces the torch.distributed and the Ray collectors share."""

    def test_unique_traj_ids(self):
        batch = TensorDict(
            {("collector", "traj_ids"): torch.tensor([[0, 0, 1], [2, 3, 3]])}, [2, 3]
        )
        before = batch["collector", "traj_ids"]
        out = unique_traj_ids(batch.clone(), index=2, num_workers=3)
        assert out["collector", "traj_ids"].tolist() == [[2, 2, 5], [8, 11, 11]]
        # the k-th life of a restarted worker gets its own range
        out = unique_traj_ids(batch.clone(), index=0, num_workers=1, generation=1)
        torch.testing.assert_close(out["collector", "traj_ids"], before + TRAJ_ID_STRIDE)
        # one worker in its first life, or no ids: unchanged
        assert unique_traj_ids(batch, 0, 1)["collector", "traj_ids"] is before
        assert unique_traj_ids(TensorDict({}, [2]), 1, 2).is_empty()

    def test_per_worker_and_policy_weights(self):
        assert per_worker(3, 2, "device") == [3, 3]
        with pytest.raises(ValueError, match=r"device has 3 entries, expected one per actor \(2\)"):
            per_worker([1, 2, 3], 2, "device", "actor")
        module = Marked()
        weights = policy_weights(module)
        assert weights["w"] is not module.w and weights["w"].data_ptr() == module.w.data_ptr()
        from_state = policy_weights({"0.w": torch.ones(())})
        assert from_state["0", "w"].item() == 1.0
        assert policy_weights(nn.ReLU()) is None  # nothing to send
        with pytest.raises(TypeError, match="policy weights must be .* got str"):
            policy_weights("weights")

    def test_frames_per_step_and_check_frames(self):
        collector = Collector(cartpole3(), None, frames_per_batch=12)
        assert frames_per_step(collector) == (3, (3,))
        collector.shutdown()
        check_frames({1: 3, 2: 3}, frames_per_batch=12, sync=False, total_frames=30)
        with pytest.raises(ValueError, match=r"gives 10 frames per batch of worker rank 2, not a "
                           r"multiple of its env batch size \(3 frames per step\)"):  # fmt: skip
            check_frames({1: 2, 2: 3}, frames_per_batch=10, sync=False, total_frames=-1)
        with pytest.raises(ValueError, match="every worker needs the same env batch size"):
            check_frames({1: 2, 2: 4}, frames_per_batch=16, sync=True, total_frames=-1)


def _torchrun_rank(rank: int, world_size: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size))  # fmt: skip
    DistributedDataCollector.run_worker()
    os._exit(0)


def _start_ranks(monkeypatch, world_size: int) -> list:
    """Ranks ``1..world_size-1`` as torchrun would start them; this process is rank 0."""
    with socket.socket() as sock:  # a free port for rank 0's store, as torchrun picks
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_torchrun_rank, args=(r, world_size, port))
             for r in range(1, world_size)]  # fmt: skip
    for proc in procs:
        proc.start()
    for key, value in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0",
                           WORLD_SIZE=str(world_size)).items():  # fmt: skip
        monkeypatch.setenv(key, value)
    return procs


class TestTorchrunLauncher:
    def test_learner_on_rank_0_of_an_existing_launch(self, monkeypatch):
        procs = _start_ranks(monkeypatch, 3)
        policy = marked_policy()
        try:
            collector = DistributedSyncDataCollector(
                cartpole, policy, launcher="torchrun", frames_per_batch=20, total_frames=60
            )
            seen = []
            for i, batch in enumerate(collector):
                seen.append((tuple(batch.shape), _markers(batch)))
                policy.module.w.data.fill_(float(i + 1))
            assert seen == [((2, 10), {0.0}), ((2, 10), {1.0}), ((2, 10), {2.0})]
            collector.shutdown()
            assert not dist.is_initialized()
            for proc in procs:
                proc.join(10)
            assert [proc.exitcode for proc in procs] == [0, 0]
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.kill()

    @pytest.mark.parametrize("sync", [False, True])
    def test_killed_rank_is_reported(self, monkeypatch, sync):
        procs = _start_ranks(monkeypatch, 3)
        try:
            collector = DistributedDataCollector(cartpole, None, launcher="torchrun", sync=sync,
                                                 frames_per_batch=20, total_frames=-1)  # fmt: skip
            collector.next()
            os.kill(procs[0].pid, signal.SIGKILL)
            start = time.monotonic()
            with pytest.raises(RuntimeError, match=r"lost worker rank 1 during collect: it died or hung .*"
                               r"Connection (closed|reset) by peer"):  # fmt: skip
                for _ in range(1000):
                    collector.next()
            assert time.monotonic() - start < 10
            assert not dist.is_initialized()
            procs[1].join(10)
            assert procs[1].exitcode == 0  # the other rank saw the learner go and returned
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.kill()

    def test_needs_torchrun_environment(self, monkeypatch):
        monkeypatch.delenv("MASTER_ADDR", raising=False)
        with pytest.raises(ValueError, match="MASTER_ADDR.* is not set: start the script with"):
            DistributedDataCollector(cartpole, None, launcher="torchrun", frames_per_batch=10)


@pytest.mark.slow
def test_spawn_start_method(make):
    # spawned workers unpickle what they run: importable classes (not this test module's)
    collector = make(DistributedDataCollector, CartPoleEnv, None, mp_start_method="spawn",
                     frames_per_batch=10, total_frames=30)  # fmt: skip
    assert [b.numel() for b in collector] == [10, 10, 10]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("torchrun", [True, False])
def test_collect_torchrun_example(torchrun):
    script = HERE.parents[2] / "examples" / "distributed" / "collect_torchrun.py"
    args = ["--total-frames", "2000", "--frames-per-batch", "200"]
    if torchrun:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "3", str(script), *args]  # fmt: skip
    else:
        cmd = [sys.executable, str(script), "--num-workers", "2", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "frames 2000" in out.stdout
