"""Weight-sync schemes: how one model's weights travel from a trainer to the workers.

A :class:`WeightSyncScheme` synchronises ONE model (``model_id``, e.g. ``"policy"``)
between a sender (the process that trains it, e.g. a :class:`~rl.collectors.MultiSyncCollector`)
and receivers (the workers that act with it). The same object is used on both sides: the
sender calls :meth:`WeightSyncScheme.init_on_sender` then :meth:`WeightSyncScheme.connect`;
each worker gets a copy (pickled or forked), calls :meth:`WeightSyncScheme.init_on_receiver`
then :meth:`WeightSyncScheme.connect`, which installs the first weights. After that,
:meth:`WeightSyncScheme.send` pushes new weights and (``sync=True``) returns once every
worker has applied them. A :class:`WeightStrategy` says how weights are read from and
written into a model (a TensorDict of parameters or a state dict).

The concrete schemes live in ``_weight_sync_process`` (shared memory, queues, none) and
``_weight_sync_remote`` (Ray, RPC, torch.distributed).
"""

from __future__ import annotations

import abc
import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Literal, Protocol

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

__all__ = [
    "TransportBackend",
    "InitialSyncTransport",
    "WeightSyncBackend",
    "WeightStrategy",
    "WeightSyncScheme",
]

logger = logging.getLogger(__name__)

#: seconds a worker waits for its first weights (the sender puts them right after start-up)
WEIGHT_SYNC_TIMEOUT = 120.0


class TransportBackend(Protocol):
    """What moves weights between a sender and a receiver (the data plane)."""

    def send_weights(self, weights: Any) -> None:
        """Sends ``weights`` to the receiver."""
        ...

    def receive_weights(
        self,
        timeout: float | None = None,
        *,
        weights: Any = None,
        model: Any = None,
        strategy: WeightStrategy | None = None,
    ) -> Any | None:
        """Receives weights and applies them to ``model``; ``None`` when none came."""
        ...


class InitialSyncTransport(Protocol):
    """A transport that installs the first weights when the workers start."""

    def setup_connection_and_weights_on_sender(self) -> None:
        """Sender side of the first synchronisation."""
        ...

    def setup_connection_and_weights_on_receiver(
        self, *, worker_idx: int, weights: Any = None, model: Any = None, strategy: Any = None
    ) -> Any:
        """Receiver side: returns the first weights (or ``None``)."""
        ...


WeightSyncBackend = Literal[
    "none", "direct", "shared", "thread", "process", "multiprocessing", "distributed", "rpc", "ray"
]

_BACKEND_ALIASES = {"direct": "none", "thread": "shared", "multiprocessing": "process"}
_SCHEMES: dict[str, type[WeightSyncScheme]] = {}


def register_weight_sync_backend(backend: str) -> Callable[[type], type]:
    """Registers a scheme class under a :meth:`WeightSyncScheme.from_backend` name."""

    def register(cls: type) -> type:
        _SCHEMES[backend] = cls
        return cls

    return register


