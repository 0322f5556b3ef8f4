"""Multiprocess collectors under failure: errors reach the parent, no process is left."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rl.collectors import MultiAsyncCollector, MultiSyncCollector

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from _collector_helpers import FailingEnv, cartpole, live_processes  # noqa: E402

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
