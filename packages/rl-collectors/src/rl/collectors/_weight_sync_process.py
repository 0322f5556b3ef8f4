"""Weight-sync schemes between processes of one machine: shared memory, queues, none.

:class:`SharedMemWeightSyncScheme` keeps one shared-memory copy of the weights per device
(or per worker, ``per_worker_weights=True``); each worker's model is made of those
tensors, so an update written by the sender is what the workers read. A ``"receive"``
instruction then tells each worker's collector that its policy changed (its version
rises, a copy on another device is refreshed) and, with ``sync=True``, the sender waits
for every worker's acknowledgement. :class:`MultiProcessWeightSyncScheme` sends a copy of
the weights through a queue instead and each worker copies them into its own model.

In a worker, weights are applied between batches: the worker's collector holds its
``receive_lock`` while it collects a batch, and the receiver thread takes it.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue as queue_module
import time
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from ._weight_sync import (
    WEIGHT_SYNC_TIMEOUT,
    TransportBackend,
    WeightSyncScheme,
    register_weight_sync_backend,
    resolve_model,
)

__all__ = [
    "SharedMemTransport",
    "MPTransport",
    "SharedMemWeightSyncScheme",
    "MultiProcessWeightSyncScheme",
    "NoWeightSyncScheme",
]

_POLL_S = 0.1


def _flat_to_nested(weights: Any) -> TensorDictBase:
    if isinstance(weights, nn.Module):
        return TensorDict.from_module(weights).data
    if isinstance(weights, dict):
        td = TensorDict(weights, batch_size=[])
        return td.unflatten_keys(".") if any("." in k for k in weights) else td
    if isinstance(weights, TensorDictBase):
        if any(isinstance(k, str) and "." in k for k in weights.keys()):
            return weights.unflatten_keys(".")
        return weights
    raise TypeError(
        f"weights must be an nn.Module, a TensorDict or a state dict, got {type(weights).__name__}"
    )


def _close_queue(q: Any) -> None:
    with contextlib.suppress(Exception):
        q.cancel_join_thread()
        q.close()


class SharedMemTransport:
    """Shared-memory buffers handed to the workers once, then updated in place.

    :meth:`register_weights` takes the buffers (worker index -> TensorDict) and one queue
    per worker; :meth:`setup_connection_and_weights_on_sender` puts each worker's buffer
    in its queue (tensors in shared memory travel as handles), and
    :meth:`send_weights` writes new values into the buffers.
    """

    def __init__(self) -> None:
        self._params_map: dict[int, TensorDictBase] | None = None
        self._weight_queues: dict[int, Any] | None = None
        self._unique_weights: list[TensorDictBase] | None = None
        self._per_worker = False
        self._worker_to_weights_idx: dict[int, int] = {}

    @property
    def unique_weights(self) -> list[TensorDictBase]:
        """The distinct buffers (one per device, or one per worker)."""
        if self._unique_weights is None:
            raise RuntimeError("Unique weights not set. Call register_weights() first.")
        return self._unique_weights

    def register_weights(
        self,
        params_map: dict[int, TensorDictBase],
        init_queues: dict[int, Any],
        per_worker: bool = False,
    ) -> None:
        """Takes the buffers and the queues that hand them out (see the class)."""
        self._weight_queues = init_queues
        self._params_map = params_map
        self._per_worker = per_worker
        self._unique_weights = []
        self._worker_to_weights_idx = {}
        for worker_idx, weights in params_map.items():
            for index, known in enumerate(self._unique_weights):
                if known is weights and not per_worker:
                    self._worker_to_weights_idx[worker_idx] = index
                    break
            else:
                self._worker_to_weights_idx[worker_idx] = len(self._unique_weights)
                self._unique_weights.append(weights)

    def setup_connection_and_weights_on_sender(self) -> None:
        """Puts each worker's buffer in its queue."""
        if self._weight_queues is None or self._params_map is None:
            raise RuntimeError("Queues not created yet. Call init_on_sender() first.")
        for worker_idx, q in self._weight_queues.items():
            q.put(self._params_map[worker_idx])

    def setup_connection_and_weights_on_receiver(
        self,
        *,
        worker_idx: int | None = None,
        weights: Any = None,
        model: Any = None,
        strategy: Any = None,
        timeout: float = WEIGHT_SYNC_TIMEOUT,
    ) -> TensorDictBase:
        """The shared buffer of worker ``worker_idx`` (waits up to ``timeout`` s)."""
        if self._weight_queues is None:
            raise RuntimeError("Queues not created yet. Call init_on_sender() first.")
        if worker_idx not in self._weight_queues:
            raise RuntimeError(f"Worker {worker_idx} not registered in queues.")
        try:
            return self._weight_queues[worker_idx].get(timeout=timeout)
        except queue_module.Empty:
            raise TimeoutError(
                f"worker {worker_idx} got no shared weights within {timeout} s: the sender "
                "must call connect() once the workers run"
            ) from None

    def send_weights(
        self, weights: TensorDictBase | dict, worker_ids: list[int] | None = None
    ) -> None:
        """Writes ``weights`` into the buffers: one TensorDict for all (or the workers
        ``worker_ids`` with per-worker buffers), or ``{worker_idx: weights}``.

        Raises:
            ValueError: per-worker weights without per-worker buffers, or an unknown worker.
        """
        if self._unique_weights is None:
            raise RuntimeError("Unique weights not set. Call register_weights() first.")
        if isinstance(weights, dict) and weights and all(isinstance(k, int) for k in weights):
            if not self._per_worker:
                raise ValueError(
                    "Per-worker weights dict provided but register_weights() was not called "
                    "with per_worker=True. Cannot update individual worker weights."
                )
            for worker_idx, worker_weights in weights.items():
                self._update_single_worker(worker_idx, worker_weights)
            return
        weights = _flat_to_nested(weights).detach()
        if self._per_worker and worker_ids is not None:
            for worker_idx in [worker_ids] if isinstance(worker_ids, int) else worker_ids:
                self._update_single_worker(worker_idx, weights)
            return
        for buffer in self._unique_weights:
            buffer.data.update_(weights.data)

    def _update_single_worker(self, worker_idx: int, weights: Any) -> None:
        if worker_idx not in self._worker_to_weights_idx:
            raise ValueError(
                f"Worker {worker_idx} not registered (workers: {sorted(self._worker_to_weights_idx)})"
            )
        buffer = self._unique_weights[self._worker_to_weights_idx[worker_idx]]
        buffer.data.update_(_flat_to_nested(weights).detach().data)

    def receive_weights(
        self,
        timeout: float | None = None,
        *,
        weights: Any = None,
        model: Any = None,
        strategy: Any = None,
    ) -> Any | None:
        """Applies the shared ``weights`` to ``model`` (they are already there when the
        model is made of them); returns them."""
        if model is not None and strategy is not None and weights is not None:
            strategy.apply_weights(model, weights)
            return weights
        return None

    def send_ack(self, message: str = "updated") -> None:
        """Shared memory needs no acknowledgement from the transport (the scheme sends it)."""


