"""``get_available_libraries``: which simulator back-ends of rl-envs are installed."""

from __future__ import annotations

import importlib.util

__all__ = ["get_available_libraries"]

#: back-end name -> (the module it imports, the rl-envs extra that installs it)
_LIBRARIES = {
    "gymnasium": ("gymnasium", None),
    "gym": ("gym", None),
    "gym[atari]": ("ale_py", "atari"),
    "mujoco": ("mujoco", "mujoco"),
    "dm_control": ("dm_control", "dm_control"),
    "envpool": ("envpool", "envpool"),
    "pettingzoo": ("pettingzoo", "pettingzoo"),
    "vmas": ("vmas", "vmas"),
    "open_spiel": ("pyspiel", "open_spiel"),
    "mo_gymnasium": ("mo_gymnasium", "mo_gymnasium"),
    "lbforaging": ("lbforaging", "lbforaging"),
    "jumanji": ("jumanji", "jumanji"),
    "brax": ("brax", "brax"),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-installed package
        return False


def get_available_libraries() -> dict[str, bool]:
    """Which simulator libraries rl-envs wraps, and whether each is installed.

    TorchRL returns its list of supported libraries with, for some, whether they are
    installed; here every entry is a library an ``rl.envs`` wrapper uses, with ``True``
    when its module can be imported (found, not imported: the check is cheap). The
    ``rl-envs`` extra that installs each one: ``pip install "rl-envs[<extra>]"`` with
    the extra of the same name (``atari`` for ``gym[atari]``; gymnasium is a
    dependency, gym the legacy package).

    Examples:
        >>> from rl.envs import get_available_libraries
        >>> get_available_libraries()["gymnasium"]
        True
    """
    return {name: _installed(module) for name, (module, _) in _LIBRARIES.items()}
