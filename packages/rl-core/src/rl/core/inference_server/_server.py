"""``InferenceServer``: one forward pass of the policy per batch of client requests."""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Callable
from statistics import mean
from typing import Any, Literal

import torch
from tensordict import TensorDict, TensorDictBase, lazy_stack
from tensordict.utils import NestedKey
from torch import nn

from rl.core._exploration import set_thread_exploration_type
from rl.core._service_backend import current_service_backend, normalize_service_backend

from ._client import _NO_INTERACTION, CODE_INTERACTIONS, INTERACTION_KEY
from ._config import InferenceDeviceConfig, InferenceServerConfig, _check_batching
from ._mp import MPTransport
from ._ray import RayTransport
from ._shared_memory import SharedMemoryTransport
from ._slot import SlotTransport
from ._threading import ThreadingTransport
from ._transport import InferenceTransport

__all__ = ["InferenceServer"]

logger = logging.getLogger(__name__)

_TransportName = Literal[
    "auto", "thread", "process", "ray", "shared_memory", "direct", "distributed"
]
# the selectors each owner accepts, as TorchRL's (less its "distributed" transport)
_ALLOWED_TRANSPORTS = {
    "thread": ("auto", "thread", "queue", "direct"),
    "process": ("auto", "process", "shared_memory"),
    "ray": ("auto", "ray"),
}


def make_transport(
    transport: InferenceTransport | str | None,
    service_backend: str,
    transport_options: dict[str, Any] | None,
    request_spec: TensorDictBase | None,
    response_spec: TensorDictBase | None,
    num_clients: int | None,
) -> InferenceTransport:
    """The transport a server owner uses for a ``transport`` selector."""
    if isinstance(transport, InferenceTransport):
        if transport_options:
            raise ValueError("transport_options cannot be used with a transport instance")
        return transport
    if (request_spec is None) != (response_spec is None):
        raise ValueError("request_spec and response_spec must be given together")
    kind = "auto" if transport is None else transport
    allowed = _ALLOWED_TRANSPORTS[service_backend]
    if kind not in allowed:
        raise ValueError(
            f"transport={kind!r} is incompatible with service_backend={service_backend!r}; "
            f"expected one of {allowed} or an InferenceTransport instance"
            + (" (rl has no 'distributed' inference transport)" if kind == "distributed" else "")
        )
    options = dict(transport_options or {})
    if kind == "auto":
        kind = "thread" if service_backend == "thread" else "process"
    if kind in ("thread", "queue"):
        return ThreadingTransport(**options)
    if kind == "direct":
        if num_clients is None:
            raise ValueError("transport='direct' (a SlotTransport) needs num_clients")
        return SlotTransport(num_clients, **options)
    if kind == "process":
        # a manager-backed reply table: clients created after the server process
        # started are still routed
        options.setdefault("use_manager", True)
        return MPTransport(**options)
    if request_spec is None:
        raise ValueError("transport='shared_memory' needs request_spec and response_spec")
    options.setdefault("num_slots", num_clients or 1)
    return SharedMemoryTransport(request_spec, response_spec, **options)


def transport_kind(transport: InferenceTransport) -> str:
    """The selector name of a transport (``"custom"`` for a user's)."""
    for cls, name in (
        (SharedMemoryTransport, "shared_memory"),
        (SlotTransport, "direct"),
        (RayTransport, "ray"),
        (MPTransport, "process"),
        (ThreadingTransport, "thread"),
    ):
        if isinstance(transport, cls):
            return name
    return "custom"


def resolve_batching(
    server_config: InferenceServerConfig | None, **given: Any
) -> InferenceServerConfig:
    """One config from ``server_config`` or the loose keyword arguments (``None``:
    the config's default)."""
    if server_config is not None:
        clash = [k for k, v in given.items() if v is not None]
        if clash:
            raise ValueError(
                "server_config is mutually exclusive with the keyword arguments "
                f"{', '.join(clash)} (set them in the config)"
            )
        return server_config
    return InferenceServerConfig(**{k: v for k, v in given.items() if v is not None})


