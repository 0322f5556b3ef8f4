"""The row gather of a CPU TensorDict storage: every leaf read in one compiled call."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rl.cpp import RowGather

_from_numpy = torch.from_numpy
_new_unsafe = TensorDict._new_unsafe


class _Level:
    """One nesting level of the stored TensorDict: its leaves' positions among the
    gathered tables, and its sub-TensorDicts."""

    __slots__ = ("keys", "start", "stop", "children", "device")

    def __init__(self, keys: tuple, start: int, children: list, device: Any) -> None:
        self.keys = keys
        self.start = start
        self.stop = start + len(keys)
        self.children = children
        self.device = device

    def build(self, tensors: list, batch_size: torch.Size, extra: dict | None) -> TensorDict:
        source = dict(zip(self.keys, tensors[self.start : self.stop]))
        if extra:
            source.update(extra)
        for key, child in self.children:
            source[key] = child.build(tensors, batch_size, None)
        return _new_unsafe(source, batch_size=batch_size, device=self.device, nested=False)


class RowPlan:
    """Gathers a batch of items of a CPU TensorDict storage with one
    :class:`rl.cpp.RowGather` call and builds the batch without validation.

    The leaves of every nesting level are tables of one :class:`~rl.cpp.RowGather`
    (read in place); the batch's TensorDict is rebuilt level by level with
    ``TensorDict._new_unsafe`` (the structure is the storage's own, already checked on
    write). Root leaves named in ``skip`` are not read: the caller adds them (the
    sampled ``"index"``, the importance weights).

    Args:
        plan: the storage's ``_GatherPlan`` (every leaf with a numpy view).
        skip: root keys that are not gathered.

    Raises:
        ValueError: a leaf is not C-contiguous (the rows are copied as blocks of bytes).
    """

    __slots__ = ("gather", "root")

    def __init__(self, plan: Any, skip: Collection[str] = ()) -> None:
        tables: list[np.ndarray] = []

        def level(p: Any, skip: Collection[str]) -> _Level:
            start = len(tables)
            keys = []
            for key, array in p.arrays:
                if key not in skip:
                    keys.append(key)
                    tables.append(array)
            lvl = _Level(tuple(keys), start, [], p.device)
            lvl.children = [(key, level(child, ())) for key, child in p.children]
            return lvl

        self.root = level(plan, skip)
        self.gather = RowGather(tables)

    def build(self, arrays: list[np.ndarray], batch_size: torch.Size, extra: dict) -> TensorDict:
        """The batch TensorDict over gathered ``arrays``, with ``extra`` at its root."""
        return self.root.build([_from_numpy(a) for a in arrays], batch_size, extra)
