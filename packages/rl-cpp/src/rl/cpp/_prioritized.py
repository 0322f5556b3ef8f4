"""Prioritized-replay steps fused into one compiled call each, on a pair of CPU trees.

A prioritized replay buffer samples with a sum tree (the draw) and a min tree (the
largest importance weight), then writes new priorities into both. Done with separate
tree calls and array operations, a batch of 256 costs a dozen Python-level calls; these
two functions do each step in one call with the GIL released, so that the buffer's step
costs little more than the trees' own work (Schaul et al., 2016,
https://arxiv.org/abs/1511.05952).
"""

from __future__ import annotations

import operator
import sys
from typing import Any

import numpy as np

from rl.cpp import _C
from rl.cpp._gather import RowGather
from rl.cpp._segment_tree import (
    MinSegmentTree,
    SumSegmentTree,
    check_layout,
    check_unsigned_index,
)

__all__ = [
    "prioritized_sample",
    "prioritized_sample_rows",
    "prioritized_sample_rows_into",
    "prioritized_update",
    "prioritized_update_at",
]

_INT64 = np.dtype(np.int64)
_FLOAT32 = np.dtype(np.float32)


def _cpu_pair(sum_tree: Any, min_tree: Any) -> None:
    if not isinstance(sum_tree, SumSegmentTree) or not isinstance(min_tree, MinSegmentTree):
        raise TypeError(
            "expected a SumSegmentTree and a MinSegmentTree, got "
            f"{type(sum_tree).__name__} and {type(min_tree).__name__}"
        )
    if sum_tree.device != "cpu" or min_tree.device != "cpu":
        raise ValueError(
            f"the fused steps run on CPU trees, got trees on {sum_tree.device} and "
            f"{min_tree.device}; use the trees' own methods on CUDA"
        )
    if sum_tree.dtype != min_tree.dtype:
        raise TypeError(f"the trees' dtypes differ: {sum_tree.dtype} and {min_tree.dtype}")


def _shape(x: Any) -> tuple:
    shape = getattr(x, "shape", None)
    return tuple(shape) if shape is not None else np.shape(x)


def _count(count: Any) -> int:
    """``count`` as an int; a float (``7.5``) or a bool is refused rather than truncated."""
    if isinstance(count, bool):
        raise TypeError(f"count must be an int, got {count!r} (bool)")
    try:
        return operator.index(count)
    except TypeError:
        raise TypeError(f"count must be an int, got {count!r} ({type(count).__name__})") from None


def _vector(x: Any, name: str, dtype: np.dtype, capacity: int = 0) -> np.ndarray:
    """A contiguous 1-D numpy array of ``dtype`` (numpy in place; torch CPU as a view).

    ``capacity`` names the tree in the error of a uint64 index above the int64 range.
    """
    if type(x) is not np.ndarray:
        if type(x).__module__.startswith("torch"):
            if x.device.type != "cpu":
                raise ValueError(f"{name} is on {x.device}, expected a CPU array")
            x = x.detach().numpy()
        else:
            x = np.asarray(x)
    if x.dtype != dtype:
        kinds = "iu" if dtype == _INT64 else "biuf"
        if x.dtype.kind not in kinds:
            raise TypeError(f"{name} has dtype {x.dtype}, expected {dtype}")
        if x.dtype.kind == "u" and x.dtype.itemsize == 8 and dtype == _INT64:
            check_unsigned_index(x, capacity)
        x = x.astype(dtype)
    if x.ndim != 1:
        x = x.reshape(-1)
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    return x


