"""The learner's side of the messages with the worker ranks of a torch.distributed
collector.

``Receiver`` threads (one per worker rank) block in ``recv`` so that the learner's
thread never does: it waits on a queue and checks the worker processes while it waits,
which is how a killed rank is reported within seconds instead of hanging. ``Links``
sends the learner's commands without blocking (``isend``), keeps each send alive until
the worker has read it, and asks a rank's receiver for one answer per request.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from . import _td_comm as comm

__all__ = ["Receiver", "Links"]

_POLL_S = 0.25
_GRACE_S = 2.0  # how long a dead worker's last message may take to arrive


class Receiver(threading.Thread):
    """Receives the answers of one worker rank, one per request put in ``requests``.

    Each answer goes to ``out`` as ``(rank, what, value)``: ``("started", (frames per
    step, pid))``, ``("batch", views)`` (valid until the next request), ``("result",
    int)``, ``("error", dict)`` (the worker's exception) or ``("lost", exception)``
    (the connection to the rank failed: it died or hung past the group's timeout).
    """

    def __init__(self, rank: int, device: torch.device, out: queue.SimpleQueue) -> None:
        super().__init__(name=f"rl-distributed-receiver-{rank}", daemon=True)
        self.rank = rank
        self.device = device
        self.out = out
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.buffer = comm.RecvBuffer(device)

    def run(self) -> None:
        rank, device = self.rank, self.device
        while self.requests.get() is not None:
            try:
                kind, a, b, c = comm.recv_header(src=rank, device=device)
                if kind == comm.BATCH:
                    self.out.put((rank, "batch", self.buffer.recv(a, b, c, src=rank)))
                elif kind == comm.ERROR:
                    info = json.loads(comm.recv_bytes(a, src=rank, device=device).decode())
                    self.out.put((rank, "error", info))
                elif kind == comm.STARTED:
                    self.out.put((rank, "started", (a, b)))
                elif kind == comm.RESULT:
                    self.out.put((rank, "result", a))
                else:
                    raise RuntimeError(f"unexpected message {comm.KIND_NAMES.get(kind, kind)!r}")
            except Exception as exc:
                self.out.put((rank, "lost", exc))
                return


class Links:
    """Commands to the worker ranks and their answers.

    Args:
        ranks: the worker ranks (``1..N``).
        device: where the tensors sent and received live (see ``comm_device``).
        procs: the worker processes (``launcher="mp"``; empty under torchrun), checked
            while waiting.
        on_lost: ``on_lost(rank, what, exc)`` is called (and must raise) when the
            connection to ``rank`` failed during ``what``.
        on_error: ``on_error(rank, what, info)`` is called (and must raise) when
            ``rank`` sent its exception (``info``: type, message, traceback).
    """

    def __init__(
        self,
        ranks: Sequence[int],
        device: torch.device,
        procs: Sequence[Any],
        on_lost: Callable[[int, str, BaseException | None], None],
        on_error: Callable[[int, str, dict], None],
    ) -> None:
        self.device = device
        self.procs = dict(zip(ranks, procs))
        self.on_lost, self.on_error = on_lost, on_error
        self.out: queue.SimpleQueue = queue.SimpleQueue()
        self.receivers = {rank: Receiver(rank, device, self.out) for rank in ranks}
        for receiver in self.receivers.values():
            receiver.start()
        self.sends: dict[int, list] = {rank: [] for rank in ranks}
        self.expected: dict[int, int] = {}  # rank -> sends settled by its next answer

    def isend(self, rank: int, tensor: torch.Tensor, what: str) -> None:
        """Sends ``tensor`` to ``rank`` without waiting (kept alive until it is read)."""
        try:
            work = dist.isend(tensor, dst=rank)
        except RuntimeError as exc:
            self.on_lost(rank, what, exc)
        self.sends[rank].append((work, tensor))

    def command(self, rank: int, kind: int, a: int = 0, b: int = 0, what: str = "") -> None:
        """Sends the header ``[kind, a, b, 0]`` to ``rank``."""
        header = torch.tensor([kind, a, b, 0], dtype=torch.int64, device=self.device)
        self.isend(rank, header, what or comm.KIND_NAMES[kind].lower())

    def expect(self, rank: int) -> None:
        """Tells ``rank``'s receiver to read one answer (to the commands sent so far)."""
        self.expected[rank] = len(self.sends[rank])
        self.receivers[rank].requests.put(True)

    def wait_one(self, what: str) -> tuple[int, Any]:
        """The next answer of any worker: ``(rank, value)``; a failed or dead worker
        calls ``on_error`` / ``on_lost``."""
        while True:
            try:
                rank, kind, value = self.out.get(timeout=_POLL_S)
            except queue.Empty:
                self.check_alive(what)
                continue
            if kind == "error":
                self.on_error(rank, what, value)
            if kind == "lost":
                self.on_lost(rank, what, value)
            settled = self.expected.pop(rank, 0)
            try:
                for work, _ in self.sends[rank][:settled]:
                    work.wait()  # read by the worker before it answered
            except RuntimeError as exc:
                self.on_lost(rank, what, exc)
            del self.sends[rank][:settled]
            return rank, value

    def check_alive(self, what: str) -> None:
        """Reports a worker process that exited, after its last words (an error) or
        its receiver's report, when they come within a grace period."""
        for rank, proc in self.procs.items():
            if not proc.is_alive():
                try:
                    item = self.out.get(timeout=_GRACE_S)
                except queue.Empty:
                    self.on_lost(rank, what, None)
                self.out.put(item)
                return

    def layout(self, rank: int) -> Any:
        """The layout of the last batch received from ``rank``."""
        return self.receivers[rank].buffer.layout

    def settle(self) -> None:
        """Waits until every send was delivered (errors ignored: the worker is gone)."""
        for sends in self.sends.values():
            for work, _ in sends:
                try:
                    work.wait()
                except RuntimeError:
                    pass

    def stop(self) -> None:
        """Lets each receiver thread end after its current request."""
        for receiver in self.receivers.values():
            receiver.requests.put(None)

    def join(self, timeout: float) -> None:
        """Waits for the receiver threads, then drops the sends."""
        for receiver in self.receivers.values():
            receiver.join(timeout)
        for sends in self.sends.values():
            sends.clear()
