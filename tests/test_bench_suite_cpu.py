"""benchmarks/suite_cpu.py: its sitecustomize records every interpreter that reads it
(the test running when it started, its CPU time at exit), and its summary puts the
interpreters and the JUnit times on the right test files."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def suite_cpu():
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("suite_cpu", BENCHMARKS / "suite_cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sitecustomize_records_start_test_and_exit_cpu(suite_cpu, tmp_path):
    site, log = tmp_path / "site", tmp_path / "processes.log"
    site.mkdir()
    (site / "sitecustomize.py").write_text(suite_cpu.SITECUSTOMIZE)
    env = dict(os.environ, PYTHONPATH=str(site), RL_SUITE_CPU_LOG=str(log))
    env["PYTEST_CURRENT_TEST"] = "tests/test_x.py::test_a (call)"
    code = "import os, sys; sum(range(2_000_000)); os._exit(0) if sys.argv[1] == 'x' else None"
    for how in ("exit", "x"):  # an ordinary exit, then one through os._exit
        subprocess.run([sys.executable, "-c", code, how], env=env, check=True)
    procs = suite_cpu.read_processes(log)
    assert len(procs) == 2
    ended, killed = sorted(procs.values(), key=lambda p: p["cpu"] is None)
    assert ended["test"] == killed["test"] == "tests/test_x.py::test_a (call)"
    assert ended["argv"] == "-c exit" and killed["argv"] == "-c x"
    assert 0.0 < ended["cpu"] < 30.0 and killed["cpu"] is None
    # without the variable the sitecustomize writes nothing
    env.pop("RL_SUITE_CPU_LOG")
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    assert len(suite_cpu.read_processes(log)) == 2


def test_summary_rows_per_test_file(suite_cpu, tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="packages.rl-data.tests.test_a.TestX" name="t1" time="2.5"/>'
        '<testcase classname="packages.rl-data.tests.test_a" name="t2" time="0.5"/>'
        '<testcase classname="tests.test_b" name="t3" time="7.0"/>'
        "</testsuite></testsuites>"
    )
    log = tmp_path / "processes.log"
    log.write_text(
        "start\t10\t1\t0.0\tpackages/rl-data/tests/test_a.py::TestX::t1 (call)\tpython -c\n"
        "exit\t10\t1\t1.25\n"
        "start\t11\t1\t0.0\tpackages/rl-data/tests/test_a.py::t2 (setup)\tray worker\n"
        "start\t12\t1\t0.0\t-\tpytest -n 2\n"
        "exit\t12\t1\t40.00\n"
    )
    files = suite_cpu.read_junit(junit)
    assert files == {"packages/rl-data/tests/test_a.py": (2, 3.0), "tests/test_b.py": (1, 7.0)}
    rows = suite_cpu.summarise(files, suite_cpu.read_processes(log))
    assert rows == [
        ["tests/test_b.py", "1", "7.0", "0", "0.0", "0"],
        ["packages/rl-data/tests/test_a.py", "2", "3.0", "1", "1.2", "1"],
        ["-", "0", "0.0", "1", "40.0", "0"],
    ]
