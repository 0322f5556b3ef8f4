"""Request/reply over queues: many clients, one server, one reply queue per client.

The queue objects are injected (``queue.Queue``, ``multiprocessing`` queues, Ray
queues), so the same routing serves every queue-based transport. A request travels as
``(client_id, request_id, submitted_at, payload)``; a reply as ``(request_id, result)``
on the client's own queue, where ``result`` may be an exception to raise.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

__all__ = ["InferenceServerClosedError", "watch_process"]

logger = logging.getLogger(__name__)

# how often a client waiting on a process-backed server checks that it still runs
_PEER_CHECK_S = 0.1
# how long an unreadable reply waits to learn whether the server process died
_DEATH_GRACE_S = 2.0
_MISSING = object()


class InferenceServerClosedError(RuntimeError):
    """The server process exited before answering a request: a dead server, not a
    timeout (which raises :class:`queue.Empty`)."""


def watch_process(sentinel: Any, alive_event: Any) -> None:
    """Clears ``alive_event`` once the process behind ``sentinel`` has exited (run in a
    daemon thread by the owner of a server process)."""
    try:
        wait([sentinel])
    finally:
        with contextlib.suppress(Exception):  # a manager-backed event may be gone already
            alive_event.clear()


def _drop_unreadable(err: Exception) -> None:
    """A request that cannot be read (its tensors were shared by a client process that
    has exited) is dropped: nobody waits for its answer, and the server goes on."""
    logger.warning("dropped an unreadable inference request (its client died?): %r", err)


class MailboxFuture:
    """The pending reply to one request of a :class:`MailboxClient`."""

    def __init__(self, client: MailboxClient, request_id: int):
        self._client = client
        self._request_id = request_id
        self._result: Any = _MISSING

    def done(self) -> bool:
        """Whether :meth:`result` returns without blocking."""
        if self._result is _MISSING:
            try:
                self._result = self._client._wait(self._request_id, timeout=0)
            except queue.Empty:
                return False
        return True

    def result(self, timeout: float | None = None) -> Any:
        """The reply (raising the server's exception, if it sent one).

        Raises:
            queue.Empty: no reply within ``timeout`` seconds (the request stays in
                flight; call again).
            InferenceServerClosedError: the server process exited without replying.
        """
        if self._result is _MISSING:
            self._result = self._client._wait(self._request_id, timeout=timeout)
        if isinstance(self._result, BaseException):
            raise self._result
        return self._result


class MailboxClient:
    """A picklable client with its own reply queue (pass it to a worker process)."""

    def __init__(self, request_queue: Any, reply_queue: Any, client_id: int, peer_alive: Any):
        self._request_queue = request_queue
        self._reply_queue = reply_queue
        self._client_id = client_id
        self._peer_alive = peer_alive
        self._next_id = 0
        self._early: dict[int, Any] = {}  # replies read while waiting for another one
        self._lock = threading.Lock()

    @property
    def client_id(self) -> int:
        """This client's id (the key of its reply queue)."""
        return self._client_id

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_lock"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def submit(self, payload: Any) -> MailboxFuture:
        """Sends ``payload``; returns the future of its reply."""
        with self._lock:
            request_id = self._next_id
            self._next_id += 1
        self._request_queue.put((self._client_id, request_id, time.monotonic(), payload))
        return MailboxFuture(self, request_id)

    def __call__(self, payload: Any, timeout: float | None = None) -> Any:
        """Sends ``payload`` and blocks for its reply (see :meth:`MailboxFuture.result`)."""
        return self.submit(payload).result(timeout=timeout)

    def _wait(self, request_id: int, timeout: float | None) -> Any:
        with self._lock:
            if request_id in self._early:
                return self._early.pop(request_id)
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                step = remaining
                if self._peer_alive is not None:
                    step = _PEER_CHECK_S if step is None else min(step, _PEER_CHECK_S)
                try:
                    reply_id, result = self._reply_queue.get(timeout=step)
                except queue.Empty:
                    if self._peer_alive is not None and not self._peer_alive.is_set():
                        return self._last_reply(request_id)
                    if remaining is not None and remaining <= 0:
                        raise queue.Empty(
                            f"no reply to request {request_id} within {timeout} s"
                        ) from None
                    continue
                except Exception as err:  # noqa: BLE001 - see _unreadable
                    raise self._unreadable(request_id, err) from err
                if reply_id == request_id:
                    return result
                self._early[reply_id] = result

    def _unreadable(self, request_id: int, err: Exception) -> RuntimeError:
        """The error for a reply that cannot be read: its tensors are shared by the
        server process, so a server that died after replying leaves it unreadable."""
        deadline = time.monotonic() + _DEATH_GRACE_S
        while self._peer_alive is not None and time.monotonic() < deadline:
            if not self._peer_alive.is_set():
                return InferenceServerClosedError(
                    f"the inference server process exited before the reply to request "
                    f"{request_id} of client {self._client_id} was read ({err!r})"
                )
            time.sleep(_PEER_CHECK_S / 2)
        return RuntimeError(
            f"the reply to request {request_id} of client {self._client_id} could not be "
            f"read: {err!r}"
        )

    def _last_reply(self, request_id: int) -> Any:
        """The server has exited: its reply may still sit in the queue."""
        while True:
            try:
                reply_id, result = self._reply_queue.get(block=False)
            except queue.Empty:
                raise InferenceServerClosedError(
                    f"the inference server process exited before replying to request "
                    f"{request_id} of client {self._client_id}"
                ) from None
            if reply_id == request_id:
                return result
            self._early[reply_id] = result


class Mailbox:
    """The server side: one request queue, a reply queue per client."""

    def __init__(
        self,
        request_queue: Any,
        reply_queue_factory: Callable[[], Any],
        reply_queues: Any = None,
        peer_alive: Any = None,
    ):
        self.request_queue = request_queue
        self.reply_queue_factory = reply_queue_factory
        self.reply_queues = {} if reply_queues is None else reply_queues
        self.peer_alive = peer_alive
        self._peeked: Any = None
        self._lock = threading.Lock()

    def client(self) -> MailboxClient:
        """A new client with a fresh reply queue."""
        with self._lock:
            client_id = len(self.reply_queues)
            reply_queue = self.reply_queue_factory()
            self.reply_queues[client_id] = reply_queue
        return MailboxClient(self.request_queue, reply_queue, client_id, self.peer_alive)

    def wait_for_work(self, timeout: float) -> None:
        """Blocks until a request arrives (kept for the next :meth:`drain`) or
        ``timeout`` passes."""
        if self._peeked is not None:
            return
        try:
            self._peeked = self.request_queue.get(timeout=timeout)
        except queue.Empty:
            return
        except Exception as err:  # noqa: BLE001
            _drop_unreadable(err)

    def drain(self, max_items: int) -> tuple[list[Any], list[tuple[int, int]], list[float]]:
        """At most ``max_items`` payloads, their ``(client_id, request_id)`` callbacks
        and submission times."""
        requests = []
        if self._peeked is not None:
            requests.append(self._peeked)
            self._peeked = None
        while len(requests) < max_items:
            try:
                requests.append(self.request_queue.get(block=False))
            except queue.Empty:
                break
            except Exception as err:  # noqa: BLE001
                _drop_unreadable(err)
        payloads = [r[3] for r in requests]
        callbacks = [(r[0], r[1]) for r in requests]
        stamps = [r[2] for r in requests]
        return payloads, callbacks, stamps

    def resolve(self, callback: tuple[int, int], result: Any) -> None:
        """Puts ``result`` (a value or an exception) on the client's reply queue."""
        client_id, request_id = callback
        self.reply_queues[client_id].put((request_id, result))
