"""LoggerMonitor: logs the ``stats()`` snapshots of collectors and replay buffers on a schedule.

The monitor pulls: from its own thread (or from explicit :meth:`LoggerMonitor.step` calls)
it asks each watched object for its ``stats()`` (a flat mapping of plain numbers), decides
with the watch's :class:`Every` schedule whether the snapshot is due, adds per-second rates
of the cumulative counters and sends ``"<name>/<metric>"`` scalars to one logger. Nothing
runs on the collection, write or sampling paths of the watched objects.
"""

from __future__ import annotations

import logging
import math
import numbers
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._logger import Logger

__all__ = ["Every", "LoggerMonitor"]

_log = logging.getLogger("rl.core.loggers")

# seconds stop() waits for the polling thread (at least two poll intervals)
_STOP_JOIN_S = 5.0

# cumulative counters of rl's stats() snapshots -> the name of their per-second rate
RATE_NAMES = {
    "frames": "frames_per_second",
    "batches": "batches_per_second",
    "write_count": "writes_per_second",
    "worker_frames": "worker_frames_per_second",
    "sample_calls": "samples_per_second",
    "samples_returned": "samples_returned_per_second",
}


@dataclass(frozen=True)
class Every:
    """When a :class:`LoggerMonitor` logs a watched object's snapshot.

    Build one with :meth:`Every.seconds` (wall-clock time) or :meth:`Every.counter` (each
    time a cumulative counter of the snapshot crosses a multiple of ``interval``). A
    counter schedule is checked at each poll: a counter that jumps over several
    multiples between two polls logs once; a counter that goes down (the object was
    emptied or restored) starts the schedule again from its new value.

    Args:
        kind: ``"seconds"`` or ``"counter"``.
        interval: the period, in seconds or in counter units (> 0).
        key: the snapshot entry a counter schedule follows.

    Raises:
        ValueError: an unknown ``kind``, an ``interval`` that is not > 0, a counter
            schedule without ``key``.

    Examples:
        >>> Every.counter("frames", 1000)
        Every(kind='counter', interval=1000, key='frames')
        >>> Every.seconds(5).interval
        5.0
    """

    kind: Literal["seconds", "counter"]
    interval: float
    key: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("seconds", "counter"):
            raise ValueError(f"Every kind must be 'seconds' or 'counter', got {self.kind!r}")
        if not self.interval or self.interval <= 0:
            raise ValueError(f"Every interval must be strictly positive, got {self.interval!r}")
        if self.kind == "counter" and not self.key:
            raise ValueError("Every(kind='counter') needs a non-empty counter key, got none")

    @classmethod
    def seconds(cls, interval: float) -> Every:
        """A schedule that logs every ``interval`` seconds of wall-clock time."""
        return cls(kind="seconds", interval=float(interval))

    @classmethod
    def counter(cls, key: str, interval: int) -> Every:
        """A schedule that logs when the snapshot entry ``key`` crosses a multiple of
        ``interval``."""
        return cls(kind="counter", interval=interval, key=key)