def _ray_owner(args: tuple, kwargs: dict, transport: Any) -> Any:
    """``InferenceServer(..., service_backend="ray")``: the Ray actor owner."""
    from ._ray_server import _RayInferenceServer  # noqa: PLC0415 (imports this module)

    if (args[0] if args else kwargs.pop("model", None)) is not None:
        raise ValueError(
            "service_backend='ray' builds the policy in a Ray actor: pass policy_factory "
            "instead of model"
        )
    kwargs.pop("transport", None)
    if isinstance(transport, InferenceTransport) or transport not in _ALLOWED_TRANSPORTS["ray"]:
        raise ValueError(
            f"transport={transport!r} is incompatible with service_backend='ray' (its actor "
            f"serves through the RayTransport it builds); expected one of "
            f"{_ALLOWED_TRANSPORTS['ray']}"
        )
    policy_factory = kwargs.pop("policy_factory", None)
    if policy_factory is None:
        raise ValueError("service_backend='ray' needs a policy_factory")
    options = dict(kwargs.pop("service_backend_options", None) or {})
    unknown = sorted(set(options) - {"ray_init_config", "remote_config"})
    if unknown:
        raise ValueError(
            f"unsupported Ray service_backend_options {unknown}; expected ray_init_config, "
            "remote_config"
        )
    for name in ("request_spec", "response_spec", "shutdown_event"):
        if kwargs.pop(name, None) is not None:
            raise ValueError(f"{name} does not apply to service_backend='ray'")
    kwargs.pop("service_backend", None)
    kwargs.pop("num_clients", None)
    return _RayInferenceServer(
        policy_factory,
        kwargs.pop("transport_options", None),
        options.get("ray_init_config"),
        options.get("remote_config"),
        kwargs,
    )


def _collate(items: list[TensorDictBase]) -> TensorDictBase:
    """``lazy_stack(items)``; requests that disagree on their device metadata (one on
    ``"cpu"``, one without a device) are stacked without it."""
    if len({td.device for td in items}) > 1:
        items = [td.copy().clear_device_() for td in items]
    return lazy_stack(items)


