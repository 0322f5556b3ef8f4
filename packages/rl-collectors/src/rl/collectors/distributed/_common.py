"""What the Ray and the torch.distributed collectors share: the collector classes by name,
per-worker arguments, the policy weights they send, the frame layout checks and the
trajectory ids made unique across workers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from .._base import CollectorBase
from .._multi import MultiAsyncCollector, MultiSyncCollector
from .._single import Collector

__all__ = [
    "COLLECTOR_CLASSES",
    "TRAJ_ID_STRIDE",
    "check_frames",
    "frames_per_step",
    "per_worker",
    "policy_weights",
    "resolve_collector_class",
    "unique_traj_ids",
]

#: TorchRL's names of the local collector classes a remote worker may run
COLLECTOR_CLASSES: dict[str, type] = {
    "single": Collector,
    "sync": MultiSyncCollector,
    "async": MultiAsyncCollector,
}

#: how far apart the trajectory ids of two lives of a restarted worker start: its own
#: ids restart from 0, and ``generation * TRAJ_ID_STRIDE`` keeps them apart
TRAJ_ID_STRIDE = 2**32

_TRAJ_IDS = ("collector", "traj_ids")


def resolve_collector_class(collector_class: Any) -> type:
    """A collector class from a class or TorchRL's names ``"single"``, ``"sync"``,
    ``"async"``.

    Raises:
        ValueError: an unknown name, or not a subclass of an rl collector.
    """
    if isinstance(collector_class, str):
        if collector_class not in COLLECTOR_CLASSES:
            raise ValueError(
                f"collector_class must be a collector class or one of "
                f"{sorted(COLLECTOR_CLASSES)}, got {collector_class!r}"
            )
        return COLLECTOR_CLASSES[collector_class]
    if not (isinstance(collector_class, type) and issubclass(collector_class, CollectorBase)):
        raise ValueError(
            "collector_class must be a subclass of an rl collector or one of "
            f"{sorted(COLLECTOR_CLASSES)}, got {collector_class!r}"
        )
    return collector_class


def per_worker(value: Any, n: int, name: str, what: str = "worker") -> list:
    """``value`` for each of the ``n`` workers (a list or tuple of ``n`` is taken as is).

    Raises:
        ValueError: a list whose length is not ``n``.
    """
    if isinstance(value, list | tuple):
        if len(value) != n:
            raise ValueError(
                f"{name} has {len(value)} entries, expected one per {what} ({n}): pass one "
                f"value or a list of {n}"
            )
        return list(value)
    return [value] * n


def policy_weights(source: Any) -> TensorDictBase | None:
    """The weights a worker loads, as a TensorDict of parameters (``None``: nothing to
    send, e.g. a module without parameters).

    Args:
        source: an ``nn.Module``, a TensorDict of parameters or a state dict
            (``"module.0.weight"`` keys become nested keys).

    Raises:
        TypeError: anything else.
    """
    if source is None:
        return None
    if isinstance(source, nn.Module):
        weights = TensorDict.from_module(source).data
        return weights if not weights.is_empty() else None
    if isinstance(source, TensorDictBase):
        return source.data
    if isinstance(source, Mapping):
        return TensorDict(dict(source)).unflatten_keys(".")
    raise TypeError(
        "policy weights must be an nn.Module, a state dict or a TensorDict of parameters, "
        f"got {type(source).__name__}"
    )


def frames_per_step(collector: Any) -> tuple[int, tuple[int, ...]]:
    """The frames one time step of ``collector``'s batches holds, and its env batch size.

    A :class:`~rl.collectors.Collector` steps its env batch; a multiprocess collector
    steps every sub-worker's env batch (sync) or one of them (async, which needs the
    same size in each).

    Raises:
        ValueError: an async multiprocess collector whose sub-workers' env batch sizes
            differ (its batches could not split the frames exactly).
    """
    if isinstance(collector, Collector):
        return max(collector.env.batch_size.numel(), 1), tuple(collector.env.batch_size)
    sizes = [torch.Size(size) for size in getattr(collector, "env_batch_sizes", ())]
    if not sizes:
        return 1, ()
    numels = [max(size.numel(), 1) for size in sizes]
    if getattr(collector, "_sync", False):
        return sum(numels), tuple(sizes[0])
    if len(set(numels)) > 1:
        raise ValueError(
            f"a {type(collector).__name__} inside a remote worker needs the same env batch "
            f"size in each of its sub-workers, got {[list(size) for size in sizes]}"
        )
    return numels[0], tuple(sizes[0])


def check_frames(
    per_step: Mapping[Any, int],
    *,
    frames_per_batch: int,
    sync: bool,
    total_frames: int,
    who: str = "worker rank",
    batch_sizes: Mapping[Any, tuple[int, ...]] | None = None,
) -> None:
    """Raises unless every batch and ``total_frames`` split exactly into the workers'
    time steps.

    Args:
        per_step: worker -> the frames one time step of its env batch holds.
        frames_per_batch: the frames of a yielded batch (all workers together with
            ``sync=True``, each worker's piece being ``frames_per_batch / N``).
        sync: one piece of every worker per batch, stacked.
        total_frames: the frames in all (``-1``: no limit).
        who: how the messages name a worker (``"worker rank"``, ``"actor"``).
        batch_sizes: worker -> its env batch size, compared in sync mode (stacking needs
            equal shapes); the frames per step are compared when not given.

    Raises:
        ValueError: naming the worker and the numbers that do not divide.
    """
    n = len(per_step)
    frames_per_worker = frames_per_batch // n if sync else frames_per_batch
    for worker, k in per_step.items():
        if frames_per_worker % k:
            raise ValueError(
                f"frames_per_batch={frames_per_batch} gives {frames_per_worker} frames per "
                f"batch of {who} {worker}, not a multiple of its env batch size ({k} frames "
                "per step)"
            )
    shapes = dict(batch_sizes) if batch_sizes is not None else dict(per_step)
    if sync and len(set(shapes.values())) > 1:
        raise ValueError(
            f"sync=True stacks one piece per {who.split()[0]}: every {who.split()[0]} needs "
            f"the same env batch size, got {shapes}"
        )
    if total_frames > 0:
        if sync:
            k = next(iter(per_step.values()))
            bad, what = total_frames % (n * k), f"{n} workers x {k}"
        else:
            steps = sorted(set(per_step.values()))
            bad, what = any(total_frames % k for k in steps), steps
        if bad:
            raise ValueError(
                f"total_frames={total_frames} cannot be collected exactly: it must be a "
                f"multiple of the frames per step ({what})"
            )


def unique_traj_ids(
    batch: TensorDictBase, index: int, num_workers: int, generation: int = 0
) -> TensorDictBase:
    """Makes the ``("collector", "traj_ids")`` of worker ``index`` unique across the
    ``num_workers`` workers and across the lives of a restarted worker.

    A worker's own id ``i`` becomes ``(i + generation * TRAJ_ID_STRIDE) * num_workers +
    index``: worker ``index`` owns the ids equal to ``index`` modulo ``num_workers``, and
    each ``generation`` (life) of it a range of its own.

    Args:
        batch: a batch of the worker (its ids are replaced, not written in place).
        index: the worker's index in ``[0, num_workers)``.
        num_workers: the number of workers.
        generation: how many times the worker was restarted.

    Returns:
        ``batch``, with the new ids (unchanged when it has none).
    """
    ids = batch.get(_TRAJ_IDS, None)
    if ids is not None and (num_workers > 1 or generation):
        batch.set(_TRAJ_IDS, (ids + generation * TRAJ_ID_STRIDE) * num_workers + index)
    return batch
