"""Videos for the loggers: frames in one layout, encoded as mp4 or GIF with PyAV."""

from __future__ import annotations

import importlib.util
import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ._logger import missing_extra

__all__ = ["encode_video", "video_frames", "write_video"]

_has_av = importlib.util.find_spec("av") is not None


def video_frames(video: Any) -> np.ndarray:
    """A video as ``[T, H, W, 3]`` uint8 frames.

    Accepts ``[T, H, W, C]`` (what ``VideoRecorder`` gives), ``[T, C, H, W]`` and TorchRL's
    ``[N, T, C, H, W]`` (the N videos are played one after the other), with ``C`` in
    ``{1, 3, 4}``, as uint8 or floats in ``[0, 1]``.

    Raises:
        ValueError: any other layout.
    """
    frames = torch.as_tensor(np.asarray(video) if not isinstance(video, torch.Tensor) else video)
    frames = frames.detach().cpu()
    if frames.ndim == 5:
        frames = frames.flatten(0, 1)
    if frames.ndim == 4 and frames.shape[1] in (1, 3, 4) and frames.shape[-1] not in (1, 3, 4):
        frames = frames.permute(0, 2, 3, 1)
    if frames.ndim != 4 or frames.shape[-1] not in (1, 3, 4) or frames.shape[0] == 0:
        raise ValueError(
            "a video must be [T, H, W, C], [T, C, H, W] or [N, T, C, H, W] with C in {1, 3, 4} "
            f"and T >= 1, got shape {tuple(frames.shape)}"
        )
    if frames.is_floating_point():
        frames = (frames.clamp(0, 1) * 255).round()
    frames = frames.to(torch.uint8)
    if frames.shape[-1] == 1:
        frames = frames.expand(*frames.shape[:-1], 3)
    return np.ascontiguousarray(frames[..., :3].numpy())


def _even(frames: np.ndarray) -> np.ndarray:
    # yuv420p needs even sizes
    h, w = frames.shape[1] % 2, frames.shape[2] % 2
    if h or w:
        frames = np.pad(frames, ((0, 0), (0, h), (0, w), (0, 0)))
    return frames


def encode_video(frames: np.ndarray, fps: int, fmt: str = "mp4") -> bytes:
    """Encodes ``[T, H, W, 3]`` uint8 frames as an mp4 (H.264, or MPEG-4 when libx264 is
    missing) or a GIF, with PyAV (``rl-core[video]``)."""
    if not _has_av:
        raise missing_extra("writing videos", "PyAV", "video")
    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format=fmt) as container:
        if fmt == "gif":
            stream = container.add_stream("gif", rate=fps)
            stream.pix_fmt = "rgb8"
        else:
            frames = _even(frames)
            codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
            stream = container.add_stream(codec, rate=fps)
            stream.pix_fmt = "yuv420p"
        stream.height, stream.width = frames.shape[1], frames.shape[2]
        for img in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def write_video(frames: np.ndarray, path: str | os.PathLike, fps: int) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_video(frames, fps, "mp4"))
    return path
