"""TorchRL's ``torchrl.trainers.helpers.collectors`` path.

The collector builders and their config dataclasses: the objects of
:mod:`rl.core.trainers.helpers`, re-exported so that
``from torchrl.trainers.helpers.collectors import ...`` carries over.
"""

from ._collectors import *  # noqa: F403
from ._collectors import __all__  # noqa: F401
