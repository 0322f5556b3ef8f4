"""Frame stacks of stored trajectories (``CatFrames`` on replay-buffer data, "unfolding").

Functions of tensors: ``starts`` / ``ends`` are ``[*B, T]`` episode boundaries, frames are
``[*B, T, *F]`` with time at dim ``starts.ndim - 1``. Each returns the ``N`` frames of a
window (oldest first) with a ``[*B, T]`` validity mask per position: False where the
window runs past the episode (the frame is then the episode's first / last one).
"""

from __future__ import annotations

import torch

__all__ = ["episode_ends", "past_windows", "future_windows", "next_windows", "pad_stack"]


def _gather_time(frames: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    tdim = idx.ndim - 1
    extra = frames.ndim - idx.ndim
    idx = idx.reshape(*idx.shape, *((1,) * extra)).expand(*idx.shape, *frames.shape[idx.ndim :])
    return frames.gather(tdim, idx)


def episode_ends(done: torch.Tensor) -> torch.Tensor:
    """``[*B, T]`` int64: the last step of the episode holding each step.

    Args:
        done: ``[*B, T]`` booleans, True on the last step of an episode.
    """
    T = done.shape[-1]
    t = torch.arange(T, device=done.device).expand(done.shape)
    last = done.clone()
    last[..., -1] = True
    idx = torch.where(last, t, torch.full_like(t, T))
    return idx.flip(-1).cummin(-1).values.flip(-1)


def past_windows(frames: torch.Tensor, starts: torch.Tensor, n: int):
    """Windows ``[t - n + 1, ..., t]`` clipped at the episode start."""
    T = starts.shape[-1]
    t = torch.arange(T, device=starts.device).expand(starts.shape)
    first = torch.where(starts, t, torch.zeros_like(t)).cummax(-1).values
    out = []
    for k in range(n - 1, -1, -1):
        src = t - k
        out.append((_gather_time(frames, torch.maximum(src, first)), src >= first))
    return out


def future_windows(frames: torch.Tensor, ends: torch.Tensor, n: int):
    """Windows ``[t, ..., t + n - 1]`` clipped at the episode end."""
    T = ends.shape[-1]
    t = torch.arange(T, device=ends.device).expand(ends.shape)
    out = []
    for k in range(n):
        src = t + k
        out.append((_gather_time(frames, torch.minimum(src, ends)), src <= ends))
    return out


def next_windows(root_windows, next_frame_windows):
    """Windows of ``("next", key)`` completed, before the episode start, by root frames.

    Position ``j`` holds the next frame ``k = n - 1 - j`` steps back when it is in the
    episode, else the root frame of position ``j + 1`` (one step later), as TorchRL.
    """
    out = []
    n = len(root_windows)
    for j, (frames, valid) in enumerate(next_frame_windows):
        if j == n - 1:
            out.append((frames, valid))
            continue
        r_frames, r_valid = root_windows[j + 1]
        m = valid.reshape(*valid.shape, *((1,) * (frames.ndim - valid.ndim)))
        out.append((torch.where(m, frames, r_frames), valid | r_valid))
    return out


def pad_stack(windows, dim: int, padding: str, padding_value: float) -> torch.Tensor:
    """Concatenates the window frames along ``dim`` (constant padding on invalid ones)."""
    parts = []
    for frames, valid in windows:
        if padding == "constant":
            m = valid.reshape(*valid.shape, *((1,) * (frames.ndim - valid.ndim)))
            frames = torch.where(m, frames, torch.full_like(frames, padding_value))
        parts.append(frames)
    return torch.cat(parts, dim)
