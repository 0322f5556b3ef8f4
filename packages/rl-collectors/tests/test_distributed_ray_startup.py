"""Ray workers that start with another Python than the driver's: under `uv run`, or
without rl or Ray (Ray itself retries a worker that dies at start-up, without raising)."""

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rl.core.ray_runtime import (
    acquire_runtime,
    child_pids,
    local_ray,
    processes_left,
    release_runtime,
)

ray = pytest.importorskip("ray")

from ray._private import ray_constants  # noqa: E402
from ray._private.runtime_env import uv_runtime_env_hook  # noqa: E402

from rl.collectors.distributed import RayCollector  # noqa: E402
from rl.data import LazyTensorStorage, RayReplayBuffer  # noqa: E402
from rl.envs import GymEnv  # noqa: E402

# a bound that catches a hang, not a speed check (see test_distributed_ray.py)
pytestmark = pytest.mark.timeout(300)

FLAG = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"
# the interpreter this venv was made from: it runs, but has neither Ray nor rl
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
cartpole = functools.partial(GymEnv, "CartPole-v1", categorical_action_encoding=True)


def _has_ray(python: str) -> bool:
    return subprocess.run([python, "-c", "import ray"], capture_output=True).returncode == 0


# ------------------------------------------------------------------ `uv run` drivers
class TestRayStartedByRlUnderUvRun:
    """rl starts Ray without Ray's uv integration: the workers run the driver's Python."""

    @pytest.fixture
    def uv_run_ancestor(self, monkeypatch, tmp_path):
        # Ray's hook looks for a `uv run` ancestor process: this one says there is one
        # (and runs in an empty folder, the working_dir it would copy for the workers)
        monkeypatch.delenv(FLAG, raising=False)
        monkeypatch.setattr(ray_constants, FLAG, True)
        monkeypatch.setattr(
            uv_runtime_env_hook, "_get_uv_run_cmdline", lambda: ["uv", "run", "python", "x.py"]
        )
        monkeypatch.chdir(tmp_path)
        assert not ray.is_initialized()
        before = set(child_pids())
        yield
        assert not ray.is_initialized()
        assert not processes_left(set(child_pids()) - before)

    @pytest.mark.parametrize("flag", [None, "1"], ids=["rl's default", "user keeps uv"])
    def test_ray_init_by_rl_keeps_the_driver_interpreter(self, uv_run_ancestor, monkeypatch, flag):
        if flag is not None:
            monkeypatch.setenv(FLAG, flag)
        held = acquire_runtime(ray, {"address": "local", "num_cpus": 1, "include_dashboard": False})
        try:
            py_executable = ray.get_runtime_context().runtime_env.get("py_executable")
        finally:
            release_runtime(ray, held)
        if flag is None:
            assert py_executable is None  # Ray's default: the driver's interpreter
        else:  # RAY_ENABLE_UV_RUN_RUNTIME_ENV=1 in the environment: Ray's choice
            assert py_executable.startswith("uv run")
        assert getattr(ray_constants, FLAG) is True  # switched off for rl's ray.init only

    @pytest.mark.timeout(420)  # a new interpreter importing torch and Ray: 20 s here
    @pytest.mark.parametrize(
        "flag",
        [None, pytest.param("1", marks=pytest.mark.slow)],
        ids=["rl's default", "user keeps uv"],
    )
    def test_script_under_uv_run(self, tmp_path, flag):
        """A user's script run with ``uv run`` in a project whose environment has rl:
        with Ray's uv integration the workers would run ``uv run`` in a copy of the
        folder, in a new environment without Ray, and die (Ray retrying them for ever)."""
        uv = shutil.which("uv")
        if uv is None:
            pytest.skip("uv is not installed")
        project = tmp_path / "project"
        project.mkdir()
        # an environment that sees this one's packages (rl, Ray, torch) through a .pth
        subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", project / ".venv"], check=True)
        (site,) = (project / ".venv" / "lib").glob("python*/site-packages")
        packages = Path(ray.__file__).resolve().parents[1]
        (site / "_this_env.pth").write_text(f"import site; site.addsitedir({str(packages)!r})\n")
        (project / "pyproject.toml").write_text(
            '[project]\nname = "script"\nversion = "0"\nrequires-python = ">=3.11"\n'
        )
        (project / ".gitignore").write_text(".venv/\n")
        (project / "script.py").write_text(
            textwrap.dedent(
                """
                import functools, json, sys
                from rl.collectors.distributed import RayCollector
                from rl.core.ray_runtime import child_pids
                from rl.envs import GymEnv

                collector = RayCollector(
                    functools.partial(GymEnv, "CartPole-v1", categorical_action_encoding=True),
                    frames_per_batch=20,
                    total_frames=20,
                    ray_init_config={"address": "local", "num_cpus": 1, "include_dashboard": False},
                    startup_timeout=150,
                )
                try:
                    frames = sum(batch.numel() for batch in collector)
                    print("RESULT", json.dumps({"frames": frames, "pids": child_pids()}))
                finally:
                    collector.shutdown()
                """
            )
        )
        env = {k: v for k, v in os.environ.items() if k not in (FLAG, "VIRTUAL_ENV", "PYTHONPATH")}
        if flag is not None:
            env[FLAG] = flag
        env["UV_OFFLINE"] = "1"
        start = time.monotonic()
        proc = subprocess.Popen(
            [uv, "run", "--no-sync", "python", "script.py"],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail(f"the script did not end within 240 s:\n{out[-4000:]}")
        elapsed = time.monotonic() - start
        if flag is None:
            assert proc.returncode == 0, out[-4000:]
            (line,) = [line for line in out.splitlines() if line.startswith("RESULT ")]
            result = json.loads(line.removeprefix("RESULT "))
            assert result["frames"] == 20
            assert not processes_left(result["pids"])
        else:  # the workers die: reported at once, not after startup_timeout (150 s)
            assert proc.returncode != 0
            assert "could not start: a Ray worker process died at start-up" in out, out[-4000:]
            assert "No module named 'ray'" in out
            assert f"set {FLAG}=0" in out
        assert elapsed < 150, (elapsed, out[-4000:])


# ------------------------------------------------------- workers without rl or Ray
@pytest.fixture(scope="module")
def ray_without_rl(tmp_path_factory):
    """Ray started by the user with workers that cannot import rl: a broken ``rl`` package
    comes first on their PYTHONPATH. The workers' output reaches this driver (Ray's
    default), as does the traceback of a worker that dies at start-up."""
    fake = tmp_path_factory.mktemp("fake_rl")
    (fake / "rl").mkdir()
    (fake / "rl" / "__init__.py").write_text("raise ImportError('a broken rl')\n")
    runtime_env = {"env_vars": {"PYTHONPATH": str(fake)}}
    with local_ray(num_cpus=2, runtime_env=runtime_env, log_to_driver=True):
        yield


@pytest.fixture(scope="module")
def python_without_ray():
    if _has_ray(BASE_PYTHON):
        pytest.skip(f"{BASE_PYTHON} has Ray: no interpreter without it at hand")
    return BASE_PYTHON


class TestRayWorkersThatCannotStart:
    """Reported within seconds with the cause and the fix (``startup_timeout`` is 150 s)."""

    def test_collector_worker_cannot_import_rl(self, ray_without_rl):
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="could not import what they need") as info:
            RayCollector(cartpole, frames_per_batch=10, total_frames=10, startup_timeout=150)
        assert time.monotonic() - start < 60
        message = str(info.value)
        assert "No module named 'rl" in message
        assert f"set {FLAG}=0" in message and "'py_executable': sys.executable" in message
        assert "all actors were shut down" in message

    def test_collector_worker_dies_at_start_up(self, ray_without_rl, python_without_ray):
        # Ray starts this worker again and again, without raising; its raylet says so
        # after 60 s: the traceback is reported long before
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="died at start-up") as info:
            RayCollector(
                cartpole,
                frames_per_batch=10,
                total_frames=10,
                startup_timeout=150,
                remote_configs={
                    "num_cpus": 1,
                    "runtime_env": {"py_executable": python_without_ray},
                },
            )
        assert time.monotonic() - start < 45
        message = str(info.value)
        assert "(ModuleNotFoundError: No module named 'ray')" in message
        assert f"set {FLAG}=0" in message

    def test_replay_buffer_worker_dies_at_start_up(self, ray_without_rl, python_without_ray):
        # the buffer waits for its actor without a timeout: it hung for ever
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"the RayReplayBuffer actor could not start"):
            RayReplayBuffer(
                storage=functools.partial(LazyTensorStorage, 10),
                remote_config={"num_cpus": 0, "runtime_env": {"py_executable": python_without_ray}},
            )
        assert time.monotonic() - start < 45
