"""``ProcessInferenceServer``: the serving loop in a dedicated process."""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
from collections.abc import Callable
from multiprocessing.context import BaseContext
from typing import Any, Literal

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from ._config import InferenceDeviceConfig, InferenceServerConfig
from ._mailbox import watch_process
from ._mp import MPTransport
from ._server import InferenceServer, resolve_batching, transport_kind
from ._shared_memory import SharedMemoryTransport
from ._transport import InferenceTransport

__all__ = ["ProcessInferenceServer"]

_Verb = Literal["stats", "health", "update_model_weights", "shutdown"]


def _serve(policy_factory, transport, server_kwargs, stop, ready, control, version) -> None:
    """The server process: build the policy, serve, answer control commands."""
    try:
        server = InferenceServer(policy_factory(), transport, shutdown_event=stop, **server_kwargs)
        server.shared_policy_version = version
        server.start()
    except BaseException as exc:
        ready.put((False, f"{type(exc).__name__}: {exc}"))
        raise
    ready.put((True, None))
    try:
        while not stop.is_set():
            if not server.is_alive:
                raise RuntimeError("the serving loop of the server process died")
            if not control.poll(0.05):
                continue
            verb, payload = control.recv()
            try:
                if verb == "stats":
                    answer: Any = server.stats(**payload)
                elif verb == "health":
                    answer = {"alive": server.is_alive, "policy_version": server.policy_version}
                elif verb == "update_model_weights":
                    server.load_policy_weights(
                        payload["weights"], mark_weight_update=payload["mark_weight_update"]
                    )
                    answer = {"accepted": True}
                elif verb == "shutdown":
                    stop.set()
                    answer = {"accepted": True}
                else:
                    raise ValueError(f"unknown command {verb!r}")
            except Exception as exc:  # noqa: BLE001 - reported to the owner
                control.send((False, f"command {verb!r} failed: {type(exc).__name__}: {exc}"))
            else:
                control.send((True, answer))
    finally:
        server.shutdown(timeout=None)


