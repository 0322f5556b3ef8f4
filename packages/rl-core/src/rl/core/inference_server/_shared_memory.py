"""``SharedMemoryTransport``: requests and replies in preallocated shared-memory slots."""

from __future__ import annotations

import multiprocessing as mp
import queue
from multiprocessing.context import BaseContext
from typing import Any

import torch
from tensordict import TensorDictBase

from ._mailbox import MailboxClient, MailboxFuture
from ._queue_transport import QueueTransport

__all__ = ["ProcessSlotTransport", "SharedMemoryTransport"]

_MISSING = object()


class _SlotFuture:
    """The reply to one request: read from its response slot, which is then freed."""

    def __init__(self, inner: MailboxFuture, slot: int, owner: _SharedMemoryClient):
        self._inner = inner
        self._slot = slot
        self._owner = owner
        self._outcome: Any = _MISSING

    def done(self) -> bool:
        """Whether :meth:`result` returns without blocking."""
        return self._outcome is not _MISSING or self._inner.done()

    def result(self, timeout: float | None = None) -> TensorDictBase:
        """The reply. A timeout (:class:`queue.Empty`) keeps the slot: the server may
        still write it, and ``result`` can be called again."""
        if self._outcome is _MISSING:
            try:
                self._inner.result(timeout=timeout)
            except queue.Empty:
                raise
            except BaseException as exc:  # noqa: BLE001 - the server's error, re-raised below
                self._outcome = exc
            else:
                reply = self._owner._response_slots[self._slot]
                self._outcome = reply.clone() if self._owner._copy_result else reply
            self._owner._free.put(self._slot)
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        return self._outcome


class _SharedMemoryClient:
    """A client of a :class:`SharedMemoryTransport` (picklable: pass it to a worker)."""

    def __init__(self, inner: MailboxClient, transport: SharedMemoryTransport):
        self._inner = inner
        self._request_slots = transport._request_slots
        self._response_slots = transport._response_slots
        self._free = transport._free
        self._keys = transport._request_keys
        self._copy_result = transport._copy_result

    @property
    def client_id(self) -> int:
        """This client's id."""
        return self._inner.client_id

    def submit(self, td: TensorDictBase) -> _SlotFuture:
        """Copies the declared keys of ``td`` into a free slot (waiting for one when all
        are in flight) and sends the slot's index.

        Raises:
            KeyError: ``td`` lacks a key of ``request_spec``.
            ValueError: a value is not on the CPU.
        """
        missing = [k for k in self._keys if k not in td.keys(True, True)]
        if missing:
            raise KeyError(
                f"SharedMemoryTransport request lacks the key(s) {missing} of request_spec "
                f"(got keys {sorted(map(str, td.keys(True, True)))})"
            )
        request = td.select(*self._keys)
        for key, value in request.items(True, True):
            if value.device.type != "cpu":
                raise ValueError(
                    f"SharedMemoryTransport carries CPU tensors only; {key!r} is on "
                    f"{value.device}: keep workers on the CPU and let the server move "
                    "batches to the policy device"
                )
        slot = self._free.get()
        try:
            self._request_slots[slot].update_(request)
            inner = self._inner.submit(slot)
        except BaseException:
            self._free.put(slot)
            raise
        return _SlotFuture(inner, slot, self)

    def __call__(self, td: TensorDictBase, timeout: float | None = None) -> TensorDictBase:
        """Submits ``td`` and blocks for the reply."""
        return self.submit(td).result(timeout=timeout)


