"""Argument checks and per-worker settings of the torch.distributed collectors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from ._common import per_worker, resolve_collector_class

__all__ = ["check_arguments", "worker_configs"]

_BACKENDS = ("gloo", "nccl")
_LAUNCHERS = ("mp", "torchrun")
_UNSUPPORTED = {
    "weight_updater": "weights go to the workers over the process group with "
    "update_policy_weights_()",
    "weight_sync_schemes": "weights go to the workers over the process group with "
    "update_policy_weights_()",
    "weight_recv_schemes": "a distributed collector cannot itself receive weights here",
}


def check_arguments(
    name: str, *, weight_updater, weight_sync_schemes, weight_recv_schemes, launcher,
    slurm_kwargs, backend, frames_per_batch, total_frames, update_after_each_batch,
    max_weight_update_interval, update_interval, policy, policy_factory, collector_class,
    mp_start_method,
) -> type:  # fmt: skip
    """Raises on arguments the collector cannot run with; returns the collector class
    (``"single"``, ``"sync"`` and ``"async"`` resolved)."""
    for arg, value in (("weight_updater", weight_updater),
                       ("weight_sync_schemes", weight_sync_schemes),
                       ("weight_recv_schemes", weight_recv_schemes)):  # fmt: skip
        if value is not None:
            raise ValueError(f"{arg} is not supported by {name}: {_UNSUPPORTED[arg]}")
    if launcher in ("submitit", "submitit_delayed"):
        raise ValueError(
            f"launcher={launcher!r} is not supported (rl does not depend on submitit): "
            "start the workers with torchrun and pass launcher='torchrun' (see "
            "examples/distributed), or use launcher='mp' on one machine"
        )
    if launcher not in _LAUNCHERS:
        raise ValueError(f"launcher must be one of {_LAUNCHERS}, got {launcher!r}")
    if slurm_kwargs is not None:
        raise ValueError(
            "slurm_kwargs configures submitit's SLURM jobs, which are not supported: "
            "allocate the nodes with your scheduler and start torchrun on each "
            "(launcher='torchrun'), got slurm_kwargs="
            f"{dict(slurm_kwargs)!r}"
        )
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    if backend == "nccl" and not torch.cuda.is_available():
        raise ValueError("backend='nccl' needs CUDA devices; use backend='gloo' on CPU")
    if isinstance(frames_per_batch, bool) or not isinstance(frames_per_batch, int):
        raise TypeError(f"frames_per_batch must be an int, got {frames_per_batch!r}")
    if isinstance(total_frames, bool) or not isinstance(total_frames, int):
        raise TypeError(f"total_frames must be an int, got {total_frames!r}")
    if frames_per_batch <= 0 or (total_frames != -1 and total_frames <= 0):
        raise ValueError(
            f"frames_per_batch ({frames_per_batch}) must be positive and total_frames "
            f"({total_frames}) positive or -1"
        )
    if update_after_each_batch and max_weight_update_interval > -1:
        raise ValueError(
            "update_after_each_batch=True and max_weight_update_interval="
            f"{max_weight_update_interval} conflict: pass one of them"
        )
    if update_interval is not None and update_interval < 1:
        raise ValueError(f"update_interval must be >= 1, got {update_interval}")
    if policy is not None and policy_factory is not None:
        raise ValueError("pass policy or policy_factory, not both")
    collector_class = resolve_collector_class(collector_class)
    if mp_start_method is not None and launcher != "mp":
        raise ValueError("mp_start_method applies to launcher='mp' only")
    if launcher == "mp" and dist.is_initialized():
        raise RuntimeError(
            "a torch.distributed process group already exists in this process; "
            "launcher='mp' creates its own: shut the other collector down first, or "
            "use launcher='torchrun' to reuse the group"
        )
    return collector_class


def worker_configs(
    n: int, *, sync: bool, frames_per_batch: int, create_env_fn, policy, policy_factory,
    collector_class: type, collector_kwargs, num_workers_per_collector: int,
    devices: Mapping[str, Any], common: Mapping[str, Any],
) -> tuple[int, list[dict]]:  # fmt: skip
    """The frames per batch of a worker and the settings each of the ``n`` workers
    builds its collector from (``collector_kwargs`` override the other arguments)."""
    if isinstance(create_env_fn, list | tuple):
        if len(create_env_fn) != n:
            raise ValueError(
                f"create_env_fn has {len(create_env_fn)} entries, expected one per worker "
                f"rank ({n})"
            )
        fns = list(create_env_fn)
    else:
        fns = [create_env_fn] * n
    for fn in fns:
        if not callable(fn):
            raise TypeError(
                f"create_env_fn must be env factories (callables), got {type(fn).__name__}"
            )
    if sync and frames_per_batch % n:
        raise ValueError(
            f"frames_per_batch={frames_per_batch} must be a multiple of the number of "
            f"workers ({n}) with sync=True: each worker collects frames_per_batch / {n}"
        )
    fpb_worker = frames_per_batch // n if sync else frames_per_batch
    factories = per_worker(policy_factory, n, "policy_factory")
    kwargs = per_worker(collector_kwargs, n, "collector_kwargs")
    per_device = {k: per_worker(v, n, k) for k, v in devices.items()}
    max_frames = common["max_frames_per_traj"]
    out = []
    for i in range(n):
        worker_kwargs = dict(common)
        worker_kwargs["init_random_frames"] = max(common["init_random_frames"] or 0, 0) // n
        worker_kwargs["max_frames_per_traj"] = max_frames if max_frames and max_frames > 0 else None
        worker_kwargs.update({k: v[i] for k, v in per_device.items() if v[i] is not None})
        worker_kwargs.update(dict(kwargs[i] or {}))
        out.append({
            "env_fn": fns[i], "policy": policy, "policy_factory": factories[i],
            "collector_class": collector_class, "collector_kwargs": worker_kwargs,
            "frames_per_batch": fpb_worker,
            "num_workers_per_collector": num_workers_per_collector, "num_workers": n,
        })  # fmt: skip
    return fpb_worker, out
