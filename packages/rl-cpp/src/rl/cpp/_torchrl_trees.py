"""TorchRL's fixed-dtype segment tree names over rl.cpp's trees.

TorchRL exposes its compiled trees from ``torchrl._torchrl`` as ``SumSegmentTreeFp32``,
``SumSegmentTreeFp64``, ``MinSegmentTreeFp32`` and ``MinSegmentTreeFp64``, built as
``SumSegmentTreeFp32(size)``. These classes are :class:`~rl.cpp.SumSegmentTree` /
:class:`~rl.cpp.MinSegmentTree` with the dtype fixed, plus TorchRL's extra members
(``size``, ``identity_element``, ``at``). Like TorchRL's, an unset leaf of a min tree
holds the largest finite value of the dtype (not ``+inf``).

Differences kept from rl.cpp's trees: ``capacity`` is the number of leaves (TorchRL's is
``size`` rounded up to a power of two), ``scan_lower_bound`` of a value at or above the
total returns the last index with a nonzero priority (TorchRL's returns ``size``), a value
equal to a prefix sum maps to the next index (rl.cpp finds the first prefix sum ``> value``,
TorchRL the first ``>= value``; the two agree except on those exact ties), scanning a
tree whose priorities are all zero raises (TorchRL's returns 0 or ``size``), and
priorities are checked (negative or NaN values raise).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rl.cpp._segment_tree import MinSegmentTree, SumSegmentTree


class _FixedDtypeTree:
    """TorchRL members shared by the four fixed-dtype trees."""

    _fixed_dtype = ""
    capacity: int

    def _check_dtype(self, dtype: Any) -> str:
        if dtype is not None and np.dtype(str(dtype).rpartition(".")[2]).name != self._fixed_dtype:
            raise ValueError(
                f"{type(self).__name__} holds {self._fixed_dtype} priorities, got dtype={dtype!r}"
            )
        return self._fixed_dtype

    @property
    def size(self) -> int:
        """Number of priorities the tree holds (TorchRL's name for it)."""
        return self.capacity

    def at(self, indices: Any) -> Any:
        """Priorities at ``indices`` (TorchRL's name for ``tree[indices]``)."""
        return self[indices]  # type: ignore[index]


class SumSegmentTreeFp32(_FixedDtypeTree, SumSegmentTree):
    """TorchRL's ``SumSegmentTreeFp32``: a float32 :class:`~rl.cpp.SumSegmentTree`.

    Args:
        size: number of priorities (any int >= 1).
        dtype: only ``None`` or float32 (the parameter exists so pickling rebuilds the tree).
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:<index>"``.

    Examples:
        >>> import torch
        >>> from rl.cpp import SumSegmentTreeFp32
        >>> tree = SumSegmentTreeFp32(5)
        >>> tree[torch.tensor([0, 1, 2])] = torch.tensor([1.0, 2.0, 3.5])
        >>> tree.query(0, 5), tree.scan_lower_bound(3.2), tree.size
        (6.5, 2, 5)
    """

    _fixed_dtype = "float32"
    identity_element = 0.0

    def __init__(self, size: int, dtype: Any = None, device: Any = "cpu") -> None:
        super().__init__(size, self._check_dtype(dtype), device)


class SumSegmentTreeFp64(SumSegmentTreeFp32):
    """TorchRL's ``SumSegmentTreeFp64``: a float64 :class:`~rl.cpp.SumSegmentTree`.

    Examples:
        >>> from rl.cpp import SumSegmentTreeFp64
        >>> tree = SumSegmentTreeFp64(3)
        >>> tree[0], tree[1] = 0.1, 0.2
        >>> tree.query(0, 3)
        0.30000000000000004
    """

    _fixed_dtype = "float64"


class MinSegmentTreeFp32(_FixedDtypeTree, MinSegmentTree):
    """TorchRL's ``MinSegmentTreeFp32``: a float32 :class:`~rl.cpp.MinSegmentTree`.

    Unset leaves hold ``identity_element``, the largest finite float32, as in TorchRL.

    Args:
        size: number of priorities (any int >= 1).
        dtype: only ``None`` or float32 (the parameter exists so pickling rebuilds the tree).
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:<index>"``.

    Examples:
        >>> from rl.cpp import MinSegmentTreeFp32
        >>> tree = MinSegmentTreeFp32(4)
        >>> tree[1] = 0.5
        >>> tree.query(0, 4), tree[0] == tree.identity_element
        (0.5, True)
    """

    _fixed_dtype = "float32"

    def __init__(self, size: int, dtype: Any = None, device: Any = "cpu") -> None:
        super().__init__(size, self._check_dtype(dtype), device)
        self.update(list(range(self.capacity)), self.identity_element)

    @property
    def identity_element(self) -> float:
        """Value of an unset leaf: the largest finite value of the tree's dtype."""
        return float(np.finfo(self._fixed_dtype).max)


class MinSegmentTreeFp64(MinSegmentTreeFp32):
    """TorchRL's ``MinSegmentTreeFp64``: a float64 :class:`~rl.cpp.MinSegmentTree`.

    Examples:
        >>> from rl.cpp import MinSegmentTreeFp64
        >>> MinSegmentTreeFp64(3).query(0, 3)
        1.7976931348623157e+308
    """

    _fixed_dtype = "float64"
