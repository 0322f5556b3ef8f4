"""Reading a script's config and importing the sibling packages the builders use.

The helpers take any config object with attributes (a dataclass, an
``argparse.Namespace``, an OmegaConf ``DictConfig``); a missing field is reported with
the field, the builder that needed it and the config dataclass that declares it.
The builders put together objects of rl-envs, rl-data, rl-collectors and rl-objectives,
which rl-core does not depend on: they are imported when a builder runs, and a missing
one is reported with the extra that installs it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import torch

#: the wheel that ships each import package the builders use
_WHEEL = {
    "rl.envs": "rl-envs",
    "rl.data": "rl-data",
    "rl.collectors": "rl-collectors",
    "rl.modules": "rl-objectives",
    "rl.objectives": "rl-objectives",
}
_INSTALLED = {name: importlib.util.find_spec(name) is not None for name in _WHEEL}


def require(module: str, needed_by: str) -> ModuleType:
    """The rl package ``module`` (``"rl.envs"``, ...), imported.

    Raises:
        ImportError: the wheel that ships it is not installed; the message names the
            ``rl-core[helpers]`` extra.
    """
    if not _INSTALLED[module]:
        raise ImportError(
            f"{needed_by} needs {module} ({_WHEEL[module]}), which is not installed: "
            'pip install "rl-core[helpers]"'
        )
    return importlib.import_module(module)


def field(cfg: Any, name: str, needed_by: str, declared_in: str) -> Any:
    """``cfg.<name>``.

    Raises:
        AttributeError: ``cfg`` has no field ``name``; the message names the builder and
            the config dataclass that declares the field.
    """
    try:
        return getattr(cfg, name)
    except (AttributeError, KeyError):  # OmegaConf raises either, depending on its mode
        raise AttributeError(
            f"{needed_by} reads cfg.{name}, which {type(cfg).__name__} does not have "
            f"(it is a field of {declared_in})"
        ) from None


def collector_device(cfg: Any, needed_by: str) -> torch.device | str:
    """The device of ``cfg.collector_device``: itself, or the first of a sequence.

    Raises:
        ValueError: it is neither a device nor a non-empty sequence of devices.
    """
    device = field(cfg, "collector_device", needed_by, "OnPolicyCollectorConfig")
    if isinstance(device, (str, torch.device)):
        return device
    if isinstance(device, Sequence) and not isinstance(device, str) and len(device) > 0:
        return device[0]
    raise ValueError(
        f"cfg.collector_device must be a device or a non-empty sequence of devices, got {device!r}"
    )
