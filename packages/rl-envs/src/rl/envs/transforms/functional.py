"""Stateless tensor functions behind transforms (TorchRL's ``torchrl.envs.transforms.functional``)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = ["cat_frames"]

_PADDINGS = ("same", "constant")


def cat_frames(
    tensor: Tensor,
    N: int,
    dim: int,
    *,
    padding: Literal["same", "constant"] = "same",
    padding_value: float = 0.0,
    time_dim: int = -1,
    done_mask: Tensor | None = None,
) -> Tensor:
    """Concatenates a sliding window of the ``N`` last frames along ``dim``.

    Position ``t`` of the output holds frames ``t - N + 1, ..., t`` (oldest first),
    concatenated along ``dim``. Frames before the start of the trajectory are padded:
    with the trajectory's first frame (``"same"``) or with ``padding_value``
    (``"constant"``). Frame stacking was used in "Playing Atari with Deep Reinforcement
    Learning" (https://arxiv.org/abs/1312.5602).

    Args:
        tensor: the frames ``[*B, T, *F]`` (time at ``time_dim``).
        N: the window length (``>= 1``).
        dim: the (negative) dim the frames are concatenated along; its size is
            multiplied by ``N``.
        padding: ``"same"`` or ``"constant"``.
        padding_value: the fill of ``"constant"`` padding.
        time_dim: the (negative) time dim of ``tensor``.
        done_mask: optional ``[*B, T, N]`` bool (or ``[*B, T, 1, N]``: singleton dims
            before ``N`` are dropped), True where a window position reaches across a
            trajectory start (it is padded); ``None``: one trajectory, only the first
            ``N - 1`` positions are padded.

    Returns:
        ``tensor`` with its size along ``dim`` multiplied by ``N``; same dtype and device.

    Raises:
        ValueError: a non-negative ``dim`` or ``time_dim``, an unknown ``padding``, or a
            ``done_mask`` of the wrong shape.

    Examples:
        >>> frames = torch.arange(8.0).view(4, 2)
        >>> cat_frames(frames, N=3, dim=-1, time_dim=-2, padding="constant")[1]
        tensor([0., 0., 0., 1., 2., 3.])
        >>> cat_frames(frames, N=2, dim=-1, time_dim=-2)[0]
        tensor([0., 1., 0., 1.])
    """
    if dim >= 0:
        raise ValueError(f"dim must be < 0 to be invariant to leading batch dims, got dim={dim}")
    if time_dim >= 0:
        raise ValueError(
            f"time_dim must be < 0 to be invariant to leading batch dims, got time_dim={time_dim}"
        )
    if padding not in _PADDINGS:
        raise ValueError(f"padding must be one of {list(_PADDINGS)}, got {padding!r}")
    if not isinstance(N, int) or N < 1:
        raise ValueError(f"N must be an int >= 1, got {N!r}")
    T = tensor.shape[time_dim]
    n_batch = tensor.ndim + time_dim  # dims before the time dim
    n_feat = -time_dim - 1  # dims after it
    steps = torch.arange(T, device=tensor.device)
    # pos[t, k]: the time index of window position k (oldest first) at step t
    pos = steps.unsqueeze(-1) - (N - 1) + torch.arange(N, device=tensor.device)
    valid = pos >= 0
    if done_mask is not None:
        expected = (*tensor.shape[:n_batch], T, N)
        shape = tuple(done_mask.shape)
        # a done entry's feature dims may sit between T and N (``[*B, T, 1, N]``, as
        # the unfolded ``("next", "done")`` of CatFrames): singletons, dropped
        lead, mid = shape[: n_batch + 1], shape[n_batch + 1 : -1]
        if lead + shape[-1:] != expected or any(d != 1 for d in mid):
            raise ValueError(
                f"done_mask must have shape {expected} ([*B, T, N], singleton dims allowed "
                f"before N), got {shape}"
            )
        done_mask = done_mask.reshape(expected)
        valid = valid & ~done_mask.to(torch.bool)
        pos = pos.expand(done_mask.shape)
    if padding == "same":
        # the padded positions are a prefix of the window: take its first real frame
        first = valid.to(torch.int8).argmax(-1, keepdim=True)
        pos = torch.where(valid, pos, pos.gather(-1, first))
    pos = pos.clamp_min(0)
    moved = tensor.movedim(time_dim, -1)  # [*B, *F, T]
    frames = []
    for k in range(N):
        p = pos[..., k]
        p = p.reshape(*p.shape[:-1], *([1] * n_feat), T)
        frame = moved.gather(-1, p.expand(moved.shape))
        if padding == "constant":
            v = valid[..., k]
            v = v.reshape(*v.shape[:-1], *([1] * n_feat), T).expand(moved.shape)
            frame = torch.where(
                v, frame, torch.as_tensor(padding_value, dtype=frame.dtype, device=frame.device)
            )
        frames.append(frame.movedim(-1, time_dim))
    return torch.cat(frames, dim)
