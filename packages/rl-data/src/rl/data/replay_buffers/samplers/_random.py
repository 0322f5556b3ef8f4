"""The uniform samplers: with replacement, and without (one epoch at a time)."""

from __future__ import annotations

from typing import Any

import torch

from rl.data.replay_buffers.samplers._sampler import EMPTY_STORAGE_ERROR, Sampler
from rl.data.replay_buffers.storages._base import Storage


class RandomSampler(Sampler):
    """Samples indices uniformly with replacement.

    Examples:
        >>> import torch
        >>> from rl.data import LazyTensorStorage, RandomSampler
        >>> storage = LazyTensorStorage(10)
        >>> storage.set(slice(0, 4), torch.arange(4))
        >>> index, info = RandomSampler().sample(storage, 8)
        >>> bool(((index >= 0) & (index < 4)).all()), info
        (True, {})
    """

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        n = len(storage)
        if n == 0:
            raise RuntimeError(EMPTY_STORAGE_ERROR)
        if self._rng is not None:
            index = torch.randint(n, (batch_size,), generator=self._rng).to(storage.device)
        else:
            index = torch.randint(n, (batch_size,), device=storage.device)
        return storage._to_storage_index(index), {}


class SamplerWithoutReplacement(Sampler):
    """Returns every stored item once per epoch, in random (or storage) order.

    An epoch draws a permutation of the items stored when it starts; ``ran_out`` turns true
    when it is used up, which ends ``for batch in buffer``.

    Args:
        drop_last: drop the last batch of an epoch when it is smaller than ``batch_size``.
        shuffle: draw a random permutation (otherwise storage order).

    Examples:
        >>> import torch
        >>> from rl.data import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
        >>> rb = ReplayBuffer(
        ...     storage=LazyTensorStorage(10), sampler=SamplerWithoutReplacement(), batch_size=3
        ... )
        >>> _ = rb.extend(torch.arange(7))
        >>> sorted(torch.cat(list(rb)).tolist())
        [0, 1, 2, 3, 4, 5, 6]
    """

    _epoch_based = True

    def __init__(self, drop_last: bool = False, shuffle: bool = True) -> None:
        self.drop_last = bool(drop_last)
        self.shuffle = bool(shuffle)
        self._perm: torch.Tensor | None = None
        self._pos = 0
        self._ran_out = False

    def _new_epoch(self, n: int, device: torch.device) -> None:
        if self.shuffle:
            if self._rng is not None:
                self._perm = torch.randperm(n, generator=self._rng).to(device)
            else:
                self._perm = torch.randperm(n, device=device)
        else:
            self._perm = torch.arange(n, device=device)
        self._pos = 0

    def _remaining(self) -> int:
        return 0 if self._perm is None else self._perm.shape[0] - self._pos

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        n = len(storage)
        if n == 0:
            raise RuntimeError(EMPTY_STORAGE_ERROR)
        if self.drop_last and n < batch_size:
            raise ValueError(
                f"drop_last=True needs at least batch_size={batch_size} stored items, got {n}"
            )
        remaining = self._remaining()
        if remaining == 0 or (self.drop_last and remaining < batch_size):
            self._new_epoch(n, storage.device)
            self._ran_out = False
        index = self._perm[self._pos : self._pos + batch_size]
        self._pos += index.shape[0]
        remaining = self._remaining()
        self._ran_out = remaining == 0 or (self.drop_last and remaining < batch_size)
        return storage._to_storage_index(index), {}

    def _empty(self) -> None:
        self._perm = None
        self._pos = 0
        self._ran_out = False

    def state_dict(self) -> dict[str, Any]:
        perm = None if self._perm is None else self._perm.cpu().clone()
        return {"perm": perm, "pos": self._pos, "ran_out": self._ran_out}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._perm = state_dict["perm"]
        self._pos = int(state_dict["pos"])
        self._ran_out = bool(state_dict["ran_out"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(drop_last={self.drop_last}, shuffle={self.shuffle})"
