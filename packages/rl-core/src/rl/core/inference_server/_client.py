"""``PolicyClientModule``: a server client that looks like a TensorDict policy."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, TensorDictModuleBase
from tensordict.nn.probabilistic import interaction_type as current_interaction_type
from tensordict.utils import NestedKey

from ._transport import InferenceTransport

__all__ = ["PolicyClientModule"]

#: the request entry that carries the caller's exploration type to the server (a
#: private key: collectors leave it out of their batches)
INTERACTION_KEY = "_inference_interaction_type"
_NO_INTERACTION = -1
INTERACTION_CODES = {t: i for i, t in enumerate(InteractionType)}
CODE_INTERACTIONS = {i: t for t, i in INTERACTION_CODES.items()}


class _Done:
    """The outcome of a call that ran at once (a plain callable client)."""

    def __init__(self, outcome: TensorDictBase | BaseException):
        self._outcome = outcome

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> TensorDictBase:
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        return self._outcome


class _Guarded:
    """A future that frees one ``max_inflight`` place once its request completed
    (never on a ``result`` timeout: the request still runs on the server)."""

    def __init__(self, future: Any, release: Callable[[], None]):
        self.future = future
        self._release = release
        self._released = False
        self._lock = threading.Lock()
        add_done_callback = getattr(future, "add_done_callback", None)
        if add_done_callback is not None:
            add_done_callback(lambda _: self._release_once())

    def _release_once(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._release()

    def done(self) -> bool:
        finished = self.future.done()
        if finished:
            self._release_once()
        return finished

    def result(self, timeout: float | None = None) -> TensorDictBase:
        try:
            out = self.future.result(timeout=timeout)
        except (queue.Empty, TimeoutError):
            raise
        except BaseException:
            self._release_once()
            raise
        self._release_once()
        return out

    def __del__(self) -> None:
        # an abandoned future must not hold its place for ever
        self._release_once()


class PolicyClientModule(TensorDictModuleBase):
    """A client of an :class:`~rl.core.inference_server.InferenceServer` usable as a
    policy: ``module(td)`` sends ``td`` to the server and returns its answer.

    The answer is a *new* TensorDict (it crossed a transport): use the return value,
    the input is not written to. The caller's exploration type
    (:func:`tensordict.nn.interaction_type`, or ``interaction_type`` when given)
    travels with each request and the server runs the policy under it. The module
    holds no right over the server's life: it is cheap and picklable (hand it to
    worker processes) and cannot start or stop the server.

    Args:
        client: a client (``transport.client()``, ``server.client()``), a transport
            (its :meth:`~InferenceTransport.client` is taken) or any callable from a
            TensorDict to a TensorDict.

    Keyword Args:
        in_keys: the input keys advertised (the whole input is sent).
        out_keys: the output keys advertised.
        max_inflight: at most this many unanswered :meth:`submit` calls; the next one
            waits for a place. ``None`` (default): no bound.
        interaction_type: run the remote policy under this exploration type whatever
            the caller's is. ``None`` (default): the caller's.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.core.inference_server import (
        ...     InferenceServer, PolicyClientModule, ThreadingTransport)
        >>> policy = TensorDictModule(torch.nn.Linear(4, 2), ["observation"], ["action"])
        >>> transport = ThreadingTransport()
        >>> with InferenceServer(policy, transport):
        ...     remote = PolicyClientModule(transport, in_keys=["observation"], out_keys=["action"])
        ...     out = remote(TensorDict(observation=torch.randn(4)))
        >>> out["action"].shape
        torch.Size([2])
    """

    def __init__(
        self,
        client: Callable[[TensorDictBase], TensorDictBase] | InferenceTransport | Any,
        *,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        max_inflight: int | None = None,
        interaction_type: InteractionType | None = None,
    ) -> None:
        super().__init__()
        owner = callable(getattr(client, "client", None)) and hasattr(client, "shutdown")
        if isinstance(client, InferenceTransport) or owner:
            # a transport, or a server's owner: keep only a client (no right over its life)
            client = client.client()
        if max_inflight is not None and max_inflight < 1:
            raise ValueError(
                f"max_inflight must be at least 1 or None (no bound), got {max_inflight}"
            )
        if interaction_type is not None and not isinstance(interaction_type, InteractionType):
            raise TypeError(
                f"interaction_type must be an InteractionType or None, got {interaction_type!r}"
            )
        self.client = client
        self.in_keys = list(in_keys or [])
        self.out_keys = list(out_keys or [])
        self.max_inflight = max_inflight
        self.interaction_type = interaction_type
        self._inflight_sem = threading.BoundedSemaphore(max_inflight) if max_inflight else None

    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())
        state["_inflight_sem"] = None  # a semaphore is per process: rebuilt when unpickled
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        if self.max_inflight is not None:
            self._inflight_sem = threading.BoundedSemaphore(self.max_inflight)

    def _acquire_inflight(self) -> Callable[[], None]:
        if self._inflight_sem is None:
            return lambda: None
        self._inflight_sem.acquire()
        return self._inflight_sem.release

    def _with_interaction(self, td: TensorDictBase) -> TensorDictBase:
        kind = self.interaction_type or current_interaction_type()
        code = _NO_INTERACTION if kind is None else INTERACTION_CODES[kind]
        td = td.copy()
        device = td.device or torch.device("cpu")
        td.set(INTERACTION_KEY, torch.full(td.batch_size, code, dtype=torch.int8, device=device))
        return td

    def submit(self, tensordict: TensorDictBase) -> Future | Any:
        """Sends ``tensordict``; returns a future-like object (``result()``, ``done()``).

        A client with a ``submit`` method raises submission errors here; a plain
        callable runs now and its error is raised by ``result()``.
        """
        release = self._acquire_inflight()
        submit = getattr(self.client, "submit", None)
        if submit is None:
            try:
                return _Done(self.client(tensordict))
            except Exception as exc:  # noqa: BLE001 - deferred to result(), as a future
                return _Done(exc)
            finally:
                release()
        try:
            future = submit(self._with_interaction(tensordict))
        except BaseException:
            release()
            raise
        return _Guarded(future, release)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Sends ``tensordict`` and returns the server's answer."""
        return self.submit(tensordict).result()
