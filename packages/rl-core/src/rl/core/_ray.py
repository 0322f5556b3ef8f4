"""Ray, imported lazily, and the Ray runtime that rl objects share.

``rl-core`` does not depend on Ray: ``ray`` is imported inside the functions here, when a
Ray-backed object (``RayCollector`` in ``rl-collectors``, ``RayReplayBuffer`` in
``rl-data``) is built, so ``import rl.collectors`` / ``import rl.data`` do not import it.

``ray.init()`` is called by the first rl object that needs Ray when Ray is not running
yet; that runtime is shut down when the last rl object using it is shut down, and never
when the user (or a cluster) started Ray. The count of users is one record per ``ray``
module, so a ``RayReplayBuffer`` created after a ``RayCollector`` keeps the runtime the
collector started alive when the collector shuts down.

The process helpers at the end (:func:`child_pids`, :func:`processes_left`,
:func:`local_ray`) let tests check that a Ray runtime leaves no process behind (they read
``/proc``: Linux).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from types import ModuleType
from typing import Any

__all__ = [
    "import_ray",
    "acquire_runtime",
    "release_runtime",
    "child_pids",
    "processes_left",
    "local_ray",
]

_LEASE_ATTR = "_rl_runtime_lease"


def import_ray(what: str, extra: str) -> ModuleType:
    """``ray``, or an ``ImportError`` naming ``what`` needs it and the extra to install.

    Args:
        what: the object that needs Ray (``"RayCollector"``).
        extra: the package extra that installs it (``"rl-collectors[ray]"``).
    """
    try:
        import ray  # noqa: PLC0415  (optional dependency, imported where used)
    except ImportError as err:
        raise ImportError(
            f'{what} needs Ray, which is not installed: pip install "{extra}"'
        ) from err
    return ray


class _RuntimeLease:
    """How many rl objects use the Ray runtime an rl object started."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.owned = False


def _lease(ray: Any) -> _RuntimeLease:
    # kept on the ray module (dict.setdefault is atomic): one record per runtime module
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


# --------------------------------------------------------------- processes (for tests)
def child_pids(pid: int | None = None) -> list[int]:
    """The ids of every process below ``pid`` (default: this process), read from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as file:
                    ppid = int(file.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [os.getpid() if pid is None else pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def _is_ray(pid: int) -> bool:
    """Whether the process runs Ray (its raylet, GCS, dashboard or a ``ray::`` worker)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return b"ray" in file.read()
    except OSError:
        return False


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def processes_left(pids: Iterable[int], timeout: float = 20.0) -> list[int]:
    """The processes of ``pids`` still running (zombies count as gone) after waiting up
    to ``timeout`` seconds for all of them to exit; ``[]`` when they all did."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if _running(pid)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.2)


@contextlib.contextmanager
def local_ray(num_cpus: int = 2, timeout: float = 20.0) -> Iterator[ModuleType]:
    """A local Ray instance with ``num_cpus`` CPUs, shut down on exit; raises an
    ``AssertionError`` when one of its processes (the raylet, the GCS, the workers) is
    still running ``timeout`` seconds later.

    Examples:
        >>> with local_ray(num_cpus=2) as ray:  # doctest: +SKIP
        ...     ray.get(ray.put(1))
        1
    """
    ray = import_ray("local_ray", "ray")
    from ray._private import ray_constants  # noqa: PLC0415

    # the workers run with this interpreter, not through Ray's `uv run` integration
    ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False
    # processes this one already had (a multiprocessing resource tracker, a forkserver
    # left by earlier tests in the same interpreter) are not Ray's
    before = set(child_pids())
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        children = [pid for pid in child_pids() if pid not in before and _is_ray(pid)]
        ray.shutdown()
    left = processes_left(children, timeout)
    assert not left, f"processes left behind: {left}"
