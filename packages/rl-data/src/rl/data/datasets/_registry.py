"""The dataset registry: ``load_dataset("<source>:<dataset-id>")`` and ``register_dataset``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rl.data.datasets._dataset import BaseDatasetExperienceReplay

DatasetFactory = Callable[..., BaseDatasetExperienceReplay]

# source prefix -> a factory, or a "module:attribute" string imported on first use
_DATASET_REGISTRY: dict[str, DatasetFactory | str] = {}


def _normalize_prefix(prefix: str) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"a dataset source prefix is a string, got {type(prefix).__name__}")
    normalized = prefix.strip().lower()
    if not normalized or ":" in normalized:
        raise ValueError(
            f"a dataset source prefix is a non-empty string without ':', got {prefix!r}"
        )
    return normalized


def _check_import_string(target: str) -> None:
    module, _, attribute = target.partition(":")
    if not module or not attribute:
        raise ValueError(
            f"a dataset factory given as a string is 'module:attribute', got {target!r}"
        )


def register_dataset(prefix: str, dataset: DatasetFactory | str, *, replace: bool = False) -> None:
    """Makes ``load_dataset("<prefix>:<dataset-id>", **kwargs)`` call ``dataset``.

    The factory is called as ``dataset(dataset_id, **kwargs)``. Prefixes are
    case-insensitive.

    Args:
        prefix: the source name written before the ``":"`` (no ``":"`` in it).
        dataset: a callable (a dataset class or a function), or an import string
            ``"module:attribute"`` resolved when the prefix is first used.
        replace: overwrite an existing registration of ``prefix``.

    Raises:
        KeyError: ``prefix`` is registered already and ``replace`` is ``False``.
        ValueError: an empty prefix or one with ``":"``; a string that is not
            ``"module:attribute"``.
        TypeError: ``dataset`` is neither callable nor a string.

    Examples:
        >>> from rl.data.datasets import load_dataset, register_dataset
        >>> class ToyDataset:
        ...     def __init__(self, dataset_id, **kwargs):
        ...         self.dataset_id, self.kwargs = dataset_id, kwargs
        >>> register_dataset("toy", ToyDataset, replace=True)
        >>> toy = load_dataset("toy:example-v0", batch_size=8)
        >>> toy.dataset_id, toy.kwargs
        ('example-v0', {'batch_size': 8})
    """
    prefix = _normalize_prefix(prefix)
    if isinstance(dataset, str):
        _check_import_string(dataset)
    elif not callable(dataset):
        raise TypeError(
            "dataset is a callable dataset factory or a 'module:attribute' string, got "
            f"{type(dataset).__name__}"
        )
    if prefix in _DATASET_REGISTRY and not replace:
        raise KeyError(
            f"the dataset source {prefix!r} is registered already; pass replace=True to "
            "overwrite it"
        )
    _DATASET_REGISTRY[prefix] = dataset


def _factory(prefix: str) -> DatasetFactory:
    prefix = _normalize_prefix(prefix)
    if prefix not in _DATASET_REGISTRY:
        raise ValueError(
            f"Unknown dataset source {prefix!r}; registered prefixes: "
            f"{sorted(_DATASET_REGISTRY)} (add one with register_dataset)"
        )
    dataset = _DATASET_REGISTRY[prefix]
    if isinstance(dataset, str):
        module, _, attribute = dataset.partition(":")
        dataset = getattr(importlib.import_module(module), attribute)
    return dataset


def load_dataset(dataset_id: str, **kwargs: Any) -> BaseDatasetExperienceReplay:
    """Builds the dataset named by ``"<source>:<dataset-id>"``.

    The source prefix picks the factory registered with :func:`register_dataset`, which
    is called as ``factory(dataset_id, **kwargs)``. ``"minari"``
    (:class:`MinariExperienceReplay`) and ``"lerobot"`` (:class:`LeRobotExperienceReplay`,
    local folders only) are built in; TorchRL's other sources (``"atari"``,
    ``"atari_dqn"``, ``"d4rl"``, ``"gen_dgrl"``, ``"openml"``,
    ``"openx"``, ``"roboset"``, ``"vd4rl"``) are registered too but raise
    ``NotImplementedError``: those datasets exist only as downloads, which rl does not
    implement. Register a loader of your own under their prefix with ``replace=True``.

    Args:
        dataset_id: ``"<source>:<dataset-id>"``, e.g. ``"minari:mujoco/hopper/expert-v0"``.
        **kwargs: passed to the dataset's constructor (``batch_size``, ``root``, ...).

    Returns:
        the dataset the factory builds.

    Raises:
        ValueError: ``dataset_id`` has no ``"<source>:"`` prefix, or an unknown one.
        NotImplementedError: a TorchRL source that rl does not provide.

    Examples:
        >>> from rl.data.datasets import load_dataset
        >>> load_dataset("hopper-medium-v2")
        Traceback (most recent call last):
        ...
        ValueError: dataset_id must be prefixed with a source ('<source>:<dataset-id>', e.g. 'minari:...'), got 'hopper-medium-v2'; registered prefixes: [...]
    """
    if not isinstance(dataset_id, str) or ":" not in dataset_id:
        raise ValueError(
            "dataset_id must be prefixed with a source ('<source>:<dataset-id>', e.g. "
            f"'minari:...'), got {dataset_id!r}; registered prefixes: "
            f"{sorted(_DATASET_REGISTRY)}"
        )
    prefix, name = dataset_id.split(":", 1)
    return _factory(prefix)(name, **kwargs)


class _DownloadOnlySource:
    """The factory of a TorchRL dataset source whose data only comes as a download."""

    def __init__(self, prefix: str, torchrl_name: str) -> None:
        self.prefix = prefix
        self.torchrl_name = torchrl_name

    def __call__(self, dataset_id: str, **kwargs: Any) -> BaseDatasetExperienceReplay:
        raise NotImplementedError(
            f"{self.prefix!r} dataset {dataset_id!r}: TorchRL's {self.torchrl_name} "
            "downloads its data, and rl does not provide it (downloads are unavailable); "
            f"load the data yourself, or register a loader with register_dataset("
            f"{self.prefix!r}, factory, replace=True)"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.prefix!r}, {self.torchrl_name!r})"


register_dataset("minari", "rl.data.datasets._minari:MinariExperienceReplay")
register_dataset("lerobot", "rl.data.datasets._lerobot_replay:LeRobotExperienceReplay")
for _prefix, _name in (
    ("atari", "AtariDQNExperienceReplay"),
    ("atari_dqn", "AtariDQNExperienceReplay"),
    ("d4rl", "D4RLExperienceReplay"),
    ("gen_dgrl", "GenDGRLExperienceReplay"),
    ("openml", "OpenMLExperienceReplay"),
    ("openx", "OpenXExperienceReplay"),
    ("roboset", "RobosetExperienceReplay"),
    ("vd4rl", "VD4RLExperienceReplay"),
):
    register_dataset(_prefix, _DownloadOnlySource(_prefix, _name))
del _prefix, _name
