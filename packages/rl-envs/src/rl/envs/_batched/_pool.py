"""The parent side of ``ParallelEnv``: starting, driving, watching and stopping workers.

Each worker has one socket (a duplex ``multiprocessing.Pipe``) carrying one-byte commands
and answers (see ``_worker``). The parent waits on all sockets at once with
``select.poll`` and a one-second timeout, so that a worker that dies (its socket reports
end-of-file, or ``is_alive()`` turns false) is reported within about a second, and one
that raises sends its traceback, which is raised here as a ``RuntimeError``.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import multiprocessing.util
import os
import pickle
import select
import signal
import time
import weakref
from collections.abc import Iterable
from typing import Any

import torch
import torch.multiprocessing  # noqa: F401  (registers the shared-memory tensor pickler)

from ._buffers import BufferLayout, Buffers
from ._worker import ANS_ERROR, OP_CALL, OP_CLOSE, worker_main

__all__ = ["WorkerPool"]

logger = logging.getLogger(__name__)

_POLL_MS = 1000
_JOIN_S = 2.0


def _exit_description(code: int | None) -> str:
    if code is None:
        return "an unknown exit code"
    if code < 0:
        try:
            return f"exit code {code} (killed by {signal.Signals(-code).name})"
        except ValueError:
            return f"exit code {code}"
    return f"exit code {code}"


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
    deadline = time.monotonic() + grace_s
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
            proc.join(_JOIN_S)
        if proc.is_alive():
            proc.kill()
            proc.join(_JOIN_S)
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
            is not limited.
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
        try:
            for index, payload in enumerate(payloads):
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                # with fork a child inherits the parent ends opened so far: it closes them
                # so that the workers see end-of-file when the parent dies
                others = [*self.conns, parent_conn] if mp_start_method == "fork" else None
                proc = ctx.Process(
                    target=worker_main,
                    args=(index, payload, buffers, layout, child_conn, os.getpid(), others),
                    kwargs={"torch_seed": seeds[index], "num_threads": num_threads},
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
            # start-up (spawned workers import torch) waits as long as it takes
            self.collect(range(self.num_workers), "start-up (creating the env)", limited=False)
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

    def collect(self, workers: Iterable[int], what: str, limited: bool = True) -> dict[int, bytes]:
        """Waits for the answer of each of ``workers``; raises if one failed or died.

        Args:
            workers: the indices of the workers that were sent a command.
            what: the command, for error messages.
            limited: whether the pool's ``timeout`` applies (not at start-up).

        Returns:
            ``{worker_index: answer_byte}``.

        Raises:
            RuntimeError: naming the worker and holding its traceback (it raised) or its
                exit code (it died; the pool is then shut down).
            TimeoutError: a worker did not answer within ``timeout`` (the pool is then
                shut down).
        """
        pending = set(workers)
        limit = self.timeout if limited else None
        deadline = None if limit is None else time.monotonic() + limit
        answers: dict[int, bytes] = {}
        errors: list[str] = []
        dead: list[int] = []
        poll = self._poller.poll
        fd_index = self._fd_index
        while pending:
            wait_ms = _POLL_MS
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    stuck = sorted(pending)
                    self.close(grace_s=_JOIN_S)
                    raise TimeoutError(
                        f"{self.name} worker(s) {stuck} did not answer within {limit} s "
                        f"during {what}; all workers were shut down"
                    )
                wait_ms = min(_POLL_MS, max(1, int(left * 1000)))
            events = poll(wait_ms)
            if not events:
                for index in list(pending):
                    if not self.procs[index].is_alive():
                        pending.discard(index)
                        dead.append(index)
                continue
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
                    tb = self._recv(index)
                    errors.append(f"{self.name} worker {index} raised during {what}:\n{tb}")
                else:
                    answers[index] = answer
        if dead:
            msgs = []
            for index in sorted(dead):
                proc = self.procs[index]
                proc.join(_JOIN_S)
                msgs.append(
                    f"{self.name} worker {index} (pid {self.pids[index]}) died during {what} "
                    f"with {_exit_description(proc.exitcode)}"
                )
            self.close(grace_s=_JOIN_S)
            raise RuntimeError("; ".join(msgs + errors) + "; all workers were shut down")
        if errors:
            raise RuntimeError("\n".join(errors))
        return answers

    def _recv(self, index: int) -> Any:
        try:
            return pickle.loads(self.conns[index].recv_bytes())
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
            try:
                os.write(self.fds[index], OP_CALL)
                self.conns[index].send((name, args))
            except OSError:
                pass
            self.collect([index], f"{name}{args}")
            return self._recv(index)
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
