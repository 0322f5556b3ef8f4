"""Checks every test of the workspace shares: a test may not leave process-wide state
behind that changes what later tests in the same worker compute."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _no_leaked_exploration_type():
    """tensordict's interaction type (rl's exploration type) is process-wide: one left
    set by a test (or by a thread it started) makes every later probabilistic module in
    that worker sample otherwise. Fails the test that left it, and clears it."""
    yield
    nn = sys.modules.get("tensordict.nn")
    if nn is None:
        return
    leaked = nn.interaction_type()
    if leaked is not None:
        nn.set_interaction_type(None).__enter__()  # cleared: the next test starts unset
        pytest.fail(
            f"the test left the exploration type set to {leaked} outside any "
            "set_exploration_type block (a block that never ended, or one ended out of "
            "order by another thread)"
        )


# ------------------------------------------------------------- one shared Ray runtime
#: The test files that need *a* Ray runtime running, not a fresh one: they use the
#: ``shared_ray`` fixture, and pytest-xdist's ``--dist loadfile`` runs them one after the
#: other on one worker (one work unit), so that one runtime serves them all. Starting a
#: local runtime costs about 10 s of CPU on the 2-core CI machine. Files that check how
#: Ray starts or stops (the examples that start Ray, ``test_distributed_ray_startup.py``,
#: ``test_async_batched_ray.py``) start their own: the shared one is stopped before any
#: module that does not use it.
SHARED_RAY_FILES = (
    "packages/rl-collectors/tests/test_distributed_ray.py",
    "packages/rl-collectors/tests/test_llm_collector_ray.py",
    "packages/rl-collectors/tests/test_ray_services.py",
    "packages/rl-core/tests/test_loggers_ray.py",
    "packages/rl-data/tests/test_ray_buffer.py",
    "packages/rl-envs/tests/test_transforms_ray.py",
    "packages/rl-objectives/tests/test_loss_llm_advantage_ray.py",
    "packages/rl-objectives/tests/test_modules_llm_remote.py",
)
_SHARED_RAY_SCOPE = "shared Ray runtime: " + ", ".join(SHARED_RAY_FILES)
# the paths above are relative to the repository (this file's folder), not to pytest's
# rootdir, which ``--rootdir`` or the folder pytest runs from may move
_REPO_ROOT = Path(__file__).resolve().parent
# the names Ray gives its own per-node processes (not actors) in their titles
_RAY_DAEMON_TITLES = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")


class _SharedRay:
    """The runtime of this test process (an xdist worker), started on first use."""

    def __init__(self) -> None:
        self._context = None
        self.ray = None

    def start(self):
        if self._context is None:
            from rl.core.ray_runtime import local_ray  # (rl.core imports torch: not at top)

            context = local_ray(num_cpus=2)  # checks that no Ray process is left on exit
            self.ray = context.__enter__()
            self._context = context
        return self.ray

    def stop(self) -> None:
        context, self._context = self._context, None
        if context is not None:
            try:
                context.__exit__(None, None, None)
            except AssertionError as err:  # local_ray's check: a Ray process still runs
                pytest.fail(f"the shared Ray runtime, stopped, {err}")

    def leftovers(self, timeout: float = 60.0) -> list[str]:
        """The actors still alive in the runtime after ``timeout`` seconds (named ones by
        name, others by their process title): a test must kill the actors it made."""
        from rl.core.ray_runtime import child_pids  # (rl.core imports torch: not at top)

        deadline = time.monotonic() + timeout
        while True:
            left = [f"named actor {name!r}" for name in self.ray.util.list_named_actors(True)]
            for pid in child_pids():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as file:
                        title = file.read().split(b"\0")[0].decode(errors="replace")
                    with open(f"/proc/{pid}/stat") as file:
                        zombie = file.read().rsplit(")", 1)[1].split()[0] == "Z"
                except OSError:
                    continue
                if title.startswith("ray::") and not title.startswith(_RAY_DAEMON_TITLES):
                    if not zombie:
                        left.append(f"actor process {pid} ({title.strip()})")
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.2)


_SHARED_RAY = _SharedRay()


@pytest.fixture(scope="module")
def shared_ray():
    """A local Ray runtime with 2 CPUs, shared by the modules of ``SHARED_RAY_FILES`` (a
    test that needs a fresh one starts its own). Yields ``ray``. After the module, every
    actor its tests made must be gone (within a minute): a left actor would hold CPUs
    that the next module's actors wait for."""
    ray = _SHARED_RAY.start()
    yield ray
    left = _SHARED_RAY.leftovers()
    if left:
        _SHARED_RAY.stop()  # the next module starts a clean runtime
        pytest.fail(f"actors left running in the shared Ray runtime: {left}")


@pytest.fixture(scope="module", autouse=True)
def _shared_ray_only_where_used(request):
    """Stops the shared runtime before a module not in ``SHARED_RAY_FILES`` (it may start
    Ray itself, or check that Ray is not running), so that it lives only through the run
    of those files; the last user's runtime stops at the session's end."""
    if _relative(request.node.path) not in SHARED_RAY_FILES:
        _SHARED_RAY.stop()
    yield


@pytest.fixture(scope="session", autouse=True)
def _shared_ray_stopped_at_the_end():
    yield
    _SHARED_RAY.stop()


def pytest_collection_modifyitems(session, config, items):
    """A module that uses ``shared_ray`` is listed in ``SHARED_RAY_FILES`` (or it would
    start the runtime again wherever xdist runs it)."""
    for item in items:
        if "shared_ray" in getattr(item, "fixturenames", ()):
            path = _relative(item.path)
            if path not in SHARED_RAY_FILES:
                raise pytest.UsageError(
                    f"{path} uses the shared_ray fixture but is not in SHARED_RAY_FILES "
                    "(conftest.py): add it there, so that it runs beside the other users"
                )


def _relative(path) -> str:
    """``path`` relative to the repository, as ``SHARED_RAY_FILES`` lists it."""
    try:
        return Path(path).resolve().relative_to(_REPO_ROOT).as_posix()
    except ValueError:  # outside the repository
        return str(path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, with the files of ``SHARED_RAY_FILES`` in one work unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedRayFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)  # the file, relative to the rootdir
            shared = _relative(config.rootpath / scope) in SHARED_RAY_FILES
            return _SHARED_RAY_SCOPE if shared else scope

    return SharedRayFilesTogether(config, log)
