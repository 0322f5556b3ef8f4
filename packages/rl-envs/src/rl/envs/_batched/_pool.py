"""The parent side of ``ParallelEnv``: starting, driving, watching and stopping workers.

Each worker has one socket (a duplex ``multiprocessing.Pipe``) carrying one-byte commands
and answers (see ``_worker``). The parent waits on all sockets at once with
``select.poll``, waking at least once a second, so that a worker that dies (its socket
reports end-of-file, or ``is_alive()`` turns false) is reported within about a second,
and one that raises sends its traceback, which is raised here as a ``RuntimeError``.
A worker that does not answer within the pool's ``timeout`` (stuck in a loop, stopped
by SIGSTOP) is killed and reported as a :class:`~rl.core.workers.WorkerTimeoutError`
naming it, its pid and state and the command; the wait itself is the ``poll`` the
answers arrive on, so the check costs nothing while workers answer.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import multiprocessing.util
import os
import pickle
import reprlib
import select
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

import torch
import torch.multiprocessing  # noqa: F401  (registers the shared-memory tensor pickler)

from rl.core.workers import (
    WorkerTimeoutError,
    describe_process,
    exit_description,
    kill_after,
    stop_processes,
)

from ._buffers import BufferLayout, Buffers
from ._worker import ANS_ERROR, OP_CALL, OP_CLOSE, worker_main

__all__ = ["WorkerPool"]

logger = logging.getLogger(__name__)

_POLL_MS = 1000
_JOIN_S = 2.0
#: seconds start-up may take at least when answers are limited (spawned workers import
#: torch, which takes minutes on a loaded machine)
_START_S = 600.0


def _shutdown(
    procs: list,
    conns: list,
    owner_pid: int,
    grace_s: float = _JOIN_S,
    exit_hooks: list | None = None,
) -> None:
    """Asks every worker to stop, then terminates and kills the ones that do not.

    ``grace_s``: how long the workers get to exit on their own (TorchRL's
    ``shutdown_timeout``) before they are terminated. ``exit_hooks``: the pool's
    ``multiprocessing.util.Finalize`` entries, cancelled so that a closed (or collected)
    pool leaves nothing in multiprocessing's exit registry.
    """
    while exit_hooks:
        exit_hooks.pop().cancel()
    if os.getpid() != owner_pid:
        return  # a forked copy of the pool (in another env's worker): not ours to stop
    for proc, conn in zip(procs, conns):
        if proc.is_alive():
            try:
                os.write(conn.fileno(), OP_CLOSE)
            except OSError:
                pass
    stop_processes(procs, grace_s)  # then SIGTERM, SIGKILL: nothing outlives close()
    for conn in conns:
        conn.close()
    for proc in procs:
        proc.close()


class WorkerPool:
    """``num_workers`` processes, each running one sub-environment on the shared buffers.

    Args:
        payloads: the pickled :class:`~rl.envs.EnvCreator` of each worker (with
            ``fork``, the creators themselves).
        buffers: the shared-memory buffers (sent to the workers once, at start).
        layout: which keys live in which buffer.
        mp_start_method: ``"spawn"``, ``"fork"`` or ``"forkserver"``.
        name: the owner's class name, used in error messages.
        num_threads: ``torch.set_num_threads`` of each worker.
        timeout: seconds a command may wait for the answers (``None``: no limit); start-up
            may take ``max(timeout, 600)`` seconds. A worker that exceeds it is killed.
        daemon: the worker processes' daemon flag (non-daemonic workers may start
            processes of their own; they are stopped at exit all the same).
        shutdown_timeout: seconds the workers get to exit on ``close`` before they are
            terminated.
    """

    def __init__(
        self,
        payloads: list,
        buffers: Buffers,
        layout: BufferLayout,
        mp_start_method: str,
        name: str = "ParallelEnv",
        num_threads: int = 1,
        timeout: float | None = None,
        daemon: bool = True,
        shutdown_timeout: float = _JOIN_S,
    ) -> None:
        self.name = name
        self.timeout = timeout
        self.num_workers = len(payloads)
        ctx = mp.get_context(mp_start_method)
        if mp_start_method == "forkserver":
            # workers forked from a server that imported rl.envs once start in a blink
            # (only effective before the server starts)
            ctx.set_forkserver_preload(["rl.envs"])
        self.procs: list = []
        self.conns: list = []
        self.fds: list[int] = []
        self._exit_hooks: list = []
        self._finalizer = weakref.finalize(
            self,
            _shutdown,
            self.procs,
            self.conns,
            os.getpid(),
            shutdown_timeout,
            self._exit_hooks,
        )
        if not daemon:
            # multiprocessing joins non-daemonic children at exit: stop them first (its
            # finalizers with an exit priority run before that join); _shutdown cancels
            # this entry, so that pools created and closed do not pile up in the registry
            self._exit_hooks.append(mp.util.Finalize(None, self._finalizer, exitpriority=100))
        # distinct torch seeds per worker, drawn from this process's generator
        seeds = torch.randint(0, 2**62, (self.num_workers,)).tolist()
        # the kernel kills a worker when the thread that forked it ends: only a thread
        # that lives as long as this process may rely on it (a fork server's does)
        death_signal = (
            mp_start_method == "forkserver" or threading.current_thread() is threading.main_thread()
        )
        parent = None if mp_start_method == "forkserver" else os.getpid()
        try:
            for index, payload in enumerate(payloads):
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                # with fork a child inherits the parent ends opened so far: it closes them
                # so that the workers see end-of-file when the parent dies
                others = [*self.conns, parent_conn] if mp_start_method == "fork" else None
                proc = ctx.Process(
                    target=worker_main,
                    args=(index, payload, buffers, layout, child_conn, parent, others),
                    kwargs={
                        "torch_seed": seeds[index],
                        "num_threads": num_threads,
                        "parent_death_signal": death_signal,
                    },
                    name=f"{name}-worker-{index}",
                    daemon=daemon,
                )
                self.conns.append(parent_conn)
                try:
                    proc.start()
                finally:
                    # closed before the next fork, so that only the worker holds its end
                    child_conn.close()
                self.procs.append(proc)
        except BaseException:
            self.close(grace_s=_JOIN_S)
            raise
        self.fds = [conn.fileno() for conn in self.conns]
        self._fd_index = {fd: index for index, fd in enumerate(self.fds)}
        self._poller = select.poll()
        for fd in self.fds:
            self._poller.register(fd, select.POLLIN)
        self.pids = [proc.pid for proc in self.procs]
        self.closed = False
        try:
            # start-up (spawned workers import torch) gets minutes
            self.collect(range(self.num_workers), "start-up (creating the env)", start=True)
        except BaseException:
            self.close(grace_s=_JOIN_S)
            raise

    # ------------------------------------------------------------------ communication
    def send(self, workers: Iterable[int], op: bytes) -> None:
        """Writes the one-byte command ``op`` to each of ``workers``."""
        fds = self.fds
        for index in workers:
            try:
                os.write(fds[index], op)
            except OSError:
                pass  # a dead worker: collect() reports it

    def collect(
        self,
        workers: Iterable[int],
        what: str,
        start: bool = False,
        *,
        at_least: int | None = None,
        wait_s: float | None = None,
    ) -> dict[int, bytes]:
        """Waits for the answer of each of ``workers``; raises if one failed, died or hung.

        Args:
            workers: the indices of the workers that were sent a command.
            what: the command, for error messages.
            start: the workers are starting (they get ``max(timeout, 600)`` seconds).
            at_least: return once this many of ``workers`` answered, with every other
                answer that has already arrived (default: wait for all of them). The
                workers left out still owe their answer: collect them later.
            wait_s: stop waiting after ``wait_s`` seconds (``0``: only read the answers
                already there) and return the answers gathered, however few.

        Returns:
            ``{worker_index: answer_byte}``.

        Raises:
            RuntimeError: naming the worker and holding its traceback (it raised) or its
                exit code (it died; the pool is then shut down).
            WorkerTimeoutError: a worker did not answer within ``timeout`` (it is
                killed and the pool shut down); also a ``TimeoutError``.
        """
        pending = set(workers)
        need = 0 if at_least is None else min(at_least, len(pending))  # 0: all of them
        limit = self.timeout
        if limit is not None and start:
            limit = max(limit, _START_S)
        now = time.monotonic()
        deadline = None if limit is None else now + limit
        stop = None if wait_s is None else now + wait_s
        answers: dict[int, bytes] = {}
        errors: list[str] = []
        dead: list[int] = []
        poll = self._poller.poll
        while pending and (at_least is None or len(answers) + len(errors) < need):
            wait_ms = _POLL_MS
            if stop is not None or deadline is not None:
                now = time.monotonic()
            if stop is not None:
                wait_ms = max(0, min(wait_ms, int((stop - now) * 1000)))
            if deadline is not None:
                left = deadline - now
                if left <= 0:
                    dead += [index for index in pending if not self.procs[index].is_alive()]
                    if dead:
                        break  # reported as deaths below
                    self._hung(sorted(pending), what, limit)
                wait_ms = min(wait_ms, max(1, int(left * 1000)))
            events = poll(wait_ms)
            if not events:
                for index in list(pending):
                    if not self.procs[index].is_alive():
                        pending.discard(index)
                        dead.append(index)
                if stop is not None and time.monotonic() >= stop:
                    break
                continue
            self._take(events, pending, answers, errors, dead, what)
        if at_least is not None and pending and not dead:
            # the answers already there come along (one poll, no wait)
            self._take(poll(0), pending, answers, errors, dead, what)
        if dead:
            msgs = []
            for index in sorted(dead):
                proc = self.procs[index]
                proc.join(_JOIN_S)
                msgs.append(
                    f"{self.name} worker {index} (pid {self.pids[index]}) died during {what} "
                    f"with {exit_description(proc.exitcode)}"
                )
            self.close(grace_s=_JOIN_S)
            raise RuntimeError("; ".join(msgs + errors) + "; all workers were shut down")
        if errors:
            raise RuntimeError("\n".join(errors))
        return answers

    def _take(
        self,
        events: list,
        pending: set[int],
        answers: dict[int, bytes],
        errors: list[str],
        dead: list[int],
        what: str,
    ) -> None:
        """Reads the answer bytes that ``events`` (from the poller) announce."""
        fd_index = self._fd_index
        for fd, _ in events:
            index = fd_index[fd]
            try:
                answer = os.read(fd, 1)
            except OSError:
                answer = b""
            if not answer:
                self._poller.unregister(fd)
                pending.discard(index)
                if index not in dead:
                    dead.append(index)
                continue
            if index not in pending:
                continue
            pending.discard(index)
            if answer == ANS_ERROR:
                tb = self._recv(index, what)
                errors.append(f"{self.name} worker {index} raised during {what}:\n{tb}")
            else:
                answers[index] = answer

    def _hung(
        self, stuck: list[int], what: str, limit: float, states: dict[int, str] | None = None
    ) -> None:
        """Kills the workers ``stuck`` (they did not answer; ``states``: their pid and
        state, if they were killed already), shuts the others down and raises
        :class:`~rl.core.workers.WorkerTimeoutError`."""
        if states is None:
            states = {i: describe_process(self.pids[i]) for i in stuck}
        workers = ", ".join(f"worker {i} ({states[i]})" for i in stuck)
        stop_processes([self.procs[i] for i in stuck], 0.0)  # no polite request: they hang
        self.close(grace_s=_JOIN_S)
        raise WorkerTimeoutError(
            f"{self.name} {workers} did not answer within {limit} s during {what}; "
            f"{'it was' if len(stuck) == 1 else 'they were'} killed and all workers shut "
            "down (timeout=None lifts the limit)"
        )

    def _bounded(self, index: int, what: str, io: Any) -> Any:
        """``io()``, a read or write on worker ``index``'s socket that a stopped worker
        could block forever: the worker is killed after ``timeout`` seconds (and
        reported as hung)."""
        if self.timeout is None:
            return io()
        watch = None
        try:
            with kill_after(self.pids[index], self.timeout) as watch:
                return io()
        finally:
            if watch is not None and watch.state is not None:
                self._hung([index], what, self.timeout, {index: watch.state})

    def _recv(self, index: int, what: str) -> Any:
        try:
            return pickle.loads(self._bounded(index, what, self.conns[index].recv_bytes))
        except WorkerTimeoutError:  # (a TimeoutError is an OSError)
            raise
        except (EOFError, OSError):
            return "<the worker died before sending its traceback>"

    def run(self, workers: Iterable[int], op: bytes, what: str) -> dict[int, bytes]:
        """Sends ``op`` to ``workers`` and collects their answers.

        An interruption (e.g. ``KeyboardInterrupt``) while answers are pending would
        leave them to be read as the answers of the next command: the workers are then
        shut down (``reset()`` starts new ones).
        """
        workers = list(workers)
        try:
            self.send(workers, op)
            return self.collect(workers, what)
        except RuntimeError:
            raise
        except BaseException:
            self.close(grace_s=_JOIN_S)
            raise

    def call(self, index: int, name: str, *args: Any) -> Any:
        """Runs the non-hot command ``name`` on worker ``index`` and returns its result."""
        try:
            what = name + reprlib.repr(args)  # (a state to load is not printed whole)
            try:
                os.write(self.fds[index], OP_CALL)
                # arguments larger than the socket's buffer wait for the worker to read
                self._bounded(index, what, lambda: self.conns[index].send((name, args)))
            except WorkerTimeoutError:  # (a TimeoutError is an OSError)
                raise
            except OSError:
                pass  # a dead worker: collect() reports it
            self.collect([index], what)
            return self._recv(index, what)
        except RuntimeError:
            raise
        except BaseException:
            self.close(grace_s=_JOIN_S)
            raise

    # ----------------------------------------------------------------------- shutdown
    def close(self, grace_s: float | None = None) -> None:
        """Stops every worker (idempotent); leaves no child process behind.

        ``grace_s``: how long the workers get to exit on their own (default: the
        pool's ``shutdown_timeout``; failures use a short one: a stuck worker is not
        waited for).
        """
        if getattr(self, "closed", False):
            return
        if grace_s is not None and self._finalizer.detach() is not None:
            self.closed = True
            _shutdown(self.procs, self.conns, os.getpid(), grace_s, self._exit_hooks)
            return
        self.closed = True
        self._finalizer()

    def alive(self) -> list[bool]:
        """Whether each worker process is running."""
        return [proc.is_alive() for proc in self.procs] if not self.closed else []
