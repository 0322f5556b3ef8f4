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

    An epoch is a permutation of the stored items; each batch takes the next
    ``batch_size`` of them. When the epoch is used up (or, with ``drop_last``, fewer than
    ``batch_size`` items are left), ``ran_out`` turns true, which ends
    ``for batch in buffer``, and the next epoch is drawn at once. As in TorchRL, a change
    in the number of stored items starts a new epoch: the sampler cannot tell which of
    the items it already returned.

    Args:
        drop_last: drop the last batch of an epoch when it is smaller than ``batch_size``
            (otherwise it is returned, smaller).
        shuffle: draw a random permutation (otherwise storage order).

    Raises:
        ValueError: with ``drop_last``, ``sample`` asks for more items than are stored.

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
        # the items left in this epoch (TorchRL's name, kept in its state dict); None
        # before the first batch
        self._sample_list: torch.Tensor | None = None
        self.len_storage = 0  # the number of stored items the epoch was drawn over
        self._ran_out = False

    def _new_epoch(self, n: int, device: torch.device) -> None:
        if not self.shuffle:
            self._sample_list = torch.arange(n, device=device)
        elif self._rng is not None:
            self._sample_list = torch.randperm(n, generator=self._rng).to(device)
        else:
            self._sample_list = torch.randperm(n, device=device)
        self.len_storage = n

    def can_sample(self, storage: Storage, batch_size: int) -> bool:
        return len(storage) >= batch_size if self.drop_last else len(storage) > 0

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        n = len(storage)
        if n == 0:
            raise RuntimeError(EMPTY_STORAGE_ERROR)
        if self.drop_last and n < batch_size:
            raise ValueError(
                f"The batch size ({batch_size}) is greater than the storage capacity ({n}): "
                "with drop_last=True no batch can be drawn without repeating items"
            )
        if self._sample_list is None or n != self.len_storage:
            self._new_epoch(n, storage.device)
        index = self._sample_list[:batch_size]
        self._sample_list = self._sample_list[batch_size:]
        left = self._sample_list.shape[0]
        self._ran_out = left == 0 or (self.drop_last and left < batch_size)
        if self._ran_out:
            self._new_epoch(n, storage.device)
        return storage._to_storage_index(index), {}

    def _empty(self) -> None:
        self._sample_list = None
        self.len_storage = 0
        self._ran_out = False

    def state_dict(self) -> dict[str, Any]:
        """TorchRL's state: ``len_storage``, ``_sample_list``, ``drop_last``, ``_ran_out``."""
        sample_list = None if self._sample_list is None else self._sample_list.cpu().clone()
        return {
            "len_storage": self.len_storage,
            "_sample_list": sample_list,
            "drop_last": self.drop_last,
            "_ran_out": self._ran_out,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        sample_list = state_dict["_sample_list"]
        self.len_storage = int(state_dict["len_storage"])
        self.drop_last = bool(state_dict["drop_last"])
        self._ran_out = bool(state_dict["_ran_out"])
        # a copy: the state dict's tensors (a memory-mapped checkpoint) may change later
        self._sample_list = None if sample_list is None else torch.as_tensor(sample_list).clone()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(drop_last={self.drop_last}, shuffle={self.shuffle})"


# RandomSampler(replacement=False) builds a SamplerWithoutReplacement (see Sampler)
RandomSampler._without_replacement = SamplerWithoutReplacement
