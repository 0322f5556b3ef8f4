"""``PrioritizedSliceSampler``: trajectory slices anchored on prioritized items."""

from __future__ import annotations

from typing import Any

import torch
from tensordict.utils import NestedKey

from rl.data.replay_buffers.samplers._prioritized import PrioritizedSampler, importance_weights
from rl.data.replay_buffers.samplers._sampler import EMPTY_STORAGE_ERROR
from rl.data.replay_buffers.samplers._slice import SliceSampler
from rl.data.replay_buffers.storages._base import Storage


class PrioritizedSliceSampler(SliceSampler):
    """A :class:`SliceSampler` whose slices are anchored on prioritized items.

    An item is drawn with probability proportional to ``priority^alpha`` (as in
    :class:`PrioritizedSampler`); its slice starts there, moved back when needed so that it
    ends within the trajectory. Every item of the batch carries its importance weight under
    ``"priority_weight"``, and ``update_priority`` takes per-item priorities.

    Args:
        max_capacity, alpha, beta, eps, dtype, reduction, max_priority_within_buffer: as
            in :class:`PrioritizedSampler`.
        num_slices, slice_len, end_key, end_keys, traj_key, ends, trajectories,
        cache_values, truncated_key, init_key, strict_length, compile: as in
            :class:`SliceSampler` (TorchRL's arguments).
        span: TorchRL lets prioritized slices run over their trajectory's edges; here only
            ``False`` (default) is supported: a true value raises ``NotImplementedError``
            (use :class:`SliceSampler`).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, PrioritizedSliceSampler, TensorDictReplayBuffer
        >>> sampler = PrioritizedSliceSampler(
        ...     max_capacity=100, alpha=1.0, beta=1.0, slice_len=2, traj_key="episode"
        ... )
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, batch_size=4)
        >>> _ = rb.extend(TensorDict({"episode": torch.arange(12) // 3}, batch_size=[12]))
        >>> rb.update_priority(torch.arange(12), (torch.arange(12) // 3 == 2).float())
        >>> rb.sample()["episode"].tolist()
        [2, 2, 2, 2]
    """

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        end_key: NestedKey | None = None,
        end_keys: list[NestedKey] | None = None,
        traj_key: NestedKey | None = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        cache_values: bool = False,
        truncated_key: NestedKey | None = ("next", "truncated"),
        init_key: NestedKey | None = "is_init",
        strict_length: bool = True,
        compile: bool = False,
        span: bool | int | tuple[bool | int, bool | int] = False,
        max_priority_within_buffer: bool = False,
    ) -> None:
        if any(span if isinstance(span, tuple | list) else (span,)):
            raise NotImplementedError(
                f"{type(self).__name__} does not support span (got span={span!r}); use SliceSampler"
            )
        super().__init__(
            num_slices=num_slices,
            slice_len=slice_len,
            end_key=end_key,
            end_keys=end_keys,
            traj_key=traj_key,
            ends=ends,
            trajectories=trajectories,
            cache_values=cache_values,
            truncated_key=truncated_key,
            init_key=init_key,
            strict_length=strict_length,
            compile=compile,
        )
        self._priority = PrioritizedSampler(
            max_capacity,
            alpha,
            beta,
            eps,
            dtype,
            reduction,
            max_priority_within_buffer=max_priority_within_buffer,
        )

    @property
    def alpha(self) -> float:
        return self._priority.alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        self._priority.alpha = value

    @property
    def beta(self) -> float:
        return self._priority.beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._priority.beta = value

    @property
    def default_priority(self) -> float:
        return self._priority.default_priority

    @property
    def max_size(self) -> int:
        return self._priority.max_size

    @property
    def device(self) -> torch.device:
        return self._priority.device

    def mark_update(self, index: Any) -> None:
        self._priority.mark_update(index)

    def _attach_storage(self, storage: Storage) -> None:
        self._priority._attach_storage(storage)

    @property
    def _rng(self) -> torch.Generator | None:
        return self._priority._rng

    @_rng.setter
    def _rng(self, generator: torch.Generator | None) -> None:
        self._priority._rng = generator

    @property
    def _sum_tree(self):
        return self._priority._sum_tree

    @property
    def _min_tree(self):
        return self._priority._min_tree

    def extend(self, index: torch.Tensor) -> None:
        super().extend(index)
        self._priority.extend(index)

    def update_priority(self, index: Any, priority: Any) -> None:
        self._priority.update_priority(index, priority)

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        n = len(storage)
        if n == 0:
            raise RuntimeError(EMPTY_STORAGE_ERROR)
        num_slices, slice_len = self._shape(batch_size)
        starts, lengths, ends = self._trajectories(storage)
        usable = (
            lengths >= slice_len
            if self.strict_length
            else torch.ones_like(lengths, dtype=torch.bool)
        )
        self._eligible(lengths, slice_len)
        # the trees index items row-major (row * inner + column); trajectories are laid out
        # column after column (column * rows + row): see _trajectories
        rows = storage._len_along_dim0
        inner = n // rows if storage.ndim > 1 else 1

        def to_position(flat: torch.Tensor) -> torch.Tensor:
            return flat if inner == 1 else (flat % inner) * rows + flat // inner

        def to_flat(position: torch.Tensor) -> torch.Tensor:
            return position if inner == 1 else (position % rows) * inner + position // rows

        anchors = torch.empty(0, dtype=torch.int64)
        for _ in range(64):
            drawn, _info = self._priority.sample(storage, num_slices)
            if storage.ndim > 1:
                drawn = storage._flat_index(drawn)
            drawn = to_position(drawn.cpu())
            traj = torch.searchsorted(ends, drawn)
            anchors = torch.cat([anchors, drawn[usable[traj]]])
            if anchors.shape[0] >= num_slices:
                break
        else:
            raise RuntimeError(
                f"could not draw {num_slices} slices of length {slice_len}: the prioritized "
                "items lie in trajectories that are too short"
            )
        anchors = anchors[:num_slices]
        traj = torch.searchsorted(ends, anchors)
        seq = lengths[traj].clamp(max=slice_len)
        first = torch.minimum(anchors, ends[traj] - seq + 1)
        total = int(seq.sum())
        slice_start = torch.cumsum(seq, 0) - seq
        position = torch.arange(total) - torch.repeat_interleave(slice_start, seq)
        index = torch.repeat_interleave(first, seq) + position
        last = position == torch.repeat_interleave(seq - 1, seq)
        tree_index = to_flat(index).to(self._priority._device)
        priority = self._sum_tree[tree_index]
        p_min = self._min_tree.query(0, n)
        beta = self._priority.beta
        index = self._storage_index(storage, index)
        info = self._info(storage, index, last)
        info["priority_weight"] = importance_weights(priority, p_min, beta).to(storage.device)
        return index, info

    def _empty(self) -> None:
        super()._empty()
        self._priority._empty()

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["priority"] = self._priority.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._priority.load_state_dict(state_dict["priority"])
