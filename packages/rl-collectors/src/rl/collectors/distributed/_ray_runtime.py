"""Importing Ray lazily and sharing the Ray runtime that an rl object started.

``ray.init()`` is called by the first rl object that needs Ray when Ray is not running
yet; that runtime is shut down when the last rl object using it is shut down, and never
when the user (or a cluster) started Ray. ``rl-collectors`` and ``rl-data`` do not depend
on each other, so the count of users lives on the ``ray`` module itself (one attribute,
the same for both packages): a ``RayReplayBuffer`` created after a ``RayCollector`` keeps
the runtime the collector started alive when the collector shuts down.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any

__all__ = ["import_ray", "acquire_runtime", "release_runtime"]

_EXTRA_HINT = 'Ray is not installed: pip install "rl-collectors[ray]"'
_LEASE_ATTR = "_rl_runtime_lease"


def import_ray(what: str = "RayCollector") -> ModuleType:
    """``ray``, or an ``ImportError`` naming the extra to install."""
    try:
        import ray  # noqa: PLC0415  (optional dependency, imported where used)
    except ImportError as err:
        raise ImportError(f"{what} needs Ray. {_EXTRA_HINT}") from err
    return ray


class _RuntimeLease:
    """How many rl objects use the Ray runtime an rl object started."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.owned = False


def _lease(ray: Any) -> Any:
    # dict.setdefault is atomic: two packages racing get the same lease object
    return ray.__dict__.setdefault(_LEASE_ATTR, _RuntimeLease())


def acquire_runtime(ray: Any, ray_init_config: Mapping[str, Any] | None) -> bool:
    """Starts Ray with ``ray_init_config`` unless it runs; returns whether the caller
    holds a lease on a runtime an rl object started (to pass to :func:`release_runtime`)."""
    lease = _lease(ray)
    with lease.lock:
        if not ray.is_initialized():
            ray.init(**dict(ray_init_config or {}))
            lease.owned = True
            lease.count = 0
        if not lease.owned:
            return False
        lease.count += 1
        return True


def release_runtime(ray: Any, held: bool) -> None:
    """Gives a lease back; the last one shuts down the runtime an rl object started."""
    if not held:
        return
    lease = _lease(ray)
    with lease.lock:
        if lease.count > 0:
            lease.count -= 1
        if lease.count == 0 and lease.owned:
            lease.owned = False
            if ray.is_initialized():
                ray.shutdown()