class InferenceServer:
    """Batches the policy calls of many clients: one forward pass per batch.

    Clients (threads, processes, Ray actors) send single TensorDicts through a
    *transport*; a background thread waits for requests, takes up to
    ``max_batch_size`` of them, stacks them, runs the policy once and sends each
    client its row of the result. An error in the policy (or in stacking) is raised
    in every client of that batch and the server keeps serving. Answers carry the
    server's ``policy_version`` under ``policy_version_key``.

    With ``service_backend="process"`` the constructor returns a
    :class:`~rl.core.inference_server.ProcessInferenceServer` (the policy is built in
    a dedicated process by ``policy_factory``); with ``service_backend="ray"`` an owner
    whose Ray actor builds the policy and serves it through a
    :class:`~rl.core.inference_server.RayTransport` (same methods: ``client()``,
    ``stats()``, ``health()``, ``update_model_weights()``, ``shutdown()``). TorchRL's
    ``"distributed"`` (torch.distributed) transport is not available.

    Args:
        model: the policy, a callable from a batched TensorDict to a batched
            TensorDict. Give ``policy_factory`` instead to build it in the owner.
        transport: an :class:`InferenceTransport`, or a selector: ``"auto"``
            (a :class:`ThreadingTransport` for a thread server, a manager-backed
            :class:`MPTransport` for a process server), ``"thread"``, ``"direct"``
            (a :class:`SlotTransport` of ``num_clients`` slots) for a thread server;
            ``"process"``, ``"shared_memory"`` (needs the two specs) for a process
            server. A thread server serves Ray actors through a
            :class:`RayTransport` instance.

    Keyword Args:
        policy_factory: a zero-argument callable returning the policy (required for
            ``service_backend="process"``).
        service_backend: ``"thread"``, ``"process"`` or ``"ray"``; when not given,
            the enclosing :func:`rl.core.service_backend` block's, else ``"thread"``.
        service_backend_options: ``{"mp_context": ..., "startup_timeout": ...}`` for
            a process server, ``{"ray_init_config": ..., "remote_config": ...}``
            (``ray.init`` arguments, the actor's ``ray.remote`` options) for Ray.
        transport_options: keyword arguments of the transport built from a selector.
        request_spec, response_spec: example request / answer of a
            ``"shared_memory"`` transport.
        num_clients: the number of slots of a ``"direct"`` / ``"shared_memory"``
            transport.
        max_batch_size: at most this many requests per forward pass (default 64).
        static_batch_size: pad every batch to this size (see
            :class:`InferenceServerConfig`).
        min_batch_size: wait up to ``timeout`` for this many requests (default 1).
        timeout: seconds to wait for requests before running a partial batch
            (default 0.01).
        collate_fn: stacks a list of requests into a batch (default
            :func:`tensordict.lazy_stack`).
        device: an alias of ``policy_device``.
        policy_device: batches are moved there (and the model, once) before the
            forward pass.
        output_device: answers are moved there before they go back.
        collect_stats: keep statistics for :meth:`stats` (default ``True``).
        stats_window_size: samples kept for the percentiles (default 1024).
        weight_sync: a weight-sync scheme (receiver side: ``init_on_receiver``,
            ``connect``, ``receive(timeout=0.0)``) polled between batches.
        weight_sync_model_id: the model id given to the scheme (default
            ``"policy"``).
        server_config: an :class:`InferenceServerConfig` (exclusive with the
            batching keyword arguments above).
        device_config: an :class:`InferenceDeviceConfig` (exclusive with
            ``device``, ``policy_device``, ``output_device``).
        shutdown_event: the event that stops the loop (a process server passes a
            ``multiprocessing`` event); a new ``threading.Event`` by default.
        policy_version: the first policy version (default 0).
        policy_version_key: where answers carry the version (``None``: not added).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.core.inference_server import InferenceServer
        >>> policy = TensorDictModule(torch.nn.Linear(4, 2), ["obs"], ["act"])
        >>> with InferenceServer(policy, max_batch_size=8) as server:
        ...     out = server.client()(TensorDict(obs=torch.randn(4)))
        >>> out["act"].shape, int(out["policy_version"])
        (torch.Size([2]), 0)
    """

    def __new__(cls, *args: Any, **kwargs: Any):
        if cls is not InferenceServer:
            return super().__new__(cls)
        config = kwargs.get("server_config")
        backend = kwargs.get("service_backend")
        from_context = False
        if backend is None and config is None:
            # as TorchRL: an enclosing ``rl.core.service_backend`` block sets the default
            backend = current_service_backend()
            from_context = backend is not None
        if backend is None:
            backend = config.service_backend if config is not None else "thread"
        elif config is not None and config.service_backend not in ("thread", backend):
            raise ValueError(
                f"service_backend={backend!r} conflicts with server_config.service_backend="
                f"{config.service_backend!r}"
            )
        backend = normalize_service_backend(backend)
        if backend == "thread":
            return super().__new__(cls)
        where = " (from the enclosing rl.core.service_backend context)" if from_context else ""
        transport = args[1] if len(args) > 1 else kwargs.get("transport", "auto")
        if backend == "ray":
            return _ray_owner(args, kwargs, transport)
        if backend != "process":
            raise ValueError(
                f"service_backend={backend!r}{where} is not supported by InferenceServer; "
                "expected 'thread', 'process' or 'ray'"
            )
        from ._process import ProcessInferenceServer  # noqa: PLC0415 (imports this module)

        model = args[0] if args else kwargs.pop("model", None)
        transport = args[1] if len(args) > 1 else kwargs.pop("transport", "auto")
        if model is not None:
            raise ValueError(
                "service_backend='process' builds the policy in the server process: pass "
                "policy_factory instead of model"
            )
        kwargs.pop("service_backend", None)
        options = dict(kwargs.pop("service_backend_options", None) or {})
        unknown = sorted(set(options) - {"mp_context", "startup_timeout"})
        if unknown:
            raise ValueError(
                f"unsupported process service_backend_options {unknown}; expected "
                "mp_context, startup_timeout"
            )
        transport = make_transport(
            transport,
            "process",
            kwargs.pop("transport_options", None),
            kwargs.get("request_spec"),
            kwargs.pop("response_spec", None),
            kwargs.pop("num_clients", None),
        )
        kwargs.pop("shutdown_event", None)
        return ProcessInferenceServer(transport=transport, **options, **kwargs)

    def __init__(
        self,
        model: nn.Module | Callable[[TensorDictBase], TensorDictBase] | None = None,
        transport: InferenceTransport | _TransportName = "auto",
        *,
        policy_factory: Callable[[], Any] | None = None,
        service_backend: Literal["thread", "process", "ray"] = "thread",
        service_backend_options: dict[str, Any] | None = None,
        transport_options: dict[str, Any] | None = None,
        request_spec: TensorDictBase | None = None,
        response_spec: TensorDictBase | None = None,
        num_clients: int | None = None,
        max_batch_size: int | None = None,
        static_batch_size: int | None = None,
        min_batch_size: int | None = None,
        timeout: float | None = None,
        collate_fn: Callable[[list[TensorDictBase]], TensorDictBase] | None = None,
        device: torch.device | str | None = None,
        policy_device: torch.device | str | None = None,
        output_device: torch.device | str | None = None,
        collect_stats: bool | None = None,
        stats_window_size: int | None = None,
        weight_sync: Any = None,
        weight_sync_model_id: str = "policy",
        server_config: InferenceServerConfig | None = None,
        device_config: InferenceDeviceConfig | None = None,
        shutdown_event: Any = None,
        policy_version: int = 0,
        policy_version_key: NestedKey | None = "policy_version",
    ):
        if service_backend_options:
            raise ValueError("service_backend_options apply to a process server only")
        if model is None and policy_factory is None:
            raise ValueError("InferenceServer needs a model or a policy_factory")
        if model is not None and policy_factory is not None:
            raise ValueError("model and policy_factory are mutually exclusive")
        cfg = resolve_batching(
            server_config,
            max_batch_size=max_batch_size,
            static_batch_size=static_batch_size,
            min_batch_size=min_batch_size,
            timeout=timeout,
            collect_stats=collect_stats,
            stats_window_size=stats_window_size,
        )
        _check_batching(cfg.max_batch_size, cfg.min_batch_size, cfg.static_batch_size)
        devices = InferenceDeviceConfig.resolve(
            device_config,
            device=device,
            policy_device=policy_device,
            output_device=output_device,
            allow_storing_device=False,
        )
        self.transport = make_transport(
            transport, "thread", transport_options, request_spec, response_spec, num_clients
        )
        self.model = model if model is not None else policy_factory()
        self.max_batch_size = cfg.max_batch_size
        self.static_batch_size = cfg.static_batch_size
        self.min_batch_size = cfg.min_batch_size
        self.timeout = cfg.timeout
        self.collect_stats = cfg.collect_stats
        self.stats_window_size = cfg.stats_window_size
        self.collate_fn = collate_fn if collate_fn is not None else _collate
        self.policy_device = self.device = devices.policy_device
        self.output_device = devices.output_device
        self.weight_sync = weight_sync
        self.weight_sync_model_id = weight_sync_model_id
        self.policy_version_key = policy_version_key
        self._policy_version = int(policy_version)
        #: a ``multiprocessing.Value`` a process server's owner reads the version from
        self.shared_policy_version: Any = None
        self._shutdown_event = shutdown_event if shutdown_event is not None else threading.Event()
        self._worker: threading.Thread | None = None
        self._model_lock = threading.RLock()
        self._stats_lock = threading.Lock()
        self._reset_stats()
        if self.policy_device is not None and isinstance(self.model, nn.Module):
            self.model.to(self.policy_device)

    # ----------------------------------------------------------------------- stats
    def _reset_stats(self) -> None:
        self._stats_started = time.monotonic()
        self._num_requests = 0
        self._num_batches = 0
        self._num_weight_updates = 0
        self._batch_sizes: list[int] = []
        self._queue_ms: list[float] = []
        self._forward_ms: list[float] = []

    def _window(self, samples: list, new: list) -> None:
        samples.extend(new)
        del samples[: max(len(samples) - self.stats_window_size, 0)]

    @staticmethod
    def _percentile(values: list[float], q: float) -> float:
        if not values:
            return 0.0
        ordered = sorted(values)
        return float(ordered[round((len(ordered) - 1) * q)])

    def stats(self, *, reset: bool = False) -> dict[str, float | int]:
        """Counts and latencies since the start (or the last ``reset=True``).

        Returns:
            ``requests``, ``batches``, ``requests_per_s``, ``batches_per_s``,
            ``avg_batch_size``, ``p50_queue_ms``, ``p95_queue_ms`` (time from
            submission to the forward pass), ``p50_forward_ms``, ``p95_forward_ms``,
            ``policy_version``, ``weight_updates``.
        """
        with self._stats_lock:
            elapsed = max(time.monotonic() - self._stats_started, 1e-12)
            out = {
                "requests": self._num_requests,
                "batches": self._num_batches,
                "requests_per_s": self._num_requests / elapsed,
                "batches_per_s": self._num_batches / elapsed,
                "avg_batch_size": float(mean(self._batch_sizes)) if self._batch_sizes else 0.0,
                "p50_queue_ms": self._percentile(self._queue_ms, 0.5),
                "p95_queue_ms": self._percentile(self._queue_ms, 0.95),
                "p50_forward_ms": self._percentile(self._forward_ms, 0.5),
                "p95_forward_ms": self._percentile(self._forward_ms, 0.95),
                "policy_version": self._policy_version,
                "weight_updates": self._num_weight_updates,
            }
            if reset:
                self._reset_stats()
        return out

    # -------------------------------------------------------------------- versions
    @property
    def policy_version(self) -> int:
        """The policy version the answers carry (bumped by each weight update)."""
        return self._policy_version

    def _mark_weight_update(self) -> None:
        with self._stats_lock:
            self._policy_version += 1
            self._num_weight_updates += 1
            if self.shared_policy_version is not None:
                self.shared_policy_version.value = self._policy_version

    def update_policy_weights_(self, *args: Any, **kwargs: Any) -> None:
        """Records that new weights were applied (the hook a weight-sync scheme calls
        on its context): the version goes up by one."""
        self._mark_weight_update()

    def update_model(
        self, update_fn: Callable[[Any], Any], *, mark_weight_update: bool = True
    ) -> Any:
        """Runs ``update_fn(model)`` while no batch is being served.

        Args:
            update_fn: called with the served model; may change it in place.
            mark_weight_update: bump the policy version afterwards (default).

        Returns:
            What ``update_fn`` returned.
        """
        with self._model_lock:
            out = update_fn(self.model)
            if mark_weight_update:
                self._mark_weight_update()
        return out

    def load_policy_weights(
        self, weights: TensorDictBase, *, mark_weight_update: bool = True
    ) -> None:
        """Copies ``weights`` (a TensorDict of the model's parameters and buffers, as
        ``TensorDict.from_module`` gives) into the served model."""

        @torch.no_grad()
        def apply(model: Any) -> None:
            target = weights.to(self.policy_device) if self.policy_device is not None else weights
            TensorDict.from_module(model).update_(target)

        self.update_model(apply, mark_weight_update=mark_weight_update)

    # ------------------------------------------------------------------- lifecycle
    def start(self) -> InferenceServer:
        """Starts the serving thread.

        Raises:
            RuntimeError: it already runs.
        """
        if self.is_alive:
            raise RuntimeError("the InferenceServer is already running")
        self._shutdown_event.clear()
        self._worker = threading.Thread(target=self._run, daemon=True, name="InferenceServer")
        self._worker.start()
        return self

    def shutdown(self, timeout: float | None = 5.0) -> None:
        """Stops the serving thread; requests still queued get a ``RuntimeError``.
        Idempotent; :meth:`start` may be called again afterwards."""
        self._shutdown_event.set()
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.join(timeout)

    @property
    def is_alive(self) -> bool:
        """Whether the serving thread runs."""
        return self._worker is not None and self._worker.is_alive()

    @property
    def service_backend(self) -> str:
        """Where the policy runs: ``"thread"``."""
        return "thread"

    @property
    def transport_kind(self) -> str:
        """The transport's selector name (``"thread"``, ``"direct"``, ...)."""
        return transport_kind(self.transport)

    def client(self) -> Any:
        """A new client of the transport."""
        return self.transport.client()

    def clients(self, num_clients: int) -> list[Any]:
        """``num_clients`` independent clients."""
        if isinstance(num_clients, bool) or not isinstance(num_clients, int):
            raise TypeError(f"num_clients must be an int, got {num_clients!r}")
        if num_clients < 1:
            raise ValueError(f"num_clients must be at least 1, got {num_clients}")
        return [self.client() for _ in range(num_clients)]

    def __enter__(self) -> InferenceServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    def __del__(self) -> None:
        worker = getattr(self, "_worker", None)
        if worker is not None and worker.is_alive():
            self.shutdown(timeout=1.0)

    # ---------------------------------------------------------------- serving loop
    def _init_weight_sync(self) -> None:
        ws = self.weight_sync
        if ws is None:
            return
        if not getattr(ws, "initialized_on_receiver", False):
            ws.init_on_receiver(model_id=self.weight_sync_model_id, model=self.model, worker_idx=0)
        if not getattr(ws, "synchronized_on_receiver", False):
            ws.connect(worker_idx=0)
        if hasattr(ws, "context") and ws.context is None:
            # the scheme reports applied weights to its context: versions count there
            ws.context = self

    def _poll_weights(self) -> None:
        ws = self.weight_sync
        if ws is None:
            return
        with self._model_lock:
            received = ws.receive(timeout=0.0)
        if received is not None and getattr(ws, "context", None) is not self:
            self._mark_weight_update()

    def _drain(self, n: int) -> tuple[list, list, list]:
        timed = getattr(self.transport, "drain_with_timing", None)
        if timed is not None:
            return timed(n)
        items, callbacks = self.transport.drain(n)
        return items, callbacks, [None] * len(items)

    def _interaction(self, batch: TensorDictBase) -> tuple[Any, TensorDictBase]:
        codes = batch.get(INTERACTION_KEY, None)
        if codes is None:
            return contextlib.nullcontext(), batch
        batch = batch.exclude(INTERACTION_KEY)
        codes = codes.reshape(-1)
        if codes.numel() == 0:
            return contextlib.nullcontext(), batch
        code = int(codes[0])
        if not bool((codes == code).all()):
            kinds = sorted({str(CODE_INTERACTIONS.get(int(c), "none")) for c in codes.tolist()})
            raise RuntimeError(
                f"one batch mixes requests of exploration types {kinds}: send requests of "
                "one type at a time or use max_batch_size=1"
            )
        if code == _NO_INTERACTION:
            return contextlib.nullcontext(), batch
        # this thread only: the process-wide type belongs to the user's threads
        return set_thread_exploration_type(CODE_INTERACTIONS[code]), batch

    def _forward(self, items: list[TensorDictBase]) -> TensorDictBase:
        n = len(items)
        if self.static_batch_size is not None and n < self.static_batch_size:
            items = items + [items[-1]] * (self.static_batch_size - n)
        batch = self.collate_fn(items)
        if self.policy_device is not None:
            batch = batch.to(self.policy_device)
        with self._model_lock:
            context, batch = self._interaction(batch)
            with context:
                out = self.model(batch)
        if not isinstance(out, TensorDictBase):
            raise TypeError(f"the policy returned a {type(out).__name__}, expected a TensorDict")
        if out.batch_size[:1] != torch.Size([len(items)]):
            raise RuntimeError(
                f"the policy returned a batch of size {tuple(out.batch_size)} for "
                f"{len(items)} requests"
            )
        if self.output_device is not None:
            out = out.to(self.output_device)
        if self.policy_version_key is not None:
            version = torch.full(
                out.batch_size, self._policy_version, dtype=torch.long, device=out.device
            )
            out.set(self.policy_version_key, version)
        return out[:n] if len(items) != n else out

    @torch.no_grad()
    def _run(self) -> None:
        try:
            self._init_weight_sync()
            while not self._shutdown_event.is_set():
                self._poll_weights()
                self.transport.wait_for_work(timeout=self.timeout)
                items, callbacks, stamps = self._drain(self.max_batch_size)
                if not items:
                    continue
                deadline = time.monotonic() + self.timeout
                while len(items) < self.min_batch_size and time.monotonic() < deadline:
                    self.transport.wait_for_work(timeout=max(deadline - time.monotonic(), 0.0))
                    more = self._drain(self.max_batch_size - len(items))
                    items += more[0]
                    callbacks += more[1]
                    stamps += more[2]
                self._serve(items, callbacks, stamps)
        finally:
            self._reject_pending()

    def _serve(self, items: list, callbacks: list, stamps: list) -> None:
        start = time.monotonic()
        try:
            out = self._forward(items)
        except Exception as exc:  # noqa: BLE001 - the policy's error goes to its clients
            for callback in callbacks:
                self.transport.resolve_exception(callback, exc)
            return
        if self.collect_stats:
            now = time.monotonic()
            with self._stats_lock:
                self._num_requests += len(items)
                self._num_batches += 1
                self._window(self._batch_sizes, [len(items)])
                self._window(self._queue_ms, [(start - s) * 1e3 for s in stamps if s is not None])
                self._window(self._forward_ms, [(now - start) * 1e3])
        for callback, answer in zip(callbacks, out.unbind(0)):
            try:
                self.transport.resolve(callback, answer)
            except Exception as exc:  # noqa: BLE001 - e.g. an answer that lacks a spec key
                self.transport.resolve_exception(callback, exc)

    def _reject_pending(self) -> None:
        error = RuntimeError("the InferenceServer shut down before serving this request")
        while True:
            items, callbacks, _ = self._drain(self.max_batch_size)
            if not items:
                return
            for callback in callbacks:
                self.transport.resolve_exception(callback, error)


# ``__new__`` takes ``*args, **kwargs`` (to hand a process backend to its owner): show
# the constructor's real arguments to ``help()`` and ``inspect.signature``
InferenceServer.__signature__ = inspect.signature(InferenceServer.__init__).replace(
    parameters=list(inspect.signature(InferenceServer.__init__).parameters.values())[1:]
)
