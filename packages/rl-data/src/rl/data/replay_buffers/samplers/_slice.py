"""Trajectory-slice samplers: ``SliceSampler`` and ``SliceSamplerWithoutReplacement``
(``PrioritizedSliceSampler`` is in ``_prioritized_slice.py``)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict.utils import NestedKey

from rl.data.replay_buffers._utils import KeyMismatchError, as_index_tensor
from rl.data.replay_buffers.samplers._random import SamplerWithoutReplacement
from rl.data.replay_buffers.samplers._sampler import EMPTY_STORAGE_ERROR, Sampler
from rl.data.replay_buffers.storages._base import Storage


def _as_flag_shape(flags: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``flags`` (``[N, 1]``) broadcastable against ``like`` (``[N, *F]``)."""
    return flags.reshape(like.shape[:1] + (1,) * (like.ndim - 1))


def _as_key(key: NestedKey) -> NestedKey:
    if isinstance(key, tuple) and len(key) == 1:
        return key[0]
    return key


class SliceSampler(Sampler):
    """Samples contiguous slices of stored trajectories.

    Trajectories are delimited by ``end_key`` (a done flag, ``("next", "done")`` by default)
    or by ``traj_key`` (a trajectory id such as ``("collector", "traj_ids")``). Given both,
    ``traj_key`` is used when the storage holds it and ``end_key`` otherwise; given one that
    the storage lacks, the other (or ``("collector", "traj_ids")`` / ``"episode"``) is tried.
    Given neither, the first sample picks, as TorchRL, ``("collector", "traj_ids")``, then
    ``"episode"``, then ``("next", "done")``, whichever the storage holds first
    (``traj_key`` then names the ids found).
    In a multi-dimensional storage (``ndim=2``, rows of ``[T, B]``) each column is a
    sequence of its own: a slice never crosses from one column to the next. A slice never
    crosses a trajectory boundary, the end of the stored data or the newest write of a full
    (wrapped) storage. A batch of ``batch_size`` items holds ``num_slices`` slices of
    ``slice_len`` consecutive items, slice after slice; the last item of every slice is
    marked truncated (``truncated_key``, and the matching ``done`` flag).

    Args:
        num_slices: the number of slices in a batch (``slice_len = batch_size // num_slices``).
        slice_len: the length of a slice (``num_slices = batch_size // slice_len``); give
            exactly one of the two.
        end_key: the key marking the last step of a trajectory.
        traj_key: the key holding a trajectory id (instead of ``end_key``).
        cache_values: keep the trajectory boundaries until the storage changes (any write
            to it, through this buffer or another one sharing it).
        truncated_key: where the end-of-slice flags are written.
        strict_length: only sample trajectories at least ``slice_len`` long; otherwise
            shorter trajectories give shorter slices (and a smaller batch).
        compile, use_gpu: accepted for TorchRL compatibility (the boundaries are computed
            with a few vectorized torch ops on the CPU).
        end_keys: several end flags (a trajectory ends where any of them is set), used
            instead of ``end_key`` (giving both raises); the keys the storage lacks are
            skipped.
        ends, trajectories: the end flags or trajectory ids of the stored items, given
            once (with ``cache_values=True``) instead of read from the storage.
        span: lets slices run over the beginning (``span[0]``) and the end (``span[1]``) of
            their trajectory, where they are cut short: ``True`` keeps at least one item,
            an int ``i`` at least ``slice_len - i``; one value sets both sides. The start
            is drawn as TorchRL draws it, so seeded samples match TorchRL's.
        pad_output: with ``strict_length=False``, when a stored trajectory is shorter than
            ``slice_len``, every slice is padded to ``slice_len`` by repeating its last
            item, and ``("collector", "mask")`` flags the real items (TorchRL discourages
            it: the truncation flags already delimit the slices).
        fragmented: rebuild trajectories from the trajectory id (``traj_key``, or the
            usual fallbacks) and the step number (``step_key``) of every item, so that
            steps written apart (several collectors sharing a buffer) are still sliced in
            order; a missing step splits a trajectory. 1-D storages, :class:`SliceSampler`
            only; ``span`` is not supported with it. A repeated (id, step) pair raises.
        step_key: the key of the step numbers (``fragmented=True``); ``"step_count"`` by
            default, as TorchRL (what :class:`~rl.envs.StepCounter` writes).
        init_key: where the first item of every slice is flagged (or'ed with the stored
            flags) so that a recurrent module restarts from the stored hidden state at
            each slice; only when the storage holds the key (an ``InitTracker`` wrote it).
            ``None`` returns the stored flags untouched.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(
        ...     storage=LazyTensorStorage(100), sampler=SliceSampler(slice_len=4), batch_size=8
        ... )
        >>> episode = torch.tensor([0] * 5 + [1] * 7)
        >>> done = torch.zeros(12, 1, dtype=torch.bool)
        >>> done[[4, 11]] = True
        >>> _ = rb.extend(
        ...     TensorDict({"episode": episode, ("next", "done"): done}, batch_size=[12])
        ... )
        >>> batch = rb.sample()
        >>> [len(set(s.tolist())) for s in batch["episode"].split(4)]
        [1, 1]
    """

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        end_key: NestedKey | None = None,
        traj_key: NestedKey | None = None,
        cache_values: bool = False,
        truncated_key: NestedKey | None = ("next", "truncated"),
        strict_length: bool = True,
        compile: bool = False,
        use_gpu: bool = False,
        end_keys: list[NestedKey] | None = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        span: bool | int | tuple[bool | int, bool | int] = False,
        pad_output: bool = False,
        fragmented: bool = False,
        step_key: NestedKey | None = "step_count",
        init_key: NestedKey | None = "is_init",
    ) -> None:
        if fragmented:
            if type(self).sample is not SliceSampler.sample:
                raise NotImplementedError(
                    f"fragmented=True is supported by SliceSampler only, not {type(self).__name__}"
                )
            if step_key is None:
                raise ValueError("fragmented=True needs step_key (the step number of each item)")
            if ends is not None or trajectories is not None:
                raise ValueError(
                    "fragmented=True rebuilds trajectories from traj_key and step_key; it "
                    "takes no static ends or trajectories"
                )
            if any(span if isinstance(span, tuple) else (span,)):
                raise NotImplementedError("span is not supported with fragmented=True")
        if pad_output and strict_length:
            raise ValueError(
                "pad_output=True is incompatible with strict_length=True: only slices of "
                "trajectories shorter than slice_len need padding; pass strict_length=False"
            )
        if isinstance(span, bool | int):
            span = (span, span)
        if len(span) != 2 or any(not isinstance(x, bool | int) or x < 0 for x in span):
            raise ValueError(
                f"span must be a bool, a non-negative int or a pair of them, got {span!r}"
            )
        for side, value in zip(("left", "right"), span, strict=True):
            width = slice_len if slice_len is not None else None
            if value is not True and value and width is not None and value >= width:
                raise ValueError(f"the {side} span ({value}) must be lower than slice_len={width}")
        self.span = tuple(span)
        self.pad_output = bool(pad_output)
        self.fragmented = bool(fragmented)
        self.step_key = None if step_key is None else _as_key(step_key)
        self._order: torch.Tensor | None = None  # fragmented: sorted position -> storage index
        if (ends is not None or trajectories is not None) and (
            end_key is not None or traj_key is not None or end_keys is not None
        ):
            raise RuntimeError(
                "ends and trajectories exclude end_key, end_keys and traj_key: the "
                "boundaries are given, not read from the storage"
            )
        if ends is not None and trajectories is not None:
            raise RuntimeError("pass ends or trajectories, not both")
        if end_key is not None and end_keys is not None:
            raise RuntimeError(
                f"end_key and end_keys are exclusive: got end_key={end_key!r} and "
                f"end_keys={end_keys!r}; pass the flags as end_keys only"
            )
        if (ends is not None or trajectories is not None) and not cache_values:
            raise RuntimeError("ends and trajectories need cache_values=True")
        if (num_slices is None) == (slice_len is None):
            raise ValueError(
                f"give exactly one of num_slices and slice_len, got num_slices={num_slices} "
                f"and slice_len={slice_len}"
            )
        for name, value in (("num_slices", num_slices), ("slice_len", slice_len)):
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        # with both keys, traj_key is used when the storage holds it, end_key otherwise
        self._traj_first = traj_key is not None
        # neither given: the first sample picks, as TorchRL, trajectory ids written by a
        # collector, then "episode", then the done flags (traj_key then names the ids)
        self._traj_key_auto = traj_key is None and end_key is None and end_keys is None
        self._fetch_traj = traj_key is not None or self._traj_key_auto
        if end_key is None:
            end_key = ("next", "done")
        self.num_slices = num_slices
        self.slice_len = slice_len
        self.end_key = None if end_key is None else _as_key(end_key)
        self.traj_key = None if traj_key is None else _as_key(traj_key)
        self.cache_values = bool(cache_values)
        self.truncated_key = None if truncated_key is None else _as_key(truncated_key)
        self.init_key = None if init_key is None else _as_key(init_key)
        self.strict_length = bool(strict_length)
        self._cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._cache_key: tuple[int, int] | None = None  # (storage, its revision) it was made for
        self._last_written = -1
        self.end_keys = None if end_keys is None else [_as_key(k) for k in end_keys]
        self._static = None
        if ends is not None:
            self._static = (torch.as_tensor(ends).reshape(len(ends), -1), False)
        elif trajectories is not None:
            self._static = (torch.as_tensor(trajectories).reshape(len(trajectories), -1), True)

    # -- bookkeeping -----------------------------------------------------------------------------
    def add(self, index: int | torch.Tensor) -> None:
        self.extend(index)

    def extend(self, index: torch.Tensor) -> None:
        if isinstance(index, torch.Tensor) and index.ndim == 2:
            index = index[:, 0]  # the rows of [N, ndim] coordinates
        index = as_index_tensor(index)
        index = index[index >= 0]
        if index.numel():
            self._last_written = int(index[-1])
        self._cache = None

    def _empty(self) -> None:
        self._cache = None
        self._last_written = -1

    def state_dict(self) -> dict[str, Any]:
        return {"last_written": self._last_written}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._last_written = int(state_dict.get("last_written", -1))
        self._cache = None

    # -- trajectories ----------------------------------------------------------------------------
    def _boundary_key(self, storage: Storage) -> tuple[NestedKey, bool]:
        """The key delimiting trajectories in this storage and whether it holds ids."""
        if self._traj_key_auto:
            self._resolve_traj_key(storage)
        candidates: list[tuple[NestedKey, bool]] = [(self.end_key, False)]
        if self.traj_key is not None:
            candidates.insert(0 if self._traj_first else 1, (self.traj_key, True))
        else:
            candidates += [(("collector", "traj_ids"), True), ("episode", True)]
        for key, is_id in candidates:
            if storage._has_key(key):
                return key, is_id
        return candidates[0]  # the storage's error names it and lists the stored keys

    def _resolve_traj_key(self, storage: Storage) -> None:
        for key in (("collector", "traj_ids"), "episode"):
            if storage._has_key(key):
                self.traj_key, self._traj_first = key, True
                self._traj_key_auto = False
                return
        if storage._has_key(self.end_key):
            self._fetch_traj = self._traj_key_auto = False

    def _column_view(self, storage: Storage, key: NestedKey) -> torch.Tensor:
        """``[rows * items_per_row, -1]``: the column of ``key``, one storage column after
        the other (time along each)."""
        rows = storage._len_along_dim0
        column = storage._column(key).cpu()
        if storage.ndim == 1:
            return column.reshape(rows, -1)
        inner = storage.shape[1:].numel()
        return column.reshape(rows, inner, -1).transpose(0, 1).reshape(rows * inner, -1)

    def _trajectories(self, storage: Storage) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns ``(starts, lengths, ends)`` of the stored trajectories (CPU int64 tensors).

        Positions are flat over the storage's columns (``column * rows + row``); see
        :meth:`_storage_index`.
        """
        key = (id(storage), storage._mutation_revision)
        if self.cache_values and self._cache is not None and self._cache_key == key:
            return self._cache
        if not hasattr(storage, "_column"):
            raise TypeError(f"{type(self).__name__} needs a tensor storage, got {storage}")
        rows = storage._len_along_dim0
        if self.fragmented:
            return self._fragmented_runs(storage)
        if self._static is not None:
            if storage.ndim > 1:
                raise ValueError("ends/trajectories describe a storage with ndim=1")
            column, is_id = self._static[0][:rows].cpu(), self._static[1]
        elif self.end_keys is not None:
            present = [k for k in self.end_keys if storage._has_key(k)]
            if not present:
                raise KeyError(f"the storage holds none of the end_keys {self.end_keys}")
            flags = [self._column_view(storage, k) for k in present]
            column = torch.cat([f.reshape(f.shape[0], -1) != 0 for f in flags], -1)
            is_id = False
        else:
            key, is_id = self._boundary_key(storage)
            column = self._column_view(storage, key)
        n = column.shape[0]
        if not is_id:
            boundary = column.any(-1) if column.dtype == torch.bool else (column != 0).any(-1)
        else:
            column = column[:, 0]
            boundary = torch.zeros(n, dtype=torch.bool)
            boundary[:-1] = column[1:] != column[:-1]
        boundary = boundary.clone().reshape(-1, rows)
        boundary[:, rows - 1] = True  # every column ends with its last row
        if 0 <= self._last_written < rows:
            boundary[:, self._last_written] = True
        ends = boundary.reshape(-1).nonzero().squeeze(-1)
        starts = torch.cat([ends.new_zeros(1), ends[:-1] + 1])
        result = (starts, ends - starts + 1, ends)
        if self.cache_values:
            self._cache, self._cache_key = result, key
        return result

    def _fragmented_runs(self, storage: Storage) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Runs of consecutive steps of one trajectory, over items sorted by (id, step)."""
        if storage.ndim != 1:
            raise NotImplementedError("fragmented=True supports storages with ndim=1 only")
        candidates = (
            [self.traj_key] if self.traj_key is not None else [("collector", "traj_ids"), "episode"]
        )
        key = next((k for k in candidates if storage._has_key(k)), None)
        if key is None or not storage._has_key(self.step_key):
            raise KeyMismatchError(
                f"fragmented=True reads trajectory ids ({' or '.join(map(repr, candidates))}) "
                f"and step numbers ({self.step_key!r}); the storage lacks "
                f"{self.step_key if key is not None else candidates[0]!r}"
            )
        traj = storage._column(key).reshape(len(storage), -1)[:, 0].cpu().long()
        step = storage._column(self.step_key).reshape(len(storage), -1)[:, 0].cpu().long()
        order = torch.argsort(step, stable=True)
        order = order[torch.argsort(traj[order], stable=True)]
        traj, step = traj[order], step[order]
        same = (traj[1:] == traj[:-1]) & (step[1:] == step[:-1])
        if bool(same.any()):
            k = int(same.nonzero()[0])
            raise ValueError(
                f"fragmented=True needs unique (trajectory, step) pairs, got trajectory "
                f"{int(traj[k])} step {int(step[k])} twice"
            )
        boundary = torch.ones(traj.shape[0], dtype=torch.bool)
        boundary[:-1] = (traj[1:] != traj[:-1]) | (step[1:] != step[:-1] + 1)
        ends = boundary.nonzero().squeeze(-1)
        starts = torch.cat([ends.new_zeros(1), ends[:-1] + 1])
        self._order = order
        result = (starts, ends - starts + 1, ends)
        if self.cache_values:
            self._cache, self._cache_key = result, (id(storage), storage._mutation_revision)
        return result

    def _storage_index(self, storage: Storage, position: torch.Tensor) -> Any:
        """Flat positions of :meth:`_trajectories` to the index :meth:`Storage.get` takes."""
        if self.fragmented and self._order is not None:
            return self._order[position].to(storage.device)
        if storage.ndim == 1:
            return position.to(storage.device)
        rows = storage._len_along_dim0
        row, col = position % rows, position // rows
        coords = torch.unravel_index(col, storage.shape[1:])
        return tuple(c.to(storage.device) for c in (row, *coords))

    def _shape(self, batch_size: int) -> tuple[int, int]:
        if self.num_slices is not None:
            if batch_size % self.num_slices:
                raise ValueError(
                    f"batch_size={batch_size} is not divisible by num_slices={self.num_slices}"
                )
            return self.num_slices, batch_size // self.num_slices
        if batch_size % self.slice_len:
            raise ValueError(
                f"batch_size={batch_size} is not divisible by slice_len={self.slice_len}"
            )
        return batch_size // self.slice_len, self.slice_len

    def _eligible(self, lengths: torch.Tensor, slice_len: int) -> torch.Tensor:
        if not self.strict_length:
            return torch.arange(lengths.shape[0])
        eligible = (lengths >= slice_len).nonzero().squeeze(-1)
        if eligible.numel() == 0:
            raise RuntimeError(
                f"no stored trajectory is at least slice_len={slice_len} long (longest: "
                f"{int(lengths.max())}); store longer trajectories or pass strict_length=False"
            )
        return eligible

    def _slices(
        self, starts: torch.Tensor, lengths: torch.Tensor, slice_len: int, pad: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Random slices within the given trajectories: (flat index, end-of-slice mask,
        real-item mask when ``pad``), drawn as TorchRL draws them."""
        seq = lengths.clamp(max=slice_len)
        left, right = self.span
        for side, value in (("left", left), ("right", right)):
            if value is not True and value and value >= slice_len:
                raise ValueError(
                    f"the {side} span ({value}) must be lower than slice_len={slice_len}"
                )
        if not right:
            end = lengths - seq + 1
        elif right is True:
            end = lengths + 1
        else:
            end = lengths - right
        if not left:
            begin = torch.zeros_like(lengths)
        elif left is True:
            begin = 1 - seq
        else:
            begin = torch.full_like(lengths, -left)
        # a trajectory no longer than the right span still gives a slice within itself
        end = torch.maximum(end, begin + 1)
        draw = torch.rand(starts.shape[0], generator=self._rng)
        offset = ((draw * (end - begin)).floor().long() + begin).clamp(max=lengths - 1)
        if left:
            seq = torch.where(offset < 0, seq + offset, seq)
            offset = offset.clamp(min=0)
        if right:
            seq = torch.minimum(seq, lengths - offset)
        first = starts + offset
        if pad:
            position = torch.arange(slice_len).expand(starts.shape[0], slice_len)
            real = position < seq[:, None]
            last_real = first + (seq - 1).clamp(min=0)
            index = torch.where(real, first[:, None] + position, last_real[:, None])
            last = position == (seq - 1)[:, None]
            return index.reshape(-1), last.reshape(-1), real.reshape(-1)
        if bool((seq == slice_len).all()):
            index = (first[:, None] + torch.arange(slice_len)).reshape(-1)
            last = torch.zeros(starts.shape[0], slice_len, dtype=torch.bool)
            last[:, -1] = True
            return index, last.reshape(-1), None
        total = int(seq.sum())
        slice_start = torch.cumsum(seq, 0) - seq
        position = torch.arange(total) - torch.repeat_interleave(slice_start, seq)
        index = torch.repeat_interleave(first, seq) + position
        last = position == torch.repeat_interleave(seq - 1, seq)
        return index, last, None

    def _pad(self, lengths: torch.Tensor, slice_len: int) -> bool:
        """Whether this batch is padded: ``pad_output`` and a stored trajectory is short."""
        return self.pad_output and bool((lengths < slice_len).any())

    def _info(
        self, storage: Storage, index: Any, last: torch.Tensor, real: torch.Tensor | None = None
    ) -> dict:
        info = self._truncation_info(storage, index, last)
        if real is not None:
            info[("collector", "mask")] = real.to(storage.device)
        if self.init_key is not None and storage._has_key(self.init_key):
            # the first item of every slice starts a sequence for a recurrent module; the
            # stored resets inside a slice are kept. A storage without the key (no
            # InitTracker) gets none: the resets it would report are unknown.
            after_end = torch.ones_like(last)
            after_end[1:] = last[:-1] if real is None else last[:-1] | ~real[:-1]
            first = after_end if real is None else after_end & real
            stored = self._stored_flags(storage, self.init_key, index)
            info[self.init_key] = stored | _as_flag_shape(first.to(stored.device), stored)
        return info

    def _truncation_info(self, storage: Storage, index: Any, last: torch.Tensor) -> dict:
        """The end-of-slice flags: ``truncated`` (the last item of each slice), ``done``
        (the stored flag or'ed with it) and ``terminated`` (the stored flag, or zeros),
        all beside ``truncated_key``, as TorchRL returns them."""
        if self.truncated_key is None:
            return {}
        device = storage.device
        truncated = last.unsqueeze(-1).to(device)
        key = self.truncated_key
        sibling = (lambda name: key[:-1] + (name,)) if isinstance(key, tuple) else (lambda n: n)
        done_key, terminated_key = sibling("done"), sibling("terminated")
        done = self._stored_flags(storage, done_key, index)
        done = truncated if done is None else done | _as_flag_shape(truncated, done)
        terminated = self._stored_flags(storage, terminated_key, index)
        if terminated is None:
            terminated = torch.zeros_like(truncated)
        return {key: truncated, done_key: done, terminated_key: terminated}

    @staticmethod
    def _stored_flags(storage: Storage, key: NestedKey, index: Any) -> torch.Tensor | None:
        """The stored entry ``key`` at ``index``, or None when the storage lacks it."""
        if not storage._has_key(key):
            return None
        column = storage._column(key)
        if isinstance(index, tuple):
            return column[index]
        return column.index_select(0, index.to(column.device))

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        if len(storage) == 0:
            raise RuntimeError(EMPTY_STORAGE_ERROR)
        num_slices, slice_len = self._shape(batch_size)
        starts, lengths, _ = self._trajectories(storage)
        eligible = self._eligible(lengths, slice_len)
        chosen = eligible[torch.randint(eligible.shape[0], (num_slices,), generator=self._rng)]
        pad = self._pad(lengths, slice_len)
        index, last, real = self._slices(starts[chosen], lengths[chosen], slice_len, pad)
        index = self._storage_index(storage, index)
        return index, self._info(storage, index, last, real)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_slices={self.num_slices}, slice_len={self.slice_len}, "
            f"end_key={self.end_key!r}, traj_key={self.traj_key!r}, "
            f"strict_length={self.strict_length}, span={self.span}, pad_output={self.pad_output})"
        )


class SliceSamplerWithoutReplacement(SliceSampler, SamplerWithoutReplacement):
    """A :class:`SliceSampler` that uses every trajectory at most once per epoch.

    It is a :class:`SamplerWithoutReplacement` too (as in TorchRL), whose epochs run
    over trajectories instead of items.

    An epoch is a permutation of the (eligible) trajectories stored when it starts; each
    batch takes a random slice from each of the next ``num_slices`` of them. ``ran_out``
    turns true when the epoch is used up, which ends ``for batch in buffer``.

    Args:
        drop_last: drop the last batch of an epoch when fewer than ``num_slices``
            trajectories are left (otherwise it is smaller).
        shuffle: visit the trajectories in random order (otherwise in storage order).
        num_slices, slice_len, end_key, end_keys, traj_key, ends, trajectories,
        truncated_key, init_key, strict_length, compile, use_gpu: as in
            :class:`SliceSampler` (TorchRL's arguments; ``span``, ``pad_output`` and
            ``fragmented`` are :class:`SliceSampler`'s only).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, SliceSamplerWithoutReplacement
        >>> from rl.data import TensorDictReplayBuffer
        >>> sampler = SliceSamplerWithoutReplacement(slice_len=2, traj_key="episode")
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, batch_size=4)
        >>> _ = rb.extend(TensorDict({"episode": torch.arange(12) // 3}, batch_size=[12]))
        >>> sorted(set(torch.cat([b["episode"] for b in rb]).tolist()))
        [0, 1, 2, 3]
    """

    _epoch_based = True

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        drop_last: bool = False,
        end_key: NestedKey | None = None,
        end_keys: list[NestedKey] | None = None,
        traj_key: NestedKey | None = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        truncated_key: NestedKey | None = ("next", "truncated"),
        init_key: NestedKey | None = "is_init",
        strict_length: bool = True,
        shuffle: bool = True,
        compile: bool = False,
        use_gpu: bool = False,
    ) -> None:
        super().__init__(
            num_slices=num_slices,
            slice_len=slice_len,
            end_key=end_key,
            end_keys=end_keys,
            traj_key=traj_key,
            ends=ends,
            trajectories=trajectories,
            truncated_key=truncated_key,
            init_key=init_key,
            strict_length=strict_length,
            compile=compile,
            use_gpu=use_gpu,
        )
        self.drop_last = bool(drop_last)
        self.shuffle = bool(shuffle)
        # the trajectories left in this epoch, by their last index (stable across new
        # writes); TorchRL's name, kept in its state dict
        self._sample_list: torch.Tensor | None = None
        self.len_storage = 0  # the number of trajectories the epoch was drawn over
        self._ran_out = False

    def _remaining(self) -> int:
        return 0 if self._sample_list is None else self._sample_list.shape[0]

    def can_sample(self, storage: Storage, batch_size: int) -> bool:
        return len(storage) > 0

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        if len(storage) == 0:
            raise RuntimeError(EMPTY_STORAGE_ERROR)
        num_slices, slice_len = self._shape(batch_size)
        starts, lengths, ends = self._trajectories(storage)
        eligible = self._eligible(lengths, slice_len)
        remaining = self._remaining()
        if remaining == 0 or (self.drop_last and remaining < num_slices):
            order = (
                torch.randperm(eligible.shape[0], generator=self._rng)
                if self.shuffle
                else torch.arange(eligible.shape[0])
            )
            self._sample_list = ends[eligible[order]]
            self.len_storage = eligible.shape[0]
        picked_ends = self._sample_list[:num_slices]
        self._sample_list = self._sample_list[num_slices:]
        remaining = self._remaining()
        self._ran_out = remaining == 0 or (self.drop_last and remaining < num_slices)
        chosen = torch.searchsorted(ends, picked_ends).clamp_(max=ends.shape[0] - 1)
        pad = self._pad(lengths, slice_len)
        index, last, real = self._slices(starts[chosen], lengths[chosen], slice_len, pad)
        index = self._storage_index(storage, index)
        return index, self._info(storage, index, last, real)

    def _empty(self) -> None:
        super()._empty()
        self._sample_list = None
        self.len_storage = 0
        self._ran_out = False

    def state_dict(self) -> dict[str, Any]:
        """TorchRL's state (``len_storage``, ``_sample_list``, ``drop_last``, ``_ran_out``)
        and the newest write (where a trajectory is cut)."""
        state = super().state_dict()
        sample_list = None if self._sample_list is None else self._sample_list.clone()
        state.update(
            len_storage=self.len_storage,
            _sample_list=sample_list,
            drop_last=self.drop_last,
            _ran_out=self._ran_out,
        )
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        sample_list = state_dict["_sample_list"]
        self._sample_list = None if sample_list is None else torch.as_tensor(sample_list).clone()
        self.len_storage = int(state_dict["len_storage"])
        self.drop_last = bool(state_dict["drop_last"])
        self._ran_out = bool(state_dict["_ran_out"])


# SliceSampler(replacement=False) builds a SliceSamplerWithoutReplacement (see Sampler)
SliceSampler._without_replacement = SliceSamplerWithoutReplacement
