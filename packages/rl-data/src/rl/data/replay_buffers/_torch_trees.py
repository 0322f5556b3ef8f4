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

import torch

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


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

    def _index(self, indices: Any) -> torch.Tensor:
        if isinstance(indices, slice):
            indices = range(*indices.indices(self._capacity))
        index = torch.as_tensor(indices, device=self._device).reshape(-1)
        if index.dtype.is_floating_point or index.dtype == torch.bool:
            raise TypeError(f"indices must be integers, got dtype {index.dtype}")
        index = index.long()
        if index.numel() and not (int(index.min()) >= 0 and int(index.max()) < self._capacity):
            bad = index[(index < 0) | (index >= self._capacity)][0]
            raise IndexError(f"index {int(bad)} is out of range for capacity {self._capacity}")
        return index

    def update(self, indices: Any, values: Any) -> None:
        """Writes ``values`` (one per index, or one for all) at ``indices``; with a
        repeated index, the last value wins."""
        index = self._index(indices)
        n = index.numel()
        value = torch.as_tensor(values, dtype=self._dtype, device=self._device).reshape(-1)
        if value.numel() == 1 and n != 1:
            value = value.expand(n)
        elif value.numel() != n:
            raise ValueError(f"got {value.numel()} values for {n} indices")
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
            return float(self._nodes[self._index(indices) + self._size])
        index = self._index(indices)
        shape = index.shape if isinstance(indices, slice) else torch.as_tensor(indices).shape
        out = self._nodes[index + self._size].reshape(shape)
        return out.numpy() if self._returns_numpy(indices) else out

    def query(self, start: int, end: int) -> float:
        """The sum (min) of the leaves ``[start, end)``."""
        start, end = int(start), int(end)
        if not 0 <= start <= end <= self._capacity:
            raise IndexError(f"query [{start}, {end}) is out of range [0, {self._capacity}]")
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
        last nonzero leaf, an all-zero tree gives 0. An int for a number, else an int64
        array of the input's library and shape.

        Raises:
            ValueError: a value is negative or NaN.
        """
        value = torch.as_tensor(values, device=self._device).to(self._dtype)
        shape = value.shape
        value = value.reshape(-1).clone()
        bad = ~(value >= 0)
        if value.numel() and bool(bad.any()):
            at = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"scan value {float(value[at]):g} (at position {at}) is invalid; expected a "
                "value >= 0, such as uniform(0, 1) * total()"
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
