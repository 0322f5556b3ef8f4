"""Contiguous tensor storages: ``TensorStorage`` and ``LazyTensorStorage``."""

from __future__ import annotations

import os
import tempfile
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorStack, TensorDict, TensorDictBase, is_non_tensor, is_tensorclass

from rl.data.replay_buffers._utils import (
    KeyMismatchError,
    decode_item,
    decode_tensordict,
    encode_item,
    encode_tensordict,
)
from rl.data.replay_buffers.storages._base import Storage
from rl.data.replay_buffers.storages._layout import ItemLayout, stack_items
from rl.data.replay_buffers.storages._rows import RowPlan


def _numpy_view(t: torch.Tensor) -> np.ndarray | None:
    """A numpy view of a CPU tensor, or ``None`` (other device, no numpy dtype)."""
    if t.device.type != "cpu" or t.requires_grad:
        return None
    try:
        return t.numpy()
    except (TypeError, RuntimeError):  # bfloat16, conjugate views...
        return None


def _take(t: torch.Tensor, array: np.ndarray | None, index: torch.Tensor, np_index: Any):
    if array is not None and np_index is not None:
        # numpy's take along axis 0 costs ~3 us for 256 rows, index_select ~8 us
        return torch.from_numpy(array.take(np_index, axis=0))
    return t.index_select(0, index)


