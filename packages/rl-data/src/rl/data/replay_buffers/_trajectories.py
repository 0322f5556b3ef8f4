"""Trajectory boundaries in storage order: :func:`find_start_stop_traj`."""

from __future__ import annotations

from collections.abc import Sequence

import torch


class _EmptyError(ValueError, RuntimeError):
    """An empty input or cursor: a ``ValueError``, and the ``RuntimeError`` TorchRL raises."""


def _last_written(cursor: int | torch.Tensor | Sequence[int]) -> int:
    """The last row of a write cursor: an int, or the last of a tensor / range of rows."""
    if isinstance(cursor, int):
        return cursor
    rows = torch.as_tensor(cursor if isinstance(cursor, torch.Tensor) else list(cursor))
    if rows.numel() == 0:
        raise _EmptyError("cursor must not be empty: give the last row written (or rows)")
    return int(rows.reshape(-1)[-1])


def find_start_stop_traj(
    *,
    trajectory: torch.Tensor | None = None,
    end: torch.Tensor | None = None,
    at_capacity: bool,
    cursor: int | torch.Tensor | None = None,
    device: torch.device | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first step, last step and length of every trajectory stored in a buffer.

    Time runs along dim 0 of the input (``[T, *B]``, storage order). A full storage
    (``at_capacity=True``) is a ring: a trajectory without an end flag before the last
    row continues at row 0, and the row under the write ``cursor`` is an end (what
    followed it was overwritten). Otherwise the last row ends every trajectory.

    Args:
        trajectory: trajectory ids ``[T, *B]``; a trajectory ends where the id changes.
        end: end-of-trajectory flags ``[T, *B]`` (exclusive with ``trajectory``).
        at_capacity: whether the storage is full (a ring).
        cursor: the last row written, or the rows of the last write (a tensor, a range:
            the last one counts); only used when ``at_capacity``.
        device: where the boundaries are computed (results come back on the input's).

    Returns:
        ``(start, stop, lengths)``: ``start`` and ``stop`` are ``[N, 1 + len(B)]`` (time
        index first, then the batch coordinates), ordered by batch column, then by stop;
        ``lengths`` is ``[N]``.
        A trajectory crossing the wrap point has ``start[i, 0] > stop[i, 0]``.

    Raises:
        TypeError: both or neither of ``trajectory`` and ``end`` are given.
        ValueError: the input or the cursor is empty (also a ``RuntimeError``, as
            TorchRL raises).

    Examples:
        >>> import torch
        >>> from rl.data import find_start_stop_traj
        >>> end = torch.zeros(10, dtype=torch.bool)
        >>> end[2] = end[7] = True
        >>> start, stop, lengths = find_start_stop_traj(end=end, at_capacity=True, cursor=4)
        >>> start.squeeze(-1), stop.squeeze(-1), lengths
        (tensor([8, 3, 5]), tensor([2, 4, 7]), tensor([5, 2, 3]))
        >>> trajectory = torch.tensor([5, 5, 5, 0, 0, 1, 1, 1, 5, 5])
        >>> start, stop, lengths = find_start_stop_traj(trajectory=trajectory, at_capacity=True)
        >>> start.squeeze(-1), stop.squeeze(-1), lengths
        (tensor([8, 3, 5]), tensor([2, 4, 7]), tensor([5, 2, 3]))
    """
    if (trajectory is None) == (end is None):
        given = "both" if trajectory is not None else "neither"
        raise TypeError(f"Exactly one of trajectory and end must be given, got {given}")
    source = trajectory if trajectory is not None else end
    out_device = source.device
    if device is not None:
        source = source.to(device)
    if source.ndim == 0 or source.shape[0] == 0:
        raise _EmptyError(
            f"expected a [T, *B] tensor with T > 0, got an empty one of shape {tuple(source.shape)}"
        )
    T = source.shape[0]
    batch_shape = source.shape[1:]
    flat = source.reshape(T, -1)
    if trajectory is not None:
        ends = torch.zeros_like(flat, dtype=torch.bool)
        ends[:-1] = flat[1:] != flat[:-1]
        ends[-1] = (flat[-1] != flat[0]) if at_capacity else True
    else:
        ends = flat.bool().clone()
        if not at_capacity:
            ends[-1] = True
    if at_capacity and cursor is not None:
        ends[_last_written(cursor) % T] = True
    ends[-1] |= ~ends.any(0)  # a column with no end at all ends on its last row
    # per column (column-major): each end's start is one past the previous end
    col, row = ends.t().nonzero(as_tuple=True)
    prev = torch.roll(row, 1)
    first_of_col = torch.ones_like(col, dtype=torch.bool)
    first_of_col[1:] = col[1:] != col[:-1]
    if at_capacity:
        # the first trajectory of a column starts after the column's last end (ring)
        last_of_col = torch.ones_like(first_of_col)
        last_of_col[:-1] = col[1:] != col[:-1]
        prev[first_of_col] = row[last_of_col]
    else:
        prev[first_of_col] = -1
    start_row = (prev + 1) % T
    lengths = (row - start_row) % T + 1
    if batch_shape:
        coords = torch.stack(torch.unravel_index(col, batch_shape), -1)
        start = torch.cat([start_row[:, None], coords], -1)
        stop = torch.cat([row[:, None], coords], -1)
    else:
        start, stop = start_row[:, None], row[:, None]
    return start.to(out_device), stop.to(out_device), lengths.to(out_device)
