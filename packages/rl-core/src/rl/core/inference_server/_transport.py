"""``InferenceTransport``: how requests travel from clients to an inference server."""

from __future__ import annotations

import abc
from concurrent.futures import Future
from typing import Any

from tensordict import TensorDictBase

__all__ = ["InferenceClient", "InferenceTransport"]


class InferenceTransport(abc.ABC):
    """The channel between the clients of an :class:`InferenceServer` and its loop.

    Clients call :meth:`submit` (or the callable returned by :meth:`client`); the
    server calls :meth:`wait_for_work`, then :meth:`drain` for a list of requests and
    opaque callbacks, runs the policy once on the batch, and hands each result (or the
    error) back with :meth:`resolve` / :meth:`resolve_exception`.

    A transport may also define ``drain_with_timing(max_items)`` returning
    ``(items, callbacks, submitted_at)`` (``time.monotonic()`` stamps, or ``None``) so
    the server can report queue-wait statistics.
    """

    @abc.abstractmethod
    def submit(self, td: TensorDictBase) -> Future:
        """Sends one unbatched request; returns a future of its result."""

    @abc.abstractmethod
    def drain(self, max_items: int) -> tuple[list[TensorDictBase], list]:
        """At most ``max_items`` pending requests and their callbacks (server side)."""

    @abc.abstractmethod
    def wait_for_work(self, timeout: float) -> None:
        """Blocks until a request is pending or ``timeout`` seconds have passed."""

    @abc.abstractmethod
    def resolve(self, callback: Any, result: TensorDictBase) -> None:
        """Hands ``result`` to the client that sent the request behind ``callback``."""

    @abc.abstractmethod
    def resolve_exception(self, callback: Any, exc: BaseException) -> None:
        """Raises ``exc`` in the client that sent the request behind ``callback``."""

    def set_peer_alive(self, alive_event: Any) -> None:  # noqa: B027 - optional hook
        """Gives the transport an event that is cleared when the server process exits.

        Transports whose clients wait across a process boundary consult it so that a
        client blocked on a dead server raises instead of waiting for ever; in-process
        transports ignore it (the default).
        """

    def client(self) -> Any:
        """A client bound to this transport: call it with one request to get its result."""
        return InferenceClient(self)


class InferenceClient:
    """A callable handle on a transport: ``client(td)`` returns the server's answer.

    Args:
        transport: the transport requests go through.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.core.inference_server import InferenceServer, ThreadingTransport
        >>> policy = TensorDictModule(torch.nn.Linear(3, 1), ["obs"], ["act"])
        >>> transport = ThreadingTransport()
        >>> with InferenceServer(policy, transport):
        ...     out = transport.client()(TensorDict(obs=torch.zeros(3)))
        >>> out["act"].shape
        torch.Size([1])
    """

    def __init__(self, transport: InferenceTransport):
        self._transport = transport

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        """Submits ``td`` and blocks for the result."""
        return self.submit(td).result()

    def submit(self, td: TensorDictBase) -> Future:
        """Submits ``td`` (a shallow copy, so the caller's TensorDict is not written
        to) and returns a future of the result."""
        return self._transport.submit(td.copy())
