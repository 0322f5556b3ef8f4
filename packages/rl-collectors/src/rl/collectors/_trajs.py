"""Batches of whole trajectories (TorchRL's ``trajs_per_batch`` / ``traj_format``).

The collector's fixed-size batches are cut at trajectory boundaries (by
``("collector", "traj_ids")``); the steps of a trajectory that spans batches are kept
until its done step arrives, and finished trajectories wait in completion order until
``trajs_per_batch`` of them make a batch: ``[N, T_max]`` padded with zeros and a
``("collector", "mask")`` of the valid steps (``"padded"``), or the ``N`` trajectories
concatenated along time (``"cat"``).
"""

from __future__ import annotations

import warnings

import torch
from tensordict import TensorDictBase, pad_sequence

from ._common import end_of_traj

__all__ = ["TrajectoryAssembler", "check_traj_args"]

_FORMATS = ("padded", "cat")
_DONE_NAMES = ("done", "terminated", "truncated")


def check_traj_args(trajs_per_batch, traj_format, replay_buffer, split_trajs) -> str | None:
    """Validates the arguments; returns the format in effect (``None`` without
    ``trajs_per_batch``). Warns, as TorchRL 0.14.1, when the format is left to its
    default where it matters (batches are yielded, not written to a buffer)."""
    if traj_format is not None and traj_format not in _FORMATS:
        raise ValueError(f"traj_format must be 'padded' or 'cat', got {traj_format!r}")
    if trajs_per_batch is None:
        if traj_format is not None:
            raise ValueError(
                f"traj_format={traj_format!r} applies to batches of trajectories: pass "
                "trajs_per_batch as well"
            )
        return None
    if isinstance(trajs_per_batch, bool) or not isinstance(trajs_per_batch, int):
        raise TypeError(f"trajs_per_batch must be a positive int, got {trajs_per_batch!r}")
    if trajs_per_batch < 1:
        raise ValueError(f"trajs_per_batch must be a positive int, got {trajs_per_batch}")
    if split_trajs:
        raise ValueError("trajs_per_batch already yields whole trajectories: drop split_trajs")
    if traj_format is None:
        if replay_buffer is None:
            warnings.warn(
                "Collector(trajs_per_batch=...) without traj_format yields padded [N, T] "
                "batches; TorchRL's default will change to 'cat' in torchrl v0.16 (rl will "
                "follow): pass traj_format='padded' or 'cat' to keep one",
                FutureWarning,
                stacklevel=3,
            )
        traj_format = "padded"
    return traj_format


class TrajectoryAssembler:
    """Cuts batches into trajectories and hands them out ``n`` at a time.

    Args:
        n: trajectories per batch.
        traj_format: ``"padded"`` or ``"cat"``.
    """

    def __init__(self, n: int, traj_format: str) -> None:
        self.n, self.traj_format = n, traj_format
        self.partial: dict[int, list[TensorDictBase]] = {}  # traj id -> its chunks so far
        self.complete: list[TensorDictBase] = []  # finished, in completion order

    def __len__(self) -> int:
        return len(self.complete)

    def clear(self) -> None:
        """Drops the unfinished and the not yet yielded trajectories (after a reset)."""
        self.partial.clear()
        self.complete.clear()

    def ingest(self, batch: TensorDictBase) -> None:
        """Adds a ``[*B, T]`` batch (time last): each env row is cut where its
        trajectory id changes; a chunk whose last step is done finishes its trajectory."""
        ids = batch.get(("collector", "traj_ids"), None)
        if ids is None:
            raise KeyError(
                "trajs_per_batch needs ('collector', 'traj_ids') in the batches (keep "
                f"track_traj_ids=True); keys present: {sorted(map(str, batch.keys(True, True)))}"
            )
        rows = batch.reshape(-1, batch.shape[-1]) if batch.ndim > 1 else batch.unsqueeze(0)
        ids = rows.get(("collector", "traj_ids"))
        done = _done(rows)
        finished = []  # (step of the done flag, row, trajectory)
        for r in range(rows.shape[0]):
            values, counts = torch.unique_consecutive(ids[r], return_counts=True)
            start = 0
            for traj, count in zip(values.tolist(), counts.tolist(), strict=True):
                end = start + count
                self.partial.setdefault(traj, []).append(rows[r, start:end])
                if bool(done[r, end - 1]):
                    chunks = self.partial.pop(traj)
                    whole = chunks[0] if len(chunks) == 1 else torch.cat(chunks, 0)
                    finished.append((end - 1, r, whole))
                start = end
        finished.sort(key=lambda item: item[:2])
        self.complete.extend(traj for _, _, traj in finished)

    def pop_cat(self, n: int) -> TensorDictBase:
        """The next ``n`` (at most) finished trajectories, concatenated along time."""
        trajs, self.complete = self.complete[:n], self.complete[n:]
        return trajs[0] if len(trajs) == 1 else torch.cat(trajs, 0)

    def pop(self) -> TensorDictBase:
        """The next batch of ``n`` finished trajectories (``len(self) >= n``)."""
        trajs, self.complete = self.complete[: self.n], self.complete[self.n :]
        if self.traj_format == "cat":
            return torch.cat(trajs, 0)
        lengths = torch.tensor([t.shape[0] for t in trajs])
        out = pad_sequence(trajs, pad_dim=0)
        mask = torch.arange(out.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
        out.set(("collector", "mask"), mask.to(out.device))
        return out


def _done(rows: TensorDictBase) -> torch.Tensor:
    """``[R, T]``: whether a step ends its trajectory (any ``("next", done-like)`` flag)."""
    present = rows.keys(True)
    names = [name for name in _DONE_NAMES if ("next", name) in present]
    if names:
        return end_of_traj(rows.get("next"), names, rows.batch_dims)
    raise KeyError(
        "trajs_per_batch needs a ('next', 'done') (or terminated / truncated) entry; keys "
        f"present: {sorted(map(str, rows.keys(True, True)))}"
    )
