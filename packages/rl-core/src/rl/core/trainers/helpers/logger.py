"""TorchRL's ``torchrl.trainers.helpers.logger`` path.

``LoggerConfig``: the objects of :mod:`rl.core.trainers.helpers`, re-exported so that
``from torchrl.trainers.helpers.logger import ...`` carries over.
"""

from ._logger import *  # noqa: F403
from ._logger import __all__  # noqa: F401
