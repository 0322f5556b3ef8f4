"""``MPTransport``: clients in other processes, ``multiprocessing`` queues."""

from __future__ import annotations

import multiprocessing as mp
from multiprocessing.context import BaseContext
from typing import Any

from ._mailbox import MailboxClient
from ._queue_transport import QueueTransport

__all__ = ["MPTransport"]


class MPTransport(QueueTransport):
    """Cross-process transport over :mod:`multiprocessing` queues.

    Requests and replies are pickled TensorDicts. Each :meth:`client` owns a reply
    queue; create clients in the owning process *before* starting the processes that
    use them (they inherit the queues as arguments).

    Args:
        ctx (multiprocessing context, optional): where queues come from. Defaults to
            ``multiprocessing.get_context("spawn")``.

    Keyword Args:
        use_manager (bool, optional): back the queues with a
            :class:`multiprocessing.Manager` (proxies that can be forwarded through
            another process). Call :meth:`close` when done. Defaults to ``False``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.core.inference_server import InferenceServer, MPTransport
        >>> transport = MPTransport()
        >>> client = transport.client()  # before starting worker processes
        >>> policy = TensorDictModule(torch.nn.Identity(), ["obs"], ["act"])
        >>> with InferenceServer(policy, transport):
        ...     client(TensorDict(obs=torch.ones(2)))["act"].tolist()
        [1.0, 1.0]
    """

    def __init__(self, ctx: BaseContext | None = None, *, use_manager: bool = False):
        super().__init__()
        self._ctx = ctx if ctx is not None else mp.get_context("spawn")
        self._manager = self._ctx.Manager() if use_manager else None
        if self._manager is None:
            self._request_queue = self._ctx.Queue()
            self._reply_queues: Any = {}
            alive = self._ctx.Event()
        else:
            self._request_queue = self._manager.Queue()
            self._reply_queues = self._manager.dict()
            alive = self._manager.Event()
        # set while the server runs: a process-backed server's owner clears it when the
        # server process exits, so waiting clients raise instead of blocking for ever
        alive.set()
        self.set_peer_alive(alive)

    def _make_reply_queue(self) -> Any:
        if self._manager is not None:
            return self._manager.Queue()
        return self._ctx.Queue()

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_manager"] = None
        return state

    def close(self) -> None:
        """Shuts the manager down (``use_manager=True``); nothing otherwise."""
        if self._manager is not None:
            self._manager.shutdown()
            self._manager = None

    def client(self) -> MailboxClient:
        """A client with its own reply queue; pass it to a worker process."""
        return super().client()
