"""Writers: where in the storage each new item goes."""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from typing import Any, Literal

import numpy as np
import torch
from tensordict import TensorDictBase, is_tensorclass
from tensordict.utils import NestedKey
from torch.utils._pytree import tree_leaves, tree_map

from rl.data.replay_buffers._utils import KeyMismatchError, StatelessComponent
from rl.data.replay_buffers.storages._base import Storage


def _batch_len(data: Any) -> int:
    """The number of items in a batch: the first dim of a tensor, TensorDict, tensorclass
    or pytree of tensors (a dict, a tuple); the length of a list (a list of items)."""
    if not isinstance(data, (torch.Tensor, TensorDictBase, np.ndarray, list)):
        if is_tensorclass(data):
            data = data.batch_size
        else:
            leaves = tree_leaves(data)
            if leaves and all(isinstance(x, torch.Tensor) for x in leaves):
                data = leaves[0]
    if isinstance(data, (torch.Tensor, TensorDictBase, np.ndarray, torch.Size)):
        shape = data if isinstance(data, torch.Size) else data.shape
        if len(shape) == 0:
            raise ValueError("extend expects data with a batch dimension, got a 0-dim value")
        return shape[0]
    return len(data)


def _batch_tail(data: Any, start: int) -> Any:
    """The items ``start:`` of a batch (see :func:`_batch_len`)."""
    if isinstance(data, (torch.Tensor, TensorDictBase, np.ndarray, list)) or is_tensorclass(data):
        return data[start:]
    return tree_map(lambda x: x[start:], data)


def _row_coords(rows: torch.Tensor, capacity: int, inner_shape: torch.Size) -> torch.Tensor:
    """The ``[N * items_per_row, ndim]`` coordinates of the items of whole storage rows."""
    inner = inner_shape.numel()
    flat = (rows.reshape(-1, 1) * inner + torch.arange(inner, device=rows.device)).reshape(-1)
    return torch.stack(torch.unravel_index(flat, (capacity, *inner_shape)), -1)


class Writer(StatelessComponent, ABC):
    """Decides the storage indices of new items and writes them there.

    Args:
        compilable: accepted for TorchRL compatibility (writers here hold no
            process-shared state, so every writer can be compiled around).
    """

    _write_count = 0

    def __init__(self, compilable: bool = False) -> None:
        self._storage: Storage | None = None
        self._compilable = bool(compilable)

    @property
    def tracks_generations(self) -> bool:
        return False

    def generations_of(self, index: int | torch.Tensor) -> torch.Tensor:
        """The generation of the storage slots at ``index`` (see
        :class:`RoundRobinWriter`): ``-1`` everywhere for a writer that does not track
        them."""
        index = torch.as_tensor(index)
        return torch.full(index.shape, -1, dtype=torch.int64, device=index.device)

    @property
    def write_count(self) -> int:
        """The number of items written since construction (or the last ``empty``)."""
        return self._write_count

    def register_storage(self, storage: Storage) -> None:
        self._storage = storage

    @abstractmethod
    def add(self, data: Any) -> int | torch.Tensor: ...

    @abstractmethod
    def extend(self, data: Any) -> torch.Tensor: ...

    def _empty(self, empty_write_count: bool = True) -> None:
        """Forgets the writer's position (and its count, unless ``empty_write_count``
        is false)."""
        if empty_write_count:
            self._write_count = 0


class ImmutableDatasetWriter(Writer):
    """The writer of a dataset that must not change: every write raises.

    Examples:
        >>> import torch
        >>> from rl.data import ImmutableDatasetWriter, LazyTensorStorage, ReplayBuffer
        >>> storage = LazyTensorStorage(4)
        >>> storage.set(torch.arange(4), torch.arange(4) * 10)
        >>> rb = ReplayBuffer(storage=storage, writer=ImmutableDatasetWriter())
        >>> len(rb), rb.write_count
        (4, 0)
        >>> rb.extend(torch.zeros(2))
        Traceback (most recent call last):
        ...
        RuntimeError: This dataset doesn't allow writing.
    """

    WRITING_ERR = "This dataset doesn't allow writing."

    def add(self, data: Any) -> int:
        raise RuntimeError(self.WRITING_ERR)

    def extend(self, data: Any) -> torch.Tensor:
        raise RuntimeError(self.WRITING_ERR)

    def _empty(self, empty_write_count: bool = True) -> None:
        raise RuntimeError(self.WRITING_ERR)