@dataclass
class _Watch:
    """One watched object: how to poll it, its schedule and the state of that schedule."""

    name: str
    stats_fn: Callable[..., Mapping[str, Any]]
    stats_kwargs: dict[str, Any]
    schedule: Every | None
    step_key: str | None
    rate_keys: tuple[str, ...] | None
    log_on_start: bool
    log_on_close: bool
    # the snapshot and time the next rates are measured from (the last log, or a reset)
    baseline: dict[str, float] = field(default_factory=dict)
    baseline_time: float | None = None
    last_log_time: float | None = None
    next_threshold: float | None = None
    last_counter: float | None = None
    failing: bool = False

    def next_multiple(self, counter: float) -> float:
        interval = self.schedule.interval
        return (counter // interval + 1) * interval


def _numbers(raw: Mapping[str, Any]) -> dict[str, float]:
    """The finite numeric entries of a snapshot, as floats (booleans count as 0 / 1)."""
    return {
        key: float(value)
        for key, value in raw.items()
        if isinstance(value, numbers.Real) and math.isfinite(value)
    }


class LoggerMonitor:
    """Logs operational statistics of collectors and replay buffers to one logger.

    Each object given to :meth:`watch` (anything with a ``stats()`` method returning a flat
    mapping of scalars: rl's collectors and replay buffers) is polled every
    ``poll_interval`` seconds by a daemon thread (``background=True``) or at each
    :meth:`step` call (``background=False``, reproducible). A due snapshot is logged with
    ``logger.log_metrics`` as ``"<name>/<metric>"`` entries, with the per-second rates of
    its cumulative counters (``frames`` -> ``frames_per_second``, ``write_count`` ->
    ``writes_per_second``, ...) since the previous log. Non-numeric entries are left out.

    The monitor owns neither the logger nor the watched objects: :meth:`stop` leaves both
    running, and closing the logger stays the caller's job.

    Args:
        logger: where the metrics go.

    Keyword Args:
        poll_interval: seconds between two polls of the background thread (> 0); it bounds
            the resolution of counter schedules. Defaults to ``1.0``.
        background: poll from a daemon thread once started (the ``with`` block or
            :meth:`start`); ``False`` polls only at :meth:`step`. Defaults to ``True``.
        on_error: when polling or logging a watch fails: ``"warn"`` (default; one warning
            on the ``rl.core.loggers`` logger per failure streak), ``"ignore"``, or
            ``"raise"`` (the error propagates; it ends the background thread).

    Raises:
        ValueError: an unknown ``on_error``, a ``poll_interval`` that is not > 0.

    Examples:
        >>> import tempfile
        >>> from rl.core.loggers import CSVLogger
        >>> class Source:
        ...     frames = 0
        ...     def stats(self):
        ...         return {"frames": self.frames, "state": "running"}
        >>> source = Source()
        >>> monitor = LoggerMonitor(CSVLogger("mon", log_dir=tempfile.mkdtemp()), background=False)
        >>> monitor.watch(source, name="collector", schedule=Every.counter("frames", 100))
        'collector'
        >>> monitor.step()  # the first poll logs the starting point
        {'collector': {'collector/frames': 0.0}}
        >>> source.frames = 60
        >>> monitor.step()  # 60 has not crossed 100
        {}
        >>> source.frames = 130
        >>> logged = monitor.step()
        >>> logged["collector"]["collector/frames"], "collector/frames_per_second" in logged["collector"]
        (130.0, True)
    """

    def __init__(
        self,
        logger: Logger,
        *,
        poll_interval: float = 1.0,
        background: bool = True,
        on_error: Literal["warn", "raise", "ignore"] = "warn",
    ) -> None:
        if on_error not in ("warn", "raise", "ignore"):
            raise ValueError(
                f"LoggerMonitor on_error must be 'warn', 'raise' or 'ignore', got {on_error!r}"
            )
        if not poll_interval > 0:
            raise ValueError(f"LoggerMonitor poll_interval must be positive, got {poll_interval!r}")
        self.logger = logger
        self.poll_interval = float(poll_interval)
        self.background = background
        self.on_error = on_error
        self._watches: dict[str, _Watch] = {}
        self._registry_lock = threading.Lock()
        # one poll at a time: the background thread and a user's step() never interleave
        self._poll_lock = threading.Lock()
        # each polling thread has its own stop event: a thread that outlived a stop() (stuck
        # in a stats() call) still sees its own event set after a start() made a new one
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    # ------------------------------------------------------------------ watches
    def watch(
        self,
        target: Any,
        *,
        name: str | None = None,
        schedule: Every | None = None,
        step: str | None = None,
        stats_fn: Callable[..., Mapping[str, Any]] | None = None,
        stats_kwargs: dict[str, Any] | None = None,
        rate_keys: tuple[str, ...] | None = None,
        log_on_start: bool = True,
        log_on_close: bool = True,
    ) -> str:
        """Starts monitoring ``target`` and returns the name of its watch.

        Args:
            target: an object with a ``stats()`` method (unless ``stats_fn`` is given).

        Keyword Args:
            name: the prefix of this target's metrics, unique in the monitor. Defaults to
                the lower-case class name, with ``_1``, ``_2``, ... when already taken.
            schedule: when to log; ``None`` (default) logs at every poll.
            step: the snapshot entry logged as the step (``"write_count"``, ...). A counter
                schedule defaults to its counter; otherwise the logger's own step is used.
            stats_fn: called instead of ``target.stats`` (in the monitor's thread).
            stats_kwargs: keyword arguments of the stats call (``{"workers": "both"}`` for
                a multiprocess collector).
            rate_keys: the entries to derive per-second rates from; defaults to the known
                cumulative counters present in the snapshot. A counter that went down gives
                no rate at that log.
            log_on_start: log the first poll whatever the schedule (default). ``False``
                makes the first poll only record the starting point, so that the first log
                carries rates.
            log_on_close: :meth:`stop` logs a last snapshot of this target (default).

        Raises:
            TypeError: ``target`` has no callable ``stats`` and no ``stats_fn`` is given.
            ValueError: ``name`` is already watched.
        """
        if stats_fn is None:
            stats_fn = getattr(target, "stats", None)
            if not callable(stats_fn):
                raise TypeError(
                    f"LoggerMonitor cannot watch a {type(target).__name__!r} object: it has no "
                    "callable stats() method and no stats_fn was given"
                )
        with self._registry_lock:
            if name is None:
                base = name = type(target).__name__.lower()
                suffix = 0
                while name in self._watches:
                    suffix += 1
                    name = f"{base}_{suffix}"
            elif name in self._watches:
                raise ValueError(f"a watch named {name!r} is already registered")
            if step is None and schedule is not None and schedule.kind == "counter":
                step = schedule.key
            self._watches[name] = _Watch(
                name=name,
                stats_fn=stats_fn,
                stats_kwargs=dict(stats_kwargs or {}),
                schedule=schedule,
                step_key=step,
                rate_keys=None if rate_keys is None else tuple(rate_keys),
                log_on_start=log_on_start,
                log_on_close=log_on_close,
            )
        return name

    def unwatch(self, name: str) -> None:
        """Stops monitoring the watch ``name`` (the target itself is left alone).

        Raises:
            KeyError: no watch has this name.
        """
        with self._registry_lock:
            if name not in self._watches:
                raise KeyError(f"no watch named {name!r}; watched: {sorted(self._watches)}")
            del self._watches[name]

    # ------------------------------------------------------------------ polling
    def step(self) -> dict[str, dict[str, float]]:
        """Polls every watch once and logs the snapshots that are due.

        Returns:
            ``{watch name: the metrics logged}``, for the watches logged at this step only.
        """
        with self._registry_lock:
            watches = list(self._watches.values())
        logged = {}
        with self._poll_lock:
            for watch in watches:
                payload = self._poll(watch, force=False)
                if payload is not None:
                    logged[watch.name] = payload
        return logged

    def _poll(self, watch: _Watch, *, force: bool) -> dict[str, float] | None:
        try:
            payload = self._poll_once(watch, force=force)
        except Exception as err:
            if self.on_error == "raise":
                raise
            if self.on_error == "warn" and not watch.failing:
                _log.warning(
                    "LoggerMonitor could not poll or log the watch %r: %r (further errors of "
                    "this watch stay silent until it succeeds again)",
                    watch.name,
                    err,
                )
            watch.failing = True
            return None
        watch.failing = False
        return payload

    def _poll_once(self, watch: _Watch, *, force: bool) -> dict[str, float] | None:
        snapshot = _numbers(watch.stats_fn(**watch.stats_kwargs))
        now = time.monotonic()
        if not (force or self._is_due(watch, snapshot, now)):
            return None
        payload = {f"{watch.name}/{key}": value for key, value in snapshot.items()}
        payload.update(
            {
                f"{watch.name}/{key}": value
                for key, value in self._rates(watch, snapshot, now).items()
            }
        )
        step = None
        if watch.step_key is not None and watch.step_key in snapshot:
            step = int(snapshot[watch.step_key])
        self.logger.log_metrics(payload, step=step)
        watch.baseline, watch.baseline_time, watch.last_log_time = snapshot, now, now
        return payload

    def _is_due(self, watch: _Watch, snapshot: dict[str, float], now: float) -> bool:
        schedule = watch.schedule
        counter = None if schedule is None else snapshot.get(schedule.key)
        if watch.baseline_time is None:  # the first poll
            if schedule is not None and schedule.kind == "counter" and counter is not None:
                watch.next_threshold = watch.next_multiple(counter)
                watch.last_counter = counter
            if watch.log_on_start:
                return True
            watch.baseline, watch.baseline_time = snapshot, now
            return False
        if schedule is None:
            return True
        if schedule.kind == "seconds":
            since = watch.last_log_time if watch.last_log_time is not None else watch.baseline_time
            return now - since >= schedule.interval
        if counter is None:
            return False
        if watch.next_threshold is None:  # the counter appeared after the first poll
            watch.next_threshold, watch.last_counter = watch.next_multiple(counter), counter
            return False
        if watch.last_counter is not None and counter < watch.last_counter:
            # emptied or restored: measure the schedule and the next rates from here
            watch.baseline, watch.baseline_time = snapshot, now
            watch.next_threshold, watch.last_counter = watch.next_multiple(counter), counter
            return False
        watch.last_counter = counter
        if counter >= watch.next_threshold:
            watch.next_threshold = watch.next_multiple(counter)
            return True
        return False

    def _rates(self, watch: _Watch, snapshot: dict[str, float], now: float) -> dict[str, float]:
        if watch.baseline_time is None or now <= watch.baseline_time:
            return {}
        elapsed = now - watch.baseline_time
        keys = watch.rate_keys
        if keys is None:
            keys = tuple(key for key in snapshot if key in RATE_NAMES)
        rates = {}
        for key in keys:
            if key not in snapshot or key not in watch.baseline:
                continue
            delta = snapshot[key] - watch.baseline[key]
            if delta >= 0:
                rates[RATE_NAMES.get(key, f"{key}_per_second")] = delta / elapsed
        return rates

    # ------------------------------------------------------------------ life cycle
    def start(self) -> LoggerMonitor:
        """Starts the background thread (nothing to start with ``background=False``)."""
        self._stopped = False
        if self.background and self._thread is None:
            self._stop_event = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._stop_event,), name="LoggerMonitor", daemon=True
            )
            self._thread.start()
        return self

    def _run(self, stop_event: threading.Event) -> None:
        while not stop_event.wait(self.poll_interval):
            self.step()

    def stop(self, *, log_final: bool | None = None) -> None:
        """Stops polling and logs a last snapshot of each watch (see ``log_on_close``).

        A second call without :meth:`start` in between does nothing, so leaving a ``with``
        block after an explicit stop does not log the last snapshots twice. When the
        background thread does not end in time (a ``stats()`` call that hangs), the last
        snapshots are skipped with a warning rather than polled beside it; that thread
        ends once its call returns, even if :meth:`start` has started a new one meanwhile.

        Keyword Args:
            log_final: overrides every watch's ``log_on_close`` when given.
        """
        self._stop_event.set()
        thread, self._thread = self._thread, None
        stuck = False
        if thread is not None:
            thread.join(timeout=max(_STOP_JOIN_S, 2 * self.poll_interval))
            stuck = thread.is_alive()
        if self._stopped:
            return
        self._stopped = True
        if stuck:
            _log.warning(
                "LoggerMonitor's polling thread did not stop in time (a stats() call hangs?); "
                "the last snapshots are not logged"
            )
            return
        with self._registry_lock:
            watches = list(self._watches.values())
        with self._poll_lock:
            for watch in watches:
                if watch.log_on_close if log_final is None else log_final:
                    self._poll(watch, force=True)

    def __enter__(self) -> LoggerMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
