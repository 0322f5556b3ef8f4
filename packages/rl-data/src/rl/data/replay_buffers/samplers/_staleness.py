"""``StalenessAwareSampler``: favours items collected by recent policies (asynchronous
training, where a batch may come from older weights)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from rl.data.replay_buffers._utils import KeyMismatchError
from rl.data.replay_buffers.samplers._sampler import EMPTY_STORAGE_ERROR, Sampler
from rl.data.replay_buffers.storages._base import Storage

__all__ = ["StalenessAwareSampler"]


def _inverse_staleness(staleness: torch.Tensor) -> torch.Tensor:
    return 1.0 / (staleness.float() + 1.0)


class StalenessAwareSampler(Sampler):
    """Samples items with a weight that decays with their staleness, as TorchRL.

    Each stored item carries the version of the policy that collected it
    (``version_key``); the training loop sets :attr:`consumer_version` (the current
    version, e.g. the optimizer step). An item's staleness is
    ``consumer_version - policy_version``: items staler than ``max_staleness`` are never
    drawn, the others with probability proportional to ``staleness_weight_fn(staleness)``
    (``1 / (staleness + 1)`` by default), with replacement only when the batch is larger
    than the items left. Batches carry each item's ``"staleness"``.

    Args:
        max_staleness: the staleness above which items are left out (``-1``: none is).
        staleness_weight_fn: maps a staleness tensor to non-negative weights.
        version_key: the stored entry holding the policy version of each item.

    Raises:
        KeyError: (at sampling) the storage holds no ``version_key``.
        RuntimeError: (at sampling) every item is staler than ``max_staleness``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, StalenessAwareSampler, TensorDictReplayBuffer
        >>> sampler = StalenessAwareSampler(max_staleness=1)
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler)
        >>> _ = rb.extend(TensorDict({"policy_version": torch.tensor([0, 1, 2, 3])}, [4]))
        >>> sampler.consumer_version = 3
        >>> sorted(set(rb.sample(64)["policy_version"].tolist()))
        [2, 3]
    """

    def __init__(
        self,
        max_staleness: int = -1,
        staleness_weight_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        version_key: NestedKey = "policy_version",
    ) -> None:
        self.consumer_version = 0
        self.max_staleness = max_staleness
        self.version_key = version_key
        self._weight_fn = staleness_weight_fn or _inverse_staleness

    def increment_consumer_version(self) -> None:
        """Adds one to :attr:`consumer_version`."""
        self.consumer_version += 1

    def _versions(self, storage: Storage) -> torch.Tensor:
        """The policy version of every stored item, flat over the storage's dims."""
        if hasattr(storage, "_column"):
            if not storage._has_key(self.version_key):
                raise KeyMismatchError(self._missing_key())
            column = storage._column(self.version_key)
            return column.reshape(len(storage), -1)[:, 0]
        data = storage.get(slice(None))
        if isinstance(data, list):
            data = torch.stack(data) if data and isinstance(data[0], TensorDictBase) else None
        versions = data.get(self.version_key, None) if isinstance(data, TensorDictBase) else None
        if versions is None:
            raise KeyMismatchError(self._missing_key())
        return versions.reshape(len(storage), -1)[:, 0]

    def _missing_key(self) -> str:
        return (
            f"the storage holds no {self.version_key!r} entry, which StalenessAwareSampler "
            "reads: write the collecting policy's version with every item (e.g. the "
            "PolicyVersion transform)"
        )

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        n = len(storage)
        if n == 0:
            raise RuntimeError(EMPTY_STORAGE_ERROR)
        staleness = self.consumer_version - self._versions(storage).cpu().float()
        if self.max_staleness >= 0:
            candidates = (staleness <= self.max_staleness).nonzero().squeeze(-1)
            if candidates.numel() == 0:
                raise RuntimeError(
                    f"All {n} stored items exceed max_staleness={self.max_staleness} "
                    f"(consumer_version={self.consumer_version}): raise max_staleness or "
                    "update the collecting policy more often"
                )
        else:
            candidates = torch.arange(n)
        weights = self._weight_fn(staleness[candidates]).float()
        drawn = torch.multinomial(
            weights / weights.sum(),
            batch_size,
            replacement=batch_size > candidates.numel(),
            generator=self._rng,
        )
        flat = candidates[drawn]
        info = {"staleness": staleness[flat].to(storage.device)}
        return storage._to_storage_index(flat.to(storage.device)), info

    def _empty(self) -> None:
        self.consumer_version = 0

    def state_dict(self) -> dict[str, Any]:
        return {"consumer_version": self.consumer_version, "max_staleness": self.max_staleness}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.consumer_version = int(state_dict["consumer_version"])
        self.max_staleness = int(state_dict["max_staleness"])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(consumer_version={self.consumer_version}, "
            f"max_staleness={self.max_staleness})"
        )
