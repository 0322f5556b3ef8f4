"""Storage checkpointers: how ``ReplayBuffer(checkpointer=...)`` saves its storage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rl.data.replay_buffers.storages._base import Storage


class StorageCheckpointerBase:
    """Saves and restores a storage in a directory: ``dumps(storage, path)``, ``loads``.

    Subclasses choose the format; the buffer calls them from its own ``dumps``/``loads``.
    """

    def dumps(self, storage: Storage, path: str | Path) -> None:
        """Writes ``storage`` under ``path``; abstract: each checkpointer defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define dumps(storage, path)")

    def loads(self, storage: Storage, path: str | Path) -> None:
        """Reads ``storage`` back from ``path``; abstract: each checkpointer defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define loads(storage, path)")


class TensorStorageCheckpointer(StorageCheckpointerBase):
    """Writes the storage's ``state_dict`` atomically (tensors only, loaded with
    ``weights_only=True``); works for every storage of this package.

    Examples:
        >>> import tempfile, torch
        >>> from rl.data import LazyTensorStorage, ReplayBuffer, TensorStorageCheckpointer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=TensorStorageCheckpointer())
        >>> _ = rb.extend(torch.arange(4))
        >>> path = tempfile.mkdtemp()
        >>> rb.dumps(path)
        >>> rb2 = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=TensorStorageCheckpointer())
        >>> rb2.loads(path)
        >>> rb2[:]
        tensor([0, 1, 2, 3])
    """

    def dumps(self, storage: Storage, path: str | Path) -> None:
        storage.dumps(path)

    def loads(self, storage: Storage, path: str | Path) -> None:
        storage.loads(path)


ListStorageCheckpointer = TensorStorageCheckpointer
FlatStorageCheckpointer = TensorStorageCheckpointer

__all__: list[Any] = [
    "FlatStorageCheckpointer",
    "ListStorageCheckpointer",
    "StorageCheckpointerBase",
    "TensorStorageCheckpointer",
]
