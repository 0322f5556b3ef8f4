"""Sum and min segment trees in plain torch: the fallback when rl-cpp is not installed.

rl-data declares rl-cpp as a dependency and uses its compiled trees; an install without
it (``pip install --no-deps``, a platform without an rl-cpp wheel) still gets prioritized
replay from these trees, with the methods of :class:`rl.cpp.SumSegmentTree` that the
samplers use (batched ``update`` and ``__getitem__``, ``query``, ``scan_lower_bound``).
Each batched call is a few tensor operations per tree level, on the tree's device.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch

_DTYPES = {"float32": torch.float32, "float64": torch.float64}
_INT64_MAX = torch.iinfo(torch.int64).max
_UINT64 = getattr(torch, "uint64", None)


def _unit_free(shape: tuple) -> tuple:
    """``shape`` without its trailing dims of size 1 (``[B]`` and ``[B, 1]`` alike)."""
    end = len(shape)
    while end and shape[end - 1] == 1:
        end -= 1
    return tuple(shape[:end])


def _index_error(value: int, capacity: int, at: int | None = None) -> IndexError:
    """rl-cpp's message for an index outside ``[0, capacity)``."""
    where = "" if at is None else f" (at position {at})"
    return IndexError(
        f"index {value}{where} is out of range for a tree of capacity {capacity}; "
        f"expected 0 <= index < {capacity}"
    )


