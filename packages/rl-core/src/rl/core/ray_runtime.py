"""Ray, imported lazily, and the Ray runtime that rl objects share.

This is the public contract between the packages that run on Ray: ``RayCollector``
(``rl-collectors``) and ``RayReplayBuffer`` (``rl-data``) import Ray with
:func:`import_ray`, start or join the shared runtime with :func:`acquire_runtime`, give
it back with :func:`release_runtime` and wait for their actors with
:func:`wait_started`. A user who writes a Ray-backed rl object of their own does the same.

``rl-core`` does not depend on Ray: ``ray`` is imported inside the functions here, when a
Ray-backed object is built, so ``import rl.collectors`` / ``import rl.data`` do not
import it.

``ray.init()`` is called by the first rl object that needs Ray when Ray is not running
yet; that runtime is shut down when the last rl object using it is shut down, and never
when the user (or a cluster) started Ray. The count of users is one record per ``ray``
module, so a ``RayReplayBuffer`` created after a ``RayCollector`` keeps the runtime the
collector started alive when the collector shuts down.

rl calls ``ray.init()`` without Ray's ``uv run`` integration: a driver started with
``uv run`` would otherwise make Ray start every worker with ``uv run`` in a copy of the
working directory, whose fresh environment lacks the driver's packages (the workers die
with ``No module named 'ray'`` and Ray starts them again, without raising). The workers
run the driver's interpreter on a local instance, the nodes' own on a cluster. Setting
``RAY_ENABLE_UV_RUN_RUNTIME_ENV`` in the environment (``1``) keeps Ray's choice.

:func:`wait_started` waits for the first answer of new actors and reports a worker that
cannot start (an interpreter without Ray or rl) at once, with the cause and the fix.

The process helpers at the end (:func:`child_pids`, :func:`processes_left`,
:func:`local_ray`) let tests check that a Ray runtime leaves no process behind (they read
``/proc``: Linux).

Examples:
    >>> from rl.core.ray_runtime import acquire_runtime, import_ray, release_runtime
    >>> ray = import_ray("my Ray-backed object", "rl-collectors[ray]")  # doctest: +SKIP
    >>> held = acquire_runtime(ray, {"num_cpus": 2})  # doctest: +SKIP
    >>> release_runtime(ray, held)  # the last holder shuts down the runtime  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any

__all__ = [
    "import_ray",
    "acquire_runtime",
    "release_runtime",
    "wait_started",
    "child_pids",
    "processes_left",
    "local_ray",
]

_LEASE_ATTR = "_rl_runtime_lease"
_UV_RUN_FLAG = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"


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
            with _without_uv_run_integration():
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


@contextlib.contextmanager
def _without_uv_run_integration() -> Iterator[None]:
    """Turns Ray's ``uv run`` integration off for the ``ray.init()`` inside, unless the
    user set ``RAY_ENABLE_UV_RUN_RUNTIME_ENV`` in the environment.

    Ray reads the variable once, when it is imported, into ``ray_constants``; ``ray.init``
    then looks for a ``uv run`` ancestor process and, when it finds one, replaces the
    runtime env's ``py_executable`` (even one given to ``ray.init``) by ``uv run ...
    python`` with a ``working_dir`` copy of the current directory.
    """
    from ray._private import ray_constants  # noqa: PLC0415  (Ray is imported by now)

    if _UV_RUN_FLAG in os.environ or not hasattr(ray_constants, _UV_RUN_FLAG):
        yield
        return
    enabled = getattr(ray_constants, _UV_RUN_FLAG)
    setattr(ray_constants, _UV_RUN_FLAG, False)
    try:
        yield
    finally:
        setattr(ray_constants, _UV_RUN_FLAG, enabled)


# ----------------------------------------------------------------- actors starting up
_POLL_S = 0.25  # how often wait_started looks at the workers' start-up crashes
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was")
_CRASHED_AT_START = "probably it crashed during start"  # the raylet's line, 60 s later


class _StartupCrashes:
    """Catches the first traceback of a Ray worker process that died before it joined a
    job, in the stderr lines the raylets forward to this driver.

    Ray starts such a worker again and again and never raises (the actor stays pending);
    its stderr reaches the driver as lines of no job (shown as ``(raylet)``). A handler
    of Ray's log stream: called on Ray's log thread, it must be quick and never raise.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.crash: str | None = None  # the traceback, ending with the exception
        self._reading: dict[tuple, list[str]] = {}  # an open traceback per source

    def __call__(self, data: Mapping[str, Any]) -> None:
        if self.crash is not None or not data.get("is_err") or data.get("job"):
            return
        pid = str(data.get("pid"))
        if pid != "raylet" and not pid.isdigit():  # the autoscaler, the GCS, ...
            return
        source = (data.get("ip"), pid)
        with self.lock:
            for line in data.get("lines") or ():
                lines = self._reading.get(source)
                if line.startswith(_TRACEBACK):
                    self._reading[source] = [line]
                elif lines is not None:
                    lines.append(line)
                    # the first unindented line after the frames names the exception
                    if line[:1].strip() and not line.startswith(_CHAINED):
                        self.crash = "\n".join(lines)
                        return
                elif _CRASHED_AT_START in line:
                    self.crash = line.strip()
                    return


