"""VideoRecorder: collects pixel frames and writes them as an mp4 through PyAV."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ._base import Transform, _missing_key_error
from ._spec_utils import NestedKey

__all__ = ["VideoRecorder", "write_video"]

_has_av = importlib.util.find_spec("av") is not None


def _to_hwc_uint8(frame: torch.Tensor) -> torch.Tensor:
    """One frame ``[C, H, W]`` / ``[H, W, C]`` (float in [0, 1] or uint8) to ``[H, W, 3]`` uint8."""
    if frame.ndim == 2:
        frame = frame.unsqueeze(-1)
    if frame.shape[-1] not in (1, 3, 4) and frame.shape[-3] in (1, 3, 4):
        frame = frame.permute(1, 2, 0)
    if frame.is_floating_point():
        frame = (frame.clamp(0, 1) * 255).round()
    frame = frame.to(torch.uint8)
    if frame.shape[-1] == 1:
        frame = frame.expand(*frame.shape[:-1], 3)
    elif frame.shape[-1] == 4:
        frame = frame[..., :3]
    return frame


def write_video(frames: torch.Tensor, path: str | os.PathLike, fps: int = 30) -> Path:
    """Encodes frames ``[T, H, W, 3]`` uint8 as an H.264 (or MPEG-4) mp4 file.

    Args:
        frames: the video.
        path: the output file.
        fps: frames per second.

    Raises:
        ImportError: PyAV is not installed (``pip install "rl-envs[video]"``).
        ValueError: ``frames`` is not ``[T, H, W, 3]`` uint8 with ``T >= 1``.
    """
    if not _has_av:
        raise ImportError('VideoRecorder needs PyAV: pip install "rl-envs[video]"')
    import av

    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != torch.uint8 or not len(frames):
        raise ValueError(
            f"write_video expects uint8 frames [T, H, W, 3] with T >= 1, got shape "
            f"{tuple(frames.shape)} and dtype {frames.dtype}"
        )
    # yuv420p needs even sizes
    H, W = frames.shape[1], frames.shape[2]
    if H % 2 or W % 2:
        frames = torch.nn.functional.pad(frames.permute(0, 3, 1, 2), (0, W % 2, 0, H % 2)).permute(
            0, 2, 3, 1
        )
    array = np.ascontiguousarray(frames.cpu().numpy())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.height, stream.width = array.shape[1], array.shape[2]
        stream.pix_fmt = "yuv420p"
        for img in array:
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


class VideoRecorder(Transform):
    """Records the ``"pixels"`` frames an env produces and writes them as a video on ``dump()``.

    Frames (``[H, W, C]`` uint8 or ``[C, H, W]`` floats in [0, 1]) are collected at reset
    and at every ``skip``-th step; batched envs are tiled side by side. ``dump()`` hands the
    video ``[T, H, W, 3]`` to ``logger.log_video(tag, video)`` when a logger is given, and
    otherwise writes ``<video_dir>/<tag>_<n>.mp4`` with PyAV.

    Args:
        logger: optional object with ``log_video(name, video, fps=...)``.
        tag: the video name.
        in_keys: frame keys (default ``["pixels"]``).
        skip: keep one frame every ``skip`` steps.
        fps: frames per second of the video.
        video_dir: folder of the mp4 files (default: the current directory).
        max_frames: frames kept in memory (older ones are dropped).

    Raises:
        ValueError: ``skip`` or ``fps`` is not a positive int.
        ImportError: on ``dump()`` without a logger when PyAV is missing.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> recorder = VideoRecorder(tag="demo", video_dir=tempfile.mkdtemp())
        >>> _ = recorder(TensorDict(pixels=torch.rand(5, 3, 32, 32), batch_size=[5]))
        >>> path = recorder.dump()
        >>> path.name, path.stat().st_size > 0
        ('demo_0.mp4', True)
    """

    def __init__(
        self,
        logger=None,
        tag: str = "video",
        in_keys: Sequence[NestedKey] | None = None,
        skip: int = 1,
        fps: int = 30,
        video_dir: str | os.PathLike | None = None,
        max_frames: int | None = None,
    ):
        for name, v in (("skip", skip), ("fps", fps)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"VideoRecorder {name} must be a positive int, got {v!r}")
        super().__init__(["pixels"] if in_keys is None else in_keys)
        self.logger = logger
        self.tag = tag
        self.skip = skip
        self.fps = fps
        self.video_dir = Path(video_dir) if video_dir is not None else Path.cwd()
        self.max_frames = max_frames
        self.frames: list[torch.Tensor] = []
        self._count = 0
        self._dumps = 0

    @property
    def has_step(self) -> bool:
        return True

    def _record(self, value: torch.Tensor, nbatch: int) -> None:
        frame = value.detach().cpu()
        if nbatch:
            frames = [_to_hwc_uint8(f) for f in frame.reshape(-1, *frame.shape[nbatch:])]
            frame = torch.cat(frames, 1)
        else:
            frame = _to_hwc_uint8(frame)
        self.frames.append(frame)
        if self.max_frames is not None and len(self.frames) > self.max_frames:
            del self.frames[0]

    def _call(self, next_tensordict):
        self._count += 1
        if self._count % self.skip:
            return next_tensordict
        for in_key in self.in_keys:
            value = next_tensordict.get(in_key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise _missing_key_error(self, in_key, next_tensordict)
            self._record(value, next_tensordict.batch_dims)
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        self._count = 0
        for in_key in self.in_keys:
            value = tensordict_reset.get(in_key, None)
            if value is not None:
                self._record(value, tensordict_reset.batch_dims)
        return tensordict_reset

    def forward(self, tensordict):
        """Records the frames of a batch of data (its leading dims are tiled / stacked)."""
        for in_key in self.in_keys:
            value = tensordict.get(in_key, None)
            if value is None:
                raise _missing_key_error(self, in_key, tensordict)
            for frame in value.reshape(-1, *value.shape[tensordict.batch_dims :]):
                self._record(frame, 0)
        return tensordict

    def dump(self, suffix: str | None = None) -> Path | None:
        """Writes (or logs) the collected frames and clears them.

        Returns:
            the path of the written mp4 (``None`` when logged or when there is no frame).
        """
        if not self.frames:
            return None
        video = torch.stack(self.frames, 0)
        self.frames = []
        if self.logger is not None:
            self.logger.log_video(self.tag, video, fps=self.fps)
            return None
        name = f"{self.tag}_{suffix if suffix is not None else self._dumps}.mp4"
        self._dumps += 1
        return write_video(video, self.video_dir / name, fps=self.fps)

    def _repr_args(self) -> str:
        return f"tag={self.tag!r}, keys={self.in_keys}, skip={self.skip}"
