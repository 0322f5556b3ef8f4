"""Loggers with one interface (``torchrl.record.loggers`` in TorchRL).

``CSVLogger`` needs nothing beyond rl-core; the other back-ends are extras imported only
when a logger of that kind is built: ``rl-core[tensorboard]``, ``rl-core[wandb]``,
``rl-core[mlflow]`` (and ``rl-core[video]`` for mp4 / GIF videos); :class:`RayLogger` needs
``rl-core[ray]``.
"""

from ._csv import CSVLogger
from ._logger import Logger
from ._mlflow import MLFlowLogger
from ._monitor import Every, LoggerMonitor
from ._process import ProcessLogger
from ._ray import RayLogger
from ._tensorboard import TensorboardLogger
from ._utils import generate_exp_name, get_logger
from ._wandb import WandbLogger

__all__ = [
    "CSVLogger",
    "Every",
    "Logger",
    "LoggerMonitor",
    "MLFlowLogger",
    "ProcessLogger",
    "RayLogger",
    "TensorboardLogger",
    "WandbLogger",
    "generate_exp_name",
    "get_logger",
]