@contextlib.contextmanager
def _watch_startup_crashes() -> Iterator[_StartupCrashes]:
    """A :class:`_StartupCrashes` fed by Ray's log stream while inside (it receives
    lines only when Ray forwards the workers' output: ``log_to_driver``, the default)."""
    crashes = _StartupCrashes()
    try:  # Ray has no public hook on its log stream: without this one, no watch
        from ray._private.ray_logging import (  # noqa: PLC0415
            global_worker_stdstream_dispatcher as dispatcher,
        )
    except ImportError:
        yield crashes
        return
    name = f"rl_startup_crashes_{id(crashes)}"
    dispatcher.add_handler(name, crashes)
    try:
        yield crashes
    finally:
        dispatcher.remove_handler(name)


def _workers_fix(ray: Any) -> str:
    """How to give the workers a Python that imports Ray and rl."""
    py_executable = ray.get_runtime_context().runtime_env.get("py_executable")
    started = f"this Ray job starts its workers with {py_executable!r}; " if py_executable else ""
    return (
        f"{started}the workers need a Python with ray and rl installed: under `uv run`, "
        f"set {_UV_RUN_FLAG}=0 in the environment before Ray is imported (Ray's uv "
        "integration starts every worker with `uv run` in a copy of the working "
        "directory, and replaces py_executable), otherwise start Ray with "
        f"runtime_env={{'py_executable': sys.executable}} ({sys.executable!r})"
    )


def _import_failure(message: str) -> str | None:
    """The last ``ModuleNotFoundError: ...`` / ``ImportError: ...`` line of ``message``."""
    found = None
    for line in message.splitlines():
        line = line.strip()
        if line.startswith(("ModuleNotFoundError: ", "ImportError: ")):
            found = line
    return found


def wait_started(ray: Any, refs: Sequence[Any], *, what: str, timeout: float | None) -> list:
    """The results of ``refs``, the first calls on actors just created, waiting for them
    to start; a worker that cannot start is reported at once.

    Ray raises for an actor whose creation failed (``RayActorError``: its ``__init__``
    raised, or could not unpickle the class because the worker cannot import rl) or
    whose runtime env could not be set up (``RuntimeEnvSetupError``). A worker process
    that dies before it registers (an interpreter without Ray, as Ray's ``uv run``
    integration gives) Ray only starts again: its traceback, which the raylet forwards to
    this driver, is watched for instead (with ``log_to_driver=False`` such a worker is
    only reported when ``timeout`` passes).

    Args:
        ray: the ``ray`` module.
        refs: one call on each new actor (``actor.ready.remote()``).
        what: the actors, as the messages name them (``"the RayCollector actors"``).
        timeout: seconds to wait for all the answers; ``None`` waits.

    Returns:
        The answers, in the order of ``refs``.

    Raises:
        RuntimeError: an actor or its worker died at start-up; the message says why
            (``No module named 'rl.collectors'``) and, when the worker lacks a module,
            how to start the workers with a Python that has it.
        ray.exceptions.GetTimeoutError: no answer within ``timeout`` seconds (an actor
            still waiting for resources, or a worker still starting).
        ray.exceptions.RayTaskError: a call raised in a started actor.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = list(refs)
    with _watch_startup_crashes() as crashes:
        while pending:
            if crashes.crash is not None:
                last = crashes.crash.splitlines()[-1]
                raise RuntimeError(
                    f"{what} could not start: a Ray worker process died at start-up "
                    f"({last}), and Ray starts it again without raising; "
                    f"{_workers_fix(ray)}. The worker's traceback:\n{crashes.crash}"
                )
            wait = _POLL_S
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    raise ray.exceptions.GetTimeoutError(
                        f"{what} did not answer within {timeout} s"
                    )
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=wait)
            try:
                ray.get(ready)  # raises at once for a dead actor
            except (ray.exceptions.RayActorError, ray.exceptions.RuntimeEnvSetupError) as err:
                missing = _import_failure(str(err))
                if missing is None:
                    raise RuntimeError(f"{what} failed during start-up: {err}") from err
                raise RuntimeError(
                    f"{what} could not start: the Ray workers could not import what they "
                    f"need ({missing}); {_workers_fix(ray)}. Ray says: {err}"
                ) from err
    return ray.get(list(refs))


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


def processes_left(pids: Iterable[int], timeout: float = 60.0) -> list[int]:
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
def local_ray(num_cpus: int = 2, timeout: float = 60.0, **init_kwargs: Any) -> Iterator[ModuleType]:
    """A local Ray instance with ``num_cpus`` CPUs, shut down on exit; raises an
    ``AssertionError`` when one of its processes (the raylet, the GCS, the workers) is
    still running ``timeout`` seconds later. ``init_kwargs`` go to ``ray.init()``
    (``runtime_env``, ``log_to_driver``: ``False`` unless given).

    Examples:
        >>> with local_ray(num_cpus=2) as ray:  # doctest: +SKIP
        ...     ray.get(ray.put(1))
        1
    """
    ray = import_ray("local_ray", "ray")
    # processes this one already had (a multiprocessing resource tracker, a forkserver
    # left by earlier tests in the same interpreter) are not Ray's
    before = set(child_pids())
    # the workers run with this interpreter, not through Ray's `uv run` integration
    with _without_uv_run_integration():
        ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            **{"log_to_driver": False, **init_kwargs},
        )
    try:
        yield ray
    finally:
        children = [pid for pid in child_pids() if pid not in before and _is_ray(pid)]
        ray.shutdown()
    left = processes_left(children, timeout)
    assert not left, f"processes left behind: {left}"
