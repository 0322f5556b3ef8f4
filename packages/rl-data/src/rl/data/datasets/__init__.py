"""rl.data.datasets: offline datasets as read-only replay buffers, and their registry.

:class:`MinariExperienceReplay` reads `Minari <https://minari.farama.org/>`_ datasets
(``pip install "rl-data[minari]"``; minari itself is imported only when a dataset is
converted). :class:`LeRobotExperienceReplay` reads a LeRobot dataset folder already on this
machine (``pip install "rl-data[lerobot]"``). TorchRL's download-only datasets (D4RL, OpenX, Atari DQN, ...) are not provided:
their registry prefixes raise ``NotImplementedError`` naming the dataset.
"""

from rl.data.datasets._dataset import BaseDatasetExperienceReplay
from rl.data.datasets._lerobot import lerobot_columns_to_tensordict
from rl.data.datasets._lerobot_replay import LeRobotExperienceReplay
from rl.data.datasets._minari import MinariExperienceReplay
from rl.data.datasets._registry import load_dataset, register_dataset

__all__ = [
    "BaseDatasetExperienceReplay",
    "LeRobotExperienceReplay",
    "MinariExperienceReplay",
    "lerobot_columns_to_tensordict",
    "load_dataset",
    "register_dataset",
]
