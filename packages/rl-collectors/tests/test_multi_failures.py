"""Multiprocess collectors under failure: errors reach the parent, no process is left."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rl.collectors import MultiAsyncCollector, MultiSyncCollector
from rl.core.workers import WorkerTimeoutError
from rl.envs import GymEnv, ParallelEnv

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from _collector_helpers import (  # noqa: E402
    CompilingEnv,
    FailingEnv,
    busy_compile_pool,
    cartpole,
    children_of,
    live_processes,
)

pytestmark = pytest.mark.timeout(120)


def _wait_gone(pids, seconds=5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while live_processes(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return live_processes(pids)


def _script(body: str, tmp_path: Path, name: str = "script.py") -> Path:
    path = tmp_path / name
    header = f"import sys\nsys.path.insert(0, {str(HERE)!r})\n"
    path.write_text(header + textwrap.dedent(body))
    return path


def _start(path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _read_pids(proc: subprocess.Popen) -> list[int]:
    line = proc.stdout.readline()
    assert line.startswith("PIDS"), line + proc.stderr.read()
    return [int(p) for p in line.split()[1:]]


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_worker_exception_is_raised_with_traceback(cls):
    collector = cls(
        [lambda: cartpole(1), lambda: FailingEnv(fail_at=15)], None, frames_per_batch=10,
        total_frames=-1,
    )  # fmt: skip
    pids = collector.worker_pids
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"(?s)worker 1 raised during collect.*"
                       r"Traceback.*ValueError: simulator exploded at step 15"):  # fmt: skip
        for _ in collector:
            pass
    assert time.monotonic() - start < 10
    assert _wait_gone(pids) == []
    with pytest.raises(RuntimeError, match="shut down"):
        collector.next()


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_killed_worker_is_reported(cls):
    collector = cls([lambda: cartpole(2)] * 2, None, frames_per_batch=20, total_frames=-1)
    pids = collector.worker_pids
    it = iter(collector)
    next(it)
    os.kill(pids[0], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"worker 0 \(pid \d+\) died .*killed by SIGKILL"):
        for _ in range(1000):
            next(it)
    assert time.monotonic() - start < 5
    assert _wait_gone(pids) == []


def test_shutdown_and_garbage_collection_leave_no_process():
    collector = MultiSyncCollector([lambda: cartpole(2)] * 2, None, frames_per_batch=20)
    pids = collector.worker_pids
    next(iter(collector))
    collector.shutdown()
    assert _wait_gone(pids, 0.5) == []
    collector = MultiAsyncCollector([lambda: cartpole(2)] * 2, None, frames_per_batch=20)
    pids = collector.worker_pids
    it = iter(collector)
    next(it)  # a batch is in flight
    del collector, it
    gc.collect()
    assert _wait_gone(pids) == []


def _run_loop(conn, action: str) -> None:
    """A training process (forked from the test): collects, reports its workers, then
    raises in the loop (``action="raise"``) or loops until a signal."""
    # a fresh interpreter's SIGINT behaviour, whatever an earlier test in this pytest
    # worker left behind (the forked process inherits the worker's handlers)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    collector = MultiSyncCollector([lambda: cartpole(2)] * 2, None, frames_per_batch=20)
    conn.send(collector.worker_pids)
    for i, _ in enumerate(collector):
        if action == "raise" and i == 3:
            raise ValueError("bad loss")


def _trainer(action: str):
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_run_loop, args=(child, action))
    proc.start()
    assert parent.poll(30), "the training process did not start its collector"
    return proc, parent.recv()


def test_exception_in_training_loop_leaves_no_process():
    proc, pids = _trainer("raise")
    proc.join(30)
    assert proc.exitcode == 1
    assert _wait_gone(pids) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupted_or_killed_parent_leaves_no_process(sig):
    proc, pids = _trainer("loop")
    time.sleep(0.3)
    assert len(live_processes(pids)) == 2
    os.kill(proc.pid, sig)
    proc.join(30)
    try:
        assert proc.exitcode == (1 if sig == signal.SIGINT else -signal.SIGKILL)
        assert _wait_gone(pids) == []
    finally:  # a failure must not leave processes that block the test session's exit
        if proc.is_alive():
            proc.kill()
            proc.join(10)
        for pid in live_processes(pids):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow  # spawned workers import torch: minutes on a loaded 2-core machine
@pytest.mark.timeout(900)
def test_script_without_main_guard_is_told_how_to_fix_it(tmp_path):
    path = _script(
        """
        from rl.collectors import MultiSyncCollector
        from rl.envs import PendulumEnv

        collector = MultiSyncCollector(
            [PendulumEnv], None, frames_per_batch=10, total_frames=10, mp_start_method="spawn"
        )
        print("collected", sum(b.numel() for b in collector))
        collector.shutdown()
        """,
        tmp_path,
    )
    proc = _start(path)
    out, err = proc.communicate(timeout=400)
    assert proc.returncode != 0
    assert 'if __name__ == "__main__":' in err and "died during start-up" in err
    # the same script with the guard runs
    guarded = "if __name__ == '__main__':\n" + textwrap.indent(path.read_text(), "    ")
    path.write_text(guarded)
    proc = _start(path)
    out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err
    assert "collected 10" in out


# --------------------------------------------------------------------- hung workers
class LoopingEnv(GymEnv):
    """A CartPole whose ``_step`` spins forever from its ``loop_at``-th step on."""

    def __init__(self, loop_at: int = 5):
        super().__init__("CartPole-v1", categorical_action_encoding=True)
        self.loop_at = loop_at
        self.count = 0

    def _step(self, tensordict):
        self.count += 1
        while self.count >= self.loop_at:
            pass
        return super()._step(tensordict)


def _kill_all(pids) -> None:
    for pid in live_processes(pids):
        os.kill(pid, signal.SIGKILL)


def _hung_match(cls, index: int, pid: int, state: str, batch: int, limit) -> str:
    return (
        rf"^{cls.__name__} worker {index} \(pid {pid}, {state}, collecting batch {batch}\) "
        rf"did not answer within {limit} s; it was killed and all workers shut down "
        r"\(worker_timeout=None lifts the limit\)$"
    )


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_forked_worker_compiles_after_the_parent_compiled(cls):
    # a forked worker inherits the parent's inductor compile pool without its threads;
    # unless it forgets that pool, its first compile job waits for ever (here: the
    # worker hangs in its first batch and is reported after worker_timeout)
    with busy_compile_pool():
        collector = cls([CompilingEnv], None, frames_per_batch=10, total_frames=20,
                        mp_start_method="fork", worker_timeout=20)  # fmt: skip
        try:
            assert [batch.numel() for batch in collector] == [10, 10]
        finally:
            collector.shutdown()


class TestHungWorkers:
    """A worker that answers nothing (stopped, or stuck in ``step``) is killed and reported
    within about ``worker_timeout``; nothing is left running."""

    @pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
    def test_stopped_worker(self, cls):
        collector = cls([lambda: cartpole(1)] * 2, None, frames_per_batch=10, worker_timeout=1.5)
        pids = collector.worker_pids
        try:
            it = iter(collector)
            next(it)
            os.kill(pids[1], signal.SIGSTOP)
            start = time.monotonic()
            with pytest.raises(WorkerTimeoutError) as err:
                while time.monotonic() - start < 10:  # async: worker 0 keeps delivering
                    next(it)
            elapsed = time.monotonic() - start
            assert elapsed < 6.0, elapsed
            # the async collector asked worker 1 for its 2nd batch (while its 1st was
            # read) before it was stopped: the 2nd or 3rd batch is the one it owes
            batch = r"\d+"
            assert re.match(_hung_match(cls, 1, pids[1], "stopped", batch, 1.5), str(err.value))
            assert isinstance(err.value, TimeoutError) and isinstance(err.value, RuntimeError)
            assert live_processes(pids) == []  # killed before the error was raised
            with pytest.raises(RuntimeError, match="shut down"):
                collector.next()
            collector.shutdown()
        finally:
            _kill_all(pids)

    @pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
    def test_looping_worker(self, cls):
        collector = cls(
            [lambda: cartpole(1), lambda: LoopingEnv(loop_at=15)], None, frames_per_batch=10,
            worker_timeout=2,
        )  # fmt: skip
        pids = collector.worker_pids
        try:
            start = time.monotonic()
            # step 15 is in worker 1's 3rd batch of 5 steps (sync), its 2nd of 10 (async)
            batch = 3 if cls is MultiSyncCollector else 2
            with pytest.raises(
                WorkerTimeoutError, match=_hung_match(cls, 1, pids[1], "running", batch, 2)
            ):
                for _ in collector:
                    pass
            # the hang starts within ~0.5 s of the start
            assert time.monotonic() - start < 4.0
            assert live_processes(pids) == []
        finally:
            _kill_all(pids)

    def test_sync_names_the_batch(self):
        collector = MultiSyncCollector(
            [lambda: cartpole(1)] * 2, None, frames_per_batch=10, worker_timeout=1
        )
        pids = collector.worker_pids
        try:
            it = iter(collector)
            for _ in range(3):
                next(it)
            os.kill(pids[0], signal.SIGSTOP)
            with pytest.raises(
                WorkerTimeoutError,
                match=_hung_match(MultiSyncCollector, 0, pids[0], "stopped", 4, 1),
            ):
                next(it)
        finally:
            _kill_all(pids)

    def test_async_does_not_run_on_with_a_hung_worker(self):
        # worker 0 keeps delivering: the hung worker 1 is still reported when it is due
        collector = MultiAsyncCollector(
            [lambda: cartpole(1), lambda: LoopingEnv(loop_at=15)], None, frames_per_batch=10,
            worker_timeout=1.5,
        )  # fmt: skip
        pids = collector.worker_pids
        try:
            start = time.monotonic()
            got = 0
            with pytest.raises(WorkerTimeoutError, match=r"worker 1 \(pid \d+, running, "):
                for _ in collector:
                    got += 1
            assert got > 1 and time.monotonic() - start < 4.0
        finally:
            _kill_all(pids)

    def test_seed_call_times_out(self):
        collector = MultiSyncCollector(
            [lambda: cartpole(1)] * 2, None, frames_per_batch=10, worker_timeout=1
        )
        pids = collector.worker_pids
        try:
            os.kill(pids[1], signal.SIGSTOP)
            with pytest.raises(WorkerTimeoutError, match=r"worker 1 \(pid \d+, stopped, seed\)"):
                collector.set_seed(0)
        finally:
            _kill_all(pids)

    def test_large_message_to_a_stopped_worker(self):
        # a message larger than the pipe's buffer blocks until the worker reads it
        collector = MultiSyncCollector(
            [lambda: cartpole(1)] * 2, None, frames_per_batch=10, worker_timeout=1
        )
        pids = collector.worker_pids
        try:
            state = collector.state_dict()
            state["worker1"]["padding"] = b"x" * 20_000_000
            os.kill(pids[1], signal.SIGSTOP)
            start = time.monotonic()
            with pytest.raises(
                WorkerTimeoutError, match=r"worker 1 \(pid \d+, stopped, load_state_dict\)"
            ):
                collector.load_state_dict(state)
            assert time.monotonic() - start < 5.0
            assert live_processes(pids) == []
        finally:
            _kill_all(pids)

    def test_default_and_bad_worker_timeout(self):
        collector = MultiSyncCollector([lambda: cartpole(1)], None, frames_per_batch=10)
        assert collector.worker_timeout == 60.0
        collector.shutdown()
        for bad in (0, -2.0, True, "10"):
            with pytest.raises(
                ValueError,
                match=f"worker_timeout must be a positive number of seconds or None, got {bad!r}",
            ):
                MultiSyncCollector([lambda: cartpole(1)], None, frames_per_batch=10,
                                   worker_timeout=bad)  # fmt: skip

    def test_shutdown_does_not_wait_for_a_stopped_worker(self):
        collector = MultiAsyncCollector([lambda: cartpole(1)] * 2, None, frames_per_batch=10)
        pids = collector.worker_pids
        try:
            next(iter(collector))
            os.kill(pids[0], signal.SIGSTOP)
            start = time.monotonic()
            collector.shutdown()
            assert time.monotonic() - start < 5.0
            assert live_processes(pids) == []
        finally:
            _kill_all(pids)

    def test_killed_hung_worker_takes_its_env_workers(self):
        # a worker running a ParallelEnv: its env workers die with it (parent-death signal)
        make = lambda: ParallelEnv(2, lambda: cartpole(1), mp_start_method="fork")  # noqa: E731
        collector = MultiSyncCollector([make], None, frames_per_batch=10, worker_timeout=1)
        pids = collector.worker_pids
        env_pids = []
        try:
            it = iter(collector)
            next(it)  # the worker's ParallelEnv starts at its first reset
            env_pids = children_of(pids[0])
            assert len(env_pids) == 2
            os.kill(pids[0], signal.SIGSTOP)
            with pytest.raises(WorkerTimeoutError, match="stopped, collecting batch 2"):
                next(it)
            assert _wait_gone(env_pids, 3.0) == []
        finally:
            _kill_all(pids + env_pids)


# ---------------------------------------------------------- parent killed, Ctrl-C
_PARENT = """
import signal, time
# Ctrl-C as a terminal's process gets it, whatever the test runner's parent ignored (a
# shell's background job starts with SIGINT ignored, which a child would inherit)
signal.signal(signal.SIGINT, signal.default_int_handler)
from _collector_helpers import cartpole, serial_cartpole
from rl.collectors import MultiSyncCollector
from rl.envs import ParallelEnv

