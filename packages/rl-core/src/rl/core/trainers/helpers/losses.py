"""TorchRL's ``torchrl.trainers.helpers.losses`` path.

The DQN loss and target-updater builders and the loss config dataclasses: the objects of
:mod:`rl.core.trainers.helpers`, re-exported so that
``from torchrl.trainers.helpers.losses import ...`` carries over.
"""

from ._losses import *  # noqa: F403
from ._losses import __all__  # noqa: F401
