"""``ProfileConfig``: profiling a collector's rollouts with ``torch.profiler``.

:meth:`CollectorBase.enable_profile` installs a :class:`_ProfilerHook` as the collector's
``post_collect_hook``: it starts a profiler on the first batch, steps it once per batch
(``warmup_rollouts`` skipped, then recorded) and exports a Chrome trace after
``num_rollouts`` batches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

__all__ = ["ProfileConfig"]

logger = logging.getLogger(__name__)

_ACTIVITIES = {"cpu": "CPU", "cuda": "CUDA"}


@dataclass
class ProfileConfig:
    """What to profile and where to write the trace.

    Args:
        workers: the worker indices to profile (multiprocess collectors); ignored by a
            single-process :class:`~rl.collectors.Collector`. Defaults to ``[0]``.
        num_rollouts: batches profiled in all, warm-up included; the profiler stops
            after them. Must be greater than ``warmup_rollouts``.
        warmup_rollouts: first batches skipped (compilation, caches). ``>= 0``.
        save_path: where the Chrome trace goes; ``{worker_idx}`` is replaced by the
            worker index. Default ``"./collector_profile_{worker_idx}.json"``.
        activities: ``"cpu"`` and/or ``"cuda"`` (CUDA is dropped when unavailable).
        record_shapes, profile_memory, with_stack, with_flops: passed to
            :class:`torch.profiler.profile`.
        on_trace_ready: called with the profiler instead of the trace export.

    Raises:
        ValueError: ``num_rollouts <= warmup_rollouts`` or ``warmup_rollouts < 0``.

    Examples:
        >>> from pathlib import Path
        >>> from rl.collectors import ProfileConfig
        >>> config = ProfileConfig(workers=[0, 2], save_path="traces/w{worker_idx}.json")
        >>> config.get_save_path(2) == Path("traces/w2.json")
        True
        >>> config.should_profile_worker(1)
        False
    """

    workers: list[int] = field(default_factory=lambda: [0])
    num_rollouts: int = 3
    warmup_rollouts: int = 1
    save_path: str | Path | None = None
    activities: list[str] = field(default_factory=lambda: ["cpu", "cuda"])
    record_shapes: bool = True
    profile_memory: bool = False
    with_stack: bool = True
    with_flops: bool = False
    on_trace_ready: Callable | None = None

    def __post_init__(self) -> None:
        if self.num_rollouts <= self.warmup_rollouts:
            raise ValueError(
                f"num_rollouts ({self.num_rollouts}) must be greater than warmup_rollouts "
                f"({self.warmup_rollouts}): at least one batch must be profiled"
            )
        if self.warmup_rollouts < 0:
            raise ValueError(f"warmup_rollouts must be >= 0, got {self.warmup_rollouts}")

    def get_save_path(self, worker_idx: int) -> Path:
        """The trace file of worker ``worker_idx``."""
        if self.save_path is None:
            return Path(f"./collector_profile_{worker_idx}.json")
        return Path(str(self.save_path).format(worker_idx=worker_idx))

    def get_activities(self) -> list:
        """The :class:`torch.profiler.ProfilerActivity` values to record."""
        out = []
        for name in self.activities:
            name = name.lower()
            if name not in _ACTIVITIES:
                continue
            if name == "cuda" and not torch.cuda.is_available():
                continue
            out.append(getattr(torch.profiler.ProfilerActivity, _ACTIVITIES[name]))
        return out

    def should_profile_worker(self, worker_idx: int) -> bool:
        """Whether worker ``worker_idx`` is profiled."""
        return worker_idx in self.workers


class _ProfilerHook:
    """A ``post_collect_hook`` that drives a profiler in the process it runs in (built
    on the first call, so the hook itself pickles to a worker), then calls the hook it
    replaced (``previous``: the user's keeps running while, and after, it profiles)."""

    def __init__(self, config: ProfileConfig, worker_idx: int = 0, previous=None) -> None:
        self.config = config
        self.worker_idx = worker_idx
        self.previous = previous
        self._profiler: Any = None
        self._count = 0
        self._stopped = False

    def _build(self) -> Any:
        activities = self.config.get_activities()
        if not activities:
            return None
        config = self.config
        ready = config.on_trace_ready
        if ready is None:
            path = config.get_save_path(self.worker_idx)
            path.parent.mkdir(parents=True, exist_ok=True)

            def ready(prof, _path=path, _idx=self.worker_idx) -> None:
                prof.export_chrome_trace(str(_path))
                logger.info("profiler (worker %d): trace saved to %s", _idx, _path)

        schedule = torch.profiler.schedule(
            skip_first=config.warmup_rollouts,
            wait=0,
            warmup=0,
            active=config.num_rollouts - config.warmup_rollouts,
            repeat=1,
        )
        return torch.profiler.profile(
            activities=activities,
            schedule=schedule,
            on_trace_ready=ready,
            record_shapes=config.record_shapes,
            profile_memory=config.profile_memory,
            with_stack=config.with_stack,
            with_flops=config.with_flops,
        )

    def __call__(self, batch: TensorDictBase | None = None) -> None:
        self._profile()
        if self.previous is not None:
            self.previous(batch)

    def _profile(self) -> None:
        if self._stopped:
            return
        if self._profiler is None:
            self._profiler = self._build()
            if self._profiler is None:  # nothing to record on this machine
                self._stopped = True
                return
            self._profiler.start()
        self._profiler.step()
        self._count += 1
        if self._count >= self.config.num_rollouts:
            self.stop()

    def stop(self) -> None:
        """Stops the profiler (idempotent)."""
        if self._profiler is not None and not self._stopped:
            self._profiler.stop()
        self._stopped = True
