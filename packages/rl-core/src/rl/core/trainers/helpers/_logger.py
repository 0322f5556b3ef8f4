"""The logging fields of a config-driven script (TorchRL's ``trainers.helpers.logger``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["LoggerConfig"]


@dataclass
class LoggerConfig:
    """The logging fields of a script's config.

    Examples:
        >>> cfg = LoggerConfig(logger="tensorboard", exp_name="cartpole")
        >>> cfg.record_interval, cfg.record_frames
        (1000, 1000)
    """

    logger: str = "csv"
    """Logger back-end: ``"csv"``, ``"tensorboard"``, ``"wandb"`` or ``"mlflow"``."""
    record_video: bool = False
    """Render a video of the validation rollouts."""
    no_video: bool = True
    """Record no video (TorchRL keeps both flags)."""
    exp_name: str = ""
    """Experiment name (the log directory gets a date and a unique id added)."""
    record_interval: int = 1000
    """Collected batches between two validation rollouts."""
    record_frames: int = 1000
    """Steps of each validation rollout."""
    recorder_log_keys: Any = field(default_factory=lambda: None)
    """Keys of the validation rollouts to log (``None``: the reward)."""
    offline_logging: bool = True
    """Log offline (wandb)."""
    project_name: str = ""
    """Project of the run (wandb)."""
