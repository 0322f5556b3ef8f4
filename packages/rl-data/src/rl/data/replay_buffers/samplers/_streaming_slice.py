"""``StreamingSliceSampler``: serves each newly completed fixed-length window of a
chronological stream once, then falls back to uniform :class:`SliceSampler` slices."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch
from tensordict.utils import NestedKey

from rl.data.replay_buffers._utils import as_index_tensor
from rl.data.replay_buffers.samplers._sampler import EMPTY_STORAGE_ERROR
from rl.data.replay_buffers.samplers._slice import SliceSampler
from rl.data.replay_buffers.storages._base import Storage
from rl.data.replay_buffers.storages._tensor import TensorStorage

__all__ = ["StreamingSliceSampler"]

_MASK_KEY = ("collector", "mask")


def _empty_long(*shape: int) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.long)


class StreamingSliceSampler(SliceSampler):
    """A :class:`SliceSampler` that first serves the windows completed by the latest writes.

    Every write the buffer makes is cut, in the order it arrives, into non-overlapping
    windows of ``slice_len`` consecutive items. A window never crosses a trajectory
    boundary: an end flag (``end_key`` / ``end_keys``), a change of trajectory id
    (``traj_key``) or a start flag (``init_key``). The items left over at the end of a
    write wait for the next write of the same trajectory, which completes the window.
    Each completed window is queued once; :meth:`sample` returns queued windows first,
    oldest first, and fills the rest of the batch with uniform :class:`SliceSampler`
    slices. A queued window whose slots were written again before it was sampled (the
    ring wrapped over it) is dropped: the sampler keeps a write count per slot and
    compares it with the counts the window was queued with.

    The sampler follows the writes of the buffer it belongs to (``rb.add`` / ``rb.extend``
    tell it the indices written); it is meant for 1-dimensional tensor storages filled in
    chronological order, such as one buffer per environment stream. ``rb.mark_update``
    (items rewritten in place) drops the queued windows over those items. Writes made
    directly to the storage, bypassing the buffer, are not seen.

    Args:
        slice_len: the length of every queued and sampled slice (keyword only, as every
            argument).
        end_key, end_keys, traj_key, cache_values, truncated_key, init_key, strict_length,
            pad_output, compile, span, use_gpu: as in :class:`SliceSampler`; they shape the
            uniform fallback slices, and the boundary keys also cut the queued windows.

    Raises:
        TypeError: ``slice_len`` is not an int; (at a write) the storage is not a tensor
            storage.
        ValueError: ``slice_len`` is below 1; (at a write) the storage has more than one
            dimension or holds fewer than ``slice_len`` items.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, StreamingSliceSampler, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(
        ...     storage=LazyTensorStorage(16),
        ...     sampler=StreamingSliceSampler(slice_len=3),
        ...     batch_size=6,
        ... )
        >>> done = torch.zeros(6, 1, dtype=torch.bool)
        >>> _ = rb.extend(TensorDict({"value": torch.arange(6), ("next", "done"): done}, [6]))
        >>> rb.sample()["value"].reshape(2, 3)
        tensor([[0, 1, 2],
                [3, 4, 5]])
    """

    def __init__(
        self,
        *,
        slice_len: int,
        end_key: NestedKey | None = None,
        end_keys: list[NestedKey] | None = None,
        traj_key: NestedKey | None = None,
        cache_values: bool = False,
        truncated_key: NestedKey | None = ("next", "truncated"),
        init_key: NestedKey | None = "is_init",
        strict_length: bool = True,
        pad_output: bool = False,
        compile: bool | dict = False,
        span: bool | int | tuple[bool | int, bool | int] = False,
        use_gpu: torch.device | bool = False,
    ) -> None:
        if isinstance(slice_len, bool) or not isinstance(slice_len, (int, np.integer)):
            raise TypeError(f"slice_len must be a positive int, got {slice_len!r}")
        if slice_len < 1:
            raise ValueError(f"slice_len must be a positive int, got {slice_len}")
        super().__init__(
            slice_len=int(slice_len),
            end_key=end_key,
            end_keys=end_keys,
            traj_key=traj_key,
            cache_values=cache_values,
            truncated_key=truncated_key,
            init_key=init_key,
            strict_length=strict_length,
            pad_output=pad_output,
            compile=compile,
            span=span,
            use_gpu=use_gpu,
        )
        self._storage: Storage | None = None
        self._reset_stream()

    def _reset_stream(self) -> None:
        # per slot, how many times it was written (grown on demand up to the capacity)
        self._slot_versions = _empty_long(0)
        # the queued windows in chunks of [k, slice_len] (indices, versions), oldest first;
        # the first _queue_head rows of the first chunk were already taken
        self._queue: deque[tuple[torch.Tensor, torch.Tensor]] = deque()
        self._queue_head = 0
        self._queue_len = 0
        # the items of an unfinished window waiting for the next write of their trajectory
        self._pending_indices = _empty_long(0)
        self._pending_versions = _empty_long(0)
        # the trajectory id and end flag of the last item written
        self._last_traj: torch.Tensor | None = None
        self._last_done = False

    def _attach_storage(self, storage: Storage) -> None:
        self._storage = storage

    # -- writes -----------------------------------------------------------------------------------
    def add(self, index: int | torch.Tensor) -> None:
        self.extend(index)

    def extend(self, index: torch.Tensor) -> None:
        super().extend(index)
        if self._storage is not None:
            self.mark_update(index, storage=self._storage)

    def mark_update(self, index: Any, *, storage: Storage | None = None) -> None:
        """Records that the items at ``index`` were written.

        With ``storage`` (what the buffer passes after each ``add``/``extend``), the items
        are a new chronological chunk of the stream: they complete windows that are queued.
        Without it (``rb.mark_update``: items rewritten in place), the queued windows and
        the unfinished window over these items are dropped.
        """
        self._cache = None
        if storage is None:
            index = as_index_tensor(index).cpu()
            index = index[(index >= 0) & (index < self._slot_versions.numel())]
            if index.numel():
                self._slot_versions.index_put_((index,), torch.ones_like(index), accumulate=True)
            return
        self._check_storage(storage)
        if isinstance(index, torch.Tensor) and index.ndim == 2:
            index = index[:, 0]
        index = as_index_tensor(index).cpu()
        if index.numel() > storage.max_size:  # the first items were overwritten by the last
            index = index[-storage.max_size :]
        if not index.numel():
            return
        versions = self._bump_versions(index, storage.max_size)
        if self._pending_indices.numel() and not torch.equal(
            self._slot_versions[self._pending_indices], self._pending_versions
        ):
            self._pending_indices, self._pending_versions = _empty_long(0), _empty_long(0)
        self._cut_windows(storage, index, versions)
        # windows are disjoint: more than capacity // slice_len of them cannot all be live
        self._trim_queue(storage.max_size // self.slice_len)

    def _check_storage(self, storage: Storage) -> None:
        if not isinstance(storage, TensorStorage):
            raise TypeError(
                f"{type(self).__name__} needs a tensor storage (LazyTensorStorage, "
                f"LazyMemmapStorage, ...), got {type(storage).__name__}"
            )
        if storage.ndim != 1:
            raise ValueError(
                f"{type(self).__name__} needs a 1-dimensional storage, got ndim={storage.ndim}"
            )
        if storage.max_size < self.slice_len:
            raise ValueError(
                f"the storage holds {storage.max_size} items, fewer than one window of "
                f"slice_len={self.slice_len}"
            )

    def _bump_versions(self, index: torch.Tensor, capacity: int) -> torch.Tensor:
        """Counts one more write of every slot in ``index``; returns each item's count."""
        need = int(index.max()) + 1
        have = self._slot_versions.numel()
        if need > have:
            grown = torch.zeros(min(capacity, max(need, 2 * have, 1024)), dtype=torch.long)
            grown[:have] = self._slot_versions
            self._slot_versions = grown
        if index.unique().numel() == index.numel():
            versions = self._slot_versions[index] + 1
            self._slot_versions[index] = versions
            return versions
        versions = torch.empty_like(index)  # a slot written twice: the later item counts more
        for position, slot in enumerate(index.tolist()):
            self._slot_versions[slot] += 1
            versions[position] = self._slot_versions[slot]
        return versions

    def _flags(self, storage: TensorStorage, key: NestedKey, index: torch.Tensor) -> torch.Tensor:
        return (
            storage._column(key)
            .index_select(0, index.to(storage.device))
            .reshape(index.numel(), -1)
            .cpu()
        )

    def _cut_windows(
        self, storage: TensorStorage, index: torch.Tensor, versions: torch.Tensor
    ) -> None:
        n = index.numel()
        if self._traj_key_auto:
            self._resolve_traj_key(storage)
        done = torch.zeros(n, dtype=torch.bool)
        for key in self.end_keys or [self.end_key]:
            if storage._has_key(key):
                done |= self._flags(storage, key, index).any(-1)
        traj = None
        if self._fetch_traj and self.traj_key is not None and storage._has_key(self.traj_key):
            traj = self._flags(storage, self.traj_key, index)
        # a boundary before item i: it starts a trajectory
        starts_here = torch.zeros(n, dtype=torch.bool)
        if self.init_key is not None and storage._has_key(self.init_key):
            starts_here |= self._flags(storage, self.init_key, index).any(-1)
        starts_here[1:] |= done[:-1]
        if traj is not None:
            starts_here[1:] |= (traj[1:] != traj[:-1]).any(-1)
            if self._last_traj is not None:
                last = self._last_traj
                starts_here[0] |= last.shape != traj[0].shape or bool((traj[0] != last).any())
        starts_here[0] |= self._last_done
        # an unfinished window of the same trajectory goes in front of this write
        if self._pending_indices.numel() and not bool(starts_here[0]):
            carried = self._pending_indices.numel()
            index = torch.cat([self._pending_indices, index])
            versions = torch.cat([self._pending_versions, versions])
        else:
            carried = 0
        self._pending_indices, self._pending_versions = _empty_long(0), _empty_long(0)
        total = index.numel()
        # segments (runs of one trajectory) of this write, the carried items in the first
        is_start = torch.zeros(total, dtype=torch.bool)
        is_start[0] = True
        is_start[carried + 1 :] = starts_here[1:]
        seg_starts = is_start.nonzero().squeeze(-1)
        seg_lens = torch.diff(seg_starts, append=torch.tensor([total]))
        # the items of complete windows: offset within the segment below its whole windows
        # (gathers rather than repeat_interleave, which is slow on small tensors)
        seg_of = torch.cumsum(is_start, 0) - 1
        offset = torch.arange(total) - seg_starts[seg_of]
        whole = (seg_lens // self.slice_len * self.slice_len)[seg_of]
        in_window = offset < whole
        if bool(in_window.any()):
            self._queue.append(
                (
                    index[in_window].reshape(-1, self.slice_len),
                    versions[in_window].reshape(-1, self.slice_len),
                )
            )
            self._queue_len += int(in_window.sum()) // self.slice_len
        if not bool(done[-1]):
            tail = ~in_window
            tail[: int(seg_starts[-1])] = False
            self._pending_indices = index[tail].clone()
            self._pending_versions = versions[tail].clone()
        self._last_traj = None if traj is None else traj[-1].clone()
        self._last_done = bool(done[-1])

    def _trim_queue(self, keep: int) -> None:
        while self._queue_len > keep:
            chunk, _ = self._queue[0]
            drop = min(self._queue_len - keep, chunk.shape[0] - self._queue_head)
            self._queue_head += drop
            self._queue_len -= drop
            if self._queue_head == chunk.shape[0]:
                self._queue.popleft()
                self._queue_head = 0

    def _take_queued(self, count: int) -> torch.Tensor:
        """Up to ``count`` queued windows whose slots were not written since, oldest first."""
        taken = []
        while count and self._queue:
            chunk, versions = self._queue[0]
            stop = min(self._queue_head + count, chunk.shape[0])
            rows, row_versions = chunk[self._queue_head : stop], versions[self._queue_head : stop]
            self._queue_len -= stop - self._queue_head
            self._queue_head = stop
            if stop == chunk.shape[0]:
                self._queue.popleft()
                self._queue_head = 0
            inside = rows.amax(-1) < self._slot_versions.numel()
            live = inside.clone()
            live[inside] = (self._slot_versions[rows[inside]] == row_versions[inside]).all(-1)
            taken.append(rows[live])
            count -= int(live.sum())
        if not taken:
            return _empty_long(0, self.slice_len)
        return torch.cat(taken)

    # -- sampling ---------------------------------------------------------------------------------
    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        if len(storage) == 0:
            raise RuntimeError(EMPTY_STORAGE_ERROR)
        num_slices, slice_len = self._shape(batch_size)
        fresh = self._take_queued(num_slices)
        if not fresh.shape[0]:
            return super().sample(storage, batch_size)
        last = torch.zeros(fresh.shape, dtype=torch.bool)
        last[:, -1] = True
        index = self._storage_index(storage, fresh.reshape(-1))
        info = self._info(storage, index, last.reshape(-1))
        left = num_slices - fresh.shape[0]
        if not left:
            return index, info
        rest, rest_info = super().sample(storage, left * slice_len)
        if _MASK_KEY in rest_info:  # the fallback slices were padded: the fresh ones are real
            info[_MASK_KEY] = torch.ones(index.shape[0], dtype=torch.bool, device=index.device)
        merged = {key: torch.cat([info[key], rest_info[key]]) for key in rest_info}
        return torch.cat([index, rest]), merged

    # -- checkpoints ------------------------------------------------------------------------------
    def _empty(self) -> None:
        super()._empty()
        self._reset_stream()

    def _queued(self) -> tuple[torch.Tensor, torch.Tensor]:
        if not self._queue:
            return _empty_long(0, self.slice_len), _empty_long(0, self.slice_len)
        indices = torch.cat([chunk for chunk, _ in self._queue])[self._queue_head :]
        versions = torch.cat([chunk for _, chunk in self._queue])[self._queue_head :]
        return indices, versions

    def state_dict(self) -> dict[str, Any]:
        """The :class:`SliceSampler` state, the per-slot write counts, the queued windows
        (``[Q, slice_len]`` indices and counts), the unfinished window and the last item's
        trajectory id and end flag (tensors and plain values only)."""
        queued_indices, queued_versions = self._queued()
        state = super().state_dict()
        state.update(
            slice_len=self.slice_len,
            slot_versions=self._slot_versions.clone(),
            queued_indices=queued_indices.clone(),
            queued_versions=queued_versions.clone(),
            pending_indices=self._pending_indices.clone(),
            pending_versions=self._pending_versions.clone(),
            last_traj=None if self._last_traj is None else self._last_traj.clone(),
            last_was_done=self._last_done,
        )
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores a :meth:`state_dict`.

        Raises:
            ValueError: the state was saved with another ``slice_len`` (nothing is changed).
        """
        slice_len = int(state_dict["slice_len"])
        if slice_len != self.slice_len:
            raise ValueError(
                f"the state was saved with slice_len={slice_len}, this sampler has "
                f"slice_len={self.slice_len}"
            )
        super().load_state_dict(state_dict)
        self._reset_stream()
        self._slot_versions = torch.as_tensor(state_dict["slot_versions"]).long().clone()
        queued = torch.as_tensor(state_dict["queued_indices"]).long().reshape(-1, slice_len)
        if queued.shape[0]:
            versions = torch.as_tensor(state_dict["queued_versions"]).long()
            self._queue.append((queued.clone(), versions.reshape(-1, slice_len).clone()))
            self._queue_len = queued.shape[0]
        self._pending_indices = torch.as_tensor(state_dict["pending_indices"]).long().clone()
        self._pending_versions = torch.as_tensor(state_dict["pending_versions"]).long().clone()
        last_traj = state_dict.get("last_traj")
        self._last_traj = None if last_traj is None else torch.as_tensor(last_traj).clone()
        self._last_done = bool(state_dict["last_was_done"])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(slice_len={self.slice_len}, end_key={self.end_key!r}, "
            f"traj_key={self.traj_key!r}, queued={self._queue_len})"
        )
