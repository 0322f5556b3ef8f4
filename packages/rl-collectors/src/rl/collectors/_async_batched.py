"""``AsyncBatchedCollector``: environments step on their own, an inference server acts.

Each environment has a coordinator thread that sends its observation to an
:class:`~rl.core.inference_server.InferenceServer`, waits for the action, steps the
environment and hands the transition to the collector. The server batches whatever
observations have arrived, so fast environments never wait for slow ones.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
from tensordict import NestedKey, TensorDict, TensorDictBase
from torch import nn

from rl.core import ExplorationType
from rl.core.inference_server import (
    InferenceDeviceConfig,
    InferenceServer,
    InferenceServerClosedError,
    InferenceServerConfig,
    InferenceTransport,
    MPTransport,
    PolicyClientModule,
    ProcessInferenceServer,
    RayTransport,
    SlotTransport,
)
from rl.envs import EnvBase, ProcessorAsyncEnvPool

from ._base import CollectorBase

__all__ = ["AsyncBatchedCollector"]

logger = logging.getLogger(__name__)

_ENV_INDEX_KEY = "env_index"
_TRAJ_KEY = ("collector", "traj_ids")
_BACKENDS = ("threading", "multiprocessing", "ray", "monarch")
_ENV_BACKENDS = ("threading", "multiprocessing")
# how often a waiting collector checks that its server and workers still run
_POLL_S = 0.5


def _start_method() -> str:
    """``"fork"`` on Linux while CUDA is not initialised (fast), ``"spawn"`` otherwise."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    return "fork" if sys.platform.startswith("linux") and not cuda else "spawn"


class _PoolSlot:
    """One sub-env of a :class:`~rl.envs.ProcessorAsyncEnvPool`, driven by its
    coordinator thread with per-env sends and receives (``env_index=index``)."""

    def __init__(self, pool: ProcessorAsyncEnvPool, index: int):
        self.pool = pool
        self.index = index

    def reset(self) -> TensorDictBase:
        self.pool.async_reset_send(env_index=self.index)
        return self.pool.async_reset_recv(env_index=self.index).exclude(_ENV_INDEX_KEY)

    def step_and_maybe_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        self.pool.async_step_and_maybe_reset_send(td, env_index=self.index)
        transition, root_next = self.pool.async_step_and_maybe_reset_recv(env_index=self.index)
        # the pool's "env_index" (non-tensor data) is the collector's to set, as a tensor;
        # the next root goes to the policy without it
        return transition, root_next.exclude(_ENV_INDEX_KEY)


def _coordinate(
    index: int,
    slot: _PoolSlot | None,
    create_env_fn: Callable,
    env_kwargs: dict,
    client: Any,
    results: queue.Queue,
    stop: threading.Event,
    episodes: list[int],
    num_envs: int,
    env_device: Any,
    storing_device: Any,
) -> None:
    """One coordinator: reset, then act / step / queue until ``stop`` is set.

    It takes what it uses rather than the collector, so that a collector dropped
    without ``shutdown()`` is garbage-collected (and its ``__del__`` stops the
    coordinators, the server and the environment processes).
    """
    in_process = slot is None
    env: Any = None
    episode = episodes[index]
    try:
        env = create_env_fn(**env_kwargs) if in_process else slot
        td = env.reset()
        while not stop.is_set():
            td = client(td)
            if env_device is not None:
                td = td.to(env_device)
            transition, td = env.step_and_maybe_reset(td)
            transition.set(_ENV_INDEX_KEY, torch.tensor(index))
            transition.set(_TRAJ_KEY, torch.tensor(episode * num_envs + index))
            if bool(transition["next", "done"].any()):
                episode += 1
            if storing_device is not None:
                transition = transition.to(storing_device)
            results.put(transition)
    except Exception as exc:  # noqa: BLE001 - reported by the iterating thread
        if not stop.is_set():
            results.put(exc)
    finally:
        # the next start resets the env: a new trajectory, with a new id
        episodes[index] = episode + 1
        if in_process and env is not None:
            env.close()


