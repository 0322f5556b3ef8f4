"""The row gather of a CPU TensorDict storage: every leaf read in one compiled call."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rl.data.replay_buffers._cpp import RowGather

_from_numpy = torch.from_numpy
_new_unsafe = TensorDict._new_unsafe


def _td_direct(source: dict, batch_size: torch.Size, device: Any) -> TensorDict:
    """``TensorDict._new_unsafe(source, batch_size, device, nested=False)`` in eager mode,
    without its generic argument handling (``source`` holds tensors and TensorDicts of
    that batch size; ``device`` is a ``torch.device`` or ``None``)."""
    td = _object_new(TensorDict)
    td._device = device
    td._tensordict = _StringOnlyDict(source)
    td._batch_size = batch_size
    td._td_dim_names = None
    return td


def _td_reference(source: dict, batch_size: torch.Size, device: Any) -> TensorDict:
    return _new_unsafe(source, batch_size=batch_size, device=device, nested=False)


def _direct_matches() -> bool:
    """Whether :func:`_td_direct` builds what ``_new_unsafe`` builds in this tensordict."""
    try:
        source = {"a": torch.zeros(2, 1)}
        size = torch.Size((2,))
        for device in (None, torch.device("cpu")):
            want = _td_reference(dict(source), size, device)
            got = _td_direct(dict(source), size, device)
            if (
                want.__dict__.keys() != got.__dict__.keys()
                or type(want._tensordict) is not type(got._tensordict)
                or want.device != got.device
                or want.batch_size != got.batch_size
                or want.names != got.names
                or want["a"] is not got["a"]
            ):
                return False
        return True
    except Exception:  # any change of tensordict's internals: use its own constructor
        return False


_object_new = object.__new__
try:
    from tensordict._td import _StringOnlyDict
except ImportError:  # pragma: no cover - another tensordict layout
    _StringOnlyDict = None
# the batch of a replay buffer is built at every sample: skip the generic path of
# _new_unsafe where this tensordict's objects are known to match it
_make_td = _td_direct if _StringOnlyDict is not None and _direct_matches() else _td_reference


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

    def build(self, arrays: list, batch_size: torch.Size, extra: dict | None) -> TensorDict:
        source = dict(zip(self.keys, map(_from_numpy, arrays[self.start : self.stop])))
        if extra:
            source.update(extra)
        for key, child in self.children:
            source[key] = child.build(arrays, batch_size, None)
        return _make_td(source, batch_size, self.device)


class RowPlan:
    """Gathers a batch of items of a CPU TensorDict storage with one
    :class:`rl.cpp.RowGather` call and builds the batch without validation.

    The leaves of every nesting level are tables of one :class:`~rl.cpp.RowGather`
    (read in place); the batch's TensorDict is rebuilt level by level without
    validation (the structure is the storage's own, already checked on write). Root
    leaves named in ``skip`` are not read: the caller adds them (the sampled
    ``"index"``, the importance weights).

    Args:
        plan: the storage's ``_GatherPlan`` (every leaf with a numpy view).
        skip: root keys that are not gathered.

    Raises:
        ValueError: a leaf is not C-contiguous (the rows are copied as blocks of bytes).
    """

    __slots__ = ("gather", "root", "specs")

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
        # (row shape, dtype) of every table: the shapes of a batch's outputs
        self.specs = [(array.shape[1:], array.dtype) for array in tables]

    def build(self, arrays: list[np.ndarray], batch_size: torch.Size, extra: dict) -> TensorDict:
        """The batch TensorDict over gathered ``arrays``, with ``extra`` at its root."""
        return self.root.build(arrays, batch_size, extra)