class _GatherPlan:
    """The leaves of a stored TensorDict, grouped by nesting level, as plain tensors.

    Gathering a batch walks this plan (numpy ``take`` on CPU, ``index_select``
    elsewhere) and builds the output with ``TensorDict._new_unsafe``: no key validation,
    no batch-size inference, no per-call traversal of the TensorDict machinery.
    """

    __slots__ = ("leaves", "children", "device", "arrays")

    def __init__(self, td: TensorDictBase, view: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.leaves: list[tuple[str, torch.Tensor, np.ndarray | None]] = []
        self.children: list[tuple[str, _GatherPlan]] = []
        self.device = td.device
        for key, value in td.items():
            if isinstance(value, TensorDictBase):
                self.children.append((key, _GatherPlan(value, view)))
            else:
                leaf = view(value)
                self.leaves.append((key, leaf, _numpy_view(leaf)))
        # every leaf, nested ones included, has a numpy view: the CPU fast path applies
        numpy = all(a is not None for _, _, a in self.leaves)
        numpy = numpy and all(child.arrays is not None for _, child in self.children)
        self.arrays = [(key, a) for key, _, a in self.leaves] if numpy else None

    def gather_numpy(
        self, np_index: np.ndarray, batch_size: torch.Size, extra: dict | None = None
    ) -> TensorDict:
        """The gather of a CPU plan whose leaves all have numpy views (``arrays`` set);
        ``extra`` entries are added at this level instead of being read."""
        from_numpy = torch.from_numpy
        if extra:
            source: dict[str, Any] = {
                key: from_numpy(a.take(np_index, axis=0))
                for key, a in self.arrays
                if key not in extra
            }
            source.update(extra)
        else:
            source = {key: from_numpy(a.take(np_index, axis=0)) for key, a in self.arrays}
        for key, child in self.children:
            source[key] = child.gather_numpy(np_index, batch_size)
        return TensorDict._new_unsafe(source, batch_size=batch_size, device=self.device)

    def gather(self, index: torch.Tensor, np_index: Any, batch_size: torch.Size) -> TensorDict:
        source: dict[str, Any] = {
            key: _take(t, array, index, np_index) for key, t, array in self.leaves
        }
        for key, plan in self.children:
            source[key] = plan.gather(index, np_index, batch_size)
        return TensorDict._new_unsafe(source, batch_size=batch_size, device=self.device)


_NO_KEYS: frozenset = frozenset()


def _signature(td: TensorDictBase, skip: int) -> dict:
    return {
        key: (value.shape[skip:], value.dtype)
        for key, value in td.items(include_nested=True, leaves_only=True)
    }


def _describe(shape: torch.Size, dtype: torch.dtype) -> str:
    return f"shape {tuple(shape)} and dtype {dtype}"


# below this, a table fits in a few 4 KiB pages' worth of TLB entries anyway
_HUGE_PAGE_BYTES = 4 << 20


def _zeros(shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.zeros`` for a CPU table, through numpy where the table is large.

    numpy asks the kernel for transparent huge pages on its large allocations (Linux,
    ``madvise`` mode); torch does not. A sampled batch reads random rows of every
    table, and with 4 KiB pages nearly each of those rows also misses the TLB: with
    2 MiB pages, a table of a million items needs a few dozen TLB entries instead of
    tens of thousands. Dtypes numpy lacks (bfloat16...) use ``torch.zeros``.
    """
    numel = 1
    for n in shape:
        numel *= n
    if numel * dtype.itemsize >= _HUGE_PAGE_BYTES:
        np_dtype = _NUMPY_DTYPES.get(dtype)
        if np_dtype is not None:
            return torch.from_numpy(np.zeros(shape, dtype=np_dtype))
    return torch.zeros(shape, dtype=dtype, device=device)


_NUMPY_DTYPES = {
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
    torch.complex64: np.complex64,
    torch.complex128: np.complex128,
}


class TensorStorage(Storage):
    """A storage backed by one preallocated tensor or TensorDict whose first dim is the capacity.

    Args:
        storage: a tensor or TensorDict with a leading dimension of size ``max_size``: its
            items are the storage's (a full storage, which writes overwrite from position
            0); ``None`` allocates it on the first write (see :class:`LazyTensorStorage`).
        max_size: the capacity; inferred from ``storage`` when omitted.
        device: where the data lives (``"cpu"`` by default, as TorchRL: a given
            ``storage`` elsewhere is moved there); ``"auto"``: where the given ``storage``
            is.
        ndim: how many leading dims of the data are storage dims (``[B, T]`` data in a
            ``ndim=2`` storage).
        compilable: see :class:`Storage`.

    Every write is checked against the stored structure: a key, shape or dtype that differs
    raises an error naming the key.

    Non-tensor entries of a TensorDict (strings, paths, ``NonTensorData`` /
    ``NonTensorStack``, the ``sources`` of a :class:`~rl.data.VideoClipRef`) are kept as
    TorchRL keeps them: one ``NonTensorStack`` of one value per row, written and read by
    index, and read back as a ``NonTensorStack`` of the values sampled. Tensorclass
    entries keep their class. A storage holding such entries reads its batches through
    tensordict's indexing; one of tensors only keeps its faster gather. ``state_dict``
    saves the values as plain containers (strings, numbers, lists, tuples, dicts); a
    tensorclass entry comes back as its class only into a storage written once with it
    (a class is never imported from a checkpoint).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import ReplayBuffer, TensorStorage
        >>> data = TensorDict({"obs": torch.zeros(10, 3)}, batch_size=[10])
        >>> rb = ReplayBuffer(storage=TensorStorage(data), batch_size=4)
        >>> rb.extend(TensorDict({"obs": torch.ones(2, 3)}, batch_size=[2]))
        tensor([0, 1])
        >>> rb.sample()["obs"].shape
        torch.Size([4, 3])
    """

    supports_conditional_update = True

    def __init__(
        self,
        storage: torch.Tensor | TensorDictBase | None,
        max_size: int | None = None,
        *,
        device: torch.device | str = "cpu",
        ndim: int = 1,
        compilable: bool = False,
    ) -> None:
        if isinstance(ndim, bool) or not isinstance(ndim, int) or ndim < 1:
            raise ValueError(f"ndim must be an int >= 1, got {ndim!r}")
        self.ndim = ndim
        self._compilable = bool(compilable)
        self._rows: int | None = None  # the capacity along dim 0 (known once allocated)
        self._inner = 1  # items per row: the product of the dims 1..ndim-1
        self._shared = False
        # how items that are not tensors or TensorDicts (tensorclasses, pytrees) are kept
        self._layout: ItemLayout | None = None
        if storage is not None:
            if not isinstance(storage, (torch.Tensor, TensorDictBase)):
                self._layout = ItemLayout.of(storage)
                storage = self._layout.encode(storage, batch_dims=ndim)
            if len(storage.shape) == 0:
                raise ValueError("storage must have a leading capacity dimension, got shape ()")
            if len(storage.shape) < ndim:
                raise ValueError(
                    f"ndim={ndim} needs a storage with at least {ndim} dims, got shape "
                    f"{tuple(storage.shape)}"
                )
            size = storage.shape[:ndim].numel()
            if max_size is not None and max_size != size:
                raise ValueError(
                    f"The max-size and the storage shape mismatch: max_size={max_size} differs "
                    f"from the storage's length {size}"
                )
            max_size = size
            if device == "auto":
                device = storage.device
        if device == "auto":
            raise ValueError(
                "device='auto' takes the device of the given storage; with storage=None pass a "
                "device (LazyTensorStorage allocates there at the first write)"
            )
        if max_size is None:
            raise ValueError(
                "Expected storage to be non-null: give TensorStorage the data to hold (or a "
                "max_size; LazyTensorStorage allocates on the first write)"
            )
        super().__init__(max_size, compilable=compilable)
        if ndim == 1:
            self._rows = self.max_size
        self._device = torch.device(device) if device is not None else torch.device("cpu")
        self._storage: torch.Tensor | TensorDictBase | None = None
        self._len = 0
        self._write_end = 0
        if storage is not None:
            self._adopt(storage.to(self._device) if storage.device != self._device else storage)
            # as TorchRL: the given data is stored (a dataset to sample from); writes start
            # over it at position 0
            self._len = self._rows

    # -- allocation -------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def initialized(self) -> bool:
        return self._storage is not None

    def _adopt(self, storage: torch.Tensor | TensorDictBase) -> None:
        self._storage = storage
        self._row_plans: dict[frozenset, RowPlan | None] = {}
        self._rows = storage.shape[0]
        self._inner = storage.shape[1 : self.ndim].numel()
        self.max_size = self._rows * self._inner
        if isinstance(storage, TensorDictBase):
            self._is_td = True
            # entries that are not tables of numbers: non-tensor data (strings, paths...),
            # kept as one NonTensorStack of ``rows`` values each, as tensordict stacks them
            self._objects = [
                key for key, value in storage.items(include_nested=True) if is_non_tensor(value)
            ]
            # with those, or tensorclass entries, items are read through tensordict's own
            # indexing (the plan below builds plain TensorDicts of tensors only)
            self._general = bool(self._objects) or any(
                is_tensorclass(value) for value in storage.values(include_nested=True)
            )
            views = {}

            def view(t: torch.Tensor) -> torch.Tensor:
                # one view per stored tensor, shared by the write and the gather paths
                if id(t) not in views:
                    views[id(t)] = self._leaf_view(t)
                return views[id(t)]

            self._plan = None if self._general else _GatherPlan(storage, view)
            self._sig = _signature(storage, 1)
            self._leaves = [
                (key, view(value))
                for key, value in storage.items(include_nested=True, leaves_only=True)
            ]
            self._item_batch = storage.batch_size[1:]
        else:
            self._is_td = False
            self._objects = []
            self._general = False
            self._tensor = self._leaf_view(storage)
            self._np_tensor = _numpy_view(self._tensor)
            self._item_batch = storage.shape[1:]

    # views of the stored tensors and compiled gathers over them, rebuilt by _adopt
    _DERIVED = ("_row_plans", "_plan", "_sig", "_leaves", "_tensor", "_np_tensor")

    def __getstate__(self) -> dict[str, Any]:
        # a pickled view would be a copy, no longer the stored tensor: re-adopt instead
        return {k: v for k, v in self.__dict__.items() if k not in self._DERIVED}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.__dict__.get("_storage") is not None:
            self._adopt(self._storage)

    def _leaf_view(self, tensor: torch.Tensor) -> torch.Tensor:
        """The plain tensor that reads and writes of one stored entry go through."""
        return tensor.as_subclass(torch.Tensor)

    def _allocate(self, template: torch.Tensor | TensorDictBase) -> torch.Tensor | TensorDictBase:
        """Allocates zeros for ``max_size`` items shaped like ``template`` (one item)."""
        size, device = self._rows, self._device
        zeros = _zeros if device.type == "cpu" and not self._shared else torch.zeros
        if isinstance(template, TensorDictBase):
            stored = template.apply(
                lambda t: zeros((size, *t.shape), dtype=t.dtype, device=device),
                batch_size=[size, *template.batch_size],
                device=device,
            )
            for key, value in template.items(include_nested=True):
                if is_non_tensor(value):
                    # one value per row (apply keeps a single value for all of them)
                    stored.set(key, torch.empty_like(value.expand(size, *value.batch_size)))
            return stored
        return zeros((size, *template.shape), dtype=template.dtype, device=device)

    def _init(self, data: Any, batched: bool = False) -> None:
        if not isinstance(data, (torch.Tensor, TensorDictBase)):
            raise TypeError(
                f"{type(self).__name__} stores tensors or TensorDicts, got {type(data).__name__}; "
                "use ListStorage for other python objects"
            )
        if batched and len(data.shape) == 0:
            raise ValueError("extend expects data with a batch dimension, got batch_size []")
        template = data[0] if batched else data
        self._rows = self._max_size_along_dim0(template)
        stored = self._allocate(template)
        if self._shared and stored.device.type == "cpu":
            stored.share_memory_()
        self._adopt(stored)

    # -- dimensions -----------------------------------------------------------------------------
    def _max_size_along_dim0(self, item: Any = None) -> int:
        """The capacity along dim 0: ``max_size`` divided by the items of one row."""
        if self._rows is not None:
            return self._rows
        if item is None or len(item.shape) < self.ndim - 1:
            raise RuntimeError(
                f"a storage with ndim={self.ndim} learns its shape from the first write; "
                f"expected items with at least {self.ndim - 1} batch dims"
            )
        inner = item.shape[: self.ndim - 1].numel()
        return -(self.max_size // -inner)

    @property
    def _len_along_dim0(self) -> int:
        return self._len

    @property
    def shape(self) -> torch.Size | None:
        """The shape of the filled part over the first ``ndim`` dims (``None`` before data)."""
        if self._storage is None:
            return None
        return torch.Size((self._len, *self._storage.shape[1 : self.ndim]))

    def _to_storage_index(self, flat: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Flat item indices (``[0, len)``) to what :meth:`get` takes: coordinates if ndim > 1."""
        if self.ndim == 1:
            return flat
        return torch.unravel_index(flat, self.shape)

    def _flat_index(self, index: Any) -> torch.Tensor:
        """Coordinates (a tuple, or a ``[N, ndim]`` tensor) to flat item indices."""
        if self.ndim == 1:
            return torch.as_tensor(index).reshape(-1)
        if isinstance(index, torch.Tensor):
            index = index.reshape(-1, self.ndim).unbind(-1)
        dims = self._storage.shape[1 : self.ndim]
        flat = torch.as_tensor(index[0]).long()
        for coord, size in zip(index[1:], dims):
            flat = flat * size + torch.as_tensor(coord).long()
        return flat.reshape(-1)

    def flatten(self) -> TensorStorage:
        """A 1-dim :class:`TensorStorage` viewing the filled items (``ndim=1``: ``self``)."""
        if self.ndim == 1:
            return self
        if self._storage is None:
            raise RuntimeError("cannot flatten a storage that holds no data yet")
        out = TensorStorage(self._storage[: self._len].flatten(0, self.ndim - 1))
        out._record_write(out.max_size, out.max_size)  # every item is filled
        return out

    def contains(self, item: Any) -> bool | torch.Tensor:
        """Whether the flat item index (or each of a tensor of them) is filled."""
        if isinstance(item, int):
            return 0 <= item < len(self)
        item = torch.as_tensor(item)
        return (item >= 0) & (item < len(self))

    # -- checks ----------------------------------------------------------------------------------
    def _check(self, data: Any, batched: bool) -> dict | None:
        """Raises on data that does not match the stored structure.

        Returns the data's leaves by key (TensorDict storages), for the write that follows.
        """
        skip = 1 if batched else 0
        if not self._is_td:
            if not isinstance(data, torch.Tensor):
                raise TypeError(f"this storage holds a tensor, got {type(data).__name__}")
            stored = self._tensor
            if data.shape[skip:] != stored.shape[1:] or data.dtype != stored.dtype:
                raise ValueError(
                    f"data has item {_describe(data.shape[skip:], data.dtype)}, the storage "
                    f"holds {_describe(stored.shape[1:], stored.dtype)}"
                )
            return None
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"this storage holds TensorDicts, got {type(data).__name__}")
        if self._objects:
            self._check_objects(data)
        if data.batch_size[skip:] != self._item_batch:
            raise ValueError(
                f"data has item batch_size {list(data.batch_size[skip:])}, the storage holds "
                f"items of batch_size {list(self._item_batch)}"
            )
        leaves = dict(data.items(include_nested=True, leaves_only=True))
        if len(leaves) == len(self._sig):
            for key, (shape, dtype) in self._sig.items():
                value = leaves.get(key)
                if value is None or value.dtype != dtype or value.shape[skip:] != shape:
                    break
            else:
                return leaves
        sig = _signature(data, skip)
        for key, (shape, dtype) in self._sig.items():
            if key not in sig:
                raise KeyMismatchError(
                    f"data is missing the key {key!r} held by the storage "
                    f"(expected {_describe(shape, dtype)})"
                )
            got_shape, got_dtype = sig[key]
            if got_shape != shape:
                raise ValueError(
                    f"key {key!r} has item shape {tuple(got_shape)}, the storage holds "
                    f"{tuple(shape)}"
                )
            if got_dtype != dtype:
                raise TypeError(f"key {key!r} has dtype {got_dtype}, the storage holds {dtype}")
        extra = [key for key in sig if key not in self._sig]
        raise KeyMismatchError(
            f"data has the key {extra[0]!r} that the storage does not hold "
            f"(stored keys: {', '.join(sorted(map(repr, self._sig)))})"
        )

    def _check_objects(self, data: TensorDictBase) -> None:
        """Raises unless ``data`` holds every non-tensor entry of the storage as such."""
        for key in self._objects:
            value = data.get(key, None)
            if value is None:
                raise KeyMismatchError(
                    f"data is missing the key {key!r} held by the storage (non-tensor data)"
                )
            if not is_non_tensor(value):
                raise TypeError(
                    f"key {key!r} holds {type(value).__name__}, the storage holds non-tensor "
                    "data there"
                )

    def _stored_keys(self) -> str:
        return ", ".join(sorted(map(repr, self._sig)))

    # whether an in-place rewrite (ReplayBuffer.__setitem__) may add entries
    _adds_entries = True

    def _add_entries(self, data: TensorDictBase) -> None:
        """Adds the entries of ``data`` the storage lacks, zeros for every item until
        written (as TorchRL, where rewriting stored items may add keys, e.g. the value
        targets computed over the whole buffer).

        Raises:
            KeyError: the storage cannot add entries (memory-mapped files).
        """
        new = [
            (key, value)
            for key, value in data.items(include_nested=True, leaves_only=True)
            if key not in self._sig
        ]
        if not new:
            return
        if not self._adds_entries:
            raise KeyMismatchError(
                f"data has the key {new[0][0]!r} that the storage does not hold, and a "
                f"{type(self).__name__} cannot add entries (stored keys: {self._stored_keys()})"
            )
        was_locked = self._storage.is_locked
        if was_locked:
            self._storage.unlock_()
        for key, value in new:
            # the storage's batch dims, then the entry's own (after data's batch dims)
            shape = (*self._storage.batch_size, *value.shape[data.batch_dims :])
            self._storage.set(key, torch.zeros(shape, dtype=value.dtype, device=self._device))
        if was_locked:
            self._storage.lock_()
        self._adopt(self._storage)

    # -- writes ----------------------------------------------------------------------------------
    def _record_write(self, new_len: int, write_end: int) -> None:
        """Grows ``len`` to ``new_len``; ``write_end`` follows the last item written."""
        if new_len > self._len:
            self._len = new_len
        self._write_end = write_end % self._rows

    def _encode(self, data: Any, batched: bool) -> Any:
        """Tensors and TensorDicts as they are; a list of items (a batch) stacked;
        tensorclasses and pytrees of tensors as the TensorDicts the storage keeps."""
        if isinstance(data, (torch.Tensor, TensorDictBase)):
            return data
        if batched and isinstance(data, list):
            data = stack_items(data)
            if isinstance(data, (torch.Tensor, TensorDictBase)):
                return data
        layout = ItemLayout.of(data)
        if self._layout is None and (self._storage is None or self._is_td):
            self._layout = layout
        elif layout != self._layout:
            held = "tensors" if self._layout is None else self._layout.describe()
            raise ValueError(f"the storage holds {held}, got {layout.describe()}")
        return layout.encode(data, batch_dims=(1 if batched else 0) + self.ndim - 1)

    def set(self, cursor: int | slice | torch.Tensor, data: Any) -> None:
        batched = not isinstance(cursor, (int, np.integer))
        if not isinstance(data, (torch.Tensor, TensorDictBase)):
            data = self._encode(data, batched)
        if self._storage is None:
            self._init(data, batched)
        leaves = self._check(data, batched)
        if isinstance(cursor, slice):
            start, stop, step = cursor.indices(self._rows)
            n = len(range(start, stop, step))
            if data.shape[0] != n:
                raise ValueError(f"got {data.shape[0]} items for a slice of {n} positions")
            end = start + (n - 1) * step + 1 if n else 0
            write_end = end
            last = start + (n - 1) * step
            lo, hi = (min(start, last), max(start, last)) if n else (0, -1)
        elif batched:
            cursor = torch.as_tensor(cursor, device=self._device).reshape(-1).long()
            if cursor.numel() != data.shape[0]:
                raise ValueError(f"got {data.shape[0]} items for {cursor.numel()} indices")
            if cursor.numel() == 0:
                return
            lo, hi = int(cursor.min()), int(cursor.max())
            if lo < 0 or hi >= self._rows:
                raise IndexError(f"indices must lie in [0, {self._rows}), got [{lo}, {hi}]")
            end = hi + 1
            write_end = int(cursor[-1]) + 1
        else:
            cursor = int(cursor)
            if not 0 <= cursor < self._rows:
                raise IndexError(f"index {cursor} is out of range [0, {self._rows})")
            lo = hi = cursor
            end = write_end = cursor + 1
        if self._journals_writes:
            self._mark_in_flight(cursor, lo, hi + 1)
        # copy_ moves data across devices itself; index_copy_ needs it on the storage's device
        pairs = (
            [(dest, leaves[key]) for key, dest in self._leaves]
            if self._is_td
            else [(self._tensor, data)]
        )
        contiguous = isinstance(cursor, slice) and cursor.step in (None, 1)
        try:
            for dest, value in pairs:
                if type(value) is not torch.Tensor:  # e.g. a MemoryMappedTensor
                    value = value.as_subclass(torch.Tensor)
                if isinstance(cursor, torch.Tensor):
                    dest.index_copy_(0, cursor, value.to(dest.device))
                elif contiguous:
                    dest.narrow(0, start, n).copy_(value)
                else:
                    dest[cursor].copy_(value)
            if self._objects:
                self._write_objects(cursor, data)
        except BaseException:
            if self._journals_writes:
                self._write_interrupted()
            raise
        self._record_write(end, write_end)
        self._bump_mutation_revision()

    def _write_objects(self, cursor: int | slice | torch.Tensor, data: TensorDictBase) -> None:
        """Writes the non-tensor entries of ``data`` into their stacks (one value per row;
        a memory-mapped stack rewrites its file, as tensordict does)."""
        for key in self._objects:
            self._storage.get(key)[cursor] = data.get(key)

    # storages whose items outlive the process (memory-mapped files) mark the slots a
    # write is overwriting before the copy, so that a kill in the middle of it never
    # leaves an item made of two transitions among the valid ones
    _journals_writes = False

    def _mark_in_flight(self, cursor: int | slice | torch.Tensor, lo: int, end: int) -> None:
        """Records that the rows ``cursor`` (all in ``[lo, end)``) are being written."""

    def _write_interrupted(self) -> None:
        """Makes the storage whole again after an exception in the middle of a write."""

    # -- reads -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len * self._inner

    def _attach(self) -> bool:
        """Adopts data another process allocated for this storage, if any (``shared_init``)."""
        return False

    def get(self, index: int | slice | torch.Tensor) -> Any:
        if self._storage is None and not self._attach():
            raise RuntimeError(f"cannot read from an empty {type(self).__name__}")
        if isinstance(index, torch.Tensor) and index.ndim == 1:
            data = self._gather(index)
        else:
            if isinstance(index, torch.Tensor) and index.ndim == 2 and self.ndim > 1:
                index = tuple(index.unbind(-1))  # [N, ndim] coordinates
            elif isinstance(index, range):
                index = torch.as_tensor(index)
            if isinstance(index, slice):
                data = self._storage[: self._len][index]
            else:
                data = self._storage[index]
        return data if self._layout is None else self._layout.decode(data)

    def _gather(self, index: torch.Tensor, extra: dict | None = None) -> Any:
        """Gathers a 1-D batch of items; ``extra`` entries are added at the root of the result."""
        if self._general:
            return self._gather_general(index, extra)
        if self._is_td and self._plan.arrays is not None and index.is_cpu:
            # CPU storage, numpy views of every leaf: numpy take and no per-leaf dispatch
            # (rl-cpp's RowGather is no faster here: what its prefetch saves, the call's
            # conversions cost back; the prioritized path fuses it into the draw instead)
            if index.dtype != torch.int64:
                index = index.long()
            batch_size = torch.Size((index.shape[0], *self._item_batch))
            return self._plan.gather_numpy(index.numpy(), batch_size, extra)
        if index.dtype != torch.int64:
            index = index.long()
        if index.device != self._device:
            index = index.to(self._device, non_blocking=True)
        np_index = index.numpy() if index.device.type == "cpu" else None
        if not self._is_td:
            return _take(self._tensor, self._np_tensor, index, np_index)
        plan = self._plan
        batch_size = torch.Size((index.shape[0], *self._item_batch))
        if extra:
            # entries given in extra (the sampled "index"...) are not read from the storage
            source: dict[str, Any] = {
                key: _take(t, array, index, np_index)
                for key, t, array in plan.leaves
                if key not in extra
            }
            source.update(extra)
        else:
            source = {key: _take(t, array, index, np_index) for key, t, array in plan.leaves}
        for key, child in plan.children:
            source[key] = child.gather(index, np_index, batch_size)
        return TensorDict._new_unsafe(source, batch_size=batch_size, device=plan.device)

    def _gather_general(self, index: torch.Tensor, extra: dict | None) -> TensorDictBase:
        """The gather of a storage with non-tensor or tensorclass entries: tensordict's
        indexing, which keeps tensorclasses and stacks the non-tensor values read."""
        if index.dtype != torch.int64:
            index = index.long()
        if index.device != self._device:
            index = index.to(self._device)
        out = self._storage[index]
        if extra:
            out.update(extra)
        return out

    def _row_plan(self, skip: frozenset = _NO_KEYS) -> RowPlan | None:
        """The one-call gather of a CPU TensorDict storage of 1-dim items (root keys in
        ``skip`` are left out), or ``None`` where it does not apply (other devices,
        multi-dimensional storages, leaves without a contiguous numpy view)."""
        plans = self.__dict__.get("_row_plans")
        if plans is None:
            return None
        try:
            return plans[skip]
        except KeyError:
            pass
        plan = None
        if (
            self._is_td
            and not self._general
            and self._layout is None
            and self.ndim == 1
            and not self._item_batch
            and self._device.type == "cpu"
            and self._plan.arrays is not None
        ):
            try:
                plan = RowPlan(self._plan, skip)
            except ValueError:  # a leaf is not C-contiguous
                plan = None
        plans[skip] = plan
        return plan

    def _column(self, key: Any) -> torch.Tensor:
        """The valid part ``[0, len)`` of one stored entry (no copy)."""
        if self._storage is None:
            raise RuntimeError(f"cannot read from an empty {type(self).__name__}")
        if not self._is_td:
            return self._tensor[: self._len]
        try:
            return self._storage[key][: self._len]
        except KeyError:
            raise KeyMismatchError(
                f"the storage holds no key {key!r} (stored keys: {', '.join(sorted(map(repr, self._sig)))})"
            ) from None

    def _has_key(self, key: Any) -> bool:
        return self._storage is not None and self._is_td and key in self._storage.keys(True, True)

    def _empty(self) -> None:
        self._len = 0
        self._write_end = 0
        self._bump_mutation_revision()

    # -- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "max_size": self.max_size,
            "len": self._len,
            "write_end": self._write_end,
            "data": None,
            "layout": None if self._layout is None else self._layout.state(),
        }
        if self._storage is not None:
            valid = self._storage[: self._len] if self._len else self._storage[:1]
            if self._is_td:
                state["data"] = encode_tensordict(valid)
                if self._objects:
                    # the values themselves: strings, numbers and containers of them
                    state["objects"] = {
                        "keys": [
                            key if isinstance(key, tuple) else (key,) for key in self._objects
                        ],
                        "values": [self._encode_objects(valid, key) for key in self._objects],
                    }
            else:
                state["data"] = valid.as_subclass(torch.Tensor).detach().cpu().clone()
        return state

    @staticmethod
    def _encode_objects(valid: TensorDictBase, key: Any) -> Any:
        """The values of the non-tensor entry ``key`` as plain containers (a checkpoint)."""
        try:
            return encode_item(valid.get(key).tolist())
        except TypeError as err:
            raise TypeError(f"cannot save the non-tensor entry {key!r}: {err}") from None

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        lazy_nd = self.ndim > 1 and self._storage is None  # max_size is rounded on allocation
        if int(state_dict["max_size"]) != self.max_size and not lazy_nd:
            raise ValueError(
                f"checkpoint has max_size {state_dict['max_size']}, this storage {self.max_size}"
            )
        data = state_dict["data"]
        length = int(state_dict["len"])
        layout = state_dict.get("layout")
        revision = self._mutation_revision
        self._empty()
        # a load is one change, whatever writes it takes
        self._mutation_revision = revision + 1
        if data is None:
            return
        if layout is not None:
            self._layout = ItemLayout.from_state(layout, self._layout)
        if isinstance(data, dict):
            data = decode_tensordict(data)
            objects = state_dict.get("objects")
            if objects:
                for key, values in zip(objects["keys"], objects["values"]):
                    data.set(tuple(key), NonTensorStack.from_list(decode_item(values)))
        if self._storage is None:
            self._init(data, batched=True)
        self._check(data, batched=True)
        if length:
            self.set(slice(0, length), data[:length])
        self._record_write(length, int(state_dict.get("write_end", length)))
        self._mutation_revision = revision + 1


