"""ActionChunkTransform: the training targets of an action-chunking policy (ACT, VLA)."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from rl.core import ACTION_CHUNK_KEY, ACTION_IS_PAD_KEY

from ._base import Transform, _missing_key_error
from ._spec_utils import NestedKey, normalize_key

__all__ = ["ActionChunkTransform"]


def _trajectory_end(done: torch.Tensor, length: int) -> torch.Tensor:
    """For each step ``t``, the last step of its trajectory inside the window.

    Args:
        done: ``[*B, T]`` booleans, ``True`` where a trajectory ends.
        length: ``T``.

    Returns:
        ``[*B, T]`` int64: the first ``s >= t`` with ``done[s]``, else ``T - 1``.
    """
    steps = torch.arange(length, device=done.device).expand_as(done)
    ends = torch.where(done, steps, torch.full_like(steps, length - 1))
    return ends.flip(-1).cummin(-1).values.flip(-1)


class ActionChunkTransform(Transform):
    """Gathers, for each step ``t``, the chunk of actions ``a[t], ..., a[t + H - 1]``.

    A chunking policy (ACT, VLA-style) predicts ``H = chunk_size`` actions at once; this
    data transform builds its training target from time-structured data: the action
    ``[*B, T, action_dim]`` becomes the chunk ``[*B, T, H, action_dim]`` at
    ``chunk_key`` plus a boolean mask ``[*B, T, H]`` at ``pad_key``. Past the end of the
    window, or past the end of a trajectory when the data holds ``("next", done_key)``,
    the last valid action is repeated and the slot is marked as padding (``True``).
    Chunks never cross a row of the batch: a flat replay-buffer sample must be reshaped
    to ``[num_slices, slice_len]`` first.

    It is a data transform: on a replay buffer it runs on sampled batches (``extend``
    stores the raw steps); on an env it does nothing (running a chunk is the job of
    :class:`~rl.modules.MultiStepActorWrapper` or :class:`~rl.envs.MultiAction`).

    Args:
        chunk_size (int): the horizon ``H``.

    Keyword Args:
        action_key (NestedKey): the per-step action. Defaults to ``"action"``.
        chunk_key (NestedKey): where the chunk goes. Defaults to ``("vla_action", "chunk")``.
        pad_key (NestedKey): where the padding mask goes. Defaults to ``"action_is_pad"``.
        time_dim (int): the action's time dim; the action dim must follow it. Defaults
            to ``-2``.
        done_key (NestedKey or None): the done entry read under ``"next"`` to cut chunks
            at trajectory ends (``[*B, T]`` or ``[*B, T, 1]``; absent: each row is one
            trajectory). ``None`` ignores it. Defaults to ``"done"``.

    Raises:
        ValueError: ``chunk_size < 1``; a ``time_dim`` that is not the dim before the
            action dim; a done entry that does not line up with the action.
        KeyError: the data has no ``action_key``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = ActionChunkTransform(chunk_size=3)
        >>> td = t(TensorDict(action=torch.arange(4.0).view(1, 4, 1), batch_size=[1, 4]))
        >>> td["vla_action", "chunk"][0, :, :, 0]
        tensor([[0., 1., 2.],
                [1., 2., 3.],
                [2., 3., 3.],
                [3., 3., 3.]])
        >>> td["action_is_pad"][0]
        tensor([[False, False, False],
                [False, False, False],
                [False, False,  True],
                [False,  True,  True]])
    """

    def __init__(
        self,
        chunk_size: int,
        *,
        action_key: NestedKey = "action",
        chunk_key: NestedKey = ACTION_CHUNK_KEY,
        pad_key: NestedKey = ACTION_IS_PAD_KEY,
        time_dim: int = -2,
        done_key: NestedKey | None = "done",
    ) -> None:
        if int(chunk_size) < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        super().__init__()
        self.chunk_size = int(chunk_size)
        self.time_dim = int(time_dim)
        self.action_key = normalize_key(action_key)
        self.chunk_key = normalize_key(chunk_key)
        self.pad_key = normalize_key(pad_key)
        self.done_key = None if done_key is None else normalize_key(done_key)

    def _done(self, tensordict: TensorDictBase, lead: torch.Size) -> torch.Tensor | None:
        if self.done_key is None:
            return None
        next_key = (
            ("next", *self.done_key)
            if isinstance(self.done_key, tuple)
            else ("next", self.done_key)
        )
        done = tensordict.get(next_key, None)
        if done is None:
            return None
        if done.shape == (*lead, 1):
            done = done.squeeze(-1)
        elif done.shape != lead:
            raise ValueError(
                f"ActionChunkTransform: {next_key!r} has shape {tuple(done.shape)}, which does "
                f"not line up with the action's leading dims: expected {(*lead, 1)} or "
                f"{tuple(lead)}; pass done_key=None to ignore trajectory ends"
            )
        return done.bool()

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Write the chunk and its padding mask into ``tensordict`` (and return it)."""
        action = tensordict.get(self.action_key, None)
        if action is None:
            if self.missing_tolerance:
                return tensordict
            raise _missing_key_error(self, self.action_key, tensordict)
        dim = self.time_dim % action.ndim if action.ndim else -1
        if action.ndim < 2 or dim != action.ndim - 2:
            raise ValueError(
                "ActionChunkTransform needs the action dim to immediately follow the time "
                f"dim (action [..., T, action_dim]); got action of shape "
                f"{tuple(action.shape)} with time_dim={self.time_dim}"
            )
        length = action.shape[-2]
        lead = action.shape[:-1]
        offsets = torch.arange(self.chunk_size, device=action.device)
        index = torch.arange(length, device=action.device)[:, None] + offsets  # [T, H]
        done = self._done(tensordict, lead)
        if done is None:
            is_pad = (index >= length).expand(*lead, self.chunk_size)
            index = index.clamp_max(length - 1)
            chunk = action.index_select(-2, index.reshape(-1)).unflatten(
                -2, (length, self.chunk_size)
            )
        else:
            end = _trajectory_end(done, length).unsqueeze(-1)  # [*B, T, 1]
            is_pad = index > end
            index = torch.minimum(index.expand_as(is_pad), end)
            flat = index.reshape(*lead[:-1], length * self.chunk_size, 1)
            chunk = action.gather(-2, flat.expand(*flat.shape[:-1], action.shape[-1]))
            chunk = chunk.unflatten(-2, (length, self.chunk_size))
        tensordict.set(self.chunk_key, chunk)
        tensordict.set(self.pad_key, is_pad.contiguous())
        return tensordict

    def clone(self) -> ActionChunkTransform:
        return type(self)(
            self.chunk_size,
            action_key=self.action_key,
            chunk_key=self.chunk_key,
            pad_key=self.pad_key,
            time_dim=self.time_dim,
            done_key=self.done_key,
        )

    def _repr_args(self) -> str:
        return f"chunk_size={self.chunk_size}, chunk_key={self.chunk_key!r}"