class WeightStrategy:
    """Reads weights out of a model and writes them into another.

    Args:
        extract_as: ``"tensordict"`` (default: a TensorDict of parameters and buffers,
            :meth:`TensorDict.from_module`) or ``"state_dict"`` (a flat
            ``{"0.weight": tensor}`` dict; experimental in TorchRL, which warns).

    Weights are written in either form: a dict is read as a state dict.

    Examples:
        >>> import torch
        >>> from rl.collectors import WeightStrategy
        >>> source, target = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
        >>> strategy = WeightStrategy()
        >>> strategy.apply_weights(target, strategy.extract_weights(source))
        >>> bool((target.weight == source.weight).all())
        True
    """

    def __init__(self, extract_as: Literal["tensordict", "state_dict"] = "tensordict") -> None:
        if extract_as not in ("tensordict", "state_dict"):
            raise ValueError(f"extract_as must be 'tensordict' or 'state_dict', got {extract_as!r}")
        if extract_as == "state_dict":
            import warnings  # noqa: PLC0415

            warnings.warn(
                "state_dict strategy is experimental. Use tensordict strategy for safer "
                "weight updates.",
                UserWarning,
                stacklevel=2,
            )
        self.extract_as = extract_as

    def extract_weights(self, source: Any) -> TensorDictBase | dict:
        """The weights of ``source`` (a module, a TensorDict or a state dict) in this
        strategy's form."""
        if self.extract_as == "tensordict":
            if isinstance(source, nn.Module):
                return TensorDict.from_module(source)
            if isinstance(source, TensorDictBase):
                return source
            if isinstance(source, dict):
                weights = TensorDict(source, batch_size=[])
                if any("." in key for key in source):
                    weights = weights.unflatten_keys(".")
                return weights
        else:
            if isinstance(source, nn.Module):
                return source.state_dict()
            if isinstance(source, dict):
                return source
            if isinstance(source, TensorDictBase):
                return source.flatten_keys(".").to_dict()
        raise TypeError(
            "weights must be read from an nn.Module, a TensorDict or a state dict, got "
            f"{type(source).__name__}"
        )

    def apply_weights(self, destination: Any, weights: Any, inplace: bool = True) -> None:
        """Writes ``weights`` into ``destination`` (a module, a TensorDict or a state dict).

        ``inplace=True`` copies the values into the destination's tensors;
        ``inplace=False`` makes a module's parameters *be* the given tensors (e.g. shared
        memory that a sender updates).

        Raises:
            KeyError: the weights name an entry the destination lacks (naming both sets).
        """
        if weights is None:
            return
        if isinstance(weights, dict):
            flat = TensorDict(weights, batch_size=[])
            weights = flat.unflatten_keys(".") if any("." in k for k in weights) else flat
        if not isinstance(weights, TensorDictBase):
            raise ValueError(
                f"Unsupported weights type: {type(weights).__name__}; expected a dict or a "
                "TensorDict"
            )
        if isinstance(destination, nn.Module):
            if not inplace:
                current = TensorDict.from_module(destination)
                _check_keys(current, weights)
                weights.apply(_as_module_tensor, current, filter_empty=False).to_module(destination)
                return
            destination = TensorDict.from_module(destination)
        elif isinstance(destination, dict):
            if not inplace:
                raise ValueError("Cannot update state_dict out of place")
            flat = TensorDict(destination, batch_size=[])
            destination = flat.unflatten_keys(".") if any("." in k for k in destination) else flat
        if not isinstance(destination, TensorDictBase):
            raise ValueError(
                "weights can only be written into an nn.Module, a TensorDict or a state dict, "
                f"got {type(destination).__name__}"
            )
        _check_keys(destination, weights)
        if inplace:
            destination.data.update_(weights.data)
        else:
            destination.update(weights)


def _check_keys(destination: TensorDictBase, weights: TensorDictBase) -> None:
    missing = set(weights.keys(True, True)) - set(destination.keys(True, True))
    if missing:
        raise KeyError(
            f"weights name {sorted(missing, key=str)} which the destination lacks. Destination "
            f"keys: {sorted(destination.keys(True, True), key=str)}, weights keys: "
            f"{sorted(weights.keys(True, True), key=str)}"
        )


