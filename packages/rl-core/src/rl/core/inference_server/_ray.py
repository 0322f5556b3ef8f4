"""``RayTransport``: clients in Ray actors (or the driver), Ray queues."""

from __future__ import annotations

from typing import Any

from rl.core.ray_runtime import import_ray

from ._mailbox import MailboxClient
from ._queue_transport import QueueTransport

__all__ = ["RayTransport"]


class RayTransport(QueueTransport):
    """Transport over ``ray.util.queue.Queue``: clients may live in any Ray actor.

    Ray must be running (``ray.init()``) before the transport is built: its queues are
    Ray actors. Ray is imported when the transport is built, not when this module is.

    Keyword Args:
        max_queue_size (int): capacity of the request queue (and of each client's
            reply queue). Defaults to ``1000``.

    Examples:
        >>> import ray  # doctest: +SKIP
        >>> ray.init()  # doctest: +SKIP
        >>> transport = RayTransport()  # doctest: +SKIP
        >>> client = transport.client()  # pass it to a Ray actor  # doctest: +SKIP
    """

    def __init__(self, *, max_queue_size: int = 1000):
        super().__init__()
        import_ray("RayTransport", "rl-collectors[ray]")
        from ray.util.queue import Queue  # noqa: PLC0415 (optional dependency)

        self._queue_cls = Queue
        self._max_queue_size = max_queue_size
        self._request_queue = Queue(maxsize=max_queue_size)
        self._reply_queues: dict[int, Any] = {}

    def _make_reply_queue(self) -> Any:
        return self._queue_cls(maxsize=self._max_queue_size)

    def client(self) -> MailboxClient:
        """A client with its own Ray reply queue; usable in any Ray actor."""
        return super().client()

    def close(self) -> None:
        """Stops the Ray actors behind the queues."""
        for q in [self._request_queue, *self._reply_queues.values()]:
            q.shutdown()
        self._reply_queues.clear()
