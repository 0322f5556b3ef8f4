"""Sibling losses share helper modules; no loss imports another loss.

Reads the sources of ``rl.objectives`` (no import needed to find what a module imports):
every module that exports a loss may import the standard library, torch, tensordict,
``rl.core``, ``rl.modules``, ``rl.objectives.value`` and the helper modules of
``rl.objectives`` (the modules that export no loss), never another loss module.
"""

import ast
import inspect
import sys
from pathlib import Path

import pytest

import rl.objectives
from rl.objectives import LossModule

SRC = Path(rl.objectives.__file__).parent
ALLOWED_ROOTS = {"torch", "tensordict", "rl.core", "rl.modules", "rl.objectives.value"}


def _module_name(path: Path) -> str:
    return path.stem


def _loss_modules() -> set[str]:
    """Private modules of rl.objectives that define an exported loss class."""
    names = set()
    for name in rl.objectives.__all__:
        obj = getattr(rl.objectives, name)
        if inspect.isclass(obj) and issubclass(obj, LossModule) and obj is not LossModule:
            names.add(obj.__module__.rsplit(".", 1)[-1])
    return names


LOSS_MODULES = sorted(_loss_modules())


def _imports(path: Path) -> list[tuple[str, int]]:
    """``(module, level)`` of every import statement of ``path``, relative ones unresolved."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.module or "", node.level))
    return out


def _allowed(module: str, level: int, losses: set[str]) -> bool:
    if level == 1:  # from ._x import ... / from .value import ...
        first = module.split(".")[0]
        return first == "value" or (first.startswith("_") and first not in losses)
    if level > 1:
        return False
    root = module.split(".")[0]
    if root == "__future__" or root in sys.stdlib_module_names:
        return True
    if module.startswith("rl.objectives._"):
        return module.split(".")[2] not in losses
    return any(module == r or module.startswith(r + ".") for r in ALLOWED_ROOTS)


class TestLossImports:
    def test_the_losses_are_found(self):
        assert {"_sac", "_dqn", "_ppo", "_a2c", "_cql", "_tqc", "_redq"} <= set(LOSS_MODULES)
        assert "_loss" not in LOSS_MODULES

    @pytest.mark.parametrize("name", LOSS_MODULES)
    def test_a_loss_imports_no_other_loss(self, name):
        losses = set(LOSS_MODULES)
        bad = [
            ("." * level + module)
            for module, level in _imports(SRC / f"{name}.py")
            if not _allowed(module, level, losses)
        ]
        assert not bad, f"{name}.py imports {bad}; losses share helper modules instead"

    def test_helpers_import_no_loss(self):
        losses = set(LOSS_MODULES)
        for path in sorted(SRC.glob("_*.py")):
            if path.stem in losses or path.stem == "__init__":
                continue
            siblings = [m for m, level in _imports(path) if level == 1 and m in losses]
            assert not siblings, f"helper {path.name} imports the losses {siblings}"

    def test_the_base_class_lives_in_its_role_file(self):
        assert LossModule.__module__ == "rl.objectives._loss"
        assert not (SRC / "_common.py").exists()
