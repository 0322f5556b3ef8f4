"""get_logger and generate_exp_name."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from ._logger import Logger, service_backend_options_for

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
    *,
    state_dict: Mapping[str, Any] | None = None,
    service_backend: Literal["direct", "process", "ray"] = "direct",
    service_backend_options: dict[str, Any] | None = None,
    use_ray_service: bool = False,
    ray_actor_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Logger | None:
    """Builds a logger by kind.

    Args:
        logger_type: ``"csv"``, ``"tensorboard"``, ``"wandb"`` or ``"mlflow"``; ``""`` or
            ``None`` gives ``None`` (no logging).
        logger_name: the log directory (the tracking directory for MLflow, given to
            :class:`MLFlowLogger` as a ``file:`` URI, as TorchRL).
        experiment_name: the run name.

    Keyword Args:
        state_dict: a saved :meth:`Logger.state_dict` to resume from (CSV, TensorBoard and
            W&B): its directory and name replace ``logger_name`` / ``experiment_name``, its
            counters are restored, and a W&B logger resumes the saved run
            (``id=<saved id>, resume="must"``).
        service_backend: where the logger runs: ``"direct"`` (default, in the calling
            process), ``"process"`` (a :class:`ProcessLogger` that builds the logger in a
            process of its own) or ``"ray"`` (a :class:`RayLogger`: in a Ray actor); hand
            ``logger.client()`` to other processes.
        service_backend_options: options of the ``"process"`` service: ``context`` (or
            ``mp_context``), ``max_queue_size``, ``startup_timeout``; of the ``"ray"``
            service: ``actor_options``, ``ray_init_config`` (none apply to ``"direct"``:
            giving any raises ``ValueError``).
        use_ray_service: TorchRL's deprecated spelling of ``service_backend="ray"``.
        ray_actor_options: TorchRL's deprecated spelling of the Ray service's
            ``actor_options``.
        **kwargs: ``wandb_kwargs`` / ``mlflow_kwargs`` for those back-ends, ``video_format``
            (``"mp4"`` here, as TorchRL's factory) / ``video_fps`` for the CSV logger.

    Raises:
        ValueError: unknown ``logger_type`` or ``service_backend``; service options with the
            ``"direct"`` back-end; a W&B state without a run id.
        NotImplementedError: a ``state_dict`` for an MLflow logger (as TorchRL).
        ImportError: the back-end is not installed (naming the extra).

    Examples:
        >>> import tempfile
        >>> get_logger("csv", tempfile.mkdtemp(), "run")
        CSVLogger(...)
        >>> get_logger("", "logs", "run") is None
        True
    """
    if logger_type not in ("", None, *_KINDS):
        raise ValueError(
            f"unknown logger_type {logger_type!r}; expected one of {', '.join(_KINDS)} or ''"
        )
    backend, options = service_backend_options_for(
        service_backend, service_backend_options, use_ray_service, ray_actor_options
    )
    if logger_type in ("", None):
        return None
    if state_dict is not None:
        if logger_type not in ("csv", "tensorboard", "wandb"):
            raise NotImplementedError(
                f"resuming from a state_dict is not supported for logger_type={logger_type!r}"
            )
        logger_name = state_dict["log_dir"]
        experiment_name = state_dict["exp_name"]
    if logger_type == "csv":
        from ._csv import CSVLogger

        cls: type[Logger] = CSVLogger
        args: tuple = (experiment_name,)
        cls_kwargs = {"log_dir": logger_name, "video_format": "mp4", **kwargs}
    elif logger_type == "tensorboard":
        from ._tensorboard import TensorboardLogger

        cls, args, cls_kwargs = TensorboardLogger, (experiment_name,), {"log_dir": logger_name}
    elif logger_type == "wandb":
        from ._wandb import WandbLogger

        wandb_kwargs = dict(kwargs.get("wandb_kwargs", {}))
        if state_dict is not None:
            run_id = state_dict.get("id") or state_dict.get("local", {}).get("id")
            if not run_id:
                raise ValueError("the saved W&B logger state has no run id")
            wandb_kwargs.update(id=run_id, resume="must")
        cls, args = WandbLogger, (experiment_name,)
        cls_kwargs = {"save_dir": logger_name, **wandb_kwargs}
    else:
        from ._mlflow import MLFlowLogger, _is_local

        uri = os.fspath(logger_name)
        if _is_local(uri) and not uri.startswith("file:"):
            uri = Path(os.path.abspath(uri)).as_uri()
        cls, args = MLFlowLogger, (experiment_name,)
        cls_kwargs = {"tracking_uri": uri, **kwargs.get("mlflow_kwargs", {})}
    logger: Logger = cls(
        *args, service_backend=backend, service_backend_options=options, **cls_kwargs
    )
    if state_dict is not None:
        logger.load_state_dict(state_dict)
    return logger
