"""The root conftest.py's shared Ray runtime: the files that use it are the files it lists,
and ``--dist loadfile`` hands them to one worker as one work unit (one runtime for all)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _root_conftest():
    spec = importlib.util.spec_from_file_location("_rl_root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_listed_file_exists_and_uses_the_shared_runtime():
    conftest = _root_conftest()
    assert len(conftest.SHARED_RAY_FILES) == len(set(conftest.SHARED_RAY_FILES)) >= 2
    for path in conftest.SHARED_RAY_FILES:
        text = (ROOT / path).read_text()
        assert "shared_ray" in text, path
        assert "local_ray(" not in text, f"{path} starts a runtime of its own"


def test_loadfile_schedules_the_listed_files_as_one_unit(pytestconfig, monkeypatch):
    pytest.importorskip("xdist")
    conftest = _root_conftest()
    monkeypatch.setattr(pytestconfig.option, "dist", "loadfile")
    monkeypatch.setattr(pytestconfig.option, "tx", ["2*popen"])  # as `-n 2` gives
    scheduler = conftest.pytest_xdist_make_scheduler(config=pytestconfig, log=None)
    first, *others = conftest.SHARED_RAY_FILES
    scope = scheduler._split_scope(f"{first}::TestA::test_a")
    assert [scheduler._split_scope(f"{path}::test_b[x]") for path in others] == [scope] * len(
        others
    )
    # every other file stays a work unit of its own, as plain --dist loadfile makes it
    other = "packages/rl-collectors/tests/test_distributed_ray_startup.py"
    assert scheduler._split_scope(f"{other}::test_c") == other
    monkeypatch.setattr(pytestconfig.option, "dist", "load")
    assert conftest.pytest_xdist_make_scheduler(config=pytestconfig, log=None) is None


def test_listed_files_are_found_whatever_the_rootdir():
    # the listed paths are the repository's: a run whose rootdir is another folder
    # (``--rootdir``, or pytest started elsewhere) still knows the shared runtime's users
    shared = ROOT / "packages/rl-data/tests/test_ray_buffer.py"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q"]
        + [f"--rootdir={ROOT / 'packages'}", str(shared)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