class _TorchSegmentTree:
    """A complete binary tree over ``capacity`` leaves in one tensor (node 1 the root,
    node ``k``'s children ``2k`` and ``2k + 1``, leaf ``i`` at node ``size + i``)."""

    _neutral: float
    _kind: str  # "sum" or "min", in error messages

    def __init__(self, capacity: int, dtype: Any = "float32", device: Any = "cpu") -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        name = str(dtype).removeprefix("torch.")
        if name not in _DTYPES:
            raise TypeError(f"dtype must be float32 or float64, got {dtype!r}")
        self._capacity = capacity
        self._size = 1 << (capacity - 1).bit_length()
        self._levels = self._size.bit_length() - 1
        self._dtype = _DTYPES[name]
        self._device = torch.device(device)
        self._nodes = torch.full(
            (2 * self._size,), self._neutral, dtype=self._dtype, device=self._device
        )

    @staticmethod
    def _combine(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def device(self) -> str:
        return str(self._device)

    def __len__(self) -> int:
        return self._capacity

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self._capacity}, dtype={self._dtype})"

    def _returns_numpy(self, given: Any) -> bool:
        # as rl-cpp's trees: results in the input's library (numpy for numpy arrays and
        # lists on a CPU tree)
        return not isinstance(given, torch.Tensor) and self._device.type == "cpu"

    def _scalar_index(self, index: Any) -> int:
        index = int(index)
        if not 0 <= index < self._capacity:
            raise _index_error(index, self._capacity)
        return index

    def _index(self, indices: Any) -> torch.Tensor:
        """``indices`` as a flat int64 tensor on the tree's device, checked as rl-cpp does
        (a uint64 index above the int64 range is reported with its value, not wrapped)."""
        if isinstance(indices, slice):
            indices = range(*indices.indices(self._capacity))
        if isinstance(indices, (list, tuple)):
            given = indices
            indices = np.asarray(given)  # its natural dtype: uint64 for 2**64 - 1
            if indices.size == 0:
                indices = indices.astype(np.int64)
            elif indices.dtype.kind in "fO":  # ints beyond int64 among others
                flat = np.asarray(given, dtype=object).reshape(-1)
                if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in flat):
                    for at, v in enumerate(flat):
                        if not 0 <= v < self._capacity:
                            raise _index_error(int(v), self._capacity, at)
        if isinstance(indices, torch.Tensor) and _UINT64 is not None and indices.dtype == _UINT64:
            indices = indices.cpu().numpy()
        if isinstance(indices, np.ndarray) and indices.dtype.kind not in "iu":
            raise TypeError(
                f"indices has dtype {indices.dtype}, expected int64 or an integer dtype to "
                "convert from"
            )
        if isinstance(indices, np.ndarray) and indices.dtype == np.uint64:
            flat = indices.reshape(-1)
            big = np.flatnonzero(flat > _INT64_MAX)
            if big.size:
                raise _index_error(int(flat[big[0]]), self._capacity, int(big[0]))
            indices = flat.astype(np.int64)
        index = torch.as_tensor(indices, device=self._device).reshape(-1)
        if index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
            raise TypeError(
                f"indices has dtype {index.dtype}, expected torch.int64 or an integer dtype "
                "to convert from"
            )
        index = index.long()
        if index.numel():
            bad = (index < 0) | (index >= self._capacity)
            if bool(bad.any()):
                at = int(bad.nonzero()[0, 0])
                raise _index_error(int(index[at]), self._capacity, at)
        return index

    def update(self, indices: Any, values: Any) -> None:
        """Writes ``values`` at ``indices``, as :meth:`rl.cpp.SumSegmentTree.update`: a
        number for all, or an array of the shape of ``indices`` (a trailing dim of size 1
        may differ); with a repeated index, the last value wins."""
        if isinstance(indices, numbers.Integral):
            if not isinstance(values, numbers.Real):
                raise TypeError(
                    f"values must be a number when the index is an int, got {type(values).__name__}"
                )
            indices = [self._scalar_index(indices)]
        index = self._index(indices)
        n = index.numel()
        value = torch.as_tensor(values, dtype=self._dtype, device=self._device)
        if isinstance(values, numbers.Real):
            value = value.expand(n)
        else:
            shape = tuple(value.shape)
            value = value.reshape(-1)
            if value.numel() != n:
                raise ValueError(
                    f"values has {value.numel()} elements, expected {n} (one per index)"
                )
            if isinstance(indices, (slice, range)):
                expected = (n,)
            elif isinstance(indices, torch.Tensor):
                expected = tuple(indices.shape)
            else:
                expected = tuple(np.shape(indices))
            if shape != expected and _unit_free(shape) != _unit_free(expected):
                raise ValueError(
                    f"values has shape {shape}, expected {expected} (the shape of indices, up "
                    "to trailing dims of size 1)"
                )
        self._check_values(value)
        if n == 0:
            return
        if n > 1:
            # the last write of every index wins
            unique, inverse = torch.unique(index, return_inverse=True)
            order = torch.arange(n, device=self._device)
            last = torch.full_like(unique, -1).scatter_reduce_(0, inverse, order, "amax")
            index, value = unique, value[last]
        node = index + self._size
        self._nodes[node] = value
        for _ in range(self._levels):
            node = torch.unique(node // 2)
            self._nodes[node] = self._combine(self._nodes[2 * node], self._nodes[2 * node + 1])

    def _check_values(self, value: torch.Tensor) -> None:
        """Rejects NaN and negative priorities (and infinite ones in a sum tree), as rl-cpp."""
        ok = value >= 0
        if self._kind == "sum":
            ok &= value < float("inf")
        if value.numel() and not bool(ok.all()):
            at = int((~ok).nonzero()[0, 0])
            expected = (
                "a finite value >= 0"
                if self._kind == "sum"
                else "a value >= 0 (+inf clears a leaf)"
            )
            raise ValueError(
                f"priority {float(value[at]):g} (at position {at}) is invalid for a "
                f"{self._kind} tree; expected {expected}"
            )

    def __setitem__(self, indices: Any, values: Any) -> None:
        self.update(indices, values)

    def __getitem__(self, indices: Any) -> Any:
        """The leaves at ``indices``: a float for an int, else an array of the input's
        library and shape (numpy for a list, a slice or a numpy array on a CPU tree)."""
        if isinstance(indices, numbers.Integral):
            return float(self._nodes[self._scalar_index(indices) + self._size])
        index = self._index(indices)
        shape = index.shape if isinstance(indices, slice) else torch.as_tensor(indices).shape
        out = self._nodes[index + self._size].reshape(shape)
        return out.numpy() if self._returns_numpy(indices) else out

    def query(self, start: int, end: int) -> float:
        """The sum (min) of the leaves ``[start, end)``."""
        start, end = int(start), int(end)
        if not 0 <= start <= end <= self._capacity:
            raise IndexError(
                f"query range [{start}, {end}) is invalid for a tree of capacity "
                f"{self._capacity}; expected 0 <= start <= end <= {self._capacity}"
            )
        nodes = []
        low, high = start + self._size, end + self._size
        while low < high:
            if low & 1:
                nodes.append(low)
                low += 1
            if high & 1:
                high -= 1
                nodes.append(high)
            low //= 2
            high //= 2
        if not nodes:
            return self._neutral
        part = self._nodes[torch.tensor(nodes, device=self._device)]
        return float(self._reduce(part))

    @staticmethod
    def _reduce(values: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class TorchSumSegmentTree(_TorchSegmentTree):
    """The sum tree of prioritized replay, in torch (see :class:`rl.cpp.SumSegmentTree`).

    Examples:
        >>> import torch
        >>> tree = TorchSumSegmentTree(4)
        >>> tree.update(torch.arange(4), torch.tensor([1.0, 0.0, 2.0, 1.0]))
        >>> tree.query(0, 3), tree.scan_lower_bound(torch.tensor([0.5, 1.5, 9.0])).tolist()
        (3.0, [0, 2, 3])
    """

    _neutral = 0.0
    _kind = "sum"

    @staticmethod
    def _combine(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        return left + right

    @staticmethod
    def _reduce(values: torch.Tensor) -> torch.Tensor:
        return values.sum()

    def total(self) -> float:
        return float(self._nodes[1])

    def scan_lower_bound(self, values: Any) -> Any:
        """The smallest ``i`` with ``p[0] + ... + p[i] > value``, per value.

        The descent is rl-cpp's (it goes right only into a subtree holding mass), so both
        draw the same index for the same value: a value at or above the total gives the
        last nonzero leaf. An int for a number, else an int64 array of the input's
        library and shape.

        Raises:
            ValueError: a value is negative or NaN, or every priority is zero (nothing
                can be drawn), with rl-cpp's messages.
        """
        value = torch.as_tensor(values, device=self._device).to(self._dtype)
        shape = value.shape
        value = value.reshape(-1).clone()
        if value.numel():
            bad = ~(value >= 0)
            # one read back for both checks (a sync on a CUDA tree)
            if bool(bad.any() | ~(self._nodes[1] > 0)):
                if bool(bad.any()):
                    at = int(bad.nonzero()[0, 0])
                    raise ValueError(
                        f"scan value {float(value[at]):g} (at position {at}) is invalid; "
                        "expected a value >= 0, such as uniform(0, 1) * total()"
                    )
                raise ValueError(
                    "cannot scan a sum tree whose priorities are all zero (total 0); expected "
                    "at least one priority > 0"
                )
        node = torch.ones_like(value, dtype=torch.long)
        for _ in range(self._levels):
            left = self._nodes[2 * node]
            right = (value >= left) & (self._nodes[2 * node + 1] > 0)
            value -= torch.where(right, left, torch.zeros_like(left))
            node = 2 * node + right.long()
        index = (node - self._size).reshape(shape)
        if isinstance(values, numbers.Real):
            return int(index)
        return index.numpy() if self._returns_numpy(values) else index


class TorchMinSegmentTree(_TorchSegmentTree):
    """The min tree of prioritized replay, in torch (see :class:`rl.cpp.MinSegmentTree`).

    Examples:
        >>> import torch
        >>> tree = TorchMinSegmentTree(4)
        >>> tree.update(torch.tensor([0, 2]), torch.tensor([3.0, 0.5]))
        >>> tree.query(0, 2), tree.min()
        (3.0, 0.5)
    """

    _neutral = float("inf")
    _kind = "min"

    @staticmethod
    def _combine(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        return torch.minimum(left, right)

    @staticmethod
    def _reduce(values: torch.Tensor) -> torch.Tensor:
        return values.min()

    def min(self) -> float:
        return float(self._nodes[1])
