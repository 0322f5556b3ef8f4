"""Local datasets for the chat environments: rows read from memory or a file, never downloaded."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from rl.core.datafiles import SUFFIXES as _SUFFIXES
from rl.core.datafiles import read_rows

__all__ = ["load_local_dataset", "make_dataloader"]


def _pick_split(splits: Mapping[str, Any], split: str | None, where: str) -> Any:
    if split is None:
        split = "train" if "train" in splits else None
    if split is None:
        if len(splits) == 1:
            return next(iter(splits.values()))
        raise ValueError(f"{where} has splits {sorted(splits)}: pass split=")
    if split not in splits:
        raise ValueError(f"split={split!r} is not in {where}, which has {sorted(splits)}")
    return splits[split]


def load_local_dataset(
    dataset: Any, *, name: str | None = None, split: str | None = None
) -> Sequence[dict]:
    """Rows of a dataset that is already on this machine.

    Args:
        dataset: a list of dicts; an object with ``__len__`` / ``__getitem__`` returning
            dicts (an in-memory ``datasets.Dataset``, a torch ``Dataset``); a dict of
            splits (``{"train": rows, "test": rows}``, a ``datasets.DatasetDict``); or a
            path (``str`` / ``Path``) to a ``.json``, ``.jsonl``, ``.csv`` or ``.parquet``
            file, or to a folder holding ``<split>.<ext>`` files (under ``<name>/``
            when ``name`` is given).
        name (str, optional): the subset folder of a dataset folder.
        split (str, optional): the split; defaults to ``"train"`` where there is one.

    Returns:
        the rows, indexable.

    Raises:
        ValueError: ``dataset`` is a string that is not an existing path (a Hub name such
            as ``"openai/gsm8k"``: nothing is downloaded at run time), or a folder without
            the requested split.
    """
    if isinstance(dataset, (str, Path)):
        path = Path(dataset).expanduser()
        if not path.exists():
            raise ValueError(
                f"dataset={str(dataset)!r} is not a local file or folder; rl does not download "
                "datasets at run time: download it once (e.g. datasets.load_dataset(...)."
                "to_json(path)) and pass the path, the loaded dataset, or a list of dicts"
            )
        if path.is_dir():
            folder = path / name if name is not None else path
            files = {p.stem: p for p in sorted(folder.iterdir()) if p.suffix.lower() in _SUFFIXES}
            if not files:
                raise ValueError(f"folder {folder} holds no {_SUFFIXES} file")
            return read_rows(_pick_split(files, split, f"folder {folder}"))
        return read_rows(path)
    if isinstance(dataset, Mapping):
        return load_local_dataset(_pick_split(dataset, split, "the dataset"), split=None)
    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        return dataset
    raise TypeError(
        f"dataset must be a list of dicts, an indexable dataset or a local path, got "
        f"{type(dataset).__name__}"
    )


def make_dataloader(
    dataset: Any,
    *,
    name: str | None = None,
    split: str | None = None,
    seed: int | None = None,
    batch_size: int = 1,
    shuffle: bool = True,
    collate_fn: Callable | None = None,
) -> DataLoader:
    """A torch ``DataLoader`` over :func:`load_local_dataset`'s rows, seeded."""
    rows = load_local_dataset(dataset, name=name, split=split)
    if seed is None:
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
    generator = torch.Generator()
    generator.manual_seed(seed)
    return DataLoader(
        rows,
        batch_size=batch_size,
        shuffle=shuffle,
        collate_fn=collate_fn,
        generator=generator,
    )
