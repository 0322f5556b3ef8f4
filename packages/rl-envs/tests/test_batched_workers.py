"""ParallelEnv worker processes: failures are reported, nothing hangs, nothing is orphaned."""

from __future__ import annotations

import functools
import gc
import multiprocessing as mp
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rl.core.workers import WorkerTimeoutError
from rl.envs import ParallelEnv

sys.path.insert(0, str(Path(__file__).parent))
from _batched_factories import (  # noqa: E402
    CounterEnv,
    RaisingEnv,
    WideCounterEnv,
    failing_factory,
    not_an_env,
)


def pid_running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids, timeout=5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if pid_running(pid)]
        if not alive:
            return []
        time.sleep(0.05)
    return alive


def kill_all(pids) -> None:
    """SIGKILL what a failed test left running (so that it does not outlive the session)."""
    for pid in pids:
        if pid_running(pid):
            os.kill(pid, signal.SIGKILL)


def ones(td):
    return td.set("action", torch.ones(*td.batch_size, 1))


class TestWorkerFailures:
    def test_worker_exception_reported_with_traceback(self):
        env = ParallelEnv(
            2, [CounterEnv, functools.partial(RaisingEnv, fail_at=2)], mp_start_method="fork"
        )
        td = env.reset()
        env.step(ones(td))
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="ParallelEnv worker 1 raised during step") as err:
            env.step(ones(td))
        assert time.monotonic() - start < 5
        assert "ValueError: boom at step 2" in str(err.value)
        assert "_batched_factories.py" in str(err.value)  # the worker's traceback
        # the env stays usable: the other worker answered, the failed one is alive
        out = env.step(ones(env.reset()))
        assert out["next", "observation"][:, 0].tolist() == [1.0, 1.0]
        pids = env.worker_pids
        env.close()
        assert wait_gone(pids) == []

    def test_env_creation_failure(self):
        before = set(mp.active_children())
        env = ParallelEnv(2, [CounterEnv, failing_factory], mp_start_method="fork")
        with pytest.raises(RuntimeError, match="worker 1 raised during start-up") as err:
            env.reset()
        assert "OSError: cannot open the simulator" in str(err.value)
        assert set(mp.active_children()) <= before

    def test_different_specs_across_workers(self):
        env = ParallelEnv(2, [CounterEnv, WideCounterEnv], mp_start_method="fork")
        with pytest.raises(RuntimeError, match=r"sub-env 1 declares 'observation' with shape"):
            env.reset()

    def test_factory_returning_non_env(self):
        with pytest.raises(TypeError, match="must return an rl.envs.EnvBase, got object"):
            ParallelEnv(2, not_an_env)

    def test_unpicklable_factory_for_spawn(self):
        lock = threading.Lock()
        with pytest.raises(TypeError, match="cannot pickle the env factory"):
            ParallelEnv(1, lambda: (lock, CounterEnv())[1], mp_start_method="spawn")
        # fork does not pickle the factory
        env = ParallelEnv(1, lambda: (lock, CounterEnv())[1], mp_start_method="fork")
        assert env.reset()["observation"].shape == (1, 3)
        env.close()

    @pytest.mark.parametrize("method", ["spawn", "fork"])
    def test_killed_worker_reported_quickly(self, method):
        env = ParallelEnv(2, CounterEnv, mp_start_method=method)
        td = env.reset()
        pids = env.worker_pids
        os.kill(pids[1], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(
            RuntimeError,
            match=rf"worker 1 \(pid {pids[1]}\) died during step with exit code -9 "
            r"\(killed by SIGKILL\)",
        ):
            env.step(ones(td))
        assert time.monotonic() - start < 5
        assert wait_gone(pids) == []  # the other workers were shut down
        with pytest.raises(RuntimeError, match=r"no running workers .* call reset\(\)"):
            env.step(ones(td))
        if method == "fork":  # (a spawned restart would only re-test the slow start-up)
            td = env.reset()  # starts new workers
            assert env.worker_pids and not set(env.worker_pids) & set(pids)
            assert env.step(ones(td))["next", "observation"][:, 0].tolist() == [1.0, 1.0]
        env.close()

    def test_worker_killed_while_idle_is_reported_at_reset(self):
        env = ParallelEnv(2, CounterEnv, mp_start_method="fork")
        env.reset()
        os.kill(env.worker_pids[0], signal.SIGKILL)
        # wait until the death shows on the parent's socket (the process can look dead a
        # moment before its sockets are closed)
        assert select.select([env._pool.fds[0]], [], [], 5)[0]
        with pytest.raises(RuntimeError, match="worker 0 .* died during reset"):
            env.reset(TensorDict(_reset=torch.tensor([[False], [True]]), batch_size=[2]))
        env.close()

    def test_interrupted_wait_stops_the_workers(self):
        from _batched_factories import SlowEnv

        env = ParallelEnv(2, functools.partial(SlowEnv, delay=1.0), mp_start_method="fork")
        td = env.reset()
        pids = env.worker_pids

        def interrupt(signum, frame):
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(KeyboardInterrupt):
                env.step(ones(td))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        # the pending answers would shift every later answer: the workers are stopped
        assert wait_gone(pids) == []
        with pytest.raises(RuntimeError, match="no running workers"):
            env.step(ones(td))
        env.close()

    def test_hung_worker_times_out(self):
        from _batched_factories import SlowEnv

        # worker 1 sleeps 30 s a step: a stand-in for a sub-env stuck in a loop
        env = ParallelEnv(
            2,
            [CounterEnv, functools.partial(SlowEnv, delay=30.0)],
            mp_start_method="fork",
            timeout=0.5,
        )
        td = env.reset()
        pids = env.worker_pids
        start = time.monotonic()
        with pytest.raises(
            WorkerTimeoutError,
            match=rf"ParallelEnv worker 1 \(pid {pids[1]}, sleeping\) did not answer within "
            r"0.5 s during step; it was killed and all workers shut down",
        ):
            env.step(ones(td))
        assert time.monotonic() - start < 5
        assert wait_gone(pids) == []
        # reset starts new workers; the env is usable again
        td = env.reset()
        assert td["observation"].shape[0] == 2
        env.close()

    @pytest.mark.parametrize("bad", [0, -1.0, True, "5"])
    def test_timeout_must_be_positive(self, bad):
        with pytest.raises(
            ValueError, match=f"timeout must be a positive number of seconds or None, got {bad!r}"
        ):
            ParallelEnv(2, CounterEnv, timeout=bad)


class TestNoOrphans:
    def test_close(self):
        env = ParallelEnv(2, CounterEnv, mp_start_method="fork")
        env.reset()
        pids = env.worker_pids
        assert all(pid_running(pid) for pid in pids)
        env.close()
        env.close()  # idempotent
        assert wait_gone(pids, timeout=0.1) == []
        assert env.worker_pids == [] and env.is_closed
        assert not [p for p in mp.active_children() if p.pid in pids]

    def test_garbage_collection(self):
        env = ParallelEnv(2, CounterEnv, mp_start_method="fork")
        env.reset()
        pids = env.worker_pids
        del env
        gc.collect()
        assert wait_gone(pids) == []

    @pytest.mark.parametrize("stopped", [False, True], ids=["running", "stopped"])
    def test_workers_exit_when_parent_is_killed(self, stopped):
        script = textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from _batched_factories import CounterEnv
            from rl.envs import ParallelEnv
            env = ParallelEnv(2, CounterEnv, mp_start_method="fork")
            env.reset()
            print(*env.worker_pids, flush=True)
            time.sleep(60)
            """
        )
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        pids = []
        try:
            pids = [int(pid) for pid in proc.stdout.readline().split()]
            assert len(pids) == 2 and all(pid_running(pid) for pid in pids)
            if stopped:  # a stopped worker cannot notice: the kernel kills it
                os.kill(pids[1], signal.SIGSTOP)
            proc.kill()
            proc.wait()
            assert wait_gone(pids, timeout=5) == []
        finally:
            proc.kill()
            proc.wait()
            kill_all(pids)


class LoopEnv(CounterEnv):
    """A ``CounterEnv`` whose ``_step`` spins forever from step ``loop_at`` on."""

    def __init__(self, loop_at: int = 2):
        super().__init__()
        self.loop_at = loop_at
        self.calls = 0

    def _step(self, tensordict):
        self.calls += 1
        while self.calls >= self.loop_at:
            pass
        return super()._step(tensordict)


def hang_in_worker(parent_pid: int):
    """A ``CounterEnv`` in ``parent_pid``, a factory that never returns anywhere else."""
    while os.getpid() != parent_pid:
        time.sleep(0.05)
    return CounterEnv()


class TestHungWorkers:
    """A worker that answers nothing (stopped, or stuck in ``step``) is reported and killed."""

    def test_default_timeout(self):
        assert ParallelEnv(2, CounterEnv).timeout == 30.0

    def test_stopped_worker(self):
        env = ParallelEnv(3, CounterEnv, mp_start_method="fork", timeout=1.5)
        td = env.reset()
        pids = env.worker_pids
        try:
            os.kill(pids[1], signal.SIGSTOP)
            start = time.monotonic()
            with pytest.raises(
                WorkerTimeoutError,
                match=rf"^ParallelEnv worker 1 \(pid {pids[1]}, stopped\) did not answer "
                r"within 1.5 s during step; it was killed and all workers shut down",
            ) as err:
                env.step(ones(td))
            elapsed = time.monotonic() - start
            assert 1.5 <= elapsed < 4.5, elapsed
            assert isinstance(err.value, TimeoutError) and isinstance(err.value, RuntimeError)
            assert wait_gone(pids, timeout=0.1) == []  # gone when the error is raised
            start = time.monotonic()
            env.close()
            assert time.monotonic() - start < 0.5
        finally:
            kill_all(pids)

    @pytest.mark.parametrize("op", ["step", "step_and_maybe_reset"])
    def test_looping_step(self, op):
        env = ParallelEnv(
            2, [CounterEnv, functools.partial(LoopEnv, loop_at=2)],
            mp_start_method="fork", timeout=2,
        )  # fmt: skip
        td = env.reset()
        pids = env.worker_pids
        try:
            env.step(ones(td))
            start = time.monotonic()
            with pytest.raises(
                WorkerTimeoutError,
                match=rf"worker 1 \(pid {pids[1]}, running\) did not answer within 2 s "
                rf"during {op};",
            ):
                if op == "step":
                    env.step(ones(td))
                else:
                    env.step_and_maybe_reset(ones(td))
            elapsed = time.monotonic() - start
            assert 2.0 <= elapsed < 5.0, elapsed
            assert wait_gone(pids, timeout=0.1) == []
            td = env.reset()  # new workers
            assert td["observation"].shape == (2, 3)
            env.close()
        finally:
            kill_all(pids + env.worker_pids)

    def test_several_stopped_workers_named(self):
        env = ParallelEnv(3, CounterEnv, mp_start_method="fork", timeout=1)
        env.reset()
        pids = env.worker_pids
        try:
            for pid in pids[1:]:
                os.kill(pid, signal.SIGSTOP)
            with pytest.raises(
                WorkerTimeoutError,
                match=rf"worker 1 \(pid {pids[1]}, stopped\), worker 2 \(pid {pids[2]}, "
                r"stopped\) did not answer within 1 s during reset; they were killed",
            ):
                env.reset()
            assert wait_gone(pids, timeout=0.1) == []
        finally:
            kill_all(pids)

    def test_call_times_out(self):
        env = ParallelEnv(2, CounterEnv, mp_start_method="fork", timeout=1)
        env.reset()
        pids = env.worker_pids
        try:
            os.kill(pids[0], signal.SIGSTOP)
            with pytest.raises(WorkerTimeoutError, match=r"worker 0 .* during seed\(3, False\)"):
                env.set_seed(3)
            assert wait_gone(pids, timeout=0.1) == []
        finally:
            kill_all(pids)

    def test_large_call_to_a_stopped_worker(self):
        # arguments larger than the socket's buffer wait for the worker to read them
        env = ParallelEnv(2, CounterEnv, mp_start_method="fork", timeout=1)
        env.reset()
        pids = env.worker_pids
        try:
            os.kill(pids[1], signal.SIGSTOP)
            start = time.monotonic()
            with pytest.raises(
                WorkerTimeoutError, match=rf"worker 1 \(pid {pids[1]}, stopped\) .* seed\(b'xx"
            ):
                env._pool.call(1, "seed", b"x" * 20_000_000)
            assert time.monotonic() - start < 5.0
            assert wait_gone(pids, timeout=0.1) == []
        finally:
            kill_all(pids)

    def test_hung_start_up(self, monkeypatch):
        from rl.envs._batched import _pool

        monkeypatch.setattr(_pool, "_START_S", 1.0)
        env = ParallelEnv(
            2, functools.partial(hang_in_worker, os.getpid()), mp_start_method="fork", timeout=0.5
        )
        start = time.monotonic()
        with pytest.raises(
            WorkerTimeoutError,
            match=r"worker 0 \(pid \d+, sleeping\), worker 1 \(pid \d+, sleeping\) did not "
            r"answer within 1.0 s during start-up \(creating the env\)",
        ):
            env.reset()
        assert time.monotonic() - start < 5.0
        assert env.worker_pids == []

    def test_close_does_not_wait_for_a_stopped_worker(self):
        env = ParallelEnv(2, CounterEnv, mp_start_method="fork", shutdown_timeout=10)
        env.reset()
        pids = env.worker_pids
        try:
            os.kill(pids[0], signal.SIGSTOP)
            start = time.monotonic()
            env.close()
            assert time.monotonic() - start < 3.0
            assert wait_gone(pids, timeout=0.1) == []
        finally:
            kill_all(pids)

    def test_workers_started_from_a_thread_outlive_it(self):
        # the kernel's parent-death signal follows the thread that forked: a worker
        # started from a thread that ends must not die with that thread
        env = ParallelEnv(2, CounterEnv, mp_start_method="fork")
        thread = threading.Thread(target=env.reset)
        thread.start()
        thread.join()
        pids = env.worker_pids
        time.sleep(0.3)
        assert all(pid_running(pid) for pid in pids)
        out = env.step(ones(env.reset()))
        assert out["next", "observation"][:, 0].tolist() == [1.0, 1.0]
        env.close()


class TestInterrupt:
    def test_ctrl_c_is_reported_once(self):
        script = textwrap.dedent(
            f"""
            import signal, sys, torch
            # Ctrl-C as a terminal's process gets it, whatever the test runner's parent
            # ignored (a shell's background job starts with SIGINT ignored)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from _batched_factories import CounterEnv
            from rl.envs import ParallelEnv
            env = ParallelEnv(3, CounterEnv, mp_start_method="fork")
            td = env.reset()
            print(*env.worker_pids, flush=True)
            while True:
                td = env.step(td.set("action", torch.ones(3, 1)))["next"].clone()
            """
        )
        # its own process group: the test sends SIGINT to the group, as a terminal does
        proc = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True,
        )  # fmt: skip
        pids = []
        try:
            pids = [int(pid) for pid in proc.stdout.readline().split()]
            assert len(pids) == 3, proc.stderr.read()
            time.sleep(0.5)
            os.killpg(proc.pid, signal.SIGINT)
            start = time.monotonic()
            _, err = proc.communicate(timeout=20)
            assert time.monotonic() - start < 15  # seconds, not the 20 s timeout (a loaded CI)
            assert proc.returncode != 0
            assert err.count("Traceback") == 1, err
            assert err.count("KeyboardInterrupt") == 1, err
            assert wait_gone(pids) == []
        finally:
            proc.kill()
            proc.wait()
            kill_all(pids)
