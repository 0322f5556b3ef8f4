"""get_logger and generate_exp_name."""

from __future__ import annotations

import os
import uuid
from datetime import datetime
from typing import Any, Literal

from ._logger import Logger

__all__ = ["generate_exp_name", "get_logger"]

_KINDS = ("csv", "tensorboard", "wandb", "mlflow")


def generate_exp_name(model_name: str, experiment_name: str) -> str:
    """A unique run name: ``<model>_<experiment>_<8 hex digits>_<yy_mm_dd-HH_MM_SS>``.

    Examples:
        >>> name = generate_exp_name("SAC", "pendulum")
        >>> name.startswith("SAC_pendulum_"), len(name.split("_")[2])
        (True, 8)
    """
    stamp = datetime.now().strftime("%y_%m_%d-%H_%M_%S")
    return "_".join((model_name, experiment_name, uuid.uuid4().hex[:8], stamp))


def get_logger(
    logger_type: Literal["csv", "tensorboard", "wandb", "mlflow", ""] | None,
    logger_name: str | os.PathLike,
    experiment_name: str,
    **kwargs: Any,
) -> Logger | None:
    """Builds a logger by kind.

    Args:
        logger_type: ``"csv"``, ``"tensorboard"``, ``"wandb"`` or ``"mlflow"``; ``""`` or
            ``None`` gives ``None`` (no logging).
        logger_name: the log directory (the tracking directory for MLflow).
        experiment_name: the run name.
        **kwargs: ``wandb_kwargs`` / ``mlflow_kwargs`` for those back-ends, ``video_format``
            / ``video_fps`` for the CSV logger.

    Raises:
        ValueError: unknown ``logger_type``.
        ImportError: the back-end is not installed (naming the extra).

    Examples:
        >>> import tempfile
        >>> get_logger("csv", tempfile.mkdtemp(), "run")
        CSVLogger(...)
        >>> get_logger("", "logs", "run") is None
        True
    """
    if logger_type in ("", None):
        return None
    if logger_type == "csv":
        from ._csv import CSVLogger

        return CSVLogger(experiment_name, log_dir=logger_name, **kwargs)
    if logger_type == "tensorboard":
        from ._tensorboard import TensorboardLogger

        return TensorboardLogger(experiment_name, log_dir=logger_name)
    if logger_type == "wandb":
        from ._wandb import WandbLogger

        return WandbLogger(experiment_name, save_dir=logger_name, **kwargs.get("wandb_kwargs", {}))
    if logger_type == "mlflow":
        from ._mlflow import MLFlowLogger

        return MLFlowLogger(
            experiment_name, tracking_uri=logger_name, **kwargs.get("mlflow_kwargs", {})
        )
    raise ValueError(
        f"unknown logger_type {logger_type!r}; expected one of {', '.join(_KINDS)} or ''"
    )
