"""Finding PettingZoo tasks by name without importing every family of environments.

``pettingzoo.utils.all_modules`` imports every family (Atari, MPE, ...) and fails as soon
as one of them lacks its dependency (PettingZoo >= 1.25 moved MPE to the ``mpe2``
package), so tasks are located by module name here and imported one at a time.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from types import ModuleType

__all__ = ["FAMILIES", "available_tasks", "load_task"]

FAMILIES = ("classic", "butterfly", "sisl", "atari", "mpe")
_TASK = re.compile(r"^[a-z0-9_]+_v\d+$")


def _package_tasks(package: str) -> list[str]:
    """The task modules (``<name>_v<int>``) of a package, found without importing them."""
    try:
        spec = importlib.util.find_spec(package)
    except ImportError:
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted(
        info.name
        for info in pkgutil.iter_modules(spec.submodule_search_locations)
        if _TASK.match(info.name)
    )


def available_tasks() -> list[str]:
    """The PettingZoo task names (``"tictactoe_v3"``...), whether their dependencies are
    installed or not (MPE's tasks when the ``mpe2`` package is installed)."""
    tasks = []
    for family in FAMILIES:
        tasks += _package_tasks(f"pettingzoo.{family}")
    tasks += _package_tasks("mpe2")
    return sorted(set(tasks))


def _import(name: str) -> ModuleType | None:
    """The module ``name``, ``None`` when it does not exist; ImportError for a missing dependency."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is not None and name.startswith(err.name):
            return None  # the task (or its family) is not there
        raise ImportError(
            f"PettingZoo task module {name!r} needs {err.name!r}, which is not installed "
            f"(install PettingZoo's extra for this family, e.g. pip install "
            f'"pettingzoo[{name.split(".")[1]}]"): {err}'
        ) from err


def load_task(task: str) -> ModuleType:
    """The module of a PettingZoo task, from ``"<family>/<task>"`` or ``"<task>"``.

    Raises:
        ValueError: no family has that task.
        ImportError: the task exists but a library it needs is not installed.
    """
    family, _, name = task.rpartition("/")
    families = (family,) if family else FAMILIES
    for fam in families:
        if fam in ("mpe", "mpe2"):
            module = _import(f"mpe2.{name}") if _package_tasks("mpe2") else None
            if module is None and name in _package_tasks("pettingzoo.mpe"):
                module = _import(f"pettingzoo.mpe.{name}")
            if module is None and name.startswith("simple") and not _package_tasks("mpe2"):
                raise ImportError(
                    f"PettingZoo task {task!r}: MPE moved to the mpe2 package in PettingZoo "
                    "1.25, pip install mpe2"
                )
        else:
            module = _import(f"pettingzoo.{fam}.{name}")
        if module is not None:
            return module
    raise ValueError(
        f"unknown PettingZoo task {task!r}: expected a name such as 'tictactoe_v3' or "
        f"'classic/tictactoe_v3' (available: {available_tasks()})"
    )