class MPTransport:
    """Weights through a multiprocessing queue: each send puts a copy, the worker reads it.

    Args:
        weight_queue: the queue the weights travel on.
        ack_queue: where the worker acknowledges (optional).
        timeout: seconds a receiver waits for weights (default 10).
    """

    def __init__(self, weight_queue: Any, ack_queue: Any = None, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self.weight_queue = weight_queue
        self.ack_queue = ack_queue

    def send_weights(self, weights: Any) -> None:
        """Puts ``weights`` in the queue."""
        self.send_weights_async(weights)

    def send_weights_async(self, weights: Any, model_id: str = "policy") -> None:
        """Puts ``weights`` in the queue without waiting for the worker."""
        self.weight_queue.put(((model_id, weights), "update_weights"))

    def wait_ack(self) -> None:
        """Waits for the worker's acknowledgement (when there is an ack queue)."""
        if self.ack_queue is not None:
            self.ack_queue.get(timeout=self.timeout)

    def send_ack(self, message: str = "updated") -> None:
        if self.ack_queue is not None:
            self.ack_queue.put(message)

    def _get(self, timeout: float | None) -> Any:
        timeout = self.timeout if timeout is None else timeout
        try:
            data, msg = self.weight_queue.get(timeout=timeout)
        except queue_module.Empty:
            raise TimeoutError(f"no weights arrived on the queue within {timeout} s") from None
        if msg != "update_weights":
            raise ValueError(f"Expected 'update_weights' but got {msg!r}")
        return data[1]

    def receive_weights(
        self,
        timeout: float | None = None,
        *,
        weights: Any = None,
        model: Any = None,
        strategy: Any = None,
    ) -> Any | None:
        """Reads weights from the queue and copies them into ``model``; returns them."""
        received = self._get(timeout)
        if model is not None and strategy is not None:
            strategy.apply_weights(model, received)
        return received

    def setup_connection_and_weights_on_sender(self) -> None:
        """Nothing: the scheme sends the first weights."""

    def setup_connection_and_weights_on_receiver(
        self, *, worker_idx: int, weights: Any = None, model: Any = None, strategy: Any = None
    ) -> Any:
        """The first weights (waits up to ``timeout`` s)."""
        return self._get(max(self.timeout, WEIGHT_SYNC_TIMEOUT))


@register_weight_sync_backend("shared")
class SharedMemWeightSyncScheme(WeightSyncScheme):
    """Weights in shared memory that the workers' models are made of.

    The sender keeps one shared buffer per device its workers' policies use (one per
    worker with ``per_worker_weights=True``, e.g. distinct ``policy_factory`` per worker)
    and hands it to each worker at :meth:`connect`; the worker's model then *is* that
    buffer. On the policy's own device the buffer is the policy's tensors, moved to shared
    memory (as TorchRL): in-place changes to the policy reach the workers even before
    :meth:`send`.
    :meth:`send` writes new values into it (a ``{worker_idx: weights}`` dict writes each
    worker's own copy) and tells the workers, whose collectors refresh their policy and
    bump their policy version; with ``sync=True`` (default) it returns once every worker
    acknowledged. A worker that died meanwhile raises a ``RuntimeError`` naming it.
    As the workers read the shared tensors themselves, a batch an asynchronous worker is
    collecting while the sender writes may mix old and new weights
    (:class:`MultiProcessWeightSyncScheme` applies copies between batches).

    Args:
        strategy: ``"tensordict"`` or ``"state_dict"`` (see :class:`WeightStrategy`).
        sync: wait for the workers' acknowledgements in :meth:`send`.
        per_worker_weights: one copy per worker instead of one per device.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.collectors import MultiSyncCollector, SharedMemWeightSyncScheme
        >>> from rl.envs import PendulumEnv
        >>> policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        >>> collector = MultiSyncCollector(
        ...     [PendulumEnv, PendulumEnv], policy, frames_per_batch=20,
        ...     weight_sync_schemes={"policy": SharedMemWeightSyncScheme()},
        ... )
        >>> with torch.no_grad():
        ...     _ = policy.module.bias.fill_(0.5)
        >>> collector.update_policy_weights_()  # the workers act with bias 0.5 from now on
        >>> collector.shutdown()
    """

    def __init__(
        self, strategy: str = "tensordict", sync: bool = True, per_worker_weights: bool = False
    ) -> None:
        super().__init__(strategy)
        self.sync = sync
        self.per_worker_weights = per_worker_weights
        self._shared_transport = SharedMemTransport()
        self._weight_init_queues: dict[int, Any] = {}
        self._instruction_queues: dict[int, Any] = {}
        self._ack_queues: dict[int, Any] = {}
        self._receiver_instruction_queue: Any = None
        self._receiver_ack_queue: Any = None
        self._receiver_shared_weights: TensorDictBase | None = None

    # ------------------------------------------------------------------- sender
    def _init_on_sender_impl(
        self,
        *,
        model_id: str | None = None,
        context: Any = None,
        weights: TensorDictBase | None = None,
        model: nn.Module | None = None,
        params_map: dict[int, TensorDictBase] | None = None,
        devices: list[torch.device] | None = None,
        device_map_fn: Callable[[int, TensorDictBase], TensorDictBase] | None = None,
        num_workers: int | None = None,
        ctx: Any = None,
    ) -> None:
        if ctx is None:
            ctx = mp.get_context()
        params_map = self._get_params_map(
            context=context, model_id=model_id, weights=weights, model=model,
            params_map=params_map, devices=devices, device_map_fn=device_map_fn,
            num_workers=num_workers,
        )  # fmt: skip
        self._make_queues(list(params_map), ctx)
        self.shared_transport.register_weights(
            params_map, self._weight_init_queues, per_worker=self.per_worker_weights
        )
        self.model_id = model_id
        if context is not None:
            self.context = context

    def _make_queues(self, workers: list[int], ctx: Any) -> None:
        for worker_idx in workers:
            for mapping in (self._weight_init_queues, self._instruction_queues, self._ack_queues):
                if worker_idx not in mapping:
                    mapping[worker_idx] = ctx.Queue()

    def _source_weights(
        self, context: Any, model_id: str | None, worker_idx: int, weights: Any, model: Any
    ) -> TensorDictBase:
        """The weights worker ``worker_idx`` starts from."""
        if weights is not None:
            return _flat_to_nested(weights).data
        if model is not None:
            return TensorDict.from_module(model).data
        worker_model = getattr(context, "worker_model", None)
        source = (
            worker_model(model_id, worker_idx)
            if callable(worker_model)
            else resolve_model(context, model_id)
        )
        if source is None:
            raise RuntimeError(
                f"{type(self).__name__}: the context has no model at {model_id!r} to read "
                "weights from"
            )
        return _flat_to_nested(source).data

    def _get_params_map(
        self,
        *,
        context: Any = None,
        model_id: str | None = None,
        weights: TensorDictBase | None = None,
        model: nn.Module | None = None,
        params_map: dict[int, TensorDictBase] | None = None,
        devices: list[torch.device] | None = None,
        device_map_fn: Callable | None = None,
        num_workers: int | None = None,
    ) -> dict[int, TensorDictBase]:
        """Worker index -> the shared weights it reads (deduplicated by device unless
        ``per_worker_weights``)."""
        if params_map is not None:
            if any(x is not None for x in (context, weights, model, devices, device_map_fn)):
                raise ValueError(
                    "params_map was given together with context, weights, model, devices or "
                    "device_map_fn: pass params_map alone"
                )
            out = {}
            for worker_idx, td in params_map.items():
                td = _flat_to_nested(td)
                if td.device is None or td.device.type == "cpu":
                    if not td.is_shared():
                        td.share_memory_()
                out[worker_idx] = td
            return out
        if context is not None:
            if model_id is None:
                raise ValueError("model_id is required when context is provided")
            num_workers = getattr(context, "num_workers", None)
            if num_workers is None:
                raise ValueError(
                    f"{type(self).__name__} needs a context with workers (num_workers); "
                    f"{type(context).__name__} has none"
                )
            devices = list(getattr(context, "worker_policy_devices", None) or [None] * num_workers)
        elif weights is None and model is None:
            raise ValueError(
                "Either params_map, model_id + context or model/weights + devices must be provided."
            )
        if device_map_fn is not None:
            if num_workers is None:
                raise ValueError("device_map_fn requires num_workers")
        elif devices is not None:
            if num_workers is not None and num_workers != len(devices):
                raise ValueError(
                    f"devices has {len(devices)} entries but num_workers={num_workers}"
                )
            num_workers = len(devices)
        else:
            raise ValueError("devices or device_map_fn (with num_workers) must be provided")
        out: dict[int, TensorDictBase] = {}
        by_device: dict[Any, TensorDictBase] = {}
        for worker_idx in range(num_workers):
            source = self._source_weights(context, model_id, worker_idx, weights, model)
            if device_map_fn is not None:
                out[worker_idx] = _shared_copy(device_map_fn(worker_idx, source), None)
                continue
            device = None if devices[worker_idx] is None else torch.device(devices[worker_idx])
            if self.per_worker_weights:
                out[worker_idx] = _shared_copy(source, device)
            else:
                if device not in by_device:
                    if device is None or _device_of(source) in (None, device):
                        # as TorchRL: on the model's own device the buffer is the model's
                        # tensors, moved to shared memory (in-place changes reach the workers)
                        by_device[device] = _share_in_place(source)
                    else:
                        by_device[device] = _shared_copy(source, device)
                out[worker_idx] = by_device[device]
        return out

    def send(
        self,
        weights: TensorDictBase | dict[int, TensorDictBase] | None = None,
        worker_ids: int | list[int] | None = None,
    ) -> None:
        """Writes new weights into shared memory and tells the workers (see the class).

        Args:
            weights: ``None`` (the context's model), a module, a TensorDict / state dict
                (every worker), or ``{worker_idx: weights}`` (``per_worker_weights``).
            worker_ids: the workers to tell (all by default).
        """
        self._check_sender()
        per_worker = (
            isinstance(weights, dict) and weights and all(isinstance(k, int) for k in weights)
        )
        if per_worker:
            if not self.per_worker_weights:
                raise ValueError(
                    "Per-worker weights dict provided but scheme was not initialized with "
                    "per_worker_weights=True."
                )
            self.shared_transport.send_weights(weights)
            targets = list(weights) if worker_ids is None else worker_ids
        else:
            fresh = self.prepare_weights(weights, self._model_id, self._strategy, self.context)
            if fresh is not None:
                self.shared_transport.send_weights(fresh, worker_ids=worker_ids)
            targets = worker_ids
        self._send_instruction("receive", worker_ids=targets)
        if self.sync:
            self._wait_for_ack(worker_ids=targets)

    def _send_instruction(
        self, instruction: str = "receive", worker_ids: int | list[int] | None = None
    ) -> None:
        if not self._instruction_queues:
            raise RuntimeError(
                "Instruction queues not created. init_on_sender() must be called first."
            )
        for worker_idx in self._targets(worker_ids, self._instruction_queues):
            self._instruction_queues[worker_idx].put(instruction)

    @staticmethod
    def _targets(worker_ids: int | list[int] | None, mapping: dict) -> list[int]:
        if worker_ids is None:
            return list(mapping)
        targets = [worker_ids] if isinstance(worker_ids, int) else list(worker_ids)
        for worker_idx in targets:
            if worker_idx not in mapping:
                raise ValueError(f"Worker {worker_idx} not registered (workers: {sorted(mapping)})")
        return targets

    def _wait_for_ack(
        self, worker_ids: int | list[int] | None = None, timeout: float | None = None
    ) -> None:
        """Waits for each worker's acknowledgement; a dead worker (the context's
        ``alive()``) or a failed update raises ``RuntimeError`` naming the worker."""
        if not self._ack_queues:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        for worker_idx in self._targets(worker_ids, self._ack_queues):
            while True:
                try:
                    ack = self._ack_queues[worker_idx].get(timeout=0.5)
                    break
                except queue_module.Empty:
                    self._check_worker_alive(worker_idx)
                    if deadline is not None and time.monotonic() > deadline:
                        raise TimeoutError(
                            f"worker {worker_idx} did not acknowledge the weights of "
                            f"{self._model_id!r} within {timeout} s"
                        ) from None
            if ack != "updated":
                raise RuntimeError(
                    f"worker {worker_idx} could not apply the weights of {self._model_id!r}: {ack}"
                )

    def _check_worker_alive(self, worker_idx: int) -> None:
        alive = getattr(self.context, "alive", None)
        if not callable(alive):
            return
        states = alive()
        if worker_idx < len(states) and not states[worker_idx]:
            raise RuntimeError(
                f"worker {worker_idx} died before acknowledging the weights of {self._model_id!r}"
            )

    # ----------------------------------------------------------------- receiver
    def _init_on_receiver_impl(
        self,
        *,
        model_id: str | None = None,
        context: Any = None,
        model: Any = None,
        worker_idx: int | None = None,
        **kwargs,
    ) -> None:
        if context is not None:
            if model_id is None:
                raise ValueError("model_id is required when context is provided")
            if model is None:
                model = resolve_model(context, model_id)
            context_idx = getattr(context, "worker_idx", None)
            worker_idx = context_idx if context_idx is not None else worker_idx
            self.context = context
        self.model_id = model_id
        if model is not None:
            self.model = model
        self.worker_idx = worker_idx
        if worker_idx is not None:
            self._receiver_instruction_queue = self._instruction_queues.get(worker_idx)
            self._receiver_ack_queue = self._ack_queues.get(worker_idx)

    def _setup_connection_and_weights_on_receiver_impl(
        self, *, worker_idx: int | None = None
    ) -> None:
        worker_idx = self.worker_idx if worker_idx is None else worker_idx
        if worker_idx is None:
            raise RuntimeError("worker_idx must be provided to connect a receiver")
        weights = self.shared_transport.setup_connection_and_weights_on_receiver(
            worker_idx=worker_idx
        )
        self._receiver_shared_weights = weights
        if weights is not None and self.model is not None:
            # the model's tensors become the shared buffers
            self._strategy.apply_weights(self.model, weights, inplace=False)
        self._start_background_receiver()

    def _receive_now(self) -> None:
        if self._receiver_shared_weights is not None and self.model is not None:
            self._strategy.apply_weights(self.model, self._receiver_shared_weights, inplace=True)
        self._after_receive()

    def receive(self, timeout: float | None = None) -> TensorDictBase | None:
        """Applies the shared weights to the model (already there when the model is made
        of them) and refreshes the context's policy; returns them."""
        if not self.initialized_on_receiver:
            raise RuntimeError("Must be initialized on receiver before receiving weights")
        if not self.synchronized_on_receiver:
            raise RuntimeError("Must be synchronized on receiver before receiving weights")
        self._receive_now()
        return self._receiver_shared_weights

    def _wait_for_instruction(self, timeout: float | None = None) -> str | None:
        q = self._receiver_instruction_queue
        if q is None:
            raise RuntimeError(
                "Instruction queue not set. init_on_receiver() must be called first."
            )
        waited = 0.0
        while self._stop_event is None or not self._stop_event.is_set():
            try:
                return q.get(timeout=_POLL_S)
            except queue_module.Empty:
                waited += _POLL_S
                if timeout is not None and waited >= timeout:
                    return None
            except (OSError, EOFError, ValueError):  # the sender is gone
                return "stop"
        return None

    def _send_ack(self, message: str = "updated") -> None:
        if self._receiver_ack_queue is not None:
            self._receiver_ack_queue.put(message)

    def create_transport(self, **kwargs) -> TransportBackend:
        """The shared transport (one for every worker)."""
        return self.shared_transport

    @property
    def weights(self) -> Any | None:
        """The shared weights (the receiver's buffer, or the sender's first one)."""
        if getattr(self, "_receiver_shared_weights", None) is not None:
            return self._receiver_shared_weights
        transport = self._shared_transport
        if transport is not None and transport._unique_weights:
            return transport.unique_weights[0]
        return super().weights

    @weights.setter
    def weights(self, value: Any) -> None:
        self._weights = value

    def shutdown(self) -> None:
        """Stops the receiver thread (receiver) or tells the workers' threads to stop and
        closes the queues (sender)."""
        if getattr(self, "_is_shutdown", False):
            return
        self._is_shutdown = True
        sender = self.initialized_on_sender
        if sender:
            for q in getattr(self, "_instruction_queues", {}).values():
                with contextlib.suppress(Exception):
                    q.put("stop")
        super().shutdown()
        if sender:
            seen: dict[int, Any] = {}
            for name in ("_weight_init_queues", "_instruction_queues", "_ack_queues"):
                for q in getattr(self, name, {}).values():
                    seen[id(q)] = q
            for q in seen.values():
                _close_queue(q)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_is_shutdown"] = False
        state["_receiver_shared_weights"] = None
        return state


def _device_of(weights: TensorDictBase) -> torch.device | None:
    devices = {t.device for t in weights.values(True, True)}
    return devices.pop() if len(devices) == 1 else None


def _share_in_place(weights: TensorDictBase) -> TensorDictBase:
    """``weights`` themselves, their CPU storages moved to shared memory."""
    if _device_of(weights) in (None, torch.device("cpu")) and not weights.is_shared():
        weights.share_memory_()
    return weights


def _shared_copy(weights: TensorDictBase, device: torch.device | None) -> TensorDictBase:
    """A copy of ``weights`` on ``device`` that other processes can map."""
    copy = weights.detach().clone() if device is None else weights.detach().to(device).clone()
    if copy.device is None or copy.device.type == "cpu":
        copy.share_memory_()
    return copy


@register_weight_sync_backend("process")
class MultiProcessWeightSyncScheme(SharedMemWeightSyncScheme):
    """Weights sent as copies through multiprocessing queues.

    Each :meth:`send` puts one copy of the weights in every chosen worker's queue and tells
    the worker, which copies them into its own model between two batches (its collector
    then refreshes its policy and bumps its version); with ``sync=True`` (default) the
    sender waits for the acknowledgements. The workers' models keep their own tensors.

    Args:
        strategy: ``"tensordict"`` or ``"state_dict"``.
        sync: wait for the workers' acknowledgements in :meth:`send`.
    """

    def __init__(self, strategy: str = "tensordict", sync: bool = True) -> None:
        super().__init__(strategy, sync=sync)
        self._shared_transport = None

    def _init_on_sender_impl(
        self,
        *,
        model_id: str | None = None,
        context: Any = None,
        weights: TensorDictBase | None = None,
        model: nn.Module | None = None,
        params_map: dict[int, TensorDictBase] | None = None,
        devices: list[torch.device] | None = None,
        device_map_fn: Callable | None = None,
        num_workers: int | None = None,
        ctx: Any = None,
        **kwargs,
    ) -> None:
        if ctx is None:
            ctx = mp.get_context()
        if params_map is not None:
            workers = sorted(params_map)
        elif context is not None:
            workers = list(range(context.num_workers))
        elif devices is not None:
            workers = list(range(len(devices)))
        elif num_workers is not None:
            workers = list(range(num_workers))
        else:
            raise ValueError(
                "Either params_map, model_id + context or model/weights + devices must be provided."
            )
        self._initial = {
            "weights": weights, "model": model, "params_map": params_map, "devices": devices,
            "device_map_fn": device_map_fn,
        }  # fmt: skip
        self._make_queues(workers, ctx)
        self.model_id = model_id
        if context is not None:
            self.context = context
        for worker_idx in workers:
            transport = MPTransport(
                self._weight_init_queues[worker_idx], self._ack_queues[worker_idx]
            )
            self._register_worker_sender(worker_idx=worker_idx, transport=transport)

    def _setup_connection_and_weights_on_sender_impl(
        self, *, worker_idx: int | None = None, weights: Any | None = None
    ) -> None:
        initial = self.__dict__.pop("_initial", None)
        if initial is None:
            raise RuntimeError("connect() requires init_on_sender() to be called first")
        for idx, transport in sorted(self.sender_transports.items()):
            if initial["params_map"] is not None:
                first = _flat_to_nested(initial["params_map"][idx]).data
            else:
                first = self._source_weights(
                    self.context, self._model_id, idx,
                    weights if weights is not None else initial["weights"], initial["model"],
                )  # fmt: skip
                if initial["device_map_fn"] is not None:
                    first = initial["device_map_fn"](idx, first)
            transport.send_weights_async(
                first.detach().clone(), model_id=self._model_id or "policy"
            )

    def send(self, weights: Any = None, worker_ids: int | list[int] | None = None) -> None:
        """Puts a copy of the weights (``None``: the context's model's) in each chosen
        worker's queue and tells it; with ``sync`` waits for the acknowledgements."""
        self._check_sender()
        prepared = self.prepare_weights(weights, self._model_id, self._strategy, self.context)
        if prepared is None:
            raise RuntimeError(
                f"{type(self).__name__} has no weights to send for {self._model_id!r}: pass them"
            )
        if isinstance(prepared, TensorDictBase):
            prepared = prepared.detach().clone()  # the queue pickles later, in a thread
        else:
            prepared = {k: v.detach().clone() for k, v in prepared.items()}
        for transport in self._iterate_transports(worker_ids):
            transport.send_weights_async(prepared, model_id=self._model_id or "policy")
        self._send_instruction("receive", worker_ids=worker_ids)
        if self.sync:
            self._wait_for_ack(worker_ids=worker_ids)

    def _init_on_receiver_impl(self, *, model_id: str, context: Any = None, **kwargs) -> None:
        super()._init_on_receiver_impl(model_id=model_id, context=context, **kwargs)
        worker_idx = self.worker_idx
        if worker_idx is None:
            raise ValueError("worker_idx must be provided via context or kwargs")
        if worker_idx not in self._weight_init_queues:
            raise ValueError(
                f"Worker {worker_idx} not registered. init_on_sender() must be called first."
            )
        self._register_transport_receiver(
            MPTransport(self._weight_init_queues[worker_idx], self._ack_queues.get(worker_idx))
        )

    def _setup_connection_and_weights_on_receiver_impl(
        self, *, worker_idx: int | None = None
    ) -> None:
        worker_idx = self.worker_idx if worker_idx is None else worker_idx
        weights = self._receiver_transport.setup_connection_and_weights_on_receiver(
            worker_idx=worker_idx
        )
        if weights is not None and self.model is not None:
            self._strategy.apply_weights(self.model, weights, inplace=True)
        self._start_background_receiver()

    def _receive_now(self) -> None:
        self._receiver_transport.receive_weights(model=self.model, strategy=self._strategy)
        self._after_receive()

    def receive(self, timeout: float | None = None) -> Any | None:
        """Reads the next weights from the queue into the model (waits ``timeout`` s)."""
        if not self.initialized_on_receiver:
            raise RuntimeError("Must be initialized on receiver before receiving weights")
        if not self.synchronized_on_receiver:
            raise RuntimeError("Must be synchronized on receiver before receiving weights")
        weights = self._receiver_transport.receive_weights(
            timeout=timeout, model=self.model, strategy=self._strategy
        )
        self._after_receive()
        return weights

    def create_transport(self, **kwargs) -> TransportBackend:
        """An :class:`MPTransport` on ``queue``."""
        return MPTransport(weight_queue=kwargs.get("queue"), ack_queue=None)

    @property
    def weights(self) -> Any | None:
        return WeightSyncScheme.weights.fget(self)

    @weights.setter
    def weights(self, value: Any) -> None:
        self._weights = value


class _NoOpTransport:
    def send_weights(self, weights: Any) -> None:
        pass

    def receive_weights(self, timeout=None, *, weights=None, model=None, strategy=None) -> None:
        return None

    def check_connection(self) -> bool:
        return True

    def setup_connection_and_weights_on_sender(self) -> None:
        pass

    def setup_connection_and_weights_on_receiver(
        self, *, worker_idx, weights=None, model=None, strategy=None
    ):
        return None


@register_weight_sync_backend("none")
class NoWeightSyncScheme(WeightSyncScheme):
    """No synchronisation: the workers keep the weights they started with; :meth:`send`
    and :meth:`receive` do nothing.

    Examples:
        >>> from rl.collectors import NoWeightSyncScheme
        >>> scheme = NoWeightSyncScheme()
        >>> scheme.init_on_sender(model_id="policy")
        >>> scheme.connect()
        >>> scheme.send()  # nothing happens
    """

    def _init_on_sender_impl(
        self, model_id: str | None = None, context: Any = None, **kwargs
    ) -> None:
        self.model_id = model_id

    def _init_on_receiver_impl(self, *, model_id: str, context: Any = None, **kwargs) -> None:
        self.model_id = model_id

    def create_transport(self, **kwargs) -> TransportBackend:
        return _NoOpTransport()

    def send(self, weights: Any = None, worker_ids: int | list[int] | None = None) -> None:
        """Does nothing."""

    def receive(self, timeout: float | None = None) -> None:
        """Does nothing; returns ``None``."""
        return None

    def connect(self, *, worker_idx: int | None = None, weights: Any | None = None) -> None:
        """Marks the side as connected."""
        if self.initialized_on_sender:
            self.synchronized_on_sender = True
        elif self.initialized_on_receiver:
            self.synchronized_on_receiver = True
