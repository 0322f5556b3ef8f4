"""Storages: where a replay buffer keeps its items."""

from rl.data.replay_buffers.storages._base import ListStorage, Storage
from rl.data.replay_buffers.storages._list import CompressedListStorage, LazyStackStorage
from rl.data.replay_buffers.storages._memmap import LazyMemmapStorage
from rl.data.replay_buffers.storages._tensor import LazyTensorStorage, TensorStorage

__all__ = [
    "CompressedListStorage",
    "LazyStackStorage",
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "ListStorage",
    "Storage",
    "TensorStorage",
]
