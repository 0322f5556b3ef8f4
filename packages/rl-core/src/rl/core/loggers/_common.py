"""The logger interface, and the video helpers every back-end shares."""

from __future__ import annotations

import abc
import importlib.util
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["Logger"]

_has_av = importlib.util.find_spec("av") is not None


def missing_extra(what: str, module: str, extra: str) -> ImportError:
    """The error for a back-end that is not installed, naming the extra that installs it."""
    return ImportError(
        f'{what} needs {module}, which is not installed: pip install "rl-core[{extra}]"'
    )


def to_float(value: Any) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"log_scalar expects one value, got a tensor of shape {tuple(value.shape)}"
            )
        return float(value.detach().cpu().item())
    return float(value)


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


def flatten_dict(cfg: Mapping, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_dict(value, f"{name}."))
        else:
            out[name] = value
    return out


def as_config(cfg: Any) -> dict[str, Any]:
    """A mapping, a dataclass or an argparse namespace as a plain dict."""
    import dataclasses

    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    if isinstance(cfg, Mapping):
        return dict(cfg)
    if hasattr(cfg, "__dict__"):
        return dict(vars(cfg))
    raise TypeError(f"log_hparams expects a mapping or a dataclass, got {type(cfg).__name__}")


class Logger(abc.ABC):
    """One interface over the logging back-ends (``torchrl.record.loggers.Logger``).

    Subclasses create their back-end's run in :meth:`_create_experiment` and implement
    :meth:`log_scalar`, :meth:`log_video`, :meth:`log_hparams` and :meth:`log_histogram`.
    :meth:`state_dict` / :meth:`load_state_dict` keep what a resumed run needs to continue
    the same logs (the trainer's checkpoints hold them).

    Args:
        exp_name: the experiment (run) name.
        log_dir: where the back-end writes.
    """

    def __init__(self, exp_name: str, log_dir: str | os.PathLike | None) -> None:
        self.exp_name = exp_name
        self.log_dir = log_dir
        self.experiment = self._create_experiment()

    @abc.abstractmethod
    def _create_experiment(self) -> Any: ...

    @abc.abstractmethod
    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Logs one scalar ``value`` under ``name`` at ``step``."""

    @abc.abstractmethod
    def log_video(self, name: str, video: Any, step: int | None = None, **kwargs: Any) -> None:
        """Logs a video (see :func:`video_frames` for the accepted layouts)."""

    @abc.abstractmethod
    def log_hparams(self, cfg: Any) -> None:
        """Logs the run's configuration (a mapping or a dataclass)."""

    @abc.abstractmethod
    def log_histogram(self, name: str, data: Sequence | torch.Tensor, **kwargs: Any) -> None:
        """Logs the histogram of ``data`` (keyword ``step``, ``bins``)."""

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Logs several scalars at the same step."""
        for name, value in metrics.items():
            self.log_scalar(name, value, step=step)

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue these logs (plain values)."""
        return {
            "exp_name": self.exp_name,
            "log_dir": None if self.log_dir is None else str(self.log_dir),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        return None

    def close(self) -> None:
        """Flushes and closes the back-end's run."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(exp_name={self.exp_name!r}, log_dir={str(self.log_dir)!r})"
