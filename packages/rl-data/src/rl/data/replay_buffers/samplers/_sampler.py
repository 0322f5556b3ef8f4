"""Sampler: the base class of every replay-buffer sampler (which stored items a buffer returns)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from rl.data.replay_buffers._utils import StatelessComponent
from rl.data.replay_buffers.storages._base import Storage

__all__ = ["EMPTY_STORAGE_ERROR", "Sampler"]

EMPTY_STORAGE_ERROR = "Cannot sample from an empty storage: add or extend the replay buffer first."


class Sampler(StatelessComponent, ABC):
    """Chooses which stored items a replay buffer returns.

    ``sample(storage, batch_size)`` returns ``(index, info)``: the indices to read and a dict
    of extra per-item entries (importance weights, ...) that TensorDict buffers add to the
    batch. ``add``/``extend`` are told which indices a writer has just filled.
    """

    _epoch_based = False
    # the random generator of the buffer (``ReplayBuffer(generator=...)``); None: torch's
    _rng: torch.Generator | None = None

    @abstractmethod
    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]: ...

    def _attach_storage(self, storage: Storage) -> None:
        """Called by the buffer with its storage (a prioritized sampler follows its device)."""
        return None

    def add(self, index: int | torch.Tensor) -> None:
        return None

    def extend(self, index: torch.Tensor) -> None:
        return None

    def update_priority(self, index: Any, priority: Any) -> None:
        return None

    def mark_update(self, index: Any) -> None:
        return None

    def can_sample(self, storage: Storage, batch_size: int) -> bool:
        """Whether a batch can be drawn from ``storage`` now."""
        return len(storage) > 0

    @property
    def default_priority(self) -> float:
        return 1.0

    _ran_out = False

    @property
    def ran_out(self) -> bool:
        """True once an epoch-based sampler has returned every item of the current epoch."""
        return self._ran_out

    @ran_out.setter
    def ran_out(self, value: bool) -> None:
        if self._epoch_based:
            self._ran_out = bool(value)
