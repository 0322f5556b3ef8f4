"""Sampler: the base class of every replay-buffer sampler (which stored items a buffer returns)."""

from __future__ import annotations

from abc import ABC, ABCMeta, abstractmethod
from typing import Any

import torch

from rl.data.replay_buffers._utils import StatelessComponent
from rl.data.replay_buffers.storages._base import Storage

__all__ = ["EMPTY_STORAGE_ERROR", "Sampler"]

EMPTY_STORAGE_ERROR = "Cannot sample from an empty storage: add or extend the replay buffer first."


class _SamplerMeta(ABCMeta):
    """Builds ``Cls(..., replacement=False)`` as the without-replacement variant that
    ``Cls`` declares (``_without_replacement`` in its own class body), as TorchRL does.

    ``replacement=True`` (the default) builds ``Cls`` itself; a sampler that already
    draws without replacement (``_epoch_based``) takes ``replacement=False`` as is.
    """

    def __call__(cls, *args: Any, replacement: bool = True, **kwargs: Any) -> Any:
        if not replacement and not cls._epoch_based:
            variant = cls.__dict__.get("_without_replacement")
            if variant is None:
                raise TypeError(
                    f"{cls.__name__} has no without-replacement variant; it cannot be built "
                    "with replacement=False"
                )
            return variant(*args, **kwargs)
        return super().__call__(*args, **kwargs)


class Sampler(StatelessComponent, ABC, metaclass=_SamplerMeta):
    """Chooses which stored items a replay buffer returns.

    ``sample(storage, batch_size)`` returns ``(index, info)``: the indices to read and a dict
    of extra per-item entries (importance weights, ...) that TensorDict buffers add to the
    batch. ``add``/``extend`` are told which indices a writer has just filled.

    Every sampler takes ``replacement=``: ``False`` builds the without-replacement
    variant a sampler declares (``RandomSampler`` gives :class:`SamplerWithoutReplacement`,
    ``SliceSampler`` :class:`SliceSamplerWithoutReplacement`); a sampler without one
    raises ``TypeError``.
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
