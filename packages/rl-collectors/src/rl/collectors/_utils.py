"""``split_trajectories``: a ``[*B, T]`` batch as ``[n_traj, max_len]`` trajectories.

Zero-padded with a mask by default, or as nested tensors (``as_nested=True``)."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from rl.core import NestedKey

__all__ = ["split_trajectories"]


def _with_last(key: NestedKey, last: str) -> NestedKey:
    return last if isinstance(key, str) else (*key[:-1], last)


def split_trajectories(
    rollout_tensordict: TensorDictBase,
    *,
    prefix: NestedKey | None = None,
    trajectory_key: NestedKey | None = None,
    done_key: NestedKey | None = None,
    as_nested: bool | torch.layout = False,
) -> TensorDictBase:
    """Splits a rollout into its trajectories, zero-padded to the longest one or nested.

    The batch is read in memory order (env by env, time last); a trajectory is a run of
    consecutive steps with the same id. Each trajectory becomes one row of the output,
    left-aligned, with a boolean mask telling the valid steps; with ``as_nested`` each
    entry is instead a nested tensor holding one tensor per trajectory, of its own length.

    Args:
        rollout_tensordict: a ``[*B, T]`` (or ``[T]``) TensorDict of adjacent steps.
        prefix: where ``"traj_ids"`` and ``"mask"`` are read and written (default
            ``"collector"`` when the input has a ``"collector"`` entry, else the root).
        trajectory_key: the key of the trajectory ids (supersedes ``prefix``); the mask
            is written next to it.
        done_key: when there are no ids, trajectories end where ``("next", done_key)``
            (default ``"done"``) is set, and ids are written.
        as_nested: return nested tensors (``torch.strided`` layout, as TorchRL 0.14.1
            returns them) instead of padded ones. A ``torch.layout`` is accepted for
            TorchRL's spelling; the result is strided whichever is given, because a
            TensorDict cannot hold jagged tensors under a ``[n_traj, -1]`` batch size.
            ``out.to_padded_tensor(mask_key=mask_key)`` gives the padded output.

    Returns:
        a TensorDict of batch size ``[n_traj, max_len]`` with the mask entry; with
        ``as_nested``, batch size ``[n_traj, -1]`` and no mask (each trajectory keeps
        its own length).

    Raises:
        KeyError: neither the trajectory ids nor the done flags are in the input.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.collectors.utils import split_trajectories
        >>> done = torch.zeros(6, 1, dtype=torch.bool)
        >>> done[3] = True
        >>> data = TensorDict(
        ...     obs=torch.arange(6), next=TensorDict(done=done, batch_size=[6]), batch_size=[6]
        ... )
        >>> out = split_trajectories(data)
        >>> out["obs"]
        tensor([[0, 1, 2, 3],
                [4, 5, 0, 0]])
        >>> out["mask"]
        tensor([[ True,  True,  True,  True],
                [ True,  True, False, False]])
        >>> nested = split_trajectories(data, as_nested=True)
        >>> nested.batch_size
        torch.Size([2, -1])
        >>> [traj.tolist() for traj in nested["obs"].unbind()]
        [[0, 1, 2, 3], [4, 5]]
    """
    td = rollout_tensordict
    if trajectory_key is not None:
        ids_key, mask_key = trajectory_key, _with_last(trajectory_key, "mask")
    else:
        if prefix is None and "collector" in td.keys():
            prefix = "collector"
        if prefix is None:
            ids_key, mask_key = "traj_ids", "mask"
        else:
            base = (prefix,) if isinstance(prefix, str) else tuple(prefix)
            ids_key, mask_key = (*base, "traj_ids"), (*base, "mask")
    td = td.copy()
    ids = td.get(ids_key, None)
    if ids is None:
        key = ("next", done_key or "done")
        done = td.get(key, None)
        if done is None:
            raise KeyError(
                f"split_trajectories needs the trajectory ids {ids_key!r} or the done flags "
                f"{key!r}; the tensordict has keys {sorted(map(str, td.keys(True, True)))}"
            )
        done = done.reshape(*td.batch_size, -1).any(-1)
        ends = done.reshape(-1, td.batch_size[-1]).clone()
        ends[:, -1] = True  # a trajectory never runs from one env row into the next
        flat_ends = ends.reshape(-1)
        ids = torch.cat([flat_ends.new_zeros(1, dtype=torch.int64), flat_ends[:-1].cumsum(0)])
        ids = ids.reshape(td.batch_size)
        td.set(ids_key, ids)
    flat_ids = ids.reshape(-1)
    n = flat_ids.numel()
    new_run = torch.ones(n, dtype=torch.bool, device=flat_ids.device)
    new_run[1:] = flat_ids[1:] != flat_ids[:-1]
    run = new_run.cumsum(0) - 1  # the trajectory of each step
    starts = new_run.nonzero().squeeze(-1)
    lengths = torch.diff(starts, append=torch.tensor([n], device=starts.device))
    n_traj, max_len = starts.numel(), int(lengths.max())
    offset = torch.arange(n, device=flat_ids.device) - starts[run]
    flat = td.reshape(-1)
    if as_nested is not False:
        split_sizes = lengths.tolist()

        def nest(value: torch.Tensor) -> torch.Tensor:
            return torch.nested.as_nested_tensor(
                list(value.split(split_sizes)), layout=torch.strided
            )

        return flat.apply(nest, batch_size=[n_traj, -1])

    def pad(value: torch.Tensor) -> torch.Tensor:
        out = value.new_zeros((n_traj, max_len, *value.shape[1:]))
        out[run, offset] = value
        return out

    out = flat.apply(pad, batch_size=[n_traj, max_len])
    mask = torch.zeros(n_traj, max_len, dtype=torch.bool, device=flat_ids.device)
    mask[run, offset] = True
    out.set(mask_key, mask)
    return out
