"""Storage base class and the python-list storage."""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rl.data.replay_buffers._utils import (
    Checkpointable,
    KeyMismatchError,
    decode_item,
    encode_item,
)


class Storage(Checkpointable, ABC):
    """A fixed-capacity container that a writer fills and a sampler reads.

    Args:
        max_size: the number of items the storage holds.
        checkpointer: how a buffer's ``dumps``/``loads`` save this storage (an object with
            ``dumps(storage, path)`` and ``loads(storage, path)``, e.g.
            :class:`~rl.data.TensorStorageCheckpointer`); ``None`` (default): the storage's
            ``state_dict`` is saved with the buffer's. A buffer built with its own
            ``checkpointer`` replaces it.
        compilable: kept as ``storage._compilable`` (TorchRL's flag for storages used under
            ``torch.compile``); rl's storages keep no process-shared counters, so they
            compile either way.
    """

    ndim = 1
    _shared = False
    # how many times each dim-0 slot was written, kept by the writers that track it
    # (RoundRobinWriter(track_generations=True)); on the storage, so that every buffer
    # writing to it advances them
    _slot_generations: torch.Tensor | None = None
    # whether ReplayBuffer.update_if_present can patch stored entries in place
    supports_conditional_update = False
    # advances at every change of the stored items (writes, in-place rewrites, empty,
    # loads): what a sampler derives from them (trajectory bounds, groups) holds for one
    # revision, whichever buffer wrote
    _mutation_revision = 0

    def _bump_mutation_revision(self) -> None:
        self._mutation_revision += 1

    checkpointer: Any = None  # or set by the buffer (``ReplayBuffer(checkpointer=...)``)
    _compilable = False

    def __init__(self, max_size: int, checkpointer: Any = None, compilable: bool = False) -> None:
        if isinstance(max_size, bool) or not isinstance(max_size, (int, np.integer)):
            raise TypeError(f"max_size must be an int, got {max_size!r}")
        if max_size <= 0:
            raise ValueError(f"max_size must be positive, got {max_size}")
        self.max_size = int(max_size)
        if checkpointer is not None:
            _check_checkpointer(checkpointer)
            self.checkpointer = checkpointer
        self._compilable = bool(compilable)

    @abstractmethod
    def set(self, cursor: int | slice | torch.Tensor, data: Any) -> None:
        """Writes ``data`` at ``cursor`` (an int writes one item, a slice or tensor a batch)."""

    @abstractmethod
    def get(self, index: int | slice | torch.Tensor) -> Any:
        """Reads the items at ``index``."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def state_dict(self) -> dict[str, Any]: ...

    @abstractmethod
    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...

    @abstractmethod
    def _empty(self) -> None:
        """Forgets every item (keeps the allocation)."""

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    # dimensions (multi-dimensional tensor storages override these)
    def _max_size_along_dim0(self, item: Any = None) -> int:
        return self.max_size

    @property
    def _len_along_dim0(self) -> int:
        return len(self)

    @property
    def shape(self) -> torch.Size:
        return torch.Size((len(self),))

    def _to_storage_index(self, flat: torch.Tensor) -> Any:
        return flat

    def _flat_index(self, index: Any) -> torch.Tensor:
        return torch.as_tensor(index).reshape(-1)

    def __getitem__(self, index: Any) -> Any:
        return self.get(index)

    def __setitem__(self, index: Any, value: Any) -> None:
        self.set(index, value)

    def __iter__(self):
        for i in range(len(self)):
            yield self.get(i)

    def _default_collate(self, data: Any) -> Any:
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_size={self.max_size}, len={len(self)})"


def _check_checkpointer(checkpointer: Any) -> None:
    for name in ("dumps", "loads"):
        if not callable(getattr(checkpointer, name, None)):
            raise TypeError(
                f"checkpointer must have dumps(storage, path) and loads(storage, path), "
                f"{type(checkpointer).__name__} has no {name}"
            )


def _is_batch_index(cursor: Any) -> bool:
    return not isinstance(cursor, (int, np.integer))


class ListStorage(Storage):
    """Stores arbitrary python objects in a list.

    Args:
        max_size: the number of items the storage holds; ``None`` (default, as TorchRL):
            unbounded (``sys.maxsize``).
        compilable: see :class:`Storage`.
        device: where tensors and TensorDicts are moved when written (``None``: left
            where they are).

    Examples:
        >>> from rl.data import ListStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=ListStorage(10), collate_fn=lambda x: x)
        >>> rb.extend(["a", "b"])
        tensor([0, 1])
        >>> sorted(set(rb.sample(8))) <= ["a", "b"]
        True
    """

    def __init__(
        self,
        max_size: int | None = None,
        *,
        compilable: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(sys.maxsize if max_size is None else max_size, compilable=compilable)
        self._storage: list[Any] = []
        self._device_arg = None if device is None else torch.device(device)

    def __len__(self) -> int:
        return len(self._storage)

    def _set_one(self, i: int, item: Any) -> None:
        if self._device_arg is not None and isinstance(item, (torch.Tensor, TensorDictBase)):
            item = item.to(self._device_arg)
        if not 0 <= i < self.max_size:
            raise IndexError(f"index {i} is out of range for a storage of max_size {self.max_size}")
        n = len(self._storage)
        if i < n:
            self._storage[i] = item
        elif i == n:
            self._storage.append(item)
        else:
            raise IndexError(
                f"index {i} would leave a hole in a ListStorage holding {n} items; "
                "write indices in order"
            )

    def set(self, cursor: Any, data: Any) -> None:
        self._bump_mutation_revision()
        if not _is_batch_index(cursor):
            self._set_one(int(cursor), data)
            return
        if isinstance(cursor, slice):
            indices = range(*cursor.indices(self.max_size))
        else:
            indices = torch.as_tensor(cursor).reshape(-1).tolist()
        if isinstance(data, (TensorDictBase, torch.Tensor, np.ndarray)):
            items = [data[j] for j in range(data.shape[0])]
        else:
            items = list(data)
        if len(items) != len(indices):
            raise ValueError(f"got {len(items)} items for {len(indices)} indices")
        # ascending order, so that a wrapped write into a growing list leaves no hole
        for i, item in sorted(zip(indices, items), key=lambda pair: pair[0]):
            self._set_one(int(i), item)

    def get(self, index: Any) -> Any:
        if not _is_batch_index(index):
            return self._storage[int(index)]
        if isinstance(index, slice):
            return self._storage[index]
        storage = self._storage
        return [storage[i] for i in torch.as_tensor(index).reshape(-1).tolist()]

    # the column reads of the slice samplers, for a list of TensorDicts: one stack per
    # call (the samplers cache what they derive until the next write)
    def _has_key(self, key: Any) -> bool:
        first = self._storage[0] if self._storage else None
        return isinstance(first, TensorDictBase) and key in first.keys(True, True)

    def _column(self, key: Any) -> torch.Tensor:
        """Entry ``key`` of every stored TensorDict, stacked ``[len, ...]``."""
        if not self._storage:
            raise RuntimeError(f"cannot read from an empty {type(self).__name__}")
        odd = next((x for x in self._storage if not isinstance(x, TensorDictBase)), None)
        if odd is not None:
            raise TypeError(
                f"reading entry {key!r} of the items needs a tensor storage or a list of "
                f"TensorDicts, got {self} holding a {type(odd).__name__}"
            )
        column = [item.get(key, None) for item in self._storage]
        if any(value is None for value in column):
            raise KeyMismatchError(f"{type(self).__name__} holds items without an entry {key!r}")
        return torch.stack(column)

    def _default_collate(self, data: Any) -> Any:
        if isinstance(data, list) and data and isinstance(data[0], (TensorDictBase, torch.Tensor)):
            return torch.stack(data, 0)
        return data

    def _empty(self) -> None:
        self._storage = []
        self._bump_mutation_revision()

    def state_dict(self) -> dict[str, Any]:
        # TorchRL's key for the items; TensorDicts and arrays are encoded as plain data
        return {"max_size": self.max_size, "_storage": [encode_item(x) for x in self._storage]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if int(state_dict["max_size"]) != self.max_size:
            raise ValueError(
                f"checkpoint has max_size {state_dict['max_size']}, this storage {self.max_size}"
            )
        self._storage = [decode_item(x) for x in state_dict["_storage"]]
        self._bump_mutation_revision()
