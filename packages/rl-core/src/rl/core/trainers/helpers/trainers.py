"""TorchRL's ``torchrl.trainers.helpers.trainers`` path.

Make_trainer and TrainerConfig: the objects of :mod:`rl.core.trainers.helpers`, re-
exported so that ``from torchrl.trainers.helpers.trainers import ...`` carries over.
"""

from ._trainers import *  # noqa: F403
from ._trainers import __all__  # noqa: F401