if __name__ == "__main__":
    env = ParallelEnv(2, lambda: cartpole(1), mp_start_method="fork")
    env.reset()
    make = lambda: ParallelEnv(2, lambda: cartpole(1), mp_start_method="fork")
    collector = MultiSyncCollector([make, lambda: serial_cartpole(2)], None, frames_per_batch=20)
    next(iter(collector))
    print("PIDS", *env.worker_pids, *collector.worker_pids, flush=True)
    {loop}
"""


@pytest.mark.parametrize("stop", [False, True], ids=["running", "stopped"])
def test_killed_parent_leaves_no_worker(tmp_path, stop):
    path = _script(_PARENT.format(loop="time.sleep(60)"), tmp_path)
    proc = _start(path)
    pids = []
    try:
        pids = _read_pids(proc)
        pids += children_of(pids[2])  # the env workers of the first collector worker
        assert len(live_processes(pids)) == 6
        if stop:  # a stopped worker cannot notice its parent is gone: the kernel kills it
            for pid in (pids[0], pids[2], pids[4]):
                os.kill(pid, signal.SIGSTOP)
        proc.kill()
        proc.wait(10)
        assert _wait_gone(pids, 5.0) == []
    finally:
        proc.kill()
        proc.wait(10)
        _kill_all(pids)


def test_ctrl_c_is_reported_once(tmp_path):
    path = _script(_PARENT.format(loop="for _ in collector:\n        env.rand_step()"), tmp_path)
    # its own process group: SIGINT goes to every process of it, as from a terminal
    proc = subprocess.Popen(
        [sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    pids = []
    try:
        pids = _read_pids(proc)
        pids += children_of(pids[2])
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        start = time.monotonic()
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - start < 6
        assert proc.returncode == -signal.SIGINT  # Python's exit on KeyboardInterrupt
        assert err.count("Traceback") == 1, err
        assert err.count("KeyboardInterrupt") == 1, err
        assert _wait_gone(pids) == []
    finally:
        proc.kill()
        proc.wait(10)
        _kill_all(pids)