class _EnvProcesses(ProcessorAsyncEnvPool):
    """The collector's env processes: a pool whose workers may take as long as their env
    needs to answer (a first step that compiles, a slow simulator), as the collector's
    env processes always could; a worker that dies or raises is still reported at once."""

    _worker_timeout = None


class AsyncBatchedCollector(CollectorBase):
    """Collects from environments that act through an inference server.

    One coordinator thread per environment resets it, sends each observation to an
    :class:`~rl.core.inference_server.InferenceServer` (through a
    :class:`~rl.core.inference_server.PolicyClientModule`), steps the environment with
    the action it gets back and queues the transition. The server runs the policy once
    on whatever observations are waiting (up to ``max_batch_size``), so there is no
    barrier between environments. A batch holds the next ``frames_per_batch``
    transitions in arrival order (shape ``[frames_per_batch]``), each with its
    ``"env_index"``, its ``("collector", "traj_ids")`` and the server's
    ``"policy_version"``.

    Environments run in the coordinator threads (``env_backend="threading"``) or in
    the worker processes of a :class:`~rl.envs.ProcessorAsyncEnvPool`
    (``"multiprocessing"``): each coordinator drives its env's slot of the pool with
    per-env sends and receives, and the data goes through the pool's shared-memory
    buffers (nothing is pickled per step). As for the pool, the envs must then share
    their specs (a mismatch raises at the first batch, naming the entry), and the
    factories must pickle (with ``cloudpickle``) where workers are spawned. The
    server runs in a thread of this process, or in its own process with
    ``server_config=InferenceServerConfig(service_backend="process")`` (then give a
    picklable ``policy_factory``). A dead server or environment process raises a
    ``RuntimeError`` in the iterating thread within a second; :meth:`shutdown` stops
    every thread and process it started.

    Args:
        create_env_fn: a list of environment factories, one per environment.

    Keyword Args:
        policy: the policy (a TensorDict module). Exclusive with ``policy_factory``.
        policy_factory: a zero-argument callable returning the policy.
        frames_per_batch: transitions per batch (required).
        total_frames: transitions to collect in all; ``-1`` (default) for no end.
        max_batch_size, min_batch_size, server_timeout: the server's batching (its
            ``max_batch_size``, ``min_batch_size``, ``timeout``); exclusive with
            ``server_config``.
        transport: an :class:`~rl.core.inference_server.InferenceTransport` to use
            instead of the one ``policy_backend`` selects.
        device: the policy's device (exclusive with ``device_config``).
        backend: the default of ``env_backend`` and ``policy_backend``:
            ``"threading"`` (when ``None``), ``"multiprocessing"``, ``"ray"``.
        env_backend: ``"threading"`` or ``"multiprocessing"``.
        env_exchange: how transitions come back: only ``"auto"`` (TorchRL's other
            exchanges are not implemented).
        envs_per_worker: environments per coordinator: only ``1``.
        transition_chunk_size: only ``"auto"`` (one transition at a time).
        policy_backend: the transport: ``"threading"`` (a
            :class:`~rl.core.inference_server.SlotTransport`), ``"multiprocessing"``
            (an :class:`~rl.core.inference_server.MPTransport`) or ``"ray"`` (a
            :class:`~rl.core.inference_server.RayTransport`; Ray must be running).
            ``"monarch"`` is not available.
        reset_at_each_iter: reset every environment before each batch (the
            transitions of unfinished episodes are dropped).
        postproc: applied to each batch.
        exploration_type: the exploration type the policy runs under (default
            ``RANDOM``).
        replay_buffer: batches are written there (``extend``) and ``None`` is yielded.
        post_collect_hook: called with each batch.
        yield_completed_trajectories: yield whole trajectories (shape ``[T]``) as
            they finish; ``frames_per_batch`` is then ignored.
        weight_sync, weight_sync_model_id: the server's weight-sync scheme.
        verbose: log progress at debug level.
        create_env_kwargs: keyword arguments of the factories (one dict for all or
            one per factory).
        worker_affinity, driver_affinity: CPU pinning: only ``None``.
        server_config: an :class:`~rl.core.inference_server.InferenceServerConfig`.
        device_config: an :class:`~rl.core.inference_server.InferenceDeviceConfig`
            (``env_device``: where actions go before stepping, ``storing_device``:
            where transitions are stored).
        policy_version: the server's first policy version.
        policy_version_key: where transitions carry it (``None``: not added).

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.collectors import AsyncBatchedCollector
        >>> from rl.envs import PendulumEnv
        >>> policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        >>> collector = AsyncBatchedCollector(
        ...     [PendulumEnv] * 2, policy=policy, frames_per_batch=16, total_frames=32)
        >>> [batch.shape for batch in collector]
        [torch.Size([16]), torch.Size([16])]
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: Sequence[Callable[..., EnvBase]],
        *,
        policy: nn.Module | Callable | None = None,
        policy_factory: Callable[[], Callable] | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        max_batch_size: int | None = None,
        min_batch_size: int | None = None,
        server_timeout: float | None = None,
        transport: InferenceTransport | None = None,
        device: torch.device | str | None = None,
        backend: Literal["threading", "multiprocessing", "ray", "monarch"] | None = None,
        env_backend: Literal["threading", "multiprocessing"] | None = None,
        env_exchange: str = "auto",
        envs_per_worker: int = 1,
        transition_chunk_size: int | str = "auto",
        policy_backend: Literal["threading", "multiprocessing", "ray", "monarch"] | None = None,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        replay_buffer: Any = None,
        post_collect_hook: Callable[[TensorDictBase], None] | None = None,
        yield_completed_trajectories: bool = False,
        weight_sync: Any = None,
        weight_sync_model_id: str = "policy",
        verbose: bool = False,
        create_env_kwargs: dict | Sequence[dict] | None = None,
        worker_affinity: Any = None,
        driver_affinity: Any = None,
        server_config: InferenceServerConfig | None = None,
        device_config: InferenceDeviceConfig | None = None,
        policy_version: int = 0,
        policy_version_key: NestedKey | None = "policy_version",
    ):
        if policy is not None and policy_factory is not None:
            raise TypeError("policy and policy_factory are mutually exclusive")
        if policy is None and policy_factory is None:
            raise TypeError("one of policy or policy_factory must be provided")
        if isinstance(create_env_fn, (str, bytes)) or not isinstance(create_env_fn, Sequence):
            raise TypeError(
                "create_env_fn must be a list of environment factories (one per environment), "
                f"got {type(create_env_fn).__name__}"
            )
        if not create_env_fn or not all(callable(fn) for fn in create_env_fn):
            raise TypeError(
                f"create_env_fn must be a non-empty list of callables, got {create_env_fn!r}"
            )
        if (
            isinstance(frames_per_batch, bool)
            or not isinstance(frames_per_batch, int)
            or frames_per_batch < 1
        ):
            raise ValueError(f"frames_per_batch must be a positive int, got {frames_per_batch!r}")
        if not isinstance(total_frames, int) or (total_frames < 1 and total_frames != -1):
            raise ValueError(
                f"total_frames must be a positive int or -1 (no end), got {total_frames!r}"
            )
        for name, value, supported in (
            ("env_exchange", env_exchange, "auto"),
            ("envs_per_worker", envs_per_worker, 1),
            ("transition_chunk_size", transition_chunk_size, "auto"),
            ("worker_affinity", worker_affinity, None),
            ("driver_affinity", driver_affinity, None),
        ):
            if value != supported:
                raise ValueError(
                    f"AsyncBatchedCollector supports only {name}={supported!r} in rl, got {value!r}"
                )
        if server_config is not None:
            clash = [
                name
                for name, value in (
                    ("max_batch_size", max_batch_size),
                    ("min_batch_size", min_batch_size),
                    ("server_timeout", server_timeout),
                )
                if value is not None
            ]
            if clash:
                raise ValueError(
                    "server_config is mutually exclusive with "
                    + ", ".join(clash)
                    + " (set them in the config)"
                )
        else:
            server_config = InferenceServerConfig(
                **{
                    k: v
                    for k, v in (
                        ("max_batch_size", max_batch_size),
                        ("min_batch_size", min_batch_size),
                        ("timeout", server_timeout),
                    )
                    if v is not None
                }
            )
        devices = InferenceDeviceConfig.resolve(device_config, device=device)
        self._env_device = devices.env_device
        self._storing_device = devices.storing_device

        num_envs = len(create_env_fn)
        if isinstance(create_env_kwargs, Sequence):
            if len(create_env_kwargs) != num_envs:
                raise ValueError(
                    f"create_env_kwargs has {len(create_env_kwargs)} entries for {num_envs} env factories"
                )
            env_kwargs = [dict(kw) for kw in create_env_kwargs]
        else:
            env_kwargs = [dict(create_env_kwargs or {}) for _ in range(num_envs)]
        self._create_env_fn = list(create_env_fn)
        self._env_kwargs = env_kwargs
        self._num_envs = num_envs

        if backend is not None and backend not in _BACKENDS:
            raise ValueError(f"backend={backend!r} is not supported; expected one of {_BACKENDS}")
        env_backend = env_backend or (backend if backend in _ENV_BACKENDS else "threading")
        if env_backend not in _ENV_BACKENDS:
            raise ValueError(
                f"env_backend={env_backend!r} is not supported; expected one of {_ENV_BACKENDS}"
            )
        process_server = server_config.service_backend == "process"
        if server_config.service_backend == "ray":
            raise ValueError(
                "AsyncBatchedCollector does not run a Ray-owned server (InferenceServerConfig(service_backend='ray')): use "
                "policy_backend='ray' (a thread server serving through Ray queues)"
            )
        if process_server and policy_factory is None:
            raise TypeError(
                "InferenceServerConfig(service_backend='process') needs policy_factory: the "
                "policy is built in the server process"
            )
        policy_backend = (
            policy_backend or backend or ("multiprocessing" if process_server else "threading")
        )
        if process_server and policy_backend != "multiprocessing" and transport is None:
            raise ValueError(
                f"a process server needs policy_backend='multiprocessing', got {policy_backend!r}"
            )
        self._env_backend = env_backend
        self._policy_backend = policy_backend
        self._ctx = mp.get_context(_start_method())
        if transport is None:
            transport = self._make_transport(policy_backend, num_envs)
        self._transport = transport

        self._policy_factory = policy_factory
        if policy is None and not process_server:
            policy = policy_factory()
        self._policy = policy
        server_kwargs = {
            "max_batch_size": server_config.max_batch_size,
            "static_batch_size": server_config.static_batch_size,
            "min_batch_size": server_config.min_batch_size,
            "timeout": server_config.timeout,
            "collect_stats": server_config.collect_stats,
            "stats_window_size": server_config.stats_window_size,
            "policy_device": devices.policy_device,
            "output_device": devices.output_device,
            "weight_sync": weight_sync,
            "weight_sync_model_id": weight_sync_model_id,
            "policy_version": policy_version,
            "policy_version_key": policy_version_key,
        }
        if process_server:
            self._server: Any = ProcessInferenceServer(
                policy_factory=policy_factory,
                transport=transport,
                mp_context=self._ctx,
                **server_kwargs,
            )
        else:
            self._server = InferenceServer(policy, transport, **server_kwargs)
        self._max_inflight = server_config.max_inflight_per_env
        self._clients: list[PolicyClientModule] | None = None

        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.reset_at_each_iter = reset_at_each_iter
        self.yield_completed_trajectories = yield_completed_trajectories
        self.exploration_type = exploration_type
        self.postproc = postproc
        self.replay_buffer = replay_buffer
        self.post_collect_hook = post_collect_hook
        self.split_trajs = False
        self.verbose = verbose
        self._init_base()

        self._stop_workers = threading.Event()
        self._results: queue.Queue = queue.Queue()
        self._workers: list[threading.Thread] = []
        self._stopped: list[threading.Thread] = []  # the coordinators last stopped
        self._env_pool: ProcessorAsyncEnvPool | None = None
        self._partial: list[deque] = [deque() for _ in range(num_envs)]
        self._episodes = [0] * num_envs  # trajectories each env started
        self._done_trajs: deque = deque()

    def _make_transport(self, policy_backend: str, num_envs: int) -> InferenceTransport:
        if policy_backend == "threading":
            return SlotTransport(num_envs)
        if policy_backend == "multiprocessing":
            return MPTransport(self._ctx)
        if policy_backend == "ray":
            return RayTransport()
        if policy_backend == "monarch":
            raise ValueError(
                "policy_backend='monarch' is not available in rl (Monarch is not supported)"
            )
        raise ValueError(
            f"policy_backend={policy_backend!r} is not supported; expected one of {_BACKENDS[:3]}"
        )

    # ------------------------------------------------------------------- lifecycle
    def _ensure_started(self) -> None:
        if self._workers:
            return
        if self._env_backend == "multiprocessing" and self._env_pool is None:
            self._env_pool = _EnvProcesses(self._create_env_fn, create_env_kwargs=self._env_kwargs)
        if self._clients is None:
            # before a server process starts: it inherits the clients' reply queues
            self._clients = [
                PolicyClientModule(
                    self._transport.client(),
                    max_inflight=self._max_inflight,
                    interaction_type=self.exploration_type,
                )
                for _ in range(self._num_envs)
            ]
        if not self._server.is_alive:
            self._server.start()
        # a new event and queue per start: a coordinator of an earlier start that is
        # still winding down never sees them
        self._stop_workers = threading.Event()
        self._results = queue.Queue()
        self._workers = [
            threading.Thread(
                # not a bound method: a coordinator holding the collector would keep it
                # from garbage collection, and so its processes and threads alive
                target=_coordinate,
                args=(
                    i,
                    None if self._env_pool is None else _PoolSlot(self._env_pool, i),
                    self._create_env_fn[i],
                    self._env_kwargs[i],
                    self._clients[i],
                    self._results,
                    self._stop_workers,
                    self._episodes,
                    self._num_envs,
                    self._env_device,
                    self._storing_device,
                ),
                daemon=True,
                name=f"AsyncBatchedCollector-{i}",
            )
            for i in range(self._num_envs)
        ]
        for worker in self._workers:
            worker.start()

    def _stop_coordinators(self, timeout: float) -> None:
        self._stop_workers.set()
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            worker.join(max(deadline - time.monotonic(), 0.0))
        self._stopped, self._workers = self._workers, []

    def _close(self) -> None:
        # the server serves until the coordinators are gone: none is left waiting on it
        timeout = self._shutdown_timeout
        self._stop_coordinators(timeout)
        self._server.shutdown(timeout=timeout)
        if self._env_pool is not None:
            self._env_pool.close()
            self._env_pool = None
        close = getattr(self._transport, "close", None)
        if close is not None and isinstance(self._transport, (MPTransport, RayTransport)):
            close()

    _shutdown_timeout = 5.0

    def shutdown(
        self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True
    ) -> None:
        """Stops the coordinator threads, the server and the environment processes
        (idempotent). ``raise_on_error`` is accepted for TorchRL compatibility."""
        self._shutdown_timeout = 5.0 if timeout is None else timeout
        super().shutdown(timeout=timeout, close_env=close_env)

    # ------------------------------------------------------------------ collection
    @property
    def env(self) -> list[Callable]:
        """The environment factories."""
        return self._create_env_fn

    @property
    def policy(self) -> Any:
        """The served policy (the ``policy_factory`` with a process server)."""
        return self._policy if self._policy is not None else self._policy_factory

    @property
    def policy_version(self) -> int:
        """The server's policy version."""
        return self._server.policy_version

    def update_policy_weights_(self, policy_or_weights: Any = None, **kwargs: Any) -> None:
        """Makes the server act with new weights; its policy version goes up by one, so
        transitions tell which weights acted (``"policy_version"``).

        Args:
            policy_or_weights: a module, a state dict or a TensorDict of parameters
                (``TensorDict.from_module(policy)``). ``None`` with a thread server: the
                served policy is the one given to the collector, updated in place; only
                the version changes.

        Raises:
            ValueError: ``None`` with a process server (it holds its own copy).
        """
        if "policy_weights" in kwargs:  # TorchRL's older keyword
            policy_or_weights = kwargs.pop("policy_weights")
        weights = policy_or_weights
        if isinstance(weights, nn.Module):
            weights = TensorDict.from_module(weights).data
        elif isinstance(weights, dict):
            weights = TensorDict(weights).unflatten_keys(".")
        if isinstance(self._server, ProcessInferenceServer):
            if weights is None:
                raise ValueError(
                    "the process server holds its own copy of the policy: pass the weights "
                    "(a module, a state dict or TensorDict.from_module(policy))"
                )
            self._server.update_model_weights(weights)
        elif weights is None:
            self._server.update_policy_weights_()
        else:
            self._server.load_policy_weights(weights)

    def server_stats(self, *, reset: bool = False) -> dict[str, float | int]:
        """The server's :meth:`~rl.core.inference_server.InferenceServer.stats`."""
        return self._server.stats(reset=reset)

    def _next_transition(self) -> TensorDictBase:
        while True:
            try:
                item = self._results.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._server.is_alive:
                    raise RuntimeError(
                        "the inference server died while the collector waited for transitions"
                    ) from None
                continue
            if isinstance(item, InferenceServerClosedError):
                raise RuntimeError(
                    "the inference server died while the collector waited for transitions"
                ) from item
            if isinstance(item, BaseException):
                raise RuntimeError(
                    f"an AsyncBatchedCollector worker thread failed: {item!r}"
                ) from item
            return item

    def _reset_all(self) -> None:
        self._stop_coordinators(self._shutdown_timeout)
        if any(worker.is_alive() for worker in self._stopped):
            # a coordinator still inside an env step owns its env (or its pool slot): a
            # new one would step it under the old one. Kept as the running ones, so
            # that the next batch asks again instead of starting new coordinators
            self._workers = self._stopped
            raise RuntimeError(
                f"reset_at_each_iter: a coordinator thread did not stop within "
                f"{self._shutdown_timeout} s (an env step or a policy call longer than "
                "that); the envs cannot be reset under it. Shut the collector down."
            )
        for partial in self._partial:
            partial.clear()
        self._ensure_started()

    def _produce(self) -> TensorDictBase | None:
        left = self._frames_left()
        if left is not None and left <= 0:
            return None
        self._pre_hook()
        if self.reset_at_each_iter and self._workers:
            self._reset_all()
        self._ensure_started()
        if self.yield_completed_trajectories:
            return self._next_trajectory()
        n = self.frames_per_batch
        batch = [self._next_transition() for _ in range(n)]
        if self.verbose:
            logger.debug("AsyncBatchedCollector: %d transitions", len(batch))
        return torch.stack(batch)

    def _next_trajectory(self) -> TensorDictBase:
        while not self._done_trajs:
            transition = self._next_transition()
            index = int(transition[_ENV_INDEX_KEY])
            self._partial[index].append(transition)
            if bool(transition["next", "done"].any()):
                self._done_trajs.append(torch.stack(list(self._partial[index])))
                self._partial[index].clear()
        return self._done_trajs.popleft()

    # ---------------------------------------------------------------- TorchRL API
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Not supported: the environments are built in the workers; seed them in
        their factories. Returns ``seed`` unchanged, as TorchRL."""
        return seed

    def state_dict(self) -> dict:
        """An empty state (as TorchRL: the environments' states stay in the workers)."""
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        """Nothing to load (see :meth:`state_dict`)."""
