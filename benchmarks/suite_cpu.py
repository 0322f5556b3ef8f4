"""Where the default test suite's time goes: each test file's time, and every Python
interpreter the tests start (spawned workers, Ray's daemons and actors, subprocess checks,
throwaway environments) with the CPU time it used.

The suite is CPU-bound on a 2-core machine (``-n 3`` is slower than ``-n 2``), so its wall
time is about its CPU time over two. The tests' own work is half of it; the other half is
interpreters that each import torch, tensordict (which imports ``torch._dynamo``) and rl
before they do anything. This script makes that visible:

- it runs pytest (by default the README's command, ``-n 2 --dist loadfile``) with a
  ``sitecustomize`` on ``PYTHONPATH`` that records, for every interpreter that reads it,
  its pid, its parent, the test running when it started (``PYTEST_CURRENT_TEST``, which
  children inherit) and its command line, and at exit its CPU time (user + system);
- it reads the per-test times of the run's JUnit report, sums them per test file, and
  counts the recorded interpreters per test file.

An interpreter that is killed (Ray's daemons and workers, a ``SIGKILL`` test) or leaves
through ``os._exit`` (multiprocessing's children) writes no exit record: the report
counts it, without a CPU time. For scale, measured alone on the
2-core AMD EPYC: a Ray actor that imports rl costs 7.4 s of CPU, starting a local Ray
runtime (its daemons and two idle workers) about 10 s. Ray's daemons inherit the test
that was running when Ray started. Interpreters started with ``-I``/``-S`` or with an
environment of their own (no ``PYTHONPATH``) are not seen.

    python benchmarks/suite_cpu.py                        # the default suite, ~15 min here
    python benchmarks/suite_cpu.py -- packages/rl-data/tests/test_ray_buffer.py

Writes benchmarks/results/suite_cpu.md.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _timing import markdown_table, results_path, write_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# read by every interpreter that has the folder on PYTHONPATH; it must never fail
SITECUSTOMIZE = """
import atexit, os, sys, time

_LOG = os.environ.get("RL_SUITE_CPU_LOG")


def _write(kind, fields):
    try:
        with open(_LOG, "a") as f:
            f.write("\\t".join([kind, str(os.getpid()), str(os.getppid()), *fields]) + "\\n")
    except Exception:
        pass


def _at_exit():
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    _write("exit", [f"{usage.ru_utime + usage.ru_stime:.2f}"])


if _LOG:
    _test = os.environ.get("PYTEST_CURRENT_TEST", "-").replace("\\t", " ")
    _argv = " ".join(sys.argv).replace("\\t", " ").replace("\\n", " ")[:200]
    _write("start", [f"{time.time():.1f}", _test, _argv])
    atexit.register(_at_exit)
"""


def test_file(nodeid: str) -> str:
    """The test file of a pytest node id (``-`` stays ``-``: no test was running)."""
    return nodeid.split("::", 1)[0] if nodeid != "-" else "-"


def read_processes(log: Path) -> dict[str, dict]:
    """``pid -> {"test", "argv", "cpu"}`` from the sitecustomize log (``cpu`` is ``None``
    for an interpreter that wrote no exit record)."""
    procs: dict[str, dict] = {}
    exits: dict[str, float] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        kind, pid, _ppid, *rest = line.split("\t")
        if kind == "start" and len(rest) == 3:
            procs[pid] = {"test": rest[1], "argv": rest[2], "cpu": None}
        elif kind == "exit" and rest:
            exits[pid] = float(rest[0])
    for pid, cpu in exits.items():
        if pid in procs:
            procs[pid]["cpu"] = cpu
    return procs


def read_junit(path: Path) -> dict[str, tuple[int, float]]:
    """``test file -> (tests, seconds)`` summed over a JUnit report's test cases (the time
    of a case includes its setup and teardown, module fixtures included)."""
    files: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
    for case in ET.parse(path).iter("testcase"):
        # classname is the dotted path: "packages.rl-data.tests.test_x.TestY" -> the file
        parts = case.get("classname", "").split(".")
        module = [p for p in parts if not p[:1].isupper()]
        name = "/".join(module) + ".py"
        files[name][0] += 1
        files[name][1] += float(case.get("time", 0.0))
    return {k: (n, s) for k, (n, s) in files.items()}


def summarise(junit: dict[str, tuple[int, float]], procs: dict[str, dict]) -> list[list[str]]:
    """One row per test file, the slowest first: its tests, their time, the interpreters
    its tests started that exited, their CPU time, and those that were killed; a last row
    (``-``) for the interpreters started while no test ran (pytest and its workers)."""
    started = collections.defaultdict(lambda: [0, 0.0, 0])
    for proc in procs.values():
        row = started[test_file(proc["test"])]
        if proc["cpu"] is None:
            row[2] += 1
        else:
            row[0] += 1
            row[1] += proc["cpu"]
    names = sorted(set(junit) | set(started) - {"-"}, key=lambda k: -junit.get(k, (0, 0.0))[1])
    rows = []
    for name in [*names, "-"] if "-" in started else names:
        tests, seconds = junit.get(name, (0, 0.0))
        exited, cpu, killed = started.get(name, (0, 0.0, 0))
        rows.append([name, str(tests), f"{seconds:.1f}", str(exited), f"{cpu:.1f}", str(killed)])
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=30, help="test files listed")
    parser.add_argument("--out", default=results_path("suite_cpu.md"))
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args(argv)
    pytest_args = args.pytest_args or ["-n", "2", "--dist", "loadfile"]

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "site").mkdir()
        (tmp / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        log, junit_path = tmp / "processes.log", tmp / "junit.xml"
        env = dict(os.environ, RL_SUITE_CPU_LOG=str(log))
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(tmp / "site"), os.environ.get("PYTHONPATH")) if p
        )
        cmd = [sys.executable, "-m", "pytest", "-q", f"--junitxml={junit_path}", *pytest_args]
        cpu_before = os.times()
        start = time.perf_counter()
        code = subprocess.run(cmd, cwd=ROOT, env=env).returncode
        wall = time.perf_counter() - start
        cpu_after = os.times()
        junit = read_junit(junit_path) if junit_path.exists() else {}
        procs = read_processes(log)

    reaped = (cpu_after.children_user - cpu_before.children_user) + (
        cpu_after.children_system - cpu_before.children_system
    )
    rows = summarise(junit, procs)
    by_tests = [r for r in rows if r[0] != "-"]
    seen_cpu = sum(float(r[4]) for r in by_tests)
    killed = sum(int(r[5]) for r in by_tests)
    lines = [
        "# The default suite's time: test files and the interpreters they start",
        "",
        f"`python benchmarks/suite_cpu.py -- {' '.join(pytest_args)}`; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"pytest exit code {code}.",
        "",
        f"- Wall time: {wall:.0f} s. CPU time of the processes pytest's process waited for "
        f"(its workers and what they reaped): {reaped:.0f} s.",
        f"- Interpreters started by the tests and seen: "
        f"{sum(int(r[3]) + int(r[5]) for r in by_tests)}; the CPU time of those that exited: "
        f"{seen_cpu:.0f} s; {killed} wrote no exit record.",
        f"- Test time summed over test cases (setup and teardown included): "
        f"{sum(s for _, s in junit.values()):.0f} s over {len(junit)} files.",
        "",
    ]
    lines += markdown_table(
        ["test file", "tests", "seconds", "interpreters exited", "their CPU s", "no exit record"],
        [*by_tests[: args.rows], *[r for r in rows if r[0] == "-"]],
    )
    write_report(lines, args.out)
    sys.exit(code)


if __name__ == "__main__":
    main()
