"""``ThreadingTransport``: requests from threads of the server's own process."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

from tensordict import TensorDictBase

from ._transport import InferenceTransport

__all__ = ["ThreadingTransport"]


class ThreadingTransport(InferenceTransport):
    """In-process transport: a locked list of requests and one
    :class:`concurrent.futures.Future` per request.

    For clients that are threads of the server's process (a thread pool, the
    coordinator threads of :class:`~rl.collectors.AsyncBatchedCollector`).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.core.inference_server import InferenceServer, ThreadingTransport
        >>> transport = ThreadingTransport()
        >>> policy = TensorDictModule(lambda x: 2 * x, ["obs"], ["act"])
        >>> with InferenceServer(policy, transport):
        ...     fut = transport.submit(TensorDict(obs=torch.ones(2)))
        ...     fut.result()["act"].tolist()
        [2.0, 2.0]
    """

    def __init__(self):
        self._queue: list[TensorDictBase] = []
        self._futures: list[Future] = []
        self._submitted_at: list[float] = []
        self._cond = threading.Condition(threading.Lock())

    def submit(self, td: TensorDictBase) -> Future:
        """Queues ``td``; returns the future the server resolves."""
        fut: Future = Future()
        with self._cond:
            self._queue.append(td)
            self._futures.append(fut)
            self._submitted_at.append(time.monotonic())
            self._cond.notify()
        return fut

    def drain(self, max_items: int) -> tuple[list[TensorDictBase], list[Future]]:
        """Dequeues at most ``max_items`` requests."""
        items, futs, _ = self.drain_with_timing(max_items)
        return items, futs

    def drain_with_timing(
        self, max_items: int
    ) -> tuple[list[TensorDictBase], list[Future], list[float]]:
        """As :meth:`drain`, with the submission time of each request."""
        with self._cond:
            n = min(len(self._queue), max_items)
            items, futs, stamps = self._queue[:n], self._futures[:n], self._submitted_at[:n]
            del self._queue[:n], self._futures[:n], self._submitted_at[:n]
        return items, futs, stamps

    def wait_for_work(self, timeout: float) -> None:
        """Returns at once if a request is queued, else waits up to ``timeout``."""
        with self._cond:
            if not self._queue:
                self._cond.wait(timeout=timeout)

    def resolve(self, callback: Future, result: TensorDictBase) -> None:
        """Sets the result of the request's future."""
        callback.set_result(result)

    def resolve_exception(self, callback: Future, exc: BaseException) -> None:
        """Sets the exception of the request's future."""
        callback.set_exception(exc)
