"""rl.core.workers: worker-process wording, stopping, parent death, Ctrl-C, bounded reads."""

from __future__ import annotations

import doctest
import multiprocessing as mp
import os
import signal
import sys
import time

import pytest

import rl.core.workers
from rl.core.workers import (
    WorkerTimeoutError,
    describe_process,
    die_with_parent,
    exit_description,
    ignore_interrupts,
    kill_after,
    stop_processes,
)

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, forks"),
]

fork = mp.get_context("fork")


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(running(pid) for pid in pids):
        time.sleep(0.02)
    return [pid for pid in pids if running(pid)]


def wait_state(pid: int, state: str, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while describe_process(pid) != f"pid {pid}, {state}":
        assert time.monotonic() < deadline, describe_process(pid)
        time.sleep(0.01)


def sleep_forever() -> None:
    while True:
        time.sleep(0.05)


def ignore_term() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sleep_forever()


@pytest.fixture
def children():
    procs = []
    yield procs
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join(5)


def test_doctests():
    assert doctest.testmod(rl.core.workers).failed == 0


class TestWording:
    @pytest.mark.parametrize(
        ("code", "text"),
        [
            (0, "exit code 0"),
            (3, "exit code 3"),
            (-9, "exit code -9 (killed by SIGKILL)"),
            (-15, "exit code -15 (killed by SIGTERM)"),
            (-999, "exit code -999"),
            (None, "an unknown exit code"),
        ],
    )
    def test_exit_description(self, code, text):
        assert exit_description(code) == text

    def test_describe_process(self, children):
        assert describe_process(os.getpid()) == f"pid {os.getpid()}, running"
        proc = fork.Process(target=sleep_forever)
        proc.start()
        children.append(proc)
        wait_state(proc.pid, "sleeping")
        os.kill(proc.pid, signal.SIGSTOP)
        wait_state(proc.pid, "stopped")
        proc.kill()
        proc.join()
        assert describe_process(proc.pid) == f"pid {proc.pid}"  # gone: no state

    def test_timeout_error_is_both_kinds(self):
        with pytest.raises(RuntimeError, match="worker 1"):
            raise WorkerTimeoutError("worker 1 did not answer")
        with pytest.raises(TimeoutError, match="worker 1"):
            raise WorkerTimeoutError("worker 1 did not answer")


class TestStopProcesses:
    def test_stopped_and_term_ignoring_processes(self, children):
        stopped = fork.Process(target=sleep_forever)
        stubborn = fork.Process(target=ignore_term)
        polite = fork.Process(target=sleep_forever)
        for proc in (stopped, stubborn, polite):
            proc.start()
            children.append(proc)
        time.sleep(0.2)
        os.kill(stopped.pid, signal.SIGSTOP)
        start = time.monotonic()
        stop_processes([stopped, stubborn, polite], grace_s=0.0, kill_after_s=0.5)
        assert time.monotonic() - start < 2.0
        assert stopped.exitcode == -signal.SIGTERM  # SIGCONT let it act on SIGTERM
        assert stubborn.exitcode == -signal.SIGKILL
        assert polite.exitcode == -signal.SIGTERM

    def test_stopped_process_is_not_waited_for(self, children):
        proc = fork.Process(target=sleep_forever)
        proc.start()
        children.append(proc)
        os.kill(proc.pid, signal.SIGSTOP)
        start = time.monotonic()
        stop_processes([proc], grace_s=10.0)
        assert time.monotonic() - start < 1.5
        assert not proc.is_alive()


class TestKillAfter:
    def test_blocked_read_is_ended(self, children):
        parent_end, child_end = fork.Pipe()
        proc = fork.Process(target=sleep_forever)  # holds child_end, never writes
        proc.start()
        children.append(proc)
        child_end.close()  # the worker's end: only the worker holds it now
        os.kill(proc.pid, signal.SIGSTOP)
        wait_state(proc.pid, "stopped")
        start = time.monotonic()
        with kill_after(proc.pid, 0.3) as watch, pytest.raises(EOFError):
            parent_end.recv()
        assert 0.3 <= time.monotonic() - start < 2.0
        assert watch.state == f"pid {proc.pid}, stopped"
        proc.join(5)
        assert proc.exitcode == -signal.SIGKILL
        parent_end.close()

    def test_block_that_ends_in_time(self, children):
        proc = fork.Process(target=sleep_forever)
        proc.start()
        children.append(proc)
        with kill_after(proc.pid, 0.3) as watch:
            pass
        time.sleep(0.5)
        assert watch.state is None and proc.is_alive()


def _middle(conn, use_signal: bool, stop_child: bool) -> None:
    """A parent that starts a worker (which calls ``die_with_parent``), reports its pid,
    then waits to be killed."""
    parent = os.getpid()

    def worker():
        die_with_parent(parent, use_signal)
        sleep_forever()

    child = fork.Process(target=worker)
    child.start()
    time.sleep(0.2)
    if stop_child:
        os.kill(child.pid, signal.SIGSTOP)
    conn.send(child.pid)
    sleep_forever()


class TestDieWithParent:
    @pytest.mark.parametrize(
        ("use_signal", "stop_child"),
        [(True, False), (True, True), (False, False)],
        ids=["signal", "signal-stopped", "watching-thread"],
    )
    def test_worker_exits_with_its_parent(self, children, use_signal, stop_child):
        parent_end, child_end = fork.Pipe()
        middle = fork.Process(target=_middle, args=(child_end, use_signal, stop_child))
        middle.start()
        children.append(middle)
        assert parent_end.poll(10)
        worker_pid = parent_end.recv()
        assert running(worker_pid)
        middle.kill()
        middle.join()
        try:
            assert wait_gone([worker_pid], 3.0) == []
        finally:
            if running(worker_pid):
                os.kill(worker_pid, signal.SIGKILL)

    def test_parent_already_gone(self, children):
        def worker():
            die_with_parent(parent_pid=1)  # not this process's parent: it is "gone"
            sleep_forever()

        proc = fork.Process(target=worker)
        proc.start()
        children.append(proc)
        proc.join(5)
        assert proc.exitcode == 1


def test_ignore_interrupts(children):
    def worker():
        ignore_interrupts()
        sleep_forever()

    proc = fork.Process(target=worker)
    proc.start()
    children.append(proc)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(0.3)
    assert proc.is_alive()


def test_a_forked_child_forgets_the_inherited_inductor_compile_pool():
    """The at-fork hook: the child builds its own pool (the parent's, inherited, has no
    threads); the parent keeps its own."""
    from torch._inductor.async_compile import AsyncCompile

    from rl.core import workers

    parent_pool = AsyncCompile.pool()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a fresh pool, which runs a job
        try:
            fresh = AsyncCompile.pool() is not parent_pool
            ok = fresh and AsyncCompile.submit(lambda: 42).result(timeout=10) == 42
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.close(read)
    os.waitpid(pid, 0)
    assert AsyncCompile.pool() is parent_pool
    workers.forget_inherited_compile_pool()  # called directly: the next pool is new
    assert AsyncCompile.pool() is not parent_pool
    parent_pool.shutdown()
