"""TensorboardLogger: event files through torch's SummaryWriter (``rl-core[tensorboard]``)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from typing import Any

import torch

from ._logger import Logger, as_config, flatten_dict, missing_extra, to_float
from ._video import encode_video, video_frames

__all__ = ["TensorboardLogger"]

_has_tensorboard = importlib.util.find_spec("tensorboard") is not None


class TensorboardLogger(Logger):
    """Writes TensorBoard event files in ``<log_dir>/<exp_name>``.

    Videos are written as animated GIF image summaries (what TensorBoard plays), encoded
    with PyAV (``rl-core[video]``) rather than moviepy.

    Args:
        exp_name: the experiment name.
        log_dir: the root directory (default ``"tb_logs"``).

    Raises:
        ImportError: tensorboard is not installed (``pip install "rl-core[tensorboard]"``).

    Examples:
        >>> import tempfile
        >>> logger = TensorboardLogger("run", log_dir=tempfile.mkdtemp())
        >>> logger.log_scalar("loss", 0.5, step=1)
        >>> logger.close()
    """

    def __init__(self, exp_name: str, log_dir: str | os.PathLike = "tb_logs") -> None:
        super().__init__(exp_name, log_dir)
        self.log_dir = self.experiment.log_dir

    def _create_experiment(self) -> Any:
        if not _has_tensorboard:
            raise missing_extra("TensorboardLogger", "tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(log_dir=os.path.join(self.log_dir, self.exp_name))

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        self.experiment.add_scalar(name, to_float(value), global_step=step)

    def log_video(
        self, name: str, video: Any, step: int | None = None, fps: int = 30, **kwargs: Any
    ) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        frames = video_frames(video)
        image = Summary.Image(
            height=frames.shape[1],
            width=frames.shape[2],
            colorspace=3,
            encoded_image_string=encode_video(frames, fps, "gif"),
        )
        summary = Summary(value=[Summary.Value(tag=name, image=image)])
        self.experiment._get_file_writer().add_summary(summary, step)

    def log_hparams(self, cfg: Any) -> None:
        flat = flatten_dict(as_config(cfg))
        clean = {
            k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in flat.items()
        }
        self.experiment.add_hparams(clean, metric_dict={}, run_name=".")

    def log_histogram(
        self,
        name: str,
        data: Sequence | torch.Tensor,
        step: int | None = None,
        bins: Any = "tensorflow",
        **kwargs: Any,
    ) -> None:
        values = torch.as_tensor(data).detach().cpu()
        self.experiment.add_histogram(name, values, global_step=step, bins=bins)

    def close(self) -> None:
        self.experiment.flush()
        self.experiment.close()

    def __repr__(self) -> str:
        return f"TensorboardLogger(exp_name={self.exp_name!r}, log_dir={self.log_dir!r})"
