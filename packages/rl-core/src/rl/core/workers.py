"""Worker processes: how rl's multiprocess objects report them, stop them and tie them to
their parent.

``ParallelEnv`` (rl-envs) and the multiprocess collectors (rl-collectors) share these:
one wording for a worker that died (:func:`exit_description`) or hung
(:func:`describe_process`), one error for a worker that did not answer in time
(:class:`WorkerTimeoutError`), one way to stop workers that leaves none behind
(:func:`stop_processes`), a bound on reading an answer that has begun to arrive
(:func:`kill_after`), and what each worker does first: exit with its parent
(:func:`die_with_parent`) and leave Ctrl-C to it (:func:`ignore_interrupts`). A process
forked after this module is imported forgets inductor's compile thread pool
(:func:`forget_inherited_compile_pool`, an at-fork hook).

Examples:
    >>> from rl.core.workers import WorkerTimeoutError, exit_description
    >>> exit_description(-9)
    'exit code -9 (killed by SIGKILL)'
    >>> issubclass(WorkerTimeoutError, RuntimeError) and issubclass(WorkerTimeoutError, TimeoutError)
    True
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from multiprocessing.connection import wait
from typing import Any

__all__ = [
    "WorkerTimeoutError",
    "describe_process",
    "die_with_parent",
    "exit_description",
    "forget_inherited_compile_pool",
    "ignore_interrupts",
    "kill_after",
    "stop_processes",
]

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_WATCH_S = 0.5
_WATCHDOG_TICK_S = 0.05
_WATCHDOG_LINGER_S = 1.0
_STOP_TICK_S = 0.05
_STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "in uninterruptible sleep",
    "T": "stopped",
    "t": "stopped by a debugger",
    "Z": "exited",
    "X": "exited",
}


def forget_inherited_compile_pool() -> None:
    """Makes a forked process start its own inductor compile thread pool.

    A forked child inherits inductor's cached ``AsyncCompile.pool()`` (the
    ``ThreadPoolExecutor`` that compiles C++ kernels) but none of its threads. torch's
    own at-fork hook forgets its process pools, not this one (torch 2.15), and the
    inherited executor counts the parent's idle threads as its own, so it starts none:
    a worker's first C++ kernel compilation (a compiled policy's first call, when the
    kernel is not in the on-disk cache yet) waited for ever on a future nobody runs.
    Registered with ``os.register_at_fork`` when this module is imported, so every
    fork (the collectors' and ``ParallelEnv``'s workers, a user's own) runs it in the
    child. A no-op when inductor was not imported (nothing inherited)."""
    async_compile = sys.modules.get("torch._inductor.async_compile")
    pool = getattr(getattr(async_compile, "AsyncCompile", None), "pool", None)
    if hasattr(pool, "cache_clear"):
        pool.cache_clear()


os.register_at_fork(after_in_child=forget_inherited_compile_pool)


class WorkerTimeoutError(RuntimeError, TimeoutError):
    """A worker process did not answer within the time allowed (it hung or was stopped).

    A ``RuntimeError``, as the errors of a worker that raised or died, and a
    ``TimeoutError``: either ``except`` clause catches it. When it is raised, the workers
    that did not answer were killed and the others shut down.
    """


def exit_description(code: int | None) -> str:
    """How a worker process ended, from its exit code (``Process.exitcode``).

    Examples:
        >>> exit_description(1)
        'exit code 1'
    """
    if code is None:
        return "an unknown exit code"
    if code < 0:
        try:
            return f"exit code {code} (killed by {signal.Signals(-code).name})"
        except ValueError:
            return f"exit code {code}"
    return f"exit code {code}"


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def describe_process(pid: int) -> str:
    """``"pid 1234, stopped"``: a process id and, where ``/proc`` tells it (Linux), its
    state (``running``, ``sleeping``, ``stopped``...), for the message about a worker that
    does not answer."""
    state = _STATES.get(_state(pid) or "")
    return f"pid {pid}" if state is None else f"pid {pid}, {state}"


def _set_parent_death_signal(sig: int) -> bool:
    """Asks Linux to send ``sig`` to this process when its parent thread ends."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    # the arguments are C unsigned longs: a bare int could leave garbage in the high bits
    zero = ctypes.c_ulong(0)
    return prctl(ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(sig), zero, zero, zero) == 0


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(_WATCH_S)
        if os.getppid() != parent_pid:
            os._exit(1)


def die_with_parent(parent_pid: int | None = None, signal_parent_thread: bool = True) -> bool:
    """Makes this worker process exit when its parent does (even killed by SIGKILL).

    On Linux the kernel sends this process SIGKILL when the parent thread that started it
    ends (``prctl(PR_SET_PDEATHSIG)``), which also ends a stopped (SIGSTOP) worker; if the
    parent died before that was set, this process exits now. Elsewhere, or with
    ``signal_parent_thread=False`` (the parent started this worker from a thread that may
    end before the parent does), a daemon thread checks the parent every half second
    (which a stopped worker cannot do).

    Args:
        parent_pid: the process that started this one (``None``: the current parent,
            e.g. the fork server of a ``"forkserver"`` worker, which exits with it).
        signal_parent_thread: whether the kernel's parent-death signal may be used.

    Returns:
        whether the kernel's signal is set (else the watching thread runs).
    """
    if parent_pid is None:
        parent_pid = os.getppid()
    armed = signal_parent_thread and _set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent is already gone (before the signal was set)
        os._exit(1)
    if not armed:
        threading.Thread(
            target=_watch_parent, args=(parent_pid,), name="rl-watch-parent", daemon=True
        ).start()
    return armed


def _do_nothing(signum: int, frame: Any) -> None:
    pass


def ignore_interrupts() -> None:
    """Leaves Ctrl-C to the parent: SIGINT, which a terminal sends to the whole process
    group, does nothing in this worker (the parent raises ``KeyboardInterrupt`` once and
    stops its workers).

    A Python handler that does nothing rather than ``SIG_IGN``: processes the worker's env
    starts (a simulator) get the default behaviour back when they exec.
    """
    signal.signal(signal.SIGINT, _do_nothing)


def _signal(proc: Any, sig: int) -> None:
    try:
        os.kill(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _join_all(procs: list, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))


def stop_processes(procs: Iterable[Any], grace_s: float, kill_after_s: float = 1.0) -> None:
    """Waits up to ``grace_s`` for the processes to exit, then terminates the others
    (SIGTERM, with SIGCONT so that a stopped one acts on it) and kills (SIGKILL) those
    still running ``kill_after_s`` later.

    A stopped process cannot exit on its own: it is terminated without waiting. Takes at
    most about ``grace_s + 2 * kill_after_s`` seconds, whatever the number of processes.

    Args:
        procs: ``multiprocessing.Process`` objects (started ones; others are skipped).
        grace_s: seconds the processes get to exit on their own (after being asked to).
        kill_after_s: seconds between SIGTERM and SIGKILL.
    """
    procs = [proc for proc in procs if proc.pid is not None]
    deadline = time.monotonic() + grace_s
    while True:  # until all exited or are stopped (which a signal may make them any time)
        waiting = [p for p in procs if p.is_alive() and _state(p.pid) not in ("T", "t")]
        left_s = deadline - time.monotonic()
        if not waiting or left_s <= 0:
            break
        wait([proc.sentinel for proc in waiting], timeout=min(_STOP_TICK_S, left_s))
    left = [proc for proc in procs if proc.is_alive()]
    for proc in left:  # is_alive() has not reaped it: the pid is still this process's
        _signal(proc, signal.SIGTERM)
        _signal(proc, signal.SIGCONT)
    _join_all(left, kill_after_s)
    left = [proc for proc in left if proc.is_alive()]
    for proc in left:
        _signal(proc, signal.SIGKILL)
    _join_all(left, kill_after_s)


class _Deadline:
    """A process to kill at ``deadline`` (``time.monotonic()``); ``state`` is what
    :func:`describe_process` said just before the kill (``None``: not killed)."""

    __slots__ = ("deadline", "pid", "state")

    def __init__(self, deadline: float, pid: int) -> None:
        self.deadline = deadline
        self.pid = pid
        self.state: str | None = None


class _Watchdog:
    """One daemon thread per process that kills the processes whose deadline passed.

    While deadlines are armed (and for a second after the last one) it checks them every
    ``_WATCHDOG_TICK_S``; otherwise it sleeps on an event, which only the first arming
    sets: arming costs a lock, not a thread wake-up per use.
    """

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._armed: set[_Deadline] = set()
        self._wake = threading.Event()
        self._idle = True
        self._last_armed = 0.0
        self._thread: threading.Thread | None = None

    def arm(self, entry: _Deadline) -> None:
        if self._pid != os.getpid():  # a forked copy: the thread did not come along
            self.__init__()
        with self._lock:
            self._armed.add(entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rl-watchdog", daemon=True)
                self._thread.start()
            if self._idle:
                self._idle = False
                self._wake.set()

    def disarm(self, entry: _Deadline) -> None:
        with self._lock:
            self._armed.discard(entry)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            with self._lock:
                now = time.monotonic()
                if self._armed:
                    self._last_armed = now
                elif now - self._last_armed > _WATCHDOG_LINGER_S:
                    self._idle = True  # under the lock: the next arm() wakes this thread
                    self._wake.clear()
                    continue
                due = [entry for entry in self._armed if entry.deadline <= now]
                for entry in due:
                    self._armed.discard(entry)
                    entry.state = describe_process(entry.pid)
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(entry.pid, signal.SIGKILL)
            time.sleep(_WATCHDOG_TICK_S)


_WATCHDOG = _Watchdog()


@contextlib.contextmanager
def kill_after(pid: int, seconds: float) -> Iterator[_Deadline]:
    """Kills (SIGKILL) process ``pid`` if the block has not ended ``seconds`` from now.

    For reading a worker's answer that has begun to arrive: a worker stopped in the
    middle of sending it (or of handing over a shared-memory file descriptor, which it
    serves from a thread of its own) would block the read forever; killed, it makes the
    read fail. The caller must not reap ``pid`` inside the block. The yielded record's
    ``state`` says whether it was killed (``None``: no) and in which state it was
    (``"pid 1234, stopped"``). Costs about 3 us (a lock), no system call, when nothing
    is killed.
    """
    entry = _Deadline(time.monotonic() + seconds, pid)
    _WATCHDOG.arm(entry)
    try:
        yield entry
    finally:
        _WATCHDOG.disarm(entry)
