"""``ConsumingSampler``: items leave the buffer after being sampled a given number of
times (``ReplayBuffer(consume_after_n_samples=...)``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rl.data.replay_buffers._utils import as_index_tensor
from rl.data.replay_buffers.samplers._sampler import EMPTY_STORAGE_ERROR, Sampler
from rl.data.replay_buffers.storages._base import Storage

__all__ = ["ConsumingSampler"]


class ConsumingSampler(Sampler):
    """Samples uniformly among the live items; an item returned ``max_sample_count``
    times is consumed: no longer sampled, and its slot is reused by the next writes.

    A batch holds distinct items (fewer than asked for when fewer are live); ``len(rb)``
    of a buffer with this sampler counts the live items, and iterating over it ends when
    none is left. A buffer writes new items into consumed slots first (oldest consumed
    first), then at its writer's cursor, skipping the slots it just reused. 1-D storages
    only; no prefetching.

    Args:
        max_sample_count: how many times an item is returned before it is consumed.

    Raises:
        TypeError: ``max_sample_count`` is not an int.
        ValueError: it is below 1; (at sampling) a multi-dimensional storage.

    Examples:
        >>> import torch
        >>> from rl.data import ConsumingSampler, ListStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=ListStorage(10), sampler=ConsumingSampler(), batch_size=3)
        >>> _ = rb.extend([torch.tensor(i) for i in range(4)])
        >>> len(rb.sample()), len(rb)
        (3, 1)
    """

    _epoch_based = True  # iterating over a buffer ends when every item is consumed

    def __init__(self, max_sample_count: int = 1) -> None:
        if isinstance(max_sample_count, bool) or not isinstance(
            max_sample_count, (int, np.integer)
        ):
            raise TypeError(f"max_sample_count must be a positive int, got {max_sample_count!r}")
        if max_sample_count < 1:
            raise ValueError(f"max_sample_count must be a positive int, got {max_sample_count}")
        self.max_sample_count = int(max_sample_count)
        # TorchRL's state: per slot, the times sampled and whether it is live; the
        # consumed slots waiting for a write, oldest first (from _free_head on)
        self._sample_count: torch.Tensor | None = None
        self._live_mask: torch.Tensor | None = None
        self._known_storage_len = 0
        self._free_indices: torch.Tensor | None = None
        self._free_head = 0
        self._ran_out = False

    # -- bookkeeping ------------------------------------------------------------------------------
    def _grow(self, size: int) -> None:
        have = 0 if self._sample_count is None else self._sample_count.numel()
        if have >= size:
            return
        count = torch.zeros(size, dtype=torch.long)
        live = torch.zeros(size, dtype=torch.bool)
        if self._sample_count is not None:
            count[:have], live[:have] = self._sample_count, self._live_mask
        self._sample_count, self._live_mask = count, live

    def _follow(self, storage: Storage) -> None:
        """Items stored without this sampler being told (a prefilled storage) are live."""
        if storage.ndim != 1:
            raise ValueError(
                f"{type(self).__name__} supports 1-dimensional storages, got ndim={storage.ndim}"
            )
        n = len(storage)
        self._grow(n)
        if n > self._known_storage_len:
            self._sample_count[self._known_storage_len : n] = 0
            self._live_mask[self._known_storage_len : n] = True
        elif n < self._known_storage_len:
            self._sample_count[n : self._known_storage_len] = 0
            self._live_mask[n : self._known_storage_len] = False
        self._known_storage_len = n

    def _mark_live(self, index: int | torch.Tensor) -> None:
        index = as_index_tensor(index)
        if index.numel() == 0:
            return
        index = index.cpu()
        self._grow(int(index.max()) + 1)
        self._sample_count[index] = 0
        self._live_mask[index] = True
        self._known_storage_len = max(self._known_storage_len, int(index.max()) + 1)
        self._ran_out = False

    def add(self, index: int) -> None:
        self._mark_live(index)

    def extend(self, index: torch.Tensor) -> None:
        self._mark_live(index)

    def mark_update(self, index: Any) -> None:
        self._mark_live(index)

    def _append_free_indices(self, index: torch.Tensor) -> None:
        """Queues consumed slots for reuse by the next writes."""
        if index.numel() == 0:
            return
        index = index.reshape(-1).long().cpu()
        waiting = self._free_indices
        if waiting is not None:
            waiting = waiting[self._free_head :]
        self._free_indices = index.clone() if waiting is None else torch.cat([waiting, index])
        self._free_head = 0

    def _pop_consumed_indices(self, storage: Storage, max_count: int) -> torch.Tensor:
        """Up to ``max_count`` consumed slots to write into, oldest consumed first."""
        self._follow(storage)
        popped: list[int] = []
        waiting = self._free_indices
        while waiting is not None and self._free_head < waiting.numel() and len(popped) < max_count:
            slot = int(waiting[self._free_head])
            self._free_head += 1
            # still consumed (not rewritten meanwhile) and still stored
            if (
                slot < self._known_storage_len
                and not self._live_mask[slot]
                and self._sample_count[slot] >= self.max_sample_count
            ):
                popped.append(slot)
        if waiting is not None and self._free_head >= waiting.numel():
            self._free_indices, self._free_head = None, 0
        return torch.tensor(popped, dtype=torch.long)

    def _num_sampleable(self, storage: Storage | None = None) -> int:
        if storage is not None:
            self._follow(storage)
        if self._live_mask is None:
            return 0
        return int(self._live_mask[: self._known_storage_len].sum())

    # -- sampling ---------------------------------------------------------------------------------
    def can_sample(self, storage: Storage, batch_size: int) -> bool:
        return self._num_sampleable(storage) > 0

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        if len(storage) == 0 or self._num_sampleable(storage) == 0:
            self._ran_out = True
            raise RuntimeError(EMPTY_STORAGE_ERROR)
        live = self._live_mask[: self._known_storage_len].nonzero().squeeze(-1)
        index = live[torch.randperm(live.numel(), generator=self._rng)[:batch_size]]
        self._sample_count[index] += 1
        still = self._sample_count[index] < self.max_sample_count
        self._live_mask[index] = still
        self._append_free_indices(index[~still])
        self._ran_out = self._num_sampleable() == 0
        return index.to(storage.device), {}

    # -- checkpoints ------------------------------------------------------------------------------
    def _empty(self) -> None:
        self._sample_count = self._live_mask = self._free_indices = None
        self._known_storage_len = self._free_head = 0
        self._ran_out = False

    def state_dict(self) -> dict[str, Any]:
        """TorchRL's state: the per-slot counts and live flags and the slots to reuse."""
        waiting = self._free_indices
        return {
            "max_sample_count": self.max_sample_count,
            "_sample_count": None if self._sample_count is None else self._sample_count.clone(),
            "_live_mask": None if self._live_mask is None else self._live_mask.clone(),
            "_known_storage_len": self._known_storage_len,
            "_free_indices": None if waiting is None else waiting[self._free_head :].clone(),
            "_free_head": 0,
            "_ran_out": self._ran_out,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        def copy(value: Any) -> Any:  # the state's tensors may change later (a memmap)
            return value.clone() if isinstance(value, torch.Tensor) else value

        self.max_sample_count = int(state_dict["max_sample_count"])
        self._sample_count = copy(state_dict["_sample_count"])
        self._live_mask = copy(state_dict["_live_mask"])
        self._known_storage_len = int(state_dict["_known_storage_len"])
        self._free_indices = copy(state_dict.get("_free_indices"))
        self._free_head = int(state_dict.get("_free_head", 0))
        self._ran_out = bool(state_dict["_ran_out"])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_sample_count={self.max_sample_count}, "
            f"sampleable={self._num_sampleable()})"
        )
