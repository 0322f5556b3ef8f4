"""The base of the transports whose clients talk to the server through queues."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from ._mailbox import Mailbox, MailboxClient
from ._transport import InferenceTransport

__all__ = ["QueueTransport"]


class QueueTransport(InferenceTransport):
    """A request queue shared by all clients and one reply queue per client.

    A subclass sets ``_request_queue`` and ``_reply_queues`` (a mapping) and implements
    :meth:`_make_reply_queue`. Clients come from :meth:`client` (create them before
    handing them to other processes); :meth:`submit` is not available because a reply
    needs a client's own queue.
    """

    _request_queue: Any
    _reply_queues: Any

    def __init__(self):
        self._mailbox: Mailbox | None = None
        self._peer_alive: Any = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_mailbox"] = None  # rebuilt around the unpickled queues
        return state

    def _make_reply_queue(self) -> Any:
        raise NotImplementedError

    def _box(self) -> Mailbox:
        if self._mailbox is None:
            self._mailbox = Mailbox(
                self._request_queue, self._make_reply_queue, self._reply_queues, self._peer_alive
            )
        return self._mailbox

    def set_peer_alive(self, alive_event: Any) -> None:
        """Clients created from now on raise
        :class:`~rl.core.inference_server.InferenceServerClosedError` once
        ``alive_event`` is cleared."""
        self._peer_alive = alive_event
        if self._mailbox is not None:
            self._mailbox.peer_alive = alive_event

    def client(self) -> MailboxClient:
        """A client with its own reply queue: ``client(td)`` or ``client.submit(td)``."""
        return self._box().client()

    def submit(self, td: TensorDictBase):
        """Not supported: call :meth:`client` and submit through it."""
        raise RuntimeError(
            f"{type(self).__name__}.submit() is not supported: call transport.client() "
            "and submit through the client"
        )

    def wait_for_work(self, timeout: float) -> None:
        """Blocks until a request arrives or ``timeout`` passes."""
        self._box().wait_for_work(timeout)

    def drain(self, max_items: int) -> tuple[list[TensorDictBase], list[tuple[int, int]]]:
        """At most ``max_items`` pending requests and their callbacks."""
        items, callbacks, _ = self._box().drain(max_items)
        return items, callbacks

    def drain_with_timing(
        self, max_items: int
    ) -> tuple[list[TensorDictBase], list[tuple[int, int]], list[float]]:
        """As :meth:`drain`, with the submission time of each request."""
        return self._box().drain(max_items)

    def resolve(self, callback: tuple[int, int], result: TensorDictBase) -> None:
        """Sends ``result`` to the client's reply queue."""
        self._box().resolve(callback, result)

    def resolve_exception(self, callback: tuple[int, int], exc: BaseException) -> None:
        """Sends ``exc`` to the client's reply queue (the client raises it)."""
        self._box().resolve(callback, exc)