class ProcessInferenceServer:
    """An :class:`~rl.core.inference_server.InferenceServer` in its own process.

    ``policy_factory`` builds the policy inside the server process (so its parameters
    live there); clients in any process talk to it through a cross-process transport
    (:class:`MPTransport`, :class:`SharedMemoryTransport`). When the server process
    dies, a client waiting for an answer raises
    :class:`~rl.core.inference_server.InferenceServerClosedError` within a fraction of
    a second instead of hanging. :meth:`stats`, :meth:`health` and
    :meth:`update_model_weights` are round trips to the server process.

    Keyword Args:
        policy_factory: a picklable zero-argument callable returning the policy.
        transport: the cross-process transport shared with the clients. With a
            transport that is not manager-backed, create the clients before
            :meth:`start` (:meth:`client` is created at construction).
        request_spec: unused (TorchRL's layout hint for its distributed transport).
        max_batch_size, static_batch_size, min_batch_size, timeout, collate_fn,
        device, policy_device, output_device, collect_stats, stats_window_size,
        weight_sync, weight_sync_model_id, server_config, device_config,
        policy_version, policy_version_key: as for
            :class:`~rl.core.inference_server.InferenceServer`.
        mp_context: a ``multiprocessing`` context or start method (default
            ``"spawn"``).
        startup_timeout: seconds :meth:`start` waits for the policy to be built
            (default 300).

    Examples:
        >>> import multiprocessing as mp
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.core.inference_server import MPTransport, ProcessInferenceServer
        >>> def make_policy():
        ...     return TensorDictModule(torch.nn.Linear(4, 2), ["obs"], ["act"])
        >>> ctx = mp.get_context("fork")  # "spawn" needs an importable policy_factory
        >>> server = ProcessInferenceServer(
        ...     policy_factory=make_policy, transport=MPTransport(ctx), mp_context=ctx)
        >>> client = server.client()
        >>> with server:
        ...     client(TensorDict(obs=torch.zeros(4)))["act"].shape
        torch.Size([2])
    """

    def __init__(
        self,
        *,
        policy_factory: Callable[[], Any],
        transport: InferenceTransport,
        request_spec: TensorDictBase | None = None,
        max_batch_size: int | None = None,
        static_batch_size: int | None = None,
        min_batch_size: int | None = None,
        timeout: float | None = None,
        collate_fn: Callable | None = None,
        device: torch.device | str | None = None,
        policy_device: torch.device | str | None = None,
        output_device: torch.device | str | None = None,
        collect_stats: bool | None = None,
        stats_window_size: int | None = None,
        weight_sync: Any = None,
        weight_sync_model_id: str = "policy",
        server_config: InferenceServerConfig | None = None,
        device_config: InferenceDeviceConfig | None = None,
        policy_version: int = 0,
        policy_version_key: NestedKey | None = "policy_version",
        mp_context: str | BaseContext | None = None,
        startup_timeout: float = 300.0,
    ) -> None:
        if not callable(policy_factory):
            raise TypeError(f"policy_factory must be callable, got {policy_factory!r}")
        if not isinstance(transport, InferenceTransport):
            raise TypeError(
                f"transport must be an InferenceTransport, got {type(transport).__name__}"
            )
        cfg = resolve_batching(
            server_config,
            max_batch_size=max_batch_size,
            static_batch_size=static_batch_size,
            min_batch_size=min_batch_size,
            timeout=timeout,
            collect_stats=collect_stats,
            stats_window_size=stats_window_size,
        )
        devices = InferenceDeviceConfig.resolve(
            device_config,
            device=device,
            policy_device=policy_device,
            output_device=output_device,
            allow_storing_device=False,
        )
        self.policy_factory = policy_factory
        self.transport = transport
        self.startup_timeout = startup_timeout
        if mp_context is None or isinstance(mp_context, str):
            self._ctx = mp.get_context(mp_context or "spawn")
        else:
            self._ctx = mp_context
        alive = getattr(transport, "_peer_alive", None)
        if alive is None:
            alive = self._ctx.Event()
            alive.set()
            transport.set_peer_alive(alive)
        self._alive = alive
        self._service_client = transport.client()
        self._stop = self._ctx.Event()
        self._ready = self._ctx.Queue()
        self._control, self._child_control = self._ctx.Pipe()
        self._control_lock = threading.Lock()
        self._version = self._ctx.Value("q", int(policy_version))
        self._process: Any = None
        self._monitor: threading.Thread | None = None
        self._server_kwargs = {
            "max_batch_size": cfg.max_batch_size,
            "static_batch_size": cfg.static_batch_size,
            "min_batch_size": cfg.min_batch_size,
            "timeout": cfg.timeout,
            "collect_stats": cfg.collect_stats,
            "stats_window_size": cfg.stats_window_size,
            "collate_fn": collate_fn,
            "policy_device": devices.policy_device,
            "output_device": devices.output_device,
            "weight_sync": weight_sync,
            "weight_sync_model_id": weight_sync_model_id,
            "policy_version": policy_version,
            "policy_version_key": policy_version_key,
        }

    @property
    def policy_version(self) -> int:
        """The server process's policy version."""
        return int(self._version.value)

    def start(self) -> ProcessInferenceServer:
        """Starts the server process and waits until its policy is built.

        Raises:
            RuntimeError: it already runs, or the policy factory failed (its error).
            TimeoutError: the policy was not built within ``startup_timeout``.
        """
        if self.is_alive:
            raise RuntimeError("the ProcessInferenceServer is already running")
        if self._monitor is not None:
            self._monitor.join()
        self._stop.clear()
        self._alive.set()
        self._process = self._ctx.Process(
            target=_serve,
            args=(
                self.policy_factory,
                self.transport,
                self._server_kwargs,
                self._stop,
                self._ready,
                self._child_control,
                self._version,
            ),
            daemon=True,
            name="ProcessInferenceServer",
        )
        self._process.start()
        self._monitor = threading.Thread(
            target=watch_process, args=(self._process.sentinel, self._alive), daemon=True
        )
        self._monitor.start()
        try:
            ok, error = self._ready.get(timeout=self.startup_timeout)
        except queue.Empty:
            self.shutdown(timeout=1.0)
            raise TimeoutError(
                f"the ProcessInferenceServer did not report readiness within startup_timeout="
                f"{self.startup_timeout} s (raise it for a slow policy_factory)"
            ) from None
        if not ok:
            self.shutdown(timeout=1.0)
            raise RuntimeError(f"the ProcessInferenceServer failed to start: {error}")
        return self

    def _command(self, verb: _Verb, payload: dict | None = None, timeout: float = 5.0) -> Any:
        process = self._process
        if process is None or not process.is_alive():
            code = None if process is None else process.exitcode
            raise RuntimeError(
                f"the ProcessInferenceServer is not running (exit code {code}): cannot "
                f"answer {verb!r}"
            )
        with self._control_lock:
            self._control.send((verb, payload or {}))
            if not self._control.poll(timeout):
                raise TimeoutError(
                    f"the ProcessInferenceServer did not answer {verb!r} within {timeout} s"
                )
            ok, answer = self._control.recv()
        if not ok:
            raise RuntimeError(f"ProcessInferenceServer {answer}")
        return answer

    def shutdown(self, timeout: float | None = 5.0) -> None:
        """Stops the server process (terminating it if it does not exit in
        ``timeout`` seconds). Idempotent; :meth:`start` may be called again."""
        self._stop.set()
        process, self._process = self._process, None
        if process is None:
            return
        process.join(timeout)
        if process.is_alive():
            process.terminate()
            process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
        if self._monitor is not None:
            self._monitor.join(timeout)
            self._monitor = None
        # a command interrupted by the exit may have left an answer behind
        while self._control.poll():
            self._control.recv()

    @property
    def is_alive(self) -> bool:
        """Whether the server process runs."""
        return self._process is not None and self._process.is_alive()

    @property
    def service_backend(self) -> str:
        """Where the policy runs: ``"process"``."""
        return "process"

    @property
    def transport_kind(self) -> str:
        """The transport's selector name."""
        return transport_kind(self.transport)

    def client(self) -> Any:
        """The client created with the server (it predates the server process)."""
        return self._service_client

    def clients(self, num_clients: int) -> list[Any]:
        """``num_clients`` new clients.

        Raises:
            RuntimeError: the server process runs and the transport's reply queues
                are not manager-backed (its clients must exist before :meth:`start`).
        """
        if isinstance(num_clients, bool) or not isinstance(num_clients, int):
            raise TypeError(f"num_clients must be an int, got {num_clients!r}")
        if num_clients < 1:
            raise ValueError(f"num_clients must be at least 1, got {num_clients}")
        fixed = isinstance(self.transport, SharedMemoryTransport) or (
            isinstance(self.transport, MPTransport) and self.transport._manager is None
        )
        if fixed and self.is_alive:
            raise RuntimeError(
                f"a {type(self.transport).__name__} without a manager routes only the clients "
                "created before start(): create them first (or use MPTransport(use_manager=True))"
            )
        return [self.transport.client() for _ in range(num_clients)]

    def stats(self, *, reset: bool = False, timeout: float = 5.0) -> dict[str, float | int]:
        """The server process's :meth:`InferenceServer.stats`."""
        return self._command("stats", {"reset": reset}, timeout)

    def update_model_weights(
        self, weights: TensorDictBase, *, mark_weight_update: bool = True, timeout: float = 300.0
    ) -> dict[str, bool]:
        """Copies ``weights`` (``TensorDict.from_module(policy)``) into the policy of
        the server process; bumps the version unless ``mark_weight_update=False``."""
        payload = {"weights": weights, "mark_weight_update": mark_weight_update}
        return self._command("update_model_weights", payload, timeout)

    def health(self, *, timeout: float = 5.0) -> dict[str, Any]:
        """``process_alive``, ``pid``, ``exitcode`` and, when it answers, the server's
        ``alive`` and ``policy_version`` (``control_error`` when it does not). Never
        raises."""
        process = self._process
        out: dict[str, Any] = {
            "process_alive": process is not None and process.is_alive(),
            "pid": None if process is None else process.pid,
            "exitcode": None if process is None else process.exitcode,
        }
        if out["process_alive"]:
            try:
                out.update(self._command("health", timeout=timeout))
            except (RuntimeError, TimeoutError) as exc:
                out["control_error"] = repr(exc)
        return out

    def __enter__(self) -> ProcessInferenceServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    def __del__(self) -> None:
        process = getattr(self, "_process", None)
        if process is not None and process.is_alive():
            self.shutdown(timeout=1.0)