class LazyTensorStorage(TensorStorage):
    """A :class:`TensorStorage` allocated on the first write, from the structure of the data.

    Args:
        max_size: the capacity.
        device: where the data lives (``"cuda"`` keeps the replay buffer on the GPU; a
            prioritized sampler then keeps its trees there too).
        consolidated: allocate the stored TensorDict's entries in one contiguous block
            (``TensorDict.consolidate``), as TorchRL; only for TensorDict data. Defaults to
            ``False``.
        shared_init: let several processes that were given this storage before its first
            write (forked, or pickled to spawned processes) share it: the first one to
            write allocates it as memory-mapped files in a temporary directory
            (``scratch_dir``), under a lock on that directory; the others open those files
            at their first write (or read), so all write into and read from the same
            rows. This is :class:`LazyMemmapStorage`'s ``shared_init`` machinery. As
            there, only the data is shared: each process keeps its own length and write
            cursor, so writers should write to their own rows (``set`` with explicit
            indices). Non-tensor entries (strings...) are refused at the first write
            (a ``TypeError``): their values would live in each process's memory. The
            data stays on the CPU: another ``device`` warns and is replaced
            by ``"cpu"`` at the first write, as TorchRL. Defaults to ``False``.
        cleanup_memmap: with ``shared_init=True``, remove the temporary directory when the
            storage of the process that built it is garbage collected or that process
            exits (never from a forked or spawned copy). Processes that have opened the
            files keep reading and writing them (a removed file stays mapped until its
            last user unmaps it); a process that had not yet opened them can no longer
            do so. ``False`` keeps the directory (remove ``scratch_dir`` yourself).
            TorchRL documents this argument ("the memmap is deleted after initialization
            and the storage operates in RAM") but does not act on it, leaving its
            directory behind. Defaults to ``True``.

    Raises:
        RuntimeError: ``shared_init=True`` with ``compilable=True``, as TorchRL (a compiled
            storage is not shared between processes).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), batch_size=32)
        >>> data = TensorDict(
        ...     {"observation": torch.randn(100, 4), ("next", "reward"): torch.randn(100, 1)},
        ...     batch_size=[100],
        ... )
        >>> _ = rb.extend(data)
        >>> batch = rb.sample()
        >>> batch["next", "reward"].shape, batch["index"].shape
        (torch.Size([32, 1]), torch.Size([32]))
    """

    def __init__(
        self,
        max_size: int,
        *,
        device: torch.device | str = "cpu",
        ndim: int = 1,
        compilable: bool = False,
        consolidated: bool = False,
        shared_init: bool = False,
        cleanup_memmap: bool = True,
    ) -> None:
        if shared_init and compilable:
            raise RuntimeError(
                "LazyTensorStorage(shared_init=True) cannot be compilable=True: a compiled "
                "storage is not shared between processes"
            )
        super().__init__(None, max_size=max_size, device=device, ndim=ndim, compilable=compilable)
        self.consolidated = consolidated
        self.shared_init = bool(shared_init)
        self.cleanup_memmap = bool(cleanup_memmap)
        self.scratch_dir: Path | None = None
        self._finalizer: weakref.finalize | None = None
        if self.shared_init:
            # imported here: LazyMemmapStorage is a LazyTensorStorage (module cycle)
            from rl.data.replay_buffers.storages._memmap import LazyMemmapStorage, _remove_dir

            self.scratch_dir = Path(tempfile.mkdtemp(prefix="rl-storage-init-"))
            # the coordination of the first write: its lock, allocation and reopening
            self._init_backing = LazyMemmapStorage(
                max_size,
                scratch_dir=self.scratch_dir,
                ndim=ndim,
                shared_init=True,
                auto_cleanup=False,
            )
            if self.cleanup_memmap:
                self._finalizer = weakref.finalize(self, _remove_dir, self.scratch_dir, os.getpid())

    # set by shared_init=True: the memory-mapped storage whose files this one adopts
    _init_backing = None

    def _init(self, data: Any, batched: bool = False) -> None:
        backing = self._init_backing
        if backing is None:
            super()._init(data, batched)
            return
        if backing._storage is None:
            backing._init(data, batched)  # allocates, or opens a sibling's files
        self._adopt(backing._storage)
        self._settle_on_cpu()

    def _settle_on_cpu(self) -> None:
        # as TorchRL, at the first write or read: the data is in CPU files, whatever
        # device was asked for (samplers build their indices on the storage's device)
        if self._device.type != "cpu":
            warnings.warn(
                f"LazyTensorStorage(shared_init=True) keeps its data in CPU memory-mapped "
                f"files: device='{self._device}' cannot be honored, the storage is on the cpu",
                stacklevel=3,
            )
            self._device = torch.device("cpu")

    def _attach(self) -> bool:
        backing = self._init_backing
        if backing is None or (backing._storage is None and not backing._open_shared()):
            return False
        self._adopt(backing._storage)
        self._settle_on_cpu()
        return True

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        # copies never remove the directory: the process that made it does
        state["_finalizer"] = None
        return state

    def _allocate(self, template: torch.Tensor | TensorDictBase) -> torch.Tensor | TensorDictBase:
        stored = super()._allocate(template)
        if self.consolidated:
            if not isinstance(stored, TensorDictBase):
                raise ValueError(
                    f"consolidated=True stores TensorDicts in one block; got a {type(template).__name__}"
                )
            stored = stored.consolidate()
        return stored

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_size={self.max_size}, len={len(self)}, device={self.device})"
