"""Request batching for the LLM wrappers: calls from several threads become one model call."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, wait

from tensordict import TensorDictBase, lazy_stack

__all__ = ["RequestBatcher"]


class RequestBatcher:
    """Queues the rows of concurrent calls and runs them through one function in batches.

    Each call puts its rows (the rows of a ``[B]`` tensordict, or a ``[]`` tensordict as one
    row) in a shared queue, then runs batches itself: while at least ``min_batch_size`` rows
    wait, it takes up to ``max_batch_size`` of them (all of them when ``None``), calls
    ``run`` on their lazy stack and hands each row's result to the call that queued it. A
    call whose rows are still queued waits for another call to complete a batch, for at
    most ``timeout`` seconds; then it runs what is queued, however few rows that is. So
    no call waits more than ``timeout`` seconds plus the time of the batches before its
    own.

    No thread is started: the batches run in the calling threads, one at a time. Nothing
    outlives the calls, and a batcher copied or pickled (with its wrapper) starts empty.

    Args:
        min_batch_size (int): rows needed to run a batch before the timeout.
        max_batch_size (int, optional): most rows in one batch; ``None`` takes every
            queued row.
        timeout (float): seconds a call waits for its rows to be batched before it runs
            what is queued.

    Raises:
        ValueError: a size below 1, ``min_batch_size > max_batch_size``, a timeout that
            is not a positive number.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batcher = RequestBatcher(min_batch_size=1, max_batch_size=None, timeout=1.0)
        >>> def double(td):
        ...     return td.set("y", td["x"] * 2)
        >>> batcher.submit(double, TensorDict(x=torch.tensor(3.0)))["y"]
        tensor(6.)
    """

    def __init__(self, min_batch_size: int, max_batch_size: int | None, timeout: float) -> None:
        for name, size in (("min_batch_size", min_batch_size), ("max_batch_size", max_batch_size)):
            if size is not None and (isinstance(size, bool) or not isinstance(size, int)):
                raise ValueError(f"{name} must be an int >= 1, got {size!r}")
            if size is not None and size < 1:
                raise ValueError(f"{name} must be >= 1, got {size}")
        if max_batch_size is not None and min_batch_size > max_batch_size:
            raise ValueError(
                f"min_batch_size ({min_batch_size}) must be <= max_batch_size ({max_batch_size})"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(
                f"batching_timeout must be a positive number of seconds, got {timeout!r}"
            )
        self.min_batch_size = min_batch_size
        self.max_batch_size = max_batch_size
        self.timeout = float(timeout)
        self._reset()

    def _reset(self) -> None:
        # the queued rows and their futures; a row leaves the queue before its future is
        # resolved, so a queued future is never done
        self._queue: list[tuple[TensorDictBase, Future]] = []
        self._queue_lock = threading.Lock()
        self._run_lock = threading.Lock()  # one batch at a time

    def __getstate__(self) -> dict:
        return {
            "min_batch_size": self.min_batch_size,
            "max_batch_size": self.max_batch_size,
            "timeout": self.timeout,
        }

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    def submit(
        self, run: Callable[..., TensorDictBase], tensordict: TensorDictBase, **kwargs
    ) -> TensorDictBase:
        """Queues the rows of ``tensordict``, runs batches, and returns the rows' results.

        Args:
            run: the batched function: a ``[n]`` lazy stack of rows in, a ``[n]``
                tensordict of their results out. A batch runs with the keyword arguments
                of the call that runs it.
            tensordict: a ``[B]`` tensordict (``B`` rows) or a ``[]`` one (one row).

        Returns:
            the result of the row of a ``[]`` input, else the lazy stack of the rows'
            results, in their order.

        Raises:
            ValueError: ``tensordict`` has more than one batch dimension.
            CancelledError: :meth:`cancel` dropped the rows before they ran.
            Exception: what ``run`` raised on a batch holding one of the rows.
        """
        if tensordict.batch_dims > 1:
            raise ValueError(
                f"batching takes tensordicts of at most one batch dimension, got batch size "
                f"{tuple(tensordict.batch_size)}"
            )
        single = tensordict.batch_dims == 0
        rows = [tensordict] if single else list(tensordict.unbind(0))
        futures = [Future() for _ in rows]
        with self._queue_lock:
            self._queue.extend(zip(rows, futures))
        self._run_batches(run, kwargs, futures, flush=False)
        _, pending = wait(futures, timeout=self.timeout)
        if pending:  # not enough rows came in time: run what is queued
            self._run_batches(run, kwargs, futures, flush=True)
        results = [f.result() for f in futures]
        return results[0] if single else lazy_stack(results)

    def _run_batches(
        self, run: Callable, kwargs: dict, futures: list[Future] | None, flush: bool
    ) -> None:
        """Runs batches until ``futures`` are done (until the queue is empty when
        ``None``), or, unless ``flush``, until fewer than ``min_batch_size`` rows wait."""
        with self._run_lock:
            # holding the run lock, a row is either queued or resolved: none is in a batch
            while futures is None or not all(f.done() for f in futures):
                with self._queue_lock:
                    queued = len(self._queue)
                    if not queued or (not flush and queued < self.min_batch_size):
                        return
                    size = (
                        queued if self.max_batch_size is None else min(queued, self.max_batch_size)
                    )
                    batch = self._queue[:size]
                    del self._queue[:size]
                rows = [row for row, _ in batch]
                try:
                    results = run(lazy_stack(rows), **kwargs).unbind(0)
                    if len(results) != size:
                        raise RuntimeError(f"a batch of {size} rows gave {len(results)} results")
                except BaseException as exc:  # every waiting caller learns of it
                    for _, future in batch:
                        future.set_exception(exc)
                    if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit
                        raise
                    continue
                for (_, future), result in zip(batch, results):
                    future.set_result(result)

    def cancel(self) -> None:
        """Drops the queued rows: their callers raise :class:`CancelledError`."""
        with self._queue_lock:
            batch, self._queue = self._queue, []
        error = CancelledError("batching aborted by cleanup_batching()")
        for _, future in batch:
            future.set_exception(error)

    def flush(self, run: Callable[..., TensorDictBase], **kwargs) -> None:
        """Runs every queued row now, in batches of at most ``max_batch_size``."""
        self._run_batches(run, kwargs, None, flush=True)

    def state(self) -> dict:
        """The queue's state: sizes, queued rows, whether a batch is running."""
        running = self._run_lock.locked()
        with self._queue_lock:
            queued = len(self._queue)
        return {
            "batching_enabled": True,
            "min_batch_size": self.min_batch_size,
            "max_batch_size": self.max_batch_size,
            "queue_size": queued,
            "processing": running,
            "lock_state": "locked" if running else "unlocked",
            "pending_futures": queued,
            "timeout": self.timeout,
        }
