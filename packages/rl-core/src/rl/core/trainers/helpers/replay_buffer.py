"""TorchRL's ``torchrl.trainers.helpers.replay_buffer`` path.

Make_replay_buffer and ReplayArgsConfig: the objects of :mod:`rl.core.trainers.helpers`,
re-exported so that ``from torchrl.trainers.helpers.replay_buffer import ...`` carries
over.
"""

from ._replay_buffer import *  # noqa: F403
from ._replay_buffer import __all__  # noqa: F401
