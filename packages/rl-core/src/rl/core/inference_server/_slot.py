"""``SlotTransport``: one fixed slot per client thread, no shared request queue."""

from __future__ import annotations

import itertools
import threading
import time

from tensordict import TensorDictBase

from ._transport import InferenceTransport

__all__ = ["SlotTransport"]


class _SlotPending:
    """The answer a slot's client waits for (one request in flight per slot)."""

    def __init__(self, transport: SlotTransport, slot_id: int):
        self._transport = transport
        self._slot_id = slot_id

    def done(self) -> bool:
        return self._transport._answered[self._slot_id].is_set()

    def result(self, timeout: float | None = None) -> TensorDictBase:
        """The answer; raises :class:`TimeoutError` after ``timeout`` seconds (the
        request stays in flight)."""
        return self._transport._take(self._slot_id, timeout)


class _SlotClient:
    """The callable handle on one slot of a :class:`SlotTransport`."""

    def __init__(self, transport: SlotTransport, slot_id: int):
        self._transport = transport
        self.slot_id = slot_id

    def submit(self, td: TensorDictBase) -> _SlotPending:
        """Writes ``td`` into the slot; the answer comes from ``result()``."""
        self._transport._put(self.slot_id, td.copy())
        return _SlotPending(self._transport, self.slot_id)

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        """Writes ``td`` into the slot and blocks until the server answers."""
        return self.submit(td).result()


class SlotTransport(InferenceTransport):
    """In-process transport with one slot per client thread.

    Each client (from :meth:`client`, at most ``num_slots`` of them) owns a slot: it
    writes its request there and waits on the slot's event; the server sweeps the
    slots for ready requests. No lock is taken per request and no future is
    allocated, which suits a fixed set of environment threads (the default transport
    of :class:`~rl.collectors.AsyncBatchedCollector`). Each client holds at most one
    request in flight: call ``client(td)``, or ``client.submit(td).result()`` before
    the next ``submit``.

    Args:
        num_slots (int): the number of slots, i.e. of clients.

    Keyword Args:
        preallocate (bool, optional): copy requests into one preallocated
            ``[num_slots, ...]`` TensorDict (built from the first request) instead of
            keeping each request object. Every request must then have the first one's
            keys and shapes. Defaults to ``False``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.core.inference_server import InferenceServer, SlotTransport
        >>> transport = SlotTransport(2)
        >>> policy = TensorDictModule(lambda x: x + 1, ["obs"], ["act"])
        >>> with InferenceServer(policy, transport):
        ...     transport.client()(TensorDict(obs=torch.zeros(1)))["act"].tolist()
        [1.0]
    """

    def __init__(self, num_slots: int, *, preallocate: bool = False):
        if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"num_slots must be a positive int, got {num_slots!r}")
        self._num_slots = num_slots
        self._preallocate = bool(preallocate)
        self._counter = itertools.count()
        self._requests: list[TensorDictBase | None] = [None] * num_slots
        self._ready = [False] * num_slots
        self._submitted_at: list[float | None] = [None] * num_slots
        self._answers: list[TensorDictBase | BaseException | None] = [None] * num_slots
        self._answered = [threading.Event() for _ in range(num_slots)]
        self._work = threading.Condition(threading.Lock())
        self._buffer: TensorDictBase | None = None

    # ----------------------------------------------------------------- client side
    def _put(self, slot: int, td: TensorDictBase) -> None:
        self._requests[slot] = td
        self._submitted_at[slot] = time.monotonic()
        # the ready flag is written last: the server reads the slot once it sees it
        self._ready[slot] = True
        with self._work:
            self._work.notify()

    def _take(self, slot: int, timeout: float | None = None) -> TensorDictBase:
        event = self._answered[slot]
        if not event.wait(timeout):
            raise TimeoutError(f"no answer in slot {slot} within {timeout} s")
        event.clear()
        answer, self._answers[slot] = self._answers[slot], None
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def client(self) -> _SlotClient:
        """A client owning the next free slot.

        Raises:
            RuntimeError: all ``num_slots`` slots already have a client.
        """
        slot = next(self._counter)
        if slot >= self._num_slots:
            raise RuntimeError(
                f"SlotTransport has {self._num_slots} slots and client() was called "
                f"{slot + 1} times; build it with num_slots >= the number of clients"
            )
        return _SlotClient(self, slot)

    def submit(self, td: TensorDictBase):
        """Not supported: requests go through a slot-bound :meth:`client`."""
        raise NotImplementedError(
            "SlotTransport has no submit(); call transport.client() for a slot-bound client"
        )

    # ----------------------------------------------------------------- server side
    def wait_for_work(self, timeout: float) -> None:
        """Returns at once if a slot is ready, else waits up to ``timeout``."""
        with self._work:
            if not any(self._ready):
                self._work.wait(timeout=timeout)

    def drain(self, max_items: int) -> tuple[list[TensorDictBase], list[int]]:
        """The ready requests (at most ``max_items``) and their slot ids."""
        items, slots, _ = self.drain_with_timing(max_items)
        return items, slots

    def drain_with_timing(
        self, max_items: int
    ) -> tuple[list[TensorDictBase], list[int], list[float | None]]:
        """As :meth:`drain`, with the submission time of each request."""
        items: list[TensorDictBase] = []
        slots: list[int] = []
        stamps: list[float | None] = []
        for i in range(self._num_slots):
            if len(slots) >= max_items:
                break
            if not self._ready[i]:
                continue
            self._ready[i] = False
            request, self._requests[i] = self._requests[i], None
            stamps.append(self._submitted_at[i])
            if self._preallocate:
                if self._buffer is None:
                    self._buffer = request.expand(self._num_slots, *request.batch_size).clone()
                self._buffer[i].update_(request)
                request = self._buffer[i]
            items.append(request)
            slots.append(i)
        return items, slots, stamps

    def resolve(self, callback: int, result: TensorDictBase) -> None:
        """Writes the answer into the slot and wakes its client."""
        self._answers[callback] = result
        self._answered[callback].set()

    def resolve_exception(self, callback: int, exc: BaseException) -> None:
        """Raises ``exc`` in the slot's client."""
        self._answers[callback] = exc
        self._answered[callback].set()