class SharedMemoryTransport(QueueTransport):
    """Cross-process transport whose payloads stay in shared memory.

    Two banks of ``num_slots`` slots (one laid out as ``request_spec``, one as
    ``response_spec``) live in CPU shared memory; a client takes a free slot, copies
    its request in, and only the slot's index travels through a queue. The server
    reads the slots it is sent, runs the policy, and writes each answer into the same
    slot of the response bank. Large observations (images) are then never pickled.
    ``num_slots`` bounds the requests in flight across all clients; a client waits
    for a free slot when all are taken.

    Only the keys of the specs travel: other keys of a request or of the policy's
    output are dropped, a missing declared key raises :class:`KeyError`. Leaves must
    be CPU tensors (the server moves batches to the policy's device and back).

    Args:
        request_spec (TensorDictBase): one request as an example (keys, shapes,
            dtypes).
        response_spec (TensorDictBase): one answer as an example, including the keys
            the server adds (``"policy_version"``) that should reach the clients.

    Keyword Args:
        num_slots (int): the number of slots.
        ctx (multiprocessing context, optional): where the queues come from. Defaults
            to ``multiprocessing.get_context("spawn")``.
        copy_result (bool, optional): return a copy of the response slot (default) or
            a view of it, valid until the slot is used again.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.core.inference_server import InferenceServer, SharedMemoryTransport
        >>> transport = SharedMemoryTransport(
        ...     TensorDict(obs=torch.zeros(3)), TensorDict(act=torch.zeros(3)), num_slots=4
        ... )
        >>> client = transport.client()  # before starting worker processes
        >>> policy = TensorDictModule(lambda x: -x, ["obs"], ["act"])
        >>> with InferenceServer(policy, transport):
        ...     client(TensorDict(obs=torch.ones(3)))["act"].tolist()
        [-1.0, -1.0, -1.0]
    """

    def __init__(
        self,
        request_spec: TensorDictBase,
        response_spec: TensorDictBase,
        *,
        num_slots: int,
        ctx: BaseContext | None = None,
        copy_result: bool = True,
    ):
        super().__init__()
        if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"num_slots must be a positive int, got {num_slots!r}")
        self._num_slots = num_slots
        self._ctx = ctx if ctx is not None else mp.get_context("spawn")
        self._copy_result = bool(copy_result)
        self._request_slots = self._bank(request_spec, "request_spec")
        self._response_slots = self._bank(response_spec, "response_spec")
        self._request_keys = list(request_spec.keys(True, True))
        self._response_keys = list(response_spec.keys(True, True))
        self._free = self._ctx.Queue()
        for slot in range(num_slots):
            self._free.put(slot)
        self._request_queue = self._ctx.Queue()
        self._reply_queues: dict[int, Any] = {}
        alive = self._ctx.Event()
        alive.set()
        self.set_peer_alive(alive)

    def _bank(self, spec: TensorDictBase, name: str) -> TensorDictBase:
        if not isinstance(spec, TensorDictBase):
            raise TypeError(f"{name} must be a TensorDict, got {type(spec).__name__}")
        leaves = list(
            spec.items(True, True, is_leaf=lambda cls: not issubclass(cls, TensorDictBase))
        )
        if not leaves:
            raise ValueError(f"{name} must hold at least one tensor leaf")
        for key, value in leaves:
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"SharedMemoryTransport specs hold tensor leaves only; {name}[{key!r}] is a "
                    f"{type(value).__name__} (encode it as a tensor or use MPTransport)"
                )
            if value.device.type != "cpu":
                raise ValueError(
                    f"SharedMemoryTransport slots live in CPU shared memory; {name}[{key!r}] "
                    f"is on {value.device}"
                )
        return spec.expand(self._num_slots, *spec.batch_size).clone().share_memory_()

    def _make_reply_queue(self) -> Any:
        return self._ctx.Queue()

    def client(self) -> _SharedMemoryClient:
        """A client with its own reply queue; create it before starting the worker
        process that uses it."""
        return _SharedMemoryClient(self._box().client(), self)

    def drain_with_timing(
        self, max_items: int
    ) -> tuple[list[TensorDictBase], list[tuple[tuple[int, int], int]], list[float]]:
        """The request slots sent (shallow copies of shared views, which the policy may
        write new keys into), their callbacks and submission times."""
        slots, callbacks, stamps = self._box().drain(max_items)
        items = [self._request_slots[slot].copy() for slot in slots]
        return items, list(zip(callbacks, slots)), stamps

    def drain(self, max_items: int) -> tuple[list[TensorDictBase], list]:
        """As :meth:`drain_with_timing`, without the times."""
        items, callbacks, _ = self.drain_with_timing(max_items)
        return items, callbacks

    def resolve(self, callback: tuple[tuple[int, int], int], result: TensorDictBase) -> None:
        """Writes the declared keys of ``result`` into the response slot (to the CPU)
        and tells the client.

        Raises:
            KeyError: ``result`` lacks a key of ``response_spec``.
        """
        inner, slot = callback
        missing = [k for k in self._response_keys if k not in result.keys(True, True)]
        if missing:
            raise KeyError(
                f"the policy's output lacks the key(s) {missing} of response_spec "
                f"(got keys {sorted(map(str, result.keys(True, True)))})"
            )
        self._response_slots[slot].update_(result.select(*self._response_keys))
        self._box().resolve(inner, slot)

    def resolve_exception(self, callback: tuple[tuple[int, int], int], exc: BaseException) -> None:
        """Raises ``exc`` in the client (which frees the slot)."""
        inner, _ = callback
        self._box().resolve(inner, exc)


#: TorchRL 0.14.1's second name of :class:`SharedMemoryTransport` (the same transport:
#: per-process clients exchanging fixed slots of shared memory)
ProcessSlotTransport = SharedMemoryTransport
