"""Each package installs alone, with only its declared dependencies, and works.

The wheels of every workspace member are built once; then, for each package, a fresh
virtual environment receives that wheel plus the wheels of the siblings it declares
(transitively), and everything else from the index, pinned to the versions in uv.lock.
A short script then imports the package, uses it, and checks that the siblings it does not
declare are absent.
"""

from __future__ import annotations

import email.parser
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["rl-core", "rl-cpp", "rl-envs", "rl-data", "rl-collectors", "rl-objectives"]

# A small real use of each package, run inside its own environment.
SMOKE = {
    "rl-core": """
import torch
from rl.core import Bounded, Composite, Unbounded
spec = Composite(obs=Bounded(-1.0, 1.0, shape=(3,)), r=Unbounded(shape=(1,)))
td = spec.rand()
assert spec.is_in(td) and td["obs"].shape == (3,)
# the trainer helpers import without their extra and name it when a builder runs
from rl.core.trainers.helpers import make_replay_buffer
try:
    make_replay_buffer("cpu", None)
    raise AssertionError("make_replay_buffer ran without rl-data")
except ImportError as err:
    assert 'pip install "rl-core[helpers]"' in str(err), err
""",
    "rl-cpp": """
import numpy as np
from rl.cpp import SumSegmentTree
t = SumSegmentTree(8, dtype="float64")
t.update(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
assert t.total() == 10.0
assert t.scan_lower_bound(np.array([0.5, 9.5])).tolist() == [0, 3]
""",
    "rl-envs": """
from rl.envs import GymEnv
env = GymEnv("CartPole-v1")
td = env.rollout(5, break_when_any_done=False)
assert td.batch_size == (5,) and ("next", "reward") in td.keys(True)
""",
    "rl-data": """
import torch
from tensordict import TensorDict
from rl.data import LazyTensorStorage, TensorDictReplayBuffer
rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)
rb.extend(TensorDict({"x": torch.arange(10)}, batch_size=[10]))
assert len(rb) == 10 and rb.sample()["x"].shape == (4,)
# the offline datasets import without minari (an extra) and name it when one is converted
import importlib.util, tempfile
from rl.data.datasets import MinariExperienceReplay, load_dataset
assert importlib.util.find_spec("minari") is None
with tempfile.TemporaryDirectory() as root:
    try:
        MinariExperienceReplay("a/b-v0", batch_size=2, root=root, load_from_local_minari=True)
        raise AssertionError("MinariExperienceReplay converted a dataset without minari")
    except ImportError as err:
        assert 'pip install "rl-data[minari]"' in str(err), err
""",
    "rl-collectors": """
import rl.collectors, rl.envs
assert rl.collectors.__version__
""",
    "rl-objectives": """
import rl.modules, rl.objectives
assert rl.objectives.__version__ and rl.modules.__version__
""",
}


def _requires(wheel: Path) -> list[str]:
    """Names of the rl-* siblings a wheel declares (unconditional requirements only)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        msg = email.parser.Parser().parsestr(zf.read(meta).decode())
    names = []
    for req in msg.get_all("Requires-Dist") or []:
        if ";" in req:
            continue
        name = re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower().replace("_", "-")
        if name.startswith("rl-"):
            names.append(name)
    return names


@pytest.fixture(scope="session")
def uv() -> str:
    exe = shutil.which("uv")
    if exe is None:
        pytest.fail("uv is not on PATH; the packaging test needs it (pip install uv)")
    return exe


@pytest.fixture(scope="session")
def wheels(tmp_path_factory, uv) -> dict[str, Path]:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [uv, "build", "--all-packages", "--wheel", "--out-dir", str(dist), "--quiet"],
        cwd=ROOT,
        check=True,
    )
    found = {}
    for wheel in dist.glob("*.whl"):
        name = wheel.name.split("-")[0].replace("_", "-")
        found[name] = wheel
    missing = set(PACKAGES) - set(found)
    assert not missing, f"wheels not built for {sorted(missing)}"
    return found


@pytest.fixture(scope="session")
def constraints(tmp_path_factory, uv) -> Path:
    path = tmp_path_factory.mktemp("constraints") / "constraints.txt"
    out = subprocess.run(
        [
            uv,
            "export",
            "--frozen",
            "--no-hashes",
            "--all-packages",
            "--no-emit-workspace",
            "--no-header",
            "--no-annotate",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path.write_text(out)
    return path


def _closure(name: str, wheels: dict[str, Path]) -> list[str]:
    todo, seen = [name], []
    while todo:
        cur = todo.pop()
        if cur in seen:
            continue
        seen.append(cur)
        todo.extend(_requires(wheels[cur]))
    return seen


def test_wheels_are_small(wheels):
    # the pure-Python wheels ship their sources and nothing else (no data, no assets: a
    # stray file shows here by name); their size follows the code (rl-envs, the largest,
    # holds every simulator wrapper: 519 kB at the 2026-12-01 session's end)
    for name, wheel in wheels.items():
        limit = 2_000_000 if name == "rl-cpp" else 750_000
        assert wheel.stat().st_size < limit, f"{wheel.name} is {wheel.stat().st_size} bytes"
        if name == "rl-cpp":
            continue
        with zipfile.ZipFile(wheel) as archive:
            other = [
                member
                for member in archive.namelist()
                if ".dist-info/" not in member and not member.endswith((".py", "/py.typed"))
            ]
        assert not other, f"{wheel.name} ships files that are not sources: {other}"


def test_no_namespace_init(wheels):
    for wheel in wheels.values():
        with zipfile.ZipFile(wheel) as zf:
            assert "rl/__init__.py" not in zf.namelist(), f"{wheel.name} owns rl/__init__.py"


@pytest.fixture(scope="session")
def venv_place(tmp_path_factory) -> tuple[Path, Path]:
    """Where each package's throwaway environment goes (one path, emptied for each
    package, so that every environment's files have the same paths), and a bytecode cache
    beside it that the smoke scripts share: the third-party modules they import (torch,
    tensordict, numpy) are installed from uv's cache with the same contents and times
    each time, so they are compiled once, not once per package (about 12 s each here)."""
    base = tmp_path_factory.mktemp("alone")
    return base / "venv", base / "pycache"


@pytest.mark.parametrize("package", PACKAGES)
def test_installs_alone(package, wheels, constraints, uv, venv_place, tmp_path):
    venv, pycache = venv_place
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    needed = _closure(package, wheels)
    # run outside the workspace: its `compile-bytecode` setting would byte-compile torch in
    # every throwaway venv (20-40 s each) for nothing
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            str(python),
            "-c",
            str(constraints),
            *[str(wheels[n]) for n in needed],
        ],
        check=True,
        cwd=tmp_path,
    )
    absent = [p for p in PACKAGES if p not in needed]
    check_absent = "\n".join(
        f"import importlib.util as u\nassert u.find_spec('rl.{mod}') is None, 'rl.{mod} leaked in'"
        for p in absent
        for mod in _modules(p)
    )
    script = SMOKE[package] + "\n" + check_absent + "\nprint('ok')\n"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    res = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("ok")


def _modules(package: str) -> list[str]:
    if package == "rl-objectives":
        return ["modules", "objectives"]
    return [package.removeprefix("rl-")]
