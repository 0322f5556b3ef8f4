"""TorchRL's ``torchrl.trainers.helpers.models`` path.

The DQN actor and Dreamer builders and the model config dataclasses: the objects of
:mod:`rl.core.trainers.helpers`, re-exported so that
``from torchrl.trainers.helpers.models import ...`` carries over.
"""

from ._models import *  # noqa: F403
from ._models import __all__  # noqa: F401
