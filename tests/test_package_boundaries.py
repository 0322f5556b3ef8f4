"""Packages meet through public contracts: no package imports another's private module.

Every Python file of every package (``packages/*/src`` and ``packages/*/tests``) is read
with :mod:`ast`; a *crossing* is a reference from one wheel to a private part
(a ``_name`` module or a ``_name`` attribute) of another wheel's import package:

- ``from rl.core._ray import x`` / ``import rl.envs._batched._pool``;
- ``from rl.envs._batched import _pool`` / ``from rl.envs import _helper``;
- ``import rl.cpp`` then ``rl.cpp._C`` (an attribute read through an imported module);
- a string naming one, as ``importlib.import_module("rl.core._ray")`` or
  ``monkeypatch.setattr("rl.envs._gym.X", ...)`` take it.

A package using its own private modules is fine, and so is ``rl.modules`` using
``rl.objectives._x`` (one wheel, rl-objectives, ships both). Dunder names
(``__version__``) are public.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: import package (``rl.<name>``) -> the wheel that ships it
WHEEL_OF = {
    "core": "rl-core",
    "envs": "rl-envs",
    "data": "rl-data",
    "collectors": "rl-collectors",
    "modules": "rl-objectives",
    "objectives": "rl-objectives",
    "cpp": "rl-cpp",
}

_DOTTED = re.compile(r"\brl\.(?:[A-Za-z_]\w*)(?:\.[A-Za-z_]\w*)+")


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _foreign_private(dotted: str, wheel: str) -> bool:
    """Whether ``dotted`` (``rl.core._ray.x``) names a private part of a wheel other than
    ``wheel``."""
    parts = dotted.split(".")
    if len(parts) < 3 or parts[0] != "rl" or parts[1] not in WHEEL_OF:
        return False
    if WHEEL_OF[parts[1]] == wheel:
        return False
    return any(_private(part) for part in parts[2:])


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``a.b.c`` for an attribute chain whose root name is bound to an rl module."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(names)])


def crossings_in(source: str, wheel: str, where: str = "<source>") -> list[str]:
    """The crossings of one file of ``wheel``, as ``'where:line: what'``."""
    tree = ast.parse(source)
    found: list[str] = []
    aliases: dict[str, str] = {}  # local name -> the rl module (or object) it is bound to

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{where}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _foreign_private(alias.name, wheel):
                    report(node, f"import {alias.name}")
                if alias.name.startswith("rl."):
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        aliases["rl"] = "rl"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _foreign_private(full, wheel):
                    report(node, f"from {node.module} import {alias.name}")
                if node.module == "rl" or node.module.startswith("rl."):
                    aliases[alias.asname or alias.name] = full
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for match in _DOTTED.finditer(node.value):
                if _foreign_private(match.group(0), wheel):
                    report(node, f"string {match.group(0)!r}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            dotted = _dotted(node, aliases)
            if dotted is not None and _foreign_private(dotted, wheel):
                report(node, f"attribute {dotted}")
    return sorted(set(found), key=lambda s: (s.split(":")[0], int(s.split(":")[1]), s))


def package_files() -> list[tuple[Path, str]]:
    """Every Python file of every package, with the wheel it belongs to."""
    files = []
    for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")):
        package = pyproject.parent
        wheel = package.name
        for folder in ("src", "tests"):
            for path in sorted((package / folder).rglob("*.py")):
                if not any(part.startswith(".") or part == "build" for part in path.parts):
                    files.append((path, wheel))
    return files


def test_no_package_imports_another_packages_private_module():
    files = package_files()
    assert {wheel for _, wheel in files} >= set(WHEEL_OF.values())  # the scan sees them all
    found = []
    for path, wheel in files:
        found += crossings_in(path.read_text(), wheel, str(path.relative_to(ROOT)))
    assert not found, "private modules used across packages:\n" + "\n".join(found)


# ------------------------------------------------------------------ the scanner itself
class TestScanner:
    @staticmethod
    def scan(code: str, wheel: str = "rl-collectors") -> list[str]:
        return [line.split(": ", 1)[1] for line in crossings_in(textwrap.dedent(code), wheel)]

    @pytest.mark.parametrize(
        "code, what",
        [
            ("from rl.core._ray import import_ray", "from rl.core._ray import import_ray"),
            ("import rl.envs._batched._pool", "import rl.envs._batched._pool"),
            ("import rl.envs._batched._pool as p", "import rl.envs._batched._pool"),
            ("from rl.envs._batched import _pool", "from rl.envs._batched import _pool"),
            ("from rl.envs import _helper", "from rl.envs import _helper"),
            ("from rl.envs.transforms import _env", "from rl.envs.transforms import _env"),
            ("import rl.cpp\nrl.cpp._C.gae()", "attribute rl.cpp._C"),
            ("import rl.cpp as c\nc._C", "attribute rl.cpp._C"),
            ("from rl import envs\nenvs._batched", "attribute rl.envs._batched"),
            ("from rl.envs import batched\nbatched._pool", "attribute rl.envs.batched._pool"),
            ("importlib.import_module('rl.core._ray')", "string 'rl.core._ray'"),
            ("m.setattr('rl.envs._gym.step', f)", "string 'rl.envs._gym.step'"),
        ],
    )
    def test_finds_a_crossing(self, code, what):
        assert self.scan(code) == [what]

    @pytest.mark.parametrize(
        "code, wheel",
        [
            ("from rl.collectors._multi import MultiSyncCollector", "rl-collectors"),
            ("from rl.objectives.value._scan import use_cpp", "rl-objectives"),  # from rl.modules
            ("from rl.modules._utils import x", "rl-objectives"),
            ("from ._pool import WorkerPool", "rl-envs"),
            ("from rl.core.ray_runtime import import_ray", "rl-data"),
            ("from rl.cpp import __version__", "rl-data"),
            ("import rl.envs\nrl.envs.__version__", "rl-data"),
            ("from ray._private import ray_constants", "rl-collectors"),
            ("self._ray = import_ray('RayCollector', 'rl-collectors[ray]')", "rl-collectors"),
            ("'see rl.envs.ParallelEnv'", "rl-collectors"),
        ],
    )
    def test_allows(self, code, wheel):
        assert self.scan(code, wheel) == []

    def test_reports_the_line(self):
        (line,) = crossings_in("import os\n\nfrom rl.core._ray import x\n", "rl-data", "f.py")
        assert line == "f.py:3: from rl.core._ray import x"
