"""``CollectorBase``: what every collector shares around the batches it produces.

A subclass implements :meth:`CollectorBase._produce` (the next raw batch, or ``None``
when the frame budget is spent); the base class counts frames, splits trajectories,
applies ``postproc``, writes into the replay buffer, and runs the background mode.
"""

from __future__ import annotations

import ast
import contextlib
import math
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tensordict import TensorDictBase

from ._profile import ProfileConfig, _ProfilerHook
from ._trajs import TrajectoryAssembler, check_traj_args
from ._utils import split_trajectories
from ._weight_sync import WeightSyncScheme
from ._weight_update import WeightUpdaterBase

__all__ = ["CollectorBase", "BaseCollector"]

_PATH_PART = re.compile(r"([^.\[\]]+)|\[([^\]]+)\]")


def _resolve_attr(obj: Any, path: str) -> Any:
    """``obj`` followed along ``path``: attributes (``a.b``) and item look-ups with a
    literal key (``a['k'][0]``)."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"expected an attribute path such as 'env.batch_size', got {path!r}")
    out = obj
    for name, item in _PATH_PART.findall(path):
        if name:
            out = getattr(out, name)
        else:
            try:
                key = ast.literal_eval(item)
            except (ValueError, SyntaxError):
                raise ValueError(
                    f"{path!r}: the index [{item}] is not a literal (a quoted key or a number)"
                ) from None
            out = out[key]
    return out


class CollectorBase(ABC):
    """Iteration, replay-buffer writing and background collection of every collector."""

    frames_per_batch: int
    total_frames: int
    split_trajs: bool
    postproc: Callable[[TensorDictBase], TensorDictBase] | None
    replay_buffer: Any
    closed: bool
    #: called (no argument) before each batch is collected, as TorchRL's
    pre_collect_hook: Callable[[], None] | None = None
    #: called with each batch the collector yields (after ``postproc``), as TorchRL's
    post_collect_hook: Callable[[TensorDictBase], None] | None = None
    #: the hooks run in the worker processes (multiprocess collectors), not here
    _hooks_in_workers = False
    #: with ``trajs_per_batch``: cuts the produced batches into whole trajectories
    _trajs: TrajectoryAssembler | None = None
    #: set by :meth:`enable_profile`
    _profile_config: ProfileConfig | None = None
    #: set when the first batch is asked for
    _iteration_started = False
    #: a subclass whose batches another component writes (a runner) yields them instead
    #: of extending ``replay_buffer``, as TorchRL's ``_ignore_rb``
    _ignore_rb = False
    _weight_updater: WeightUpdaterBase | None = None
    #: as TorchRL's: entries whose key (or a part of a nested key) starts with ``"_"``
    #: are private to the env / policy (``"_reset"``, a stateless ``VecNormV2``'s
    #: ``"_vecnorm_loc"``) and left out of the batches (set ``False`` to keep them)
    _exclude_private_keys = True

    def __init__(
        self,
        *,
        pre_collect_hook: Callable[[], None] | None = None,
        post_collect_hook: Callable[[TensorDictBase], None] | None = None,
    ) -> None:
        """Sets the two hooks (TorchRL's ``BaseCollector.__init__``); a subclass that
        defines its own ``__init__`` sets them there."""
        self.pre_collect_hook = pre_collect_hook
        self.post_collect_hook = post_collect_hook

    def _init_trajs(
        self, trajs_per_batch, traj_format, replay_buffer, split_trajs, trajs_per_write=None
    ) -> None:
        """TorchRL's ``trajs_per_batch`` / ``traj_format`` / ``trajs_per_write`` (see
        :mod:`._trajs`)."""
        fmt = check_traj_args(trajs_per_batch, traj_format, replay_buffer, split_trajs)
        if trajs_per_write is not None:
            if isinstance(trajs_per_write, bool) or not isinstance(trajs_per_write, int):
                raise TypeError(f"trajs_per_write must be a positive int, got {trajs_per_write!r}")
            if trajs_per_write < 1:
                raise ValueError(f"trajs_per_write must be a positive int, got {trajs_per_write}")
            if trajs_per_batch is None or replay_buffer is None:
                raise ValueError(
                    "trajs_per_write sets how many whole trajectories each replay-buffer write "
                    "holds: it needs trajs_per_batch and replay_buffer"
                )
        self.trajs_per_write = trajs_per_write
        self.trajs_per_batch = trajs_per_batch
        self.traj_format = fmt
        self._trajs = None if fmt is None else TrajectoryAssembler(trajs_per_batch, fmt)

    def _init_base(self) -> None:
        self._frames = 0
        self._iter = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._thread_error: BaseException | None = None
        # background collection: whether its thread runs, and pause()'s handshake with
        # it ("running" -> "requested" by pause() -> "paused" by the thread -> "running")
        self._pause_cv = threading.Condition()
        self._thread_running = False
        self._pause_state = "running"
        self.closed = False

    @abstractmethod
    def _produce(self) -> TensorDictBase | None:
        """The next batch (its frames not yet counted), ``None`` when all are collected."""

    @abstractmethod
    def _close(self) -> None:
        """Releases the envs / worker processes."""

    # ------------------------------------------------------------------------ iteration
    def __len__(self) -> int:
        if self.total_frames < 0:
            raise TypeError(f"a {type(self).__name__} with total_frames=-1 has no length")
        return math.ceil(self.total_frames / self.frames_per_batch)

    def __iter__(self) -> Iterator[TensorDictBase | None]:
        return self.iterator()

    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yields the batches (``None`` for each batch when a replay buffer is given)."""
        self._iteration_started = True
        while not self.closed:
            if self._writes_trajs():
                if not self._traj_write():
                    return
                yield None
                continue
            if self._trajs is not None:
                batch = self._traj_batch()
                if batch is None:
                    return
                yield self._emit(batch, counted=True)
                continue
            batch = self._produce()
            if batch is None:
                return
            yield self._emit(batch)

    def next(self) -> TensorDictBase | None:
        """Collects and returns one batch (outside a ``for`` loop)."""
        if self.closed:
            raise RuntimeError(f"the {type(self).__name__} was shut down")
        self._iteration_started = True
        if self._writes_trajs():
            if not self._traj_write():
                raise StopIteration(f"the {type(self).__name__} collected its total_frames")
            return None
        if self._trajs is not None:
            batch = self._traj_batch()
            if batch is None:
                raise StopIteration(f"the {type(self).__name__} collected its total_frames")
            return self._emit(batch, counted=True)
        batch = self._produce()
        if batch is None:
            raise StopIteration(f"the {type(self).__name__} collected its total_frames")
        return self._emit(batch)

    def _writes_trajs(self) -> bool:
        """``trajs_per_batch`` with a replay buffer: whole trajectories go to the buffer."""
        return self._trajs is not None and self.replay_buffer is not None and not self._ignore_rb

    def _traj_write(self) -> bool:
        """Collects one batch and writes every trajectory it completes into the replay
        buffer, flat (``[sum T]``, as TorchRL: what a ``SliceSampler`` reads), at most
        ``trajs_per_write`` per ``extend`` (all at once by default); ``False`` once the
        frames are spent."""
        batch = self._produce()
        if batch is None:
            return False
        self._write_trajs(batch)
        return True

    def _write_trajs(self, batch: TensorDictBase) -> None:
        """Counts ``batch`` and writes the trajectories it completes (see
        :meth:`_traj_write`)."""
        self._frames += batch.numel()
        self._iter += 1
        if self.postproc is not None:
            batch = self.postproc(batch)
        batch = self._drop_private(batch)
        self._post_hook(batch)
        trajs = self._trajs
        trajs.ingest(batch)
        per = self.trajs_per_write or len(trajs)
        device = getattr(getattr(self.replay_buffer, "storage", None), "device", None)
        while len(trajs):
            chunk = trajs.pop_cat(per)
            if device is not None and chunk.device != device:
                # as TorchRL: the trajectory carries the storage's device (a postproc may
                # have cleared it), so that the buffer stores it where it keeps the rest
                chunk = chunk.to(device)
            self.replay_buffer.extend(chunk)

    def _traj_batch(self) -> TensorDictBase | None:
        """The next ``trajs_per_batch`` whole trajectories, collecting (and counting the
        frames of) as many batches as they take; ``None`` once the frames are spent."""
        trajs = self._trajs
        while len(trajs) < trajs.n:
            batch = self._produce()
            if batch is None:
                return None
            self._frames += batch.numel()
            trajs.ingest(batch)
        return trajs.pop()

    def _emit(self, batch: TensorDictBase, counted: bool = False) -> TensorDictBase | None:
        if not counted:
            self._frames += batch.numel()
        self._iter += 1
        if self.split_trajs:
            batch = split_trajectories(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        batch = self._drop_private(batch)
        self._post_hook(batch)  # as TorchRL: before a replay buffer gets it
        if self.replay_buffer is not None and not self._ignore_rb:
            storage = getattr(self.replay_buffer, "storage", None)
            if getattr(storage, "ndim", 1) == 1 and batch.ndim > 1:
                batch = batch.reshape(-1)
            if getattr(self, "interruptor", None) is not None and batch.ndim == 1:
                # a preempted rollout's missing steps (traj id -1) are no transitions
                ids = batch.get(("collector", "traj_ids"), None)
                if ids is not None:
                    batch = batch[ids != -1]
            self.replay_buffer.extend(batch)
            return None
        return batch

    def _drop_private(self, batch: TensorDictBase) -> TensorDictBase:
        """``batch`` without its private entries (see ``_exclude_private_keys``)."""
        if not self._exclude_private_keys:
            return batch
        private = [
            key
            for key in batch.keys(True)
            if any(part.startswith("_") for part in ((key,) if isinstance(key, str) else key))
        ]
        return batch.exclude(*private) if private else batch

    @staticmethod
    def _check_reset_and_factory(reset_when_done: bool, policy, policy_factory) -> None:
        """The checks every collector makes of ``reset_when_done`` (only ``True``: done
        sub-environments are always reset) and of ``policy`` / ``policy_factory`` (one
        of them)."""
        if not reset_when_done:
            raise ValueError(
                "reset_when_done is deprecated: done sub-environments are always reset "
                "(pass reset_when_done=True or leave it out)"
            )
        if policy_factory is not None and policy is not None:
            raise TypeError("policy_factory cannot be used with policy argument.")

    def _pre_hook(self) -> None:
        hook = self.pre_collect_hook
        if hook is not None and not self._hooks_in_workers:
            hook()

    def _post_hook(self, batch: TensorDictBase) -> None:
        hook = self.post_collect_hook
        if hook is not None and not self._hooks_in_workers:
            hook(batch)

    def _frames_left(self) -> int | None:
        """Frames still to collect (``None``: no limit)."""
        return None if self.total_frames < 0 else self.total_frames - self._frames

    # ------------------------------------------------------------------ monitoring
    @property
    def requested_frames_per_batch(self) -> int:
        """The frames per batch asked for at construction."""
        return self.frames_per_batch

    @property
    def policy_version(self) -> int | str | None:
        """The policy's version (``None`` unless the collector tracks it)."""
        return None

    def get_policy_version(self) -> int | str | None:
        """:attr:`policy_version`, as a method (callable on remote actors)."""
        return self.policy_version

    def stats(self) -> dict[str, int | float | bool]:
        """A snapshot of the collector's progress: plain numbers, JSON-serialisable, cheap.

        Keys: ``"frames"`` (collected so far), ``"batches"`` (yielded so far),
        ``"total_frames"`` and ``"completed"`` (when the budget is finite),
        ``"requested_frames_per_batch"``, and ``"policy_version"`` when the collector
        tracks an integer version.
        """
        stats: dict[str, int | float | bool] = {
            "frames": int(self._frames),
            "batches": int(self._iter),
        }
        if isinstance(self.total_frames, int) and self.total_frames >= 0:
            stats["total_frames"] = self.total_frames
            stats["completed"] = bool(self._frames >= self.total_frames)
        stats["requested_frames_per_batch"] = int(self.requested_frames_per_batch)
        version = self.policy_version
        if isinstance(version, int) and not isinstance(version, bool):
            stats["policy_version"] = version
        return stats

    # -------------------------------------------------------------------- profiling
    def enable_profile(
        self,
        *,
        workers: list[int] | None = None,
        num_rollouts: int = 3,
        warmup_rollouts: int = 1,
        save_path: str | Path | None = None,
        activities: list[str] | None = None,
        record_shapes: bool = True,
        profile_memory: bool = False,
        with_stack: bool = True,
        with_flops: bool = False,
        on_trace_ready: Callable | None = None,
    ) -> None:
        """Profiles the next rollouts with ``torch.profiler`` (see :class:`ProfileConfig`
        for the arguments): the first ``warmup_rollouts`` batches are skipped, the
        following ones recorded, and the Chrome trace written after ``num_rollouts``.
        The profiler runs as the ``post_collect_hook`` (the one set before is restored by
        :meth:`disable_profile`).

        Raises:
            RuntimeError: the collector has started iterating.
            ValueError: ``num_rollouts <= warmup_rollouts`` or ``warmup_rollouts < 0``.
        """
        if self._iteration_started:
            raise RuntimeError(
                "Cannot enable profiling after iteration has started: call enable_profile() "
                "before iterating over the collector"
            )
        config = ProfileConfig(
            workers=[0] if workers is None else list(workers),
            num_rollouts=num_rollouts,
            warmup_rollouts=warmup_rollouts,
            save_path=save_path,
            activities=["cpu", "cuda"] if activities is None else list(activities),
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=with_stack,
            with_flops=with_flops,
            on_trace_ready=on_trace_ready,
        )
        self._install_profile_hooks(config)
        self._profile_config = config

    def _install_profile_hooks(self, config: ProfileConfig) -> None:
        """Puts the profiler in place of ``post_collect_hook`` (this process)."""
        hook = self.post_collect_hook
        if isinstance(hook, _ProfilerHook):  # enabled again: the user's hook is kept
            hook.stop()
            hook = hook.previous
        self.post_collect_hook = _ProfilerHook(config, worker_idx=0, previous=hook)

    def disable_profile(self) -> None:
        """Stops the profiler and restores the previous ``post_collect_hook`` (no-op
        when profiling is off)."""
        if self._profile_config is None:
            return
        hook = self.post_collect_hook
        if isinstance(hook, _ProfilerHook):  # the hook it wraps comes back
            hook.stop()
            self.post_collect_hook = hook.previous
        self._profile_config = None

    @property
    def profile_config(self) -> ProfileConfig | None:
        """The profiling configuration (``None`` when profiling is off)."""
        return self._profile_config

    # ------------------------------------------------------------------ remote helpers
    @property
    def worker_idx(self) -> int | None:
        """This collector's worker index (given at construction, or by its parent)."""
        if not hasattr(self, "_worker_idx"):
            raise RuntimeError(
                "worker_idx has not been set: this collector was not created as a worker"
            )
        return self._worker_idx

    @worker_idx.setter
    def worker_idx(self, value: int | None) -> None:
        self._worker_idx = value

    def get_distant_attr(self, attr: str) -> Any:
        """The attribute at path ``attr`` (``"env.batch_size"``, ``"a['k']"``)."""
        return _resolve_attr(self, attr)

    def cascade_execute(self, attr_path: str, *args, **kwargs) -> Any:
        """Calls the method at ``attr_path`` with the arguments (an attribute that is not
        callable is returned, and then takes no arguments)."""
        attr = _resolve_attr(self, attr_path)
        if callable(attr):
            return attr(*args, **kwargs)
        if args or kwargs:
            raise ValueError(
                f"{attr_path!r} is not callable, so it takes no arguments; got {args} and {kwargs}"
            )
        return attr

    def map_fn(
        self,
        method_name: str,
        list_of_args: list[tuple] | None = None,
        list_of_kwargs: list[dict] | None = None,
    ) -> list[Any]:
        """Calls the method ``method_name`` once per entry of the argument lists and
        returns the results in order.

        Raises:
            ValueError: the two lists have different lengths.
        """
        if list_of_args is None:
            list_of_args = [()] * len(list_of_kwargs) if list_of_kwargs else [()]
        if list_of_kwargs is None:
            list_of_kwargs = [{}] * len(list_of_args)
        if len(list_of_args) != len(list_of_kwargs):
            raise ValueError(
                "list_of_args and list_of_kwargs must have the same length, got "
                f"{len(list_of_args)} and {len(list_of_kwargs)}"
            )
        method = _resolve_attr(self, method_name)
        if not callable(method):
            raise AttributeError(f"{method_name!r} of {type(self).__name__} is not callable")
        return [method(*a, **k) for a, k in zip(list_of_args, list_of_kwargs, strict=True)]

    # ------------------------------------------------------------------ weight updates
    @property
    def weight_updater(self) -> WeightUpdaterBase | None:
        """The :class:`WeightUpdaterBase` that ``update_policy_weights_`` hands weights
        to (``None``: the collector's own path)."""
        return self._weight_updater

    @weight_updater.setter
    def weight_updater(self, value: WeightUpdaterBase | Callable | None) -> None:
        if value is not None:
            if not isinstance(value, WeightUpdaterBase):
                if not callable(value):
                    raise TypeError(
                        "weight_updater must be a WeightUpdaterBase or a callable returning "
                        f"one, got {type(value).__name__}"
                    )
                value = value()
                if not isinstance(value, WeightUpdaterBase):
                    raise TypeError(
                        "weight_updater's factory must return a WeightUpdaterBase, got "
                        f"{type(value).__name__}"
                    )
            value.register_collector(self)
        self._weight_updater = value

    @property
    def _legacy_weight_updater(self) -> bool:
        """Whether weights go through a :class:`WeightUpdaterBase` (TorchRL's name)."""
        return self._weight_updater is not None

    # ------------------------------------------------------------- weight-sync schemes
    _weight_sync_schemes: dict | None = None
    _receiver_schemes: dict | None = None
    #: held while a batch is collected when weights arrive from a sender (see
    #: :meth:`register_scheme_receiver`): a receiver applies them between batches
    receive_lock: threading.Lock | None = None

    def get_model(self, model_id: str) -> Any:
        """The object at path ``model_id`` of this collector (``"policy"``,
        ``"env.transform[0]"``): what a weight-sync scheme reads or writes."""
        return _resolve_attr(self, model_id)

    def _init_weight_sync(self, weight_sync_schemes: Mapping | None, **init_kwargs) -> None:
        """Sets ``weight_sync_schemes`` up as senders with this collector as context."""
        if weight_sync_schemes is None:
            self._weight_sync_schemes = None
            return
        if self._weight_updater is not None:
            raise ValueError("Cannot specify both weight_sync_schemes and weight_updater.")
        schemes = dict(weight_sync_schemes)
        for model_id, scheme in schemes.items():
            if not isinstance(scheme, WeightSyncScheme):
                raise TypeError(
                    f"weight_sync_schemes[{model_id!r}] must be a WeightSyncScheme, got "
                    f"{type(scheme).__name__}"
                )
            if not scheme.initialized_on_sender:
                scheme.init_on_sender(model_id=model_id, context=self, **init_kwargs)
            elif scheme.context is None:
                scheme.context = self
        self._weight_sync_schemes = schemes

    def _connect_weight_sync(self) -> None:
        for scheme in (self._weight_sync_schemes or {}).values():
            if not scheme.synchronized_on_sender:
                scheme.connect()

    def register_scheme_receiver(
        self, weight_recv_schemes: Mapping, *, synchronize_weights: bool = True
    ) -> None:
        """Makes this collector receive weights through ``weight_recv_schemes``
        (``{model_id: scheme}`` set up on a sender): each scheme is initialised as a
        receiver with this collector as context and, with ``synchronize_weights``,
        connected (which installs the sender's weights).

        Raises:
            RuntimeError: a scheme is already the sending side here.
        """
        if self._receiver_schemes is None:
            self._receiver_schemes = {}
        if self.receive_lock is None:
            self.receive_lock = threading.Lock()
        for model_id, scheme in weight_recv_schemes.items():
            previous = self._receiver_schemes.get(model_id)
            if previous is not None and previous is not scheme:
                previous.shutdown()
            if not scheme.initialized_on_receiver:
                scheme.init_on_receiver(model_id=model_id, context=self, worker_idx=self.worker_idx)
            elif scheme.context is None:
                scheme.context = self
            self._receiver_schemes[model_id] = scheme
        if synchronize_weights:
            for scheme in weight_recv_schemes.values():
                if not scheme.synchronized_on_receiver:
                    scheme.connect(worker_idx=self.worker_idx)

    def receive_weights(self) -> None:
        """Applies the weights that arrived through the receiver schemes."""
        if not self._receiver_schemes:
            raise RuntimeError("No receiver schemes registered.")
        for scheme in self._receiver_schemes.values():
            scheme.receive()

    def _send_through_schemes(
        self,
        policy_or_weights: Any,
        worker_ids: Any,
        model_id: str | None,
        weights_dict: Mapping | None,
    ) -> None:
        if weights_dict is not None and model_id is not None:
            raise ValueError("Cannot specify both 'weights_dict' and 'model_id'")
        if weights_dict is not None and policy_or_weights is not None:
            raise ValueError("Cannot specify both 'weights_dict' and 'policy_or_weights'")
        if weights_dict is None:
            weights_dict = {model_id or "policy": policy_or_weights}
        schemes = self._weight_sync_schemes
        for target, weights in weights_dict.items():
            if target not in schemes:
                raise KeyError(
                    f"Model '{target}' not found in registered weight sync schemes. "
                    f"Available models: {list(schemes)}"
                )
            schemes[target].send(weights=weights, worker_ids=worker_ids)

    def _shutdown_weight_sync(self) -> None:
        for schemes in (self._weight_sync_schemes, self._receiver_schemes):
            for scheme in (schemes or {}).values():
                try:
                    scheme.shutdown()
                except Exception:  # a scheme that cannot stop must not block the others
                    pass

    def _maybe_fallback_update(self, policy_or_weights: Any = None, *, model_id=None) -> None:
        """Where weights land when the collector has no policy to put them in."""
        raise RuntimeError(
            "No weight updater or local policy is configured for this collector: the weights "
            "have nowhere to go (pass weight_updater= or a policy with parameters)"
        )

    def increment_version(self) -> None:
        """Bumps the policy version (no-op unless the collector tracks it)."""
        return

    # -------------------------------------------------------------------- background
    def start(self) -> None:
        """Collects into ``replay_buffer`` in a background thread until ``total_frames``
        or :meth:`async_shutdown`."""
        if self.replay_buffer is None:
            raise RuntimeError("start() collects into a replay buffer: pass replay_buffer=")
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("the collector is already running in the background")
        self._stop.clear()
        self._thread_error = None
        self._pause_state = "running"
        self._thread_running = True
        self._thread = threading.Thread(target=self._run, name="rl-collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for _ in self.iterator():
                if self._stop.is_set():
                    break
                if self._pause_state == "requested" and self._hold():
                    break  # stopped while paused
        except BaseException as err:  # reported by async_shutdown / is_running / pause
            self._thread_error = err
        finally:
            with self._pause_cv:
                self._thread_running = False
                self._pause_cv.notify_all()

    #: whether :meth:`pause` can hold this collector's background collection (declared
    #: by the collectors TorchRL gives ``pause()``: the multiprocess ones)
    _pausable = False

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        """Context manager that holds the background collection of :meth:`start` while
        the ``with`` block runs, and resumes it on leaving the block (also on an error).

        Entering waits for the batches in progress to be collected and written into
        ``replay_buffer`` (nothing is dropped); then nothing is collected or written
        until the block ends. The collector stays usable meanwhile: the workers are idle,
        so ``state_dict()``, ``set_seed()`` or ``update_policy_weights_()`` in the block
        see a quiescent collector (a consistent checkpoint). If the collection ends while
        the pause waits for it (``total_frames`` reached) the block runs all the same.

        Raises:
            NotImplementedError: the collector has no pause (as TorchRL, only the
                multiprocess collectors have one).
            RuntimeError: the collector is not collecting in the background (no
                :meth:`start`, or it has stopped), it is already paused, ``pause()`` was
                called from the collector's own thread, or the background collection
                failed while the pause waited for it (chained to its error).

        Examples:
            >>> import time
            >>> from rl.collectors import MultiSyncCollector
            >>> from rl.envs import PendulumEnv
            >>> class Buffer(list):  # anything with extend(batch), e.g. a ReplayBuffer
            ...     def extend(self, batch):
            ...         self.append(batch)
            >>> rb = Buffer()
            >>> c = MultiSyncCollector([PendulumEnv] * 2, None, frames_per_batch=8,
            ...                        replay_buffer=rb)
            >>> c.start()
            >>> with c.pause():
            ...     n = len(rb)
            ...     time.sleep(0.5)
            ...     still = len(rb) == n
            >>> still
            True
            >>> c.async_shutdown()
        """
        if not self._pausable:
            raise NotImplementedError(
                f"Collector pause() is not implemented for {type(self).__name__}"
            )
        self._enter_pause(None)
        try:
            yield None
        finally:
            self._leave_pause(resume=True)

    def _enter_pause(self, timeout: float | None) -> None:
        """Asks the background thread to hold at its next batch boundary and waits for
        it (at most ``timeout`` seconds: then ``TimeoutError`` and it runs on)."""
        name = type(self).__name__
        if threading.current_thread() is self._thread:
            raise RuntimeError(
                f"{name}.pause() was called from the collector's own background thread, "
                "which it would wait for: call it from the thread that called start()"
            )
        cv = self._pause_cv
        with cv:
            if not self._thread_running:
                raise RuntimeError(
                    f"{name}.pause() holds the background collection of start(), but the "
                    "collector is not collecting in the background: call start() first"
                )
            if self._pause_state != "running":
                raise RuntimeError(f"the {name} is already paused (pause() does not nest)")
            self._pause_state = "requested"
            try:
                held = cv.wait_for(
                    lambda: self._pause_state == "paused" or not self._thread_running, timeout
                )
            except BaseException:  # interrupted while waiting: let the thread run on
                self._pause_state = "running"
                cv.notify_all()
                raise
            if not held:
                self._pause_state = "running"
                cv.notify_all()
                raise TimeoutError(
                    f"the {name}'s background collection did not pause within {timeout} s "
                    "(it finishes the batches in progress first)"
                )
            if self._pause_state != "paused":  # the collection ended before pausing
                self._pause_state = "running"
                error, self._thread_error = self._thread_error, None
                if error is not None:
                    raise RuntimeError("the background collection failed") from error

    def _leave_pause(self, resume: bool) -> None:
        """Lets the held background thread go on, or (``resume=False``) stop."""
        if not resume:
            self._request_stop()
        with self._pause_cv:
            self._pause_state = "running"
            self._pause_cv.notify_all()
        thread = self._thread
        if not resume and thread is not None:
            thread.join()
            self._thread = None

    def _hold(self) -> bool:
        """The background thread's side of :meth:`pause`, between two batches: finishes
        the work in flight, waits while paused; ``True`` when asked to stop meanwhile."""
        self._quiesce()
        cv = self._pause_cv
        with cv:
            if self._pause_state != "requested":  # pause() gave up waiting
                return self._stop.is_set()
            self._pause_state = "paused"
            cv.notify_all()
            cv.wait_for(lambda: self._pause_state != "paused" or self._stop.is_set())
        return self._stop.is_set()

    def _quiesce(self) -> None:
        """Collects and writes whatever is still being collected between two batches
        (a collector whose workers run ahead overrides it); nothing by default."""
        return

    def _deliver(self, batch: TensorDictBase) -> None:
        """Counts and writes a batch produced outside :meth:`iterator` as the
        background loop would (into ``replay_buffer``)."""
        if self._writes_trajs():
            self._write_trajs(batch)
        else:
            self._emit(batch)

    def _request_stop(self) -> None:
        """Asks the background thread to stop (waking it if it is paused)."""
        self._stop.set()
        cv = getattr(self, "_pause_cv", None)
        if cv is not None:
            with cv:
                cv.notify_all()

    def is_running(self) -> bool:
        """Whether the background collection runs (raises its error if it failed)."""
        if self._thread_error is not None:
            err, self._thread_error = self._thread_error, None
            raise RuntimeError("the background collection failed") from err
        return self._thread is not None and self._thread.is_alive()

    def async_shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stops the background collection (after the batch in progress), then shuts
        the collector down (``close_env=False`` keeps it usable)."""
        self._request_stop()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        error, self._thread_error = self._thread_error, None
        if close_env:
            self.shutdown()
        if error is not None:
            raise RuntimeError("the background collection failed") from error

    # ----------------------------------------------------------------------- shutdown
    def shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stops the collector and closes its envs or workers (idempotent)."""
        thread = getattr(self, "_thread", None)
        if thread is not None and threading.current_thread() is not thread:
            self._request_stop()
            thread.join(timeout)
            self._thread = None
        self._shutdown_weight_sync()
        if getattr(self, "closed", True):
            return
        self.closed = True
        if close_env:
            self._close()

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:
            pass


#: TorchRL's name of the collectors' base class
BaseCollector = CollectorBase
