"""TensorDict replay buffers and the prioritized buffers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from rl.data.replay_buffers._buffers import ReplayBuffer
from rl.data.replay_buffers._sample_units import SampleUnit, Sequence
from rl.data.replay_buffers._utils import KeyMismatchError
from rl.data.replay_buffers.samplers._prioritized import PrioritizedSampler, _check_priority
from rl.data.replay_buffers.samplers._sampler import Sampler
from rl.data.replay_buffers.storages._base import ListStorage, Storage
from rl.data.replay_buffers.storages._rows import RowPlan
from rl.data.replay_buffers.storages._tensor import TensorStorage
from rl.data.replay_buffers.writers._writers import TensorDictRoundRobinWriter, Writer

# root entries a prioritized batch gets from the sampler, never read from the storage
_SAMPLED_KEYS = frozenset({"index", "priority_weight", "_weight"})


class TensorDictReplayBuffer(ReplayBuffer):
    """A replay buffer of TensorDicts: batches carry their storage ``"index"`` and the
    sampler's info (importance weights, slice flags) as entries.

    Args:
        priority_key: the key read by :meth:`update_tensordict_priority` (and by ``extend``
            when the data holds it and the sampler is prioritized).
        **kwargs: the :class:`ReplayBuffer` arguments.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, SamplerWithoutReplacement
        >>> from rl.data import TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(
        ...     storage=LazyTensorStorage(1000), sampler=SamplerWithoutReplacement(), batch_size=50
        ... )
        >>> _ = rb.extend(TensorDict({"obs": torch.randn(100, 3)}, batch_size=[100]))
        >>> [batch.batch_size[0] for batch in rb]
        [50, 50]
    """

    def __init__(self, *, priority_key: NestedKey = "td_error", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.priority_key = priority_key
        self.reduction = getattr(self._sampler, "reduction", "max")

    def _default_writer(self) -> Writer:
        return TensorDictRoundRobinWriter()

    def _prioritized(self) -> bool:
        return hasattr(self._sampler, "_sum_tree")

    def _rows_fast_path(self) -> RowPlan | None:
        """The storage's one-call gather when a :class:`PrioritizedSampler` on CPU trees
        can draw and gather a batch in one compiled call (default collate, a 1-dim CPU
        TensorDict storage, no generation tracking), else ``None``."""
        sampler, storage = self._sampler, self._storage
        if (
            type(sampler).sample is not PrioritizedSampler.sample
            or self._sample_unit is not None
            or not isinstance(sampler, PrioritizedSampler)
            or not sampler._cpu
            or self._custom_collate
            or not isinstance(storage, TensorStorage)
            or not storage.initialized
            or self._writer.tracks_generations
        ):
            return None
        return storage._row_plan(_SAMPLED_KEYS)

    # (the sampler's FusedRows, the storage's row plans) of the last one-call draw
    _fused_draw: tuple | None = None
    _UNPICKLED = (*ReplayBuffer._UNPICKLED, "_fused_draw")

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        fast = self._fused_draw
        if fast is not None:
            # the last draw's one-call path, as long as nothing it depends on changed:
            # the sampler's trees, the storage's layout, the batch size, the collate,
            # transforms and pinning (the path is rechecked in full otherwise)
            fused, plans = fast
            size = self._batch_size if batch_size is None else batch_size
            with self._lock:
                if (
                    fused.batch_size == size
                    and self._sampler._fused is fused
                    and self._storage._row_plans is plans
                    and not (self._custom_collate or len(self._transform) or self._pin_memory)
                ):
                    n = len(self._storage)
                    if n:
                        index, weight, data = fused(n)
                        if return_info:
                            return data, {"priority_weight": weight, "index": index}
                        return data
                else:
                    self._fused_draw = None  # holds the storage's views: let them go
        return super().sample(batch_size, return_info)

    def _sample(self, batch_size: int) -> tuple[Any, dict]:
        storage = self._storage
        plan = None
        if type(self._sampler).sample is PrioritizedSampler.sample:
            with self._lock:
                plan = self._rows_fast_path()
                if plan is not None:
                    sampler = self._sampler
                    n = len(self._storage)
                    index, weight, data = sampler._sample_rows(n, plan, batch_size)
                    if (
                        not (self._prefetch or len(self._transform) or self._pin_memory)
                        # a subclass's own _sample must keep running: no shortcut then
                        and type(self)._sample is TensorDictReplayBuffer._sample
                    ):
                        self._fused_draw = (sampler._fused, storage._row_plans)
        if plan is not None:
            if len(self._transform) or self._pin_memory:
                data = self._postprocess(data)
            return data, {"priority_weight": weight, "index": index}
        fast = (
            not self._custom_collate
            and isinstance(storage, TensorStorage)
            and storage.initialized
            and storage._is_td
            and storage._layout is None
            and not storage._item_batch
        )
        with self._lock:
            index, info = self._sampler.sample(storage, batch_size)
            if self._sample_unit is not None:
                index, info = self._sample_unit.expand(index, info, storage)
            if self._writer.tracks_generations:
                info["index_generation"] = self._writer.generations_of(index)
            fast = (
                fast
                and isinstance(index, torch.Tensor)
                and index.ndim == 1
                and all(isinstance(k, str) for k in info)
            )
            if fast:
                # the batch is built with its "index" and info entries in one go
                extra = {"index": index, **info}
                if "priority_weight" in info:
                    extra["_weight"] = info["priority_weight"]
                data = storage._gather(index, extra)
            else:
                data = storage.get(index)
        info["index"] = index
        if fast:
            return self._postprocess(data), info
        data = self._collate_fn(data)
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"{type(self).__name__} samples TensorDicts, the collate_fn returned "
                f"{type(data).__name__}"
            )
        self._write_info(data, info)
        return self._postprocess(data), info

    @staticmethod
    def _write_info(data: TensorDictBase, info: dict) -> None:
        batch = data.batch_size
        for key, value in info.items():
            if isinstance(value, tuple):  # coordinates in a multi-dimensional storage
                value = torch.stack(value, -1)
            if value.device != data.device and data.device is not None:
                value = value.to(data.device)
            if value.shape[: len(batch)] != batch:
                value = value.reshape(value.shape[:1] + (1,) * (len(batch) - 1) + value.shape[1:])
                value = value.expand(*batch, *value.shape[len(batch) :])
            data.set(key, value)
            if key == "priority_weight":
                data.set("_weight", value)

    def extend(self, data: Any) -> torch.Tensor:
        priority = None
        if (
            self._prioritized()
            and isinstance(data, TensorDictBase)
            and self.priority_key in data.keys(include_nested=True)
        ):
            # checked before anything is written: bad priorities leave the buffer unchanged
            ndim = self._storage.ndim
            priority = self._reduce_priority(data[self.priority_key], data.batch_dims, ndim)
            if ndim > 1:  # one per item, in the order extend writes them
                priority = priority.transpose(0, self.dim_extend).reshape(-1)
            _check_priority(priority.reshape(-1))
        index = super().extend(data)
        if priority is not None:
            self.update_priority(index, priority[priority.shape[0] - index.shape[0] :])
        return index

    def _reduce_priority(
        self, priority: torch.Tensor, batch_dims: int, index_dims: int
    ) -> torch.Tensor:
        """One priority per index: reduces feature dims, then extra batch dims of an item."""
        priority = priority.detach()
        if priority.ndim > batch_dims:
            priority = priority.reshape(*priority.shape[:batch_dims], -1)
            if self.reduction == "max":
                priority = priority.max(-1).values
            elif self.reduction == "min":
                priority = priority.min(-1).values
            elif self.reduction == "mean":
                priority = priority.mean(-1)
            elif self.reduction == "median":
                priority = priority.median(-1).values
            else:
                priority = priority.sum(-1)
        if priority.ndim > index_dims:
            priority = priority.reshape(*priority.shape[:index_dims], -1).max(-1).values
        return priority

    def update_priority(self, index: Any, priority: Any = None) -> None:
        """Sets priorities: ``(index, priority)``, or a sampled TensorDict alone (its
        ``"index"`` and ``priority_key`` entries are read, as TorchRL accepts)."""
        if priority is None and isinstance(index, TensorDictBase):
            self.update_tensordict_priority(index)
            return
        if priority is None:
            raise TypeError("update_priority needs priorities, or a TensorDict holding them")
        with self._lock:
            self._sampler.update_priority(index, priority)

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Reads ``priority_key`` and ``"index"`` from a sampled batch and updates priorities."""
        if not self._prioritized():
            return
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"expected a TensorDict, got {type(data).__name__}")
        try:
            priority = data[self.priority_key]
        except KeyError:
            raise KeyMismatchError(
                f"the batch has no priority key {self.priority_key!r}; write it before calling "
                "update_tensordict_priority"
            ) from None
        try:
            index = data["index"]
        except KeyError:
            raise KeyMismatchError(
                "the batch has no 'index' key; was it sampled from this buffer?"
            ) from None
        index_dims = index.ndim - 1 if self._storage.ndim > 1 else index.ndim
        priority = self._reduce_priority(priority, data.batch_dims, index_dims)
        anchored = self._anchor_reduced_priority(data, priority)
        if anchored is not None:
            self.update_priority(*anchored)
            return
        self.update_priority(index, priority)

    def _anchor_reduced_priority(
        self, data: TensorDictBase, priority: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The anchors of a :class:`Sequence` batch and their priorities (the max over the
        valid records of their windows), or ``None`` for a batch of plain records.

        A window's records share their anchor's priority: updating every record would
        give padded and bootstrap records (other anchors' items) priorities of their own.
        """
        anchor = data.get("anchor_index", None)
        if not isinstance(self._sample_unit, Sequence) or anchor is None:
            return None
        ndim = self._storage.ndim
        anchor = anchor.reshape(-1, ndim) if ndim > 1 else anchor.reshape(-1)
        priority = priority.reshape(-1)
        if anchor.shape[0] != priority.shape[0]:
            raise ValueError(
                f"the batch has {anchor.shape[0]} anchor_index entries and {priority.shape[0]} "
                "priorities: give one priority per record of the sampled windows"
            )
        valid = data.get("validity_mask", None)
        if valid is not None:  # an anchor's own record is always valid: none is lost
            valid = valid.reshape(-1).to(anchor.device)
            anchor, priority = anchor[valid], priority[valid.to(priority.device)]
        unique, record = torch.unique(anchor, dim=0, return_inverse=True)
        reduced = torch.zeros(unique.shape[0], dtype=priority.dtype, device=priority.device)
        reduced.scatter_reduce_(0, record.to(priority.device), priority, "amax", include_self=False)
        return unique, reduced


class PrioritizedReplayBuffer(ReplayBuffer):
    """A replay buffer with a :class:`PrioritizedSampler` (prioritized experience replay).

    Args:
        alpha, beta, eps, dtype: see :class:`PrioritizedSampler`.
        storage: default ``ListStorage(1000)``; the trees have its capacity (and device).
        sampler: the prioritized sampler to use instead of the one built from ``alpha``,
            ``beta``, ``eps``, ``dtype`` (e.g. a :class:`PrioritizedSliceSampler`); not
            with ``sampler_device``.
        sampler_device: the device of the sum/min trees of the built sampler.
        sync: TorchRL's ``sync=False`` keeps the priority trees in the owning process and
            updates them lazily from the writes of other processes; only ``True``
            (default: the trees follow every write) exists here, ``False`` raises
            ``NotImplementedError``.
        sample_unit, collate_fn, pin_memory, prefetch, transform, batch_size, dim_extend,
        delayed_init, transport, transport_options: as in :class:`ReplayBuffer`.
        **kwargs: the other :class:`ReplayBuffer` arguments (``writer``, ``generator``,
            ``shared``, ...).

    Raises:
        TypeError: ``sampler`` with ``sampler_device``.
        NotImplementedError: ``sync=False``.

    Examples:
        >>> from rl.data import PrioritizedReplayBuffer
        >>> rb = PrioritizedReplayBuffer(alpha=0.7, beta=1.1, collate_fn=lambda x: x)
        >>> rb.add(1)
        0
        >>> rb.sample(1)
        [1]
        >>> rb.update_priority(0, 0.5)
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        storage: Storage | None = None,
        sampler: Sampler | None = None,
        sample_unit: SampleUnit | None = None,
        sampler_device: torch.device | str | None = None,
        sync: bool = True,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable | list[Callable] | None = None,
        batch_size: int | None = None,
        dim_extend: int | None = None,
        delayed_init: bool = False,
        transport: str = "auto",
        transport_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        _check_sync(self, sync)
        storage = storage if storage is not None else ListStorage(1000)
        if sampler is None:
            sampler = PrioritizedSampler(
                storage.max_size, alpha, beta, eps, dtype, device=sampler_device
            )
        elif sampler_device is not None:
            raise TypeError("sampler_device cannot be passed when sampler is provided")
        super().__init__(
            storage=storage,
            sampler=sampler,
            sample_unit=sample_unit,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            batch_size=batch_size,
            dim_extend=dim_extend,
            delayed_init=delayed_init,
            transport=transport,
            transport_options=transport_options,
            **kwargs,
        )


def _check_sync(buffer: ReplayBuffer, sync: bool) -> None:
    if not sync:
        raise NotImplementedError(
            f"{type(buffer).__name__}(sync=False) is not supported: the priority trees follow "
            "every write (sync=True)"
        )


class TensorDictPrioritizedReplayBuffer(TensorDictReplayBuffer):
    """A :class:`TensorDictReplayBuffer` with a :class:`PrioritizedSampler`.

    Batches hold ``"index"`` and the importance weights under ``"priority_weight"`` (and
    ``"_weight"``, the older TorchRL name); write new priorities under ``priority_key`` and
    call :meth:`update_tensordict_priority`.

    Args:
        alpha, beta, eps: see :class:`PrioritizedSampler`.
        priority_key: where priorities are read (default ``"td_error"``).
        storage: default ``ListStorage(1000)``.
        sampler_device: the device of the sum/min trees.
        sync: only ``True`` (default) exists here; ``False`` raises
            ``NotImplementedError`` (see :class:`PrioritizedReplayBuffer`).
        reduction: how a priority with extra dims is reduced per item (``"max"``...).
        sample_unit, collate_fn, pin_memory, prefetch, transform, batch_size, dim_extend,
        generator, shared, compilable, transport, transport_options: as in
            :class:`ReplayBuffer`.
        dtype: the dtype of the priority trees (rl's addition; ``torch.float``).
        **kwargs: the other :class:`ReplayBuffer` arguments (``writer``, ...).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import TensorDictPrioritizedReplayBuffer
        >>> rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=1.1, priority_key="td_error")
        >>> _ = rb.extend(TensorDict({"a": torch.randn(2, 3)}, batch_size=[2]))
        >>> sample = rb.sample(2)
        >>> sorted(sample.keys())
        ['_weight', 'a', 'index', 'priority_weight']
        >>> sample["td_error"] = torch.rand(2)
        >>> rb.update_tensordict_priority(sample)
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        priority_key: NestedKey = "td_error",
        eps: float = 1e-8,
        storage: Storage | None = None,
        sample_unit: SampleUnit | None = None,
        sampler_device: torch.device | str | None = None,
        sync: bool = True,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable | list[Callable] | None = None,
        reduction: str = "max",
        batch_size: int | None = None,
        dim_extend: int | None = None,
        generator: torch.Generator | None = None,
        shared: bool = False,
        compilable: bool = False,
        transport: str = "auto",
        transport_options: dict[str, Any] | None = None,
        dtype: torch.dtype = torch.float,
        **kwargs: Any,
    ) -> None:
        if "sampler" in kwargs:
            raise TypeError(f"{type(self).__name__} builds its own sampler; do not pass one")
        _check_sync(self, sync)
        storage = storage if storage is not None else ListStorage(1000)
        sampler = PrioritizedSampler(
            storage.max_size, alpha, beta, eps, dtype, reduction, device=sampler_device
        )
        super().__init__(
            storage=storage,
            sampler=sampler,
            priority_key=priority_key,
            sample_unit=sample_unit,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            batch_size=batch_size,
            dim_extend=dim_extend,
            generator=generator,
            shared=shared,
            compilable=compilable,
            transport=transport,
            transport_options=transport_options,
            **kwargs,
        )
        self.reduction = reduction
