"""Sample units: what each item a sampler draws expands into (one transition, a window of
records around it)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal

import torch
from tensordict.utils import NestedKey

from rl.data.replay_buffers._trajectories import find_start_stop_traj
from rl.data.replay_buffers.storages._base import Storage
from rl.data.replay_buffers.storages._tensor import TensorStorage

__all__ = ["SampleUnit", "Sequence", "Transition"]

Index = torch.Tensor | tuple[torch.Tensor, ...]


class SampleUnit(ABC):
    """Turns the anchors a sampler drew into the records of a batch (TorchRL's contract).

    A buffer built with ``sample_unit=`` calls :meth:`expand` under its lock, after the
    sampler and before the storage is read: the indices it returns are those the batch
    is read from and that ``info["index"]`` reports. Entries of ``info`` with one value
    per anchor (importance weights) must come back with one per record; entries a unit
    adds (masks, provenance) become keys of TensorDict batches.
    """

    @abstractmethod
    def expand(self, index: Index, info: dict[str, Any], storage: Storage) -> tuple[Index, dict]:
        """Returns the records' ``(index, info)`` for the anchors at ``index``.

        Args:
            index: the anchors (storage positions, or a tuple of coordinates for a
                multi-dimensional storage).
            info: the sampler's info.
            storage: the storage the batch is read from (not to be modified).
        """


class Transition(SampleUnit):
    """Every anchor is one record: the usual sampling (and a buffer's default).

    Examples:
        >>> import torch
        >>> from rl.data import LazyTensorStorage, ReplayBuffer, Transition
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4, sample_unit=Transition())
        >>> _ = rb.extend(torch.arange(10))
        >>> rb.sample().shape
        torch.Size([4])
    """

    def expand(self, index: Index, info: dict[str, Any], storage: Storage) -> tuple[Index, dict]:
        return index, info


def _distances(ends: torch.Tensor, full: bool, newest: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every stored position ``[T, L]``: the steps back to the start of its
    trajectory and forward to its end (a full storage is a ring broken after
    ``newest``)."""
    T = ends.shape[0]
    start, _, lengths = find_start_stop_traj(end=ends, at_capacity=full, cursor=newest)
    lane = start[:, 1]  # ends is [T, L]: a column per lane
    step = torch.arange(int(lengths.sum())) - torch.repeat_interleave(
        torch.cumsum(lengths, 0) - lengths, lengths
    )
    rows = (torch.repeat_interleave(start[:, 0], lengths) + step) % T
    lanes = torch.repeat_interleave(lane, lengths)
    from_start = torch.zeros(T, ends.shape[1], dtype=torch.long)
    to_stop = torch.zeros_like(from_start)
    from_start[rows, lanes] = step
    to_stop[rows, lanes] = torch.repeat_interleave(lengths, lengths) - 1 - step
    return from_start, to_stop


class Sequence(SampleUnit):
    """Expands every anchor into a window of ``burn_in + length + bootstrap`` records.

    The window holds ``burn_in`` records before the anchor, the ``length`` records of the
    learning region from the anchor on, then ``bootstrap`` records, ``dilation`` storage
    steps apart (a recurrent learner can warm its state up on the burn-in, learn on the
    region and use the bootstrap records in its target). ``B`` anchors give ``B * (burn_in
    + length + bootstrap)`` records; the info gets, per record, ``"sequence_id"`` (its
    window), ``"step_in_sequence"``, ``"learning_mask"`` (the learning region),
    ``"validity_mask"`` (a real record of the window, not a repeated one) and
    ``"anchor_index"`` (the anchor drawn, which :meth:`update_tensordict_priority
    <rl.data.TensorDictReplayBuffer.update_tensordict_priority>` updates: the max of the
    window's valid priorities). ``"index"`` holds the records' positions. In a
    multi-dimensional storage, dim 0 is time and the other coordinates (lanes) are kept.

    Burn-in never moves the anchor: records before the episode start (or the oldest
    record) repeat that first record and are invalid. At the episode end (the
    ``done_key`` flags, the newest record, or the end of the data), ``episode_boundary``
    decides: ``"pad"`` repeats the last record (invalid), ``"stop"`` moves the window
    back so that it ends there (padding when the episode is too short), and
    ``"include_reset"`` runs on into the next episode, but never past the newest
    record or into unwritten slots.

    Args:
        length: the records of the learning region.
        episode_boundary: ``"pad"``, ``"stop"`` or ``"include_reset"``.
        done_key: the stored end-of-episode flag; ``None`` makes the stored data one
            episode.
        burn_in: records before the anchor.
        bootstrap: records after the learning region.
        dilation: storage steps between consecutive records of a window.

    Raises:
        ValueError: a length or dilation below 1, a negative burn-in or bootstrap, an
            unknown ``episode_boundary``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, Sequence, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        >>> done = torch.zeros(10, 1, dtype=torch.bool)
        >>> done[4] = done[9] = True
        >>> _ = rb.extend(TensorDict({("next", "done"): done}, batch_size=[10]))
        >>> index, info = Sequence(length=2, burn_in=1, bootstrap=1).expand(
        ...     torch.tensor([5]), {}, rb.storage
        ... )
        >>> index.tolist(), info["validity_mask"].tolist(), info["learning_mask"].tolist()
        ([5, 5, 6, 7], [False, True, True, True], [False, True, True, False])
    """

    def __init__(
        self,
        length: int,
        episode_boundary: Literal["pad", "stop", "include_reset"] = "pad",
        done_key: NestedKey | None = ("next", "done"),
        burn_in: int = 0,
        bootstrap: int = 0,
        dilation: int = 1,
    ) -> None:
        if length <= 0:
            raise ValueError(f"length must be at least 1, got {length}")
        if episode_boundary not in ("pad", "stop", "include_reset"):
            raise ValueError(
                f"episode_boundary must be 'pad', 'stop' or 'include_reset', got "
                f"{episode_boundary!r}"
            )
        if burn_in < 0:
            raise ValueError(f"burn_in must be non-negative, got {burn_in}")
        if bootstrap < 0:
            raise ValueError(f"bootstrap must be non-negative, got {bootstrap}")
        if dilation < 1:
            raise ValueError(f"dilation must be at least 1, got {dilation}")
        if done_key is not None and not isinstance(done_key, str):
            done_key = tuple(done_key)
        self.length = length
        self.episode_boundary = episode_boundary
        self.done_key = done_key
        self.burn_in = burn_in
        self.bootstrap = bootstrap
        self.dilation = dilation

    def _check_storage(self, storage: Storage) -> None:
        if not isinstance(storage, TensorStorage):
            raise TypeError(
                f"{type(self).__name__} reads episode ends and the write position from a "
                f"TensorStorage of TensorDicts (LazyTensorStorage, LazyMemmapStorage), got "
                f"{type(storage).__name__}"
            )
        if storage.initialized and not storage._is_td:
            raise TypeError(
                f"{type(self).__name__} reads the '{self.done_key}' entry of stored "
                "TensorDicts; this TensorStorage holds a plain tensor"
            )

    def _ends(self, storage: TensorStorage) -> torch.Tensor:
        """The end flags ``[T, L]`` of the stored rows (lanes flattened)."""
        rows = storage._len_along_dim0
        lanes = storage.shape[1:].numel()
        if self.done_key is None:
            return torch.zeros(rows, lanes, dtype=torch.bool)
        done = storage._column(self.done_key).cpu()
        return done.reshape(rows, lanes, -1).any(-1)

    def expand(self, index: Index, info: dict[str, Any], storage: Storage) -> tuple[Index, dict]:
        self._check_storage(storage)
        ndim = storage.ndim
        anchor = torch.stack(index, -1) if isinstance(index, tuple) else torch.as_tensor(index)
        device = anchor.device
        anchor = anchor.cpu().long()
        if ndim > 1 and (anchor.ndim != 2 or anchor.shape[-1] != ndim):
            raise RuntimeError(
                f"{type(self).__name__} expects the anchors of a storage with ndim={ndim} "
                f"as [B, {ndim}] coordinates, got shape {tuple(anchor.shape)}"
            )
        time = anchor[:, 0] if ndim > 1 else anchor.reshape(-1)
        if ndim == 1:
            lane = torch.zeros_like(time)
        else:
            lane = self._lane_index(anchor[:, 1:], storage.shape[1:])
        B, total = time.shape[0], self.burn_in + self.length + self.bootstrap

        out: dict[str, Any] = {}
        for key, value in info.items():
            value_t = torch.as_tensor(value)
            out[key] = value if value_t.ndim == 0 else value_t.repeat_interleave(total, dim=0)
        step = torch.arange(total)
        learning = (step >= self.burn_in) & (step < self.burn_in + self.length)
        out["sequence_id"] = torch.arange(B).repeat_interleave(total).to(device)
        out["step_in_sequence"] = step.repeat(B).to(device)
        out["learning_mask"] = learning.repeat(B).to(device)
        out["anchor_index"] = anchor.repeat_interleave(total, dim=0).to(device)

        offset = ((step - self.burn_in) * self.dilation).expand(B, total)
        written = storage._len_along_dim0
        full = written == storage._max_size_along_dim0()
        newest = (storage._write_end - 1) % written
        if self.episode_boundary == "include_reset":
            oldest = (newest + 1) % written if full else 0
            back = (time - oldest) % written
            forward = (newest - time) % written
            start = time
        else:
            from_start, to_stop = _distances(self._ends(storage), full, newest)
            back, forward, start = from_start[time, lane], to_stop[time, lane], time
            if self.episode_boundary == "stop":
                missing = self.dilation * (self.length + self.bootstrap - 1) - forward
                shift = torch.minimum(missing.clamp(min=0), back)
                start, back, forward = time - shift, back - shift, forward + shift
        valid = (offset <= forward[:, None]) & (offset >= -back[:, None])
        clamped = torch.maximum(torch.minimum(offset, forward[:, None]), -back[:, None])
        rows = (start[:, None] + clamped) % written
        out["validity_mask"] = valid.reshape(-1).to(device)
        if ndim == 1:
            return rows.reshape(-1).to(device), out
        lanes = anchor[:, 1:].unsqueeze(1).expand(B, total, ndim - 1)
        coords = torch.cat([rows.unsqueeze(-1), lanes], -1).reshape(-1, ndim).to(device)
        return tuple(coords.unbind(-1)), out

    @staticmethod
    def _lane_index(coords: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """Flat lane indices of ``[B, ndim - 1]`` lane coordinates (row-major)."""
        flat = torch.zeros(coords.shape[0], dtype=torch.long)
        for dim, size in enumerate(shape):
            flat = flat * size + coords[:, dim]
        return flat

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(length={self.length}, "
            f"episode_boundary={self.episode_boundary!r}, done_key={self.done_key!r}, "
            f"burn_in={self.burn_in}, bootstrap={self.bootstrap}, dilation={self.dilation})"
        )
