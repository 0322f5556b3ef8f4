"""Writers: where in the storage each new item goes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from rl.data.replay_buffers._utils import KeyMismatchError, StatelessComponent
from rl.data.replay_buffers.storages._base import Storage


def _batch_len(data: Any) -> int:
    if isinstance(data, (torch.Tensor, TensorDictBase, np.ndarray)):
        if len(data.shape) == 0:
            raise ValueError("extend expects data with a batch dimension, got a 0-dim value")
        return data.shape[0]
    return len(data)


class Writer(StatelessComponent, ABC):
    """Decides the storage indices of new items and writes them there."""

    def __init__(self) -> None:
        self._storage: Storage | None = None

    def register_storage(self, storage: Storage) -> None:
        self._storage = storage

    @abstractmethod
    def add(self, data: Any) -> int | torch.Tensor: ...

    @abstractmethod
    def extend(self, data: Any) -> torch.Tensor: ...


class RoundRobinWriter(Writer):
    """Writes items in order and wraps around to overwrite the oldest when the storage is full.

    Examples:
        >>> import torch
        >>> from rl.data import LazyTensorStorage, ReplayBuffer, RoundRobinWriter
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4), writer=RoundRobinWriter())
        >>> rb.extend(torch.arange(3))
        tensor([0, 1, 2])
        >>> rb.extend(torch.arange(3, 6))
        tensor([3, 0, 1])
    """

    def __init__(self) -> None:
        super().__init__()
        self._cursor = 0
        self._write_count = 0

    def register_storage(self, storage: Storage) -> None:
        super().register_storage(storage)
        # A storage that already holds items (reopened from disk): continue after the last
        # item written, which is not the end of the data once the ring has wrapped.
        if self._write_count == 0 and len(storage):
            self._cursor = getattr(storage, "_write_end", len(storage)) % storage.max_size
            self._write_count = len(storage)

    def _prepare(self, data: Any, index: Any) -> Any:
        return data

    def add(self, data: Any) -> int:
        index = self._cursor
        data = self._prepare(data, torch.tensor(index))
        self._storage.set(index, data)
        self._cursor = (index + 1) % self._storage.max_size
        self._write_count += 1
        return index

    def extend(self, data: Any) -> torch.Tensor:
        total = _batch_len(data)
        max_size = self._storage.max_size
        cursor = self._cursor
        device = self._storage.device
        index = torch.arange(cursor, cursor + total, device=device)
        if total == 0:
            return index
        wraps = cursor + total > max_size
        if wraps:
            index = index % max_size
        data = self._prepare(data, index)
        if total > max_size:
            # only the last max_size items survive; they land where a sequential write puts them
            data, index = data[total - max_size :], index[total - max_size :]
        if wraps:
            self._storage.set(index, data)
        else:
            self._storage.set(slice(cursor, cursor + total), data)
        self._cursor = (cursor + total) % max_size
        self._write_count += total
        return index

    def _empty(self) -> None:
        self._cursor = 0
        self._write_count = 0

    def state_dict(self) -> dict[str, Any]:
        return {"cursor": self._cursor, "write_count": self._write_count}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._cursor = int(state_dict["cursor"])
        self._write_count = int(state_dict["write_count"])


def _set_index(data: TensorDictBase, index: torch.Tensor) -> TensorDictBase:
    if not isinstance(data, TensorDictBase):
        raise TypeError(f"a TensorDict writer needs TensorDict data, got {type(data).__name__}")
    index = index.to(data.device) if data.device is not None else index
    if data.batch_dims > index.ndim:
        index = index.reshape(*index.shape, *([1] * (data.batch_dims - index.ndim)))
        index = index.expand(data.batch_size)
    data.set("index", index)
    return data


class TensorDictRoundRobinWriter(RoundRobinWriter):
    """A :class:`RoundRobinWriter` that also writes each item's storage index under ``"index"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
        >>> data = TensorDict({"a": torch.zeros(3)}, batch_size=[3])
        >>> _ = rb.extend(data)
        >>> data["index"]
        tensor([0, 1, 2])
    """

    def _prepare(self, data: Any, index: Any) -> Any:
        return _set_index(data, index)


_REDUCTIONS = {
    "sum": lambda x: x.sum(-1),
    "max": lambda x: x.max(-1).values,
    "min": lambda x: x.min(-1).values,
    "mean": lambda x: x.mean(-1),
    "median": lambda x: x.median(-1).values,
}


class TensorDictMaxValueWriter(Writer):
    """Keeps the ``max_size`` items with the highest ``rank_key`` value.

    When the storage is full, a new item replaces the lowest-ranked stored item if it ranks
    higher, and is dropped otherwise (its ``"index"`` is then ``-1``).

    Args:
        rank_key: the key ranking the items (default ``("next", "reward")``); a value with
            more than one element per item is reduced with ``reduction``.
        reduction: ``"sum"``, ``"max"``, ``"min"``, ``"mean"`` or ``"median"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, TensorDictMaxValueWriter, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(
        ...     storage=LazyTensorStorage(2), writer=TensorDictMaxValueWriter(rank_key="r")
        ... )
        >>> _ = rb.extend(TensorDict({"r": torch.tensor([3.0, 1.0, 5.0, 2.0])}, batch_size=[4]))
        >>> sorted(rb[:]["r"].tolist())
        [3.0, 5.0]
    """

    def __init__(
        self,
        rank_key: NestedKey | None = None,
        reduction: Literal["sum", "max", "min", "mean", "median"] = "sum",
    ) -> None:
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {sorted(_REDUCTIONS)}, got {reduction!r}")
        self.rank_key = ("next", "reward") if rank_key is None else rank_key
        self.reduction = reduction
        self._ranks: torch.Tensor | None = None
        self._count = 0

    def register_storage(self, storage: Storage) -> None:
        super().register_storage(storage)
        self._ranks = torch.full((storage.max_size,), -float("inf"), dtype=torch.float64)

    def _rank(self, data: TensorDictBase, batched: bool) -> torch.Tensor:
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"TensorDictMaxValueWriter needs TensorDicts, got {type(data).__name__}"
            )
        try:
            value = data[self.rank_key]
        except KeyError:
            raise KeyMismatchError(f"the data has no rank_key {self.rank_key!r}") from None
        value = value.detach().to("cpu", torch.float64)
        value = value.reshape(value.shape[0], -1) if batched else value.reshape(1, -1)
        if value.shape[-1] != 1:
            return _REDUCTIONS[self.reduction](value)
        return value[:, 0]

    def add(self, data: TensorDictBase) -> int:
        index = self._write(data.unsqueeze(0), self._rank(data, batched=False))
        return int(index[0])

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        return self._write(data, self._rank(data, batched=True))

    def _write(self, data: TensorDictBase, ranks: torch.Tensor) -> torch.Tensor:
        # invariant: the filled slots are exactly [0, count)
        max_size, count = self._storage.max_size, self._count
        n = ranks.shape[0]
        pool = torch.cat([self._ranks[:count], ranks])
        k = min(max_size, count + n)
        keep = torch.topk(pool, k, sorted=False).indices
        kept_new = (keep[keep >= count] - count).sort().values
        evicted = torch.ones(count, dtype=torch.bool)
        evicted[keep[keep < count]] = False
        free = torch.cat([evicted.nonzero().squeeze(-1), torch.arange(count, max_size)])
        target = free[: kept_new.shape[0]]
        slots = torch.full((n,), -1, dtype=torch.int64)
        slots[kept_new] = target
        self._ranks[target] = ranks[kept_new]
        self._count = k
        written = slots >= 0
        if written.any():
            chosen = written.nonzero().squeeze(-1)
            part = data[chosen]
            _set_index(part, slots[chosen])
            self._storage.set(slots[chosen], part)
        _set_index(data, slots)
        return slots

    def _empty(self) -> None:
        self._count = 0
        if self._ranks is not None:
            self._ranks.fill_(-float("inf"))

    def state_dict(self) -> dict[str, Any]:
        ranks = None if self._ranks is None else self._ranks.clone()
        return {"count": self._count, "ranks": ranks}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._count = int(state_dict["count"])
        if state_dict["ranks"] is not None:
            self._ranks = state_dict["ranks"].clone()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank_key={self.rank_key!r}, reduction={self.reduction!r})"