class RoundRobinWriter(Writer):
    """Writes items in order and wraps around to overwrite the oldest when the storage is full.

    With a multi-dimensional storage (``ndim > 1``) the writer fills whole rows (dim 0 of
    the storage) and returns the ``[N, ndim]`` coordinates of the items it wrote.

    Args:
        compilable: accepted for TorchRL compatibility.
        track_generations: count, per storage slot (a dim-0 row), how many times it was
            overwritten: :meth:`generations_of` reads the counters (0 after the first
            write, -1 for a slot never written), sampled batches carry
            ``"index_generation"`` and :meth:`ReplayBuffer.update_if_present` can tell
            whether a sampled item is still stored. The counters live on the storage:
            every writer of a storage shared by several buffers advances them (those
            built without tracking too, once one tracking writer made them), and
            emptying advances every written slot, so no handle taken before looks live
            after.

    Examples:
        >>> import torch
        >>> from rl.data import LazyTensorStorage, ReplayBuffer, RoundRobinWriter
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4), writer=RoundRobinWriter())
        >>> rb.extend(torch.arange(3))
        tensor([0, 1, 2])
        >>> rb.extend(torch.arange(3, 6))
        tensor([3, 0, 1])
    """

    def __init__(self, compilable: bool = False, *, track_generations: bool = False) -> None:
        super().__init__(compilable=compilable)
        self._cursor = 0
        self._write_count = 0
        self._track_generations = bool(track_generations)
        # counters loaded before a storage is registered, handed to it then
        self._pending_generation: torch.Tensor | None = None

    @property
    def tracks_generations(self) -> bool:
        return self._track_generations

    @property
    def _generation(self) -> torch.Tensor | None:
        """The per-slot counters: the storage's (``_slot_generations``), or those waiting
        for a storage."""
        if self._storage is None:
            return self._pending_generation
        return self._storage._slot_generations

    @_generation.setter
    def _generation(self, value: torch.Tensor | None) -> None:
        if self._storage is None:
            self._pending_generation = value
        else:
            self._storage._slot_generations = value

    def _bump_generation(self, rows: torch.Tensor | int) -> None:
        generation = self._generation
        if generation is None:
            if not self._track_generations:
                return  # nobody reads them: a non-tracking writer does not make them
            size = self._storage._max_size_along_dim0()
            generation = self._generation = torch.full((size,), -1, dtype=torch.int64)
        rows = torch.as_tensor(rows, dtype=torch.int64).reshape(-1).cpu()
        generation.index_put_((rows,), torch.ones_like(rows), accumulate=True)

    def generations_of(self, index: int | torch.Tensor | tuple) -> torch.Tensor:
        """How many times the slots at ``index`` were overwritten.

        Args:
            index: dim-0 slots: an int, a 1-D tensor of them, ``[N, ndim]`` coordinates
                (as :meth:`extend` returns for a multi-dimensional storage) or a tuple of
                per-dim indices (only its dim-0 part counts: a generation stamps a row).

        Returns:
            int64 counters shaped as the slots, on their device: ``-1`` for a slot never
            written, out of range, or a writer built without ``track_generations``.
        """
        if not self._track_generations:
            return super().generations_of(index[0] if isinstance(index, tuple) else index)
        if isinstance(index, tuple):
            index = index[0]
        index = torch.as_tensor(index, dtype=torch.int64)
        if (
            index.ndim >= 2
            and self._storage is not None
            and self._storage.ndim > 1
            and index.shape[-1] == self._storage.ndim
        ):
            index = index[..., 0]  # the row of [N, ndim] coordinates
        generation = self._generation
        if generation is None or generation.numel() == 0:
            return torch.full(index.shape, -1, dtype=torch.int64, device=index.device)
        rows = index.cpu()
        n = generation.numel()
        found = generation[rows.clamp(0, n - 1)]
        found = torch.where((rows >= 0) & (rows < n), found, torch.full_like(found, -1))
        return found.to(index.device)

    def register_storage(self, storage: Storage) -> None:
        super().register_storage(storage)
        pending, self._pending_generation = self._pending_generation, None
        # a storage shared with another buffer already counts its slots: its counters win
        if pending is not None and storage._slot_generations is None:
            storage._slot_generations = pending
        # A storage that already holds items (reopened from disk): continue after the last
        # item written, which is not the end of the data once the ring has wrapped.
        if self._write_count == 0 and len(storage):
            self._cursor = getattr(storage, "_write_end", len(storage)) % storage.max_size
            self._write_count = len(storage)

    def _prepare(self, data: Any, index: Any) -> Any:
        return data

    def add(self, data: Any) -> int | torch.Tensor:
        index = self._cursor
        storage = self._storage
        max_rows = storage._max_size_along_dim0(data) if storage.ndim > 1 else storage.max_size
        if storage.ndim > 1:
            inner_shape = data.shape[: storage.ndim - 1]
            out = _row_coords(torch.tensor([index]), max_rows, inner_shape)
        else:
            out = index
        data = self._prepare(data, torch.tensor(index) if storage.ndim == 1 else out)
        storage.set(index, data)
        self._cursor = (index + 1) % max_rows
        self._write_count += 1 if storage.ndim == 1 else inner_shape.numel()
        self._bump_generation(index)
        return out

    def extend(self, data: Any) -> torch.Tensor:
        total = _batch_len(data)
        storage = self._storage
        if storage.ndim > 1:
            if total == 0:
                return torch.zeros(0, storage.ndim, dtype=torch.int64)
            inner_shape = data.shape[1 : storage.ndim]
            max_size = storage._max_size_along_dim0(data[0])
        else:
            max_size = storage.max_size
        cursor = self._cursor
        device = self._storage.device
        index = torch.arange(cursor, cursor + total, device=device)
        if total == 0:
            return index
        wraps = cursor + total > max_size
        if wraps:
            index = index % max_size
        rows = index
        if storage.ndim > 1:
            index = _row_coords(rows, max_size, inner_shape)
        data = self._prepare(data, index)
        # every item counts as a write of its slot, those overwritten within this batch too
        written_rows = rows
        if total > max_size:
            # only the last max_size items survive; they land where a sequential write puts them
            data, rows = _batch_tail(data, total - max_size), rows[total - max_size :]
            index = index[index.shape[0] - rows.shape[0] * (index.shape[0] // total) :]
        if wraps:
            storage.set(rows, data)
        else:
            storage.set(slice(cursor, cursor + total), data)
        self._cursor = (cursor + total) % max_size
        self._write_count += total * (inner_shape.numel() if storage.ndim > 1 else 1)
        self._bump_generation(written_rows)
        return index

    def _next_positions(self, count: int, skip: torch.Tensor) -> torch.Tensor:
        """The next ``count`` positions from the cursor, leaving out those in ``skip``
        (unless a whole lap finds no other), and moves the cursor past them."""
        size = self._storage._max_size_along_dim0()
        skipped = set(skip.reshape(-1).tolist())
        cursor, scanned, positions = self._cursor, 0, []
        while len(positions) < count:
            if cursor not in skipped or scanned >= size:
                positions.append(cursor)
            cursor = (cursor + 1) % size
            scanned += 1
        self._cursor = cursor
        return torch.tensor(positions, dtype=torch.long)

    def write_at(self, index: int | torch.Tensor, data: Any) -> int | torch.Tensor:
        """Writes ``data`` at the given storage ``index`` (the cursor does not move)."""
        storage = self._storage
        if isinstance(index, (int, np.integer)):
            data = self._prepare(data, torch.tensor(int(index)))
            storage.set(int(index), data)
            self._write_count += 1
            self._bump_generation(int(index))
            return index
        index = torch.as_tensor(index, dtype=torch.int64).reshape(-1)
        data = self._prepare(data, index)
        storage.set(index, data)
        self._write_count += index.numel()
        self._bump_generation(index)
        return index

    def _empty(self, empty_write_count: bool = True) -> None:
        self._cursor = 0
        if empty_write_count:
            self._write_count = 0
        generation = self._generation
        if generation is not None:
            # every handle taken so far goes stale; never-written slots stay at -1
            generation[generation >= 0] += 1

    def state_dict(self) -> dict[str, Any]:
        """TorchRL's state: ``_cursor``, ``_write_count`` and, when tracked, the slots'
        ``_generation``."""
        state: dict[str, Any] = {"_cursor": self._cursor, "_write_count": self._write_count}
        if self._track_generations and self._generation is not None:
            state["_generation"] = self._generation.clone()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a state saved by :meth:`state_dict` (``cursor``/``write_count`` without
        the underscore load too)."""
        self._cursor = int(_state_entry(self, state_dict, "cursor"))
        if "_write_count" in state_dict or "write_count" in state_dict:  # optional, as TorchRL
            self._write_count = int(_state_entry(self, state_dict, "write_count"))
        generation = state_dict.get("_generation", state_dict.get("generation"))
        if generation is not None:
            self._generation = generation.clone()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(cursor={self._cursor}, write_count={self._write_count})"


def _state_entry(writer: Writer, state_dict: dict[str, Any], name: str) -> Any:
    """Reads ``_name`` (TorchRL's spelling) or ``name`` from a writer state dict."""
    for key in (f"_{name}", name):
        if key in state_dict:
            return state_dict[key]
    raise KeyError(
        f"{type(writer).__name__}.load_state_dict needs the key '_{name}', got keys "
        f"{sorted(state_dict)}"
    )


def _set_index(data: TensorDictBase, index: torch.Tensor) -> TensorDictBase:
    if not isinstance(data, TensorDictBase):
        raise TypeError(f"a TensorDict writer needs TensorDict data, got {type(data).__name__}")
    index = index.to(data.device) if data.device is not None else index
    if index.ndim == 2 and index.shape[0] == data.batch_size.numel() and data.batch_dims > 1:
        # [N, ndim] coordinates of the items of a multi-dimensional storage
        data.set("index", index.reshape(*data.batch_size, index.shape[-1]))
        return data
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


class NotATensorCollectionError(TypeError, RuntimeError):
    """Data that is not a TensorDict given to a writer that reads its keys (a
    ``TypeError``, and a ``RuntimeError`` as TorchRL raises there)."""


_REDUCTIONS = {
    "sum": lambda x: x.sum(-1),
    "max": lambda x: x.max(-1).values,
    "min": lambda x: x.min(-1).values,
    "mean": lambda x: x.mean(-1),
    "median": lambda x: x.median(-1).values,
}


def _slot_takers(stored: torch.Tensor, ranks: torch.Tensor, max_size: int) -> int:
    """How many of ``ranks``, written in turn, take a slot: a free one, or the slot of the
    lowest rank stored at that moment when they outrank it (TorchRL 0.14's count)."""
    heap = stored.tolist()
    heapq.heapify(heap)
    taken = 0
    for rank in ranks.tolist():
        if len(heap) < max_size:
            heapq.heappush(heap, rank)
        elif rank > heap[0]:
            heapq.heapreplace(heap, rank)
        else:
            continue
        taken += 1
    return taken


class TensorDictMaxValueWriter(Writer):
    """Keeps the ``max_size`` items with the highest ``rank_key`` value.

    When the storage is full, a new item replaces the lowest-ranked stored item if it ranks
    higher, and is dropped otherwise (its ``"index"`` is then ``-1``).

    ``write_count`` follows TorchRL 0.14: ``extend`` counts an item when it takes a slot
    at its turn (a free slot, or the lowest-ranked one when it outranks it), even if a
    later item of the same batch displaces it; ``add`` counts its item when it is stored.

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
        compilable: bool = False,
    ) -> None:
        super().__init__(compilable=compilable)
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
            raise NotATensorCollectionError(
                f"TensorDictMaxValueWriter expects data to be a tensor collection (a "
                f"TensorDict), got {type(data).__name__}"
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

    @property
    def _cursor(self) -> int:
        """TorchRL's cursor: the next free slot while the storage fills, ``0`` once full."""
        return self._count % self._storage.max_size if self._storage is not None else 0

    @property
    def _current_top_values(self) -> list[tuple[float, int]]:
        """TorchRL's view of the kept items: a min-heap of ``(rank, storage index)``."""
        if self._ranks is None:
            return []
        heap = list(zip(self._ranks[: self._count].tolist(), range(self._count), strict=True))
        heapq.heapify(heap)
        return heap

    def add(self, data: TensorDictBase) -> int:
        ranks = self._rank(data, batched=False)
        index = self._write(data.unsqueeze(0), ranks, count_all=False)
        return int(index[0])

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        return self._write(data, self._rank(data, batched=True), count_all=True)

    def _write(self, data: TensorDictBase, ranks: torch.Tensor, count_all: bool) -> torch.Tensor:
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
        # as TorchRL 0.14: extend counts an item that takes a slot at its turn (even if a
        # later item of the batch displaces it), add only a stored one (the count still
        # moves whenever the storage changes, which HERReplayBuffer relies on)
        if count_all and count + n > max_size:
            self._write_count += _slot_takers(pool[:count], ranks, max_size)
        else:
            self._write_count += n if count_all else int(written.sum())
        if written.any():
            chosen = written.nonzero().squeeze(-1)
            part = data[chosen]
            _set_index(part, slots[chosen])
            self._storage.set(slots[chosen], part)
        _set_index(data, slots)
        return slots

    def _empty(self, empty_write_count: bool = True) -> None:
        self._count = 0
        if empty_write_count:
            self._write_count = 0
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
