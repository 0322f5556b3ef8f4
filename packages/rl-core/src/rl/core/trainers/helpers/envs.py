"""TorchRL's ``torchrl.trainers.helpers.envs`` path.

The environment builders, the observation-norm helpers and ``EnvConfig``: the objects of
:mod:`rl.core.trainers.helpers`, re-exported so that
``from torchrl.trainers.helpers.envs import ...`` carries over.
"""

from ._envs import *  # noqa: F403
from ._envs import __all__  # noqa: F401
