"""Gathering the same rows of several tables in one compiled call.

A replay buffer stores each entry of its items in its own table (observations,
actions, rewards...); a batch reads one random row of every table per item. Done
table by table (``numpy.take``, ``index_select``), each table waits for its own cache
misses; :class:`RowGather` requests the rows of several items in all tables ahead of
copying them (software prefetch), so that their misses overlap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rl.cpp import _C

__all__ = ["RowGather"]

_INT64 = np.dtype(np.int64)


def _table(x: Any, position: int) -> np.ndarray:
    """A C-contiguous CPU numpy array sharing ``x``'s memory (numpy, or a CPU tensor)."""
    if type(x) is not np.ndarray:
        if type(x).__module__.startswith("torch"):
            if x.device.type != "cpu":
                raise ValueError(f"table {position} is on {x.device}, expected a CPU array")
            x = x.detach().numpy()
        else:
            raise TypeError(
                f"table {position} must be a numpy array or a CPU torch tensor, got "
                f"{type(x).__name__}"
            )
    if x.ndim < 1:
        raise ValueError(f"table {position} has no rows (a 0-dim array)")
    if not x.flags.c_contiguous:
        raise ValueError(
            f"table {position} is not C-contiguous (strides {x.strides}); rows are copied "
            "as blocks of bytes, pass a contiguous array"
        )
    return x


class RowGather:
    """Copies row ``index[k]`` of every table to row ``k`` of a fresh array per table.

    The tables are read in place (no copy): keep them alive and do not resize them
    while the gather is in use. Each call checks that the indices lie in
    ``[0, rows)``, where ``rows`` is the shortest table's length.

    Args:
        tables: C-contiguous numpy arrays or CPU torch tensors of any dtype, one row per
            leading index.

    Examples:
        >>> import numpy as np
        >>> from rl.cpp import RowGather
        >>> obs = np.arange(12, dtype=np.float32).reshape(4, 3)
        >>> done = np.array([False, True, False, True])
        >>> gather = RowGather([obs, done])
        >>> rows_obs, rows_done = gather(np.array([3, 1]))
        >>> rows_obs.tolist(), rows_done.tolist()
        ([[9.0, 10.0, 11.0], [3.0, 4.0, 5.0]], [True, True])
    """

    def __init__(self, tables: Sequence[Any]) -> None:
        arrays = [_table(x, k) for k, x in enumerate(tables)]
        self._impl = _C.RowTables(arrays)
        self._specs = [(a.shape[1:], a.dtype) for a in arrays]
        self._shapes: tuple[int, list] = (-1, [])  # the outputs' shapes for the last n

    @property
    def rows(self) -> int:
        """The number of rows every table holds (the shortest table's length)."""
        return int(self._impl.rows)

    def __len__(self) -> int:
        return len(self._specs)

    def empty(self, n: int) -> list[np.ndarray]:
        """Uninitialised outputs for ``n`` rows: ``[n, *table.shape[1:]]`` per table."""
        last, shapes = self._shapes
        if last != n:
            shapes = [((n, *shape), dtype) for shape, dtype in self._specs]
            self._shapes = (n, shapes)
        return [np.empty(shape, dtype) for shape, dtype in shapes]

    def __call__(self, index: Any, out: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """The rows ``index`` (``[n]`` integers) of every table, as ``[n, ...]`` arrays.

        Raises:
            IndexError: an index is outside ``[0, rows)`` (nothing is copied).
            ValueError: ``out`` does not match the tables.
        """
        if type(index) is not np.ndarray:
            if type(index).__module__.startswith("torch"):
                index = index.detach().cpu().numpy()
            else:
                index = np.asarray(index)
        if index.dtype != _INT64:
            if index.dtype.kind not in "iu":
                raise TypeError(f"index has dtype {index.dtype}, expected integers")
            index = index.astype(_INT64)
        index = np.ascontiguousarray(index.reshape(-1))
        if out is None:
            out = self.empty(index.shape[0])
        self._impl.gather(index, out)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(tables={len(self)}, rows={self.rows})"