def prioritized_sample(
    sum_tree: SumSegmentTree,
    min_tree: MinSegmentTree,
    count: int,
    uniform: Any,
    beta: float,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Draws leaves among the first ``count`` with probability ``p_i / sum_{j<count} p_j``.

    One compiled call reads the total and the minimum of ``[0, count)``, scans
    ``uniform * total`` (a draw past ``count - 1`` by rounding is clamped to it) and
    computes the importance weights ``(p_i / min_j p_j) ** -beta`` in float32; with a
    zero minimum the weights are normalised by the largest one of the batch.

    Args:
        sum_tree: a CPU :class:`SumSegmentTree` holding the priorities.
        min_tree: the :class:`MinSegmentTree` holding the same priorities.
        count: how many leaves (from 0) are valid, ``1 <= count <= capacity``.
        uniform: ``[B]`` numbers in ``[0, 1)`` (numpy or CPU torch), converted to the
            trees' dtype.
        beta: the importance-sampling exponent.

    Returns:
        ``(index, weight, total)``: ``[B]`` int64 leaves, ``[B]`` float32 weights and
        the total priority of ``[0, count)``.

    Raises:
        RuntimeError: the priorities of ``[0, count)`` sum to zero.
        IndexError: ``count`` is not in ``[1, capacity]``.
        TypeError: ``count`` is not an int (``7.5`` is refused, not truncated).
        ValueError: ``beta`` is NaN, infinite or negative.

    Examples:
        >>> import numpy as np
        >>> from rl.cpp import MinSegmentTree, SumSegmentTree, prioritized_sample
        >>> s, m = SumSegmentTree(4), MinSegmentTree(4)
        >>> for tree in (s, m):
        ...     tree.update(np.arange(4), np.array([1.0, 0.0, 2.0, 1.0], dtype=np.float32))
        >>> index, weight, total = prioritized_sample(s, m, 3, np.array([0.1, 0.5]), beta=1.0)
        >>> index.tolist(), weight.tolist(), total
        ([0, 2], [1.0, 0.5], 3.0)
    """
    _cpu_pair(sum_tree, min_tree)
    values = _vector(uniform, "uniform", sum_tree.dtype)
    count = _count(count)
    n = values.shape[0]
    index = np.empty(n, dtype=_INT64)
    weight = np.empty(n, dtype=_FLOAT32)
    total = _C.prioritized_sample(
        sum_tree._impl, min_tree._impl, count, values, float(beta), index, weight
    )
    if not total > 0:
        raise RuntimeError(
            f"cannot sample: the priorities of the {count} valid leaves sum to {total}"
        )
    return index, weight, total


def prioritized_sample_rows(
    sum_tree: SumSegmentTree,
    min_tree: MinSegmentTree,
    count: int,
    uniform: Any,
    beta: float,
    gather: RowGather,
    out: list[np.ndarray] | None = None,
    *,
    check: bool = True,
) -> tuple[np.ndarray, np.ndarray, float, list[np.ndarray]]:
    """:func:`prioritized_sample`, and the sampled rows of ``gather``'s tables, in one call.

    A prioritized replay buffer's draw and its batch's data come out of one compiled
    call: the rows of every table are prefetched and copied right after the scan.

    Args:
        sum_tree, min_tree, count, uniform, beta: as :func:`prioritized_sample`.
        gather: the tables to read (each holds at least ``count`` rows).
        out: preallocated outputs (``gather.empty(B)``); fresh ones when omitted.
        check: check and convert the arguments in Python first. ``False`` is for hot
            paths that pass a trusted pair of CPU trees and a contiguous 1-D numpy
            ``uniform`` of the trees' dtype; the compiled call still checks every
            shape, dtype and index (a wrong argument raises ``TypeError`` there).

    Returns:
        ``(index, weight, total, rows)``: as :func:`prioritized_sample`, and
        ``rows[t][k]`` the row ``index[k]`` of table ``t``.

    Raises:
        RuntimeError: the priorities of ``[0, count)`` sum to zero.
        IndexError: ``count`` is not in ``[1, capacity]`` or exceeds a table's rows.
        TypeError: ``count`` is not an int.
        ValueError: ``beta`` is NaN, infinite or negative.

    Examples:
        >>> import numpy as np
        >>> from rl.cpp import MinSegmentTree, RowGather, SumSegmentTree
        >>> from rl.cpp import prioritized_sample_rows
        >>> s, m = SumSegmentTree(4), MinSegmentTree(4)
        >>> for tree in (s, m):
        ...     tree.update(np.arange(4), np.array([1.0, 0.0, 2.0, 1.0], dtype=np.float32))
        >>> obs = np.arange(8.0).reshape(4, 2)
        >>> index, weight, total, (rows,) = prioritized_sample_rows(
        ...     s, m, 3, np.array([0.1, 0.5]), 1.0, RowGather([obs])
        ... )
        >>> index.tolist(), weight.tolist(), rows.tolist()
        ([0, 2], [1.0, 0.5], [[0.0, 1.0], [4.0, 5.0]])
    """
    if check:
        _cpu_pair(sum_tree, min_tree)
        if not isinstance(gather, RowGather):
            raise TypeError(f"gather must be a RowGather, got {type(gather).__name__}")
        uniform = _vector(uniform, "uniform", sum_tree.dtype)
        count, beta = _count(count), float(beta)
    n = uniform.shape[0]
    index = np.empty(n, dtype=_INT64)
    weight = np.empty(n, dtype=_FLOAT32)
    if out is None:
        out = gather.empty(n)
    total = _C.prioritized_sample_rows(
        sum_tree._impl, min_tree._impl, count, uniform, beta, index, weight, gather._impl, out
    )
    if not total > 0:
        raise RuntimeError(
            f"cannot sample: the priorities of the {count} valid leaves sum to {total}"
        )
    return index, weight, total, out


def prioritized_update(
    sum_tree: SumSegmentTree,
    min_tree: MinSegmentTree,
    index: Any,
    priority: Any,
    eps: float,
    alpha: float,
    *,
    check: bool = True,
) -> float:
    """Writes ``(priority + eps) ** alpha`` at ``index`` in both trees, in one call.

    Args:
        sum_tree: a CPU :class:`SumSegmentTree`.
        min_tree: the :class:`MinSegmentTree` of the same capacity and dtype.
        index: ``[B]`` leaf indices (numpy or CPU torch, any integer dtype).
        priority: ``[B]`` raw priorities (finite, non-negative).
        eps: added to every priority before the exponent.
        alpha: the priority exponent.
        check: check and convert the arguments in Python first. ``False`` is for hot
            paths that pass a trusted pair of CPU trees, contiguous 1-D numpy arrays
            (int64 ``index``, ``priority`` of the trees' dtype) of the same length; the
            compiled call still checks them (a wrong one raises ``TypeError`` there) and
            every index and priority.

    Returns:
        The largest priority of the batch (before ``eps`` and ``alpha``).

    Raises:
        IndexError: an index is out of range (a uint64 one above the int64 range
            included). ValueError: a priority is negative, NaN or infinite, the lengths
            or layouts differ (``(2, 2)`` indices with ``(4,)`` priorities; ``[B]`` with
            ``[B, 1]`` is accepted), ``eps`` is not finite or ``alpha`` not a finite
            number >= 0. Neither tree changes then.

    Examples:
        >>> import numpy as np
        >>> from rl.cpp import MinSegmentTree, SumSegmentTree, prioritized_update
        >>> s, m = SumSegmentTree(4), MinSegmentTree(4)
        >>> prioritized_update(s, m, np.array([0, 3]), np.array([3.0, 1.0]), eps=0.0, alpha=0.5)
        3.0
        >>> round(s.total(), 4), m.min()
        (2.7321, 1.0)
    """
    if check:
        _cpu_pair(sum_tree, min_tree)
        index_shape, priority_shape = _shape(index), _shape(priority)
        index = _vector(index, "index", _INT64, sum_tree.capacity)
        priority = _vector(priority, "priority", sum_tree.dtype)
        if priority.shape[0] == index.shape[0] and priority_shape != index_shape:
            check_layout("priority", priority_shape, "index", index_shape)
        if priority.shape[0] == 1 and index.shape[0] != 1:
            priority = np.repeat(priority, index.shape[0])
        eps, alpha = float(eps), float(alpha)
    return _C.prioritized_update(sum_tree._impl, min_tree._impl, index, priority, eps, alpha)


def prioritized_sample_rows_into(
    sum_tree: SumSegmentTree,
    min_tree: MinSegmentTree,
    count: int,
    uniform: np.ndarray,
    beta: float,
    index: np.ndarray,
    weight: np.ndarray,
    gather: RowGather,
    out: list[np.ndarray],
) -> float:
    """:func:`prioritized_sample_rows` into preallocated outputs, for hot paths.

    Nothing is converted or allocated in Python: the compiled call checks every shape,
    dtype and index itself (a wrong argument raises ``TypeError``) and writes the draw
    into ``index``, ``weight`` and ``out``.

    Args:
        sum_tree, min_tree: a pair of CPU trees of one dtype.
        count: how many leaves (from 0) are valid, ``1 <= count <= capacity``.
        uniform: ``[B]`` contiguous numbers in ``[0, 1)`` of the trees' dtype (numpy).
        beta: the importance-sampling exponent.
        index: ``[B]`` int64 output, the drawn leaves.
        weight: ``[B]`` float32 output, their importance weights.
        gather: the tables to read (each holds at least ``count`` rows).
        out: ``gather.empty(B)``, the rows of every table.

    Returns:
        The total priority of ``[0, count)``. When it is not positive nothing could be
        drawn and the outputs hold no meaningful values: the caller raises.

    Raises:
        IndexError: ``count`` is not in ``[1, capacity]`` or exceeds a table's rows.
        TypeError: an argument has the wrong type, dtype or shape.
        ValueError: ``beta`` is NaN, infinite or negative.

    Examples:
        >>> import numpy as np
        >>> from rl.cpp import MinSegmentTree, RowGather, SumSegmentTree
        >>> from rl.cpp import prioritized_sample_rows_into
        >>> s, m = SumSegmentTree(4), MinSegmentTree(4)
        >>> for tree in (s, m):
        ...     tree.update(np.arange(4), np.array([1.0, 0.0, 2.0, 1.0], dtype=np.float32))
        >>> gather = RowGather([np.arange(8.0).reshape(4, 2)])
        >>> index, weight = np.empty(2, np.int64), np.empty(2, np.float32)
        >>> out = gather.empty(2)
        >>> uniform = np.array([0.1, 0.5], dtype=np.float32)
        >>> prioritized_sample_rows_into(s, m, 3, uniform, 1.0, index, weight, gather, out)
        3.0
        >>> index.tolist(), weight.tolist(), out[0].tolist()
        ([0, 2], [1.0, 0.5], [[0.0, 1.0], [4.0, 5.0]])
    """
    return _C.prioritized_sample_rows(
        sum_tree._impl, min_tree._impl, count, uniform, beta, index, weight, gather._impl, out
    )


# numpy dtype -> torch dtype name (``np.dtype.name`` costs microseconds: not on this path)
_TORCH_NAMES = {_INT64: "int64", _FLOAT32: "float32", np.dtype(np.float64): "float64"}


def _address(array: Any, name: str, dtype: np.dtype, n: int | None) -> tuple[int, int]:
    """The address and length of a 1-D contiguous CPU tensor or array of ``dtype``.

    Raises ``TypeError`` or ``ValueError`` naming ``name`` for anything the compiled
    update could not read safely (it reads the memory without further checks).
    """
    if isinstance(array, np.ndarray):
        if array.dtype != dtype:
            raise TypeError(f"{name} must have dtype {dtype.name}, got {array.dtype.name}")
        if array.ndim != 1 or not array.flags.c_contiguous:
            raise ValueError(
                f"{name} must be a 1-D contiguous array, got shape {array.shape} "
                f"(contiguous={array.flags.c_contiguous})"
            )
        length, address = array.shape[0], array.ctypes.data
    else:
        torch = sys.modules.get("torch")  # a tensor implies torch is imported
        if torch is None or not isinstance(array, torch.Tensor):
            raise TypeError(
                f"{name} must be a torch.Tensor or a numpy.ndarray, got {type(array).__name__}"
            )
        torch_name = _TORCH_NAMES[dtype]
        if array.dtype is not getattr(torch, torch_name):
            raise TypeError(f"{name} must have dtype torch.{torch_name}, got {array.dtype}")
        if array.layout is not torch.strided or not array.is_cpu:
            raise ValueError(
                f"{name} must be a dense CPU tensor, got layout {array.layout} on {array.device}"
            )
        if array.ndim != 1 or not array.is_contiguous():
            raise ValueError(
                f"{name} must be a 1-D contiguous tensor, got shape {tuple(array.shape)} "
                f"(contiguous={array.is_contiguous()})"
            )
        length, address = array.shape[0], array.data_ptr()
    if n is not None and length != n:
        raise ValueError(f"{name} has {length} values for {n} indices")
    return address, length


def prioritized_update_at(
    sum_tree: SumSegmentTree,
    min_tree: MinSegmentTree,
    index: Any,
    priority: Any,
    eps: float,
    alpha: float,
) -> float:
    """:func:`prioritized_update` read in place from two contiguous CPU tensors or arrays.

    For callers that hold torch tensors: the compiled update reads their memory directly
    (no DLPack or numpy view, whose cost dominates a small batch). The arguments are
    checked first (type, dtype, 1-D, contiguous, CPU, equal lengths); every index and
    priority is then checked before either tree changes.

    Args:
        sum_tree, min_tree: a pair of CPU trees of one dtype.
        index: the leaf indices, a 1-D contiguous CPU ``torch.Tensor`` or
            ``numpy.ndarray`` of int64.
        priority: the raw priorities, 1-D contiguous CPU, of the trees' dtype, as many
            as ``index``.
        eps: added to every priority before the exponent.
        alpha: the priority exponent.

    Returns:
        The largest priority of the batch (before ``eps`` and ``alpha``); 0 when empty.

    Raises:
        TypeError: a tree is not an rl-cpp CPU tree of the pair's dtype, or ``index`` /
            ``priority`` is not a tensor or array of int64 / the trees' dtype.
        ValueError: ``index`` or ``priority`` is not 1-D, contiguous and on the CPU, their
            lengths differ, a priority is negative, NaN or infinite, ``eps`` is not
            finite or ``alpha`` not a finite number >= 0.
        IndexError: an index is out of range. Neither tree changes on an error.

    Examples:
        >>> import numpy as np
        >>> from rl.cpp import MinSegmentTree, SumSegmentTree, prioritized_update_at
        >>> s, m = SumSegmentTree(4), MinSegmentTree(4)
        >>> index = np.array([0, 3], dtype=np.int64)
        >>> priority = np.array([3.0, 1.0], dtype=np.float32)
        >>> prioritized_update_at(s, m, index, priority, 0.0, 0.5)
        3.0
        >>> round(s.total(), 4), m.min()
        (2.7321, 1.0)
    """
    if not isinstance(sum_tree, SumSegmentTree) or not isinstance(min_tree, MinSegmentTree):
        raise TypeError(
            "sum_tree and min_tree must be an rl.cpp SumSegmentTree and MinSegmentTree, got "
            f"{type(sum_tree).__name__} and {type(min_tree).__name__}"
        )
    dtype = sum_tree.dtype
    if min_tree.dtype != dtype or sum_tree.device != "cpu" or min_tree.device != "cpu":
        raise TypeError(
            f"the trees must be a CPU pair of one dtype, got {dtype.name} on {sum_tree.device} "
            f"and {min_tree.dtype.name} on {min_tree.device}"
        )
    index_address, n = _address(index, "index", _INT64, None)
    priority_address, _ = _address(priority, "priority", dtype, n)
    return _C.prioritized_update_at(
        sum_tree._impl, min_tree._impl, index_address, priority_address, n, eps, alpha
    )
