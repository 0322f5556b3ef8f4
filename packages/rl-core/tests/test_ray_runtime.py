"""rl.core.ray_runtime: Ray imported lazily, the shared runtime's lease, start-up crashes
read from Ray's forwarded stderr, and the process helpers. Ray itself is replaced by a
stand-in module: these tests run without it (the Ray tests of rl-collectors and rl-data
start real runtimes)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types

import pytest

from rl.core import ray_runtime
from rl.core.ray_runtime import (
    _StartupCrashes,
    acquire_runtime,
    child_pids,
    import_ray,
    processes_left,
    release_runtime,
)

FLAG = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"


class TestPublicModule:
    def test_all_names_exist(self):
        assert sorted(ray_runtime.__all__) == sorted(
            [
                "import_ray",
                "acquire_runtime",
                "release_runtime",
                "wait_started",
                "child_pids",
                "processes_left",
                "local_ray",
            ]
        )
        for name in ray_runtime.__all__:
            assert callable(getattr(ray_runtime, name)), name

    def test_the_private_module_is_gone(self):
        assert importlib.util.find_spec("rl.core._ray") is None


class TestImportRay:
    def test_missing_ray_names_the_object_and_the_extra(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
        with pytest.raises(
            ImportError,
            match=r'RayCollector needs Ray, which is not installed: pip install "rl-collectors\[ray\]"',
        ):
            import_ray("RayCollector", "rl-collectors[ray]")

    def test_returns_the_module(self, monkeypatch):
        fake = types.ModuleType("ray")
        monkeypatch.setitem(sys.modules, "ray", fake)
        assert import_ray("RayCollector", "rl-collectors[ray]") is fake


# ------------------------------------------------------------------ the runtime lease
class FakeRay(types.ModuleType):
    """The part of ``ray`` the lease uses; records each init with the uv flag it saw."""

    def __init__(self, constants: types.SimpleNamespace, running: bool = False) -> None:
        super().__init__("ray")
        self._constants = constants
        self.running = running
        self.inits: list[tuple[dict, bool]] = []
        self.shutdowns = 0

    def is_initialized(self) -> bool:
        return self.running

    def init(self, **kwargs) -> None:
        self.inits.append((kwargs, getattr(self._constants, FLAG)))
        self.running = True

    def shutdown(self) -> None:
        self.shutdowns += 1
        self.running = False


@pytest.fixture
def fake_ray(monkeypatch):
    """A stand-in ``ray`` (with ``ray._private.ray_constants``, whose uv flag is on)."""
    constants = types.SimpleNamespace(**{FLAG: True})
    private = types.ModuleType("ray._private")
    private.ray_constants = constants
    monkeypatch.delenv(FLAG, raising=False)
    monkeypatch.setitem(sys.modules, "ray._private", private)
    monkeypatch.setitem(sys.modules, "ray._private.ray_constants", constants)

    def make(running: bool = False) -> FakeRay:
        ray = FakeRay(constants, running)
        ray._private = private
        monkeypatch.setitem(sys.modules, "ray", ray)
        return ray

    return make


class TestRuntimeLease:
    def test_the_last_holder_shuts_down_the_runtime_rl_started(self, fake_ray):
        ray = fake_ray()
        first = acquire_runtime(ray, {"num_cpus": 2})
        second = acquire_runtime(ray, {"num_cpus": 8})  # joins: no second init
        assert first is True and second is True
        assert [kwargs for kwargs, _ in ray.inits] == [{"num_cpus": 2}]
        release_runtime(ray, first)
        assert ray.running and ray.shutdowns == 0
        release_runtime(ray, second)
        assert not ray.running and ray.shutdowns == 1
        release_runtime(ray, second)  # one release too many: nothing more happens
        assert ray.shutdowns == 1

    def test_a_runtime_the_user_started_is_never_shut_down(self, fake_ray):
        ray = fake_ray(running=True)
        held = acquire_runtime(ray, None)
        assert held is False and ray.inits == []
        release_runtime(ray, held)
        assert ray.running and ray.shutdowns == 0

    def test_a_new_runtime_after_the_last_release(self, fake_ray):
        ray = fake_ray()
        release_runtime(ray, acquire_runtime(ray, None))
        held = acquire_runtime(ray, {"num_cpus": 1})
        assert held is True and len(ray.inits) == 2 and ray.running
        release_runtime(ray, held)
        assert ray.shutdowns == 2

    def test_ray_init_runs_without_the_uv_run_integration(self, fake_ray):
        ray = fake_ray()
        release_runtime(ray, acquire_runtime(ray, None))
        ((_, flag_seen),) = ray.inits
        assert flag_seen is False  # off for rl's ray.init ...
        assert getattr(ray._private.ray_constants, FLAG) is True  # ... and restored after

    def test_the_users_setting_is_kept(self, fake_ray, monkeypatch):
        monkeypatch.setenv(FLAG, "1")
        ray = fake_ray()
        release_runtime(ray, acquire_runtime(ray, None))
        ((_, flag_seen),) = ray.inits
        assert flag_seen is True


# ----------------------------------------------------------- Ray's forwarded stderr
class TestStartupCrashes:
    """The lines a raylet forwards for a worker that died before joining a job."""

    TRACEBACK = [
        "Traceback (most recent call last):",
        '  File ".../ray/_private/workers/default_worker.py", line 8, in <module>',
        "    import ray",
        "ModuleNotFoundError: No module named 'ray'",
    ]

    @staticmethod
    def lines(lines, pid="raylet", job="", is_err=True):
        return {"ip": "10.0.0.1", "pid": pid, "job": job, "is_err": is_err, "lines": lines}

    def test_traceback_over_several_messages(self):
        crashes = _StartupCrashes()
        crashes(self.lines(["Creating virtual environment at: .venv", *self.TRACEBACK[:2]]))
        assert crashes.crash is None  # the exception line has not come yet
        crashes(self.lines(self.TRACEBACK[2:]))
        assert crashes.crash == "\n".join(self.TRACEBACK)

    def test_raylet_says_the_worker_crashed(self):
        crashes = _StartupCrashes()
        line = (
            "worker_pool.cc:660: Some workers of the worker process(7926) have not registered "
            "within the timeout. The process is dead, probably it crashed during start."
        )
        crashes(self.lines([line]))
        assert crashes.crash == line

    @pytest.mark.parametrize(
        "kwargs",
        [{"job": "01000000"}, {"pid": "autoscaler"}, {"is_err": False}],
        ids=["a job's worker", "Ray's autoscaler", "stdout"],
    )
    def test_other_lines_are_ignored(self, kwargs):
        crashes = _StartupCrashes()
        crashes(self.lines(self.TRACEBACK, **kwargs))
        assert crashes.crash is None


# ------------------------------------------------------------------ process helpers
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
class TestProcessHelpers:
    def test_child_pids_and_processes_left(self):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            assert proc.pid in child_pids()
            assert processes_left([proc.pid], timeout=0.0) == [proc.pid]
        finally:
            proc.kill()
            proc.wait()
        assert proc.pid not in child_pids()
        assert processes_left([proc.pid], timeout=5.0) == []
