"""``CollectorBase``: what every collector shares around the batches it produces.

A subclass implements :meth:`CollectorBase._produce` (the next raw batch, or ``None``
when the frame budget is spent); the base class counts frames, splits trajectories,
applies ``postproc``, writes into the replay buffer, and runs the background mode.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

from tensordict import TensorDictBase

from ._trajs import TrajectoryAssembler, check_traj_args
from ._utils import split_trajectories

__all__ = ["CollectorBase"]


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

    def _init_trajs(self, trajs_per_batch, traj_format, replay_buffer, split_trajs) -> None:
        """TorchRL's ``trajs_per_batch`` / ``traj_format`` (see :mod:`._trajs`)."""
        fmt = check_traj_args(trajs_per_batch, traj_format, replay_buffer, split_trajs)
        self.trajs_per_batch = trajs_per_batch
        self.traj_format = fmt
        self._trajs = None if fmt is None else TrajectoryAssembler(trajs_per_batch, fmt)

    def _init_base(self) -> None:
        self._frames = 0
        self._iter = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._thread_error: BaseException | None = None
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
        while not self.closed:
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
        if self._trajs is not None:
            batch = self._traj_batch()
            if batch is None:
                raise StopIteration(f"the {type(self).__name__} collected its total_frames")
            return self._emit(batch, counted=True)
        batch = self._produce()
        if batch is None:
            raise StopIteration(f"the {type(self).__name__} collected its total_frames")
        return self._emit(batch)

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
        self._post_hook(batch)  # as TorchRL: before a replay buffer gets it
        if self.replay_buffer is not None:
            storage = getattr(self.replay_buffer, "storage", None)
            if getattr(storage, "ndim", 1) == 1 and batch.ndim > 1:
                batch = batch.reshape(-1)
            self.replay_buffer.extend(batch)
            return None
        return batch

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
        self._thread = threading.Thread(target=self._run, name="rl-collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for _ in self.iterator():
                if self._stop.is_set():
                    break
        except BaseException as err:  # reported by async_shutdown / is_running
            self._thread_error = err

    def is_running(self) -> bool:
        """Whether the background collection runs (raises its error if it failed)."""
        if self._thread_error is not None:
            err, self._thread_error = self._thread_error, None
            raise RuntimeError("the background collection failed") from err
        return self._thread is not None and self._thread.is_alive()

    def async_shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stops the background collection (after the batch in progress), then shuts
        the collector down (``close_env=False`` keeps it usable)."""
        self._stop.set()
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
            self._stop.set()
            thread.join(timeout)
            self._thread = None
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