def _as_module_tensor(tensor: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """``tensor`` as a parameter when the module holds a parameter there."""
    if isinstance(current, nn.Parameter) and not isinstance(tensor, nn.Parameter):
        return nn.Parameter(tensor, requires_grad=current.requires_grad)
    return tensor


def resolve_model(context: Any, model_id: str) -> Any:
    """The object at path ``model_id`` of ``context`` (``"policy"``,
    ``"env.transform[0]"``, ``"policy.module.0"``)."""
    getter = getattr(context, "get_model", None)
    if callable(getter):
        return getter(model_id)
    return resolve_path(context, model_id)


def resolve_path(obj: Any, path: str) -> Any:
    """Follows a dotted path with ``[i]`` indexing from ``obj``."""
    for part in path.split("."):
        name, _, rest = part.partition("[")
        if name:
            obj = getattr(obj, name)
        while rest:
            index, _, rest = rest.partition("]")
            obj = obj[int(index)]
            rest = rest.lstrip("[")
    return obj


class WeightSyncScheme(metaclass=abc.ABCMeta):
    """How ONE model's weights are synchronised between a sender and its workers.

    A collector holds ``{model_id: scheme}`` (``weight_sync_schemes=``). The sender side
    is set up by :meth:`init_on_sender` (the collector does it with ``context=`` itself),
    each worker's side by :meth:`init_on_receiver`; both then call :meth:`connect`.
    Pickling a scheme keeps its configuration and queues and drops its runtime state (the
    context, the model, whether it was initialised), so one object configures both ends.

    A concrete scheme implements ``_init_on_sender_impl`` and ``_init_on_receiver_impl``,
    and, to serve a background receiver thread, ``_receive_now``,
    ``_wait_for_instruction`` and ``_send_instruction``: the base's versions raise
    ``NotImplementedError`` naming the scheme and the missing hook.

    Args:
        strategy: ``"tensordict"`` (default) or ``"state_dict"``: see
            :class:`WeightStrategy`.

    Examples:
        >>> from rl.collectors import SharedMemWeightSyncScheme, WeightSyncScheme
        >>> isinstance(WeightSyncScheme.from_backend("shared"), SharedMemWeightSyncScheme)
        True
    """

    _model_id: str | None = None

    def __init__(self, strategy: Literal["state_dict", "tensordict"] = "tensordict") -> None:
        if strategy not in ("tensordict", "state_dict"):
            raise ValueError(
                f"Unknown strategy: {strategy!r}. Must be 'tensordict' or 'state_dict'."
            )
        self.strategy_str = strategy
        self._strategy = WeightStrategy(extract_as=strategy)
        self._initialized_on_sender = False
        self._initialized_on_receiver = False
        self._synchronized_on_sender = False
        self._synchronized_on_receiver = False
        self._sender_transports: dict[int, Any] | None = None
        self._receiver_transport: Any = None
        self._shared_transport: Any = None
        self._context_ref: weakref.ReferenceType | None = None
        self._model_ref: Any = None
        self._worker_idx: int | None = None
        self._background_thread: threading.Thread | None = None
        self._stop_event: threading.Event | None = None

    @classmethod
    def from_backend(cls, backend: WeightSyncBackend, **kwargs) -> WeightSyncScheme:
        """The scheme for a deployment back-end: ``"none"`` (alias ``"direct"``),
        ``"shared"`` (``"thread"``), ``"process"`` (``"multiprocessing"``),
        ``"distributed"``, ``"rpc"`` or ``"ray"``; ``kwargs`` go to its constructor.

        Raises:
            ValueError: an unknown back-end (naming the known ones).
        """
        import rl.collectors._weight_sync_process  # noqa: F401, PLC0415  (registers)
        import rl.collectors._weight_sync_remote  # noqa: F401, PLC0415

        canonical = _BACKEND_ALIASES.get(backend, backend)
        if canonical not in _SCHEMES:
            choices = sorted(set(_SCHEMES) | set(_BACKEND_ALIASES))
            raise ValueError(
                f"Unsupported weight-sync backend {backend!r}. Expected one of {choices}."
            )
        return _SCHEMES[canonical](**kwargs)

    # ------------------------------------------------------------------ set-up
    @property
    def strategy(self) -> WeightStrategy:
        return self._strategy

    @strategy.setter
    def strategy(self, value: WeightStrategy) -> None:
        self._strategy = value

    def init_on_sender(self, *args, **kwargs) -> None:
        """Sets up the sending side (in the process that trains the model): with
        ``model_id=`` and ``context=`` (a collector), or explicit ``params_map=``,
        ``weights=`` / ``model=`` with ``devices=`` or ``device_map_fn=`` and
        ``num_workers=`` (see the concrete schemes)."""
        self._initialized_on_sender = True
        try:
            return self._init_on_sender_impl(*args, **kwargs)
        except BaseException:
            self._initialized_on_sender = False
            raise

    def _init_on_sender_impl(self, *args, **kwargs) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _init_on_sender_impl()")

    def init_on_receiver(self, *, model_id: str, context: Any = None, **kwargs) -> None:
        """Sets up one worker's side: ``context`` is the worker's collector (its
        ``worker_idx`` and the model at ``model_id``), or pass ``worker_idx=`` and
        ``model=``."""
        if self.initialized_on_sender:  # the sender's own object: drop its runtime state
            self.__setstate__(self.__getstate__())
        self._initialized_on_receiver = True
        try:
            return self._init_on_receiver_impl(model_id=model_id, context=context, **kwargs)
        except BaseException:
            self._initialized_on_receiver = False
            raise

    def _init_on_receiver_impl(self, *, model_id: str, context: Any = None, **kwargs) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _init_on_receiver_impl()")

    @property
    def initialized_on_sender(self) -> bool:
        return getattr(self, "_initialized_on_sender", False)

    @property
    def initialized_on_receiver(self) -> bool:
        return getattr(self, "_initialized_on_receiver", False)

    @property
    def synchronized_on_sender(self) -> bool:
        return getattr(self, "_synchronized_on_sender", False)

    @synchronized_on_sender.setter
    def synchronized_on_sender(self, value: bool) -> None:
        self._synchronized_on_sender = value

    @property
    def synchronized_on_receiver(self) -> bool:
        return getattr(self, "_synchronized_on_receiver", False)

    @synchronized_on_receiver.setter
    def synchronized_on_receiver(self, value: bool) -> None:
        self._synchronized_on_receiver = value

    def connect(self, *, worker_idx: int | None = None, weights: Any | None = None) -> None:
        """Once the workers run: the sender hands out the first weights, a receiver
        installs them (and starts listening for updates).

        Raises:
            RuntimeError: called twice, before an ``init_on_*``, or with ``worker_idx`` on
                the sender / ``weights`` on a receiver.
        """
        if self.synchronized_on_sender or self.synchronized_on_receiver:
            raise RuntimeError("Cannot synchronize weights on sender twice.")
        if self.initialized_on_sender:
            if worker_idx is not None:
                raise RuntimeError(
                    "Cannot specify worker_idx on sender side during synchronization."
                )
            self.synchronized_on_sender = True
            try:
                self._setup_connection_and_weights_on_sender_impl(weights=weights)
            except BaseException:
                self.synchronized_on_sender = False
                raise
        elif self.initialized_on_receiver:
            if weights is not None:
                raise RuntimeError(
                    "Cannot specify weights on receiver side during synchronization."
                )
            self.synchronized_on_receiver = True
            try:
                self._setup_connection_and_weights_on_receiver_impl(worker_idx=worker_idx)
            except BaseException:
                self.synchronized_on_receiver = False
                raise
        else:
            raise RuntimeError("Neither init_on_sender nor init_on_receiver have been called.")

    def _setup_connection_and_weights_on_sender_impl(
        self, *, worker_idx: int | None = None, weights: Any | None = None
    ) -> None:
        if self._shared_transport is not None:
            self._shared_transport.setup_connection_and_weights_on_sender()
            return
        for transport in self._iterate_transports():
            setup = getattr(transport, "setup_connection_and_weights_on_sender", None)
            if setup is not None:
                setup()

    def _setup_connection_and_weights_on_receiver_impl(
        self, *, worker_idx: int | None = None
    ) -> None:
        transport = self.receiver_transport
        if transport is None:
            return
        weights = transport.setup_connection_and_weights_on_receiver(
            worker_idx=self._worker_idx if worker_idx is None else worker_idx,
            weights=None,
            model=self.model,
            strategy=self._strategy,
        )
        if weights is not None and self.model is not None:
            self._strategy.apply_weights(self.model, weights, inplace=False)

    # ------------------------------------------------------------- references
    @property
    def context(self) -> Any | None:
        """The object (a collector) the model is resolved from, if any."""
        return None if self._context_ref is None else self._context_ref()

    @context.setter
    def context(self, context: Any) -> None:
        self._context_ref = None if context is None else weakref.ref(context)

    @property
    def model_id(self) -> str | None:
        return self._model_id

    @model_id.setter
    def model_id(self, model_id: str | None) -> None:
        self._model_id = model_id

    @property
    def worker_idx(self) -> int | None:
        """The receiver's worker index (``None`` on the sender)."""
        return self._worker_idx

    @worker_idx.setter
    def worker_idx(self, worker_idx: int | None) -> None:
        if self.initialized_on_sender and worker_idx is not None:
            raise RuntimeError("Worker index cannot be set after initialization on sender")
        self._worker_idx = worker_idx

    @property
    def model(self) -> Any | None:
        """The model the weights are read from (sender) or written into (receiver)."""
        if self._model_ref is not None:
            return (
                self._model_ref() if isinstance(self._model_ref, weakref.ref) else self._model_ref
            )
        if self._model_id is not None and self.context is not None:
            model = resolve_model(self.context, self._model_id)
            if model is None:
                raise AttributeError(f"Model {self._model_id} was `None` in context {self.context}")
            self.model = model
            return model
        return None

    @model.setter
    def model(self, model: Any) -> None:
        if model is None:
            self._model_ref = None
            return
        try:
            self._model_ref = weakref.ref(model)
        except TypeError:  # a TensorDict of weights, ...
            self._model_ref = model

    @property
    def weights(self) -> Any | None:
        """The current weights of the model (in the strategy's form), if any."""
        if (weights := getattr(self, "_weights", None)) is not None:
            return weights
        model = self.model
        return None if model is None else self._strategy.extract_weights(model)

    @weights.setter
    def weights(self, value: Any) -> None:
        self._weights = value

    # ------------------------------------------------------------- transports
    @abc.abstractmethod
    def create_transport(self, **kwargs) -> TransportBackend:
        """A transport for one worker (or the one shared by all)."""

    def _register_worker_sender(self, *, worker_idx: int, transport: Any = None, **kwargs) -> None:
        if self._sender_transports is None:
            if self._shared_transport is not None:
                raise RuntimeError(
                    "Cannot register transports on sender after shared transport is set"
                )
            self._sender_transports = {}
        if worker_idx not in self._sender_transports:
            self._sender_transports[worker_idx] = (
                transport if transport is not None else self.create_transport(**kwargs)
            )

    def _register_transport_receiver(self, transport: Any = None, **kwargs) -> None:
        self._receiver_transport = (
            transport if transport is not None else self.create_transport(**kwargs)
        )

    @property
    def sender_transports(self) -> dict[int, Any]:
        """Worker index -> transport (on the sender)."""
        return self._sender_transports or {}

    @property
    def receiver_transport(self) -> Any:
        """This receiver's transport (the shared one when the scheme has one)."""
        if self._shared_transport is not None:
            return self._shared_transport
        return self._receiver_transport

    @property
    def shared_transport(self) -> Any:
        """The one transport every worker uses (shared memory), if any."""
        return self._shared_transport

    @shared_transport.setter
    def shared_transport(self, transport: Any) -> None:
        self._shared_transport = transport

    def _iterate_transports(self, worker_ids: int | list[int] | None = None) -> Iterator[Any]:
        if worker_ids is None:
            if not self.sender_transports:
                if self.receiver_transport is not None:
                    yield self.receiver_transport
                return
            for key in sorted(self.sender_transports):
                yield self.sender_transports[key]
            return
        for worker_id in [worker_ids] if isinstance(worker_ids, int) else worker_ids:
            if worker_id not in self.sender_transports:
                raise ValueError(
                    f"Worker {worker_id} not registered (workers: {sorted(self.sender_transports)})"
                )
            yield self.sender_transports[worker_id]

    # ---------------------------------------------------------------- sending
    def prepare_weights(
        self, weights: Any, model_id: str | None, strategy: WeightStrategy, context: Any = None
    ) -> Any:
        """The weights to send: ``weights`` (a module, a TensorDict, a state dict, or a
        model path of ``context``) in the strategy's form, or the context's model's when
        ``None``."""
        if weights is None:
            if context is None or model_id is None:
                model = self.model
                return None if model is None else strategy.extract_weights(model)
            model = resolve_model(context, model_id)
            return None if model is None else strategy.extract_weights(model)
        if isinstance(weights, str):
            if context is None:
                raise ValueError(f"Cannot resolve string reference '{weights}' without context")
            return strategy.extract_weights(resolve_model(context, weights))
        if isinstance(weights, nn.Module):
            return strategy.extract_weights(weights)
        return weights

    def send(self, weights: Any = None, worker_ids: int | list[int] | None = None) -> None:
        """Sends ``weights`` (``None``: the model's) to the workers ``worker_ids`` (all by
        default) and waits until they applied them.

        Raises:
            RuntimeError: before :meth:`init_on_sender` and :meth:`connect`.
        """
        self._check_sender()
        prepared = self.prepare_weights(weights, self._model_id, self._strategy, self.context)
        transports = list(self._iterate_transports(worker_ids))
        if not transports:
            raise RuntimeError("No transports available.")
        for transport in transports:
            transport.send_weights(prepared)
        for transport in transports:
            wait_ack = getattr(transport, "wait_ack", None)
            if wait_ack is not None:
                wait_ack()

    def _check_sender(self) -> None:
        if not self.initialized_on_sender:
            raise RuntimeError("Must be initialized on sender before sending weights")
        if not self.synchronized_on_sender:
            raise RuntimeError("Must be synchronized on sender before sending weights")

    # -------------------------------------------------------------- receiving
    def receive(self, timeout: float | None = None) -> Any | None:
        """Applies weights that arrived (if any) to the model and tells the context (the
        worker's collector) that its policy changed; returns them (``None``: none)."""
        if not self.initialized_on_receiver:
            raise RuntimeError("Must be initialized on receiver before receiving weights")
        if not self.synchronized_on_receiver:
            raise RuntimeError("Must be synchronized on receiver before receiving weights")
        transport = self.receiver_transport
        if transport is None:
            return None
        weights = transport.receive_weights(
            timeout=timeout, weights=self.weights, model=self.model, strategy=self._strategy
        )
        if weights is None:
            return None
        self._after_receive()
        return weights

    def _after_receive(self) -> None:
        """The worker's collector takes the policy's new weights (and bumps its version)."""
        context = self.context
        if context is not None and (self._model_id or "policy") == "policy":
            update = getattr(context, "update_policy_weights_", None)
            if update is not None:
                update()

    def apply_weights(self, weights: TensorDictBase, inplace: bool = True) -> None:
        """Writes ``weights`` into this receiver's model.

        Raises:
            RuntimeError: on the sender, or before :meth:`init_on_receiver`.
        """
        if not self.initialized_on_receiver:
            if self.initialized_on_sender:
                raise RuntimeError("apply_weights() called on a sender side.")
            raise RuntimeError("apply_weights() called before init_on_receiver has been called.")
        if self._model_ref is None and self.model is None:
            raise ValueError("No model registered")
        self._strategy.apply_weights(self.model, weights, inplace=inplace)

    # ------------------------------------------------- background receiver
    def _start_background_receiver(self) -> None:
        """A daemon thread that applies weights when the sender says so."""
        if not self.initialized_on_receiver:
            raise RuntimeError("_start_background_receiver must be called on the receiver side.")
        self._stop_event = threading.Event()
        self._background_thread = threading.Thread(
            target=self._background_receive_loop,
            daemon=True,
            name=f"WeightReceiver-{self._model_id}-{self._worker_idx}",
        )
        self._background_thread.start()

    def _background_receive_loop(self) -> None:
        while self._stop_event is not None and not self._stop_event.is_set():
            instruction = self._wait_for_instruction()
            if instruction is None:
                continue
            if instruction == "stop":
                break
            if instruction == "receive":
                try:
                    # never in the middle of a batch: the worker holds this lock while it
                    # collects one
                    lock = getattr(self.context, "receive_lock", None)
                    with lock if lock is not None else _NULL_LOCK:
                        self._receive_now()
                    self._send_ack("updated")
                except Exception as err:  # reported to the sender, which raises it
                    logger.warning("weight receiver %s failed: %s", self._worker_idx, err)
                    self._send_ack(f"error: {type(err).__name__}: {err}")
            else:
                logger.warning("weight receiver got an unknown instruction %r", instruction)

    def _receive_now(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _receive_now()")

    def _wait_for_instruction(self, timeout: float | None = None) -> str | None:
        raise NotImplementedError(f"{type(self).__name__} must implement _wait_for_instruction()")

    def _send_instruction(
        self, instruction: str = "receive", worker_ids: int | list[int] | None = None
    ) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _send_instruction()")

    def _send_ack(self, message: str = "updated") -> None:
        transport = self.receiver_transport
        if transport is not None and hasattr(transport, "send_ack"):
            transport.send_ack(message)

    def _wait_for_ack(  # noqa: B027  (schemes without acknowledgements keep it)
        self, worker_ids: int | list[int] | None = None, timeout: float | None = None
    ) -> None:
        """Waits for the receivers' acknowledgements (none by default)."""

    # --------------------------------------------------------------- lifecycle
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(
            _context_ref=None,
            _model_ref=None,
            _initialized_on_sender=False,
            _initialized_on_receiver=False,
            _synchronized_on_sender=False,
            _synchronized_on_receiver=False,
            _background_thread=None,
            _stop_event=None,
        )
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def shutdown(self) -> None:
        """Stops the background receiver (if any); safe to call more than once."""
        if getattr(self, "_stop_event", None) is not None:
            self._stop_event.set()
        thread = getattr(self, "_background_thread", None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        self._background_thread = None
        self._stop_event = None

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:
            pass

    def __repr__(self) -> str:
        side = (
            "sender"
            if self.initialized_on_sender
            else ("receiver" if self.initialized_on_receiver else "uninitialized")
        )
        return f"{type(self).__name__}(model_id={self._model_id!r}, strategy={self.strategy_str!r}, {side})"


class _NullLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_NULL_LOCK = _NullLock()
